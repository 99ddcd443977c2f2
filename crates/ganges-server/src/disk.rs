//! The disk driver: runs queued reads and writes through the scheduler and the disk.
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
//! Writes take the same path (river §6.3: the disk serves the writer furthest behind first,
//! and the model charges a write like a read of the same size): a client's staged block, or
//! a block replica completion brought from a peer (GW-2), answered on a local channel.
//!
//! When the queue runs dry while consumers that allow handoff are about, the driver wakes
//! the handoff asker (`handoff.rs`), which asks peers for work (GD-6): queued reads, or
//! DQ appends given back to their writers to send here.

use crate::Shared;
use crate::conn::Outbox;
use crate::metrics::ServedRead;
use crate::store::{Dataset, FillFiles, StagedWrite, StoreError};
use bytes::Bytes;
use ganges_core::ids::FragmentId;
use ganges_core::sched::Job;
use ganges_core::serve::{Popped, ReadContext, ServerNode};
use ganges_proto::msg::{ErrorCode, Message, Origin, ReadOk, WireError, WriteOk};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// What the driver needs to carry out a queued read and answer it.
#[derive(Debug)]
pub struct JobCtx {
    pub conn: u64,
    pub client_id: u64,
    /// Which copy of its fragment this server holds (0: the primary), for the metrics and
    /// the live view (the consumer stream, its progress and the arrival are the job's).
    pub copy: u32,
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

impl ReadContext for JobCtx {
    fn conn(&self) -> u64 {
        self.conn
    }
    /// Handed-over reads cannot be cancelled here: their request ids belong to another
    /// server's connection.
    fn request_id(&self) -> Option<u64> {
        self.origin.is_none().then_some(self.request_id)
    }
    fn client(&self) -> Option<u64> {
        self.origin.is_none().then_some(self.client_id)
    }
}

/// Where a write goes.
#[derive(Debug)]
pub enum WriteTarget {
    /// A client's block of a dataset being written, checked when it was queued.
    Staged(StagedWrite),
    /// A block replica completion brought to this node's copy of a committed dataset.
    Fill { dataset: Arc<Dataset>, files: Arc<FillFiles> },
    /// A timed write to a scratch file at `offset` (an array write's empirical test), with
    /// direct I/O when the server uses it (so a kernel throttle holds it as it holds data).
    Scratch { file: Arc<std::fs::File>, direct: Option<Arc<std::fs::File>>, offset: u64 },
}

/// Who hears that a write finished.
#[derive(Debug)]
pub enum WriteReply {
    /// A client, on its connection; the permit bounds the write data a connection queues.
    Conn { outbox: Outbox, _permit: OwnedSemaphorePermit },
    /// This server's own replica completion.
    Local(oneshot::Sender<Result<u32, StoreError>>),
}

/// A queued write.
#[derive(Debug)]
pub struct WriteCtx {
    pub conn: u64,
    pub request_id: u64,
    pub target: WriteTarget,
    pub block: u32,
    pub crc: u32,
    pub data: Bytes,
    pub reply: WriteReply,
}

/// A queued job of either kind.
#[derive(Debug)]
pub enum Ctx {
    Read(JobCtx),
    Write(WriteCtx),
}

impl ReadContext for Ctx {
    fn conn(&self) -> u64 {
        match self {
            Ctx::Read(r) => r.conn(),
            Ctx::Write(w) => w.conn,
        }
    }
    fn request_id(&self) -> Option<u64> {
        match self {
            Ctx::Read(r) => r.request_id(),
            Ctx::Write(w) => matches!(w.reply, WriteReply::Conn { .. }).then_some(w.request_id),
        }
    }
    /// Only reads move to a peer; a DQ append goes back to its writer instead (`handoff.rs`).
    fn client(&self) -> Option<u64> {
        match self {
            Ctx::Read(r) => r.client(),
            Ctx::Write(_) => None,
        }
    }
}

impl Ctx {
    /// Answer the job without running it (it was cancelled, or its connection is gone).
    pub fn answer_now(self, msg: Message) {
        match self {
            Ctx::Read(r) => r.outbox.reply(r.request_id, msg),
            Ctx::Write(WriteCtx { request_id, reply: WriteReply::Conn { outbox, .. }, .. }) => {
                outbox.reply(request_id, msg)
            }
            Ctx::Write(WriteCtx { reply: WriteReply::Local(tx), .. }) => {
                let _ = tx.send(Err(StoreError::BadRequest("the write was dropped before it ran".into())));
            }
        }
    }
}

/// The scheduler, the model and the bookkeeping (ganges-core's `ServerNode`, which the
/// simulator drives too).
pub type DiskState = ServerNode<Ctx>;

/// The driver task. Runs until the server shuts down (the task is aborted).
pub async fn run(shared: Arc<Shared>, queue_depth: u32) {
    let slots = Arc::new(Semaphore::new(queue_depth.max(1) as usize));
    loop {
        let slot = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let popped = loop {
            let (idle, wake_at) = {
                let mut d = shared.disk.lock();
                if let Some(p) = d.pop(shared.now()) {
                    break p;
                }
                (d.wants_work(shared.now()), d.wake_at())
            };
            if idle {
                shared.idle.notify_one();
            }
            // notify_one stores a permit when nobody waits, so a job queued between the
            // check above and this await still wakes us. A scheduler waiting for a stream's
            // next request (anticipation) is asked again at its deadline.
            match wake_at {
                Some(t) => {
                    tokio::select! {
                        _ = shared.disk_wake.notified() => {}
                        _ = tokio::time::sleep_until(shared.instant(t)) => {}
                    }
                }
                None => shared.disk_wake.notified().await,
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            serve(&shared, popped).await;
            drop(slot);
        });
    }
}

async fn serve(shared: &Arc<Shared>, p: Popped<Ctx>) {
    match p.ctx {
        Ctx::Read(ctx) => serve_read(shared, ctx, &p.job, p.modelled).await,
        Ctx::Write(ctx) => serve_write(shared, ctx, p.modelled).await,
    }
}

/// Hold the answer until the modelled disk would have finished, and charge the disk's
/// meter; returns the request's time on the disk (on a real disk that runs several at once,
/// its share of the disk's busy time: `ServerNode::finished_real`).
async fn disk_time(
    shared: &Shared,
    modelled: Option<ganges_core::disk::Service>,
    began: ganges_core::time::Time,
    len: u64,
) -> Duration {
    match modelled {
        Some(svc) => {
            tokio::time::sleep_until(shared.instant(svc.done)).await;
            let service = svc.done.since(svc.start);
            shared.disk.lock().finished(len, service);
            service
        }
        None => {
            let now = shared.now();
            shared.disk.lock().finished_real(len, began, now)
        }
    }
}

async fn serve_write(shared: &Arc<Shared>, ctx: WriteCtx, modelled: Option<ganges_core::disk::Service>) {
    let began = shared.now();
    let store = shared.store.clone();
    let WriteCtx { target, block, crc, data, reply, request_id, .. } = ctx;
    let len = data.len() as u64;
    let (written, dataset_id) = match target {
        WriteTarget::Staged(staged) => {
            let id = staged.dataset();
            let w = tokio::task::spawn_blocking(move || store.write_staged(&staged, block, crc, &data)).await;
            (w, id)
        }
        WriteTarget::Fill { dataset, files } => {
            let id = dataset.manifest.id;
            let fill = move || store.fill_block(&dataset, &files, block, crc, &data).map(|()| block);
            let w = tokio::task::spawn_blocking(fill).await;
            (w, id)
        }
        WriteTarget::Scratch { file, direct, offset } => {
            let scratch = move || {
                use std::os::unix::fs::FileExt;
                let written = match &direct {
                    Some(d) if crate::direct::aligned(offset, data.len()) => crate::direct::write_at(d, &data, offset),
                    _ => file.write_all_at(&data, offset),
                };
                written
                    .map(|()| block)
                    .map_err(|e| StoreError::Io { what: "writing the write probe's scratch file".into(), err: e })
            };
            (tokio::task::spawn_blocking(scratch).await, 0)
        }
    };
    let written = written.unwrap_or_else(|e| Err(StoreError::BadRequest(format!("write task failed: {e}"))));
    let service = disk_time(shared, modelled, began, len).await;
    let (queue_len, primary_progress) = {
        let mut d = shared.disk.lock();
        let r = d.report(dataset_id, shared.now());
        (r.queue_len, r.primary_progress)
    };
    match reply {
        WriteReply::Local(tx) => {
            let _ = tx.send(written);
        }
        WriteReply::Conn { outbox, .. } => {
            let msg = match written {
                Ok(block) => {
                    shared.counters.writes.fetch_add(1, Ordering::Relaxed);
                    shared.counters.write_bytes.fetch_add(len, Ordering::Relaxed);
                    Message::WriteOk(WriteOk { queue_len, service_us: micros(service), primary_progress, block })
                }
                Err(e) => {
                    if matches!(e, StoreError::DiskFull { .. }) {
                        tracing::warn!(node = %shared.config.node, %e, "write refused");
                    }
                    Message::Error(WireError::new(e.code(), e.to_string()), None)
                }
            };
            outbox.reply(request_id, msg);
        }
    }
}

async fn serve_read(shared: &Arc<Shared>, ctx: JobCtx, job: &Job, modelled: Option<ganges_core::disk::Service>) {
    let began = shared.now();
    let store = shared.store.clone();
    let (ds, fragment, block, start, len) = (ctx.dataset.clone(), ctx.fragment, ctx.block, ctx.start, ctx.len);
    let read = tokio::task::spawn_blocking(move || store.read(&ds, fragment, block, start, len))
        .await
        .unwrap_or_else(|e| Err(StoreError::BadRequest(format!("read task failed: {e}"))));
    let service = disk_time(shared, modelled, began, len as u64).await;
    let (queue_len, primary_progress, backup_depth) = {
        let mut d = shared.disk.lock();
        let r = d.report(ctx.dataset.manifest.id, shared.now());
        (r.queue_len, r.primary_progress, r.backup_depth)
    };
    let reply = match read {
        Ok((data, crc)) => {
            shared.counters.reads.fetch_add(1, Ordering::Relaxed);
            shared.counters.read_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            let served = ServedRead {
                stream: job.stream.stream,
                dataset: &ctx.dataset.manifest.name,
                progress: job.progress,
                copy: ctx.copy,
                bytes: data.len() as u64,
                arrived: job.arrival,
                now: shared.now(),
            };
            shared.metrics.read_served(served, shared.metrics_addr.is_some());
            Message::ReadOk(ReadOk {
                crc,
                queue_len,
                service_us: micros(service),
                primary_progress,
                backup_depth,
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
