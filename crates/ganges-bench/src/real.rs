//! Benchmarks on real disks (`bench scan --real`, `bench write --real`): how fast each
//! server's disk and link really are, measured before the runs, and faults made real
//! (`ganges_server::realfault`) at a severity relative to those measured rates.
//!
//! **The rates the ideals use.** Each server's disk is read with direct I/O alone, then all
//! at once; each netns server's link is timed alone, then all at once. Where the servers
//! share one physical disk (several servers on one machine), a server's rate alone is the
//! whole device's, and only the all-at-once rate is what it can give while the others work:
//! the ideals use the all-at-once rates, and the JSON records both.
//!
//! **Isolation.** On one machine the servers' disks are not independent: a server slowed
//! by a fault leaves its share of the device to the others, which then run faster than any
//! ideal computed from their rates (fractions over 100%, and a static policy that barely
//! suffers). So by default every server is capped by the kernel at `ISOLATE_SHARE` of the
//! servers' mean all-at-once rate: N servers become N equal disks of known, independent
//! speed, as on a cluster (the margin keeps the caps under what the device gives from one
//! minute to the next, which on a virtual disk varies by a third or more), and a fault lowers
//! one server's cap (or starts a competing reader inside it, or shapes its link).

use crate::util::{BenchError, BenchResult, fail};
use bytes::Bytes;
use ganges_client::Client;
use ganges_core::ids::NodeId;
use ganges_core::parse::ParseError;
use ganges_proto::control::{Calibration, ControlReply, ControlRequest, RealFaults};
use ganges_proto::msg::Message;
use serde::Serialize;
use std::time::{Duration, Instant};

/// How a fault is made real.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RealFaultKind {
    /// The kernel caps the faulty server's disk at `factor` of its measured rate.
    Kernel,
    /// A competing reader takes `share` of the faulty server's disk.
    Competing,
    /// `tc` shapes the faulty server's link to `factor` of its measured rate (netns).
    Link,
}

impl std::str::FromStr for RealFaultKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "kernel" => Ok(RealFaultKind::Kernel),
            "competing" => Ok(RealFaultKind::Competing),
            "link" => Ok(RealFaultKind::Link),
            _ => Err(ParseError::unknown("real fault kind", s, ["kernel", "competing", "link"])),
        }
    }
}

impl std::fmt::Display for RealFaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RealFaultKind::Kernel => "kernel",
            RealFaultKind::Competing => "competing",
            RealFaultKind::Link => "link",
        })
    }
}

/// How a real bench runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RealSpec {
    pub kind: RealFaultKind,
    /// The fraction of its rate a faulty server keeps (kernel, link).
    pub factor: f64,
    /// The share of the faulty server's disk a competing reader takes.
    pub share: f64,
    /// Cap every server (see the module's docs).
    pub isolate: bool,
    /// The cap, bytes per second [default: `ISOLATE_SHARE` of the mean all-at-once rate].
    pub cap: Option<f64>,
    /// Reads or writes: which direction the disk caps and calibration are for.
    pub writes: bool,
}

impl RealSpec {
    /// Whether this bench needs each server on a link of its own.
    pub fn netns(&self) -> bool {
        self.kind == RealFaultKind::Link
    }

    pub fn validate(&self) -> BenchResult<()> {
        if !(self.factor > 0.0 && self.factor <= 1.0) {
            return fail(format!("--fault-factor must be in (0, 1], not {}", self.factor));
        }
        if self.cap.is_some_and(|c| c <= 0.0) {
            return fail("--disk-cap must be above 0");
        }
        if !(self.share > 0.0 && self.share <= 1.0) {
            return fail(format!("--competing-share must be in (0, 1], not {}", self.share));
        }
        Ok(())
    }
}

