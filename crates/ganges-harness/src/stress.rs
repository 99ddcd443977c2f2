//! Loading one node of a local cluster, for `bench write --stress` (CEFT-PVFS's experiments:
//! a node's CPUs, or its disk and memory, kept busy by another program).
//!
//! Every server of a stressed bench is its own node: a cgroup-v1 group under the cpu,
//! cpuacct and memory controllers (`ganges serve --node-cgroup`), with one CPU's worth of
//! CFS quota and [`NODE_MEMORY`] of memory, so that a program started in node K's group
//! competes with server K and with no other. The stressors are `ganges stress` processes
//! (hidden from the help; the bench starts and kills them):
//! - `cpu`: busy threads in the node's group, more than the node's one CPU can run, so the
//!   node's CPU is saturated and its load above the paper's 2.
//! - `memory`: CEFT-PVFS's "program to stress the memory and disk": memory taken until the
//!   node has a quarter of a writer's bytes free (less than the file it writes, the rule's
//!   FSIZE), plus a competing stream on the node's modelled disk (the program's synchronous
//!   appends; FI-1's competing reader).
//! - `disk`: the competing stream alone, taking half the disk.
//! - `network`: CEFT-PVFS's Netperf beside a server: a stream of bytes to the server, which
//!   it reads and drops. On one machine the servers share loopback, so a network-stressed
//!   bench gives every server a modelled link ([`ganges_core::link`]) of [`LINK_PER_DISK`]
//!   times its disk's rate, received plus sent, which every frame in and out crosses; the
//!   stream and the server's clients then share the stressed node's link about evenly, as
//!   the paper measured. (Links of their own, in network namespaces with `tc`, need servers
//!   that serve off loopback, which waits for the cluster-secret handshake.)

use crate::error::{HarnessError, HarnessResult};
use ganges_server::node;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

/// Each node's memory in a stressed bench.
pub const NODE_MEMORY: u64 = 1 << 30;
/// Busy threads of a CPU stress: three on a one-CPU node, a load of three.
pub const CPU_THREADS: u32 = 3;
/// The disk share a disk (or memory) stress's competing stream takes.
pub const DISK_SHARE: f64 = 0.5;
/// A network-stressed bench's links, per unit of disk rate: room for a writer's data at
/// the disk's rate with half again to spare, until a stress takes half.
pub const LINK_PER_DISK: f64 = 1.5;
/// How long a stress runs before it is measured: the nodes sample once a second and smooth
/// a group's load over 2 s.
pub const SETTLE: Duration = Duration::from_secs(4);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StressKind {
    Cpu,
    Memory,
    Disk,
    Network,
}

/// What every server of a stressed cluster is: a node of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// Node N is the cgroup group `PARENT/nodeN`.
    pub cgroup_parent: String,
    pub memory_bytes: u64,
    /// A link model of this rate, received plus sent; `None`: loopback as it is.
    pub link_bytes_per_sec: Option<f64>,
}

/// A stress name that is none of cpu, memory, disk or network.
#[derive(Debug, thiserror::Error)]
#[error("unknown stress `{0}` (use cpu, memory, disk or network)")]
pub struct UnknownStress(pub String);

impl FromStr for StressKind {
    type Err = UnknownStress;
    fn from_str(s: &str) -> Result<Self, UnknownStress> {
        match s {
            "cpu" => Ok(StressKind::Cpu),
            "memory" => Ok(StressKind::Memory),
            "disk" => Ok(StressKind::Disk),
            "network" => Ok(StressKind::Network),
            _ => Err(UnknownStress(s.to_string())),
        }
    }
}

impl std::fmt::Display for StressKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StressKind::Cpu => "cpu",
            StressKind::Memory => "memory",
            StressKind::Disk => "disk",
            StressKind::Network => "network",
        })
    }
}

impl StressKind {
    /// Whether this stress puts a competing stream on the node's modelled disk.
    pub fn loads_disk(self) -> bool {
        matches!(self, StressKind::Memory | StressKind::Disk)
    }
}

/// The cgroup groups of a cluster's nodes: `PARENT/nodeN` under each controller. Removed
/// when dropped (after the processes in them have gone).
#[derive(Debug)]
pub struct NodeGroups {
    pub parent: String,
    nodes: u32,
}

/// Send a server bytes it drops, as fast as its link takes them.
fn flood(addr: &str) -> std::io::Result<()> {
    use ganges_proto::msg::{Hello, Message};
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr)?;
    let hello = Message::Hello(Hello { client: "ganges stress".into(), client_id: 0 }).encode(1);
    s.write_all(&hello.head)?;
    s.write_all(&hello.payload)?;
    let sink = Message::Sink(bytes::Bytes::from(vec![0u8; 1 << 20])).encode(2);
    loop {
        s.write_all(&sink.head)?;
        s.write_all(&sink.payload)?;
    }
}

