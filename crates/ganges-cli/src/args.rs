//! The command line's arguments: one struct or enum per command, with its help and checks.
//! `main.rs` dispatches them.

use clap::{Args, Parser, Subcommand};
use ganges_bench::scan::{Access, FaultWindow, LayoutChoice, Ratio};
use ganges_cli::error::{CliError, CliResult, fail};
use ganges_client::cluster::default_cluster_path;
use ganges_core::array::{AllocKind, DType, Dist};
use ganges_core::ceft::CeftThresholds;
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::fault::FaultLayout;
use ganges_core::route::ceft::CeftSettings;
use ganges_core::route::{PlanSettings, PolicySettings, PrimarySettings, RateSettings, ReadPolicyKind};
use ganges_core::sched::SchedulerKind;
use ganges_core::units::{ByteSize, Dur, Rate};
use ganges_core::write::WritePolicyKind;
use std::path::PathBuf;
use std::str::FromStr;

#[derive(Parser, Debug)]
#[command(
    name = "ganges",
    version,
    about = "ganges: a performance-robust parallel I/O runtime for clusters",
    long_about = "ganges keeps parallel scans at the speed of the aggregate when some disks are slow: \
                  datasets are replicated, and every read adapts at run time (graduated declustering). \
                  Every benchmark is reported against the best the hardware could have done.",
    after_help = "Start here:\n  ganges demo                      a local cluster, a dataset, and policies compared under slow disks\n  ganges local up --nodes 8        a cluster on this machine for the other commands\n\nLogs go to stderr; set RUST_LOG=debug for more."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct ClusterArg {
    /// The cluster file [default: $GANGES_CLUSTER, else the default local cluster's]
    #[arg(long, value_name = "FILE")]
    pub(crate) cluster: Option<PathBuf>,
}

impl ClusterArg {
    pub(crate) fn path(&self) -> PathBuf {
        self.cluster.clone().unwrap_or_else(default_cluster_path)
    }
}

/// What the live views poll, and how often.
#[derive(Args, Debug, Clone)]
pub(crate) struct LiveArgs {
    /// How often to ask the servers
    #[arg(long, default_value = "250ms")]
    pub(crate) interval: Dur,
    #[command(flatten)]
    pub(crate) cluster: ClusterArg,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Run a storage server (one per disk)
    #[command(after_help = "Example:\n  ganges serve --node 0 --data-dir /data/ganges --disk-rate 32MiB/s --seek 4ms")]
    Serve(ServeArgs),
    /// Start, inspect and stop a cluster of servers on this machine
    Local {
        #[command(subcommand)]
        cmd: LocalCmd,
    },
    /// Set up a cluster of your own machines, and see how it is doing
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Create, import, export, list, check and remove datasets
    Dataset {
        #[command(subcommand)]
        cmd: DatasetCmd,
    },
    /// N-dimensional arrays: collective writes that follow the disks, reads into any layout
    Array {
        #[command(subcommand)]
        cmd: ArrayCmd,
    },
    /// Write a dataset from many writers at once; blocks go where the write policy sends them
    #[command(
        after_help = "Examples:\n  ganges write events --writers 8 --size 1GiB --policy gd\n  ganges write logs --from ./logs.bin --writers 4 --policy static\n  ganges write draft --size 256MiB --no-complete   (then: ganges dataset complete draft)\n  ganges write frames --size 1GiB --policy ceft-adaptive   (mirrored pairs, load-aware)"
    )]
    Write(WriteArgs),
    /// River's query primitives on record datasets: scan, generate, filter, top-N, join, sort
    #[command(
        after_help = "Examples:\n  ganges run generate recs --size 1GiB\n  ganges run sort recs sorted --check\n  ganges run filter recs few --keep 0.1 --static\n  ganges run topn recs --n 10"
    )]
    Run {
        #[command(subcommand)]
        cmd: RunCmd,
    },
    /// One worker of a `ganges run` started by a launcher: each rank is a worker
    #[command(
        after_help = "Examples:\n  mpirun -n 8 ganges worker sort recs sorted\n  srun -n 16 ganges worker filter recs few --keep 0.1"
    )]
    Worker {
        #[command(subcommand)]
        cmd: RunCmd,
    },
    /// Read a whole dataset, one consumer per fragment, and check every byte arrived once
    #[command(after_help = "Example:\n  ganges scan events --policy gd")]
    Scan {
        /// Dataset name
        name: String,
        /// Read policy: static, gd, gd-rel, gd-batch, gd-share, gd-pc, gd-pc-shrink, gd-rr,
        /// gd-rr-handoff, gd-plan or mirror (the README's "Read policies" says what each does)
        #[arg(long, default_value = "gd")]
        policy: ReadPolicyKind,
        /// Requests in flight per consumer [default: 6 for gd, gd-rel, gd-batch and gd-share; 6 MiB
        /// of blocks for gd-plan; 4 for the others]
        #[arg(long)]
        window: Option<u32>,
        /// Draw each consumer's progress over time to FILE (.svg or .png), with the ideal
        /// and every fault change during the scan
        #[arg(long, value_name = "FILE")]
        plot_progress: Option<PathBuf>,
        /// Serve this client's metrics for Prometheus here while it reads (e.g. 127.0.0.1:9471)
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<String>,
        #[command(flatten)]
        settings: PolicyArgs,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// A live page of the cluster in the browser: per-server rates and queues, each scan's
    /// consumers against the ideal, buttons to set and clear faults
    #[command(
        after_help = "Examples:\n  ganges dashboard                          (then open the address it prints)\n  ganges dashboard --listen 0.0.0.0:8090    (no authentication: anyone who reaches it can set faults)"
    )]
    Dashboard {
        /// Where to serve the page
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: String,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// The live view in the terminal: servers, each scan's consumers against the ideal
    #[command(after_help = "Example:\n  ganges top    (q quits)")]
    Top {
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Slow down (or restore) servers' modelled disks at run time
    Fault {
        #[command(subcommand)]
        cmd: FaultCmd,
    },
    /// Print the ideal models (MOD-1, MOD-2) for a scenario
    Model {
        #[command(subcommand)]
        cmd: ModelCmd,
    },
    /// Benchmarks, measured against the ideal
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
    /// Simulate a paper scenario in virtual time, with the servers' and clients' own policies
    #[command(
        after_help = "Examples:\n  ganges sim --list\n  ganges sim river-fig10 --json fig10.json --plot fig10.svg\n  ganges sim river-fig9 --faults 0,4,8 --consumer-rate 10MB/s\n  ganges sim river-fig10 --producers 4096 --consumers 4096"
    )]
    Sim(SimArgs),
    /// A local cluster, a replicated dataset, and the static policy against graduated
    /// declustering under 0, 1, 2, 4 and 8 slow disks
    #[command(after_help = "Example:\n  ganges demo --out ganges-demo")]
    Demo(DemoArgs),
    /// Load one node of a local cluster until killed (`bench write --stress` starts these)
    #[command(hide = true)]
    Stress(StressArgs),
    /// A competing reader on a server's disk (`fault set --competing-reader` starts these)
    #[command(hide = true)]
    Compete {
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        share: f64,
        /// The server's pid: the reader dies with it
        #[arg(long)]
        parent: u32,
        /// The server's throttle group, to share its cap
        #[arg(long)]
        cgroup: Option<PathBuf>,
        /// Read at this many bytes per second instead of a share of the rate measured alone
        #[arg(long)]
        rate: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ClusterCmd {
    /// Write a cluster file (and a new cluster secret, and with --tls a CA and a certificate
    /// per server) for servers on the given hosts
    #[command(
        after_help = "Examples:\n  ganges cluster init --hosts node0:7070,node1:7070,node2:7070 --data-dir /data/ganges\n  ganges cluster init --hosts 10.0.0.1:7070,10.0.0.2:7070 --tls --out /etc/ganges/cluster.toml\n\nThen on each machine K: ganges serve --cluster cluster.toml --node K"
    )]
    Init {
        /// The servers' addresses (host:port), node 0 first
        #[arg(long, value_delimiter = ',', required = true)]
        hosts: Vec<String>,
        /// Where to write the cluster file
        #[arg(long, default_value = "cluster.toml")]
        out: PathBuf,
        /// The secret file [default: `secret` beside the cluster file]; an existing one is kept
        #[arg(long)]
        secret_file: Option<PathBuf>,
        /// Each server's data directory, recorded in the cluster file
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Each server listens on every address at its port (0.0.0.0), not only on its host's
        #[arg(long)]
        listen_any: bool,
        /// Also make a CA and a certificate per server (in `tls/` beside the cluster file),
        /// and encrypt every connection
        #[arg(long)]
        tls: bool,
    },
    /// Show each server of a cluster: address, state, security, datasets, faults, load
    #[command(after_help = "Example:\n  ganges cluster status --cluster /etc/ganges/cluster.toml")]
    Status {
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

#[derive(Args, Debug)]
pub(crate) struct StressArgs {
    /// cpu, memory or network (a disk stress is a competing stream on the server's disk model)
    pub(crate) kind: ganges_harness::stress::StressKind,
    /// The node's cgroup-v1 group
    #[arg(long)]
    pub(crate) cgroup: String,
    /// cpu: busy threads
    #[arg(long, default_value_t = ganges_harness::stress::CPU_THREADS)]
    pub(crate) threads: u32,
    /// memory: the node's memory
    #[arg(long, default_value = "1GiB")]
    pub(crate) node_memory: ByteSize,
    /// memory: what to leave free on the node
    #[arg(long, default_value = "16MiB")]
    pub(crate) leave: ByteSize,
    /// network: the server whose link to load (host:port)
    #[arg(long)]
    pub(crate) target: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// This server's node number in the cluster
    #[arg(long)]
    pub(crate) node: u32,
    /// Where this server keeps its datasets [default: the cluster file's data_dir of this node]
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port); an address that is not loopback needs
    /// a cluster secret [default: the cluster file's listen, else addr, of this node; else
    /// 127.0.0.1:0]
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) listen: Option<String>,
    #[command(flatten)]
    pub(crate) disk: DiskArgs,
    /// The cluster file: this server's address, data directory, secret and certificates, and
    /// the other servers (for request handoff)
    #[arg(long, value_name = "FILE")]
    pub(crate) cluster: Option<PathBuf>,
    /// The cluster secret [default: $GANGES_SECRET_FILE, else the cluster file's]
    #[arg(long, value_name = "FILE")]
    pub(crate) secret_file: Option<PathBuf>,
    /// TLS: this server's certificate (PEM) [default: the cluster file's cert_dir/node-K.pem]
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub(crate) tls_cert: Option<PathBuf>,
    /// TLS: this server's private key (PEM)
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_key: Option<PathBuf>,
    /// TLS: the cluster's CA, trusted when this server connects to others
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Read and write data with direct I/O (O_DIRECT), so the page cache does not hide the disk
    #[arg(long)]
    pub(crate) direct_io: bool,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free port;
    /// `ganges cluster status` shows where)
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
    /// How long a write's client may leave it unfinished before this server finishes or
    /// rolls it back by the commit rule (docs/design.md)
    #[arg(long, default_value = "10min", value_name = "DURATION")]
    pub(crate) txn_timeout: Dur,
    /// Most connections open at once; past it new ones are refused with a typed error
    #[arg(long, default_value_t = ganges_server::MAX_CONNECTIONS_DEFAULT, value_name = "N")]
    pub(crate) max_connections: usize,
    /// Server-side scheduler: auto (each request's own discipline) or fifo
    #[arg(long, default_value = "auto")]
    pub(crate) scheduler: SchedulerKind,
    /// This server's node is this cgroup-v1 group (joined, created if absent), not the whole
    /// machine: the CPU, load and memory it reports to load-aware writers (CW-1) are the
    /// group's. For several nodes on one machine.
    #[arg(long, value_name = "GROUP")]
    pub(crate) node_cgroup: Option<String>,
    /// The node's link rate, received plus sent, for the free network it reports (CW-1)
    #[arg(long, default_value = "1250MB/s", value_name = "RATE")]
    pub(crate) net_rate: Rate,
    /// The node's memory, for the free memory it reports (CW-1) [default: its cgroup's
    /// limit, else the machine's]
    #[arg(long, value_name = "SIZE")]
    pub(crate) node_memory: Option<ByteSize>,
    /// Model the node's link at --net-rate: every frame in and out waits its turn on it (for
    /// several nodes on one machine, which share loopback)
    #[arg(long)]
    pub(crate) model_link: bool,
}

