//! Server-side schedulers: which queued request the disk runs next.
//!
//! A server holds requests from several consumers (under chained declustering, the consumers
//! whose primary or backup copy it stores). When its disk is free it asks its scheduler for
//! the next one. Each request names the *discipline* its consumer's read policy wants, so
//! consumers with different policies can share servers:
//! - **furthest behind** (GD-1, GD-2, GD-3; river §3.3): serve the consumer whose progress is
//!   lowest, so a consumer slowed by its other server catches up here. Progress rides on every
//!   request and on progress notices between requests (`update_progress`); its metric is the
//!   consumer's, bytes received (GD-1) or the fraction of its own partition (GD-2).
//! - **longest queue** (GD-4; virtual-streams §3.1.2): no progress is used; serve the
//!   consumer with the most requests queued here, because a consumer whose other servers are
//!   slow sends more of its requests here. A starvation guard serves the longest-waiting
//!   consumer every `GUARD_EVERY` picks, or as often as the requests ask.
//!
//! and whether it wants **runs** (GD-5; virtual-streams §3.3): once a consumer is chosen, keep
//! serving its queued requests back to back, up to `RUN_MAX`, while they are on the file
//! under the head (so each one saves a seek) and while that does not break the discipline's
//! goal (for furthest-behind: the consumer is not more than `RUN_SLACK_JOBS` requests' worth
//! of progress ahead of the one furthest behind). A consumer that wants runs and has
//! requests on two files here (a logical partition read in step) is served on the head's
//! file first.
//!
//! - **planned** (gd-plan, ours; see [`LearnedShares`]): each consumer's share of this disk,
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

/// Longest run of one consumer's requests served back to back (GD-5). Eight 1 MiB blocks at
/// 32 MiB/s is a quarter second: long enough to make seeks rare, short enough that the other
/// consumer of the disk waits at most that long.
pub const RUN_MAX: u32 = 8;
/// How far ahead, in its own requests' worth of progress, a furthest-behind run may take a
/// consumer before the one furthest behind gets the disk back.
pub const RUN_SLACK_JOBS: f64 = 4.0;
/// The block size the planned discipline's counts (its runs, credits, debts and lags, and
/// the end of a scan) and gd-plan's window were tuned in. A dataset of smaller blocks counts
/// proportionally more of them ([`plan_units`]), so the schedule is the same in bytes and in
/// time whatever the block size; larger blocks are counted as they are. Counted in blocks,
/// small blocks made runs short (more seeks between files) and gd-plan's window too small
/// to keep a disk busy.
pub const PLAN_UNIT_BYTES: u64 = 1 << 20;

/// How many blocks of `block_bytes` the planned discipline and gd-plan count for each block
/// of their settings: `PLAN_UNIT_BYTES` over the block size, at least 1.
pub fn plan_units(block_bytes: u64) -> f64 {
    (PLAN_UNIT_BYTES as f64 / block_bytes.max(1) as f64).max(1.0)
}
/// Every this many picks, longest-queue serves the consumer that has waited longest
/// (virtual-streams §3.1.2, lesson 4: no consumer starves), unless the requests ask for
/// another interval (`Service::guard_every`, gd-rr's `guard_every` setting). Every second
/// pick: the longer queue still decides half of them, and a disk shared by a reader in
/// trouble and its own primary reader is not given over to the first (whose queue is the
/// longer because it moved its requests there). A guard every run's length (8) left gd-rr
/// several points further from the ideal under slow disks than every 2.
pub const GUARD_EVERY: u8 = 2;
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
    /// Ours: furthest behind with shares learnt by integral action (see [`LearnedShares`]).
    LearnedShares,
    /// Ours: shares planned by the consumers from every server's rate (`Service::share`),
    /// corrected by the current lag (see [`LearnedShares`]).
    Planned,
}

impl Discipline {
    pub const ALL: [Discipline; 4] =
        [Discipline::FurthestBehind, Discipline::LongestQueue, Discipline::LearnedShares, Discipline::Planned];

    /// The period a server's phase slots repeat with under this discipline, counted from
    /// whole seconds of the wall clock (see [`LearnedShares`]); `None`: no slots, so where in
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
            Discipline::LearnedShares => Box::<LearnedShares>::default(),
            Discipline::Planned => Box::new(LearnedShares::planned()),
        }
    }
}

/// A request's scheduling wishes: a discipline, whether runs (GD-5) are welcome, whether
/// the server may hand it to another server holding a copy (GD-6), the share of the
/// server's disk the consumer's plan gives it (the planned discipline only), and which copy
/// of its fragment it reads (where a phased disk puts its slot: see [`LearnedShares`]).
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
    /// disk serving such a stream does not phase (see [`LearnedShares`]).
    #[serde(default)]
    pub phased: bool,
    /// Longest queue: serve the stream that waited longest every this many picks; 0: the
    /// server's `GUARD_EVERY`. Where streams ask for different intervals, the shortest holds.
    #[serde(default)]
    pub guard_every: u8,
}

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
    };

    /// The share as a fraction of the disk.
    pub fn share_fraction(self) -> f64 {
        self.share as f64 / SHARE_ONE as f64
    }

    /// One byte on the wire: bits 0-1 the discipline, bit 2 runs, bit 3 handoff, bits 4-5
    /// the copy, bit 6 phased (the share and the guard travel beside it).
    pub fn to_byte(self) -> u8 {
        (match self.discipline {
            Discipline::FurthestBehind => 0,
            Discipline::LongestQueue => 1,
            Discipline::LearnedShares => 2,
            Discipline::Planned => 3,
        }) | (u8::from(self.runs) << 2)
            | (u8::from(self.handoff) << 3)
            | (self.copy.min(COPY_MAX) << 4)
            | (u8::from(self.phased) << 6)
    }

    pub fn from_byte(b: u8, share: u16, guard_every: u8) -> Option<Service> {
        if b & !0b111_1111 != 0 {
            return None;
        }
        let discipline = match b & 0b11 {
            0 => Discipline::FurthestBehind,
            1 => Discipline::LongestQueue,
            2 => Discipline::LearnedShares,
            _ => Discipline::Planned,
        };
        Some(Service {
            discipline,
            runs: b & 4 != 0,
            handoff: b & 8 != 0,
            share,
            copy: (b >> 4) & COPY_MAX,
            phased: b & 64 != 0,
            guard_every,
        })
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(SchedulerKind::Fifo),
            "auto" => Ok(SchedulerKind::Auto),
            _ => Err(format!("unknown scheduler `{s}` (use auto or fifo)")),
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

#[derive(Debug)]
struct StreamQueue {
    jobs: VecDeque<Job>,
    /// The highest progress this stream has reported; a misbehaving client must not make
    /// progress go backwards.
    progress_key: f64,
}

/// Per-stream queues: the state every per-stream discipline shares.
#[derive(Debug, Default)]
pub struct Streams {
    streams: BTreeMap<StreamKey, StreamQueue>,
    where_is: BTreeMap<JobId, StreamKey>,
    /// The stream of the last pop and how many of its jobs ran in a row.
    run: Option<(StreamKey, u32)>,
}

impl Streams {
    fn push(&mut self, job: Job) {
        let key = job.progress.key();
        let q =
            self.streams.entry(job.stream).or_insert_with(|| StreamQueue { jobs: VecDeque::new(), progress_key: key });
        q.progress_key = q.progress_key.max(key);
        q.jobs.push_back(job);
        self.where_is.insert(job.id, job.stream);
    }

    fn remove(&mut self, id: JobId) -> bool {
        let Some(stream) = self.where_is.remove(&id) else { return false };
        let q = self.streams.get_mut(&stream).expect("where_is names a live stream");
        q.jobs.retain(|j| j.id != id);
        if q.jobs.is_empty() {
            self.streams.remove(&stream);
        }
        true
    }

    /// The job of `q` a run on the head's file would take: its first job on that file that
    /// allows runs (a stream reading two files at this server, as a logical partition does,
    /// then finishes what it has on one before moving the head), if any.
    fn on_head(q: &StreamQueue, head: Option<FileKey>) -> Option<usize> {
        let head = head?;
        q.jobs.iter().position(|j| j.file == head && j.service.runs)
    }

    /// Where `q`'s next job is: its first on the head's file if that allows runs, else its
    /// oldest.
    fn next(q: &StreamQueue, head: Option<FileKey>) -> usize {
        Self::on_head(q, head).unwrap_or(0)
    }

    /// Take the chosen stream's next job.
    fn take(&mut self, key: StreamKey, head: Option<FileKey>) -> Job {
        let q = self.streams.get_mut(&key).expect("chosen stream exists");
        let job = q.jobs.remove(Self::next(q, head)).expect("streams kept non-empty");
        if q.jobs.is_empty() {
            self.streams.remove(&key);
        }
        self.where_is.remove(&job.id);
        self.run = match self.run {
            Some((k, n)) if k == key => Some((k, n + 1)),
            _ => Some((key, 1)),
        };
        job
    }

    /// The stream a run would continue with, if its next job is on the head's file and the
    /// run is shorter than `longest` jobs; the discipline still decides whether that is fair.
    fn run_candidate(&self, head: Option<FileKey>, longest: f64) -> Option<&StreamKey> {
        let (key, n) = self.run.as_ref()?;
        let q = self.streams.get(key)?;
        (Self::on_head(q, head).is_some() && f64::from(*n) < longest).then_some(key)
    }

    /// The best stream by `better(candidate, best_so_far)`, with the common tie-breaks.
    fn best_by(
        &self,
        head: Option<FileKey>,
        better: impl Fn(&StreamQueue, &StreamQueue) -> Option<bool>,
    ) -> Option<StreamKey> {
        let mut best: Option<(&StreamKey, &StreamQueue)> = None;
        for (key, q) in &self.streams {
            let take = match best {
                None => true,
                Some((_, b)) => better(q, b).unwrap_or_else(|| {
                    let q_on = Some(q.jobs[Self::next(q, head)].file) == head;
                    let b_on = Some(b.jobs[Self::next(b, head)].file) == head;
                    if q_on != b_on { q_on } else { q.jobs[0].arrival < b.jobs[0].arrival }
                }),
            };
            if take {
                best = Some((key, q));
            }
        }
        best.map(|(k, _)| *k)
    }

    fn update_progress(&mut self, stream: StreamKey, progress: Progress) {
        if let Some(q) = self.streams.get_mut(&stream) {
            q.progress_key = q.progress_key.max(progress.key());
        }
    }

    fn queued(&self) -> Vec<Job> {
        self.streams.values().flat_map(|q| q.jobs.iter().copied()).collect()
    }

    fn assert_invariants(&self) {
        let queued: usize = self.streams.values().map(|s| s.jobs.len()).sum();
        assert_eq!(queued, self.where_is.len());
        assert!(self.streams.values().all(|s| !s.jobs.is_empty()), "no empty stream kept");
    }
}

/// What tells the per-stream disciplines apart: which stream's next job the disk runs.
pub trait Rule: Send + fmt::Debug {
    fn name(&self) -> &'static str;
    /// A job is about to be queued.
    fn on_push(&mut self, _job: &Job) {}
    /// The stream to serve next; `None` when nothing is queued, or while the rule waits
    /// (see `wake_at`).
    fn choose(&mut self, s: &mut Streams, now: Time, head: Option<FileKey>) -> Option<StreamKey>;
    fn wake_at(&self) -> Option<Time> {
        None
    }
}

/// A scheduler that queues each consumer's requests as a stream and lets a [`Rule`] pick
/// the stream.
#[derive(Debug, Default)]
pub struct PerStream<R> {
    s: Streams,
    rule: R,
}

impl<R> PerStream<R> {
    pub fn assert_invariants(&self) {
        self.s.assert_invariants();
    }
}

impl<R: Rule> Scheduler for PerStream<R> {
    fn name(&self) -> &'static str {
        self.rule.name()
    }

    fn push(&mut self, job: Job) {
        self.rule.on_push(&job);
        self.s.push(job);
    }

    fn remove(&mut self, id: JobId) -> bool {
        self.s.remove(id)
    }

    fn pop(&mut self, now: Time, head: Option<FileKey>) -> Option<Job> {
        let key = self.rule.choose(&mut self.s, now, head)?;
        Some(self.s.take(key, head))
    }

    fn update_progress(&mut self, stream: StreamKey, progress: Progress) {
        self.s.update_progress(stream, progress);
    }

    fn queued(&self) -> Vec<Job> {
        self.s.queued()
    }

    fn len(&self) -> usize {
        self.s.where_is.len()
    }

    /// Only a scheduler with requests queued can be waiting. A rule whose queue emptied while
    /// it waited (its requests were cancelled or handed off) may not be asked to choose again
    /// until a request comes, so its stale deadline would wake the disk at once, again and
    /// again.
    fn wake_at(&self) -> Option<Time> {
        if self.is_empty() { None } else { self.rule.wake_at() }
    }
}

