//! Control requests and replies: everything that is not on the data path. They travel as
//! JSON bodies (debuggable with a packet capture; never hot), bounded by `CONTROL_BODY_MAX`.
//!
//! Creating a dataset follows the commit rule (docs/design.md), driven by the client:
//! `Stage` on every node holding a copy (a staging folder under a transaction id), then the
//! data (`Generate` ranges, or `Write` frames for imported bytes), then `Prepare` with the
//! final manifest on every node (fsync data and checksums, write the manifest into staging),
//! then `Commit` on every node (rename staging to the dataset's name), the coordinator
//! named in `Prepare` first. The write is committed exactly when the coordinator has
//! committed (ganges-core's `commit` module has the whole rule); a server left holding a
//! prepared write asks the coordinator with `TxnStatus`. `Abort` or `Remove` clean up.

use crate::array::{ArrayOutcome, ArrayPlan, ArrayWritten};
use crate::manifest::{DatasetName, Manifest};
use ganges_core::disk::{DiskParams, DiskStats, Fault};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::sched::SchedulerKind;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum ControlRequest {
    /// Counters, settings and resource use of the server.
    Stats,
    /// The consumer streams this server served lately, with their progress (the live view).
    Consumers,
    /// Set (or with `None`, clear) the disk model's fault.
    SetFault { fault: Option<Fault> },
    /// Make these faults real on the server's machine (FI-2), replacing those in force:
    /// every field that is `None` is off. `RealFaults::default()` clears them all.
    SetRealFaults { faults: RealFaults },
    /// Measure the server's disk with direct I/O: write a calibration file of `bytes` (timed)
    /// when `write` is set or there is none that large yet (it is kept for later
    /// calibrations), then read it for up to `seconds`. (A link is timed by the client:
    /// `Sink` frames, then `Stats`, whose `sink_bytes` says what arrived.)
    Calibrate {
        bytes: u64,
        seconds: f64,
        #[serde(default)]
        write: bool,
    },
    /// Forget the disk bandwidth measured so far, so the next reads measure it afresh, as on
    /// a server just started. The bench sends it before every run, so that no run starts
    /// from the rates the last run's faults left behind.
    ForgetRate,
    /// Datasets this node holds copies of; with `staging`, also uncommitted ones.
    ListDatasets { staging: bool },
    /// The manifest of a committed dataset.
    GetManifest { name: DatasetName },
    /// Open a staging folder for this node's copies of a new dataset. With `append`, each
    /// copy is a log: blocks arrive as `APPEND` writes, in any number up to the staged
    /// fragment size, and `Prepare` gives the final sizes (DQ-1 writes).
    Stage {
        txid: u64,
        manifest: Manifest,
        #[serde(default)]
        append: bool,
    },
    /// Generate blocks `[block_from, block_to)` of this node's copy of `fragment`.
    Generate { txid: u64, name: DatasetName, fragment: FragmentId, block_from: u32, block_to: u32 },
    /// Make the staged copies durable and write the final manifest beside them, with the
    /// server whose commit decides the write (`ganges_core::commit`) and the servers it
    /// commits on (`members`; empty means every server staging it). Preparing again with
    /// another manifest, coordinator or members replaces them: a client whose prepare went
    /// unanswered on one server goes on without it.
    Prepare {
        txid: u64,
        manifest: Manifest,
        coordinator: NodeId,
        #[serde(default)]
        members: Vec<NodeId>,
    },
    /// Make the dataset visible (rename staging to its name).
    Commit { txid: u64, name: DatasetName },
    /// Drop a staging folder.
    Abort { txid: u64, name: DatasetName },
    /// Whether this server committed the write `txid` of `name` (with or without `asker`),
    /// still holds it, or knows nothing of it: a coordinator's verdict, asked by a server
    /// holding it prepared.
    TxnStatus {
        txid: u64,
        name: DatasetName,
        #[serde(default)]
        asker: Option<NodeId>,
    },
    /// Remove a dataset and any staging folders of that name.
    Remove { name: DatasetName },
    /// Check blocks `[block_from, block_to)` of this node's copy of `fragment` against their
    /// checksums (a bounded piece of work, so no request runs for long).
    Verify { name: DatasetName, fragment: FragmentId, block_from: u32, block_to: u32 },
    /// The CRC32C of each block of this node's copy of a fragment (committed, or the staging
    /// copy of `txid`), from its stored checksums.
    Checksums { name: DatasetName, fragment: FragmentId, txid: Option<u64> },
    /// Replica completion (GW-2): bring this node's copy of `fragment` of an incomplete
    /// dataset every block it lacks, read from the servers holding them (`peers` says where
    /// they are). Idempotent: a copy already whole does nothing. With `repair`, rewrite
    /// those blocks of this node's copy from another copy instead (scrub, heal on read),
    /// whatever the dataset's state, and log each in the dataset's repair log.
    Fill {
        name: DatasetName,
        fragment: FragmentId,
        peers: Vec<Peer>,
        #[serde(default)]
        repair: Vec<u32>,
    },
    /// Replace an incomplete dataset's manifest with `manifest`, which must describe the
    /// same dataset as complete: sent once every copy was filled.
    MarkComplete { manifest: Manifest },
    /// Tell a server where the other servers are (for request handoff, GD-6).
    SetPeers { peers: Vec<Peer> },
    /// From an idle server (`from`, serving at `rate_bytes_per_sec`): hand me some of your
    /// queued requests that I can serve, from the clients I have connections to; and give
    /// back, redirected to me, queued appends of the DQ writes I am staging (`appends`,
    /// their transaction ids).
    HandoffAsk {
        from: NodeId,
        rate_bytes_per_sec: f64,
        clients: Vec<u64>,
        #[serde(default)]
        appends: Vec<u64>,
    },
    /// Time `count` writes of `bytes` each through the server's disk queue (panda §3.2's
    /// empirical test: three 1 MiB writes), and answer the rate.
    WriteProbe { bytes: u32, count: u32 },
    /// Begin this server's part of a collective array write (staged already under
    /// `plan.txid`): it works out what it must gather and starts asking the processes.
    ArrayOpen { plan: Box<ArrayPlan> },
    /// From process `rank` of the collective write `txid` of `name`: which subchunks do you
    /// want pieces of from me? Waits a while for an answer (an empty one when the write is not
    /// open yet, or has nothing for now); `outcome` is set once the write ended.
    ArrayWants { name: DatasetName, txid: u64, rank: u32 },
    /// From a server to the manager (dynamic allocation): give me work; my last batch ran at
    /// `rate` bytes per second.
    ArrayGrant { name: DatasetName, txid: u64, from: NodeId, rate: Option<f64> },
    /// From a server that ran out of subchunks to another (`steal` allocation): give me some
    /// of your unstarted ones; mine write at `rate` bytes per second.
    ArraySteal { name: DatasetName, txid: u64, from: NodeId, rate: Option<f64> },
    /// Wait until this server has written everything it gathered, and say where it put it.
    ArrayFinish { name: DatasetName, txid: u64 },
    /// Worker `rank` of `size` of flow run `run` listens at `addr`: answer every address of
    /// the run known so far (workers find each other through a server; `ganges_core::meet`).
    Meet { run: u64, rank: u32, size: u32, addr: String },
}

