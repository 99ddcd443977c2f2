//! ganges-server: the storage server, one per disk (`ganges serve`).
//!
//! Modules:
//! - [`store`]: datasets on disk: manifests, fragment-copy files, a CRC32C per 64 KiB of
//!   each block, staging and the atomic commit rule.
//! - [`disk`]: the driver that runs queued reads through the pure scheduler and disk model of
//!   ganges-core, really reading the bytes and holding each reply until the modelled disk
//!   would have finished it.
//! - [`conn`]: one connection: handshake (through `ganges-net`), frame dispatch, replies,
//!   protocol errors.
//! - [`direct`]: direct I/O (`--direct-io`): aligned reads and writes past the page cache.
//! - [`array`]: collective array writes, server-directed (Panda): gather, assemble, append.
//! - [`fill`]: GW-2 replica completion: a copy brings itself the blocks it lacks from peers.
//! - [`local`]: frames from the process's own client, when the server is embedded in it
//!   ([`Embedded`], Panda's part-time I/O nodes).
//! - [`handoff`]: GD-6: an idle server asks its peers for queued requests; a busy one gives.
//! - [`node`]: CW-1: the node's CPU, load, memory, network and disk, sampled once a second.
//! - [`realfault`]: real faults (FI-2): kernel throttles, a competing reader, link shaping.
//! - [`txn`]: the janitor: writes a crash interrupted, finished or rolled back by the
//!   commit rule (ganges-core's `commit`).
//! - [`sys`]: CPU and memory use of the process.
//!
//! The entry point is [`run`], which takes its listener and a shutdown future (mini-redis
//! style), so tests bind port 0 and stop servers when they like.

pub mod array;
pub mod conn;
pub mod direct;
pub mod disk;
pub mod fill;
pub mod handoff;
pub mod local;
pub mod metrics;
pub mod node;
pub mod realfault;
pub mod store;
pub mod sys;
pub mod txn;

use ganges_core::ceft::NodeLoad;
use ganges_core::disk::{DiskModel, DiskParams};
use ganges_core::ids::NodeId;
use ganges_core::link::LinkModel;
use ganges_core::sched::SchedulerKind;
use ganges_core::time::Time;
use ganges_proto::control::{Peer, ServerStats};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Requests a real disk (no model) is given at once unless told. With one, the disk idles
/// between a read's end and the next read's start (the completion, a wake-up, the next pick):
/// on this machine's virtual disk that cost gd-plan's 256 KiB pieces a fifth of the disk next
/// to static's 1 MiB blocks; with two, the next read is at the disk before the last one ends.
/// The scheduler still picks each read as late as it can.
pub const REAL_QUEUE_DEPTH: u32 = 2;
/// Connections a server keeps open at once unless told otherwise (`--max-connections`).
pub const MAX_CONNECTIONS_DEFAULT: usize = 1024;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub node: NodeId,
    pub data_dir: PathBuf,
    /// The disk model; `None` reads the file system as it is (page cache included).
    pub disk: Option<DiskParams>,
    pub scheduler: SchedulerKind,
    /// The other servers, for request handoff; also settable at run time (`SetPeers`).
    pub peers: Vec<Peer>,
    /// What this server's node is, for the load it reports (CW-1).
    pub node_sampling: node::NodeConfig,
    /// Model the node's link at `node_sampling.net_bytes_per_sec`: every frame in and out
    /// waits its turn on it. Off: the network as it is.
    pub model_link: bool,
    /// Read and write data files with direct I/O, so the page cache does not hide the disk.
    pub direct_io: bool,
    /// Requests the real disk is given at once, when there is no model (the model's own is
    /// `DiskParams::queue_depth`).
    pub queue_depth: u32,
    /// The `ganges` binary, to start helper processes from (a competing reader); `None`
    /// where there is none (a server embedded in another program).
    pub helper: Option<PathBuf>,
    /// How connections are secured, both those this server accepts and those it opens to
    /// peers: TLS and the cluster secret's handshake. A server listening on an address that
    /// is not loopback must have a secret ([`run`] refuses to start without one).
    pub transport: ganges_net::Transport,
    /// Serve Prometheus metrics at `GET /metrics` on this address (`None`: no metrics).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How long a write's client may leave it staged or prepared before this server
    /// applies the commit rule without it (`ganges_core::commit`).
    pub txn_timeout: std::time::Duration,
    /// Most connections open at once (clients' and peers'); past it a new one is refused
    /// with `TooManyConnections`.
    pub max_connections: usize,
}

