//! A storage server's decisions as a state machine ([`ServerNode`]): what its disk runs
//! next, what it reports, what it hands an idle peer and when it asks peers for work. The
//! real server (`ganges-server`) and the simulator (`ganges-sim`) both drive it, so that
//! both make every decision the same way; each only carries the I/O out (reading a file or
//! advancing virtual time, sending the replies).
//!
//! Events in: a request ([`ServerNode::enqueue_request`]), a cancel, a progress notice, a
//! closed connection, a disk that finished, a peer's handoff ask ([`ServerNode::give`]) and
//! its answer, the passing of time. Decisions out: the job the disk runs next with the
//! modelled disk's timeline for it ([`ServerNode::pop`]), the report replies carry, the jobs
//! handed to a peer, whether to ask a peer for work and when to look again
//! ([`ServerNode::poll_ask`], [`ServerNode::wake_at`]).
//!
//! Each queued job carries a context `C` of the driver's choosing (the real server's holds
//! the connection to answer on; the simulator's names the consumer). The node keeps:
//! - the [`Scheduler`] that picks the next job, and the [`DiskModel`] that says when the
//!   modelled disk finishes it;
//! - the progress of the consumers reading this server's primary copies (GD-3), and the
//!   server's measured bandwidth (GD-4 reports it, GD-6 trades it);
//! - which jobs may be cancelled by (connection, request id), which may be handed to
//!   another server, and the handoff [`Asker`]'s back-offs (GD-6).

use crate::disk::{DiskModel, FileKey, Service as DiskService};
use crate::handoff::{Asker, RateMeter, select, share};
use crate::ids::NodeId;
use crate::sched::{Job, JobId, PrimaryTracker, Progress, Scheduler, StreamKey};
use crate::time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long after the last handoff-enabled request an empty queue still makes the server
/// ask its peers for work: long enough to cover the gaps of a running scan, short enough
/// that idle servers stop asking soon after scans end.
pub const HANDOFF_ACTIVE_FOR: Duration = Duration::from_secs(2);

/// The longest pause between reads on a real disk that still counts as busy
/// (`ServerNode::finished_real`): longer than the round trip for a consumer's next request
/// on a network, far shorter than any stretch with nothing to read.
pub const REAL_GAP_MAX: Duration = Duration::from_millis(10);

/// What the queue needs to know of a read's context.
pub trait ReadContext {
    /// The connection the read came on (its consumer's, for a read handed over by a peer).
    fn conn(&self) -> u64;
    /// The request id a cancel names, or `None` for a read handed over by a peer (its id
    /// belongs to the peer's connection, so it cannot be cancelled here).
    fn request_id(&self) -> Option<u64>;
    /// The client whose own read this is, if a peer may serve it instead (GD-6); `None` for
    /// what only this server runs: a read handed over already, a write.
    fn client(&self) -> Option<u64>;
}

/// Whether to ask a peer for work ([`ServerNode::poll_ask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Ask this peer now.
    Peer(NodeId),
    /// Every peer is backed off: look again then.
    At(Time),
    /// Nothing to ask for: the queue has work, or no scan that allows handoff is about.
    Idle,
}

/// A read taken off the queue, with when the modelled disk runs it (if modelled).
#[derive(Debug)]
pub struct Popped<C> {
    pub job: Job,
    pub ctx: C,
    pub modelled: Option<DiskService>,
}

/// What a server reports about itself in replies and probe answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Report {
    pub queue_len: u32,
    /// The least progress among the consumers reading its primary copies of the dataset.
    pub primary_progress: Option<f64>,
    /// Its measured bandwidth, else the configured one: its disk's, or its link's where the
    /// link was measured slower (`ServerNode::sent`).
    pub disk_bytes_per_sec: Option<f64>,
    /// Whether `disk_bytes_per_sec` was measured. A configured rate is a promise a fault or a
    /// competing load may break; gd-plan does not plan on it.
    pub disk_measured: bool,
    /// The least `Service::depth` among backup reads queued here, if any.
    pub backup_depth: Option<u8>,
}