/// A disk rate, or `off` for the real file system with no model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DiskRate(pub(crate) Option<f64>);

impl FromStr for DiskRate {
    type Err = ganges_core::units::UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "off" {
            return Ok(DiskRate(None));
        }
        s.parse::<Rate>().map(|r| DiskRate(Some(r.0)))
    }
}

#[derive(Args, Debug, Clone)]
pub(crate) struct DiskArgs {
    /// Disk model bandwidth (e.g. 32MiB/s), or `off` to read the real file system unthrottled
    #[arg(long, default_value = "off", value_name = "RATE|off")]
    pub(crate) disk_rate: DiskRate,
    /// Disk model seek cost, paid when switching between files
    #[arg(long, default_value = "4ms")]
    pub(crate) seek: Dur,
    /// Requests the server hands its disk at once [default: 1 with a disk model, 2 on the
    /// real disk]
    #[arg(long)]
    pub(crate) queue_depth: Option<u32>,
}

impl DiskArgs {
    pub(crate) fn spec(&self) -> CliResult<Option<DiskParams>> {
        let depth = self.queue_depth.unwrap_or(1);
        if depth == 0 || depth > 64 {
            return fail("--queue-depth must be between 1 and 64");
        }
        Ok(self.disk_rate.0.map(|rate| DiskParams { rate_bytes_per_sec: rate, seek: self.seek.0, queue_depth: depth }))
    }