/// What the servers measured before the runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Rates {
    /// Direct reads (or writes, for a write bench) of each server's disk, alone and all at
    /// once, bytes per second.
    pub disk_alone: Vec<f64>,
    pub disk_together: Vec<f64>,
    /// Each server's link, alone and all at once (netns clusters only).
    pub link_alone: Option<Vec<f64>>,
    pub link_together: Option<Vec<f64>>,
    /// Each server's kernel cap with isolation (`ISOLATE_SHARE` of the mean all-at-once rate).
    pub caps: Option<Vec<f64>>,
    /// The rate each server can give in the runs: its cap (or its disk's all-at-once rate
    /// without isolation), or its link's all-at-once rate if that is lower. The ideals use these.
    pub effective: Vec<f64>,
    /// Which rates `effective` is made of, in words (for the JSON and the docs).
    pub basis: String,
    /// With a competing reader: the share of its rate a faulty server kept while one read
    /// beside it (measured: a reader asked for half of a disk takes what the disk's queue
    /// gives it, which is not half).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub competing_kept: Option<f64>,
}

/// With isolation, each server is capped at this share of the servers' mean all-at-once
/// rate: on this machine's virtual disk the rate all at once moved from 330 to 480 MB/s a
/// server between calibrations minutes apart, and caps at 0.8 of one calibration were over
/// what the disk gave in a later run (static then read 67% of an ideal the caps promised).
pub const ISOLATE_SHARE: f64 = 0.6;

/// Bytes of each server's calibration file: larger than any cache between the disk and the
/// server, small enough to write in a second or two.
const CALIBRATE_BYTES: u64 = 256 << 20;
/// How long each calibration reads (round and round its file).
const CALIBRATE_SECONDS: f64 = 3.0;
/// Bytes a link calibration sends each server.
const LINK_BYTES: u64 = 512 << 20;

async fn calibrate_one(client: &Client, node: NodeId, write: bool) -> BenchResult<Calibration> {
    let req = ControlRequest::Calibrate { bytes: CALIBRATE_BYTES, seconds: CALIBRATE_SECONDS, write };
    match client.control(node, req).await? {
        ControlReply::Calibrated { calibration } => Ok(calibration),
        other => fail(format!("{node}: unexpected reply to calibrate: {other:?}")),
    }
}

fn pick(c: &Calibration, writes: bool) -> BenchResult<f64> {
    if writes {
        c.write_bytes_per_sec.ok_or_else(|| BenchError::Failed("a write calibration measured no write".into()))
    } else {
        Ok(c.read_bytes_per_sec)
    }
}

/// Measure every server's disk alone and all at once (reads, or writes for a write bench).
async fn disks(client: &Client, writes: bool) -> BenchResult<(Vec<f64>, Vec<f64>)> {
    let nodes: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    // The first calibration writes every file; the reads after it are what counts.
    for &n in &nodes {
        calibrate_one(client, n, false).await?;
    }
    let mut alone = vec![];
    for &n in &nodes {
        alone.push(pick(&calibrate_one(client, n, writes).await?, writes)?);
    }
    let together = futures_util::future::join_all(nodes.iter().map(|&n| calibrate_one(client, n, writes))).await;
    let together = together.into_iter().map(|c| pick(&c?, writes)).collect::<BenchResult<Vec<f64>>>()?;
    Ok((alone, together))
}

/// Time `LINK_BYTES` of `Sink` frames to each of `nodes` at once, up to when each has said
/// it received them (its `Stats` reply, which it sends after reading every frame before it).
async fn links_at_once(client: &Client, nodes: &[NodeId]) -> BenchResult<Vec<f64>> {
    const FRAME: usize = 1 << 20;
    let frame = Message::Sink(Bytes::from(vec![0u8; FRAME]));
    let one = |node: NodeId| {
        let frame = frame.clone();
        async move {
            let conn = client.conn(node)?;
            let t = Instant::now();
            for _ in 0..LINK_BYTES / FRAME as u64 {
                conn.notify(&frame);
            }
            client.control(node, ControlRequest::Stats).await?;
            Ok::<f64, BenchError>(LINK_BYTES as f64 / t.elapsed().as_secs_f64())
        }
    };
    futures_util::future::join_all(nodes.iter().map(|&n| one(n))).await.into_iter().collect()
}