#[derive(Debug)]
pub struct ServerNode<C> {
    pub sched: Box<dyn Scheduler>,
    pub model: Option<DiskModel>,
    /// Progress of the consumers reading this server's primary copies (GD-3).
    pub primaries: PrimaryTracker,
    /// This server's measured bandwidth.
    pub rate: RateMeter,
    /// Its outgoing link's, measured while replies were crossing it (`ServerNode::sent`).
    pub link: RateMeter,
    /// When a reply last finished crossing the link, and bytes sent in no time of their own
    /// since (their send lay inside an earlier one's).
    last_sent: Option<Time>,
    sent_unclocked: u64,
    /// The file last read, when there is no model to remember it.
    head: Option<FileKey>,
    jobs: BTreeMap<JobId, (Job, C)>,
    /// Cancellable reads by (connection, request id).
    by_request: BTreeMap<(u64, u64), JobId>,
    next_job: JobId,
    /// When a read that allows handoff was last queued here.
    handoff_seen: Option<Time>,
    /// Requests queued here so far.
    enqueued: u64,
    /// Appends given back to their writers for this server (GD-6 for writes): the count of
    /// `enqueued` they make when all have come, and until when they are waited for.
    expecting: Option<(u64, Time)>,
    /// Streams reading one of this server's primary copies, and of which dataset.
    primary_streams: BTreeMap<StreamKey, u64>,
    /// When a request on the real disk last finished (see [`ServerNode::finished_real`]).
    last_finish: Option<Time>,
    asker: Asker,
}

impl<C: ReadContext> ServerNode<C> {
    pub fn new(sched: Box<dyn Scheduler>, model: Option<DiskModel>) -> ServerNode<C> {
        ServerNode {
            sched,
            model,
            primaries: PrimaryTracker::default(),
            rate: RateMeter::default(),
            link: RateMeter::default(),
            last_sent: None,
            sent_unclocked: 0,
            head: None,
            jobs: BTreeMap::new(),
            by_request: BTreeMap::new(),
            next_job: 1,
            handoff_seen: None,
            enqueued: 0,
            expecting: None,
            primary_streams: BTreeMap::new(),
            last_finish: None,
            asker: Asker::default(),
        }
    }

    /// A consumer's request (a read, or a write's block). `primary_of` names the dataset when
    /// it is for this server's primary copy: the stream's progress then counts for GD-3.
    pub fn enqueue_request(&mut self, job: Job, ctx: C, primary_of: Option<u64>, now: Time) -> JobId {
        if let Some(dataset) = primary_of {
            self.note_primary_stream(job.stream, dataset, job.progress, now);
        }
        self.enqueue(job, ctx)
    }

    /// A stream read one of this server's primary copies of `dataset` (GD-3 reports how far
    /// such streams are to consumers reading its backup copies).
    fn note_primary_stream(&mut self, stream: StreamKey, dataset: u64, progress: Progress, now: Time) {
        self.primary_streams.insert(stream, dataset);
        self.primaries.note(dataset, stream, progress, now);
    }

    /// A progress notice between requests: the scheduler hears it, and so does the primary
    /// tracker if the stream reads a primary copy.
    pub fn note_progress(&mut self, stream: StreamKey, progress: Progress, now: Time) {
        self.sched.update_progress(stream, progress);
        if let Some(&dataset) = self.primary_streams.get(&stream) {
            self.primaries.note(dataset, stream, progress, now);
        }
    }

    /// Whether this connection already has a read with this request id queued.
    pub fn has_request(&self, conn: u64, request_id: u64) -> bool {
        self.by_request.contains_key(&(conn, request_id))
    }

    /// Queue a job (its `id` is assigned here): one the server makes itself (replica
    /// completion's writes, a handed-over read). Returns the job id.
    pub fn enqueue(&mut self, mut job: Job, ctx: C) -> JobId {
        let id = self.next_job;
        self.next_job += 1;
        job.id = id;
        if job.service.handoff {
            self.handoff_seen = Some(job.arrival);
        }
        self.enqueued += 1;
        if let Some(r) = ctx.request_id() {
            self.by_request.insert((ctx.conn(), r), id);
        }
        self.jobs.insert(id, (job, ctx));
        self.sched.push(job);
        id
    }

    /// Remove a queued read (cancel). Returns its context if it had not started.
    pub fn cancel(&mut self, conn: u64, request_id: u64) -> Option<C> {
        let id = self.by_request.remove(&(conn, request_id))?;
        self.take(id)
    }

    fn take(&mut self, id: JobId) -> Option<C> {
        let (_, ctx) = self.jobs.remove(&id)?;
        if let Some(r) = ctx.request_id() {
            self.by_request.remove(&(ctx.conn(), r));
        }
        let removed = self.sched.remove(id);
        assert!(removed, "a job with a context is queued");
        Some(ctx)
    }

    /// Drop every queued read of a closed connection (the disk must not work for nobody),
    /// and forget its streams. Returns how many were dropped.
    pub fn drop_connection(&mut self, conn: u64) -> usize {
        let ids: Vec<JobId> = self.jobs.iter().filter(|(_, (_, c))| c.conn() == conn).map(|(id, _)| *id).collect();
        for &id in &ids {
            self.take(id);
        }
        self.primaries.forget_conn(conn);
        self.primary_streams.retain(|k, _| k.conn != conn);
        ids.len()
    }

