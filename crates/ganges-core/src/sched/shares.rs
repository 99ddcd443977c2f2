//! Planned shares (gd-plan): credits, runs, anticipation and phase slots.

use super::*;

/// Ours: each stream's share of this disk, *planned* by its consumer, served by credits.
///
/// Under furthest behind, a server can only give one consumer more than the other while
/// that consumer is behind, so a ring of servers that must give unequal shares (one slow
/// disk under chained declustering: 47% to the neighbour's consumer, less at each hop) holds
/// a progress gradient. Here each stream's weight is the share its consumer's plan gives it
/// at this server (`Service::share`, from every server's measured rate and the layout: see
/// `ideal::plan`), so the shares are right from the first request. The server serves by
/// credits on those weights plus a proportional term for the current lag, which corrects
/// what the plan got wrong, and lets a stream run on the file under the head while its
/// credit is above `-run_debt` (GD-5 runs without drifting apart: the debt is paid back).
/// The disk *anticipates*: when the stream it is running has nothing queued, it waits up to
/// `ShareSettings::anticipate` for that stream's next request (a reply pulls one within a
/// round trip) before seeking to another file, within a run of `RUN_MAX` or, phased
/// (below), within the stream's slot.
///
/// (Learning the weights instead, from each stream's lag, was gd-share's discipline; its
/// servers now learn shares by levelling furthest behind: see `route::Graduated`.)
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
pub type PlannedShares = PerStream<Shares>;

/// The planned discipline's rule: planned weights, credits, runs, anticipation and phase
/// slots, as [`ShareSettings`] sets them.
#[derive(Debug)]
pub struct Shares {
    how: ShareSettings,
    /// Weight and credit of each stream seen recently, and when it was last queued.
    pub(super) state: BTreeMap<StreamKey, ShareState>,
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

/// How the planned discipline serves its shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareSettings {
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
    /// [`PlannedShares`]); `None`: every pick earns each stream its share.
    pub phase: Option<Duration>,
}

impl ShareSettings {
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
        credit_bound: 2.0,
        run_debt: 1.0,
        run_lead: 1.0,
        anticipate: Some(Duration::from_millis(4)),
        phase: Some(Duration::from_millis(500)),
    };
}

#[derive(Debug, Clone, Copy)]
pub(super) struct ShareState {
    weight: f64,
    pub(super) credit: f64,
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
    /// tenth of its share; a quarter (with `route::plan::ON_TRACK_BLOCKS`, which then left
    /// lags under 8 blocks to this term) kept the most half-second windows on track in the
    /// simulator.
    const PHASE_LAG_GAIN: f64 = 0.25;

    pub fn new(how: ShareSettings) -> Shares {
        Shares { how, state: BTreeMap::new(), waiting: None, last_pick: None, pick_every: None, slots_decide: false }
    }

    /// How many of `stream`'s requests count as one block of the settings: runs, credits,
    /// debts, leads and lags are counted in `PLAN_UNIT_BYTES` of each stream's requests
    /// ([`plan_units`]), so a disk's schedule is the same in bytes whatever their size.
    fn units(&self, stream: &StreamKey) -> f64 {
        self.state.get(stream).map_or(1.0, |st| plan_units(st.block))
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
pub(super) fn slot_overlap(from: u64, to: u64, period: u64, start: f64, len: f64) -> f64 {
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
    pub fn planned() -> PlannedShares {
        PerStream { s: Streams::default(), rule: Shares::new(ShareSettings::PLANNED) }
    }

    pub fn weight(&self, stream: StreamKey) -> Option<f64> {
        self.rule.state.get(&stream).map(|s| s.weight)
    }
}

impl Rule for Shares {
    fn name(&self) -> &'static str {
        "planned"
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
        st.weight = job.service.share_fraction().max(Self::WEIGHT_MIN);
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
            self.state.get_mut(k).expect("pushed streams have state").lag = l;
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
        let run = s.run_candidate(head, s.run_jobs()).copied().filter(|k| {
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
