//! Server-side schedulers: which queued request the disk runs next.
//!
//! A server holds requests from several consumers (under chained declustering, the consumers
//! whose primary or backup copy it stores). When its disk is free it asks its scheduler for
//! the next one. Each request names the *discipline* its consumer's read policy wants, so
//! consumers with different policies can share servers:
//! - **furthest behind** (GD-1, GD-2, GD-3; river §3.3): serve the consumer whose progress is
//!   lowest, so a consumer slowed by its other server catches up here. Progress rides on every
//!   request and on progress notices between requests (`update_progress`); its metric is the
//!   consumer's, bytes received (GD-1) or the fraction of its own partition (GD-2). A
//!   consumer whose requests ask to be **levelled** (gd, gd-rel, gd-share; ours, see
//!   [`FurthestBehind`]) is compared with a learned bias that takes away the standing lag
//!   whole-request steps leave between a disk's readers.
//! - **longest queue** (GD-4; virtual-streams §3.1.2): serve the consumer with the most
//!   requests queued here, because a consumer whose other servers are slow sends more of its
//!   requests here. A guard serves the consumer furthest behind (by the share of its scan left,
//!   from the progress its requests carry) every `GUARD_EVERY` picks, or as often as the
//!   requests ask: no consumer starves (lesson 4), and the consumers of a chain around a slow
//!   disk get the graded shares that queue lengths alone cannot give them.
//!
//! and whether it wants **runs** (GD-5; virtual-streams §3.3): once a consumer is chosen, keep
//! serving its queued requests back to back, up to `RUN_MAX`, while they are on the file
//! under the head (so each one saves a seek) and while that does not break the discipline's
//! goal (for furthest-behind: the consumer is not more than `RUN_SLACK_JOBS` requests' worth
//! of progress ahead of the one furthest behind, a slack that shrinks as its scan ends). A
//! consumer that wants runs and has requests on two files here (a logical partition read in
//! step) is served on the head's file first.
//!
//! - **planned** (gd-plan, ours; see [`PlannedShares`]): each consumer's share of this disk,
//!   computed by the consumer from every server's speed, rides on its requests; served by
//!   credits, a lagging consumer first, with runs and anticipation.
//!
//! Ties go to the stream whose next request is on the file under the head, then to the
//! oldest request. [`Fifo`] ignores all of this: the baseline of a plain file server.
//!
//! Schedulers are pure: the server feeds them jobs and the disk head, and carries out the
//! choice; the simulator drives the same objects.

use crate::disk::FileKey;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub type JobId = u64;

/// Longest run of one consumer's requests served back to back (GD-5), in `PLAN_UNIT_BYTES`
/// of its requests (`plan_units`: sixteen of 512 KiB). Eight MiB at 32 MiB/s is a quarter
/// second: long enough to make seeks rare, short enough that the other consumer of the disk
/// waits at most that long.
pub const RUN_MAX: u32 = 8;
/// How far ahead, in `PLAN_UNIT_BYTES` of its own progress, a furthest-behind run may take a
/// consumer before the one furthest behind gets the disk back, at the start of its scan.
/// The slack shrinks in proportion to what the consumer has left to read, so the gaps that
/// runs open close as the scan ends. With a fixed slack every server on a chain let its
/// two readers drift that far apart: consumers finished up to 8% of a scan apart (a 64 MiB
/// fragment at 32 MiB/s) while the disks of the early ones idled, and gd-batch read 86 to
/// 91% of the layout-aware ideal with one slow disk where gd, without runs, read 91 to 93.
/// Shrinking, it reads 90 to 95 there (`ganges sim generality`, `ganges sim bench-scan`).
pub const RUN_SLACK_JOBS: f64 = 4.0;
/// The request size runs (`RUN_MAX`, `RUN_SLACK_JOBS`), the share disciplines' counts
/// (credits, debts and lags, and the end of a scan) and gd-plan's window were tuned in.
/// Smaller requests count proportionally more of them ([`plan_units`]), so the schedule is
/// the same in bytes and in time whatever the block or piece size; larger ones are counted
/// as they are. Counted in requests, small blocks made runs short (more seeks between files)
/// and gd-plan's window too small to keep a disk busy.
pub const PLAN_UNIT_BYTES: u64 = 1 << 20;