    /// Whether an empty queue should make this server ask its peers for work now: not while
    /// appends redirected to it are on their way.
    pub fn wants_work(&self, now: Time) -> bool {
        self.sched.is_empty()
            && self.handoff_seen.is_some_and(|t| now.since(t) < HANDOFF_ACTIVE_FOR)
            && !self.expecting.is_some_and(|(upto, until)| self.enqueued < upto && now < until)
    }

    /// Requests queued here so far (a count to pass to [`ServerNode::expect`]).
    pub fn enqueued(&self) -> u64 {
        self.enqueued
    }

    /// `n` appends were redirected here by an ask made when [`ServerNode::enqueued`] was
    /// `asked_at`; until `n` requests have come since (any count: a redirected append may
    /// arrive before the answer to the ask) or `until`, the queue does not ask for more.
    pub fn expect(&mut self, n: u32, asked_at: u64, until: Time) {
        self.expecting = Some((asked_at + n as u64, until));
    }

    /// When the driver should look at the queue again with nothing new arriving: the
    /// scheduler's deadline, or the end of a wait for redirected appends.
    pub fn wake_at(&self) -> Option<Time> {
        let expect = self.expecting.filter(|(upto, _)| self.enqueued < *upto).map(|(_, until)| until);
        self.sched.wake_at().into_iter().chain(expect).min()
    }

    /// Remove up to `n` queued reads that allow handoff and that `eligible` accepts, the
    /// newest first (GD-6), and return them with their contexts.
    pub fn hand_off(&mut self, n: usize, eligible: impl Fn(&Job, &C) -> bool) -> Vec<(Job, C)> {
        let candidates: Vec<(JobId, Time)> = self
            .jobs
            .iter()
            .filter(|(_, (j, c))| j.service.handoff && eligible(j, c))
            .map(|(id, (j, _))| (*id, j.arrival))
            .collect();
        select(candidates, n)
            .into_iter()
            .filter_map(|id| {
                let job = self.jobs.get(&id).map(|(j, _)| *j)?;
                self.take(id).map(|ctx| (job, ctx))
            })
            .collect()
    }

    /// Reads queued that could be handed to a server passing `eligible`.
    pub fn count_eligible(&self, eligible: impl Fn(&Job, &C) -> bool) -> usize {
        self.jobs.values().filter(|(j, c)| j.service.handoff && eligible(j, c)).count()
    }

    /// The busy side of a handoff (GD-6): an idle peer reading at `rate_idle` asks for work.
    /// It may take a client's own read that allows handoff, of a client it serves too
    /// (`serves`: the client then hears from the server it will read from), of a block it
    /// holds a copy of (`holds`); it gets the share of those that makes both servers finish
    /// together at `rate_idle` and `my_rate` ([`share`]), the newest first.
    pub fn give(
        &mut self,
        serves: impl Fn(u64) -> bool,
        holds: impl Fn(&C) -> bool,
        rate_idle: f64,
        my_rate: f64,
    ) -> Vec<(Job, C)> {
        let eligible = |_: &Job, c: &C| c.client().is_some_and(&serves) && holds(c);
        let n = share(self.count_eligible(eligible), rate_idle, my_rate);
        self.hand_off(n, eligible)
    }

    /// Whether to ask one of `peers` for work now (GD-6): while the queue is empty and reads
    /// that allow handoff were about ([`ServerNode::wants_work`]), the next peer not backed
    /// off; when every one is, the instant to look again.
    pub fn poll_ask(&mut self, now: Time, peers: &[NodeId]) -> Ask {
        if !self.wants_work(now) {
            return Ask::Idle;
        }
        match self.asker.on_idle(now, peers) {
            Some(peer) => Ask::Peer(peer),
            None => self.asker.next_retry(now).map_or(Ask::Idle, Ask::At),
        }
    }

    /// `peer` answered an ask from [`ServerNode::poll_ask`] with `given` jobs (0 if the ask
    /// failed): a peer with nothing to give is backed off.
    pub fn on_ask_answer(&mut self, now: Time, peer: NodeId, given: usize) {
        self.asker.on_answer(now, peer, given);
    }

