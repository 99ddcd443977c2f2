//! The policy half of read routing: the trait every policy implements, what a policy may
//! see, the policies' names and settings, and the simple policies (static, GD, mirror).

use super::ceft::CeftSettings;
use super::ceft::{Ceft, CeftAdaptive};
use super::plan::Planned;
use super::primary::PrimaryCopies;
use super::rate::ResponseRate;
use crate::ceft::NodeLoad;
use crate::ids::{FragmentId, NodeId};
use crate::layout::Layout;
use crate::sched::{ProgressMetric, Service};
use crate::shape::{BLOCK_BYTES_MAX, CHECK_BYTES};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The read policies, selectable by name in the CLI, the bench and the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadPolicyKind {
    /// GD-8: each consumer reads from the primary copy only.
    Static,
    /// GD-1: basic graduated declustering, progress in bytes.
    Gd,
    /// GD-2: graduated declustering, progress relative to the partition.
    GdRel,
    /// GD-2 with GD-5's server-side runs: fewer seeks for the same balance.
    GdBatch,
    /// Ours: GD-2 with servers that learn each consumer's share, and runs.
    GdShare,
    /// GD-3: primary copies with high and low watermarks.
    GdPc,
    /// GD-3 with the high watermark shrinking as the scan nears its end (ours).
    GdPcShrink,
    /// GD-4 response-rate GD with GD-5 primary servers and runs (the virtual-streams system).
    GdRr,
    /// GD-4/GD-5 with GD-6 server request handoff.
    GdRrHandoff,
    /// Ours: GD with servers told each consumer's share, planned from every server's rate.
    GdPlan,
    /// GD-9 (CEFT-PVFS): blocks interleaved over the copies, both at once, no adaptation.
    Mirror,
    /// CW-1 (CEFT-PVFS): the paper's rule on the nodes' reported load picks the copy a
    /// block is written to first. A write routing only: not in `ALL`, not a read policy's
    /// name.
    Ceft,
    /// CW-1, ours: the copy that would finish the block first by measured rates. Writes only.
    CeftAdaptive,
}

impl ReadPolicyKind {
    /// Requests in flight per consumer unless the caller says otherwise, reading blocks of
    /// `block_bytes` with `settings`. gd-plan's window is `WINDOW_PLAN` MiB: as many bytes in
    /// flight with smaller blocks or pieces (`sched::plan_units`). The GD policies that pull
    /// from every copy keep `WINDOW_GD`.
    pub fn default_window(self, block_bytes: u64, settings: &PolicySettings) -> u32 {
        match self {
            ReadPolicyKind::Gd | ReadPolicyKind::GdRel | ReadPolicyKind::GdBatch | ReadPolicyKind::GdShare => {
                super::WINDOW_GD
            }
            ReadPolicyKind::GdPlan => {
                let request = self.request_bytes(block_bytes, settings);
                let window = (f64::from(super::WINDOW_PLAN) * crate::sched::plan_units(request)).round();
                (window as u32).min(super::WINDOW_MAX)
            }
            _ => super::WINDOW_DEFAULT,
        }
    }

    /// The longest request this policy makes with `settings`, reading blocks of
    /// `block_bytes` (`RoutePolicy::piece_bytes`).
    pub fn request_bytes(self, block_bytes: u64, settings: &PolicySettings) -> u64 {
        self.build(settings).piece_bytes().map_or(block_bytes, |p| block_bytes.min(u64::from(p)))
    }

    pub const ALL: [ReadPolicyKind; 11] = [
        ReadPolicyKind::Static,
        ReadPolicyKind::Gd,
        ReadPolicyKind::GdRel,
        ReadPolicyKind::GdBatch,
        ReadPolicyKind::GdShare,
        ReadPolicyKind::GdPc,
        ReadPolicyKind::GdPcShrink,
        ReadPolicyKind::GdRr,
        ReadPolicyKind::GdRrHandoff,
        ReadPolicyKind::GdPlan,
        ReadPolicyKind::Mirror,
    ];

    /// Whether the policy adapts to slow servers (every read policy but the static baseline
    /// and mirror's fixed interleaving).
    pub fn adaptive(self) -> bool {
        !matches!(
            self,
            ReadPolicyKind::Static | ReadPolicyKind::Mirror | ReadPolicyKind::Ceft | ReadPolicyKind::CeftAdaptive
        )
    }