/// Node `node`'s group below `parent`.
pub fn node_group(parent: &str, node: u32) -> String {
    format!("{parent}/node{node}")
}

impl NodeGroups {
    /// Groups for `nodes` nodes, each given one CPU of quota.
    pub fn create(nodes: u32) -> HarnessResult<NodeGroups> {
        let parent = format!("ganges-bench-{}", std::process::id());
        let groups = NodeGroups { parent, nodes };
        for n in 0..nodes {
            let g = groups.group(n);
            for c in node::CONTROLLERS {
                std::fs::create_dir_all(node::controller_dir(c, &g)).map_err(|e| {
                    HarnessError::System(format!(
                        "a stressed bench needs cgroup v1 (cpu, cpuacct, memory) and root: creating {}: {e}",
                        node::controller_dir(c, &g).display()
                    ))
                })?;
            }
            let cpu = node::controller_dir("cpu", &g);
            std::fs::write(cpu.join("cpu.cfs_period_us"), "100000")
                .and_then(|_| std::fs::write(cpu.join("cpu.cfs_quota_us"), "100000"))
                .map_err(|e| HarnessError::System(format!("setting {}'s CPU quota: {e}", cpu.display())))?;
        }
        Ok(groups)
    }

    pub fn group(&self, node: u32) -> String {
        node_group(&self.parent, node)
    }
}

impl Drop for NodeGroups {
    fn drop(&mut self) {
        // A group can go once its processes have; the servers are stopped before this.
        for c in node::CONTROLLERS {
            for n in 0..self.nodes {
                let _ = std::fs::remove_dir(node::controller_dir(c, &self.group(n)));
            }
            let _ = std::fs::remove_dir(node::controller_dir(c, &self.parent));
        }
    }
}

/// A running stressor process; killed when dropped.
#[derive(Debug)]
pub struct Stressor(Child);

impl Drop for Stressor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `ganges stress KIND` in `group`, the node of the server at `addr` (a disk stress is
/// a fault set on the server: `None`); a memory stress leaves `leave` bytes of the node free.
pub fn start(binary: &Path, kind: StressKind, group: &str, addr: &str, leave: u64) -> HarnessResult<Option<Stressor>> {
    let args: Vec<String> = match kind {
        StressKind::Disk => return Ok(None),
        StressKind::Cpu => vec!["--threads".into(), CPU_THREADS.to_string()],
        StressKind::Network => vec!["--target".into(), addr.to_string()],
        StressKind::Memory => {
            vec!["--node-memory".into(), format!("{NODE_MEMORY}B"), "--leave".into(), format!("{leave}B")]
        }
    };
    let mut cmd = Command::new(binary);
    cmd.args(["stress", &kind.to_string(), "--cgroup", group]).args(args).stdin(Stdio::null()).stdout(Stdio::null());
    crate::sys::tie_to_parent(&mut cmd, false);
    let child = cmd.spawn().map_err(HarnessError::io(format!("starting a {kind} stress")))?;
    Ok(Some(Stressor(child)))
}

/// The stressor's own body (`ganges stress`): join the node's group, then load it until
/// killed (a network stress: until its server goes).
pub fn run(
    kind: StressKind,
    group: &str,
    threads: u32,
    node_memory: u64,
    leave: u64,
    target: Option<String>,
) -> HarnessResult<()> {
    node::join_cgroup(group)?;
    match kind {
        StressKind::Network => {
            let Some(addr) = target else {
                return Err(HarnessError::Spec("a network stress needs --target ADDR (its server)".into()));
            };
            return flood(&addr).map_err(HarnessError::io(format!("network stress on {addr}")));
        }
        StressKind::Cpu => {
            for _ in 0..threads.max(1) {
                std::thread::spawn(|| {
                    let mut x = 1u64;
                    loop {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                });
            }
        }
        StressKind::Memory => {
            const CHUNK: u64 = 16 << 20;
            if node::memory_used(group).is_none() {
                let dir = node::controller_dir("memory", group);
                return Err(HarnessError::System(format!("reading {}'s memory use", dir.display())));
            }
            let mut held: Vec<Vec<u8>> = vec![];
            while node::memory_used(group).is_some_and(|u| u + leave + CHUNK <= node_memory) {
                // Touched, so the pages are really the node's.
                held.push(vec![1u8; CHUNK as usize]);
            }
            std::mem::forget(held);
        }
        StressKind::Disk => {
            return Err(HarnessError::Spec(
                "a disk stress is a competing stream set on the server, not a process".into(),
            ));
        }
    }
    loop {
        std::thread::park();
    }
}