/// GD's producer-side scheduler: the consumer furthest behind first.
pub type FurthestBehind = PerStream<ByProgress>;

#[derive(Debug, Default)]
pub struct ByProgress;

impl Rule for ByProgress {
    fn name(&self) -> &'static str {
        "furthest-behind"
    }

    fn choose(&mut self, s: &mut Streams, _now: Time, head: Option<FileKey>) -> Option<StreamKey> {
        if let Some(&key) = s.run_candidate(head, f64::from(RUN_MAX)) {
            let q = &s.streams[&key];
            let others = s.streams.iter().filter(|(k, _)| **k != key).map(|(_, o)| o.progress_key);
            let slack = q.jobs[0].progress.key_step(q.jobs[0].bytes) * RUN_SLACK_JOBS;
            if others.fold(f64::INFINITY, f64::min) + slack >= q.progress_key {
                return Some(key);
            }
        }
        s.best_by(head, |q, b| (q.progress_key != b.progress_key).then_some(q.progress_key < b.progress_key))
    }
}

/// GD-4's server side: the consumer with the longest queue first, with a starvation guard.
pub type LongestQueue = PerStream<ByQueue>;

#[derive(Debug, Default)]
pub struct ByQueue {
    picks: u32,
}

impl Rule for ByQueue {
    fn name(&self) -> &'static str {
        "longest-queue"
    }

    fn choose(&mut self, s: &mut Streams, _now: Time, head: Option<FileKey>) -> Option<StreamKey> {
        self.picks = self.picks.wrapping_add(1);
        let every = s.streams.values().map(|q| q.jobs[0].service.guard_every).filter(|g| *g > 0).min();
        if s.streams.len() > 1 && self.picks.is_multiple_of(u32::from(every.unwrap_or(GUARD_EVERY))) {
            // Starvation guard: the stream whose oldest request has waited longest.
            return s.best_by(head, |q, b| {
                (q.jobs[0].arrival != b.jobs[0].arrival).then_some(q.jobs[0].arrival < b.jobs[0].arrival)
            });
        }
        if let Some(&key) = s.run_candidate(head, f64::from(RUN_MAX)) {
            return Some(key);
        }
        s.best_by(head, |q, b| (q.jobs.len() != b.jobs.len()).then_some(q.jobs.len() > b.jobs.len()))
    }
}

/// Each request's own discipline. When consumers of several disciplines wait at once, the
/// disciplines take turns, so no kind can shut another out.
#[derive(Debug)]
pub struct Auto {
    by: BTreeMap<Discipline, Box<dyn Scheduler>>,
    /// Which discipline ran last.
    last: Option<Discipline>,
}

impl Default for Auto {
    fn default() -> Self {
        Auto { by: Discipline::ALL.into_iter().map(|d| (d, d.build())).collect(), last: None }
    }
}

impl Scheduler for Auto {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn push(&mut self, job: Job) {
        self.by.get_mut(&job.service.discipline).expect("every discipline has a scheduler").push(job);
    }

    fn remove(&mut self, id: JobId) -> bool {
        self.by.values_mut().any(|s| s.remove(id))
    }

    fn pop(&mut self, now: Time, head: Option<FileKey>) -> Option<Job> {
        let ready: Vec<Discipline> = self.by.iter().filter(|(_, s)| !s.is_empty()).map(|(d, _)| *d).collect();
        // The first ready discipline after the one that ran last, in a fixed order.
        let next = match self.last {
            Some(last) => ready.iter().find(|d| **d > last).or(ready.first()).copied(),
            None => ready.first().copied(),
        }?;
        self.last = Some(next);
        self.by.get_mut(&next).expect("listed").pop(now, head)
    }

    fn update_progress(&mut self, stream: StreamKey, progress: Progress) {
        for s in self.by.values_mut() {
            s.update_progress(stream, progress);
        }
    }

    fn wake_at(&self) -> Option<Time> {
        self.by.values().filter_map(|s| s.wake_at()).min()
    }

    fn queued(&self) -> Vec<Job> {
        self.by.values().flat_map(|s| s.queued()).collect()
    }

    fn len(&self) -> usize {
        self.by.values().map(|s| s.len()).sum()
    }
}

