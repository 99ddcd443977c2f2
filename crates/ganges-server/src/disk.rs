//! The disk driver: runs queued reads through the scheduler and the disk.
//!
//! Requests wait in a pure [`Scheduler`] from ganges-core (the `Auto` scheduler serves each
//! request by the discipline its consumer's policy asks for). A single driver task asks it
//! for the next job whenever the disk has room (`queue_depth` jobs in service at once, one by
//! default, so the scheduler decides as late as possible). Each job is read from its file on
//! the blocking pool, checked against its checksum, and then, when a disk model is set, held
//! until the model's completion time: the model throttles the real I/O path. The model's
//! timeline is computed when the job is popped, under the same lock, so the modelled disk
//! serves jobs in exactly the scheduler's order.
//!
//! When the queue runs dry while consumers that allow handoff are about, the driver wakes
//! the handoff asker (`handoff.rs`), which asks peers for work (GD-6).

use crate::Shared;
use crate::conn::Outbox;
use crate::store::{Dataset, StoreError};
use ganges_core::disk::{DiskModel, FileKey};
use ganges_core::handoff::RateMeter;
use ganges_core::ids::FragmentId;
use ganges_core::sched::{Job, JobId, PrimaryTracker, Progress, Scheduler, StreamKey};
use ganges_core::time::Time;
use ganges_proto::msg::{ErrorCode, Message, Origin, ReadOk, WireError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Semaphore;

/// How long after the last handoff-enabled request an empty queue still makes the server
/// ask its peers for work: long enough to cover the gaps of a running scan, short enough
/// that idle servers stop asking soon after scans end.
const HANDOFF_ACTIVE_FOR: Duration = Duration::from_secs(2);

/// What the driver needs to carry out a queued read and answer it.
#[derive(Debug)]
pub struct JobCtx {
    pub conn: u64,
    pub client_id: u64,
    pub request_id: u64,
    pub dataset: Arc<Dataset>,
    pub fragment: FragmentId,
    pub block: u32,
    pub start: u32,
    pub len: u32,
    pub outbox: Outbox,
    /// Set for a request another server handed to this one: the answer names it.
    pub origin: Option<Origin>,
}

/// The scheduler, the model and the bookkeeping that maps scheduler jobs to requests.
#[derive(Debug)]
pub struct DiskState {
    pub sched: Box<dyn Scheduler>,
    pub model: Option<DiskModel>,
    /// Progress of the consumers reading this server's primary copies (GD-3).
    pub primaries: PrimaryTracker,
    /// This server's measured bandwidth (GD-6 trades it).
    pub rate: RateMeter,
    /// The file last read, when there is no model to remember it.
    head: Option<FileKey>,
    jobs: HashMap<JobId, (Job, JobCtx)>,
    /// Cancellable jobs by (connection, request id). Handed-over jobs are not in here: their
    /// request ids belong to another server's connection.
    by_request: HashMap<(u64, u64), JobId>,
    next_job: JobId,
    /// When a request that allows handoff was last queued here.
    pub handoff_seen: Option<Time>,
    /// Streams reading one of this server's primary copies, and of which dataset.
    primary_streams: HashMap<StreamKey, u64>,
}

/// A job taken off the queue, with when the modelled disk runs it (if modelled).
struct Popped {
    ctx: JobCtx,
    modelled: Option<ganges_core::disk::Service>,
}

impl DiskState {
    pub fn new(sched: Box<dyn Scheduler>, model: Option<DiskModel>) -> DiskState {
        DiskState {
            sched,
            model,
            primaries: PrimaryTracker::default(),
            rate: RateMeter::default(),
            head: None,
            jobs: HashMap::new(),
            by_request: HashMap::new(),
            next_job: 1,
            handoff_seen: None,
            primary_streams: HashMap::new(),
        }
    }

    /// A stream read one of this server's primary copies of `dataset` (GD-3 reports how far
    /// such streams are to consumers reading its backup copies).
    pub fn note_primary_stream(&mut self, stream: StreamKey, dataset: u64, progress: Progress, now: Time) {
        self.primary_streams.insert(stream, dataset);
        self.primaries.note(dataset, stream, progress, now);
    }

    /// A progress notice: counts for the primary tracker if the stream reads a primary copy.
    pub fn note_primary_progress(&mut self, stream: StreamKey, progress: Progress, now: Time) {
        if let Some(&dataset) = self.primary_streams.get(&stream) {
            self.primaries.note(dataset, stream, progress, now);
        }
    }

    /// Whether this connection already has a read with this request id queued.
    pub fn has_request(&self, conn: u64, request_id: u64) -> bool {
        self.by_request.contains_key(&(conn, request_id))
    }

    /// Queue a read. Returns the job id.
    pub fn enqueue(&mut self, mut job: Job, ctx: JobCtx) -> JobId {
        let id = self.next_job;
        self.next_job += 1;
        job.id = id;
        if job.service.handoff {
            self.handoff_seen = Some(job.arrival);
        }
        if ctx.origin.is_none() {
            self.by_request.insert((ctx.conn, ctx.request_id), id);
        }
        self.jobs.insert(id, (job, ctx));
        self.sched.push(job);
        id
    }

    /// Remove a queued read (cancel). Returns its context if it had not started.
    pub fn cancel(&mut self, conn: u64, request_id: u64) -> Option<JobCtx> {
        let id = self.by_request.remove(&(conn, request_id))?;
        self.take(id)
    }

    fn take(&mut self, id: JobId) -> Option<JobCtx> {
        let (_, ctx) = self.jobs.remove(&id)?;
        if ctx.origin.is_none() {
            self.by_request.remove(&(ctx.conn, ctx.request_id));
        }
        let removed = self.sched.remove(id);
        assert!(removed, "a job with a context is queued");
        Some(ctx)
    }

    /// Drop every queued read of a closed connection: the disk must not work for nobody.
    pub fn drop_connection(&mut self, conn: u64) -> usize {
        let ids: Vec<JobId> = self.jobs.iter().filter(|(_, (_, c))| c.conn == conn).map(|(id, _)| *id).collect();
        for &id in &ids {
            self.take(id);
        }
        self.primaries.forget_conn(conn);
        self.primary_streams.retain(|k, _| k.conn != conn);
        ids.len()
    }

    /// Whether an empty queue should make this server ask its peers for work now.
    pub fn wants_work(&self, now: Time) -> bool {
        self.sched.is_empty() && self.handoff_seen.is_some_and(|t| now.since(t) < HANDOFF_ACTIVE_FOR)
    }

    /// Remove up to `n` queued jobs that `eligible` accepts, the newest first (GD-6), and
    /// return them with their contexts.
    pub fn hand_off(&mut self, n: usize, eligible: impl Fn(&Job, &JobCtx) -> bool) -> Vec<(Job, JobCtx)> {
        let candidates: Vec<(JobId, Time)> = self
            .jobs
            .iter()
            .filter(|(_, (j, c))| j.service.handoff && eligible(j, c))
            .map(|(id, (j, _))| (*id, j.arrival))
            .collect();
        ganges_core::handoff::select(candidates, n)
            .into_iter()
            .filter_map(|id| {
                let job = self.jobs.get(&id).map(|(j, _)| *j)?;
                self.take(id).map(|ctx| (job, ctx))
            })
            .collect()
    }

    /// Jobs queued that could be handed off to a server passing `eligible`.
    pub fn count_eligible(&self, eligible: impl Fn(&Job, &JobCtx) -> bool) -> usize {
        self.jobs.values().filter(|(j, c)| j.service.handoff && eligible(j, c)).count()
    }

    fn pop(&mut self, now: Time) -> Option<Popped> {
        let head = self.model.as_ref().map_or(self.head, |m| m.head());
        let job = self.sched.pop(now, head)?;
        let (_, ctx) = self.jobs.remove(&job.id).expect("queued jobs have contexts");
        if ctx.origin.is_none() {
            self.by_request.remove(&(ctx.conn, ctx.request_id));
        }
        let modelled = self.model.as_mut().map(|m| m.serve(job.arrival, job.file, job.bytes));
        self.head = Some(job.file);
        Some(Popped { ctx, modelled })
    }
}

/// The driver task. Runs until the server shuts down (the task is aborted).
pub async fn run(shared: Arc<Shared>, queue_depth: u32) {
    let slots = Arc::new(Semaphore::new(queue_depth.max(1) as usize));
    loop {
        let slot = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let popped = loop {
            let idle = {
                let mut d = shared.disk.lock().expect("disk lock");
                if let Some(p) = d.pop(shared.now()) {
                    break p;
                }
                d.wants_work(shared.now())
            };
            if idle {
                shared.idle.notify_one();
            }
            // notify_one stores a permit when nobody waits, so a job queued between the
            // check above and this await still wakes us.
            shared.disk_wake.notified().await;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            serve(&shared, popped).await;
            drop(slot);
        });
    }
}