    pub fn build(self, settings: &PolicySettings) -> Box<dyn RoutePolicy> {
        match self {
            ReadPolicyKind::Static => Box::new(Static),
            // Without runs nothing else closes the standing lag of whole-block steps (gd-batch's
            // run slack shrinks it as the scan ends): the servers level it
            // (`sched::FurthestBehind`). gd-share's level it with runs too: the bias each learns
            // is the share its consumer needs there (see [`Graduated`]).
            ReadPolicyKind::Gd => Box::new(Graduated::new(self, ProgressMetric::Bytes, false, true)),
            ReadPolicyKind::GdRel => Box::new(Graduated::new(self, ProgressMetric::Fraction, false, true)),
            ReadPolicyKind::GdBatch => Box::new(Graduated::new(self, ProgressMetric::Fraction, true, false)),
            ReadPolicyKind::GdShare => Box::new(Graduated::new(self, ProgressMetric::Fraction, true, true)),
            ReadPolicyKind::GdPc => Box::new(PrimaryCopies::new(settings.primary, false)),
            ReadPolicyKind::GdPcShrink => Box::new(PrimaryCopies::new(settings.primary, true)),
            ReadPolicyKind::GdRr => Box::new(ResponseRate::new(settings.rate, false)),
            ReadPolicyKind::GdRrHandoff => Box::new(ResponseRate::new(settings.rate, true)),
            ReadPolicyKind::GdPlan => Box::new(Planned::new(settings.plan)),
            ReadPolicyKind::Mirror => Box::new(Mirror::default()),
            ReadPolicyKind::Ceft => Box::new(Ceft::new(settings.ceft)),
            ReadPolicyKind::CeftAdaptive => Box::new(CeftAdaptive::new(settings.ceft)),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ReadPolicyKind::Static => "GD-8 static: primary copy only (non-robust baseline)",
            ReadPolicyKind::Gd => "GD-1 basic graduated declustering (progress in bytes)",
            ReadPolicyKind::GdRel => "GD-2 graduated declustering, progress relative to the partition",
            ReadPolicyKind::GdBatch => "GD-2 with GD-5 runs at the servers",
            ReadPolicyKind::GdShare => "GD-2 with servers learning each consumer's share (ours), and runs",
            ReadPolicyKind::GdPc => "GD-3 primary copies, high/low watermarks",
            ReadPolicyKind::GdPcShrink => "GD-3 with the high watermark shrinking near the end",
            ReadPolicyKind::GdRr => "GD-4 response rate, GD-5 primary servers and runs",
            ReadPolicyKind::GdRrHandoff => "GD-4/5 with GD-6 server request handoff",
            ReadPolicyKind::GdPlan => "GD with shares planned from every server's rate (ours), and runs",
            ReadPolicyKind::Mirror => "GD-9 interleaved reads of both copies (CEFT-PVFS), no adaptation",
            ReadPolicyKind::Ceft => "CW-1 CEFT-PVFS's rule on the nodes' load picks the copy written first",
            ReadPolicyKind::CeftAdaptive => "CW-1 ours: the copy that would finish the block first, by measured rates",
        }
    }
}

impl FromStr for ReadPolicyKind {
    type Err = crate::parse::ParseError;
    fn from_str(s: &str) -> Result<Self, crate::parse::ParseError> {
        ReadPolicyKind::ALL
            .into_iter()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| crate::parse::ParseError::unknown("read policy", s, ReadPolicyKind::ALL))
    }
}

impl fmt::Display for ReadPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadPolicyKind::Static => "static",
            ReadPolicyKind::Gd => "gd",
            ReadPolicyKind::GdRel => "gd-rel",
            ReadPolicyKind::GdBatch => "gd-batch",
            ReadPolicyKind::GdShare => "gd-share",
            ReadPolicyKind::GdPc => "gd-pc",
            ReadPolicyKind::GdPcShrink => "gd-pc-shrink",
            ReadPolicyKind::GdRr => "gd-rr",
            ReadPolicyKind::GdRrHandoff => "gd-rr-handoff",
            ReadPolicyKind::GdPlan => "gd-plan",
            ReadPolicyKind::Mirror => "mirror",
            ReadPolicyKind::Ceft => "ceft",
            ReadPolicyKind::CeftAdaptive => "ceft-adaptive",
        })
    }
}

/// GD-3's settings (gd-enhancements §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrimarySettings {
    /// Start reading a backup copy when its server's primary consumer is this far ahead
    /// (fraction of the partition; at most `primary::HIGH_MAX_BLOCKS` blocks).
    pub high_watermark: f64,
    /// Stop when the gap closes below this (at most `primary::LOW_MAX_BLOCKS` blocks).
    pub low_watermark: f64,
    /// How often to ask a backup server for its primary consumer's progress while not
    /// reading from it (replies from it carry the figure otherwise).
    pub probe_interval: Duration,
}

impl Default for PrimarySettings {
    fn default() -> Self {
        // 4% and 1% of the partition: at 64 one-MiB blocks, about 2.5 blocks and half a
        // block. Neighbours reading equal disks drift apart by less than a block, so with no
        // fault the backup is never used; a disk at half speed opens a 4% gap in 0.16 s at
        // 32 MiB/s. Both are raised to at least two blocks and half a block of the
        // partition, so small partitions do not flap on a single block's jitter.
        PrimarySettings { high_watermark: 0.04, low_watermark: 0.01, probe_interval: Duration::from_millis(50) }
    }
}