    /// Requests the real disk (no model) is given at once.
    pub(crate) fn real_depth(&self) -> u32 {
        self.queue_depth.unwrap_or(ganges_server::REAL_QUEUE_DEPTH).clamp(1, 64)
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum LocalCmd {
    /// Start N servers on 127.0.0.1 and write the cluster file other commands use
    #[command(after_help = "Example:\n  ganges local up --nodes 8 --disk-rate 32MiB/s --seek 4ms")]
    Up(LocalUpArgs),
    /// Show each server of the cluster: address, state, datasets, fault
    #[command(after_help = "Example:\n  ganges local status")]
    Status {
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Start one server again on its data directory and address, as after a crash (it
    /// cleans its unfinished writes' leftovers and serves its datasets again)
    #[command(after_help = "Example:\n  ganges local restart --node 2")]
    Restart {
        #[arg(long)]
        node: u32,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Stop the local cluster
    #[command(after_help = "Example:\n  ganges local down --cluster /tmp/ganges-alice/local/cluster.toml")]
    Down {
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// (internal) the process that owns a `local up` cluster
    #[command(hide = true)]
    Supervise(LocalUpArgs),
}

#[derive(Args, Debug, Clone)]
pub(crate) struct LocalUpArgs {
    /// Number of servers
    #[arg(long, default_value_t = 8)]
    pub(crate) nodes: u32,
    #[command(flatten)]
    pub(crate) disk: LocalDiskArgs,
    /// Folder for data directories, logs and the cluster file [default: a per-user temp folder]
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    /// Stay in the foreground; Ctrl-C stops the cluster
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Each server in a network namespace of its own, with its own address on a bridge, so
    /// traffic crosses a real (virtual) network and `fault set --link-rate` can slow one
    /// server's link (needs root; the cluster gets a secret)
    #[arg(long)]
    pub(crate) netns: bool,
    /// Servers read and write with direct I/O (needs a data folder on a disk, not a tmpfs)
    #[arg(long)]
    pub(crate) direct_io: bool,
    /// Give the cluster a secret even on loopback (every connection proves it)
    #[arg(long)]
    pub(crate) secret: bool,
    /// Encrypt every connection with TLS (a CA and a certificate per server, made for the
    /// cluster; implies --secret)
    #[arg(long)]
    pub(crate) tls: bool,
    /// Each server serves Prometheus metrics on a free port (`ganges cluster status` lists them)
    #[arg(long)]
    pub(crate) metrics: bool,
}

impl LocalUpArgs {
    /// The flags a detached supervisor is started with, for the same cluster.
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut args = self.disk.to_args();
        for (on, flag) in [
            (self.netns, "--netns"),
            (self.direct_io, "--direct-io"),
            (self.secret, "--secret"),
            (self.tls, "--tls"),
            (self.metrics, "--metrics"),
        ] {
            if on {
                args.push(flag.into());
            }
        }
        args
    }
}

/// Like `DiskArgs`, but local clusters model a disk by default.
#[derive(Args, Debug, Clone)]
pub(crate) struct LocalDiskArgs {
    /// Disk model bandwidth per server, or `off` for the real file system
    #[arg(long, default_value = "32MiB/s", value_name = "RATE|off")]
    pub(crate) disk_rate: DiskRate,
    /// Disk model seek cost
    #[arg(long, default_value = "4ms")]
    pub(crate) seek: Dur,
    /// Requests each server hands its disk at once
    #[arg(long, default_value_t = 1)]
    pub(crate) queue_depth: u32,
}

impl LocalDiskArgs {
    pub(crate) fn spec(&self) -> CliResult<Option<DiskParams>> {
        DiskArgs { disk_rate: self.disk_rate, seek: self.seek, queue_depth: Some(self.queue_depth) }.spec()
    }
    pub(crate) fn to_args(&self) -> Vec<String> {
        vec![
            "--disk-rate".into(),
            match self.disk_rate.0 {
                Some(r) => format!("{}B/s", r.round() as u64),
                None => "off".into(),
            },
            "--seek".into(),
            format!("{}us", self.seek.0.as_micros()),
            "--queue-depth".into(),
            self.queue_depth.to_string(),
        ]
    }
}

/// A memory or disk layout on the command line: a mesh and a distribution per dimension.
#[derive(Args, Debug, Clone)]
pub(crate) struct MemoryLayoutArgs {
    /// Processes along each dimension (or along each distributed one) [default: one process]
    #[arg(long, value_delimiter = ',', value_name = "N,N,..")]
    pub(crate) memory_mesh: Option<Vec<u32>>,
    /// BLOCK, CYCLIC(k) or * per dimension [default: BLOCK along every dimension the mesh cuts]
    #[arg(long, value_delimiter = ',', value_name = "DIST,..")]
    pub(crate) memory_dist: Option<Vec<Dist>>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ArrayCmd {
    /// Write an array from many processes at once (run here as tasks): the servers gather
    /// each subchunk from the processes holding it and write where the allocation says
    #[command(
        after_help = "Examples:\n  ganges array write cube --shape 512,512,512 --dtype f32 --memory-mesh 2,2,2 --memory-dist BLOCK,BLOCK,BLOCK --disk-mesh 8 --disk-dist BLOCK,*,* --alloc dynamic\n  ganges array write field --shape 4096,4096 --dtype f64 --from field.bin"
    )]
    Write(Box<ArrayWriteArgs>),
    /// Read an array into a memory layout (any, whatever wrote it), checking generated
    /// elements, optionally to a file in row-major order
    #[command(
        after_help = "Examples:\n  ganges array read cube --memory-mesh 4 --memory-dist BLOCK,*,*\n  ganges array read field --to field.copy"
    )]
    Read {
        name: String,
        #[command(flatten)]
        memory: MemoryLayoutArgs,
        /// Read policy, by the names `ganges scan --policy` takes (with one copy, all read alike)
        #[arg(long, default_value_t = ganges_client::array::ARRAY_READ_POLICY)]
        policy: ReadPolicyKind,
        /// Write the whole array here, row-major
        #[arg(long, value_name = "FILE")]
        to: Option<PathBuf>,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// An array's schema, layout, and where its subchunks are
    #[command(after_help = "Example:\n  ganges array info cube")]
    Info {
        name: String,
        /// Print the manifest's array part (every subchunk's place) as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Write an array as a Zarr v3 array (a new folder) that zarr-python, TensorStore and
    /// other Zarr readers open
    #[command(
        after_help = "Example:\n  ganges array export cube ./cube.zarr\n  python3 -c 'import zarr; print(zarr.open_array(\"cube.zarr\")[0, 0, :4])'"
    )]
    Export {
        name: String,
        /// The folder to create
        dir: PathBuf,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Remove an array
    #[command(after_help = "Example:\n  ganges array rm cube")]
    Rm {
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

#[derive(Args, Debug)]
pub(crate) struct ArrayWriteArgs {
    pub(crate) name: String,
    /// Extent of each dimension (1 to 8 of them)
    #[arg(long, value_delimiter = ',', required = true, value_name = "N,N,..")]
    pub(crate) shape: Vec<u64>,
    /// Element type: u8, i8, u16, i16, u32, i32, f32, u64, i64 or f64
    #[arg(long, default_value = "f32")]
    pub(crate) dtype: DType,
    #[command(flatten)]
    pub(crate) memory: MemoryLayoutArgs,
    /// Logical I/O nodes along each (distributed) dimension of the disk layout [default: one
    /// per server along the first]
    #[arg(long, value_delimiter = ',', value_name = "N,N,..")]
    pub(crate) disk_mesh: Option<Vec<u32>>,
    /// BLOCK or * per dimension of the disk layout [default: BLOCK,*,..,* (row-major order)]
    #[arg(long, value_delimiter = ',', value_name = "DIST,..")]
    pub(crate) disk_dist: Option<Vec<Dist>>,
    /// Which server writes each subchunk: round-robin, static (by measured speed) or dynamic
    /// (a manager hands out work as servers ask)
    #[arg(long, default_value = "dynamic")]
    pub(crate) alloc: AllocKind,
    /// Largest subchunk
    #[arg(long, default_value = "1MiB")]
    pub(crate) subchunk: ByteSize,
    /// Copies of every subchunk, on the next servers round the ring; reads then take
    /// graduated declustering's way round a slow server
    #[arg(long, default_value_t = 1)]
    pub(crate) replicas: u32,
    /// Cut chunks along their first dimension only, (BLOCK,*,..,*), so a chunk's subchunks
    /// concatenate to it
    #[arg(long)]
    pub(crate) first_dim_subchunks: bool,
    /// The array's bytes, row-major, instead of generated elements (each its own index)
    #[arg(long, value_name = "FILE")]
    pub(crate) from: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) cluster: ClusterArg,
}

#[derive(Subcommand, Debug)]
pub(crate) enum DatasetCmd {
    /// Create a dataset whose data the servers generate (random bytes or 100-byte records)
    #[command(
        after_help = "Examples:\n  ganges dataset create events --size 1GiB --replicas 2\n  ganges dataset create sortme --fragment-size 64MiB --format records\n  ganges dataset create skewed --fragment-sizes 10MiB,30MiB,10MiB,30MiB\n  ganges dataset create halves --size 1GiB --layout mirrored"
    )]
    Create(DatasetCreateArgs),
    /// Import a local file as a dataset
    #[command(after_help = "Example:\n  ganges dataset put logs ./logs.bin --replicas 2")]
    Put {
        name: String,
        file: PathBuf,
        /// Fragments [default: one per server]
        #[arg(long)]
        fragments: Option<u32>,
        #[arg(long, default_value_t = 2)]
        replicas: u32,
        #[arg(long, default_value = "1MiB")]
        block_size: ByteSize,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Export a dataset to a local file, in order, checked against its digest; every
    /// fragment is read at once, each block written at its place
    #[command(
        after_help = "Examples:\n  ganges dataset get logs ./logs.copy\n  ganges dataset get logs ./logs.copy --policy gd-plan"
    )]
    Get {
        /// Dataset name
        name: String,
        /// The local file to write (replaced only once every byte is in and checked); a
        /// folder: a file of the dataset's name in it
        file: PathBuf,
        /// Read policy, by the names `ganges scan --policy` takes
        #[arg(long, default_value = "gd")]
        policy: ReadPolicyKind,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Write a byte range of a dataset in order to stdout (or a file): the ordered stream,
    /// for pipes; blocks are checked as they arrive, and memory stays within the reorder
    /// buffer. A dataset written through a distributed queue reads in its writers' order,
    /// from every server at once; any other reads every fragment the buffer reaches at once
    /// (more with a larger `--buffer-blocks`); `dataset get` copies a whole dataset to a
    /// file faster still, reading every fragment at once
    #[command(
        after_help = "Examples:\n  ganges dataset read events --offset 512MiB --len 4MiB | xxd | head\n  ganges dataset read events --offset 1GiB --len 64MiB --policy gd-plan --out part.bin"
    )]
    Read {
        /// Dataset name
        name: String,
        /// First byte (of a dataset written through a distributed queue: of the data as its
        /// writers wrote it, which is the order it is read in, as `dataset get` exports it)
        #[arg(long, default_value = "0")]
        offset: ByteSize,
        /// Bytes to read [default: to the end of the dataset]
        #[arg(long)]
        len: Option<ByteSize>,
        /// Read policy, by the names `ganges scan --policy` takes
        #[arg(long, default_value = "gd")]
        policy: ReadPolicyKind,
        /// Blocks read ahead and not yet written out, at most (the reorder buffer; the more,
        /// the more fragments are read at once) [default: 64 MiB of blocks]
        #[arg(long)]
        buffer_blocks: Option<u32>,
        /// Write to this file instead of stdout
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// List datasets
    #[command(after_help = "Example:\n  ganges dataset ls --staging")]
    Ls {
        /// Also list unfinished writes (staging folders)
        #[arg(long)]
        staging: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Show a dataset's manifest and where each fragment copy is
    #[command(after_help = "Example:\n  ganges dataset info events")]
    Info {
        name: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Fill every copy of a dataset written with a choice of copy (replica completion, GW-2)
    #[command(after_help = "Example:\n  ganges dataset complete events")]
    Complete {
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Check every block of every copy against its checksum
    #[command(after_help = "Example:\n  ganges dataset verify events")]
    Verify {
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Restore full replication: give servers that were down during a write their copies,
    /// and fill every incomplete copy (the same as `complete`)
    #[command(after_help = "Example:\n  ganges dataset repair events")]
    Repair {
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Check every copy, and rewrite each block that fails its checksum from a good copy
    #[command(after_help = "Examples:\n  ganges dataset scrub events\n  ganges dataset scrub --all")]
    Scrub {
        names: Vec<String>,
        /// Every dataset of the cluster
        #[arg(long, conflicts_with = "names")]
        all: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Remove a dataset (and any unfinished write of that name)
    #[command(after_help = "Example:\n  ganges dataset rm events")]
    Rm {
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

#[derive(Args, Debug)]
pub(crate) struct WriteArgs {
    /// Dataset name
    pub(crate) name: String,
    /// Writers, each writing its own fragment [default: one per server]
    #[arg(long)]
    pub(crate) writers: Option<u32>,
    /// Write policy: static (each block to its fragment's primary copy), gd (primary or
    /// backup copy, whichever keeps the writers balanced; GW-1), dq (any server, by a
    /// distributed queue; one copy; DQ-1), ceft (the node of each mirror pair that CEFT-PVFS's
    /// rule picks from the nodes' load; CW-1) or ceft-adaptive (the node of the pair that would
    /// finish the block first, by measured rates)
    #[arg(long, default_value = "gd")]
    pub(crate) policy: WritePolicyKind,
    /// Total size of generated data
    #[arg(long, conflicts_with = "from", required_unless_present = "from")]
    pub(crate) size: Option<ByteSize>,
    /// Write this local file instead of generated data, split among the writers in order
    #[arg(long, value_name = "FILE")]
    pub(crate) from: Option<PathBuf>,
    /// Copies of each fragment (chained declustering; 1 to 4) [default: 2; dq: 1]
    #[arg(long)]
    pub(crate) replicas: Option<u32>,
    #[arg(long, default_value = "1MiB")]
    pub(crate) block_size: ByteSize,
    /// Blocks in flight per writer (static, gd; a dq writer has one per server) [default: 8
    /// for gd, 4 for the others]
    #[arg(long)]
    pub(crate) window: Option<u32>,
    /// Seed of the generated data
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Leave the copies incomplete after the write (readable by placement); fill them later
    /// with `ganges dataset complete NAME`
    #[arg(long)]
    pub(crate) no_complete: bool,
    /// dq: send whole runs of this many consecutive blocks to one server, in order (DQ-3)
    #[arg(long, default_value_t = 1)]
    pub(crate) run_blocks: u32,
    /// Serve this client's metrics for Prometheus here while it writes (e.g. 127.0.0.1:9471)
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
    /// Where the copies live: chained (declustering) or mirrored (two groups, CEFT-PVFS's
    /// RAID-10 arrangement) [default: mirrored for ceft and ceft-adaptive, else chained]
    #[arg(long)]
    pub(crate) layout: Option<LayoutChoice>,
    #[command(flatten)]
    pub(crate) ceft: CeftArgs,
    #[command(flatten)]
    pub(crate) cluster: ClusterArg,
}

#[derive(Args, Debug)]
pub(crate) struct DatasetCreateArgs {
    pub(crate) name: String,
    /// Total size, cut into equal fragments
    #[arg(long, conflicts_with_all = ["fragment_size", "fragment_sizes"])]
    pub(crate) size: Option<ByteSize>,
    /// Size of each fragment [default: 64MiB]
    #[arg(long, conflicts_with = "fragment_sizes")]
    pub(crate) fragment_size: Option<ByteSize>,
    /// Unequal fragments (LAY-4): one size per fragment, comma-separated
    #[arg(long, value_delimiter = ',')]
    pub(crate) fragment_sizes: Option<Vec<ByteSize>>,
    /// Number of fragments [default: one per server]
    #[arg(long)]
    pub(crate) fragments: Option<u32>,
    /// Copies of each fragment (chained declustering; 1 to 4)
    #[arg(long, default_value_t = 2)]
    pub(crate) replicas: u32,
    /// Where copies go: chained (declustering, LAY-1) or mirrored (two groups of half the
    /// servers each, LAY-2; 2 copies)
    #[arg(long, default_value = "chained")]
    pub(crate) layout: LayoutChoice,
    /// Block size: the unit of transfer and checksum (4KiB to 16MiB)
    #[arg(long, default_value = "1MiB")]
    pub(crate) block_size: ByteSize,
    /// Data: random bytes, or 100-byte records with 10-byte keys
    #[arg(long, default_value = "random", value_parser = ["random", "records"])]
    pub(crate) format: String,
    /// Seed of the generated data
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    #[command(flatten)]
    pub(crate) cluster: ClusterArg,
}

#[derive(Subcommand, Debug)]
pub(crate) enum FaultCmd {
    /// Slow down servers at run time: their modelled disk, or for real (the kernel's
    /// block-I/O throttle, a competing reader, a shaped link)
    #[command(
        after_help = "Examples:\n  ganges fault set --node 3 --factor 0.5                 (the disk model)\n  ganges fault set --node 0,8 --competing-share 0.5\n  ganges fault set --node 3 --kernel-read-rate 50MiB/s   (real: the kernel caps the server's reads)\n  ganges fault set --node 3 --competing-reader 0.5       (real: a process reading the same disk)\n  ganges fault set --node 3 --link-rate 40MiB/s          (real: tc on the server's own link; local up --netns)"
    )]
    Set {
        /// Node(s), comma-separated
        #[arg(long, value_delimiter = ',', required = true)]
        node: Vec<u32>,
        /// Disk model: the fraction of its peak the disk still delivers, in (0, 1]
        #[arg(long, conflicts_with = "competing_share")]
        factor: Option<f64>,
        /// Disk model: the share of the disk a modelled competing reader takes, in [0, 1)
        #[arg(long)]
        competing_share: Option<f64>,
        /// Real: the kernel caps the server's reads from its disk at this rate (cgroup blkio
        /// or io.max; give the server --direct-io so the page cache does not hide it)
        #[arg(long, value_name = "RATE")]
        kernel_read_rate: Option<Rate>,
        /// Real: the kernel caps the server's writes to its disk at this rate
        #[arg(long, value_name = "RATE")]
        kernel_write_rate: Option<Rate>,
        /// Real: a process reads another file on the server's disk at this share of the
        /// rate it measures alone, in (0, 1] (1: as fast as it can); the first time, it
        /// writes its 256 MiB file first, and the command returns once it reads
        #[arg(long, value_name = "SHARE")]
        competing_reader: Option<f64>,
        /// Real: tc shapes the server's link to this rate, both ways (its own address only)
        #[arg(long, value_name = "RATE")]
        link_rate: Option<Rate>,
        /// Real: tc delays the server's link by this much each way (needs netem)
        #[arg(long, value_name = "DURATION")]
        link_delay: Option<Dur>,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Remove faults, modelled and real (from every server, or the ones named)
    #[command(after_help = "Example:\n  ganges fault clear")]
    Clear {
        #[arg(long, value_delimiter = ',')]
        node: Option<Vec<u32>>,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Show every server's disk, and the faults in force on it
    #[command(after_help = "Example:\n  ganges fault show")]
    Show {
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ModelCmd {
    /// River's performance-availability spectrum (MOD-1, river §4.1)
    #[command(after_help = "Example:\n  ganges model river --n 16 --u-app 1 --u-fault 0.5")]
    River {
        /// Components
        #[arg(long, default_value_t = 16)]
        n: u32,
        /// Fraction of each component the application uses unperturbed
        #[arg(long, default_value_t = 1.0)]
        u_app: f64,
        /// Fraction of a faulty component the fault takes
        #[arg(long, default_value_t = 0.5)]
        u_fault: f64,
    },
    /// Both ideals of a scan for each fault count (MOD-1 and the layout-aware MOD-2)
    #[command(
        after_help = "Example:\n  ganges model layout --nodes 16 --replicas 2 --faults 0,1,2,4,8 --fault-layout worst"
    )]
    Layout {
        #[arg(long, default_value_t = 16)]
        nodes: u32,
        #[arg(long, default_value_t = 2)]
        replicas: u32,
        #[command(flatten)]
        fault: FaultArgs,
        #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,12,16")]
        faults: Vec<u32>,
        #[arg(long, default_value = "best")]
        fault_layout: FaultLayout,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value = "64MiB")]
        fragment_size: ByteSize,
        #[arg(long, default_value = "32MiB/s")]
        disk_rate: Rate,
    },
}

#[derive(Args, Debug, Clone)]
pub(crate) struct FaultArgs {
    /// A fault leaves this fraction of the disk's rate
    #[arg(long, default_value_t = 0.5, conflicts_with = "competing_share")]
    pub(crate) fault_factor: f64,
    /// Instead: a fault is a competing reader taking this share of the disk
    #[arg(long)]
    pub(crate) competing_share: Option<f64>,
}

impl FaultArgs {
    pub(crate) fn fault(&self) -> Fault {
        match self.competing_share {
            Some(share) => Fault::Competing { share },
            None => Fault::Factor { factor: self.fault_factor },
        }
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum BenchCmd {
    /// Scan a replicated dataset with each policy at each fault count, against both ideals
    #[command(
        after_help = "Examples:\n  ganges bench scan --json scan.json --plot scan.svg\n  ganges bench scan --quick\n  ganges bench scan --nodes 1 --replicas 1 --disk-rate off --faults 0 --policies static --fragment-size 2GiB"
    )]
    Scan(Box<BenchScanArgs>),
    /// Write a dataset from one writer per server with each write policy at each fault
    /// count, against both ideals; then replica completion
    #[command(
        after_help = "Examples:\n  ganges bench write --json write.json --plot write.svg\n  ganges bench write --quick\n  ganges bench write --policies dq --faults 0,4 --repeat 3"
    )]
    Write(Box<BenchWriteArgs>),
    /// Collective array writes (Panda's Figures 4 to 7): round-robin, static and dynamic
    /// allocation with 0 to all servers slow, and a server slow for one call of ten
    #[command(
        after_help = "Examples:\n  ganges bench array --json array.json --plot array.svg\n  ganges bench array --quick\n  ganges bench array --figures iterations --iteration-servers 2,16"
    )]
    Array(Box<BenchArrayArgs>),
    /// River's query primitives (Figure 15): scan, generate, filter, top-N, join and sort,
    /// static and robust, with 0 to all disks slow, against the ideal
    #[command(
        after_help = "Examples:\n  ganges bench apps --json apps.json --plot apps.svg\n  ganges bench apps --quick\n  ganges bench apps --apps sort --slow 0,8 --nodes 8"
    )]
    Apps {
        #[arg(long, default_value_t = 16)]
        nodes: u32,
        /// Input on each disk (100-byte records; two copies)
        #[arg(long, default_value = "64MiB")]
        per_disk: ByteSize,
        #[arg(long, default_value = "32MiB/s")]
        disk_rate: Rate,
        /// Disk model seek cost, paid when switching between files
        #[arg(long, default_value = "4ms")]
        seek: Dur,
        /// Slow disk counts (a slow disk has half the rate) [default: 0,1,2,4,8,16 of 16]
        #[arg(long, value_delimiter = ',')]
        slow: Option<Vec<u32>>,
        /// Which primitives: scan, generate, filter, topn, join, sort [default: all]
        #[arg(long, value_delimiter = ',')]
        apps: Option<Vec<String>>,
        /// Which disks are slow: best (spread out), worst (adjacent), random
        #[arg(long, default_value = "best")]
        fault_layout: FaultLayout,
        /// Runs of each (the median is shown)
        #[arg(long, default_value_t = 1)]
        repeat: u32,
        /// A smaller run: 8 servers, 16 MiB per disk, 0, 1 and 4 slow
        #[arg(long)]
        quick: bool,
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Draw each primitive's fraction of the ideal against slow disks (.svg or .png)
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// What securing connections costs on the data path: plain, the cluster secret, and TLS,
    /// one consumer reading one server from the page cache, in one run
    #[command(after_help = "Example:\n  ganges bench transport --size 1GiB --repeat 5")]
    Transport {
        /// Bytes read from each server per run
        #[arg(long, default_value = "1GiB")]
        size: ByteSize,
        #[arg(long, default_value = "1MiB")]
        block_size: ByteSize,
        /// Runs of each, alternating; the median is reported
        #[arg(long, default_value_t = 3)]
        repeat: u32,
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// What the live dashboard costs: its process's CPU and the frames each page gets, while
    /// every server is scanned over and over by as many consumers
    #[command(after_help = "Example:\n  ganges bench dashboard --nodes 16 --viewers 2 --seconds 20")]
    Dashboard {
        #[arg(long, default_value_t = 16)]
        nodes: u32,
        #[arg(long, default_value = "32MiB/s")]
        disk_rate: Rate,
        #[arg(long, default_value = "64MiB")]
        fragment_size: ByteSize,
        /// Pages connected to the event stream
        #[arg(long, default_value_t = 1)]
        viewers: u32,
        /// How often the dashboard asks the servers
        #[arg(long, default_value = "250ms")]
        interval: Dur,
        /// The measured window
        #[arg(long, default_value_t = 20.0)]
        seconds: f64,
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub(crate) struct BenchArrayArgs {
    /// Which figures: natural (Figure 4), row-major (Figure 5), iterations (Figures 6 and 7),
    /// reads (two copies read back with static, gd and gd-plan, a server slow), part-time
    /// (Figure 4 with the servers inside the writing processes, beside servers of their own)
    #[arg(long, value_delimiter = ',', default_value = "natural,row-major,iterations,reads,part-time")]
    pub(crate) figures: Vec<ArrayFigure>,
    /// Server counts of Figures 4 and 5
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16")]
    pub(crate) servers: Vec<u32>,
    /// Server counts of Figures 6 and 7
    #[arg(long, value_delimiter = ',', default_value = "2,16")]
    pub(crate) iteration_servers: Vec<u32>,
    /// Server counts of the reads
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    pub(crate) read_servers: Vec<u32>,
    /// Read policies of the reads
    #[arg(long, value_delimiter = ',', default_value = "static,gd,gd-plan")]
    pub(crate) read_policies: Vec<ReadPolicyKind>,
    /// Part-time I/O nodes among the 8 writing processes, per run of the part-time figure
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    pub(crate) part_time_servers: Vec<u32>,
    /// The array's shape (f32 elements)
    #[arg(long, value_delimiter = ',', default_value = "512,512,512")]
    pub(crate) shape: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_value = "round-robin,static,dynamic")]
    pub(crate) allocs: Vec<AllocKind>,
    /// Each server's modelled disk bandwidth (a slow one has half)
    #[arg(long, default_value = "32MiB/s")]
    pub(crate) disk_rate: Rate,
    #[arg(long, default_value = "1ms")]
    pub(crate) seek: Dur,
    /// Calls per configuration of Figures 4 and 5, and reads per configuration of the reads (the mean is shown)
    #[arg(long, default_value_t = 2)]
    pub(crate) repeat: u32,
    /// Calls of Figures 6 and 7 (the server is slow in the fifth)
    #[arg(long, default_value_t = 10)]
    pub(crate) iterations: u32,
    /// A smaller run: a 64 MiB array, 2 to 8 servers, one call each
    #[arg(long)]
    pub(crate) quick: bool,
    /// Real disks with direct I/O: every server capped by the kernel at an equal share of what
    /// the disk gives them all at once, a slow one at half of that (root, cgroup blkio)
    #[arg(long)]
    pub(crate) real: bool,
    /// With --real: the cap [default: 0.6 of the servers' mean write rate all at once]
    #[arg(long, requires = "real", value_name = "RATE")]
    pub(crate) disk_cap: Option<Rate>,
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ArrayFigure {
    Natural,
    RowMajor,
    Iterations,
    Reads,
    PartTime,
}

#[derive(Args, Debug)]
pub(crate) struct BenchWriteArgs {
    #[arg(long, default_value_t = 16)]
    pub(crate) nodes: u32,
    /// Copies of a static or gd write (dq keeps one)
    #[arg(long, default_value_t = 2)]
    pub(crate) replicas: u32,
    /// Bytes each writer writes (one writer per server) [default: 64MiB; with --real, enough
    /// for 6 s writes]
    #[arg(long)]
    pub(crate) fragment_size: Option<ByteSize>,
    #[arg(long, default_value = "1MiB")]
    pub(crate) block_size: ByteSize,
    #[command(flatten)]
    pub(crate) disk: LocalDiskArgs,
    #[command(flatten)]
    pub(crate) fault: FaultArgs,
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,12,16")]
    pub(crate) faults: Vec<u32>,
    #[arg(long, default_value = "best")]
    pub(crate) fault_layout: FaultLayout,
    /// Write policies to compare [default: static,gd,dq; with --stress: static,ceft,ceft-adaptive]
    #[arg(long, value_delimiter = ',')]
    pub(crate) policies: Vec<WritePolicyKind>,
    /// Load nodes instead of slowing disks (CEFT-PVFS's experiments): cpu, memory (with a
    /// competing disk stream, as the paper's program), disk or network (a stream to the
    /// server over a modelled link); rows without and with it. Needs root and cgroup v1
    #[arg(long, requires = "on")]
    pub(crate) stress: Option<ganges_harness::stress::StressKind>,
    /// The nodes to stress: one node (e.g. 3), or a mirror pair (e.g. 3,11 of 16 nodes)
    #[arg(long, value_delimiter = ',', requires = "stress")]
    pub(crate) on: Vec<u32>,
    /// Where the copies live: chained or mirrored [default: mirrored with --stress and for
    /// the ceft policies, else chained]
    #[arg(long)]
    pub(crate) layout: Option<LayoutChoice>,
    #[command(flatten)]
    pub(crate) ceft: CeftArgs,
    /// Blocks in flight per static or gd writer [default: 8 for gd, 4 for the others]
    #[arg(long)]
    pub(crate) window: Option<u32>,
    /// Runs of each (policy, faults), alternating; the median is reported
    #[arg(long, default_value_t = 1)]
    pub(crate) repeat: u32,
    /// Skip replica completion after the writes that leave copies incomplete
    #[arg(long)]
    pub(crate) no_complete: bool,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// A small, fast configuration for smoke tests (4 nodes, 4MiB per writer, faults 0,1,2)
    #[arg(long)]
    pub(crate) quick: bool,
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Draw % of ideal against faults (.svg or .png)
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,
    /// Keep the cluster's files here [default: a temporary folder in /dev/shm when it has
    /// room, so the modelled disks are the only disks; else (and with --real) in the temp
    /// folder]
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) real: RealArgs,
}

/// `--real`: real disks with direct I/O and real faults.
#[derive(Args, Debug, Clone)]
pub(crate) struct RealArgs {
    /// Run on the real disks (direct I/O, no model): each server's disk is measured alone and
    /// all at once before the runs, the ideals use those rates, and faults are real (see
    /// --fault-kind); --fault-factor and --competing-share set their severity
    #[arg(long)]
    pub(crate) real: bool,
    /// With --real: kernel (the block-I/O throttle caps a faulty disk at --fault-factor of its
    /// rate), competing (a competing reader takes --competing-share of it) or link (tc shapes
    /// a faulty server's link to --fault-factor of its rate; servers in network namespaces,
    /// needs root)
    #[arg(long, default_value = "kernel", requires = "real")]
    pub(crate) fault_kind: ganges_bench::real::RealFaultKind,
    /// With --real: do not cap every server (servers sharing one disk then take up what a
    /// faulty one leaves)
    #[arg(long, requires = "real", conflicts_with = "disk_cap")]
    pub(crate) no_isolate: bool,
    /// With --real: cap every server's disk at this rate [default: 0.6 of the servers' mean
    /// rate all at once]; below what the machine's CPUs and network can move, so that the
    /// disks are what the policies are measured against
    #[arg(long, requires = "real", value_name = "RATE")]
    pub(crate) disk_cap: Option<Rate>,
}

impl RealArgs {
    pub(crate) fn spec(&self, fault: &FaultArgs, writes: bool) -> Option<ganges_bench::real::RealSpec> {
        self.real.then(|| ganges_bench::real::RealSpec {
            kind: self.fault_kind,
            factor: fault.fault_factor,
            share: fault.competing_share.unwrap_or(0.5),
            isolate: !self.no_isolate,
            cap: self.disk_cap.map(|r| r.0),
            writes,
        })
    }
}

/// The fragment size a bench uses: as given, else 64 MiB on the model, else (0) long enough
/// for 6 s runs at the rates `--real` measures.
pub(crate) fn bench_fragment_bytes(given: Option<ByteSize>, real: bool) -> u64 {
    given.map_or(if real { 0 } else { 64 << 20 }, |b| b.0)
}

#[derive(Args, Debug)]
pub(crate) struct BenchScanArgs {
    #[arg(long, default_value_t = 16)]
    pub(crate) nodes: u32,
    #[arg(long, default_value_t = 2)]
    pub(crate) replicas: u32,
    /// Layout of the dataset: chained (declustering) or mirrored (groups, GD-9)
    #[arg(long, default_value = "chained")]
    pub(crate) layout: LayoutChoice,
    /// Bytes of each fragment [default: 64MiB; with --real, enough for 6 s scans]
    #[arg(long)]
    pub(crate) fragment_size: Option<ByteSize>,
    /// Block sizes to compare (one dataset each), e.g. 64KiB,256KiB,1MiB,4MiB
    #[arg(long, value_delimiter = ',', default_value = "1MiB", alias = "block-size")]
    pub(crate) block_sizes: Vec<ByteSize>,
    #[command(flatten)]
    pub(crate) disk: LocalDiskArgs,
    #[command(flatten)]
    pub(crate) fault: FaultArgs,
    /// Fault counts to run
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,12,16")]
    pub(crate) faults: Vec<u32>,
    /// Where faults go: best (spread), worst (adjacent) or random (seeded)
    #[arg(long, default_value = "best")]
    pub(crate) fault_layout: FaultLayout,
    /// Faults on only during these windows of each run, e.g. 2s-6s (or 2s- to the end);
    /// reports adaptation times
    #[arg(long, value_delimiter = ',')]
    pub(crate) fault_schedule: Vec<FaultWindow>,
    /// Data of even and odd consumers (logical partitions), e.g. 1:1,1:1.5,1:2
    #[arg(long, value_delimiter = ',', default_value = "1:1")]
    pub(crate) ratio: Vec<Ratio>,
    /// What each consumer reads: its partition whole (scan), or as many blocks picked at
    /// random anywhere in the dataset (random: the async interface, the window's reads at
    /// once)
    #[arg(long, default_value = "scan")]
    pub(crate) access: Access,
    /// Read policies to compare, by the names `ganges scan --policy` takes
    #[arg(long, value_delimiter = ',', default_value = "static,gd")]
    pub(crate) policies: Vec<ReadPolicyKind>,
    /// Requests in flight per consumer [default: 6 for gd, gd-rel, gd-batch and gd-share; 6 MiB of
    /// blocks for gd-plan; 4 for the others; 16 with --access random]
    #[arg(long)]
    pub(crate) window: Option<u32>,
    #[command(flatten)]
    pub(crate) settings: PolicyArgs,
    /// Runs of each (policy, faults), alternating; the median is reported
    #[arg(long, default_value_t = 1)]
    pub(crate) repeat: u32,
    /// Also run each configuration in the simulator, same policy and rates, and print both
    #[arg(long)]
    pub(crate) sim: bool,
    /// Servers serve Prometheus metrics, each scraped every second during the runs (to see
    /// what metrics cost)
    #[arg(long)]
    pub(crate) metrics_scrape: bool,
    /// Serve the live dashboard at this address while the bench runs (its table fills run
    /// by run), e.g. 127.0.0.1:8090
    #[arg(long, value_name = "ADDR")]
    pub(crate) dashboard: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// A small, fast configuration for smoke tests (4 nodes, 4MiB fragments, faults 0,1,2)
    #[arg(long)]
    pub(crate) quick: bool,
    /// Write every figure as JSON
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Draw % of ideal against faults (.svg or .png)
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,
    /// Draw the slowest consumer's rate over time (with --fault-schedule)
    #[arg(long, value_name = "FILE")]
    pub(crate) plot_time: Option<PathBuf>,
    /// Keep the cluster's files here instead of a temporary folder
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) real: RealArgs,
}

/// The read policies' settings, each named as in errors about it.
#[derive(Args, Debug, Clone)]
pub(crate) struct PolicyArgs {
    /// gd-pc: read a backup copy once its server's primary consumer is this far ahead
    /// (fraction of the partition; at most 6 blocks)
    #[arg(long, default_value_t = PrimarySettings::default().high_watermark)]
    pub(crate) pc_high_watermark: f64,
    /// gd-pc: stop reading the backup once the gap is below this (at most 1.5 blocks)
    #[arg(long, default_value_t = PrimarySettings::default().low_watermark)]
    pub(crate) pc_low_watermark: f64,
    /// gd-pc: how often to ask a backup server for its primary consumer's progress
    #[arg(long, default_value_t = Dur(PrimarySettings::default().probe_interval))]
    pub(crate) pc_probe_interval: Dur,
    /// gd-rr: requests kept at a server in use
    #[arg(long, default_value_t = RateSettings::default().min_outstanding)]
    pub(crate) rr_min_outstanding: u32,
    /// gd-rr: replies before servers are compared
    #[arg(long, default_value_t = RateSettings::default().warmup_replies)]
    pub(crate) rr_warmup_replies: u32,
    /// gd-rr: a server this many times slower than the fastest gets one request at a time
    #[arg(long, default_value_t = RateSettings::default().slow_ratio)]
    pub(crate) rr_slow_ratio: f64,
    /// gd-rr: every this many picks a server serves the consumer furthest behind (the guard);
    /// the picks between go to the longest queue, as in the paper
    #[arg(long, default_value_t = RateSettings::default().guard_every)]
    pub(crate) rr_guard_every: u32,
    /// gd-rr: how often to ask a backup server for its disk speed
    #[arg(long, default_value_t = Dur(RateSettings::default().probe_interval))]
    pub(crate) rr_probe_interval: Dur,
    /// gd-rr: give the primary its share back once it is as fast as the others again
    #[arg(long, default_value_t = RateSettings::default().return_to_primary, action = clap::ArgAction::Set)]
    pub(crate) rr_return_to_primary: bool,
    /// gd-plan: how often each server is asked for its disk speed
    #[arg(long, default_value_t = Dur(PlanSettings::default().probe_interval))]
    pub(crate) plan_probe_interval: Dur,
    /// gd-plan: read blocks in pieces of at most this size (a multiple of 64KiB)
    #[arg(long, default_value_t = ByteSize(PlanSettings::default().piece_bytes as u64))]
    pub(crate) plan_piece: ByteSize,
}

/// CW-1's settings (the ceft write policies), each named as in errors about it.
#[derive(Args, Debug, Clone)]
pub(crate) struct CeftArgs {
    /// ceft: a CPU this busy (0 to 1) is saturated
    #[arg(long, default_value_t = CeftThresholds::default().cpu_saturated)]
    pub(crate) ceft_cpu_saturated: f64,
    /// ceft: a load above this is heavy
    #[arg(long, default_value_t = CeftThresholds::default().load_heavy)]
    pub(crate) ceft_load_heavy: f64,
    /// ceft: how often each node of a writer's pairs is asked for its load
    #[arg(long, default_value_t = Dur(CeftSettings::default().probe_interval))]
    pub(crate) ceft_probe_interval: Dur,
    /// ceft-adaptive: a node of a pair unused this long is sent one block
    #[arg(long, default_value_t = Dur(CeftSettings::default().explore_interval))]
    pub(crate) ceft_explore_interval: Dur,
}

impl CeftArgs {
    /// Checked when the write starts (`PolicySettings::validate`, naming the setting).
    pub(crate) fn settings(&self) -> CeftSettings {
        CeftSettings {
            thresholds: CeftThresholds { cpu_saturated: self.ceft_cpu_saturated, load_heavy: self.ceft_load_heavy },
            probe_interval: self.ceft_probe_interval.0,
            explore_interval: self.ceft_explore_interval.0,
        }
    }
}

impl PolicyArgs {
    pub(crate) fn settings(&self) -> CliResult<PolicySettings> {
        let s = PolicySettings {
            primary: PrimarySettings {
                high_watermark: self.pc_high_watermark,
                low_watermark: self.pc_low_watermark,
                probe_interval: self.pc_probe_interval.0,
            },
            rate: RateSettings {
                min_outstanding: self.rr_min_outstanding,
                warmup_replies: self.rr_warmup_replies,
                slow_ratio: self.rr_slow_ratio,
                guard_every: self.rr_guard_every,
                probe_interval: self.rr_probe_interval.0,
                return_to_primary: self.rr_return_to_primary,
            },
            plan: PlanSettings {
                probe_interval: self.plan_probe_interval.0,
                piece_bytes: u32::try_from(self.plan_piece.0).unwrap_or(u32::MAX),
            },
            ceft: CeftSettings::default(),
        };
        s.validate().map_err(|e| CliError::Failed(format!("--{}: {e}", e.name)))?;
        Ok(s)
    }
}

#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// Scenario name (see --list)
    pub(crate) scenario: Option<String>,
    /// List the scenarios
    #[arg(long)]
    pub(crate) list: bool,
    /// Producers (disks for GD scenarios)
    #[arg(long)]
    pub(crate) producers: Option<u32>,
    /// Consumers
    #[arg(long)]
    pub(crate) consumers: Option<u32>,
    /// Rate of each producer (MB/s are 10^6 bytes, as in River)
    #[arg(long)]
    pub(crate) producer_rate: Option<Rate>,
    /// Rate of each consumer
    #[arg(long)]
    pub(crate) consumer_rate: Option<Rate>,
    /// Rate a faulty component is left with
    #[arg(long)]
    pub(crate) fault_rate: Option<Rate>,
    /// Fault counts [default: the figure's]
    #[arg(long, value_delimiter = ',')]
    pub(crate) faults: Option<Vec<u32>>,
    /// Blocks each producer (DQ) or consumer (GD) moves
    #[arg(long)]
    pub(crate) blocks: Option<u64>,
    /// Block size [default: 8KB, River's]
    #[arg(long)]
    pub(crate) block_size: Option<ByteSize>,
    /// The disks' seek (the bench's scenarios) [default: 4ms]
    #[arg(long)]
    pub(crate) seek: Option<Dur>,
    /// Read policies (the bench's scenarios) [default: the scenario's]
    #[arg(long, value_delimiter = ',')]
    pub(crate) policies: Option<Vec<ReadPolicyKind>>,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// hunt: how many seeds to run, from --seed
    #[arg(long, default_value_t = 300)]
    pub(crate) seeds: u64,
    /// Write every figure as JSON
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Draw the figure (.svg or .png)
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    #[arg(long, default_value_t = 8)]
    pub(crate) nodes: u32,
    #[arg(long, default_value = "32MiB")]
    pub(crate) fragment_size: ByteSize,
    /// Where the JSON and the plot go
    #[arg(long, default_value = "ganges-demo")]
    pub(crate) out: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser)]
    struct OnlyPolicies {
        #[command(flatten)]
        settings: PolicyArgs,
        #[command(flatten)]
        ceft: CeftArgs,
    }

    #[test]
    fn policy_flags_default_to_the_policies_own_defaults() {
        // Every flag takes its default from the library; read back through the flags, the
        // defaults must be the library's own (a flag mapped to the wrong field shows here).
        let parsed = OnlyPolicies::try_parse_from(["ganges"]).expect("no flags parse");
        assert_eq!(parsed.settings.settings().expect("defaults are valid"), PolicySettings::default());
        assert_eq!(parsed.ceft.settings(), CeftSettings::default());
    }

    #[test]
    fn the_policy_flags_name_every_policy() {
        use clap::CommandFactory;
        let help = |sub: &str, arg: &str| -> String {
            let cli = Cli::command();
            let cmd = cli.find_subcommand(sub).expect("the subcommand exists");
            let arg = cmd.get_arguments().find(|a| a.get_id() == arg).expect("the flag exists");
            arg.get_help().expect("the flag has help").to_string()
        };
        // Whole words: "gd" must not pass for being part of "gd-pc".
        let names = |help: &str| -> Vec<String> {
            help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).map(str::to_string).collect()
        };
        let (read, write) = (help("scan", "policy"), help("write", "policy"));
        for k in ReadPolicyKind::ALL {
            assert!(names(&read).contains(&k.to_string()), "`scan --policy` does not name {k}: {read}");
        }
        for k in WritePolicyKind::ALL {
            assert!(names(&write).contains(&k.to_string()), "`write --policy` does not name {k}: {write}");
        }
    }
}

