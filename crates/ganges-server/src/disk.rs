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
use ganges_core::ids::FragmentId;
use ganges_core::serve::{Popped, ReadContext, ServerQueue};
use ganges_proto::msg::{ErrorCode, Message, Origin, ReadOk, WireError};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Semaphore;

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

impl ReadContext for JobCtx {
    fn conn(&self) -> u64 {
        self.conn
    }
    /// Handed-over reads cannot be cancelled here: their request ids belong to another
    /// server's connection.
    fn request_id(&self) -> Option<u64> {
        self.origin.is_none().then_some(self.request_id)
    }
}

/// The scheduler, the model and the bookkeeping (ganges-core's `ServerQueue`, which the
/// simulator drives too).
pub type DiskState = ServerQueue<JobCtx>;

/// The driver task. Runs until the server shuts down (the task is aborted).
pub async fn run(shared: Arc<Shared>, queue_depth: u32) {
    let slots = Arc::new(Semaphore::new(queue_depth.max(1) as usize));
    loop {
        let slot = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let popped = loop {
            let (idle, wake_at) = {
                let mut d = shared.disk.lock().expect("disk lock");
                if let Some(p) = d.pop(shared.now()) {
                    break p;
                }
                (d.wants_work(shared.now()), d.sched.wake_at())
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

async fn serve(shared: &Arc<Shared>, p: Popped<JobCtx>) {
    let Popped { ctx, modelled, .. } = p;
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
        d.finished(len as u64, service);
        let r = d.report(ctx.dataset.manifest.id, shared.now());
        (r.queue_len, r.primary_progress)
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