/// Faults a server makes real on its own machine (FI-2). Each is off when `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RealFaults {
    /// The kernel's block-I/O controller caps the server process's reads from the device
    /// holding its data directory (cgroup v1 `blkio`, or v2 `io.max`), bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_read_bytes_per_sec: Option<u64>,
    /// The same for writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_write_bytes_per_sec: Option<u64>,
    /// A process reads another large file on the same device (gd-enhancements §4.1), at
    /// this share of the rate it measures reading alone (1: as fast as it can); it shares the
    /// server's kernel cap when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competing_reader: Option<f64>,
    /// The competing reader's pace as a rate (bytes per second) instead of a share of the
    /// rate it measures alone; it then reads this fast whatever the disk did alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competing_bytes_per_sec: Option<u64>,
    /// `tc` shapes the server's link, both directions, to this rate in bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bytes_per_sec: Option<u64>,
    /// `tc` delays the server's link by this much each way (needs the kernel's netem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_delay_us: Option<u64>,
}

impl RealFaults {
    pub fn is_none(&self) -> bool {
        *self == RealFaults::default()
    }

    /// Check every value before anything is applied.
    pub fn validate(&self) -> Result<(), String> {
        for (what, v) in [
            ("--kernel-read-rate", self.kernel_read_bytes_per_sec),
            ("--kernel-write-rate", self.kernel_write_bytes_per_sec),
            ("--link-rate", self.link_bytes_per_sec),
            ("the competing reader's rate", self.competing_bytes_per_sec),
        ] {
            if v == Some(0) {
                return Err(format!("{what} must be above 0 (clear the fault instead)"));
            }
        }
        if let Some(s) = self.competing_reader
            && !(s > 0.0 && s <= 1.0)
        {
            return Err(format!("--competing-reader must be in (0, 1], not {s}"));
        }
        Ok(())
    }