/// Measure what the bench's ideals rest on (see the module's docs).
pub async fn measure(client: &Client, spec: &RealSpec) -> BenchResult<Rates> {
    let (disk_alone, disk_together) = disks(client, spec.writes).await?;
    let (mut link_alone, mut link_together) = (None, None);
    if spec.netns() {
        let nodes: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
        let mut alone = vec![];
        for &n in &nodes {
            alone.extend(links_at_once(client, &[n]).await?);
        }
        link_together = Some(links_at_once(client, &nodes).await?);
        link_alone = Some(alone);
    }
    // One device shared: every server's all-at-once figure is a sample of the same share of
    // it, and unequal caps would be calibration noise made permanent. So every server gets
    // the same cap, from their mean.
    let mean = disk_together.iter().sum::<f64>() / disk_together.len().max(1) as f64;
    let cap = spec.cap.unwrap_or(mean * ISOLATE_SHARE);
    let caps = spec.isolate.then(|| vec![cap; disk_together.len()]);
    let disk = caps.clone().unwrap_or_else(|| disk_together.clone());
    let effective: Vec<f64> = match &link_together {
        Some(l) => disk.iter().zip(l).map(|(d, l)| d.min(*l)).collect(),
        None => disk,
    };
    let what = if spec.writes { "direct writes" } else { "direct reads" };
    let disk_basis = if spec.isolate && spec.cap.is_some() {
        "its kernel cap, as given (--disk-cap)".to_string()
    } else if spec.isolate {
        format!("its kernel cap, {ISOLATE_SHARE} of the servers' mean {what} all at once")
    } else {
        format!("its {what} all at once (the servers share this machine's disk)")
    };
    let basis = match link_together {
        Some(_) => format!("each server's {disk_basis}, or its link all at once where that is slower"),
        None => format!("each server's {disk_basis}"),
    };
    let mut rates =
        Rates { disk_alone, disk_together, link_alone, link_together, caps, effective, basis, competing_kept: None };
    if spec.kind == RealFaultKind::Competing {
        rates.competing_kept = Some(competing_kept(client, spec, &rates).await?);
    }
    Ok(rates)
}

/// What share of its rate a server keeps with a competing reader beside it: node 0 made
/// faulty, its disk measured (through the server, so in its throttle group with the reader),
/// the fault cleared. The server answers `SetRealFaults` once the reader reads.
async fn competing_kept(client: &Client, spec: &RealSpec, rates: &Rates) -> BenchResult<f64> {
    let node = NodeId(0);
    let faults = faults_of(spec, rates, node, true);
    client.control(node, ControlRequest::SetRealFaults { faults }).await?;
    tokio::time::sleep(SETTLE).await;
    let c = calibrate_one(client, node, false).await;
    client.control(node, ControlRequest::SetRealFaults { faults: RealFaults::default() }).await?;
    let alone = rates.caps.as_ref().map_or(rates.disk_alone[0], |c| c[0]);
    Ok((c?.read_bytes_per_sec / alone).min(1.0))
}

/// The real faults of `node`: its isolation cap, and the fault if it is faulty. A cap (and a
/// kernel fault) holds reads and writes alike, as a slow disk is slow at both: a write
/// bench's replica completion reads from the disks it measures too.
pub fn faults_of(spec: &RealSpec, rates: &Rates, node: NodeId, faulty: bool) -> RealFaults {
    let b = rates.effective[node.index()];
    let cap = |r: f64| Some(r.round().max(1.0) as u64);
    let mut f = RealFaults::default();
    if let Some(caps) = &rates.caps {
        (f.kernel_read_bytes_per_sec, f.kernel_write_bytes_per_sec) =
            (cap(caps[node.index()]), cap(caps[node.index()]));
    }
    if faulty {
        match spec.kind {
            RealFaultKind::Kernel => {
                (f.kernel_read_bytes_per_sec, f.kernel_write_bytes_per_sec) =
                    (cap(spec.factor * b), cap(spec.factor * b))
            }
            RealFaultKind::Competing => {
                // At a known pace, a share of the server's cap (or of its rate), so the
                // server is left the rest.
                f.competing_reader = Some(spec.share);
                f.competing_bytes_per_sec = cap(spec.share * b);
            }
            RealFaultKind::Link => f.link_bytes_per_sec = cap(spec.factor * b),
        }
    }
    f
}

