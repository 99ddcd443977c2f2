//! Per-stream disciplines: each consumer's requests queued as a stream, and the rules
//! that pick the stream (furthest behind, longest queue), and `Auto`, which lets each
//! request's own discipline decide.

use super::*;

#[derive(Debug)]
pub(super) struct StreamQueue {
    pub(super) jobs: VecDeque<Job>,
    /// The highest progress this stream has reported; a misbehaving client must not make
    /// progress go backwards.
    pub(super) progress_key: f64,
}

impl StreamQueue {
    /// The share of its scan the stream has still to read, by the most it has reported.
    fn left(&self) -> f64 {
        let p = self.jobs[0].progress;
        (1.0 - p.fraction_at(self.progress_key).max(p.fraction())).clamp(0.0, 1.0)
    }
}

/// Per-stream queues: the state every per-stream discipline shares.
#[derive(Debug, Default)]
pub struct Streams {
    pub(super) streams: BTreeMap<StreamKey, StreamQueue>,
    where_is: BTreeMap<JobId, StreamKey>,
    /// The stream of the last pop and how many of its jobs ran in a row.
    pub(super) run: Option<(StreamKey, u32)>,
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

    /// The longest run of the running stream's requests: `RUN_MAX` of `PLAN_UNIT_BYTES`,
    /// counted in its requests' size (`plan_units`).
    pub(super) fn run_jobs(&self) -> f64 {
        let bytes = self.run.and_then(|(k, _)| self.streams.get(&k)).map_or(PLAN_UNIT_BYTES, |q| q.jobs[0].bytes);
        f64::from(RUN_MAX) * plan_units(bytes)
    }

    /// The stream a run would continue with, if its next job is on the head's file and the
    /// run is shorter than `longest` jobs; the discipline still decides whether that is fair.
    pub(super) fn run_candidate(&self, head: Option<FileKey>, longest: f64) -> Option<&StreamKey> {
        let (key, n) = self.run.as_ref()?;
        let q = self.streams.get(key)?;
        (Self::on_head(q, head).is_some() && f64::from(*n) < longest).then_some(key)
    }