impl ServerConfig {
    /// Requests the disk serves at once: the model's, else the real disk's.
    pub fn disk_depth(&self) -> u32 {
        self.disk.map_or(self.queue_depth, |d| d.queue_depth)
    }

    /// A server of `node` keeping its data in `data_dir`: the real disk (no model, page cache
    /// included), every request's own discipline, no peers, no secret. Set what differs.
    pub fn new(node: NodeId, data_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            node,
            data_dir,
            disk: None,
            scheduler: SchedulerKind::Auto,
            peers: vec![],
            node_sampling: node::NodeConfig::default(),
            model_link: false,
            direct_io: false,
            queue_depth: REAL_QUEUE_DEPTH,
            helper: None,
            transport: ganges_net::Transport::plain(),
            metrics_listen: None,
            txn_timeout: ganges_core::commit::TXN_TIMEOUT_DEFAULT,
            max_connections: MAX_CONNECTIONS_DEFAULT,
        }
    }
}

/// Counters reported by `Stats`.
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub cancelled: AtomicU64,
    pub corrupt_blocks: AtomicU64,
    pub protocol_errors: AtomicU64,
    /// Connections refused at the handshake (wrong or missing secret, TLS required, rate
    /// limited, too slow).
    pub handshake_failures: AtomicU64,
    pub refused_connections: AtomicU64,
    /// Bytes received in `Sink` frames.
    pub sink_bytes: AtomicU64,
    pub handed_off: AtomicU64,
    pub taken_over: AtomicU64,
    pub redirected_out: AtomicU64,
    pub redirected_in: AtomicU64,
}

/// State shared by the accept loop, every connection and the disk driver.
#[derive(Debug)]
pub struct Shared {
    pub config: ServerConfig,
    pub store: Arc<store::Store>,
    /// The scheduler and disk model. A std mutex: held for microseconds, never across await.
    pub disk: Mutex<disk::DiskState>,
    /// Wakes the disk driver when a read or a write is queued.
    pub disk_wake: Notify,
    /// Wakes the handoff asker when the disk has run out of work.
    pub idle: Notify,
    /// The other servers (for handoff), as the cluster tells this one.
    pub peers: Mutex<Vec<Peer>>,
    /// Clients by the id they said hello with: their connection and where its replies go
    /// (a server that takes over another's request answers on the client's connection here).
    pub clients: Mutex<HashMap<u64, (u64, conn::Outbox)>>,
    pub counters: Counters,
    /// The node's load at its last sample (CW-1); `None` before the first interval.
    pub node_load: Mutex<Option<NodeLoad>>,
    /// The link model every frame in and out crosses, if any. A std mutex: held for
    /// microseconds, never across await.
    pub link: Option<Mutex<LinkModel>>,
    /// Real faults in force (FI-2). A std mutex, only taken on the blocking pool: applying a
    /// fault runs `tc` and writes cgroup files.
    pub real_faults: Mutex<realfault::RealFaultState>,
    pub fault_env: realfault::FaultEnv,
    /// The collective array writes this server takes part in.
    pub arrays: array::Arrays,
    /// Flow runs whose workers meet here (`ganges_core::meet`).
    pub meetings: Mutex<ganges_core::meet::Meetings>,
    /// Bytes per consumer stream and copy (metrics and the live view); read latency.
    pub metrics: metrics::Metrics,
    /// Where the metrics are served, once bound.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Time zero of this server, for the `Time` values policies see: the last whole second
    /// of the wall clock before it started, so that every server's `Time` is in the same
    /// phase within a second (a phased disk, `sched::ShareSettings::phase`, relies on it).
    epoch: Instant,
    started: Instant,
}

/// How far into its second the wall clock is at `at`: the phase a server's `Time` keeps
/// (`second_aligned_epoch`), and so where in their periods phased disks are.
pub fn into_wall_second(at: std::time::SystemTime) -> std::time::Duration {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(std::time::Duration::ZERO, |d| std::time::Duration::new(0, d.subsec_nanos()))
}

/// The instant the wall clock last showed a whole second (the monotonic clock keeps the
/// phase from then on; clocks kept by NTP agree within a millisecond or so across nodes).
fn second_aligned_epoch() -> Instant {
    let now = Instant::now();
    now.checked_sub(into_wall_second(std::time::SystemTime::now())).unwrap_or(now)
}

impl Shared {
    pub fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    /// This server's bandwidth as measured, else its model's rate, else a fast disk's.
    pub fn rate_bytes_per_sec(&self) -> f64 {
        let measured = self.disk.lock().rate.rate();
        measured.or(self.config.disk.map(|d| d.rate_bytes_per_sec)).unwrap_or(1e9)
    }