    /// The node's invariants (the simulator checks them after every event): every queued
    /// job has its context and is in the scheduler, and every cancellable one is found by
    /// its (connection, request id).
    pub fn check(&self) -> Result<(), String> {
        if self.jobs.len() != self.sched.len() {
            return Err(format!("{} jobs with contexts, {} in the scheduler", self.jobs.len(), self.sched.len()));
        }
        for (&(conn, request), id) in &self.by_request {
            match self.jobs.get(id) {
                Some((_, c)) if c.conn() == conn && c.request_id() == Some(request) => {}
                _ => return Err(format!("request {request} of connection {conn} names job {id}, not queued as it")),
            }
        }
        let cancellable = self.jobs.values().filter(|(_, c)| c.request_id().is_some()).count();
        if cancellable != self.by_request.len() {
            return Err(format!("{cancellable} cancellable jobs, {} found by request", self.by_request.len()));
        }
        Ok(())
    }

    /// The read the disk runs next, with the modelled disk's timeline for it: computed here,
    /// at the pop, so the modelled disk serves reads in exactly the scheduler's order.
    pub fn pop(&mut self, now: Time) -> Option<Popped<C>> {
        let head = self.model.as_ref().map_or(self.head, |m| m.head());
        let job = self.sched.pop(now, head)?;
        let (_, ctx) = self.jobs.remove(&job.id).expect("queued jobs have contexts");
        if let Some(r) = ctx.request_id() {
            self.by_request.remove(&(ctx.conn(), r));
        }
        // From the arrival, not `now`: the model keeps an absolute timeline, so a driver that
        // pops late does not slow the modelled disk down.
        let modelled = self.model.as_mut().map(|m| m.serve(job.arrival, job.file, job.bytes));
        self.head = Some(job.file);
        Some(Popped { job, ctx, modelled })
    }

    /// A read finished after `busy` on the disk.
    pub fn finished(&mut self, bytes: u64, busy: Duration) {
        self.rate.note(bytes, busy);
    }

    /// A request on the real disk (no model) that began at `began` finished at `now`. The
    /// disk may run several at once (`queue_depth`), so each is charged the disk's busy time
    /// since the later of its own start and the last finish: the charges add up to the time
    /// the disk was busy at all, not to the sum of overlapping requests' times (which would
    /// make a disk serving two at once look half as fast). Returns the request's charge: the
    /// disk time its reply reports, so that a consumer's own reckoning of a disk's speed from
    /// its replies agrees with the server's.
    pub fn finished_real(&mut self, bytes: u64, began: Time, now: Time) -> Duration {
        // A pause shorter than `REAL_GAP_MAX` between the last finish and this start counts as
        // busy: the disk had work coming, and a disk that saves up for pauses (a kernel
        // throttle's budget grows while it waits) then serves the next reads at once and
        // would measure faster than it can keep up.
        let from = match self.last_finish {
            Some(l) if began <= l + REAL_GAP_MAX => l,
            Some(l) => l.max(began),
            None => began,
        };
        self.last_finish = Some(now);
        let charged = now.since(from);
        self.rate.note_real(bytes, charged);
        charged
    }

    /// A reply of `bytes` was crossing the outgoing link from `began` until `done`: written
    /// to a connection's socket (a full socket waits for the link to drain it), or carried
    /// by a modelled link. The link's busy time is the union of those stretches, over every
    /// connection, so the meter reads what the link carries while it has something to carry:
    /// a fast link's sends end almost at once and measure far above any disk; a slow one's
    /// queue behind each other and measure the link.
    ///
    /// A server whose link is slower than its disk serves at its link's speed, and reports
    /// that: a consumer that plans on disk speeds (gd-plan) saw a healthy disk behind a link
    /// tc held to half of it, planned it a full share, and on 8 real servers its reader
    /// finished up to 0.7 s after the others (89-96% of the layout-aware ideal from run to
    /// run).
    pub fn sent(&mut self, bytes: u64, began: Time, done: Time) {
        let from = self.last_sent.map_or(began, |l| l.max(began));
        self.last_sent = Some(self.last_sent.map_or(done, |l| l.max(done)));
        self.sent_unclocked += bytes;
        if done > from {
            self.link.note_real(std::mem::take(&mut self.sent_unclocked), done.since(from));
        }
    }

    /// Forget what the disk's and the link's meters measured (a bench does before each run,
    /// so no run starts on the last one's faults).
    pub fn forget_rates(&mut self) {
        (self.rate, self.link, self.last_sent, self.sent_unclocked) =
            (RateMeter::default(), RateMeter::default(), None, 0);
    }

    /// What to report about this server to a consumer of `dataset`.
    pub fn report(&mut self, dataset: u64, now: Time) -> Report {
        let measured = self.rate.rate().map(|disk| self.link.rate().map_or(disk, |link| disk.min(link)));
        Report {
            queue_len: self.sched.len() as u32,
            primary_progress: self.primaries.progress(dataset, now),
            disk_bytes_per_sec: measured.or(self.model.as_ref().map(|m| m.params().rate_bytes_per_sec)),
            disk_measured: measured.is_some(),
            backup_depth: self
                .jobs
                .values()
                .map(|(j, _)| j.service)
                .filter(|s| s.copy > 0 && s.depth > 0)
                .map(|s| s.depth)
                .min(),
        }
    }