/// Ours: furthest behind, with the share each consumer needs *learnt*.
///
/// Under furthest behind, a server can only give one consumer more than the other while
/// that consumer is behind, so a ring of servers that must give unequal shares (one slow
/// disk under chained declustering: 47% to the neighbour's consumer, less at each hop) holds
/// a progress gradient, and the consumers far from the slow disk finish early while their
/// disks then idle. Here each stream has a weight; streams behind the mean progress of the
/// server's streams gain weight, those ahead lose it (integral action, `GAIN` per block of
/// lag per pick), so once progress is level the weights keep the shares. The server serves
/// by credits on those weights plus a proportional term for the current lag, and lets a
/// stream run on the file under the head while its credit is above `-run_debt` (GD-5 runs
/// without drifting apart: the debt is paid back).
///
/// **Planned** (gd-plan, ours): the same credits and runs, but each stream's weight is the
/// share its consumer's plan gives it at this server (`Service::share`, from every server's
/// measured rate and the layout: see `ideal::plan`), so the shares are right from the first
/// request instead of learnt; the lag term still corrects what the plan got wrong. Planned
/// runs may go deeper into debt, and the disk *anticipates*: when the stream it is running
/// has nothing queued, it waits up to `ShareSettings::anticipate` for that stream's next
/// request (a reply pulls one within a round trip) before seeking to another file, within a
/// run of `RUN_MAX` or, phased (below), within the stream's slot. [`ShareSettings`] holds
/// everything that differs between the two.
///
/// **Phased** (planned streams, ours): a disk that alternates between two readers' files
/// serves each in runs, and a consumer reading from two such disks is served by both at
/// once or by neither, as the runs happen to fall: with credits alone, runs of four to six
/// blocks at each disk left consumers 130 to 200 ms without a block while the other reader
/// of each of their disks had a run, and the slowest consumer well short of its share over
/// half a second. So the disks agree on *when* each stream runs: time is cut into periods of
/// `ShareSettings::phase`, in the same phase at every server (each counts `Time` from a
/// whole second of the wall clock), and each stream has one slot a period, as long as its
/// share, readers of later copies first. Under chained declustering a consumer's slot at its
/// backup's server then comes while its primary server serves the other reader there, so
/// one of its two disks serves it nearly all the time, and over any whole period it gets
/// its share of both. The disk runs the stream whose slot a point of the next job falls in
/// (a point that moves from period to period: [`deciding_point`]), if it has a request
/// queued; otherwise credits and lag decide, as unphased (credits are earned by slot time,
/// so they agree with the slots). A stream's lag lengthens its slot by a quarter of a block
/// per block of lag each period; slots are set aside, for credits and lag alone, while a
/// stream is `PHASE_LAG_BLOCKS` behind (a plan gone wrong) or near the end of its scan
/// (`PHASE_END_BLOCKS` left), which must not wait for a slot, and while a stream that reads
/// several fragments at once is queued (`Service::phased` unset: its disks are not a pair
/// that can take turns, and it would only wait for its slots; unequal logical partitions
/// lost 3 points at four slow disks with it phased).
pub type LearnedShares = PerStream<Shares>;

/// The share disciplines' rule: learned (gd-share) or planned (gd-plan) weights, credits,
/// runs and, for planned streams, anticipation. The two differ only in these settings.
#[derive(Debug)]
pub struct Shares {
    how: ShareSettings,
    /// Weight and credit of each stream seen recently, and when it was last queued.
    state: BTreeMap<StreamKey, ShareState>,
    /// The stream whose next request the disk is waiting for, until when.
    waiting: Option<(StreamKey, Time)>,
    /// When the disk last chose (phased credits are earned over the time since).
    last_pick: Option<Time>,
    /// Smoothed time between picks while the disk is busy, in nanoseconds: about one job's
    /// service time (a phased disk gives a job to the slot that holds a point of it).
    pick_every: Option<f64>,
    /// The slots were in force at the last pick between streams: the disk phased, no
    /// stream was far behind and none near the end of its scan.
    slots_decide: bool,
}

/// What sets learned and planned shares apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareSettings {
    /// Weights come from the requests' planned shares, not from learning.
    pub planned: bool,
    /// Credit stays within this many picks either way. Bounded, a stream that lags gets the
    /// disk beyond its share until it has caught up, instead of paying the extra back as
    /// debt and keeping its lag.
    pub credit_bound: f64,
    /// How far into debt (in picks) a stream may run on the head's file.
    pub run_debt: f64,
    /// A stream this many blocks ahead of the mean of its server's streams does not run.
    pub run_lead: f64,
    /// How long the disk waits for the next request of the stream it is running (see
    /// `choose`); `None`: it does not wait.
    pub anticipate: Option<Duration>,
    /// Phased credits: the period over which each stream earns its share in one slot (see
    /// [`LearnedShares`]); `None`: every pick earns each stream its share.
    pub phase: Option<Duration>,
    /// Runs, credits, debts, leads and lags are counted in `PLAN_UNIT_BYTES` of each stream's
    /// blocks ([`plan_units`]), not in blocks.
    pub per_unit: bool,
}

impl ShareSettings {
    pub const LEARNED: ShareSettings = ShareSettings {
        planned: false,
        credit_bound: f64::INFINITY,
        run_debt: 1.0,
        run_lead: f64::INFINITY,
        anticipate: None,
        phase: None,
        per_unit: false,
    };
    /// Credits within two picks, runs one into debt (unphased, that still lets a stream of
    /// half the disk run four to six blocks: it earns half a pick each pick). With 2 ms
    /// anticipation and gd-plan's window of 6, longer runs starve the slowest consumer for
    /// longer. The period is the window adaptation is judged on, 500 ms, so that every window
    /// holds one whole period: with 1 s, a consumer whose primary is a slow disk got its
    /// backup's slot in one window and not the next. Two seeks a period cost a disk that
    /// alternates under 2% of its time. The wait is one seek of the default disk
    /// model: a request that comes within it saves two (away and back). It must cover a
    /// round trip from the server to the consumer and back, which on a loaded cluster of
    /// local processes is near a millisecond each way, not loopback's tens of
    /// microseconds: 2 ms left gd-plan about a point lower at one and two slow disks.
    pub const PLANNED: ShareSettings = ShareSettings {
        planned: true,
        credit_bound: 2.0,
        run_debt: 1.0,
        run_lead: 1.0,
        anticipate: Some(Duration::from_millis(4)),
        phase: Some(Duration::from_millis(500)),
        per_unit: true,
    };
}

impl Default for Shares {
    fn default() -> Self {
        Shares::new(ShareSettings::LEARNED)
    }
}

#[derive(Debug, Clone, Copy)]
struct ShareState {
    weight: f64,
    credit: f64,
    seen: Time,
    /// The copy its requests read (`Service::copy`): the order of its phase slot.
    copy: u8,
    /// Its requests ask for slots (`Service::phased`).
    phased: bool,
    /// Its lag behind the mean of the server's streams at the last pick it was queued for,
    /// in blocks: a phased slot is lengthened by part of it.
    lag: f64,
    /// Its largest request, in bytes: its block size (a fragment's last block may be
    /// shorter).
    block: u64,
}

impl Shares {
    /// Weight gained per pick per block of lag behind the mean. Learns a 0.5 change of share
    /// in about 20 picks with a 1-block lag: fast against a 64-block scan, slow against noise.
    const GAIN: f64 = 0.01;
    /// Credit each block of current lag is worth when choosing (the proportional term).
    const PROPORTIONAL: f64 = 1.0;
    /// Weights of streams idle this long are forgotten (their scans ended).
    const FORGET_AFTER: Duration = Duration::from_secs(1);
    const WEIGHT_MIN: f64 = 0.02;
    /// A stream this many blocks behind the mean of its server's streams sets the phase
    /// slots aside. A reader whose backup slot is a third of the period swings about two
    /// blocks either way within a period; a plan that is wrong lets it fall further.
    const PHASE_LAG_BLOCKS: f64 = 4.0;
    /// A stream with this many blocks left sets the phase slots aside: the end of a scan
    /// must not wait for a slot.
    const PHASE_END_BLOCKS: u64 = 16;
    /// Part of its lag (in blocks) a phased slot is lengthened by each period. With half, a
    /// reader three blocks behind takes 1.5 blocks a period from the disk's other reader, a
    /// tenth of its share; a quarter (with `route::plan::ON_TRACK_BLOCKS`, which leaves lags
    /// under 8 blocks to this term) kept the most half-second windows on track in the
    /// simulator.
    const PHASE_LAG_GAIN: f64 = 0.25;

    pub fn new(how: ShareSettings) -> Shares {
        Shares { how, state: BTreeMap::new(), waiting: None, last_pick: None, pick_every: None, slots_decide: false }
    }

    /// How many of `stream`'s requests count as one block of the settings (`per_unit`).
    fn units(&self, stream: &StreamKey) -> f64 {
        match self.state.get(stream) {
            Some(st) if self.how.per_unit => plan_units(st.block),
            _ => 1.0,
        }
    }

    /// Anticipation: the stream whose run the disk was on has nothing queued, but its next
    /// request is a network round trip away (each reply pulls one); waiting for it is
    /// cheaper than a seek to another file and back. True while the disk should wait: while
    /// the run is shorter than `RUN_MAX` and the stream's credit above the run debt, or,
    /// whatever the run's length and the credit, while the slots decide and the stream's slot
    /// holds `now`. Runs ended by `RUN_MAX` alone inside the running stream's slot gave the
    /// other reader one block there and cost two seeks (a third of the one-block detours in
    /// a trace of `ganges sim bench-scan` at one slow disk), and left the slot's reader a
    /// block short in that period. The slot's owner is served whatever its credit
    /// (`choose`), so it is waited for whatever its credit too: a stream that caught up by
    /// its lag outside its slot carries a debt into it, where it earns what it takes and so
    /// keeps the debt, and without the wait it lost a block of its slot at every gap in its
    /// requests.
    fn wait_for_run(&mut self, s: &mut Streams, now: Time) -> bool {
        let Some(wait) = self.how.anticipate else { return false };
        let Some((k, n)) = s.run else { return false };
        let units = self.units(&k);
        let in_run = f64::from(n) < f64::from(RUN_MAX) * units
            && self.state.get(&k).is_some_and(|st| st.credit > -self.how.run_debt * units);
        let idle_run = !s.streams.is_empty() && !s.streams.contains_key(&k) && (in_run || self.owns_slot(s, k, now));
        if !idle_run {
            return false;
        }
        match self.waiting {
            None => {
                self.waiting = Some((k, now + wait));
                true
            }
            Some((w, t)) if w == k && now < t => true,
            // It did not come: the run is over.
            _ => {
                s.run = None;
                false
            }
        }
    }

