//! CW-1's decision, from CEFT-PVFS ("Scheduling algorithms"): for a mirror pair (nodes i and
//! j holding the two copies of the data), which node gets the data first, or skip the pair,
//! from what each node reports of its CPUs, load, free memory, and network and disk
//! throughput. Pure: the servers' samplers (the `/proc` parsers below) and the write policy
//! that uses the choice are drivers around it.
//!
//! Drivers: every server samples its node about once a second ([`NodeCounters`] read from
//! `/proc`, or from the node's cgroup when it has one, turned into a [`NodeLoad`] by
//! [`node_load`]) and answers probes with it; the `ceft` write routing
//! (`route::ceft`) asks [`choose`] for every block.
//!
//! Reading the paper's rule:
//! - CPU_i1, CPU_i2 are node i's two CPUs; "min(CPU_i1, CPU_i2) >= 99%" is "every CPU of i is
//!   saturated", so a node reports the utilization of its least busy CPU.
//! - NET and DISK are throughput a node can still take (its free capacity): the pair is
//!   skipped when both have at most half of the fastest disk's rate to give, and the one with
//!   more is chosen. Read as throughput in use, the rule would skip two idle nodes.
//! - Line 5 tests min(CPU_i1, CPU_j2); by symmetry with line 3 it means node j's CPUs.
//! - Lines 24 and 25 repeat 22 and 23; they are written once.

use serde::{Deserialize, Serialize};

/// What a node reports of itself.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeLoad {
    /// Utilization of the node's least busy CPU, 0 to 1.
    pub cpu_min_busy: f64,
    /// The 1-minute load average.
    pub load: f64,
    /// Memory available for new data, bytes.
    pub mem_free_bytes: u64,
    /// Network throughput the node can still take, bytes per second.
    pub net_free_bytes_per_sec: f64,
    /// Disk throughput the node can still take, bytes per second.
    pub disk_free_bytes_per_sec: f64,
}

/// The paper's thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CeftThresholds {
    /// A CPU this busy is saturated (the paper: 99%).
    pub cpu_saturated: f64,
    /// A load average above this is heavy (the paper: 2).
    pub load_heavy: f64,
}

impl Default for CeftThresholds {
    fn default() -> Self {
        CeftThresholds { cpu_saturated: 0.99, load_heavy: 2.0 }
    }
}

/// Which node of a mirror pair gets the data first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MirrorChoice {
    I,
    J,
    /// The paper's skipping flag: neither node is a good first choice now.
    Skip,
}

/// The rule, for a write of `file_bytes` when the fastest disk takes `disk_max` bytes per
/// second. See the module docs for how the paper's text is read.
pub fn choose(i: &NodeLoad, j: &NodeLoad, file_bytes: u64, disk_max: f64, t: &CeftThresholds) -> MirrorChoice {
    let saturated = |n: &NodeLoad| n.cpu_min_busy >= t.cpu_saturated && n.load > t.load_heavy;
    let half = 0.5 * disk_max;
    // Lines 1-6: CPUs.
    if saturated(i) && saturated(j) {
        return MirrorChoice::Skip;
    }
    if saturated(i) {
        return MirrorChoice::J;
    }
    if saturated(j) {
        return MirrorChoice::I;
    }
    let mem_i = i.mem_free_bytes > file_bytes;
    let mem_j = j.mem_free_bytes > file_bytes;
    match (mem_i, mem_j) {
        // Lines 7-12: both can buffer the file; the network decides.
        (true, true) => {
            if i.net_free_bytes_per_sec <= half && j.net_free_bytes_per_sec <= half {
                MirrorChoice::Skip
            } else if i.net_free_bytes_per_sec >= j.net_free_bytes_per_sec {
                MirrorChoice::I
            } else {
                MirrorChoice::J
            }
        }
        // Lines 13-20: neither can; the slower of disk and network decides.
        (false, false) => {
            let bi = i.disk_free_bytes_per_sec.min(i.net_free_bytes_per_sec);
            let bj = j.disk_free_bytes_per_sec.min(j.net_free_bytes_per_sec);
            if bi <= half && bj <= half {
                MirrorChoice::Skip
            } else if bi > bj {
                MirrorChoice::I
            } else {
                MirrorChoice::J
            }
        }
        // Lines 21-26: one can; it is chosen if its network has room.
        (true, false) if i.net_free_bytes_per_sec >= half => MirrorChoice::I,
        (false, true) if j.net_free_bytes_per_sec >= half => MirrorChoice::J,
        _ => MirrorChoice::Skip,
    }
}