    /// Every field `other` sets, over these.
    pub fn merged(&self, other: &RealFaults) -> RealFaults {
        RealFaults {
            kernel_read_bytes_per_sec: other.kernel_read_bytes_per_sec.or(self.kernel_read_bytes_per_sec),
            kernel_write_bytes_per_sec: other.kernel_write_bytes_per_sec.or(self.kernel_write_bytes_per_sec),
            competing_reader: other.competing_reader.or(self.competing_reader),
            competing_bytes_per_sec: other.competing_bytes_per_sec.or(self.competing_bytes_per_sec),
            link_bytes_per_sec: other.link_bytes_per_sec.or(self.link_bytes_per_sec),
            link_delay_us: other.link_delay_us.or(self.link_delay_us),
        }
    }
}

impl std::fmt::Display for RealFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let mut parts = vec![];
        if let Some(r) = self.kernel_read_bytes_per_sec {
            parts.push(format!("kernel reads {:.1} MiB/s", mib(r)));
        }
        if let Some(w) = self.kernel_write_bytes_per_sec {
            parts.push(format!("kernel writes {:.1} MiB/s", mib(w)));
        }
        match (self.competing_reader, self.competing_bytes_per_sec) {
            (Some(_), Some(r)) => parts.push(format!("competing reader {:.1} MiB/s", mib(r))),
            (Some(s), None) => parts.push(format!("competing reader {s}")),
            _ => {}
        }
        if let Some(l) = self.link_bytes_per_sec {
            parts.push(format!("link {:.1} MiB/s", mib(l)));
        }
        if let Some(d) = self.link_delay_us {
            parts.push(format!("link delay {:.1} ms", d as f64 / 1e3));
        }
        if parts.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&parts.join(", "))
    }
}

/// What `Calibrate` measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Direct reads of the calibration file, bytes per second.
    pub read_bytes_per_sec: f64,
    /// Direct writes of it (measured only when this request wrote the file).
    pub write_bytes_per_sec: Option<f64>,
    /// Bytes read, and the seconds they took.
    pub read_bytes: u64,
    pub seconds: f64,
}

/// A server's address (`host:port`), as servers tell each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub node: NodeId,
    pub addr: String,
}

/// A queued read handed from a busy server to an idle one (GD-6): everything the idle
/// server needs to serve it and answer the client directly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedJob {
    pub client_id: u64,
    /// The request as the client sent it to the busy server.
    pub origin_node: NodeId,
    pub origin_request: u64,
    pub stream: u64,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub fraction: bool,
    pub service: u8,
    /// `Service::guard_every` (the share is not carried: handoff is gd-rr's, which plans none).
    #[serde(default)]
    pub guard_every: u8,
    /// `Service::depth`: a handed-off backup read keeps its place in a chain of trouble.
    #[serde(default)]
    pub depth: u8,
    pub dataset: DatasetName,
    pub fragment: FragmentId,
    pub block: u32,
    pub start_in_block: u32,
    pub len: u32,
}

