//! CW-1: what this server's node is doing, sampled about once a second and handed to writers
//! in answers to probes (CEFT-PVFS, "Scheduling algorithms": CPU utilization, load, free
//! memory, network and disk throughput).
//!
//! A node is the machine (`/proc/stat`, `/proc/loadavg`, `/proc/meminfo`), or, when the
//! server is given one, a cgroup-v1 group of processes: several nodes on one machine, each
//! with its own CPU and memory, which is how `bench write --stress` loads one node without
//! the others. For a cgroup node:
//! - CPU: the time the group's tasks ran (`cpuacct.usage`) or waited on a run queue (their
//!   `schedstat`) against what it may use (its CFS quota, else every CPU of the machine), as
//!   one CPU. Waiting counts as busy because the nodes share this machine's cores: on a
//!   machine of its own, a group with work always waiting would have run all the time. So
//!   a group whose tasks always want to run is saturated, however busy its neighbours are.
//!   (A task that exits takes its waiting with it: that interval reads low.)
//! - load: the group's runnable tasks (but the sampling thread), smoothed with a 2 s time
//!   constant (the kernel keeps no load average per group; its 1-minute one would take a
//!   minute to see a stress).
//! - memory: the node's memory (as configured, else the group's limit) less the group's
//!   usage, at most what the machine has available.
//!
//! The network's traffic is what the server's link model carried when it has one; else, for
//! a cgroup node (which has no interface of its own), the server's data bytes in and out;
//! else `/proc/net/dev` of the server's namespace. Its free rate is the link's configured
//! rate (`--net-rate`, which the link model runs at when there is one) less that traffic.
//! The disk's free rate is the model's rate now (a slow disk or a competing stream
//! included) times the share of time the model was idle; without a disk model the disk is
//! taken as free. The arithmetic is `ganges_core::ceft` (pure, tested); this module only
//! reads files.

use crate::Shared;
use ganges_core::ceft::{self, CpuTimes, NodeCapacity, NodeCounters};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often a node samples itself (the paper's servers report about once a second).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// The smoothing of a cgroup node's runnable count: quick enough that a stress shows within
/// a few seconds, slow enough that one sample's luck does not.
pub const CGROUP_LOAD_TAU_SECS: f64 = 2.0;
/// A link's rate unless told: 10 Gb/s, received plus sent.
pub const NET_DEFAULT_BYTES_PER_SEC: f64 = 1.25e9;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The cgroup-v1 controllers a node's group lives under.
pub const CONTROLLERS: [&str; 3] = ["cpu", "cpuacct", "memory"];

#[derive(Clone, Debug, PartialEq)]
pub struct NodeConfig {
    /// The cgroup-v1 group (a path below each controller's mount) this node is; `None`: the
    /// machine.
    pub cgroup: Option<String>,
    /// The link's rate, received plus sent, bytes per second.
    pub net_bytes_per_sec: f64,
    /// The node's memory; `None`: a cgroup node's limit, else the machine's.
    pub memory_bytes: Option<u64>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig { cgroup: None, net_bytes_per_sec: NET_DEFAULT_BYTES_PER_SEC, memory_bytes: None }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("joining cgroup {dir}: {source} (cgroup v1 with cpu, cpuacct and memory, as root)")]
    Join { dir: PathBuf, source: std::io::Error },
}

/// Where `group` is under `controller`.
pub fn controller_dir(controller: &str, group: &str) -> PathBuf {
    Path::new(CGROUP_ROOT).join(controller).join(group.trim_start_matches('/'))
}

/// Move this process into `group` under the cpu, cpuacct and memory controllers, creating it
/// where it does not exist.
pub fn join_cgroup(group: &str) -> Result<(), NodeError> {
    let pid = std::process::id().to_string();
    for c in CONTROLLERS {
        let dir = controller_dir(c, group);
        std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::write(dir.join("cgroup.procs"), &pid))
            .map_err(|source| NodeError::Join { dir, source })?;
    }
    Ok(())
}

/// Reads a node's counters; keeps what smoothing needs between samples.
#[derive(Debug)]
pub struct Sampler {
    config: NodeConfig,
    started: std::time::Instant,
    load: f64,
    last_at: Option<f64>,
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read_u64(path: impl AsRef<Path>) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

impl Sampler {
    pub fn new(config: NodeConfig) -> Sampler {
        Sampler { config, started: std::time::Instant::now(), load: 0.0, last_at: None }
    }