    pub fn instant(&self, t: Time) -> Instant {
        self.epoch + std::time::Duration::from_nanos(t.0)
    }

    pub fn stats(&self) -> ServerStats {
        // File I/O first: the disk lock is held only to copy the scheduler's figures.
        let datasets = self.store.list(false).map_or(0, |l| l.len() as u64);
        let (rss, peak) = sys::rss_bytes();
        let d = self.disk.lock();
        let c = &self.counters;
        ServerStats {
            node: self.config.node,
            version: VERSION.to_string(),
            uptime_secs: self.started.elapsed().as_secs_f64(),
            disk: self.config.disk,
            fault: d.model.as_ref().and_then(|m| m.fault()),
            scheduler: self.config.scheduler,
            disk_stats: d.model.as_ref().map(|m| m.stats()).unwrap_or_default(),
            measured_disk_bytes_per_sec: d.rate.rate(),
            measured_link_bytes_per_sec: d.link.rate(),
            queued: d.sched.len() as u64,
            connections: c.connections.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            write_bytes: c.write_bytes.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            corrupt_blocks: c.corrupt_blocks.load(Ordering::Relaxed),
            protocol_errors: c.protocol_errors.load(Ordering::Relaxed),
            handshake_failures: c.handshake_failures.load(Ordering::Relaxed),
            refused_connections: c.refused_connections.load(Ordering::Relaxed),
            real_faults: self.real_faults.lock().faults().clone(),
            direct_io: self.config.direct_io,
            secret: self.config.transport.has_secret(),
            tls: self.config.transport.has_tls(),
            sink_bytes: c.sink_bytes.load(Ordering::Relaxed),
            handed_off: c.handed_off.load(Ordering::Relaxed),
            taken_over: c.taken_over.load(Ordering::Relaxed),
            redirected_out: c.redirected_out.load(Ordering::Relaxed),
            redirected_in: c.redirected_in.load(Ordering::Relaxed),
            cpu_secs: sys::cpu_secs(),
            rss_bytes: rss,
            peak_rss_bytes: peak,
            datasets,
            node_load: *self.node_load.lock(),
            metrics_addr: self.metrics_addr.map(|a| a.to_string()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("accepting connections: {0}")]
    Accept(std::io::Error),
    #[error(
        "{0} is not a loopback address, and this server has no cluster secret: give it one \
         (--secret-file FILE, GANGES_SECRET_FILE, or the cluster file's [security] secret_file; \
         `ganges cluster init` makes one), so that only the cluster's own clients and servers can connect"
    )]
    NoSecret(std::net::SocketAddr),
    #[error("serving metrics on {0}: {1}")]
    Metrics(std::net::SocketAddr, std::io::Error),
}

/// Serve until `shutdown` resolves.
pub async fn run(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    Opened::open(config, &listener).await?.serve(listener, shutdown).await
}

/// A server in the caller's process (Panda's part-time I/O node): it serves its listener as
/// [`run`] does, and the process's own client reaches it without a socket through
/// [`Embedded::local`]. Dropping it stops the server.
#[derive(Debug)]
pub struct Embedded {
    local: Arc<local::InProcess>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
}