/// How a primitive runs: its workers, and which version.
#[derive(Args, Debug, Clone)]
pub(crate) struct FlowArgs {
    /// Worker instances per stage [default: one per server]
    #[arg(long)]
    pub(crate) workers: Option<usize>,
    /// The static version: primary copies, fixed partitions, each worker writing to its own
    /// server (a slow disk slows the whole run). The default is the robust one: graduated
    /// declustering and distributed queues.
    #[arg(long = "static")]
    pub(crate) fixed: bool,
    /// Seeds the distributed queues' choices
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Every worker a task of this process, instead of a process of its own
    #[arg(long)]
    pub(crate) in_process: bool,
    /// `ganges worker`: the id every worker of the run is given [default: the launcher's
    /// job id]
    #[arg(long)]
    pub(crate) run_id: Option<String>,
    #[command(flatten)]
    pub(crate) cluster: ClusterArg,
}

#[derive(Subcommand, Debug)]
pub(crate) enum RunCmd {
    /// Read every record of a dataset: count and checksum
    #[command(after_help = "Example:\n  ganges run scan recs --workers 8")]
    Scan {
        input: String,
        #[command(flatten)]
        flow: FlowArgs,
    },
    /// Make sort-benchmark records (100 bytes, 10-byte keys) and write them as a dataset
    #[command(after_help = "Example:\n  ganges run generate recs --size 1GiB")]
    Generate {
        output: String,
        /// Bytes of records to make (whole records)
        #[arg(long, default_value = "256MiB")]
        size: ByteSize,
        /// The records' seed
        #[arg(long = "data-seed", default_value_t = 1)]
        data_seed: u64,
        #[command(flatten)]
        flow: FlowArgs,
    },
    /// Keep the records whose key is in the lowest share of the key space, write them
    #[command(after_help = "Example:\n  ganges run filter recs few --keep 0.1 --static")]
    Filter {
        input: String,
        output: String,
        /// Share of the key space kept (0..1)
        #[arg(long, default_value_t = 0.1)]
        keep: f64,
        #[command(flatten)]
        flow: FlowArgs,
    },
    /// The first N records in key order: sorted runs written, then a merge of their heads
    #[command(
        after_help = "Examples:\n  ganges run topn recs --n 10\n  ganges run topn recs --n 10 --after 10   (the next ten, from the runs)"
    )]
    Topn {
        input: String,
        #[arg(long, default_value_t = 10)]
        n: usize,
        /// Where the sorted runs go [default: INPUT.runs]
        #[arg(long)]
        runs: Option<String>,
        /// Continue the merge from the runs already written: the N records after these many
        #[arg(long)]
        after: Option<usize>,
        #[command(flatten)]
        flow: FlowArgs,
    },
    /// Every pair of records of two datasets whose keys share their first bytes
    #[command(after_help = "Example:\n  ganges run join recs few pairs --key-bytes 3")]
    Join {
        left: String,
        right: String,
        output: String,
        /// Bytes of the key that must be equal (1..8)
        #[arg(long, default_value_t = 3)]
        key_bytes: u32,
        #[command(flatten)]
        flow: FlowArgs,
    },
    /// One-pass external sort; the output, read in written order, is in key order
    #[command(after_help = "Example:\n  ganges run sort recs sorted --check")]
    Sort {
        input: String,
        output: String,
        /// Then read the output back and check it (order, count, checksum)
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        flow: FlowArgs,
    },
    /// Check a dataset as the sort benchmark's valsort does: order, count, checksum
    #[command(after_help = "Example:\n  ganges run check sorted")]
    Check {
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}