/// A node's counters at one instant, as its sampler reads them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeCounters {
    /// When they were read, seconds on the sampler's clock.
    pub at_secs: f64,
    /// Each CPU's busy and total time (any unit, the same for both).
    pub cpus: Vec<CpuTimes>,
    /// The load: the kernel's 1-minute average, or a cgroup's smoothed runnable count.
    pub load: f64,
    pub mem_free_bytes: u64,
    /// Bytes received plus sent over the node's interfaces so far.
    pub net_bytes: u64,
    /// Time the node's disk has spent busy so far, seconds.
    pub disk_busy_secs: f64,
}

/// What a node could give with nothing else running.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeCapacity {
    /// The link's rate, received plus sent, bytes per second.
    pub net_bytes_per_sec: f64,
    /// The disk's rate now (a fault or a competing stream included), bytes per second.
    pub disk_bytes_per_sec: f64,
}

/// The load between two samples: busy fractions of the interval, free capacity left.
pub fn node_load(before: &NodeCounters, after: &NodeCounters, cap: &NodeCapacity) -> NodeLoad {
    let dt = after.at_secs - before.at_secs;
    let per_sec = |d: f64| if dt > 0.0 { d / dt } else { 0.0 };
    let net_used = per_sec(after.net_bytes.saturating_sub(before.net_bytes) as f64);
    let disk_busy = per_sec((after.disk_busy_secs - before.disk_busy_secs).max(0.0)).min(1.0);
    NodeLoad {
        cpu_min_busy: cpu_min_busy(&before.cpus, &after.cpus),
        load: after.load.max(0.0),
        mem_free_bytes: after.mem_free_bytes,
        net_free_bytes_per_sec: (cap.net_bytes_per_sec - net_used).max(0.0),
        disk_free_bytes_per_sec: cap.disk_bytes_per_sec.max(0.0) * (1.0 - disk_busy),
    }
}

/// A runnable count smoothed like a load average, with time constant `tau_secs`: the
/// load of a node that is a cgroup (the kernel keeps no load average per cgroup).
pub fn smooth_load(previous: f64, runnable: f64, dt_secs: f64, tau_secs: f64) -> f64 {
    if tau_secs <= 0.0 {
        return runnable;
    }
    let keep = (-dt_secs.max(0.0) / tau_secs).exp();
    previous * keep + runnable * (1.0 - keep)
}

/// Each CPU's time from a cgroup's `cpuacct.usage_percpu` (nanoseconds used) at wall time
/// `wall_ns`: the cgroup's share of every CPU, as [`CpuTimes`].
pub fn parse_usage_percpu(text: &str, wall_ns: u64) -> Vec<CpuTimes> {
    text.split_whitespace().filter_map(|x| x.parse().ok()).map(|busy| CpuTimes { busy, total: wall_ns }).collect()
}

/// Whether a `/proc/PID/stat` (or task stat) text says the task is runnable (state `R`).
pub fn is_runnable(stat: &str) -> bool {
    // The state follows the command name, which is in parentheses and may hold anything.
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) == Some("R")
}

/// The nanoseconds a task has waited to run, from its `/proc/PID/schedstat` text (time on a
/// CPU, time waiting on a run queue, time slices).
pub fn parse_schedstat_wait(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Busy and total jiffies of one CPU, from a `cpuN` line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub busy: u64,
    pub total: u64,
}

/// Each CPU's times from the text of `/proc/stat` (the `cpuN` lines, not the `cpu` total).
pub fn parse_proc_stat(text: &str) -> Vec<CpuTimes> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(|b| b.is_ascii_digit()))
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
            let total: u64 = v.iter().take(8).sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            CpuTimes { busy: total.saturating_sub(idle), total }
        })
        .collect()
}