    /// Whether the slots were in force at the last pick between streams and `k`, a phased
    /// stream with nothing queued, owns the slot that holds `now`.
    fn owns_slot(&self, s: &Streams, k: StreamKey, now: Time) -> bool {
        let queued: Vec<StreamKey> = s.streams.keys().copied().collect();
        self.slots_decide
            && self.state.get(&k).is_some_and(|st| st.phased)
            && self.phase_now(&queued).is_some_and(|p| slot_owner(&self.slots(), p, now) == Some(k))
    }

    /// The phase slots of the period: one per stream seen recently, as long as
    /// its part of all their weights, laid out by copy (later copies first: under chained
    /// declustering a consumer's backup slot at one server then falls where its primary
    /// server serves the backup's other reader) and then by key. As (stream, start, length)
    /// in periods.
    fn slots(&self) -> Vec<Slot> {
        let mut order: Vec<(&StreamKey, &ShareState)> = self.state.iter().collect();
        order.sort_by_key(|(k, st)| (std::cmp::Reverse(st.copy), **k));
        let all: f64 = order.iter().map(|(_, st)| st.weight).sum();
        // A block of lag, in periods: the time of a pick.
        let block = match (self.pick_every, self.how.phase) {
            (Some(e), Some(p)) => e / p.as_nanos() as f64,
            _ => 0.0,
        };
        let lens: Vec<f64> =
            order.iter().map(|(_, st)| (st.weight / all + Self::PHASE_LAG_GAIN * st.lag * block).max(0.0)).collect();
        let total: f64 = lens.iter().sum();
        let mut start = 0.0;
        order
            .into_iter()
            .zip(lens)
            .map(|((k, _), len)| {
                let len = len / total;
                start += len;
                (*k, start - len, len)
            })
            .collect()
    }

    /// The period in nanoseconds, when the disk phases now: phased settings, and every
    /// queued stream (`queued`) asks for slots.
    fn phase_now(&self, queued: &[StreamKey]) -> Option<u64> {
        let period = self.how.phase?.as_nanos() as u64;
        (period > 0 && queued.iter().all(|k| self.state[k].phased)).then_some(period)
    }

    /// The credit each queued stream (`queued`) earns at this pick; together, one pick.
    /// Unphased, each earns its weight's part. Phased (`phase`: the period and its
    /// [`slots`](Self::slots)), each earns the part of the time since the last pick (at most a
    /// period back) that fell in its slot, and what the slot of a stream with nothing queued
    /// would have earned goes to the others by weight.
    fn gains(&self, queued: &[StreamKey], now: Time, phase: Option<&(u64, Vec<Slot>)>) -> Vec<f64> {
        let total: f64 = queued.iter().map(|k| self.state[k].weight).sum();
        let even: Vec<f64> = queued.iter().map(|k| self.state[k].weight / total).collect();
        let (Some((p, slots)), Some(last)) = (phase, self.last_pick) else { return even };
        let p = *p;
        let from = last.0.max(now.0.saturating_sub(p));
        if now.0 <= from {
            return even;
        }
        let span = (now.0 - from) as f64;
        let mut gains = vec![0.0; queued.len()];
        for &(k, start, len) in slots {
            if let Some(i) = queued.iter().position(|q| *q == k) {
                gains[i] = slot_overlap(from, now.0, p, start, len) / span;
            }
        }
        let unclaimed = (1.0 - gains.iter().sum::<f64>()).max(0.0);
        gains.iter().zip(even).map(|(g, e)| g + unclaimed * e).collect()
    }
}

/// A phase slot: the stream, and where in the period it starts and how long it lasts, in
/// periods.
type Slot = (StreamKey, f64, f64);

/// Where in the next job (0: its start, 1: its end) the slot that owns it is looked up, in
/// the period that holds `now` (`period` nanoseconds): a point that moves from period to
/// period (the golden ratio's multiples, which spread evenly), the same at every server.
/// Looked up at the job's middle, a slot's boundary was rounded the same way every period
/// whenever the jobs fell at the same points of each period: 1 MiB blocks at 32 MiB/s are
/// exactly 16 to a 500 ms period, and a reader whose slots both ended just short of a job's
/// middle lost a block a period while the jobs kept their places (in a trace of
/// `ganges sim fault-schedule` at four slow disks, 9 blocks of a 9.6-block slot and 4 of a
/// 4.2-block one in consecutive periods: 13 of the 14 of its share; two seeks a period move
/// the jobs 8 ms a period, so there it held for a few periods at a time). Moved, a job
/// across a boundary goes to each slot about as often as it overlaps it.
fn deciding_point(now: Time, period: u64) -> f64 {
    const GOLDEN: f64 = 0.618_033_988_749_895;
    ((now.0 / period.max(1)) as f64 * GOLDEN).fract()
}

/// The stream whose slot of a `period` (nanoseconds) holds `at`.
fn slot_owner(slots: &[Slot], period: u64, at: Time) -> Option<StreamKey> {
    let at = (at.0 % period) as f64 / period as f64;
    slots.iter().find(|&&(_, start, len)| at < start + len).map(|&(k, _, _)| k)
}

/// How many nanoseconds of `[from, to)` (at most `period` long) fall in the slot that starts
/// at `start` periods into each period and lasts `len` periods.
fn slot_overlap(from: u64, to: u64, period: u64, start: f64, len: f64) -> f64 {
    let base = from - from % period;
    let (a, b) = ((from - base) as f64, (to - base) as f64);
    let p = period as f64;
    // The interval reaches into the next period at most.
    [0.0, p]
        .iter()
        .map(|shift| {
            let (s, e) = (shift + start * p, shift + (start + len) * p);
            (b.min(e) - a.max(s)).max(0.0)
        })
        .sum()
}

impl PerStream<Shares> {
    /// The planned discipline: weights from the requests.
    pub fn planned() -> LearnedShares {
        PerStream { s: Streams::default(), rule: Shares::new(ShareSettings::PLANNED) }
    }

    pub fn weight(&self, stream: StreamKey) -> Option<f64> {
        self.rule.state.get(&stream).map(|s| s.weight)
    }
}

impl Rule for Shares {
    fn name(&self) -> &'static str {
        if self.how.planned { "planned" } else { "learned-shares" }
    }

    fn on_push(&mut self, job: &Job) {
        let st = self.state.entry(job.stream).or_insert(ShareState {
            weight: 1.0,
            credit: 0.0,
            seen: job.arrival,
            copy: job.service.copy,
            phased: job.service.phased,
            lag: 0.0,
            block: job.bytes,
        });
        st.seen = st.seen.max(job.arrival);
        st.block = st.block.max(job.bytes);
        st.copy = job.service.copy;
        st.phased = job.service.phased;
        if self.how.planned {
            st.weight = job.service.share_fraction().max(Self::WEIGHT_MIN);
        }
    }

    fn choose(&mut self, s: &mut Streams, now: Time, head: Option<FileKey>) -> Option<StreamKey> {
        self.state.retain(|k, st| s.streams.contains_key(k) || now.since(st.seen) < Self::FORGET_AFTER);
        if self.wait_for_run(s, now) {
            return None;
        }
        self.waiting = None;
        let keys: Vec<StreamKey> = s.streams.keys().copied().collect();
        if keys.len() <= 1 {
            return keys.first().copied();
        }
        // Lag of each competing stream behind their mean progress, in its own requests.
        let mean = keys.iter().map(|k| s.streams[k].progress_key).sum::<f64>() / keys.len() as f64;
        let lags: Vec<f64> = keys
            .iter()
            .map(|k| {
                let q = &s.streams[k];
                let step = q.jobs[0].progress.key_step(q.jobs[0].bytes).max(f64::MIN_POSITIVE);
                (mean - q.progress_key) / step
            })
            .collect();
        for (k, &l) in keys.iter().zip(&lags) {
            let st = self.state.get_mut(k).expect("pushed streams have state");
            if !self.how.planned {
                st.weight = (st.weight * (1.0 + Self::GAIN * l)).max(Self::WEIGHT_MIN);
            }
            st.lag = l;
        }
        if let (Some(last), Some(p)) = (self.last_pick, self.how.phase) {
            let gap = now.since(last).as_nanos() as f64;
            if gap < p.as_nanos() as f64 / 8.0 {
                self.pick_every = Some(self.pick_every.map_or(gap, |e| e + 0.1 * (gap - e)));
            }
        }
        // The period and its slots, when the disk phases now.
        let phase = self.phase_now(&keys).map(|p| (p, self.slots()));
        for (k, gain) in keys.iter().zip(self.gains(&keys, now, phase.as_ref())) {
            self.state.get_mut(k).expect("pushed streams have state").credit += gain;
        }
        self.last_pick = Some(now);
        // Phased: the stream whose slot the next job's deciding point falls in, if it has a
        // request queued and nobody is far behind (a plan gone wrong: credits and lag
        // decide until they have caught up) or near the end of its scan.
        let near_end = || {
            keys.iter().any(|k| {
                let last = s.streams[k].jobs.back().expect("queued streams have jobs");
                let left = last.progress.total_bytes.saturating_sub(last.progress.done_bytes);
                left as f64 <= last.bytes as f64 * Self::PHASE_END_BLOCKS as f64 * self.units(k)
            })
        };
        let slots_decide = phase.is_some()
            && keys.iter().zip(&lags).all(|(q, &l)| l <= Self::PHASE_LAG_BLOCKS * self.units(q))
            && !near_end();
        let owner = phase
            .filter(|_| slots_decide)
            .and_then(|(p, slots)| {
                let point = self.pick_every.map_or(0.0, |e| e * deciding_point(now, p));
                slot_owner(&slots, p, now + Duration::from_nanos(point as u64))
            })
            .filter(|k| keys.contains(k));
        self.slots_decide = slots_decide;
        // A run continues while its debt is small and it is not ahead of the others.
        let longest = s.run.map_or(0.0, |(k, _)| f64::from(RUN_MAX) * self.units(&k));
        let run = s.run_candidate(head, longest).copied().filter(|k| {
            let lag = keys.iter().position(|x| x == k).map_or(0.0, |i| lags[i]);
            let units = self.units(k);
            self.state[k].credit > -self.how.run_debt * units && lag > -self.how.run_lead * units
        });
        let key = owner.or(run).unwrap_or_else(|| {
            let priority = |i: usize| self.state[&keys[i]].credit + Self::PROPORTIONAL * lags[i];
            let best = (1..keys.len()).fold(0, |best, i| if priority(i) > priority(best) { i } else { best });
            keys[best]
        });
        self.state.get_mut(&key).expect("chosen stream has state").credit -= 1.0;
        for k in &keys {
            let bound = self.how.credit_bound * self.units(k);
            let st = self.state.get_mut(k).expect("pushed streams have state");
            st.credit = st.credit.clamp(-bound, bound);
        }
        Some(key)
    }

    fn wake_at(&self) -> Option<Time> {
        self.waiting.map(|(_, t)| t)
    }
}