/// How many requests of `block_bytes` count as one of `PLAN_UNIT_BYTES`: their ratio, at
/// least 1.
pub fn plan_units(block_bytes: u64) -> f64 {
    (PLAN_UNIT_BYTES as f64 / block_bytes.max(1) as f64).max(1.0)
}
/// Every this many picks, longest-queue serves the consumer furthest behind (the share of its
/// scan left, by the progress on its requests), unless the requests ask for another interval
/// (`Service::guard_every`, gd-rr's `guard_every` setting). The paper's guard (virtual-streams
/// §3.1.2, lesson 4: no consumer starves) serves the one that waited longest; the one furthest
/// behind cannot starve either, since a consumer nobody serves falls behind.
///
/// Why furthest behind: on a ring of consumers around one slow disk, the balanced shares of
/// each disk between its own consumer and its neighbour in trouble are graded along the ring
/// (0.66 of the disk next to the slow one down to 0.09 at the far end of 8). Queue lengths
/// cannot tell these apart: longest queue with a longest-wait guard split each disk about half
/// and half, and the two consumers next to the slow disk finished last, at 86-89% of the
/// layout-aware ideal on 8 real servers. With the guard by progress, the disk next to the slow
/// one serves the slow disk's consumer more, and the far end less: 94-99%.
///
/// Every pick, by default: the longer queue then decides only between consumers equally far
/// behind. A consumer's queue at a disk is long when it moved its reads there, not when it
/// needs that disk most. With the longer queue deciding every second pick, on 24 disks with
/// 16 at a quarter of their speed, two by two, a slow disk between a reader whose both copies
/// are slow and one with a fast backup served the second half the time, and a 4 s scan read
/// 88.7% of the layout-aware ideal (93.9% guarded at every pick; `ganges sim generality`'s
/// least for gd-rr rose from 88.7% to 93.9%). The cost: a disk shared by two readers takes
/// no runs (on the default bench with one slow disk, 95.5% -> 94.0%).
pub const GUARD_EVERY: u8 = 1;
/// A primary consumer that has sent nothing for this long no longer counts as reading
/// (its scan finished or it died), so backups may use this server freely.
pub const PRIMARY_STALE_AFTER: Duration = Duration::from_secs(1);

/// One consumer's stream of requests at one server: the connection it came on and the
/// stream id the client chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamKey {
    pub conn: u64,
    pub stream: u64,
}

/// How a consumer measures its progress (chosen by its read policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgressMetric {
    /// Bytes received so far (GD-1).
    Bytes,
    /// Fraction of the consumer's own partition received (GD-2).
    Fraction,
}

/// A consumer's progress as carried on each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub metric: ProgressMetric,
}

impl Progress {
    /// The value schedulers compare: lower is further behind.
    pub fn key(&self) -> f64 {
        match self.metric {
            ProgressMetric::Bytes => self.done_bytes as f64,
            ProgressMetric::Fraction => self.fraction(),
        }
    }

    /// Progress as a fraction of the partition, whatever the metric.
    pub fn fraction(&self) -> f64 {
        if self.total_bytes == 0 { 1.0 } else { self.done_bytes as f64 / self.total_bytes as f64 }
    }

    /// The fraction of the partition a key of this metric stands for (`key`'s inverse).
    fn fraction_at(&self, key: f64) -> f64 {
        match self.metric {
            ProgressMetric::Bytes => key / self.total_bytes.max(1) as f64,
            ProgressMetric::Fraction => key,
        }
    }

    /// How much `bytes` of data moves the key.
    fn key_step(&self, bytes: u64) -> f64 {
        match self.metric {
            ProgressMetric::Bytes => bytes as f64,
            ProgressMetric::Fraction => bytes as f64 / self.total_bytes.max(1) as f64,
        }
    }
}

/// Which server-side rule a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Discipline {
    FurthestBehind,
    LongestQueue,
    /// Ours: shares planned by the consumers from every server's rate (`Service::share`),
    /// corrected by the current lag (see [`PlannedShares`]).
    Planned,
}

impl Discipline {
    pub const ALL: [Discipline; 3] = [Discipline::FurthestBehind, Discipline::LongestQueue, Discipline::Planned];

    /// The period a server's phase slots repeat with under this discipline, counted from
    /// whole seconds of the wall clock (see [`PlannedShares`]); `None`: no slots, so where in
    /// the second a scan starts does not matter to it.
    pub fn phase_period(self) -> Option<Duration> {
        match self {
            Discipline::Planned => ShareSettings::PLANNED.phase,
            _ => None,
        }
    }

    fn build(self) -> Box<dyn Scheduler> {
        match self {
            Discipline::FurthestBehind => Box::<FurthestBehind>::default(),
            Discipline::LongestQueue => Box::<LongestQueue>::default(),
            Discipline::Planned => Box::new(PlannedShares::planned()),
        }
    }
}