/// GD-4/GD-5's settings (virtual-streams §3.1.2 and §3.3), one per lesson of the paper.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSettings {
    /// Requests kept at a server while it is in use (lesson 1: keep the pipeline full).
    pub min_outstanding: u32,
    /// Replies to wait for before comparing servers (lesson 3: no decision on setup noise).
    pub warmup_replies: u32,
    /// A server this many times slower than the fastest gets one request at a time (lesson 5).
    pub slow_ratio: f64,
    /// Every this many picks a server serves the consumer furthest behind instead of the
    /// longest queue (lesson 4: no consumer starves; `sched::LongestQueue`).
    #[serde(default = "default_guard_every")]
    pub guard_every: u32,
    /// How often to ask a backup server for its state (its disk speed) while sending it
    /// nothing (GD-5: no data from backups without trouble).
    pub probe_interval: Duration,
    /// The primary server takes back its share once it is as fast as the others again
    /// (ours; virtual-streams §5 leaves it open).
    pub return_to_primary: bool,
}

impl Default for RateSettings {
    fn default() -> Self {
        // A probe every 100 ms: a fault on a backup shows within a tenth of a second, at one
        // small frame per backup per tenth of a second.
        RateSettings {
            min_outstanding: 2,
            warmup_replies: 5,
            slow_ratio: 4.0,
            guard_every: default_guard_every(),
            probe_interval: Duration::from_millis(100),
            return_to_primary: true,
        }
    }
}

fn default_guard_every() -> u32 {
    u32::from(crate::sched::GUARD_EVERY)
}

/// gd-plan's settings (ours; see `route::plan`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanSettings {
    /// Each server of the layout is asked for its disk speed this often.
    pub probe_interval: Duration,
    /// Longest request: a block is read in pieces of at most this many bytes, cut at
    /// multiples of it (a block this long or shorter is read whole). A multiple of
    /// `shape::CHECK_BYTES`, so every piece reads only its own checksum units.
    #[serde(default = "default_piece_bytes")]
    pub piece_bytes: u32,
}

fn default_piece_bytes() -> u32 {
    PlanSettings::default().piece_bytes
}

impl Default for PlanSettings {
    fn default() -> Self {
        // Sixteen servers: a small frame every 2.5 ms per consumer. The answers carry both
        // inputs of a plan, a server's disk speed and its primary reader's progress, so the
        // interval is how old a consumer's figures may be and how far apart two consumers'
        // plans are: every 100 ms saved a little CPU and cost gd-plan about half a point
        // under many slow disks.
        //
        // Pieces of 256 KiB: a slot's boundary at a disk and a 500 ms window's count of a
        // consumer's bytes are then both rounded to a quarter of a 1 MiB block, not a whole
        // one. Read whole, a consumer one block short in a window (12 of a 14-block share)
        // is well under its rate, and gd-plan did not settle near its new ideal rate while
        // four disks were slow.
        PlanSettings { probe_interval: Duration::from_millis(40), piece_bytes: 256 << 10 }
    }
}

/// Every tunable of the read policies, each a named setting with a tested default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicySettings {
    pub primary: PrimarySettings,
    pub rate: RateSettings,
    #[serde(default)]
    pub plan: PlanSettings,
    #[serde(default)]
    pub ceft: CeftSettings,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("setting `{name}` = {value}: {why}")]
pub struct SettingError {
    pub name: &'static str,
    pub value: String,
    pub why: String,
}

impl PolicySettings {
    pub fn validate(&self) -> Result<(), SettingError> {
        let err = |name: &'static str, value: &dyn fmt::Display, why: &str| {
            Err(SettingError { name, value: value.to_string(), why: why.to_string() })
        };
        let p = &self.primary;
        if !(p.high_watermark > 0.0 && p.high_watermark < 1.0) {
            return err(
                "pc-high-watermark",
                &p.high_watermark,
                "must be between 0 and 1 (a fraction of the partition)",
            );
        }
        if !(p.low_watermark >= 0.0 && p.low_watermark < p.high_watermark) {
            return err(
                "pc-low-watermark",
                &p.low_watermark,
                &format!("must be at least 0 and below pc-high-watermark ({})", p.high_watermark),
            );
        }
        if p.probe_interval.is_zero() {
            return err("pc-probe-interval", &format!("{:?}", p.probe_interval), "must be positive");
        }
        let r = &self.rate;
        if r.min_outstanding == 0 || r.min_outstanding > 64 {
            return err("rr-min-outstanding", &r.min_outstanding, "must be between 1 and 64");
        }
        if r.warmup_replies > 10_000 {
            return err("rr-warmup-replies", &r.warmup_replies, "must be at most 10000");
        }
        if !(r.slow_ratio > 1.0 && r.slow_ratio.is_finite()) {
            return err("rr-slow-ratio", &r.slow_ratio, "must be above 1");
        }
        if r.guard_every == 0 || r.guard_every > u32::from(u8::MAX) {
            return err("rr-guard-every", &r.guard_every, "must be between 1 and 255 (picks)");
        }
        if r.probe_interval.is_zero() {
            return err("rr-probe-interval", &format!("{:?}", r.probe_interval), "must be positive");
        }
        if self.plan.probe_interval.is_zero() {
            return err("plan-probe-interval", &format!("{:?}", self.plan.probe_interval), "must be positive");
        }
        let piece = self.plan.piece_bytes;
        if piece == 0 || !piece.is_multiple_of(CHECK_BYTES) || piece > BLOCK_BYTES_MAX {
            return err(
                "plan-piece",
                &piece,
                &format!("must be a multiple of {} KiB, at most {} MiB", CHECK_BYTES >> 10, BLOCK_BYTES_MAX >> 20),
            );
        }
        let c = &self.ceft;
        if !(c.thresholds.cpu_saturated > 0.0 && c.thresholds.cpu_saturated <= 1.0) {
            return err("ceft-cpu-saturated", &c.thresholds.cpu_saturated, "must be above 0 and at most 1");
        }
        if !(c.thresholds.load_heavy >= 0.0 && c.thresholds.load_heavy.is_finite()) {
            return err("ceft-load-heavy", &c.thresholds.load_heavy, "must be at least 0");
        }
        if c.probe_interval.is_zero() {
            return err("ceft-probe-interval", &format!("{:?}", c.probe_interval), "must be positive");
        }
        if c.explore_interval.is_zero() {
            return err("ceft-explore-interval", &format!("{:?}", c.explore_interval), "must be positive");
        }
        Ok(())
    }
}