impl ControlRequest {
    /// How long a client waits for the reply before it gives the server up as hung. Every
    /// request is a bounded piece of work (generate and verify go in chunks); prepare and
    /// commit fsync a node's whole share of a dataset, which runs at disk speed.
    pub fn timeout(&self) -> std::time::Duration {
        match self {
            ControlRequest::Prepare { .. }
            | ControlRequest::Commit { .. }
            | ControlRequest::Fill { .. }
            | ControlRequest::ArrayFinish { .. } => std::time::Duration::from_secs(600),
            _ => std::time::Duration::from_secs(60),
        }
    }

    /// A short name for logs and errors.
    pub fn op(&self) -> &'static str {
        match self {
            ControlRequest::Stats => "stats",
            ControlRequest::Consumers => "consumers",
            ControlRequest::SetFault { .. } => "set-fault",
            ControlRequest::SetRealFaults { .. } => "set-real-faults",
            ControlRequest::Calibrate { .. } => "calibrate",
            ControlRequest::ForgetRate => "forget-rate",
            ControlRequest::ListDatasets { .. } => "list-datasets",
            ControlRequest::GetManifest { .. } => "get-manifest",
            ControlRequest::Stage { .. } => "stage",
            ControlRequest::Generate { .. } => "generate",
            ControlRequest::Prepare { .. } => "prepare",
            ControlRequest::Commit { .. } => "commit",
            ControlRequest::Abort { .. } => "abort",
            ControlRequest::TxnStatus { .. } => "txn-status",
            ControlRequest::Remove { .. } => "remove",
            ControlRequest::Verify { .. } => "verify",
            ControlRequest::Checksums { .. } => "checksums",
            ControlRequest::Fill { .. } => "fill",
            ControlRequest::MarkComplete { .. } => "mark-complete",
            ControlRequest::SetPeers { .. } => "set-peers",
            ControlRequest::HandoffAsk { .. } => "handoff-ask",
            ControlRequest::WriteProbe { .. } => "write-probe",
            ControlRequest::ArrayOpen { .. } => "array-open",
            ControlRequest::ArrayWants { .. } => "array-wants",
            ControlRequest::ArrayGrant { .. } => "array-grant",
            ControlRequest::ArraySteal { .. } => "array-steal",
            ControlRequest::ArrayFinish { .. } => "array-finish",
            ControlRequest::Meet { .. } => "meet",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum ControlReply {
    Done,
    /// The addresses of a flow run's workers, by rank, as far as known.
    Met {
        addrs: Vec<Option<String>>,
    },
    Stats {
        stats: Box<ServerStats>,
    },
    Consumers {
        consumers: Vec<ConsumerActivity>,
    },
    Datasets {
        datasets: Vec<DatasetEntry>,
    },
    Manifest {
        manifest: Box<Manifest>,
    },
    Verified {
        report: VerifyReport,
    },
    Checksums {
        crcs: Vec<u32>,
    },
    TxnStatus {
        status: ganges_core::commit::Verdict,
    },
    Removed {
        committed: bool,
        staging: u32,
    },
    HandoffGive {
        jobs: Vec<HandedJob>,
        /// Queued appends given back to their writers, redirected to the asker.
        #[serde(default)]
        redirected: u32,
    },
    /// What a `Fill` brought: blocks and bytes written into the copy.
    Filled {
        blocks: u64,
        bytes: u64,
    },
    Calibrated {
        calibration: Calibration,
    },
    /// A `WriteProbe`'s rate.
    Rate {
        bytes_per_sec: f64,
    },
    ArrayWants {
        subchunks: Vec<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<ArrayOutcome>,
    },
    /// The subchunks that are the asker's to write; none when all are handed out.
    ArrayGranted {
        subchunks: Vec<u32>,
    },
    ArrayWritten {
        written: ArrayWritten,
    },
    /// The subchunks a `steal` gives; none when there was nothing to give.
    ArrayStolen {
        subchunks: Vec<u32>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    pub node: NodeId,
    pub version: String,
    pub uptime_secs: f64,
    /// `None` when the server reads the real file system without a model.
    pub disk: Option<DiskParams>,
    pub fault: Option<Fault>,
    pub scheduler: SchedulerKind,
    pub disk_stats: DiskStats,
    /// The disk bandwidth this server measured as it served (bytes/s); `None` before its
    /// first read, or since a `ForgetRate`.
    #[serde(default)]
    pub measured_disk_bytes_per_sec: Option<f64>,
    /// What its outgoing link carried while it had replies to send (bytes/s): far above the
    /// disk's figure on a healthy link. Where it is below, the server reports it as its speed
    /// to the consumers that plan on speeds. `None` until the link was busy long enough to
    /// measure, or since a `ForgetRate`.
    #[serde(default)]
    pub measured_link_bytes_per_sec: Option<f64>,
    pub queued: u64,
    pub connections: u64,
    pub reads: u64,
    pub read_bytes: u64,
    #[serde(default)]
    pub writes: u64,
    #[serde(default)]
    pub write_bytes: u64,
    pub cancelled: u64,
    pub corrupt_blocks: u64,
    pub protocol_errors: u64,
    /// Connections refused at the handshake: a wrong or missing cluster secret, a plain
    /// client at a TLS server, too many failures from one address, too slow.
    #[serde(default)]
    pub handshake_failures: u64,
    /// Connections refused because the server had as many open as it takes.
    #[serde(default)]
    pub refused_connections: u64,
    /// Real faults in force on the server's machine (FI-2).
    #[serde(default)]
    pub real_faults: RealFaults,
    /// Whether the server reads and writes with direct I/O.
    #[serde(default)]
    pub direct_io: bool,
    /// Whether connections must prove the cluster secret, and whether they are TLS.
    #[serde(default)]
    pub secret: bool,
    #[serde(default)]
    pub tls: bool,
    /// Bytes received in `Sink` frames (link calibration and network stress).
    #[serde(default)]
    pub sink_bytes: u64,
    /// Requests this server handed to others, and took from others (GD-6).
    #[serde(default)]
    pub handed_off: u64,
    #[serde(default)]
    pub taken_over: u64,
    /// DQ appends this server gave back to their writers for another, and that others gave
    /// back for this one (GD-6 for writes).
    #[serde(default)]
    pub redirected_out: u64,
    #[serde(default)]
    pub redirected_in: u64,
    /// User + system CPU time of the server process.
    pub cpu_secs: f64,
    /// Resident set size now, and its peak, in bytes.
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    pub datasets: u64,
    /// The node's load at its last sample (CW-1).
    #[serde(default)]
    pub node_load: Option<ganges_core::ceft::NodeLoad>,
    /// Where the server serves Prometheus metrics (`--metrics-listen`), if it does.
    #[serde(default)]
    pub metrics_addr: Option<String>,
}

impl ServerStats {
    /// The rate the modelled disk delivers now, its fault included (`None`: a real disk).
    pub fn model_rate(&self) -> Option<f64> {
        Some(self.disk?.rate_bytes_per_sec * self.fault.map_or(1.0, |f| f.rate_fraction()))
    }
}

/// What one consumer stream read from this server, and its progress as it last told it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsumerActivity {
    /// The stream's id, chosen by its client.
    pub stream: u64,
    pub dataset: DatasetName,
    /// Bytes of its partition the consumer had received, of `total_bytes`.
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// Bytes this server served it from a primary copy, and from a backup.
    pub primary_bytes: u64,
    pub backup_bytes: u64,
    /// Seconds since this server first served it, and since it last did.
    pub first_secs_ago: f64,
    pub last_secs_ago: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetEntry {
    pub name: DatasetName,
    /// `None` for a committed dataset, the transaction id for a staging one.
    pub staging_txid: Option<u64>,
    pub total_bytes: u64,
    /// Copies of fragments stored on this node.
    pub local_copies: u32,
    pub local_bytes: u64,
    pub id: u64,
    /// Blocks of this node's copies rewritten from another copy (scrub, heal on read).
    #[serde(default)]
    pub repaired_blocks: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadBlock {
    pub fragment: FragmentId,
    pub copy: u32,
    pub block: u32,
    pub why: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub blocks: u64,
    pub bytes: u64,
    pub bad: Vec<BadBlock>,
}