/// A request's scheduling wishes: a discipline, whether runs (GD-5) are welcome, whether
/// the server may hand it to another server holding a copy (GD-6), the share of the
/// server's disk the consumer's plan gives it (the planned discipline only), and which copy
/// of its fragment it reads (where a phased disk puts its slot: see [`PlannedShares`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Service {
    pub discipline: Discipline,
    pub runs: bool,
    pub handoff: bool,
    /// In units of 1/`SHARE_ONE` of the server's disk time; 0 when the consumer has no plan.
    #[serde(default)]
    pub share: u16,
    /// The copy read: 0 the primary, 1 the first backup, ...; at most `COPY_MAX`.
    #[serde(default)]
    pub copy: u8,
    /// The consumer reads one fragment, so a phased disk's slots can make its two disks take
    /// turns at it; one reading several at once gains nothing from slots, only waits, and a
    /// disk serving such a stream does not phase (see [`PlannedShares`]).
    #[serde(default)]
    pub phased: bool,
    /// Longest queue: serve the stream that waited longest every this many picks; 0: the
    /// server's `GUARD_EVERY`. Where streams ask for different intervals, the shortest holds.
    #[serde(default)]
    pub guard_every: u8,
    /// A backup read's place in a chain of trouble (gd-rr) or of help (gd-pc): 1 from a
    /// consumer whose primary is slow, k + 1 from one that depth-k reads queued at its
    /// primary sent off; 0 none. gd-pc marks a chain that no slow disk began (a consumer
    /// catching up on its backup's reader) with `CATCH_UP`, so a server's least depth is a
    /// slow disk's chain's wherever one reaches it.
    #[serde(default)]
    pub depth: u8,
    /// Furthest behind levels this stream's progress with the others' over time: the
    /// standing lag that whole-request steps leave is learnt and served away (see
    /// [`FurthestBehind`]). Set by the GD policies that read every copy without runs, by
    /// gd-share, and by gd-pc.
    #[serde(default)]
    pub level: bool,
}

/// The mark of a `Service::depth` in a chain of help that no slow disk began (gd-pc); the
/// depth itself is the bits below it.
pub const CATCH_UP: u8 = 0x80;

/// The highest `Service::copy` (two bits on the wire); later copies count as this one.
pub const COPY_MAX: u8 = 3;

/// `Service::share` of a consumer planned to have the whole disk.
pub const SHARE_ONE: u16 = u16::MAX;

impl Service {
    pub const FURTHEST_BEHIND: Service = Service {
        discipline: Discipline::FurthestBehind,
        runs: false,
        handoff: false,
        share: 0,
        copy: 0,
        phased: false,
        guard_every: 0,
        depth: 0,
        level: false,
    };

    /// The share as a fraction of the disk.
    pub fn share_fraction(self) -> f64 {
        self.share as f64 / SHARE_ONE as f64
    }
}

/// A queued request, as much of it as scheduling needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub stream: StreamKey,
    pub file: FileKey,
    pub bytes: u64,
    pub progress: Progress,
    pub service: Service,
    pub arrival: Time,
}

pub trait Scheduler: Send + fmt::Debug {
    fn name(&self) -> &'static str;
    /// When a `pop` that returned nothing while jobs were queued should be tried again.
    fn wake_at(&self) -> Option<Time> {
        None
    }
    fn push(&mut self, job: Job);
    /// Remove a queued job (cancelled, or its connection closed). False if not queued.
    fn remove(&mut self, id: JobId) -> bool;
    /// The job the disk should run next, given the file under the head.
    fn pop(&mut self, now: Time, head: Option<FileKey>) -> Option<Job>;
    /// A consumer reported progress without a request (it received data from elsewhere).
    fn update_progress(&mut self, _stream: StreamKey, _progress: Progress) {}
    /// Every queued job, in no particular order (for handoff selection).
    fn queued(&self) -> Vec<Job>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which scheduler a server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    /// Arrival order, whatever requests ask for.
    Fifo,
    /// Each request's own discipline (the default).
    Auto,
}

impl SchedulerKind {
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::Fifo => Box::<Fifo>::default(),
            SchedulerKind::Auto => Box::<Auto>::default(),
        }
    }
}

impl FromStr for SchedulerKind {
    type Err = crate::parse::ParseError;
    fn from_str(s: &str) -> Result<Self, crate::parse::ParseError> {
        match s {
            "fifo" => Ok(SchedulerKind::Fifo),
            "auto" => Ok(SchedulerKind::Auto),
            _ => Err(crate::parse::ParseError::unknown("scheduler", s, ["auto", "fifo"])),
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SchedulerKind::Fifo => "fifo",
            SchedulerKind::Auto => "auto",
        })
    }
}

/// Arrival order.
#[derive(Debug, Default)]
pub struct Fifo {
    queue: VecDeque<Job>,
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn push(&mut self, job: Job) {
        self.queue.push_back(job);
    }
    fn remove(&mut self, id: JobId) -> bool {
        match self.queue.iter().position(|j| j.id == id) {
            Some(i) => {
                self.queue.remove(i);
                true
            }
            None => false,
        }
    }
    fn pop(&mut self, _now: Time, _head: Option<FileKey>) -> Option<Job> {
        self.queue.pop_front()
    }
    fn queued(&self) -> Vec<Job> {
        self.queue.iter().copied().collect()
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

mod primary;
mod shares;
mod streams;
#[cfg(test)]
mod tests;

pub use primary::*;
pub use shares::*;
pub use streams::*;