/// What a server knows of its *primary* consumers (those reading the copies it holds as
/// primary): their progress, which it reports to consumers reading its backup copies
/// (GD-3, gd-enhancements §3.2: "the backup-copy server keeps consumer i informed of
/// P(i+1)").
#[derive(Debug, Default)]
pub struct PrimaryTracker {
    /// Per dataset id: each primary stream's latest fraction and when it was heard.
    datasets: BTreeMap<u64, BTreeMap<StreamKey, (f64, Time)>>,
}

impl PrimaryTracker {
    /// A primary stream of `dataset` reported progress at `now`.
    pub fn note(&mut self, dataset: u64, stream: StreamKey, progress: Progress, now: Time) {
        let streams = self.datasets.entry(dataset).or_default();
        let entry = streams.entry(stream).or_insert((0.0, now));
        *entry = (entry.0.max(progress.fraction()), now);
    }

    /// The least progress among the dataset's primary streams heard from recently; `None`
    /// when nobody reads this server's primary copies (so it has capacity to spare).
    pub fn progress(&mut self, dataset: u64, now: Time) -> Option<f64> {
        let streams = self.datasets.get_mut(&dataset)?;
        streams.retain(|_, (_, seen)| now.since(*seen) < PRIMARY_STALE_AFTER);
        let least = streams
            .values()
            .map(|(f, _)| *f)
            .filter(|f| *f < 1.0)
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.min(f))));
        if streams.is_empty() {
            self.datasets.remove(&dataset);
        }
        least
    }

    /// Forget a closed connection's streams.
    pub fn forget_conn(&mut self, conn: u64) {
        for streams in self.datasets.values_mut() {
            streams.retain(|k, _| k.conn != conn);
        }
        self.datasets.retain(|_, s| !s.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FB: Service = Service::FURTHEST_BEHIND;
    const FB_RUNS: Service = Service { runs: true, ..Service::FURTHEST_BEHIND };
    const LQ: Service = Service { discipline: Discipline::LongestQueue, ..Service::FURTHEST_BEHIND };

    fn job(
        id: JobId,
        stream: u64,
        file: FileKey,
        done: u64,
        total: u64,
        metric: ProgressMetric,
        service: Service,
    ) -> Job {
        Job {
            id,
            stream: StreamKey { conn: 1, stream },
            file,
            bytes: 10,
            progress: Progress { done_bytes: done, total_bytes: total, metric },
            service,
            arrival: Time(id),
        }
    }

    fn bytes_job(id: JobId, stream: u64, done: u64) -> Job {
        job(id, stream, stream, done, 1000, ProgressMetric::Bytes, FB)
    }

    fn pops(s: &mut dyn Scheduler, head: Option<FileKey>) -> Vec<JobId> {
        std::iter::from_fn(|| s.pop(Time::ZERO, head)).map(|j| j.id).collect()
    }

    #[test]
    fn fifo_keeps_arrival_order() {
        let mut s = Fifo::default();
        for id in 0..3 {
            s.push(bytes_job(id, id % 2, 1000 - id));
        }
        assert!(s.remove(1));
        assert!(!s.remove(1));
        assert_eq!(pops(&mut s, None), vec![0, 2]);
    }

    /// River §3.3: C1 has 100 blocks, C2 200; C2 gets nothing until C1 catches up.
    #[test]
    fn the_consumer_furthest_behind_is_served_until_it_catches_up() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 2, 200));
        s.push(bytes_job(2, 2, 200));
        s.push(bytes_job(3, 1, 100));
        s.push(bytes_job(4, 1, 100));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 3);
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 4);
        // Consumer 1 now reports it caught up past consumer 2.
        s.push(bytes_job(5, 1, 250));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 1);
        s.assert_invariants();
    }

    /// GD-2: a consumer with twice the partition is judged by its fraction.
    #[test]
    fn relative_progress_compares_fractions() {
        let mut s = FurthestBehind::default();
        s.push(job(1, 1, 1, 300, 1000, ProgressMetric::Fraction, FB)); // 30%
        s.push(job(2, 2, 2, 500, 2000, ProgressMetric::Fraction, FB)); // 25%
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
        // The same numbers in bytes favour the other consumer (GD-1).
        let mut s = FurthestBehind::default();
        s.push(job(1, 1, 1, 300, 1000, ProgressMetric::Bytes, FB));
        s.push(job(2, 2, 2, 500, 2000, ProgressMetric::Bytes, FB));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 1);
    }

    #[test]
    fn ties_prefer_the_file_under_the_head() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 1, 100));
        s.push(bytes_job(2, 2, 100));
        assert_eq!(s.pop(Time::ZERO, Some(2)).unwrap().id, 2);
    }

    #[test]
    fn stale_progress_never_moves_a_stream_back() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 1, 500));
        s.push(bytes_job(2, 1, 100)); // stale or hostile
        s.push(bytes_job(3, 2, 300));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 3);
    }

    #[test]
    fn progress_reported_between_requests_changes_the_order() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 1, 100));
        s.push(bytes_job(2, 2, 200));
        // Stream 1 received data from its other server and is now ahead.
        let p = Progress { done_bytes: 300, total_bytes: 1000, metric: ProgressMetric::Bytes };
        s.update_progress(StreamKey { conn: 1, stream: 1 }, p);
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
        // Progress for a stream with nothing queued is ignored (no state kept for it).
        s.update_progress(StreamKey { conn: 1, stream: 9 }, p);
        s.assert_invariants();
    }

    /// GD-5: a run continues on the head's file while the consumer is not too far ahead.
    #[test]
    fn runs_save_seeks_without_breaking_the_progress_goal() {
        let mut s = FurthestBehind::default();
        // Stream 1 (file 1) at 100, stream 2 (file 2) at 110; each job is 10 bytes, so the
        // slack is 40 bytes of progress.
        for id in 0..8 {
            s.push(job(id, 1, 1, 100, 1000, ProgressMetric::Bytes, FB_RUNS));
        }
        for id in 10..13 {
            s.push(job(id, 2, 2, 110, 1000, ProgressMetric::Bytes, FB_RUNS));
        }
        // Stream 1 is behind: it starts; its progress climbs with the notices the client
        // sends, and the run goes on until it is more than 40 ahead of stream 2.
        let mut order = vec![];
        let mut done = 100;
        for _ in 0..7 {
            let j = s.pop(Time::ZERO, Some(1)).unwrap();
            order.push(j.id);
            if j.stream.stream == 1 {
                done += 10;
                s.update_progress(
                    j.stream,
                    Progress { done_bytes: done, total_bytes: 1000, metric: ProgressMetric::Bytes },
                );
            }
        }
        // The run continues while stream 1 is at most 40 ahead (up to 150), so six run;
        // at 160 stream 2 gets the disk back.
        assert_eq!(order, vec![0, 1, 2, 3, 4, 5, 10]);
        // Without runs, the same progress flips the order at once.
        let mut s = FurthestBehind::default();
        s.push(job(1, 1, 1, 100, 1000, ProgressMetric::Bytes, FB));
        s.push(job(2, 1, 1, 100, 1000, ProgressMetric::Bytes, FB));
        s.push(job(3, 2, 2, 105, 1000, ProgressMetric::Bytes, FB));
        assert_eq!(s.pop(Time::ZERO, Some(1)).unwrap().id, 1);
        s.update_progress(
            StreamKey { conn: 1, stream: 1 },
            Progress { done_bytes: 110, total_bytes: 1000, metric: ProgressMetric::Bytes },
        );
        assert_eq!(s.pop(Time::ZERO, Some(1)).unwrap().id, 3);
    }

    /// A stream reading two files here (a logical partition read in step) finishes what it
    /// has on the head's file before the head moves, if it allows runs; else in order.
    #[test]
    fn a_stream_on_two_files_serves_the_head_s_file_first_when_it_allows_runs() {
        let order = |service: Service| {
            let mut s = FurthestBehind::default();
            for (id, file) in [(0, 1), (1, 2), (2, 1), (3, 2)] {
                s.push(job(id, 1, file, 100, 1000, ProgressMetric::Bytes, service));
            }
            s.push(job(10, 2, 3, 500, 1000, ProgressMetric::Bytes, service));
            let order: Vec<JobId> = (0..5).map(|_| s.pop(Time::ZERO, Some(2)).unwrap().id).collect();
            s.assert_invariants();
            order
        };
        assert_eq!(order(FB_RUNS), vec![1, 3, 0, 2, 10]);
        assert_eq!(order(FB), vec![0, 1, 2, 3, 10]);
    }

    /// GD-4: the longer queue first; with a guard every eighth pick, the eighth goes to
    /// whoever waited longest.
    #[test]
    fn longest_queue_first_with_a_starvation_guard() {
        let mut s = LongestQueue::default();
        let every_8 = Service { guard_every: 8, ..LQ };
        for id in 0..20 {
            s.push(job(100 + id, 1, 1, 0, 1, ProgressMetric::Bytes, every_8));
        }
        s.push(job(1, 2, 2, 0, 1, ProgressMetric::Bytes, every_8)); // oldest, short queue
        let order: Vec<JobId> = (0..8).map(|_| s.pop(Time::ZERO, None).unwrap().id).collect();
        assert_eq!(&order[..7], &[100, 101, 102, 103, 104, 105, 106]);
        assert_eq!(order[7], 1, "the guard serves the starved stream");
        s.assert_invariants();
    }

    /// The requests set the guard's interval (gd-rr's `guard_every`); the shortest asked for
    /// holds.
    #[test]
    fn the_requests_set_the_starvation_guard() {
        let starved_served_at = |long: u8, short: u8| -> usize {
            let mut s = LongestQueue::default();
            for id in 0..20 {
                s.push(job(100 + id, 1, 1, 0, 1, ProgressMetric::Bytes, Service { guard_every: long, ..LQ }));
            }
            s.push(job(1, 2, 2, 0, 1, ProgressMetric::Bytes, Service { guard_every: short, ..LQ }));
            let order: Vec<JobId> = (0..20).map(|_| s.pop(Time::ZERO, None).unwrap().id).collect();
            order.iter().position(|id| *id == 1).expect("the starved stream is served")
        };
        assert_eq!(starved_served_at(3, 3), 2, "the third pick");
        assert_eq!(starved_served_at(0, 0), usize::from(GUARD_EVERY) - 1, "0: the server's interval");
        assert_eq!(starved_served_at(12, 2), 1, "the shortest interval asked for");
        assert_eq!(starved_served_at(1, 0), 0, "every pick: the longest wait first");
    }

    #[test]
    fn auto_dispatches_by_discipline_and_alternates_between_them() {
        let mut s = Auto::default();
        s.push(job(1, 1, 1, 500, 1000, ProgressMetric::Bytes, FB));
        s.push(job(2, 2, 2, 100, 1000, ProgressMetric::Bytes, FB));
        s.push(job(3, 3, 3, 0, 1, ProgressMetric::Bytes, LQ));
        s.push(job(4, 3, 3, 0, 1, ProgressMetric::Bytes, LQ));
        assert_eq!(s.len(), 4);
        assert_eq!(pops(&mut s, None), vec![2, 3, 1, 4]);
        s.push(job(5, 1, 1, 0, 1, ProgressMetric::Bytes, LQ));
        assert!(s.remove(5));
        assert!(s.is_empty());
    }

    #[test]
    fn service_bytes_round_trip_and_reject_unknown_bits() {
        for s in [
            FB,
            FB_RUNS,
            LQ,
            Service { runs: true, handoff: true, guard_every: 3, ..LQ },
            Service { discipline: Discipline::LearnedShares, runs: true, share: 7, copy: 1, phased: true, ..FB },
            Service {
                discipline: Discipline::Planned,
                runs: true,
                share: SHARE_ONE,
                copy: COPY_MAX,
                phased: true,
                ..FB
            },
        ] {
            assert_eq!(Service::from_byte(s.to_byte(), s.share, s.guard_every), Some(s));
        }
        assert_eq!(Service::from_byte(128, 0, 0), None);
    }

    /// Planned streams get the disk in proportion to the shares their requests carry, and a
    /// stream that falls behind gets more until it has caught up.
    #[test]
    fn planned_shares_are_kept_and_a_lagging_stream_catches_up() {
        let planned = |share: u16| Service {
            discipline: Discipline::Planned,
            runs: true,
            share,
            phased: true,
            ..Service::FURTHEST_BEHIND
        };
        // A block every 31.25 ms, as a 32 MiB/s disk serves them.
        let at = |pick: u64| Time::ZERO + Duration::from_micros(31_250) * pick as u32;
        let run = |progress_of: &dyn Fn(usize, [u64; 2]) -> [u64; 2], picks: u64| {
            let mut s = LearnedShares::planned();
            let keys = [StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 }];
            let shares = [SHARE_ONE / 4, SHARE_ONE / 4 * 3];
            let (mut done, mut served, mut id) = ([0u64; 2], [0u32; 2], 0);
            for pick in 0..picks {
                for i in 0..2 {
                    while s.s.streams.get(&keys[i]).map_or(0, |q| q.jobs.len()) < 2 {
                        id += 1;
                        let progress =
                            Progress { done_bytes: done[i], total_bytes: 1 << 30, metric: ProgressMetric::Fraction };
                        let job = Job {
                            id,
                            stream: keys[i],
                            file: i as u64,
                            bytes: 1 << 20,
                            progress,
                            service: planned(shares[i]),
                            arrival: at(pick),
                        };
                        s.push(job);
                    }
                }
                let j = s.pop(at(pick), Some(0)).unwrap();
                let i = usize::from(j.stream == keys[1]);
                served[i] += 1;
                done = progress_of(i, done);
                for (k, d) in keys.iter().zip(done) {
                    s.update_progress(
                        *k,
                        Progress { done_bytes: d, total_bytes: 1 << 30, metric: ProgressMetric::Fraction },
                    );
                }
                s.assert_invariants();
            }
            (served, done)
        };
        // Stream 1 gets half a block a pick elsewhere: at a quarter and three quarters of this
        // disk both advance three quarters of a block a pick, so they stay level and the
        // planned shares hold.
        let level = |i: usize, mut d: [u64; 2]| {
            d[i] += 1 << 20;
            d[0] += 1 << 19;
            d
        };
        let (served, _) = run(&level, 400);
        let share = served[0] as f64 / 400.0;
        assert!((share - 0.25).abs() < 0.03, "stream 1 got {share}");
        // Stream 1 gets nothing elsewhere (the plan was wrong): it falls behind and is served
        // beyond its planned quarter, staying within a few blocks (the lag that outweighs a
        // full credit bound, 4 picks, against the mean of the two).
        let wrong = |i: usize, mut d: [u64; 2]| {
            d[i] += 1 << 20;
            d
        };
        let (served, done) = run(&wrong, 400);
        assert!(served[0] > 180, "{served:?}");
        assert!(done[1] - done[0] <= 10 << 20, "{done:?}");
    }

    /// Two disks of a chain, A and B, and the reader X of a fragment whose primary is on A
    /// and backup on B; W reads its backup on A, Y its primary on B. Each disk takes 31.25 ms
    /// a 1 MiB block and 4 ms more to seek to another stream's file (B starting 10 ms after A),
    /// the streams always have requests queued, and the shares keep every reader's fraction
    /// done level: W has 40% of A, X 60% of A and 40% of B, Y 60% of B. Returns the times X
    /// got its blocks, after the first second, and each disk's blocks per stream after it.
    fn two_disk_chain(how: ShareSettings) -> (Vec<Time>, [BTreeMap<StreamKey, u32>; 2]) {
        let block: u64 = 1 << 20;
        let (w, x, y) =
            (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 }, StreamKey { conn: 3, stream: 1 });
        // Each reader's size, so that its fraction done stays level at these shares.
        let total = |k: StreamKey| {
            if k == w {
                400 * block
            } else if k == x {
                1000 * block
            } else {
                600 * block
            }
        };
        let progress = |k: StreamKey, done: u64| Progress {
            done_bytes: done,
            total_bytes: total(k),
            metric: ProgressMetric::Fraction,
        };
        let share = |frac: f64| (frac * SHARE_ONE as f64).round() as u16;
        // Per disk: (stream, share, copy).
        let layout = [[(w, share(0.4), 1u8), (x, share(0.6), 0)], [(x, share(0.4), 1), (y, share(0.6), 0)]];
        let mut disks = [0, 1].map(|_| PerStream { s: Streams::default(), rule: Shares::new(how) });
        let mut free = [Time::ZERO, Time::ZERO + Duration::from_millis(10)];
        let mut last: [Option<StreamKey>; 2] = [None, None];
        let mut done: BTreeMap<StreamKey, u64> = BTreeMap::new();
        let mut served: [BTreeMap<StreamKey, u32>; 2] = Default::default();
        let (mut id, mut x_blocks) = (0, vec![]);
        let warm = Time::from_secs_f64(1.0);
        while free[0].min(free[1]) < Time::from_secs_f64(5.0) {
            let d = usize::from(free[1] < free[0]);
            let now = free[d];
            let disk = &mut disks[d];
            for &(stream, share, copy) in &layout[d] {
                disk.update_progress(stream, progress(stream, done.get(&stream).copied().unwrap_or(0)));
                while disk.s.streams.get(&stream).map_or(0, |q| q.jobs.len()) < 2 {
                    id += 1;
                    let p = progress(stream, done.get(&stream).copied().unwrap_or(0));
                    disk.push(phased_job(id, stream, share, copy, p, now));
                }
            }
            let j = disk.pop(now, None).expect("both streams have requests queued");
            disk.assert_invariants();
            let seek = if last[d].is_some_and(|l| l != j.stream) { Duration::from_millis(4) } else { Duration::ZERO };
            last[d] = Some(j.stream);
            free[d] = now + Duration::from_micros(31_250) + seek;
            *done.entry(j.stream).or_default() += block;
            if now >= warm {
                *served[d].entry(j.stream).or_default() += 1;
                if j.stream == x {
                    x_blocks.push(free[d]);
                }
            }
        }
        (x_blocks, served)
    }

    /// Phased, A serves X in the part of each period B does not: X is never more than about
    /// two blocks without one, and every period brings it 15 to 17 blocks (16 at the disks'
    /// rate). With credits alone the disks switch files more often, and the seeks leave X
    /// fewer blocks. The planned shares hold either way.
    #[test]
    fn phased_disks_serve_a_reader_from_its_two_copies_in_turn() {
        let period = ShareSettings::PLANNED.phase.expect("planned disks are phased");
        let longest = |blocks: &[Time]| blocks.windows(2).map(|p| p[1].since(p[0])).max().unwrap();
        // X's blocks in each whole period after the first second.
        let per_period = |blocks: &[Time]| -> Vec<usize> {
            (2..10)
                .map(|k| {
                    let (from, to) = (Time::ZERO + period * k, Time::ZERO + period * (k + 1));
                    blocks.iter().filter(|t| **t >= from && **t < to).count()
                })
                .collect()
        };
        let (phased, served) = two_disk_chain(ShareSettings::PLANNED);
        assert!(longest(&phased) <= Duration::from_millis(75), "X waited {:?} for a block", longest(&phased));
        let counts = per_period(&phased);
        assert!(counts.iter().all(|c| (15..=17).contains(c)), "X's blocks a period: {counts:?}");
        let (unphased, served_unphased) = two_disk_chain(ShareSettings { phase: None, ..ShareSettings::PLANNED });
        let sum = |blocks: &[Time]| per_period(blocks).iter().sum::<usize>();
        assert!(sum(&unphased) < sum(&phased), "{:?} against {counts:?}", per_period(&unphased));
        // W 40% of A, Y 60% of B.
        for served in [served, served_unphased] {
            let share = |d: usize, conn: u64| {
                let all: u32 = served[d].values().sum();
                served[d].iter().find(|(k, _)| k.conn == conn).map_or(0, |(_, n)| *n) as f64 / all as f64
            };
            assert!((share(0, 1) - 0.4).abs() < 0.05, "W got {served:?}");
            assert!((share(1, 3) - 0.6).abs() < 0.05, "Y got {served:?}");
        }
    }

    /// A disk that takes exactly a sixteenth of a period a block, shared 40 / 60 by two
    /// readers with level progress: W's slot ends 6.4 blocks into every period. W gets 40% of
    /// the blocks over many periods, not the 6 a period (37.5%) of a boundary rounded the
    /// same way each time, and 6 or 7 in every period.
    #[test]
    fn a_slot_boundary_inside_a_block_is_not_rounded_the_same_way_every_period() {
        let period = ShareSettings::PLANNED.phase.expect("planned disks are phased");
        let (w, x) = (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 });
        let level = Progress { done_bytes: 0, total_bytes: 1 << 40, metric: ProgressMetric::Fraction };
        let mut disk = PerStream::planned();
        let (mut now, mut id) = (Time::ZERO, 0);
        let mut w_per_period: BTreeMap<u64, u32> = BTreeMap::new();
        let periods: u32 = 48;
        while now < Time::ZERO + period * periods {
            for (stream, share, copy) in [(w, 0.4, 1u8), (x, 0.6, 0)] {
                while disk.s.streams.get(&stream).map_or(0, |q| q.jobs.len()) < 2 {
                    id += 1;
                    disk.push(phased_job(id, stream, (share * SHARE_ONE as f64).round() as u16, copy, level, now));
                }
            }
            let j = disk.pop(now, None).expect("both streams have requests queued");
            let k = now.0 / period.as_nanos() as u64;
            if j.stream == w && k >= 2 {
                *w_per_period.entry(k).or_default() += 1;
            }
            now = now + period / 16;
        }
        let counts: Vec<u32> = (2..u64::from(periods)).map(|k| w_per_period.get(&k).copied().unwrap_or(0)).collect();
        let share = f64::from(counts.iter().sum::<u32>()) / (16.0 * counts.len() as f64);
        assert!((share - 0.4).abs() < 0.01, "W got {share} of the disk: {counts:?}");
        assert!(counts.iter().all(|n| (6..=7).contains(n)), "{counts:?}");
    }

    #[test]
    fn a_slot_s_overlap_counts_both_periods_an_interval_touches() {
        // Slot [20, 50) of every 100.
        assert_eq!(slot_overlap(0, 100, 100, 0.2, 0.3), 30.0);
        assert_eq!(slot_overlap(40, 130, 100, 0.2, 0.3), 20.0, "40-50 and 120-130");
        assert_eq!(slot_overlap(250, 320, 100, 0.2, 0.3), 0.0);
        assert_eq!(slot_overlap(1_020, 1_030, 100, 0.2, 0.3), 10.0);
    }

    /// Two planned streams of equal shares, for the anticipation tests.
    const PLANNED_A: StreamKey = StreamKey { conn: 1, stream: 1 };
    const PLANNED_B: StreamKey = StreamKey { conn: 2, stream: 1 };

    /// A 1 MiB request of a planned stream with half the disk, queued at time 0.
    fn planned_job(id: JobId, stream: StreamKey, file: FileKey) -> Job {
        let service =
            Service { discipline: Discipline::Planned, runs: true, share: SHARE_ONE / 2, ..Service::FURTHEST_BEHIND };
        let progress = Progress { done_bytes: 0, total_bytes: 1 << 30, metric: ProgressMetric::Fraction };
        Job { id, stream, file, bytes: 1 << 20, progress, service, arrival: Time(0) }
    }

    /// `planned_job` on `stream`'s own file, asking for a slot of `share` and reading copy
    /// `copy`, at `progress`, queued at `now`.
    fn phased_job(id: JobId, stream: StreamKey, share: u16, copy: u8, progress: Progress, now: Time) -> Job {
        let j = planned_job(id, stream, stream.conn);
        Job { service: Service { share, copy, phased: true, ..j.service }, progress, arrival: now, ..j }
    }

    /// Counted in 1 MiB units, a planned disk that two readers share changes file about as
    /// often in time with 256 KiB blocks as with 1 MiB ones; counted in blocks it changed
    /// four times as often, and paid a seek each time.
    #[test]
    fn a_planned_disk_changes_file_as_often_whatever_the_block_size() {
        let changes = |block: u64| {
            let mut disk = LearnedShares::planned();
            let (mut now, mut id, mut head, mut changes) = (Time::ZERO, 0, None, 0u32);
            while now < Time::ZERO + Duration::from_secs(2) {
                for stream in [PLANNED_A, PLANNED_B] {
                    while disk.s.streams.get(&stream).map_or(0, |q| q.jobs.len()) < 2 {
                        id += 1;
                        disk.push(Job { bytes: block, arrival: now, ..planned_job(id, stream, stream.conn) });
                    }
                }
                let j = disk.pop(now, head).expect("both streams have requests queued");
                changes += u32::from(head.is_some_and(|h| h != j.file));
                head = Some(j.file);
                now = now + Duration::from_secs_f64(block as f64 / f64::from(32u32 << 20));
            }
            changes
        };
        let (mib, quarter) = (changes(1 << 20), changes(256 << 10));
        assert!(mib >= 8, "two readers of half the disk each take turns: {mib} changes in 2 s");
        // 14 against 11 (43 counted in blocks).
        assert!(
            f64::from(quarter.abs_diff(mib)) <= 0.5 * f64::from(mib),
            "{quarter} changes of file with 256 KiB blocks, {mib} with 1 MiB"
        );
    }

    /// A planned disk running a stream whose queue ran dry waits for its next request rather
    /// than seek away, but only until the anticipation deadline, and only while the run is
    /// within its debt.
    #[test]
    fn a_planned_disk_waits_briefly_for_the_running_stream_s_next_request() {
        let (a, b, job) = (PLANNED_A, PLANNED_B, planned_job);
        let t = Time(1_000);
        let wait = ShareSettings::PLANNED.anticipate.unwrap();
        // Its request comes within the wait: the run goes on, until its debt ends it.
        let mut s = LearnedShares::planned();
        s.push(job(1, a, 0));
        s.push(job(2, b, 1));
        let first = s.pop(Time(0), Some(0)).unwrap();
        assert_eq!(first.stream, a, "ties go to the file under the head");
        // a has nothing queued: the disk waits for it instead of seeking to b's file.
        assert_eq!(s.pop(t, Some(0)), None);
        assert_eq!(s.wake_at(), Some(t + wait), "a deadline to decide again");
        s.push(job(3, a, 0));
        assert_eq!(s.pop(Time(2_000), Some(0)).unwrap().id, 3);
        assert_eq!(s.wake_at(), None);
        // Two blocks on a half share are one block of debt: the run is over, b is next at once.
        assert_eq!(s.pop(Time(3_000), Some(0)).unwrap().stream, b);
        s.assert_invariants();
        // Its request does not come: at the deadline the disk goes to b.
        let mut s = LearnedShares::planned();
        s.push(job(1, a, 0));
        s.push(job(2, b, 1));
        assert_eq!(s.pop(Time(0), Some(0)).unwrap().stream, a);
        assert_eq!(s.pop(t, Some(0)), None);
        assert_eq!(s.pop(t + wait / 2, Some(0)), None, "still waiting");
        assert_eq!(s.pop(t + wait, Some(0)).unwrap().stream, b);
        s.assert_invariants();
    }

    /// Inside the running stream's phase slot the disk waits for its next request however
    /// long the run has been; where the slots do not decide (here: near the end of the
    /// scan), a run of `RUN_MAX` ends as before; deep in debt, W is waited for all the same.
    /// W has 70% of the disk (its slot: the first 350 ms of every 500 ms, 11 blocks of
    /// 31.25 ms), X 30%.
    #[test]
    fn a_planned_disk_waits_for_the_slot_s_reader_past_the_longest_run() {
        let period = ShareSettings::PLANNED.phase.expect("planned disks are phased");
        let wait = ShareSettings::PLANNED.anticipate.expect("planned disks anticipate");
        let block = period / 16;
        let (w, x) = (PLANNED_A, PLANNED_B);
        let share = |f: f64| (f * SHARE_ONE as f64).round() as u16;
        // From the start of a period W runs `RUN_MAX` blocks of a scan of `total` bytes, to
        // 250 ms, and its queue is then empty; X has requests queued.
        let run = |total: u64| {
            let progress = Progress { done_bytes: 0, total_bytes: total, metric: ProgressMetric::Fraction };
            let start = Time::ZERO + period * 4;
            let mut disk = LearnedShares::planned();
            let mut id = 0;
            for _ in 0..RUN_MAX {
                id += 1;
                disk.push(phased_job(id, w, share(0.7), 1, progress, start));
            }
            for _ in 0..2 {
                id += 1;
                disk.push(phased_job(id, x, share(0.3), 0, progress, start));
            }
            let mut now = start;
            for _ in 0..RUN_MAX {
                assert_eq!(disk.pop(now, Some(w.conn)).expect("W is queued").stream, w, "at {now:?}");
                now = now + block;
            }
            (disk, now, id, progress)
        };
        let (mut disk, now, id, progress) = run(1 << 40);
        assert_eq!(disk.pop(now, Some(w.conn)), None, "W's slot lasts to 350 ms");
        assert_eq!(disk.wake_at(), Some(now + wait));
        disk.push(phased_job(id + 1, w, share(0.7), 1, progress, now + wait / 2));
        assert_eq!(disk.pop(now + wait / 2, Some(w.conn)).expect("W's request came").stream, w);
        disk.assert_invariants();
        // W deep in debt (it caught up on X's time before its slot): its slot still holds.
        let (mut disk, now, _, _) = run(1 << 40);
        let bound = ShareSettings::PLANNED.credit_bound;
        disk.rule.state.get_mut(&w).expect("W has state").credit = -bound;
        assert_eq!(disk.pop(now, Some(w.conn)), None, "W's slot holds whatever its credit");
        assert_eq!(disk.wake_at(), Some(now + wait));
        // Ten blocks left: the slots are set aside, and X is served at once.
        let (mut disk, now, _, _) = run(10 << 20);
        assert_eq!(disk.pop(now, Some(w.conn)).expect("X is queued").stream, x);
        disk.assert_invariants();
    }

    /// A disk waiting for the running stream's next request whose other requests are then
    /// cancelled has nothing to wait for: with its queue empty it names no deadline, so the
    /// server sleeps until a request comes instead of waking at a past deadline in a loop
    /// (the simulator found this spin when an end-of-scan steal emptied the queue).
    #[test]
    fn an_emptied_queue_has_no_deadline_to_wake_at() {
        let (a, b, job) = (PLANNED_A, PLANNED_B, planned_job);
        // The planned scheduler itself, and as the server runs it (behind `Auto`).
        let schedulers: [Box<dyn Scheduler>; 2] = [Box::new(LearnedShares::planned()), SchedulerKind::Auto.build()];
        for mut s in schedulers {
            s.push(job(1, a, 0));
            s.push(job(2, b, 1));
            assert_eq!(s.pop(Time(0), Some(0)).unwrap().stream, a);
            assert_eq!(s.pop(Time(1_000), Some(0)), None, "waiting for a's next request");
            assert!(s.wake_at().is_some());
            assert!(s.remove(2), "b's request is cancelled");
            assert_eq!(s.wake_at(), None, "{}", s.name());
            // A new request is served at once.
            s.push(job(3, b, 1));
            assert_eq!(s.pop(Time(1_000_000_000), Some(0)).unwrap().id, 3);
        }
    }

    /// A stream that keeps lagging gains weight, and once level keeps the larger share: the
    /// shares are learnt, not held up by a standing lag.
    #[test]
    fn learned_shares_keep_a_lagging_stream_s_share_once_it_is_level() {
        const LS: Service = Service { discipline: Discipline::LearnedShares, ..Service::FURTHEST_BEHIND };
        let mut s = LearnedShares::default();
        let (a, b) = (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 1, stream: 2 });
        let mut progress = [0u64, 0u64];
        let mut next_id = 0;
        let mut served = [0u32, 0u32];
        let mut lag_sum = 0.0;
        // Stream 1 gets 0.6 blocks a pick from elsewhere, stream 2 nothing: to stay level,
        // stream 2 needs about 80% of this server.
        for pick in 0..400 {
            for (i, key) in [a, b].iter().enumerate() {
                while s.s.streams.get(key).map_or(0, |q| q.jobs.len()) < 2 {
                    next_id += 1;
                    let p = Progress { done_bytes: progress[i], total_bytes: 1 << 40, metric: ProgressMetric::Bytes };
                    s.push(Job {
                        id: next_id,
                        stream: *key,
                        file: i as u64,
                        bytes: 10,
                        progress: p,
                        service: LS,
                        arrival: Time(pick),
                    });
                }
            }
            let j = s.pop(Time(pick), None).unwrap();
            let i = usize::from(j.stream == b);
            progress[i] += 10;
            if pick % 5 < 3 {
                progress[0] += 10;
            }
            for (i, key) in [a, b].iter().enumerate() {
                s.update_progress(
                    *key,
                    Progress { done_bytes: progress[i], total_bytes: 1 << 40, metric: ProgressMetric::Bytes },
                );
            }
            if pick >= 200 {
                served[i] += 1;
                lag_sum += (progress[0] as f64 - progress[1] as f64) / 10.0;
            }
            s.assert_invariants();
        }
        let share_b = served[1] as f64 / 200.0;
        assert!((share_b - 0.8).abs() < 0.05, "stream 2 got {share_b}");
        let mean_lag = lag_sum / 200.0;
        assert!(mean_lag.abs() <= 2.0, "they stay level on average: {mean_lag} blocks apart");
        assert!(s.weight(b).unwrap() > s.weight(a).unwrap() * 2.0);
    }

    #[test]
    fn removal_keeps_the_index_consistent() {
        let mut s = FurthestBehind::default();
        for id in 0..6 {
            s.push(bytes_job(id, id % 3, id * 10));
        }
        assert!(s.remove(4));
        assert!(s.remove(1));
        assert!(!s.remove(1));
        s.assert_invariants();
        let mut seen = pops(&mut s, None);
        seen.sort();
        assert_eq!(seen, vec![0, 2, 3, 5]);
        s.assert_invariants();
    }

    #[test]
    fn primary_progress_is_the_least_of_fresh_primary_streams() {
        let mut t = PrimaryTracker::default();
        let p = |done| Progress { done_bytes: done, total_bytes: 100, metric: ProgressMetric::Bytes };
        let (a, b) = (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 });
        t.note(7, a, p(30), Time::ZERO);
        t.note(7, b, p(20), Time::ZERO);
        assert_eq!(t.progress(7, Time::from_secs_f64(0.5)), Some(0.2));
        t.note(7, a, p(40), Time::from_secs_f64(0.9));
        // b has been silent for more than a second: only a counts.
        assert_eq!(t.progress(7, Time::from_secs_f64(1.2)), Some(0.4));
        // A finished stream leaves the server free for backups.
        t.note(7, a, p(100), Time::from_secs_f64(1.3));
        assert_eq!(t.progress(7, Time::from_secs_f64(1.4)), None);
        assert_eq!(t.progress(9, Time::ZERO), None);
        t.forget_conn(1);
        assert_eq!(t.progress(7, Time::from_secs_f64(1.4)), None);
    }
}