    pub fn len(&self) -> usize {
        self.sched.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sched.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::DiskParams;
    use crate::sched::{ProgressMetric, SchedulerKind, Service};

    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Ctx {
        conn: u64,
        request: Option<u64>,
    }

    impl ReadContext for Ctx {
        fn conn(&self) -> u64 {
            self.conn
        }
        fn request_id(&self) -> Option<u64> {
            self.request
        }
        fn client(&self) -> Option<u64> {
            self.request.map(|_| self.conn)
        }
    }

    fn job(stream: u64, arrival_ms: u64, handoff: bool) -> Job {
        Job {
            id: 0,
            stream: StreamKey { conn: stream, stream: 0 },
            file: stream,
            bytes: 1000,
            progress: Progress { done_bytes: 0, total_bytes: 10_000, metric: ProgressMetric::Fraction },
            service: Service { handoff, ..Service::FURTHEST_BEHIND },
            arrival: Time::ZERO + Duration::from_millis(arrival_ms),
        }
    }

    fn queue<C: ReadContext>() -> ServerNode<C> {
        let model = DiskModel::new(DiskParams {
            rate_bytes_per_sec: 1_000_000.0,
            seek: Duration::from_millis(4),
            queue_depth: 1,
        });
        ServerNode::new(SchedulerKind::Auto.build(), Some(model))
    }

    /// The least depth among queued backup reads (gd-rr's chains of trouble): reads of the
    /// primary copy and reads not in trouble (depth 0) do not count, nor reads taken off.
    #[test]
    fn reports_the_least_depth_of_the_backup_reads_queued() {
        let mut q: ServerNode<Ctx> = queue();
        let read = |stream: u64, copy: u8, depth: u8| Job {
            service: Service { copy, depth, ..Service::FURTHEST_BEHIND },
            ..job(stream, 0, false)
        };
        let ctx = |conn: u64| Ctx { conn, request: Some(conn) };
        assert_eq!(q.report(7, Time::ZERO).backup_depth, None);
        q.enqueue_request(read(1, 0, 1), ctx(1), Some(7), Time::ZERO);
        q.enqueue_request(read(2, 1, 0), ctx(2), None, Time::ZERO);
        assert_eq!(q.report(7, Time::ZERO).backup_depth, None, "a primary read, and a backup read in no trouble");
        q.enqueue_request(read(3, 1, 5), ctx(3), None, Time::ZERO);
        q.enqueue_request(read(4, 1, 3), ctx(4), None, Time::ZERO);
        assert_eq!(q.report(7, Time::ZERO).backup_depth, Some(3));
        assert!(q.cancel(4, 4).is_some());
        assert_eq!(q.report(7, Time::ZERO).backup_depth, Some(5), "a cancelled read is not queued");
    }

    #[test]
    fn an_idle_node_asks_each_peer_in_turn_and_backs_off_those_with_nothing() {
        let mut q: ServerNode<Ctx> = queue();
        let peers = [NodeId(1), NodeId(2)];
        assert_eq!(q.poll_ask(Time::ZERO, &peers), Ask::Idle, "no scan that allows handoff yet");
        q.enqueue_request(job(1, 0, true), Ctx { conn: 1, request: Some(1) }, Some(7), Time::ZERO);
        assert_eq!(q.poll_ask(Time::ZERO, &peers), Ask::Idle, "work queued");
        assert!(q.report(7, Time::ZERO).primary_progress.is_some(), "a primary copy's reader counts (GD-3)");
        let now = Time::ZERO + Duration::from_millis(10);
        q.pop(now).unwrap();
        assert_eq!(q.poll_ask(now, &peers), Ask::Peer(NodeId(1)));
        q.on_ask_answer(now, NodeId(1), 0);
        assert_eq!(q.poll_ask(now, &peers), Ask::Peer(NodeId(2)));
        q.on_ask_answer(now, NodeId(2), 0);
        assert_eq!(q.poll_ask(now, &peers), Ask::At(now + crate::handoff::ASK_BACKOFF));
        q.check().unwrap();
    }

    #[test]
    fn overlapping_real_reads_are_charged_the_disk_s_busy_time_once() {
        let mut q: ServerNode<Ctx> = ServerNode::new(SchedulerKind::Fifo.build(), None);
        let ms = |m: u64| Time(m * 1_000_000);
        let dur = Duration::from_millis;
        // Two reads of 1 MiB at once, 0-10 ms and 1-11 ms: the disk was busy 11 ms for 2 MiB.
        assert_eq!(q.finished_real(1 << 20, ms(0), ms(10)), dur(10));
        assert_eq!(q.finished_real(1 << 20, ms(1), ms(11)), dur(1));
        // A read after a short pause is charged the pause too (the disk had work coming); after
        // a long one, its own time only.
        assert_eq!(q.finished_real(1 << 20, ms(15), ms(20)), dur(9));
        assert_eq!(q.finished_real(1 << 20, ms(100), ms(105)), dur(5));
        // The meter holds those charges, and a real disk's gives no rate over less than a
        // window of them (`RateMeter::note_real`).
        assert_eq!(q.rate.rate(), None, "25 ms is less than a window");
        q.finished_real(1 << 20, ms(105), ms(330));
        assert!((q.rate.rate().unwrap() - (5u64 << 20) as f64 / 0.250).abs() < 1.0);
    }

    #[test]
    fn cancel_finds_a_read_by_connection_and_request_id_until_it_runs() {
        let mut q = queue();
        q.enqueue(job(1, 0, false), Ctx { conn: 1, request: Some(7) });
        q.enqueue(job(2, 1, false), Ctx { conn: 2, request: Some(7) });
        assert!(q.has_request(1, 7) && q.has_request(2, 7));
        assert_eq!(q.cancel(2, 7), Some(Ctx { conn: 2, request: Some(7) }));
        assert_eq!(q.cancel(2, 7), None, "only once");
        let p = q.pop(Time::ZERO).unwrap();
        assert_eq!(p.ctx.conn, 1);
        assert_eq!(q.cancel(1, 7), None, "a read that started cannot be cancelled");
        assert!(q.is_empty());
    }

    #[test]
    fn the_model_times_reads_in_pop_order_with_a_seek_between_files() {
        let mut q = queue();
        q.enqueue(job(1, 0, false), Ctx { conn: 1, request: Some(1) });
        q.enqueue(job(2, 0, false), Ctx { conn: 2, request: Some(1) });
        let a = q.pop(Time::ZERO).unwrap().modelled.unwrap();
        let b = q.pop(Time::ZERO).unwrap().modelled.unwrap();
        assert_eq!(a.done.since(a.start), Duration::from_millis(1));
        assert_eq!(b.start, a.done);
        assert!(b.seeked, "a different file after the first");
    }

    #[test]
    fn handoff_takes_the_newest_eligible_reads_and_nothing_else() {
        let mut q = queue();
        for (i, handoff) in [(0, true), (1, true), (2, false), (3, true)] {
            q.enqueue(job(1, i, handoff), Ctx { conn: 1, request: Some(i) });
        }
        assert_eq!(q.count_eligible(|_, _| true), 3);
        let given = q.hand_off(2, |_, _| true);
        let ids: Vec<u64> = given.iter().map(|(_, c)| c.request.unwrap()).collect();
        assert_eq!(ids, [3, 1]);
        assert!(!q.has_request(1, 3), "a read handed away cannot be cancelled here");
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_closed_connection_leaves_nothing_behind() {
        let mut q = queue();
        q.enqueue(job(1, 0, false), Ctx { conn: 1, request: Some(1) });
        q.enqueue(job(1, 1, false), Ctx { conn: 1, request: None });
        q.enqueue(job(2, 2, false), Ctx { conn: 2, request: Some(1) });
        assert_eq!(q.drop_connection(1), 2);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(Time::ZERO).unwrap().ctx.conn, 2);
    }

    #[test]
    fn an_empty_queue_waits_for_redirected_appends_before_asking_again() {
        let mut q = queue();
        q.enqueue(job(1, 0, true), Ctx { conn: 1, request: Some(1) });
        q.pop(Time::ZERO);
        let t = |ms| Time::ZERO + Duration::from_millis(ms);
        assert!(q.wants_work(t(10)));
        let asked = q.enqueued();
        q.expect(2, asked, t(60));
        assert!(!q.wants_work(t(10)), "two appends are on their way");
        assert_eq!(q.wake_at(), Some(t(60)), "the driver looks again when the wait ends");
        q.enqueue(job(1, 11, true), Ctx { conn: 1, request: Some(2) });
        q.pop(t(11));
        assert!(!q.wants_work(t(12)), "one still to come");
        q.enqueue(job(1, 12, true), Ctx { conn: 1, request: Some(3) });
        q.pop(t(12));
        assert!(q.wants_work(t(13)), "both came");
        assert_eq!(q.wake_at(), None);
        let asked = q.enqueued();
        q.enqueue(job(1, 13, true), Ctx { conn: 1, request: Some(4) });
        q.pop(t(13));
        q.expect(1, asked, t(60));
        assert!(q.wants_work(t(14)), "the append came before the answer to the ask");
        q.expect(1, q.enqueued(), t(60));
        assert!(!q.wants_work(t(59)));
        assert!(q.wants_work(t(60)), "a writer that never resends is not waited for");
    }

    #[test]
    fn an_empty_queue_wants_work_only_while_handoff_reads_were_seen_lately() {
        let mut q = queue();
        assert!(!q.wants_work(Time::ZERO));
        q.enqueue(job(1, 0, true), Ctx { conn: 1, request: Some(1) });
        assert!(!q.wants_work(Time::ZERO), "not while it has work");
        q.pop(Time::ZERO);
        assert!(q.wants_work(Time::ZERO + Duration::from_secs(1)));
        assert!(!q.wants_work(Time::ZERO + HANDOFF_ACTIVE_FOR));
    }

    #[test]
    fn reports_the_measured_rate_once_there_is_one() {
        let mut q = queue::<Ctx>();
        let r = q.report(1, Time::ZERO);
        assert_eq!((r.disk_bytes_per_sec, r.disk_measured), (Some(1_000_000.0), false), "configured");
        q.finished(1 << 19, Duration::from_millis(1));
        let r = q.report(1, Time::ZERO);
        assert_eq!((r.disk_bytes_per_sec, r.disk_measured), (Some(1_000_000.0), false), "half a MiB is no measure");
        q.finished(1 << 19, Duration::from_millis(1));
        let r = q.report(1, Time::ZERO);
        assert!(r.disk_measured, "measured");
        assert!((r.disk_bytes_per_sec.unwrap() - (1u64 << 20) as f64 / 0.002).abs() < 1e-3);
    }

    #[test]
    fn reports_its_link_where_that_is_slower_than_its_disk() {
        let ms = |m: u64| Time::ZERO + Duration::from_millis(m);
        let mib = (1u64 << 20) as f64;
        // Sends of several connections overlap: the link's busy time is their union, and a
        // send inside another's stretch counts its bytes with the next.
        let mut q = queue::<Ctx>();
        q.sent(1 << 20, ms(0), ms(100));
        q.sent(1 << 20, ms(50), ms(150));
        q.sent(1 << 20, ms(120), ms(130));
        assert_eq!(q.link.rate(), None, "a real link's figure needs a whole window");
        q.sent(1 << 20, ms(150), ms(300));
        let link = q.link.rate().expect("a window of busy time");
        assert!((link - 4.0 * mib / 0.3).abs() < 1.0, "{link}");
        // The disk's figure until it is measured; then the slower of the two.
        assert_eq!(q.report(1, ms(300)).disk_bytes_per_sec, Some(1_000_000.0));
        q.finished(1 << 20, Duration::from_millis(2));
        let r = q.report(1, ms(300));
        assert_eq!((r.disk_bytes_per_sec, r.disk_measured), (Some(link), true));
        // A link faster than the disk leaves the disk's figure.
        let mut fast = queue::<Ctx>();
        fast.finished(1 << 20, Duration::from_millis(2));
        for k in 0..300 {
            fast.sent(1 << 20, ms(10 * k), ms(10 * k + 1));
        }
        assert!(fast.link.rate().is_some_and(|l| l > mib / 0.002));
        assert_eq!(fast.report(1, ms(3000)).disk_bytes_per_sec, Some(mib / 0.002));
    }

    mod any_sequence {
        use super::*;
        use crate::sched::Discipline;
        use proptest::prelude::*;
        use std::collections::BTreeSet;

        /// One step: (what, connection, stream, a number for the step to use, milliseconds on).
        type Op = (u8, u64, u64, u16, u8);

        /// A read's context, with a tag to tell reads apart when one has no request id.
        #[derive(Debug, Clone, Copy)]
        struct Tagged {
            conn: u64,
            request: Option<u64>,
            tag: u64,
        }

        impl ReadContext for Tagged {
            fn conn(&self) -> u64 {
                self.conn
            }
            fn request_id(&self) -> Option<u64> {
                self.request
            }
            fn client(&self) -> Option<u64> {
                self.request.map(|_| self.conn)
            }
        }

        /// Each stream's service, fixed for the run: its discipline and options from `seed`.
        fn service(seed: u16) -> Service {
            Service {
                discipline: Discipline::ALL[seed as usize % Discipline::ALL.len()],
                runs: seed & 4 != 0,
                handoff: seed & 8 != 0,
                share: if seed & 16 != 0 { seed | 1 } else { 0 },
                copy: (seed >> 5) as u8 % 2,
                phased: seed & 128 != 0,
                guard_every: (seed >> 8) as u8 % 4,
                depth: (seed >> 10) as u8 % 3,
                level: seed & 4096 != 0,
            }
        }

        fn run(ops: &[Op], seeds: &[u16]) {
            let mut q: ServerNode<Tagged> = queue();
            let mut now = Time::ZERO;
            let mut next_request = 0u64;
            // Reads queued (connection, request): each must leave exactly once.
            let mut live: BTreeSet<(u64, u64)> = BTreeSet::new();
            let mut done: BTreeMap<StreamKey, u64> = BTreeMap::new();
            for &(what, conn, stream, n, ms) in ops {
                now = now + Duration::from_millis(ms as u64);
                let k = StreamKey { conn, stream };
                match what {
                    0..=2 => {
                        next_request += 1;
                        let svc = service(seeds[(conn * 3 + stream) as usize % seeds.len()]);
                        let d = *done.get(&k).unwrap_or(&0);
                        let job = Job {
                            id: 0,
                            stream: k,
                            file: conn * 10 + stream,
                            bytes: 1000,
                            progress: Progress {
                                done_bytes: d,
                                total_bytes: 1_000_000,
                                metric: ProgressMetric::Fraction,
                            },
                            service: svc,
                            arrival: now,
                        };
                        // Every eighth read was handed over by a peer: it has no request id.
                        let request = (n % 8 != 0).then_some(next_request);
                        q.enqueue(job, Tagged { conn, request, tag: next_request });
                        live.insert((conn, next_request));
                    }
                    3 => {
                        // A cancel names a read by request id; one handed over has none (its
                        // tag then names nothing here, and the cancel must find nothing).
                        let want = live.iter().nth(n as usize % live.len().max(1)).copied();
                        if let Some((c, r)) = want {
                            match q.cancel(c, r) {
                                Some(ctx) => assert!(ctx.request == Some(r) && live.remove(&(c, ctx.tag))),
                                None => assert!(!q.has_request(c, r)),
                            }
                        }
                    }
                    4 if n % 4 == 0 => {
                        let dropped = q.drop_connection(conn);
                        let before = live.len();
                        live.retain(|(c, _)| *c != conn);
                        assert_eq!(dropped, before - live.len(), "every read of connection {conn}");
                    }
                    4 => {
                        // A peer serving the clients below `conn` asks, as fast as this one.
                        for (job, ctx) in q.give(|c| c < conn, |_| true, 1.0, 1.0) {
                            assert!(job.service.handoff && ctx.request.is_some() && ctx.conn < conn);
                            assert!(live.remove(&(ctx.conn, ctx.tag)), "handed off once");
                        }
                    }
                    _ => {
                        if let Some(p) = q.pop(now) {
                            assert!(live.remove(&(p.ctx.conn, p.ctx.tag)), "served once");
                            *done.entry(p.job.stream).or_default() += p.job.bytes;
                            let d = done[&p.job.stream];
                            q.note_progress(p.job.stream, Progress { done_bytes: d, ..p.job.progress }, now);
                        } else if !q.is_empty() {
                            let t = q.wake_at().expect("a queue that serves nothing now says when");
                            assert!(t > now, "a wake-up in the past would spin");
                        }
                    }
                }
                assert_eq!(q.len(), live.len());
                q.check().unwrap();
            }
            // The rest is served, in bounded time.
            for _ in 0..10 * live.len() + 10 {
                if q.is_empty() {
                    break;
                }
                match q.pop(now) {
                    Some(p) => assert!(live.remove(&(p.ctx.conn, p.ctx.tag)), "served once"),
                    None => now = q.wake_at().expect("a queue that serves nothing now says when"),
                }
            }
            assert!(q.is_empty() && live.is_empty(), "{} reads never served", live.len());
        }

        proptest! {
            /// Any mix of disciplines, runs, shares, phases and handoff, and any sequence of
            /// arrivals, cancels, closed connections, handoffs, progress and pops: every read
            /// leaves the queue exactly once (served, cancelled, dropped or handed off), the
            /// queue's length is what came in less what went out, and a queue holding reads
            /// serves one now or names a later time to try again.
            #[test]
            fn every_read_leaves_the_queue_once(
                ops in prop::collection::vec((0u8..7, 0u64..4, 0u64..3, any::<u16>(), 0u8..30), 1..300),
                seeds in prop::collection::vec(any::<u16>(), 1..12),
            ) {
                run(&ops, &seeds);
            }
        }
    }
}
