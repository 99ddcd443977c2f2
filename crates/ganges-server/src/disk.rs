//! The disk driver: runs queued reads through the scheduler and the disk.
//!
//! Requests wait in a pure [`Scheduler`] from ganges-core. A single driver task asks it for
//! the next job whenever the disk has room (`queue_depth` jobs in service at once, one by
//! default, so the scheduler decides as late as possible). Each job is read from its file on
//! the blocking pool, checked against its checksum, and then, when a disk model is set, held
//! until the model's completion time: the model throttles the real I/O path. The model's
//! timeline is computed when the job is popped, under the same lock, so the modelled disk
//! serves jobs in exactly the scheduler's order.

use crate::Shared;
use crate::store::{Dataset, StoreError};
use ganges_core::disk::{DiskModel, FileKey};
use ganges_core::ids::FragmentId;
use ganges_core::sched::{Job, JobId, Scheduler};
use ganges_core::time::Time;
use ganges_proto::msg::{ErrorCode, Message, ReadOk, WireError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::conn::Outbox;

/// What the driver needs to carry out a queued read and answer it.
#[derive(Debug)]
pub struct JobCtx {
    pub conn: u64,
    pub request_id: u64,
    pub dataset: Arc<Dataset>,
    pub fragment: FragmentId,
    pub block: u32,
    pub start: u32,
    pub len: u32,
    pub outbox: Outbox,
}

/// The scheduler, the model and the bookkeeping that maps scheduler jobs to requests.
#[derive(Debug)]
pub struct DiskState {
    pub sched: Box<dyn Scheduler>,
    pub model: Option<DiskModel>,
    /// The file last read, when there is no model to remember it.
    head: Option<FileKey>,
    jobs: HashMap<JobId, JobCtx>,
    by_request: HashMap<(u64, u64), JobId>,
    next_job: JobId,
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
            head: None,
            jobs: HashMap::new(),
            by_request: HashMap::new(),
            next_job: 1,
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
        self.by_request.insert((ctx.conn, ctx.request_id), id);
        self.jobs.insert(id, ctx);
        self.sched.push(job);
        id
    }

    /// Remove a queued read (cancel). Returns its context if it had not started.
    pub fn cancel(&mut self, conn: u64, request_id: u64) -> Option<JobCtx> {
        let id = self.by_request.remove(&(conn, request_id))?;
        let ctx = self.jobs.remove(&id).expect("indexed jobs exist");
        let removed = self.sched.remove(id);
        assert!(removed, "a job in the index is queued");
        Some(ctx)
    }

    /// Drop every queued read of a closed connection: the disk must not work for nobody.
    pub fn drop_connection(&mut self, conn: u64) -> usize {
        let ids: Vec<(u64, u64)> = self
            .by_request
            .keys()
            .filter(|(c, _)| *c == conn)
            .copied()
            .collect();
        for key in &ids {
            self.cancel(key.0, key.1);
        }
        ids.len()
    }

    fn pop(&mut self, now: Time) -> Option<Popped> {
        let head = self.model.as_ref().map_or(self.head, |m| m.head());
        let job = self.sched.pop(now, head)?;
        let ctx = self
            .jobs
            .remove(&job.id)
            .expect("queued jobs have contexts");
        self.by_request.remove(&(ctx.conn, ctx.request_id));
        let modelled = self
            .model
            .as_mut()
            .map(|m| m.serve(job.arrival, job.file, job.bytes));
        self.head = Some(job.file);
        Some(Popped { ctx, modelled })
    }
}

/// The driver task. Runs until the server shuts down (the task is aborted).
pub async fn run(shared: Arc<Shared>, queue_depth: u32) {
    let slots = Arc::new(Semaphore::new(queue_depth.max(1) as usize));
    loop {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let popped = loop {
            if let Some(p) = shared.disk.lock().expect("disk lock").pop(shared.now()) {
                break p;
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
    let (ds, fragment, block, start, len) = (
        ctx.dataset.clone(),
        ctx.fragment,
        ctx.block,
        ctx.start,
        ctx.len,
    );
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
    let queue_len = shared.disk.lock().expect("disk lock").sched.len() as u32;
    let reply = match read {
        Ok((data, crc)) => {
            shared.counters.reads.fetch_add(1, Ordering::Relaxed);
            shared
                .counters
                .read_bytes
                .fetch_add(data.len() as u64, Ordering::Relaxed);
            Message::ReadOk(ReadOk {
                crc,
                queue_len,
                service_us: micros(service),
                data,
            })
        }
        Err(e) => {
            if matches!(e, StoreError::Corrupt { .. }) {
                shared
                    .counters
                    .corrupt_blocks
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(node = %shared.config.node, dataset = %ctx.dataset.manifest.name, %e, "corrupt block not served");
            }
            Message::Error(WireError::new(e.code(), e.to_string()))
        }
    };
    ctx.outbox.reply(ctx.request_id, reply);
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

/// The error sent for a read cancelled before it ran.
pub fn cancelled() -> Message {
    Message::Error(WireError::new(
        ErrorCode::Cancelled,
        "cancelled before it ran",
    ))
}