/// What the server said about itself in a reply (or in answer to a probe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerState {
    /// Requests queued there when it answered.
    pub queue_len: u32,
    /// How long the request spent on its disk, in microseconds.
    pub service_us: u32,
    /// The least progress (fraction) among the consumers reading its primary copies of this
    /// dataset; `None` when nobody does.
    pub primary_progress: Option<f64>,
    /// The node's load as its sampler last saw it (CW-1), in answers to probes.
    pub node_load: Option<NodeLoad>,
    /// The least depth among backup reads queued there (`Service::depth`).
    pub backup_depth: Option<u8>,
}

/// What the engine knows about one server, from this consumer's point of view.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeView {
    pub outstanding: u32,
    pub replies: u64,
    /// Time from sending a request to its reply, smoothed (seconds).
    pub latency_secs: Option<f64>,
    /// Bytes per second this server delivered to us while we had requests there, smoothed.
    pub rate_bytes_per_sec: Option<f64>,
    pub last_state: Option<ServerState>,
    /// Our requests outstanding there when `last_state` came: the part of its queue that
    /// could be ours.
    pub outstanding_at_state: u32,
    pub last_reply: Option<Time>,
    /// When `last_state` came.
    pub state_at: Option<Time>,
    /// The server's disk speed, from its reported service times, smoothed (bytes/s).
    pub disk_bytes_per_sec: Option<f64>,
    /// The disk speeds the server itself reported having measured (its bytes over busy time
    /// of its last reads, every consumer's), bytes/s: see [`NodeView::reported_disk_bytes_per_sec`].
    pub reports: RecentReports,
    /// The server's disk speed from its replies to us only, smoothed (bytes/s).
    pub replied_disk_bytes_per_sec: Option<f64>,
    /// The averages `rate_bytes_per_sec` and `replied_disk_bytes_per_sec` are read from.
    pub delivered: RateAverage,
    pub replied: RateAverage,
}

/// Figures a server's reported disk speed is the median of. A real disk's figure can be a
/// fifth off now and then (a kernel throttle lets reads through in bursts; two CPUs shared by
/// five processes delay some): the median of three drops a lone outlier and follows a real
/// change after two figures, where an average would carry the outlier along and lag a change.
pub const RECENT_REPORTS: usize = 3;

/// A server's last `RECENT_REPORTS` reported figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RecentReports {
    figures: [f64; RECENT_REPORTS],
    seen: usize,
}

impl RecentReports {
    /// Figures holding only `figure`.
    pub fn of(figure: f64) -> RecentReports {
        let mut r = RecentReports::default();
        r.push(figure);
        r
    }

    pub fn push(&mut self, figure: f64) {
        self.figures[self.seen % RECENT_REPORTS] = figure;
        self.seen += 1;
    }

    /// The median of the figures so far (of the last one or two, before there are three:
    /// with two, the lower, so that no decision rests on one high figure alone).
    pub fn median(&self) -> Option<f64> {
        let n = self.seen.min(RECENT_REPORTS);
        if n == 0 {
            return None;
        }
        let mut f = self.figures[..n].to_vec();
        f.sort_by(f64::total_cmp);
        Some(f[(n - 1) / 2])
    }
}

/// A smoothed rate: bytes and seconds are summed apart, both decaying with the time the
/// samples cover (`tau`), and the rate is their ratio. So intervals weigh by their length,
/// and the average remembers the last `tau` or so of time whatever the requests' size or
/// the disk's speed. An average of each interval's own rate does neither: where replies come
/// in bursts (a kernel throttle lets a disk's reads through a slice at a time; a disk serving
/// two reads at once ends them close together), a reply that took a tenth of a millisecond
/// counts as a disk ten times its speed, and a memory of a few replies spans a few
/// milliseconds of a fast disk, far less than a throttle's slice.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateAverage {
    bytes: f64,
    secs: f64,
}

impl RateAverage {
    /// Add `bytes` moved in `secs`, forgetting the past by `e^(-secs / tau)`.
    pub fn note(&mut self, bytes: u64, secs: f64, tau: f64) {
        if secs <= 0.0 {
            return;
        }
        let keep = (-secs / tau).exp();
        self.bytes = self.bytes * keep + bytes as f64;
        self.secs = self.secs * keep + secs;
    }

