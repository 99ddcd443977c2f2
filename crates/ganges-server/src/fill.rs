//! Replica completion (GW-2; virtual-streams §3.5, gd-enhancements §3.1).
//!
//! A dataset written with a choice of copy (GW-1) is committed incomplete: each block sits on
//! the copies its manifest's placement names. `Fill` asks the server holding one copy of a
//! fragment to bring that copy every block it lacks. The server reads each missing block
//! from a peer holding it, over the ordinary data path (the peer queues the reads in its
//! scheduler and disk model like any consumer's), and writes it at its final offset through
//! its own disk queue, so both disks are charged and completion runs at disk speed. Reads
//! are pipelined `FILL_WINDOW` deep, and so are the writes behind them.
//!
//! Nothing a reader sees changes until every copy is filled and the client replaces the
//! manifest by the complete one (`MarkComplete`): until then readers follow the placement
//! and never read a block being filled. A fill that fails part way leaves the dataset as it
//! was; running it again writes the missing blocks again (filling is idempotent).
//!
//! Repair is the same path for named blocks of a copy that failed their checksums: each is
//! read from another copy (whose server checks it against its own checksums first), written
//! over the bad one with its checksum units, synced, and logged in the dataset's
//! `repairs.log`. A reader racing a repair reads the block from the other copy: this copy
//! fails its checksum until the new one is written, and is reopened after.

use crate::Shared;
use crate::disk::{Ctx, WriteCtx, WriteReply, WriteTarget};
use crate::handoff::PeerConn;
use crate::store::StoreError;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::route::STALL_TIMEOUT_DEFAULT;
use ganges_core::sched::{Job, Progress, ProgressMetric, Service, StreamKey};
use ganges_proto::control::{ControlReply, Peer};
use ganges_proto::manifest::{DatasetName, DatasetState};
use ganges_proto::msg::{Message, ReadOk, ReadReq};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Reads in flight to a peer, and writes queued behind them.
const FILL_WINDOW: usize = 4;

fn peer_err(node: NodeId, what: String) -> StoreError {
    StoreError::Io { what: format!("replica completion from {node}"), err: std::io::Error::other(what) }
}

/// Bring this node's copy of `fragment` every block it lacks; or, with `repair`, rewrite
/// those blocks from another copy (a scrub's or a read's find: a block that failed its
/// checksum here), whatever the dataset's state.
pub async fn fill(
    shared: &Arc<Shared>,
    name: &DatasetName,
    fragment: FragmentId,
    peers: &[Peer],
    repair: &[u32],
) -> Result<ControlReply, StoreError> {
    let ds = shared.store.dataset(name)?;
    let m = &ds.manifest;
    let copy = ds.copy(fragment)?.copy;
    let mut by_source: BTreeMap<NodeId, Vec<u32>> = BTreeMap::new();
    if repair.is_empty() {
        let (DatasetState::Incomplete, Some(placement)) = (m.state, &m.placement) else {
            return Ok(ControlReply::Filled { blocks: 0, bytes: 0 });
        };
        for (b, source) in placement.fills(fragment, copy) {
            by_source.entry(m.layout.node_of(fragment, source)).or_default().push(b);
        }
    } else {
        for &b in repair {
            if b >= m.shape.blocks_in(fragment) {
                return Err(StoreError::OutOfRange(format!("{fragment} has no block {b}")));
            }
            // Another copy that holds the block, on a server whose address we were given.
            let src = (0..m.layout.replicas())
                .filter(|&c| c != copy && m.holds(fragment, b, c))
                .map(|c| m.layout.node_of(fragment, c))
                .find(|n| peers.iter().any(|p| p.node == *n))
                .ok_or_else(|| {
                    StoreError::BadRequest(format!("no other copy of {fragment} block {b} to repair it from"))
                })?;
            by_source.entry(src).or_default().push(b);
        }
    }
    if by_source.is_empty() {
        return Ok(ControlReply::Filled { blocks: 0, bytes: 0 });
    }
    let (store, d2) = (shared.store.clone(), ds.clone());
    let files = tokio::task::spawn_blocking(move || store.open_fill(&d2, fragment))
        .await
        .map_err(|e| StoreError::BadRequest(format!("open task failed: {e}")))??;
    let files = Arc::new(files);
    let total: u64 = by_source.values().flatten().map(|&b| m.shape.block_len(fragment, b) as u64).sum();
    let stream = ganges_core::datagen::mix64(m.id ^ ((fragment.0 as u64) << 32) ^ shared.config.node.0 as u64);
    let mut copying = Copying {
        shared,
        ds: &ds,
        files: &files,
        fragment,
        stream,
        total,
        done: 0,
        blocks: 0,
        writes: VecDeque::new(),
    };
    let mut copied = Ok(());
    for (&node, wanted) in &by_source {
        copied = copying.copy_from(node, peers, wanted).await;
        if copied.is_err() {
            // Writes still queued are waited for before anything is given back.
            while let Some(rx) = copying.writes.pop_front() {
                let _ = rx.await;
            }
            break;
        }
    }
    let (blocks, done) = (copying.blocks, copying.done);
    let store = shared.store.clone();
    let (d2, f2) = (ds.clone(), files.clone());
    let repairing = !repair.is_empty();
    let synced = tokio::task::spawn_blocking(move || {
        copied?;
        store.sync_fill(&d2, &f2)?;
        if repairing {
            for (node, blocks) in &by_source {
                // The blocks are rewritten and synced: a log that cannot be written (a full
                // disk) loses the record, not the repair.
                if let Err(e) = store.record_repair(&d2, fragment, blocks, *node) {
                    tracing::warn!(dataset = %d2.manifest.name, %fragment, ?blocks, %e, "repaired, but not logged");
                }
            }
        }
        Ok::<_, StoreError>(())
    })
    .await
    .map_err(|e| StoreError::BadRequest(format!("sync task failed: {e}")))?;
    if let Err(e) = synced {
        // A completion that failed (a full disk, a peer gone) gives back the space of the
        // blocks it wrote: no manifest counts them. A repair's blocks were the copy's own.
        if !repairing {
            let (store, d2, f2) = (shared.store.clone(), ds.clone(), files.clone());
            let _ = tokio::task::spawn_blocking(move || store.abandon_fill(&d2, &f2)).await;
        }
        return Err(e);
    }
    if repairing {
        tracing::warn!(node = %shared.config.node, dataset = %name, %fragment, ?repair, "blocks repaired from another copy");
    } else {
        tracing::info!(node = %shared.config.node, dataset = %name, %fragment, blocks, bytes = done, "copy filled");
    }
    Ok(ControlReply::Filled { blocks, bytes: done })
}