    /// The node's counters now, given its disk's busy seconds and, when it is the node's
    /// traffic (a modelled link, or a cgroup node), the server's own traffic so far.
    pub fn sample(&mut self, disk_busy_secs: f64, server_net_bytes: Option<u64>) -> NodeCounters {
        let at_secs = self.started.elapsed().as_secs_f64();
        let host_mem = read("/proc/meminfo").and_then(|t| ceft::parse_mem_available(&t)).unwrap_or(0);
        let net_bytes = server_net_bytes.unwrap_or_else(|| {
            read("/proc/net/dev").map_or(0, |t| {
                let (rx, tx) = ceft::parse_net_dev(&t);
                rx + tx
            })
        });
        let (cpus, load, mem_free_bytes) = match self.config.cgroup.as_deref() {
            None => (
                read("/proc/stat").map(|t| ceft::parse_proc_stat(&t)).unwrap_or_default(),
                read("/proc/loadavg").and_then(|t| ceft::parse_loadavg(&t)).unwrap_or(0.0),
                host_mem,
            ),
            Some(group) => {
                let dt = self.last_at.map_or(0.0, |l| at_secs - l);
                let tasks = tasks(group);
                self.load = ceft::smooth_load(self.load, runnable(&tasks) as f64, dt, CGROUP_LOAD_TAU_SECS);
                let mem = controller_dir("memory", group);
                let limit = read_u64(mem.join("memory.limit_in_bytes")).unwrap_or(u64::MAX);
                let size = self.config.memory_bytes.map_or(limit, |m| m.min(limit));
                let free = match memory_used(group) {
                    Some(used) => size.saturating_sub(used).min(host_mem),
                    None => host_mem,
                };
                (cgroup_cpu(group, &tasks, at_secs), self.load, free)
            }
        };
        self.last_at = Some(at_secs);
        NodeCounters { at_secs, cpus, load, mem_free_bytes, net_bytes, disk_busy_secs }
    }
}

/// The memory `group` uses now.
pub fn memory_used(group: &str) -> Option<u64> {
    read_u64(controller_dir("memory", group).join("memory.usage_in_bytes"))
}

/// A cgroup node's CPU as one CPU: nanoseconds its tasks ran or waited to run against
/// nanoseconds it may use (the module docs say why waiting counts).
fn cgroup_cpu(group: &str, tasks: &[String], at_secs: f64) -> Vec<CpuTimes> {
    let Some(used) = read_u64(controller_dir("cpuacct", group).join("cpuacct.usage")) else {
        return vec![];
    };
    let waited: u64 = tasks
        .iter()
        .filter_map(|t| read(format!("/proc/{t}/schedstat")))
        .filter_map(|s| ceft::parse_schedstat_wait(&s))
        .sum();
    let cpu = controller_dir("cpu", group);
    let quota = read(cpu.join("cpu.cfs_quota_us")).and_then(|t| t.trim().parse::<i64>().ok());
    let period = read_u64(cpu.join("cpu.cfs_period_us"));
    let cpus = match (quota, period) {
        (Some(q), Some(p)) if q > 0 && p > 0 => q as f64 / p as f64,
        _ => std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
    };
    vec![CpuTimes { busy: used + waited, total: (at_secs * 1e9 * cpus) as u64 }]
}

/// The group's tasks, but the one sampling (which is running because it samples).
fn tasks(group: &str) -> Vec<String> {
    let me = rustix::thread::gettid().as_raw_nonzero().to_string();
    read(controller_dir("cpuacct", group).join("tasks"))
        .map(|t| t.split_whitespace().filter(|t| *t != me).map(String::from).collect())
        .unwrap_or_default()
}

/// How many of `tasks` are runnable now.
fn runnable(tasks: &[String]) -> usize {
    tasks.iter().filter_map(|t| read(format!("/proc/{t}/stat"))).filter(|stat| ceft::is_runnable(stat)).count()
}

/// The node's capacity now: the link's rate, and the disk model's rate with its fault.
fn capacity(shared: &Shared) -> (NodeCapacity, f64) {
    let model = {
        let d = shared.disk.lock();
        d.model.as_ref().map(|m| (m.effective_rate(), m.stats().busy_secs))
    };
    // Without a model: the measured rate, never busy (taking the disk lock again, not nested).
    let (rate, busy) = model.unwrap_or_else(|| (shared.rate_bytes_per_sec(), 0.0));
    let net = shared.config.node_sampling.net_bytes_per_sec;
    (NodeCapacity { net_bytes_per_sec: net, disk_bytes_per_sec: rate }, busy)
}

/// The server's own traffic so far, where it is the node's: what its link model carried, or
/// for a cgroup node (no interface of its own) its data bytes; `None`: the interfaces'.
fn traffic(shared: &Shared) -> Option<u64> {
    if let Some(l) = &shared.link {
        return Some(l.lock().bytes());
    }
    let c = &shared.counters;
    shared
        .config
        .node_sampling
        .cgroup
        .as_ref()
        .map(|_| c.read_bytes.load(Ordering::Relaxed) + c.write_bytes.load(Ordering::Relaxed))
}

/// Sample the node every [`SAMPLE_INTERVAL`] and publish its load, until the server stops.
pub async fn run(shared: Arc<Shared>) {
    let mut sampler = Sampler::new(shared.config.node_sampling.clone());
    let mut before: Option<NodeCounters> = None;
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    loop {
        tick.tick().await;
        let (cap, busy) = capacity(&shared);
        let traffic = traffic(&shared);
        // /proc and cgroup files are quick to read, but they are files: off the reactor.
        let Ok((s, after)) = tokio::task::spawn_blocking(move || {
            let after = sampler.sample(busy, traffic);
            (sampler, after)
        })
        .await
        else {
            return;
        };
        sampler = s;
        if let Some(b) = &before {
            *shared.node_load.lock() = Some(ceft::node_load(b, &after, &cap));
        }
        before = Some(after);
    }
}