    pub fn rate(&self) -> Option<f64> {
        (self.secs > 0.0).then(|| self.bytes / self.secs)
    }

    /// The time the average covers (its decayed seconds): how far to trust it, at most
    /// `tau` or so once it has seen that much.
    pub fn span_secs(&self) -> f64 {
        self.secs
    }
}

impl NodeView {
    /// Requests queued at the server when it last answered, anyone's.
    pub fn queued(&self) -> Option<u32> {
        self.last_state.map(|s| s.queue_len)
    }

    /// Whether the server held requests that are not ours when it last answered: another
    /// consumer reads there too. Judged against what we had outstanding then, not now: a
    /// reply or two later, our own requests in its figure counted as someone else's, and on
    /// real disks with no fault a ring of consumers kept sending each other to their backups.
    pub fn holds_others(&self) -> bool {
        self.queued().is_some_and(|q| q > self.outstanding_at_state)
    }

    /// Whether this server delivered us more than `gap` (a fraction) below `speed` (bytes/s).
    /// Judged only once what it delivered covers half a server meter's window: at a read's
    /// start the figure holds the first round trips, and a real disk's first figure its
    /// first burst.
    pub fn delivers_below(&self, speed: f64, gap: f64) -> bool {
        self.delivered.span_secs() >= crate::handoff::RateMeter::WINDOW_SECS / 2.0
            && self.rate_bytes_per_sec.is_some_and(|r| r < speed * (1.0 - gap))
    }

    /// The server's disk speed as it reported having measured it: the median of its last
    /// `RECENT_REPORTS` figures.
    pub fn reported_disk_bytes_per_sec(&self) -> Option<f64> {
        self.reports.median()
    }

    /// The server's measured disk speed: its own figure, else what its replies to us showed.
    pub fn disk_speed(&self) -> Option<f64> {
        self.reported_disk_bytes_per_sec().or(self.replied_disk_bytes_per_sec).filter(|r| *r > 0.0)
    }
}

/// Disks measured within this fraction of the fastest count as equally fast. A disk that
/// alternates between two files measures slower than one that does not (a seek per block
/// costs 13% with 1 MiB blocks at 32 MiB/s and 4 ms seeks); planning on that difference
/// would send reads to backups, and so make seeks, with no fault at all.
pub const EQUAL_WITHIN: f64 = 0.15;

/// The speed of a healthy disk, against which the others are judged: the fastest figure
/// that another is within `EQUAL_WITHIN` of, else the fastest (`None`: no figures yet). A
/// real disk's figure can spike far above what it can keep up: on 8 servers each capped by
/// the kernel at 83 MB/s, one reported 132 (a throttle's budget saved over a pause, spent at
/// once), and against it healthy disks at 73-74 measured under `FAR_BELOW` of the fastest:
/// slow at once, their readers sent to backups with no fault (the likely cause of a run that
/// read 6.4% of its bytes from backups and took 1.5 s longer than the others). A figure no
/// other disk comes near is believed only when none is (two disks, one slow).
pub fn healthy_speed(figures: &[Option<f64>]) -> Option<f64> {
    let mut sorted: Vec<f64> = figures.iter().flatten().copied().collect();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let fastest = *sorted.first()?;
    Some(sorted.windows(2).find(|w| w[1] >= w[0] * (1.0 - EQUAL_WITHIN)).map_or(fastest, |w| w[0]))
}

/// What a policy may look at when it picks a server.
#[derive(Debug)]
pub struct RouteView<'a> {
    pub now: Time,
    pub nodes: &'a BTreeMap<NodeId, NodeView>,
    /// This consumer's progress as a fraction of its partition.
    pub own_fraction: f64,
    /// One block as a fraction of the partition (how coarse progress is).
    pub block_fraction: f64,
    /// The partition's size, bytes.
    pub total_bytes: u64,
    pub window: u32,
    /// The fragment of the piece being placed (in `pick`).
    pub fragment: Option<FragmentId>,
    /// This consumer's requests ask its servers for phase slots (`Service::phased`): it
    /// reads one fragment, so its disks are a pair that can take turns.
    pub phased: bool,
}

impl<'a> RouteView<'a> {
    /// The speed of a healthy disk among every server this consumer has a figure for
    /// ([`healthy_speed`]).
    pub fn healthy_disk_speed(&self) -> Option<f64> {
        healthy_speed(&self.nodes.values().map(NodeView::disk_speed).collect::<Vec<_>>())
    }

    /// One block, in bytes (at least one).
    pub fn block_bytes(&self) -> f64 {
        (self.block_fraction * self.total_bytes as f64).max(1.0)
    }