impl Embedded {
    /// Open the server's store and start serving `listener` on the caller's runtime.
    pub async fn start(config: ServerConfig, listener: TcpListener) -> Result<Embedded, ServeError> {
        let opened = Opened::open(config, &listener).await?;
        let local = Arc::new(local::InProcess::new(opened.shared.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(opened.serve(listener, async {
            let _ = stopped.await;
        }));
        Ok(Embedded { local, stop: Some(stop), task: Some(task) })
    }

    /// The server as this process's client reaches it (`Client::attach_local`).
    pub fn local(&self) -> Arc<dyn ganges_net::local::LocalServer> {
        self.local.clone()
    }

    /// What the process's own client handed this server in memory: frames and payload bytes.
    pub fn local_traffic(&self) -> (u64, u64) {
        self.local.traffic()
    }

    /// Stop serving; what the server's loop returned.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.local.stop();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())),
            None => Ok(()),
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.local.stop();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A server whose store is open and whose tasks run, not yet accepting connections.
struct Opened {
    shared: Arc<Shared>,
    metrics_listener: Option<TcpListener>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Opened {
    async fn open(config: ServerConfig, listener: &TcpListener) -> Result<Opened, ServeError> {
        let local = listener.local_addr().map_err(ServeError::Accept)?;
        if !local.ip().is_loopback() && !config.transport.has_secret() {
            return Err(ServeError::NoSecret(local));
        }
        let store = Arc::new(store::Store::open(&config.data_dir, config.node, config.direct_io)?);
        realfault::recover(&config.data_dir);
        let fault_env = realfault::FaultEnv {
            node: config.node,
            data_dir: config.data_dir.clone(),
            listen_ip: local.ip(),
            helper: config.helper.clone(),
        };
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| ServeError::Metrics(addr, e))?),
            None => None,
        };
        let config_peers = config.peers.clone();
        let model = config.disk.map(DiskModel::new);
        let queue_depth = config.disk_depth();
        let link = config.model_link.then(|| Mutex::new(LinkModel::new(config.node_sampling.net_bytes_per_sec)));
        let shared = Arc::new(Shared {
            disk: Mutex::new(disk::DiskState::new(config.scheduler.build(), model)),
            config,
            store,
            disk_wake: Notify::new(),
            idle: Notify::new(),
            peers: Mutex::new(config_peers),
            clients: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            node_load: Mutex::new(None),
            link,
            real_faults: Mutex::new(realfault::RealFaultState::default()),
            fault_env,
            arrays: array::Arrays::default(),
            meetings: Mutex::default(),
            metrics: metrics::Metrics::default(),
            metrics_addr: metrics_listener.as_ref().and_then(|l| l.local_addr().ok()),
            epoch: second_aligned_epoch(),
            started: Instant::now(),
        });
        let tasks = vec![
            tokio::spawn(disk::run(shared.clone(), queue_depth)),
            tokio::spawn(handoff::run_asker(shared.clone())),
            tokio::spawn(node::run(shared.clone())),
            tokio::spawn(txn::run_janitor(shared.clone())),
        ];
        Ok(Opened { shared, metrics_listener, tasks })
    }

    /// Accept connections until `shutdown` resolves, then stop every task and clear real faults.
    async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let Opened { shared, metrics_listener, mut tasks } = self;
        tasks.extend(metrics_listener.map(|l| tokio::spawn(metrics::serve(l, shared.clone()))));
        let next_conn = AtomicU64::new(1);
        // Every connection's task: when the server stops, they stop with it (dropping the set
        // aborts them), so its clients see their connections close as they would at a crash.
        let mut conns = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        let result = loop {
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) if conns.len() >= shared.config.max_connections => {
                        shared.counters.refused_connections.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, max = shared.config.max_connections, "refused a connection: too many open");
                        let why = format!(
                            "{} has {} connections open, as many as it takes (--max-connections); try again later",
                            shared.config.node, shared.config.max_connections
                        );
                        let err = ganges_proto::msg::WireError::new(ganges_proto::msg::ErrorCode::TooManyConnections, why);
                        tokio::spawn(ganges_net::transport::refuse_tcp(stream, err));
                    }
                    Ok((stream, _)) => {
                        let conn = next_conn.fetch_add(1, Ordering::Relaxed);
                        conns.spawn(conn::handle(shared.clone(), stream, conn));
                    }
                    // Out of file descriptors and the like: back off instead of spinning.
                    Err(e) if is_transient(&e) => {
                        tracing::warn!(%e, "accept failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    Err(e) => break Err(ServeError::Accept(e)),
                }
            }
        };
        conns.abort_all();
        for t in tasks {
            t.abort();
        }
        let cleared = shared.clone();
        let _ = tokio::task::spawn_blocking(move || {
            cleared.real_faults.lock().clear(&cleared.fault_env);
        })
        .await;
        result
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    let transient = [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM].map(|e| e.raw_os_error());
    e.raw_os_error().is_some_and(|code| transient.contains(&code)) || e.kind() == std::io::ErrorKind::ConnectionAborted
}

#[cfg(test)]
mod tests {
    use super::second_aligned_epoch;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// A server's `Time` is in the wall clock's phase within a second, which is what lets
    /// phased disks on different servers agree on their slots.
    #[test]
    fn server_time_keeps_the_wall_clock_s_phase_within_a_second() {
        let epoch = second_aligned_epoch();
        std::thread::sleep(Duration::from_millis(30));
        let since = epoch.elapsed().subsec_nanos() as i64;
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() as i64;
        // The two are read a moment apart; compare them round the second.
        let apart = (since - wall).rem_euclid(1_000_000_000);
        let apart = apart.min(1_000_000_000 - apart);
        assert!(apart < 5_000_000, "{apart} ns out of phase");
    }
}