/// Blocks being copied into this node's copy of `fragment`: read from peers, written through
/// this server's disk queue, `FILL_WINDOW` of each in flight.
struct Copying<'a> {
    shared: &'a Arc<Shared>,
    ds: &'a Arc<crate::store::Dataset>,
    files: &'a Arc<crate::store::FillFiles>,
    fragment: FragmentId,
    /// The stream the reads and writes are scheduled as.
    stream: u64,
    total: u64,
    done: u64,
    blocks: u64,
    /// Writes queued behind the reads.
    writes: VecDeque<oneshot::Receiver<Result<u32, StoreError>>>,
}

impl Copying<'_> {
    fn progress(&self) -> Progress {
        Progress { done_bytes: self.done, total_bytes: self.total, metric: ProgressMetric::Bytes }
    }

    /// Copy `wanted` from `node`'s copy, and wait for every write.
    async fn copy_from(&mut self, node: NodeId, peers: &[Peer], wanted: &[u32]) -> Result<(), StoreError> {
        let (fragment, m) = (self.fragment, &self.ds.manifest);
        let addr = &peers
            .iter()
            .find(|p| p.node == node)
            .ok_or_else(|| {
                StoreError::BadRequest(format!("no address given for {node}, which holds blocks {fragment} needs"))
            })?
            .addr;
        let mut conn = PeerConn::connect(self.shared, addr).await.map_err(|e| peer_err(node, e.to_string()))?;
        let mut next = 0;
        let mut asked: HashMap<u64, u32> = HashMap::new();
        while next < wanted.len() || !asked.is_empty() {
            while asked.len() < FILL_WINDOW && next < wanted.len() {
                let block = wanted[next];
                next += 1;
                let read = Message::Read(ReadReq {
                    stream: self.stream,
                    progress: self.progress(),
                    service: Service::FURTHEST_BEHIND,
                    dataset: m.name.clone(),
                    fragment,
                    block,
                    start_in_block: 0,
                    len: m.shape.block_len(fragment, block),
                });
                let id = conn.send(&read).await.map_err(|e| peer_err(node, e.to_string()))?;
                asked.insert(id, block);
            }
            // A peer holding our reads that says nothing for this long is hung: give up, and
            // the client's `complete` reports it (running it again finishes the job).
            let (id, reply) = tokio::time::timeout(STALL_TIMEOUT_DEFAULT, conn.read_tagged())
                .await
                .map_err(|_| peer_err(node, format!("no answer for {STALL_TIMEOUT_DEFAULT:?}")))?
                .map_err(|e| peer_err(node, e.to_string()))?;
            let Some(block) = asked.remove(&id) else { continue };
            let (crc, data) = match reply {
                Message::ReadOk(ReadOk { crc, data, .. }) => (crc, data),
                Message::Error(e, _) => return Err(peer_err(node, format!("{fragment} block {block}: {e}"))),
                other => return Err(peer_err(node, format!("unexpected reply kind {:#04x}", other.kind()))),
            };
            self.done += data.len() as u64;
            self.blocks += 1;
            let (tx, rx) = oneshot::channel();
            let job = Job {
                id: 0,
                stream: StreamKey { conn: 0, stream: self.stream },
                file: self.files.key,
                bytes: data.len() as u64,
                progress: self.progress(),
                service: Service::FURTHEST_BEHIND,
                arrival: self.shared.now(),
            };
            let target = WriteTarget::Fill { dataset: self.ds.clone(), files: self.files.clone() };
            let ctx = WriteCtx { conn: 0, request_id: 0, target, block, crc, data, reply: WriteReply::Local(tx) };
            self.shared.disk.lock().enqueue(job, Ctx::Write(ctx));
            self.shared.disk_wake.notify_one();
            self.writes.push_back(rx);
            if self.writes.len() >= FILL_WINDOW {
                wait(self.writes.pop_front().expect("not empty")).await?;
            }
        }
        while let Some(rx) = self.writes.pop_front() {
            wait(rx).await?;
        }
        Ok(())
    }
}

async fn wait(rx: oneshot::Receiver<Result<u32, StoreError>>) -> Result<(), StoreError> {
    rx.await.map_err(|_| StoreError::BadRequest("the server dropped a queued fill write".into()))??;
    ganges_net::failpoint::hit("server.fill.wrote");
    Ok(())
}