    /// The best stream by `better(candidate, best_so_far)`, with the common tie-breaks.
    fn best_by(
        &self,
        head: Option<FileKey>,
        better: impl Fn((&StreamKey, &StreamQueue), (&StreamKey, &StreamQueue)) -> Option<bool>,
    ) -> Option<StreamKey> {
        let mut best: Option<(&StreamKey, &StreamQueue)> = None;
        for (key, q) in &self.streams {
            let take = match best {
                None => true,
                Some((bk, b)) => better((key, q), (bk, b)).unwrap_or_else(|| {
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
    pub(super) s: Streams,
    pub(super) rule: R,
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
///
/// **Levelling (ours).** A request moves its consumer's progress a whole request at a time,
/// and a server learns it a request late (the one it just served is still on its way), so
/// furthest behind leaves a standing lag between the two readers of a disk: up to a block
/// either way, and steady in one direction where one reader needs the disk more than the
/// other (a slow disk's neighbour). Down a chain of copies those lags add up: on 10 disks at
/// 20 MiB/s with one at 0.35, gd's consumers stood up to five blocks apart through the whole
/// scan, those far from the slow disk finished 0.3 s early, and their disks idled 6.5% of
/// the run. For a stream whose requests ask for it (`Service::level`), the server adds each
/// pick `LEVEL_GAIN` of its lag behind the mean of the streams queued here (in blocks of
/// `PLAN_UNIT_BYTES`) to a bias, within `LEVEL_MAX_BLOCKS` either way, and compares
/// progress less the bias: an integral term beside furthest behind's proportional one, so
/// the mean lag goes to zero, not only the lag's sign. With no fault the lags swing both
/// ways and the biases stay small.
///
/// A bias outlives its stream's queue here by `LEVEL_KEEP_PICKS` picks. A consumer that
/// reads a copy only now and then (gd-pc's reads of a backup, a window at a time) has
/// nothing queued between its visits; dropped at each gap, its bias never grew, and levelling
/// cost gd-pc points. Kept for a few picks, it survives the gaps but not a stream that has
/// gone (a fault over, its consumer back on its primary).
pub type FurthestBehind = PerStream<ByProgress>;

/// Bias a levelled stream gains per pick per block of lag (see [`FurthestBehind`]). With
/// 0.1 to 0.4, gd read the same within a point on `ganges sim generality`; with 0.01 the
/// bias came too late for a 2 s scan.
pub const LEVEL_GAIN: f64 = 0.2;
/// The largest bias, in blocks: a stream that stays behind for want of requests here (its
/// reads go elsewhere) must not be owed the disk without end when they come.
pub const LEVEL_MAX_BLOCKS: f64 = 4.0;
/// Picks a stream's bias outlives its last queued request here (see [`FurthestBehind`]).
/// Kept 2 to 32 picks, gd-pc's least over `ganges sim generality`'s configurations was
/// 93.0-93.2% of the layout-aware ideal (92.5% dropped at once), and gd and gd-share read
/// as before; kept 0.15-0.6 s, the same, but a time is no measure of a disk whose requests
/// take 7 ms or 70.
pub const LEVEL_KEEP_PICKS: u64 = 8;

#[derive(Debug, Default)]
pub struct ByProgress {
    /// The levelled streams seen here lately: their biases, in blocks, and the pick at which
    /// each last had requests queued.
    bias: BTreeMap<StreamKey, (f64, u64)>,
    /// Picks so far.
    picks: u64,
}

impl ByProgress {
    /// One block of `q`'s progress, in its key: `PLAN_UNIT_BYTES` of its requests.
    fn block(q: &StreamQueue) -> f64 {
        let j = &q.jobs[0];
        j.progress.key_step(j.bytes) * plan_units(j.bytes)
    }

    /// Learn the biases at a pick between several streams.
    fn level(&mut self, s: &Streams) {
        self.picks += 1;
        let now = self.picks;
        self.bias.retain(|k, (_, seen)| {
            if s.streams.contains_key(k) {
                *seen = now;
            }
            now - *seen < LEVEL_KEEP_PICKS
        });
        if s.streams.len() < 2 {
            return;
        }
        let mean = s.streams.values().map(|q| q.progress_key).sum::<f64>() / s.streams.len() as f64;
        for (k, q) in s.streams.iter().filter(|(_, q)| q.jobs[0].service.level) {
            let lag = (mean - q.progress_key) / Self::block(q).max(f64::MIN_POSITIVE);
            let (b, _) = self.bias.entry(*k).or_insert((0.0, now));
            *b = (*b + LEVEL_GAIN * lag).clamp(-LEVEL_MAX_BLOCKS, LEVEL_MAX_BLOCKS);
        }
    }

    /// The progress the rule compares: the stream's, less its bias.
    fn levelled(&self, k: &StreamKey, q: &StreamQueue) -> f64 {
        q.progress_key - self.bias.get(k).map_or(0.0, |(b, _)| b * Self::block(q))
    }
}

impl Rule for ByProgress {
    fn name(&self) -> &'static str {
        "furthest-behind"
    }

    fn choose(&mut self, s: &mut Streams, _now: Time, head: Option<FileKey>) -> Option<StreamKey> {
        self.level(s);
        if let Some(&key) = s.run_candidate(head, s.run_jobs()) {
            let q = &s.streams[&key];
            let others = s.streams.iter().filter(|(k, _)| **k != key).map(|(k, o)| self.levelled(k, o));
            let slack = Self::block(q) * RUN_SLACK_JOBS * q.left();
            if others.fold(f64::INFINITY, f64::min) + slack >= self.levelled(&key, q) {
                return Some(key);
            }
        }
        s.best_by(head, |(kq, q), (kb, b)| {
            let (pq, pb) = (self.levelled(kq, q), self.levelled(kb, b));
            (pq != pb).then_some(pq < pb)
        })
    }
}

/// GD-4's server side: the consumer with the longest queue first, and every few picks the
/// one furthest behind (the guard).
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
            // The guard: the stream with the largest share of its scan left (then, as ever, the
            // one on the head's file, then the longest wait).
            return s.best_by(head, |(_, q), (_, b)| (q.left() != b.left()).then_some(q.left() > b.left()));
        }
        if let Some(&key) = s.run_candidate(head, s.run_jobs()) {
            return Some(key);
        }
        s.best_by(head, |(_, q), (_, b)| (q.jobs.len() != b.jobs.len()).then_some(q.jobs.len() > b.jobs.len()))
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