/// Each server's rate in a run with `faulty` servers, for the ideals.
pub fn rates_with(spec: &RealSpec, rates: &Rates, faulty: &[NodeId]) -> Vec<f64> {
    let kept = match spec.kind {
        RealFaultKind::Kernel | RealFaultKind::Link => spec.factor,
        RealFaultKind::Competing => rates.competing_kept.unwrap_or(1.0 - spec.share),
    };
    (0..rates.effective.len())
        .map(|n| rates.effective[n] * if faulty.contains(&NodeId(n as u32)) { kept } else { 1.0 })
        .collect()
}

/// Set every server's real faults for a run with `faulty` servers.
pub async fn apply(client: &Client, spec: &RealSpec, rates: &Rates, faulty: &[NodeId]) -> BenchResult<()> {
    for n in 0..client.nodes() {
        let node = NodeId(n);
        let faults = faults_of(spec, rates, node, faulty.contains(&node));
        client.control(node, ControlRequest::SetRealFaults { faults }).await?;
    }
    Ok(())
}

/// Remove every real fault and cap.
pub async fn clear(client: &Client) -> BenchResult<()> {
    for n in client.live_nodes() {
        client.control(n, ControlRequest::SetRealFaults { faults: RealFaults::default() }).await?;
    }
    Ok(())
}

/// Write dirty pages out and drop the page cache, so no run reads what the last one left in
/// memory (root only; the servers' direct I/O does not go through it anyway).
pub fn drop_caches() {
    rustix::fs::sync();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// How long a dataset must be for the runs to last `seconds` at the servers' rates.
pub fn fragment_bytes_for(rates: &Rates, seconds: f64, block: u64) -> u64 {
    let total: f64 = rates.effective.iter().sum();
    let per = total * seconds / rates.effective.len().max(1) as f64;
    ((per as u64).div_ceil(block) * block).max(64 << 20)
}

/// The disks and faults of a real bench, in words, for the header of its table.
pub fn describe(spec: &RealSpec, rates: &Rates) -> String {
    let mb = |v: &[f64]| {
        let (lo, hi) = v.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        if hi - lo < 0.05 * hi { format!("{:.0}", hi / 1e6) } else { format!("{:.0}-{:.0}", lo / 1e6, hi / 1e6) }
    };
    let fault = match spec.kind {
        RealFaultKind::Kernel => format!("the kernel caps a faulty disk at {} of its rate", spec.factor),
        RealFaultKind::Competing => format!(
            "a competing reader asks for {} of a faulty disk (and leaves it {:.2}, measured)",
            spec.share,
            rates.competing_kept.unwrap_or(f64::NAN)
        ),
        RealFaultKind::Link => format!("tc shapes a faulty link to {} of its rate", spec.factor),
    };
    format!(
        "real disks, direct I/O, {} MB/s each alone and {} MB/s all at once{}{}, {fault}",
        mb(&rates.disk_alone),
        mb(&rates.disk_together),
        rates.link_together.as_ref().map_or(String::new(), |l| format!(", links {} MB/s all at once", mb(l))),
        rates.caps.as_ref().map_or(String::new(), |c| format!(", each capped at {} MB/s", mb(c))),
    )
}

/// A short pause after faults change, so a competing reader is reading and a new cap is in
/// force before the clock starts.
pub const SETTLE: Duration = Duration::from_millis(600);