    /// A view for policies' unit tests: time zero, nothing done, a gigabyte partition of a
    /// hundred blocks, four in flight; tests change what they need.
    #[cfg(test)]
    pub(crate) fn test(nodes: &'a BTreeMap<NodeId, NodeView>) -> RouteView<'a> {
        RouteView {
            now: Time::ZERO,
            nodes,
            own_fraction: 0.0,
            block_fraction: 0.01,
            total_bytes: 1 << 30,
            window: 4,
            fragment: None,
            phased: true,
        }
    }

    pub fn node(&self, n: NodeId) -> NodeView {
        self.nodes.get(&n).copied().unwrap_or_default()
    }

    pub fn outstanding_at(&self, node: NodeId) -> u32 {
        self.node(node).outstanding
    }
}

/// A policy's answer for the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Send it to this server (one of the holders offered).
    To(NodeId),
    /// Not now: every server this policy would use has its share in flight.
    Hold,
}

/// The part of a read policy that differs between policies. The defaults are those of a
/// policy that does not adapt (static, mirror): progress in bytes, plain furthest-behind
/// service, no end-of-scan steal, no progress notices, no probes.
pub trait RoutePolicy: Send + fmt::Debug {
    fn kind(&self) -> ReadPolicyKind;
    /// The progress metric sent with requests.
    fn metric(&self) -> ProgressMetric {
        ProgressMetric::Bytes
    }
    /// What the servers should do with this consumer's requests.
    fn service(&self) -> Service {
        Service::FURTHEST_BEHIND
    }
    /// The share of `node`'s disk planned for this consumer's reads of `fragment`
    /// (`Service::share`; 0: no plan).
    fn share(&self, _fragment: FragmentId, _node: NodeId) -> u16 {
        0
    }
    /// The dataset's layout, told once before any pick.
    fn on_layout(&mut self, _layout: &Layout) {}
    /// Requests in flight this policy wants now, given the consumer's window `base`.
    fn window(&self, base: u32) -> u32 {
        base
    }
    /// Whether this policy may move queued requests between copies at the end of a scan.
    fn steals_at_end(&self) -> bool {
        false
    }
    /// Whether, at the end of a scan, a server that still has some of this consumer's
    /// requests may take one from a slower copy's longer line (slow lines, in the engine's
    /// module docs): for policies that keep as many requests at every copy, whatever its
    /// speed.
    fn steals_from_slow_lines(&self) -> bool {
        false
    }
    /// Whether servers should hear of this consumer's progress between requests.
    fn notifies_progress(&self) -> bool {
        false
    }
    /// Whether a range that spans fragments reads its part of each at the same pace
    /// (`ReadEngine::add_pieces`) rather than one after another.
    fn reads_in_step(&self) -> bool {
        false
    }
    /// The longest request this policy makes: longer pieces are read in parts of at most
    /// this many bytes (`Piece::split`); `None`: as they come, whole blocks for a scan.
    fn piece_bytes(&self) -> Option<u32> {
        None
    }
    /// The request size of the end of a read: the last window of whole blocks of each
    /// fragment is read in pieces of at most this many bytes (`ReadEngine::add_pieces`);
    /// `None`: as the rest.
    fn tail_piece_bytes(&self) -> Option<u32> {
        None
    }
    /// A range was added to the read: the fraction of each fragment it covers.
    fn on_range(&mut self, _parts: &BTreeMap<FragmentId, f64>) {}
    /// Moves whenever holders may have been dropped (`drops`): the engine then takes back
    /// the requests it has queued at them and sends them again.
    fn drop_epoch(&self) -> u64 {
        0
    }
    /// Whether the policy no longer reads `fragment` from `node`: requests queued there come
    /// back (gd-plan: a plan back to primaries only, or one that strands them at a slow disk).
    fn drops(&self, _fragment: FragmentId, _node: NodeId) -> bool {
        false
    }
    /// Pick a server for the next request. `holders` are the live servers holding the
    /// piece, the primary copy first; never empty. A policy that holds must have requests in
    /// flight (the engine checks), so a hold never stalls a read.
    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick;
    /// A reply with data came back from `node`.
    fn on_reply(&mut self, _view: &RouteView<'_>, _node: NodeId) {}
    /// A server told us its state (in a reply, or answering a probe).
    fn on_state(&mut self, _now: Time, _node: NodeId, _state: &ServerState) {}
    /// A server answered a probe (after `on_state`). A decision taken only at picks waits
    /// for a reply to free a slot of the window, once a slow block where the window waits at
    /// a slow disk: the consumer that most needs its backup would judge it last.
    fn on_answer(&mut self, _view: &RouteView<'_>, _node: NodeId) {}
    /// When `poll_probe` will next have a server to ask, if it will: the driver wakes the
    /// engine then even if no reply arrives (a consumer whose disk is slow hears from it
    /// seldom, and must not probe its backups as seldom).
    fn probe_at(&self, _view: &RouteView<'_>) -> Option<Time> {
        None
    }
    /// A server to ask for its state now, if any (GD-3's periodic progress).
    fn poll_probe(&mut self, _view: &RouteView<'_>) -> Option<NodeId> {
        None
    }
}

/// GD-8: always the primary copy (the first live holder, so a dead primary still fails over).
#[derive(Debug, Default)]
pub struct Static;

impl RoutePolicy for Static {
    fn kind(&self) -> ReadPolicyKind {
        ReadPolicyKind::Static
    }
    fn pick(&mut self, _view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        Pick::To(holders[0])
    }
}

/// The request size of the GD policies whose servers run a consumer's requests back to back
/// (gd-batch, gd-share): 512 KiB pieces of larger blocks. A server on a chain around a slow
/// disk favours a neighbour's backup reads only while that neighbour lags, so each hop holds a
/// lag of about a request, and on short scans over long rings the far consumers finished that
/// much early; runs, counted in MiB whatever the request size (`sched::RUN_MAX`), keep the
/// seeks as few. On `ganges sim generality` (12 configurations, seeds 1-3) the least of
/// gd-batch rose from 90.9-92.3% of the layout-aware ideal to 94.0-94.5%, and of gd-share from
/// 84.0-86.4% to 90.9-91.5%; 256 KiB pieces, or the window kept at as many bytes, did less
/// for one or the other. On 4 real servers with one disk at a quarter, both held
/// 99.6-100.6% of the ideal, at 0.1-0.2 more CPU s/GB. gd and gd-rel (GD-1, GD-2) have no
/// runs: every switch between their two consumers costs a disk a seek, and half-size
/// requests doubled those (their least fell about a point).
pub const RUN_PIECE_BYTES: u32 = 512 << 10;
const _: () = assert!(RUN_PIECE_BYTES.is_multiple_of(crate::shape::CHECK_BYTES), "pieces read whole checksum units");

/// GD-1 / GD-2 consumer side: round-robin to start, then each reply pulls the next request
/// to the server that sent it (river §3.3).
///
/// **gd-share (ours)** is gd-batch whose servers learn the share each consumer needs of
/// them: furthest behind with runs, and levelled (`sched::FurthestBehind`), so each server
/// learns, as a bias in blocks, how far behind a reader must stand to get the share its
/// other copy leaves it, and serves that share with the readers level. Its servers used to
/// learn weights and serve them by credits (as gd-plan's servers serve its planned shares),
/// which on 10 disks at 20 MiB/s with one at 0.35 of its speed held 90.9-92.7% of the
/// layout-aware ideal whatever the learning gain: credits let runs of 8 MiB (0.4 s there)
/// fall so that a consumer's two disks both served others, and the consumers ended up to a
/// fifth of the scan apart. Levelled, 93.7-95.8% (seeds 1-3); its least over
/// `ganges sim generality`'s 12 configurations rose from 90.9% to 93.3% (seeds 1-3), and
/// `ganges sim fault-schedule` from 95.7-96.9% to 97.6-98.2%.
#[derive(Debug)]
pub struct Graduated {
    kind: ReadPolicyKind,
    metric: ProgressMetric,
    runs: bool,
    /// Its servers level its progress with their other readers' (`Service::level`).
    level: bool,
    pulls: Pulls,
}

/// Replies a consumer keeps that have not yet pulled a request ([`Pulls::push`]): far more
/// than a window, so only a long scan's leftovers are dropped.
pub const PULLS_MAX: usize = 256;

/// Servers whose reply has not yet pulled a request, oldest first, with a round-robin
/// fallback: the GD pull rule, shared by the GD policies.
#[derive(Debug, Default)]
pub struct Pulls {
    queue: VecDeque<NodeId>,
    round_robin: usize,
}

impl Pulls {
    /// A reply from `node` pulls the next request to it: one entry per reply, consumed by
    /// the next request the pull rule places. A policy that places some requests by another
    /// rule (gd-plan's two queued at each holder) leaves entries behind, which later
    /// requests follow; at most `PULLS_MAX` are kept, the newest.
    pub fn push(&mut self, node: NodeId) {
        if self.queue.len() >= PULLS_MAX {
            self.queue.pop_front();
        }
        self.queue.push_back(node);
    }

    /// The server the next request goes to, among `allowed`: the server of the oldest reply
    /// that holds the piece, else the one with the fewest of our requests outstanding, in
    /// turn among equals. A slow server keeps more outstanding, so reads whose pieces are
    /// seldom on the server that just answered (random reads, a partition across fragments)
    /// move away from it as a scan's pulls do; in turn alone, a slow server got its half of
    /// them and the reads waited on it.
    pub fn next(&mut self, view: &RouteView<'_>, allowed: &[NodeId]) -> NodeId {
        while let Some(n) = self.queue.pop_front() {
            if allowed.contains(&n) {
                return n;
            }
        }
        let first = self.round_robin % allowed.len();
        self.round_robin += 1;
        let in_turn = allowed[first..].iter().chain(&allowed[..first]);
        *in_turn.min_by_key(|n| view.outstanding_at(**n)).expect("a piece has holders")
    }
}

/// The servers a consumer has met, each asked for its state at once and then every
/// `interval`: the probe schedule gd-pc, gd-rr and ceft share. gd-pc and gd-rr probe their
/// backups only while they send them nothing (a backup they read from reports in its
/// replies); ceft asks busy nodes too (a node's load comes only in answers to probes).
#[derive(Debug, Default)]
pub struct Probes {
    last: BTreeMap<NodeId, Option<Time>>,
}

/// Which of the servers met [`Probes::due`] may pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeWhom {
    /// Only those with none of this consumer's requests outstanding.
    Idle,
    /// Every one.
    All,
}

impl ProbeWhom {
    /// Whether `node` is one of these.
    fn may_probe(self, view: &RouteView<'_>, node: NodeId) -> bool {
        self == ProbeWhom::All || view.node(node).outstanding == 0
    }
}

impl Probes {
    /// Remember these servers.
    pub fn meet(&mut self, nodes: &[NodeId]) {
        for &n in nodes {
            self.last.entry(n).or_insert(None);
        }
    }