async fn serve(shared: &Arc<Shared>, p: Popped) {
    let Popped { ctx, modelled } = p;
    let began = shared.now();
    let store = shared.store.clone();
    let (ds, fragment, block, start, len) = (ctx.dataset.clone(), ctx.fragment, ctx.block, ctx.start, ctx.len);
    let read = tokio::task::spawn_blocking(move || store.read(&ds, fragment, block, start, len))
        .await
        .unwrap_or_else(|e| Err(StoreError::BadRequest(format!("read task failed: {e}"))));
    let service = match modelled {
        Some(svc) => {
            tokio::time::sleep_until(shared.instant(svc.done)).await;
            svc.done.since(svc.start)
        }
        None => shared.now().since(began),
    };
    let (queue_len, primary_progress) = {
        let mut d = shared.disk.lock().expect("disk lock");
        d.rate.note(len as u64, service);
        (d.sched.len() as u32, d.primaries.progress(ctx.dataset.manifest.id, shared.now()))
    };
    let reply = match read {
        Ok((data, crc)) => {
            shared.counters.reads.fetch_add(1, Ordering::Relaxed);
            shared.counters.read_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            Message::ReadOk(ReadOk {
                crc,
                queue_len,
                service_us: micros(service),
                primary_progress,
                origin: ctx.origin,
                data,
            })
        }
        Err(e) => {
            if matches!(e, StoreError::Corrupt { .. }) {
                shared.counters.corrupt_blocks.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(node = %shared.config.node, dataset = %ctx.dataset.manifest.name, %e, "corrupt block not served");
            }
            Message::Error(WireError::new(e.code(), e.to_string()), ctx.origin)
        }
    };
    ctx.outbox.reply(ctx.request_id, reply);
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

/// The error sent for a read cancelled before it ran.
pub fn cancelled() -> Message {
    Message::Error(WireError::new(ErrorCode::Cancelled, "cancelled before it ran"), None)
}