/// The whole machine as one CPU: the sum of each CPU's times.
pub fn cpu_sum(cpus: &[CpuTimes]) -> CpuTimes {
    CpuTimes { busy: cpus.iter().map(|t| t.busy).sum(), total: cpus.iter().map(|t| t.total).sum() }
}

/// The least busy CPU's utilization between two samples of `/proc/stat`, 0 to 1.
pub fn cpu_min_busy(before: &[CpuTimes], after: &[CpuTimes]) -> f64 {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            let total = a.total.saturating_sub(b.total);
            if total == 0 { 0.0 } else { a.busy.saturating_sub(b.busy) as f64 / total as f64 }
        })
        .reduce(f64::min)
        .map_or(0.0, |u| u.clamp(0.0, 1.0))
}

/// The 1-minute load average from the text of `/proc/loadavg`.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
pub fn parse_mem_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes received and sent over every interface, from the text of `/proc/net/dev`.
pub fn parse_net_dev(text: &str) -> (u64, u64) {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(_, rest)| {
            let v: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            Some((*v.first()?, *v.get(8)?))
        })
        .fold((0, 0), |(r, t), (a, b)| (r + a, t + b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn idle() -> NodeLoad {
        NodeLoad {
            cpu_min_busy: 0.1,
            load: 0.2,
            mem_free_bytes: 8 << 30,
            net_free_bytes_per_sec: 100.0 * MB,
            disk_free_bytes_per_sec: 40.0 * MB,
        }
    }

    fn rule(i: NodeLoad, j: NodeLoad) -> MirrorChoice {
        choose(&i, &j, 1 << 30, 40.0 * MB, &CeftThresholds::default())
    }

    #[test]
    fn saturated_cpus_send_the_data_to_the_other_node_or_skip_the_pair() {
        let hot = NodeLoad { cpu_min_busy: 0.995, load: 3.0, ..idle() };
        assert_eq!(rule(hot, idle()), MirrorChoice::J);
        assert_eq!(rule(idle(), hot), MirrorChoice::I);
        assert_eq!(rule(hot, hot), MirrorChoice::Skip);
        // Busy CPUs with a light load are not saturated in the paper's sense.
        let busy_light = NodeLoad { cpu_min_busy: 0.995, load: 1.0, ..idle() };
        assert_eq!(rule(busy_light, idle()), MirrorChoice::I, "then the network decides: a tie goes to i");
    }

    #[test]
    fn with_memory_to_spare_the_freer_network_wins_unless_both_are_busy() {
        let net = |n: f64| NodeLoad { net_free_bytes_per_sec: n * MB, ..idle() };
        assert_eq!(rule(net(30.0), net(60.0)), MirrorChoice::J);
        assert_eq!(rule(net(60.0), net(30.0)), MirrorChoice::I);
        assert_eq!(rule(net(20.0), net(15.0)), MirrorChoice::Skip, "both at most half of 40 MB/s");
    }

    #[test]
    fn without_memory_the_slower_of_disk_and_network_decides() {
        let tight = |disk: f64, net: f64| NodeLoad {
            mem_free_bytes: 1 << 20,
            disk_free_bytes_per_sec: disk * MB,
            net_free_bytes_per_sec: net * MB,
            ..idle()
        };
        assert_eq!(rule(tight(10.0, 100.0), tight(30.0, 25.0)), MirrorChoice::J);
        assert_eq!(rule(tight(35.0, 100.0), tight(30.0, 90.0)), MirrorChoice::I);
        assert_eq!(rule(tight(15.0, 100.0), tight(30.0, 19.0)), MirrorChoice::Skip);
        // One with memory: chosen if its network has room, else skip.
        let roomy = NodeLoad { net_free_bytes_per_sec: 25.0 * MB, ..idle() };
        assert_eq!(rule(roomy, tight(40.0, 100.0)), MirrorChoice::I);
        assert_eq!(rule(tight(40.0, 100.0), roomy), MirrorChoice::J);
        let cramped = NodeLoad { net_free_bytes_per_sec: 5.0 * MB, ..idle() };
        assert_eq!(rule(cramped, tight(40.0, 100.0)), MirrorChoice::Skip);
    }

    #[test]
    fn proc_texts_parse() {
        let stat = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1\n";
        let later = "cpu  0\ncpu0 50 0 5 45 0 0 0 0 0 0\ncpu1 6 0 5 89 10 0 0 0 0 0\n";
        let (a, b) = (parse_proc_stat(stat), parse_proc_stat(later));
        assert_eq!(a, vec![CpuTimes { busy: 10, total: 50 }; 2]);
        // cpu0 did 45 busy of 50; cpu1 1 busy of 60: the least busy is 1/60.
        assert!((cpu_min_busy(&a, &b) - 1.0 / 60.0).abs() < 1e-9);
        // Together, 46 busy of 110.
        let (sa, sb) = (cpu_sum(&a), cpu_sum(&b));
        assert_eq!((sb.busy - sa.busy, sb.total - sa.total), (46, 110));
        assert_eq!(parse_loadavg("2.50 1.00 0.50 1/123 4567\n"), Some(2.5));
        assert_eq!(parse_mem_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"), Some(2 << 20));
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes\n    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  eth0: 50 1 0 0 0 0 0 0 70 1 0 0 0 0 0 0\n";
        assert_eq!(parse_net_dev(dev), (150, 170));
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn cgroup_texts_parse() {
        let a = parse_usage_percpu("100 300 \n", 1_000);
        let b = parse_usage_percpu("600 400\n", 2_000);
        assert_eq!(a, vec![CpuTimes { busy: 100, total: 1_000 }, CpuTimes { busy: 300, total: 1_000 }]);
        // One CPU went 50% busy, the other 10%: the least busy is 10%.
        assert!((cpu_min_busy(&a, &b) - 0.1).abs() < 1e-9);
        assert!(is_runnable("42 (ganges stress) R 1 42 42 0 -1"));
        assert!(!is_runnable("42 (a) R) S 1 42"), "the name may hold a parenthesis and an R");
        assert!(!is_runnable("garbage"));
        assert_eq!(parse_schedstat_wait("730389 2926414 2\n"), Some(2926414));
        assert_eq!(parse_schedstat_wait("730389"), None);
    }

    #[test]
    fn load_is_the_free_capacity_between_two_samples() {
        let cap = NodeCapacity { net_bytes_per_sec: 100.0 * MB, disk_bytes_per_sec: 32.0 * MB };
        let a = NodeCounters {
            at_secs: 10.0,
            cpus: vec![CpuTimes { busy: 0, total: 100 }],
            net_bytes: 1_000,
            disk_busy_secs: 1.0,
            ..Default::default()
        };
        let b = NodeCounters {
            at_secs: 12.0,
            cpus: vec![CpuTimes { busy: 50, total: 200 }],
            load: 1.5,
            mem_free_bytes: 7,
            net_bytes: 1_000 + 60_000_000,
            disk_busy_secs: 1.5,
        };
        let l = node_load(&a, &b, &cap);
        assert!((l.cpu_min_busy - 0.5).abs() < 1e-9);
        assert_eq!((l.load, l.mem_free_bytes), (1.5, 7));
        assert!((l.net_free_bytes_per_sec - 70.0 * MB).abs() < 1.0, "30 MB/s of 100 in use");
        assert!((l.disk_free_bytes_per_sec - 24.0 * MB).abs() < 1.0, "busy a quarter of the time");
        // A link busier than its rate has nothing free; a stopped clock gives no rates.
        let flood = NodeCounters { net_bytes: u64::MAX / 2, ..b.clone() };
        assert_eq!(node_load(&a, &flood, &cap).net_free_bytes_per_sec, 0.0);
        assert_eq!(node_load(&b, &b, &cap).net_free_bytes_per_sec, 100.0 * MB);
    }

    #[test]
    fn smoothed_load_moves_toward_the_runnable_count() {
        let mut l = 0.0;
        for _ in 0..5 {
            l = smooth_load(l, 3.0, 1.0, 5.0);
        }
        // After one time constant, 1 - 1/e of the way.
        assert!((l - 3.0 * (1.0 - (-1.0f64).exp())).abs() < 1e-9);
        assert_eq!(smooth_load(2.0, 0.0, 1.0, 0.0), 0.0);
    }
}