    /// When the next of these servers falls due (now for one never probed).
    pub fn next_at(&self, view: &RouteView<'_>, interval: Duration, whom: ProbeWhom) -> Option<Time> {
        self.last
            .iter()
            .filter(|(n, _)| whom.may_probe(view, **n))
            .map(|(_, last)| last.map_or(view.now, |t| t + interval))
            .min()
    }

    /// A server due for a probe now, if any; it counts as probed.
    pub fn due(&mut self, view: &RouteView<'_>, interval: Duration, whom: ProbeWhom) -> Option<NodeId> {
        let now = view.now;
        let (&n, _) = self
            .last
            .iter()
            .find(|(n, last)| whom.may_probe(view, **n) && last.is_none_or(|t| now.since(t) >= interval))?;
        self.last.insert(n, Some(now));
        Some(n)
    }
}

impl Graduated {
    pub fn new(kind: ReadPolicyKind, metric: ProgressMetric, runs: bool, level: bool) -> Graduated {
        Graduated { kind, metric, runs, level, pulls: Pulls::default() }
    }
}

impl RoutePolicy for Graduated {
    fn kind(&self) -> ReadPolicyKind {
        self.kind
    }
    fn metric(&self) -> ProgressMetric {
        self.metric
    }
    fn service(&self) -> Service {
        Service { runs: self.runs, level: self.level, ..Service::FURTHEST_BEHIND }
    }
    fn steals_at_end(&self) -> bool {
        true
    }
    fn steals_from_slow_lines(&self) -> bool {
        true
    }
    fn notifies_progress(&self) -> bool {
        true
    }
    fn piece_bytes(&self) -> Option<u32> {
        self.runs.then_some(RUN_PIECE_BYTES)
    }
    fn tail_piece_bytes(&self) -> Option<u32> {
        // With runs every piece is this size already.
        Some(RUN_PIECE_BYTES)
    }
    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        Pick::To(self.pulls.next(view, holders))
    }
    fn on_reply(&mut self, _view: &RouteView<'_>, node: NodeId) {
        self.pulls.push(node);
    }
}

/// GD-9, CEFT-PVFS's "double degree of parallelism": consecutive requests alternate over the
/// copies (both mirror groups at once), whatever the servers' speeds. The non-adaptive
/// counterpart of GD on the same layout.
#[derive(Debug, Default)]
pub struct Mirror {
    next: usize,
}

impl RoutePolicy for Mirror {
    fn kind(&self) -> ReadPolicyKind {
        ReadPolicyKind::Mirror
    }
    fn pick(&mut self, _view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        let n = holders[self.next % holders.len()];
        self.next += 1;
        Pick::To(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_figures_are_the_median_of_the_last_three() {
        let mut r = RecentReports::default();
        assert_eq!(r.median(), None);
        r.push(100.0);
        assert_eq!(r.median(), Some(100.0));
        r.push(140.0);
        assert_eq!(r.median(), Some(100.0), "with two, the lower");
        r.push(95.0);
        assert_eq!(r.median(), Some(100.0), "an outlier alone moves nothing");
        r.push(50.0);
        assert_eq!(r.median(), Some(95.0));
        r.push(50.0);
        assert_eq!(r.median(), Some(50.0), "a change shows after two figures");
    }

    /// Replies in bursts (a throttled disk at 60 MiB/s ends a 30 ms read, then one 0.1 ms
    /// later): the average is the disk's rate, not the mean of the bursts' rates.
    #[test]
    fn a_rate_average_weighs_intervals_by_their_length() {
        const MIB: u64 = 1 << 20;
        let mut a = RateAverage::default();
        assert_eq!(a.rate(), None);
        for _ in 0..50 {
            a.note(MIB, 0.0332, 0.25);
            a.note(MIB, 0.0001, 0.25);
        }
        // Within a percent or so (a mean of the rates: 5 GB/s).
        let r = a.rate().unwrap();
        assert!((r / (60.0 * MIB as f64) - 1.0).abs() < 0.02, "{r}");
        // The past fades with time, not with samples: after a second at half the speed, the
        // average is the new speed, whatever the samples' size.
        let mut big = a;
        let mut small = a;
        for _ in 0..30 {
            big.note(MIB, 1.0 / 30.0, 0.25);
        }
        for _ in 0..120 {
            small.note(MIB / 4, 1.0 / 120.0, 0.25);
        }
        let (rb, rs) = (big.rate().unwrap(), small.rate().unwrap());
        assert!((rb / rs - 1.0).abs() < 1e-3, "{rb} {rs}");
        assert!((rb / (30.0 * MIB as f64) - 1.0).abs() < 0.05, "{rb}");
    }
}
