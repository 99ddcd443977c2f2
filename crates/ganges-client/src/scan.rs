//! The unordered read stream: one consumer reading its partition of a dataset.
//!
//! `ReadStream::open` / `next` / `close`. The stream keeps its window of requests in flight
//! by itself: every call to `next` first tops the pipeline up, then waits for the next block
//! to arrive and hands it out as an owned buffer (a `Bytes` slice of the frame it came in, no
//! copy). Blocks come in completion order; each carries its dataset offset.
//!
//! Which server each request goes to is decided by the pure `ReadEngine` of ganges-core with
//! the chosen policy; this module is only its driver: it turns the engine's decisions into
//! frames and the servers' replies into engine events. It also checks every payload against
//! the CRC32C the server sent, so a block damaged anywhere between the disk and here is
//! read again from another copy instead of being delivered.
//!
//! **Writes** (GW-1) run on the same driver: a [`WriteStream`] is a stream whose requests
//! carry a block of the writer's partition to the copy the policy picks, and whose replies
//! say the block is on that server's disk. The engine balances writers exactly as it
//! balances readers (gd-enhancements §3.1: "writer i writes each block to the primary or
//! backup copy of its fragment, progress-balanced like GD reads"); the stream records where
//! every block landed, which becomes the dataset's placement.

use crate::client::Client;
use crate::conn::Event;
use crate::error::{ClientError, Result};
use bytes::Bytes;
use ganges_core::digest::{BlockFolder, Digest};
use ganges_core::ids::NodeId;
use ganges_core::route::{Delivery, Failure, ReadConfig, ReadEngine, ReadPolicyKind, ReadStats, STALL_TIMEOUT_DEFAULT};
use ganges_core::route::{PolicySettings, ServerState};
use ganges_core::shape::{Partition, Piece};
use ganges_core::time::Time;
use ganges_proto::manifest::{DatasetState, Manifest};
use ganges_proto::msg::{ErrorCode, Message, Probe, ProgressNote, ReadOk, ReadReq, WriteOk, WriteReq};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadOptions {
    pub policy: ReadPolicyKind,
    /// Requests in flight for this consumer; `None`: the policy's default for the dataset's
    /// block size (`ReadPolicyKind::default_window`).
    pub window: Option<u32>,
    /// A server holding this consumer's requests that answers nothing for this long is
    /// treated as down for this read (see `ganges_core::route::STALL_TIMEOUT_DEFAULT`).
    pub stall_timeout: Duration,
    /// The policies' tunables (watermarks, response-rate lessons).
    pub settings: PolicySettings,
    /// `window` bounds what is in flight: a policy may not grow it (gd-rr does in trouble).
    /// The ordered readers set it, whose buffers hold only that many.
    pub fixed_window: bool,
}

impl ReadOptions {
    /// Reads by `policy`, with its default window.
    pub fn new(policy: ReadPolicyKind) -> ReadOptions {
        ReadOptions { policy, ..ReadOptions::default() }
    }

    pub fn with_window(self, window: u32) -> ReadOptions {
        ReadOptions { window: Some(window), ..self }
    }

    /// Requests in flight when reading blocks of `block_bytes`.
    pub fn window_for(&self, block_bytes: u64) -> u32 {
        self.window.unwrap_or_else(|| self.policy.default_window(block_bytes, &self.settings))
    }

    pub fn with_settings(self, settings: PolicySettings) -> ReadOptions {
        ReadOptions { settings, ..self }
    }

    /// Refuse settings out of range, naming the setting.
    pub(crate) fn check(&self) -> Result<()> {
        self.settings.validate().map_err(|e| ClientError::Invalid(e.to_string()))
    }
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            policy: ReadPolicyKind::Gd,
            window: None,
            stall_timeout: STALL_TIMEOUT_DEFAULT,
            settings: PolicySettings::default(),
            fixed_window: false,
        }
    }
}

/// One delivered piece of the partition.
#[derive(Clone, Debug)]
pub struct Block {
    /// Where these bytes start in the dataset.
    pub dataset_offset: u64,
    pub data: Bytes,
    /// The server that delivered it.
    pub node: NodeId,
    /// Which piece of the read this is (in the order pieces were added).
    pub piece: usize,
}

/// What one consumer's read did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadReport {
    pub policy: String,
    pub bytes: u64,
    /// From the first request to the last byte.
    pub seconds: f64,
    pub stats: ReadStats,
    pub digest: Digest,
}

impl ReadReport {
    /// A read of nothing.
    pub fn empty(policy: ReadPolicyKind) -> ReadReport {
        ReadReport {
            policy: policy.to_string(),
            bytes: 0,
            seconds: 0.0,
            stats: ReadStats::default(),
            digest: Digest::default(),
        }
    }

    /// Two consumers' reads of one scan as one: bytes, counters and digests add up, and the
    /// time is the longer one's.
    pub fn merged(mut self, other: ReadReport) -> ReadReport {
        self.bytes += other.bytes;
        self.seconds = self.seconds.max(other.seconds);
        self.stats.merge(other.stats);
        self.digest.merge(other.digest);
        self
    }
}

/// Seconds from `started` to `finished` (to now while unfinished; 0 if never started).
pub(crate) fn span_secs(started: Option<Instant>, finished: Option<Instant>) -> f64 {
    match (started, finished) {
        (Some(s), Some(f)) => f.duration_since(s).as_secs_f64(),
        (Some(s), None) => s.elapsed().as_secs_f64(),
        _ => 0.0,
    }
}

#[derive(Debug)]
struct Sent {
    /// The server the request was sent to, and its id on that connection (for cancels).
    to: NodeId,
    request_id: u64,
}

/// Probes' tags, apart from the engine's request ids (which count up from 1).
const PROBE_TAGS: u64 = 1 << 63;

/// The bytes a writer writes: asked for one block-sized piece at a time, as it is sent.
pub trait BlockSource: Send + Sync + std::fmt::Debug {
    fn piece(&self, piece: &Piece) -> std::io::Result<Bytes>;
}

/// What makes a stream a writer: the staging transaction and where the bytes come from.
#[derive(Debug)]
struct WriteOp {
    txid: u64,
    source: Arc<dyn BlockSource>,
    crcs: HashMap<usize, u32>,
    /// Where each block landed, as it happens (shared by the writers of one write).
    placed: PlacedLog,
}

/// Where the blocks of one write landed, fed every acknowledgement by all its writers
/// (a block written twice is on both copies).
pub type PlacedLog = Arc<std::sync::Mutex<ganges_core::write::Landing>>;

#[derive(Debug)]
pub struct ReadStream {
    write: Option<WriteOp>,
    client: Arc<Client>,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) engine: ReadEngine,
    stream_id: u64,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    /// Requests sent, by the engine's request id (their tag): the piece and the server that
    /// owes the answer are the engine's (`ReadEngine::in_flight`).
    sent: HashMap<u64, Sent>,
    /// Probes in flight (GD-3), by tag (from `PROBE_TAGS`), with the server asked.
    probes: HashMap<u64, NodeId>,
    next_probe: u64,
    epoch: Instant,
    stall_timeout: Duration,
    started: Option<Instant>,
    finished: Option<Instant>,
    /// What was delivered, folded by block (gd-plan reads a block in pieces).
    digest: BlockFolder,
    down: BTreeSet<NodeId>,
}

impl ReadStream {
    /// Prepare to read `partition` of the dataset. Nothing is sent until the first `next`.
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        partition: Partition,
        opts: ReadOptions,
    ) -> Result<ReadStream> {
        let mut s = ReadStream::open_ended(client, manifest, opts)?;
        s.add_range(partition)?;
        s.engine.seal();
        Ok(s)
    }

    /// A stream with nothing to read yet: `add_range` gives it work (the async interface).
    pub fn open_ended(client: Arc<Client>, manifest: Arc<Manifest>, opts: ReadOptions) -> Result<ReadStream> {
        opts.check()?;
        let window = opts.window_for(u64::from(manifest.shape.block_bytes()));
        let config = ReadConfig { window, stall_timeout: opts.stall_timeout, fixed_window: opts.fixed_window };
        let engine = ReadEngine::open_ended(opts.policy.build(&opts.settings), &manifest.layout, config)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = ReadStream {
            write: None,
            client,
            manifest,
            engine,
            stream_id: rand::random(),
            tx,
            rx,
            sent: HashMap::new(),
            probes: HashMap::new(),
            next_probe: PROBE_TAGS,
            epoch: Instant::now(),
            stall_timeout: opts.stall_timeout,
            started: None,
            finished: None,
            digest: BlockFolder::default(),
            down: BTreeSet::new(),
        };
        crate::metrics::stream_opened();
        for n in 0..s.client.nodes() {
            if s.client.conn(NodeId(n)).is_err() {
                s.node_down(NodeId(n));
            }
        }
        Ok(s)
    }

    /// What this open-ended stream's reads will come to in all (`ReadEngine::expect_bytes`):
    /// its progress, which servers rank readers by, counts against it, and the stream seals
    /// itself once ranges of that many bytes are added.
    pub fn expect_bytes(&mut self, bytes: u64) {
        self.engine.expect_bytes(bytes);
    }

    /// Add a byte range of the dataset to read; returns the indices of its pieces.
    pub fn add_range(&mut self, range: Partition) -> Result<std::ops::Range<usize>> {
        let pieces = self.manifest.shape.pieces(range)?;
        let manifest = &self.manifest;
        let incomplete = manifest.state == DatasetState::Incomplete;
        let pieces = pieces.into_iter().map(|p| {
            // An incomplete dataset: each block only from the copies the placement says
            // hold it (GW-2).
            let on = incomplete.then(|| {
                let layout = &manifest.layout;
                (0..layout.replicas())
                    .filter(|&c| manifest.holds(p.fragment, p.block, c))
                    .map(|c| layout.node_of(p.fragment, c))
                    .collect()
            });
            (p, on)
        });
        Ok(self.engine.add_pieces(&manifest.shape, pieces))
    }

    fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    fn node_down(&mut self, node: NodeId) {
        if self.down.insert(node) {
            if self.client.first_seen_down(node) {
                tracing::warn!(%node, dataset = %self.manifest.name, "server down; reading its share from other copies");
            }
            let now = self.now();
            self.engine.on_node_down(now, node);
        }
    }

    /// Send what the engine wants sent: new requests up to the window, progress notices,
    /// probes and cancels.
    fn pump(&mut self) -> Result<()> {
        loop {
            let now = self.now();
            let Some(d) = self.engine.poll_send(now)? else { break };
            let p = *self.engine.piece(d.piece);
            let (stream, progress, service) =
                (self.stream_id, self.engine.progress(), self.engine.service(d.piece, d.node));
            let msg = match &mut self.write {
                None => Message::Read(ReadReq {
                    stream,
                    progress,
                    service,
                    dataset: self.manifest.name.clone(),
                    fragment: p.fragment,
                    block: p.block,
                    start_in_block: p.start_in_block,
                    len: p.len,
                }),
                Some(w) => {
                    let data = w.source.piece(&p).map_err(ClientError::io("reading the data to write"))?;
                    let crc = crc32c::crc32c(&data);
                    w.crcs.insert(d.piece, crc);
                    Message::Write(WriteReq {
                        stream,
                        progress,
                        service,
                        txid: w.txid,
                        dataset: self.manifest.name.clone(),
                        fragment: p.fragment,
                        block: p.block,
                        crc,
                        data,
                    })
                }
            };
            match self.client.conn(d.node).and_then(|c| c.send_tagged(&msg, &self.tx, d.request)) {
                Ok(request_id) => {
                    self.sent.insert(d.request, Sent { to: d.node, request_id });
                }
                Err(_) => self.node_down(d.node),
            }
        }
        while let Some(node) = self.engine.poll_notify() {
            let note = Message::Progress(ProgressNote { stream: self.stream_id, progress: self.engine.progress() });
            if let Ok(conn) = self.client.conn(node) {
                conn.notify(&note);
            }
        }
        while let Some(node) = self.engine.poll_probe(self.now()) {
            let probe = Message::Probe(Probe {
                stream: self.stream_id,
                progress: self.engine.progress(),
                dataset: self.manifest.name.clone(),
            });
            let tag = self.next_probe;
            self.next_probe += 1;
            if let Ok(conn) = self.client.conn(node)
                && conn.send_tagged(&probe, &self.tx, tag).is_ok()
            {
                self.probes.insert(tag, node);
            }
        }
        while let Some(c) = self.engine.poll_cancel() {
            // A request handed to another server has its id at the first: not cancellable.
            if let Some(sent) = self.sent.get(&c.request).filter(|s| s.to == c.node)
                && let Ok(conn) = self.client.conn(c.node)
            {
                conn.cancel(sent.request_id);
            }
        }
        Ok(())
    }

    /// The next block of the partition, or `None` when all of it has been delivered.
    pub async fn next(&mut self) -> Result<Option<Block>> {
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        loop {
            self.pump()?;
            if self.engine.is_done() {
                if self.finished.is_none() {
                    self.finished = Some(Instant::now());
                }
                return Ok(None);
            }
            let Some(ev) = self.next_event().await else { continue };
            let now = self.now();
            if let Some(node) = self.probes.remove(&ev.tag) {
                if let Ok(Message::State(st)) = ev.result {
                    let state = ServerState {
                        queue_len: st.queue_len,
                        service_us: 0,
                        primary_progress: st.primary_progress,
                        node_load: st.node_load,
                        backup_depth: st.backup_depth,
                    };
                    let rate = st.disk_bytes_per_sec.map(|r| (r, st.disk_measured));
                    self.engine.on_probe_answer(now, node, state, rate);
                }
                continue;
            }
            if let Ok(Message::Moved { to }) = ev.result {
                // A server handed this request to another (GD-6): expect the answer there.
                if let Some((piece, node)) = self.engine.in_flight(ev.tag)
                    && ev.node == node
                {
                    self.engine.on_moved(now, piece, node, to);
                }
                continue;
            }
            self.sent.remove(&ev.tag);
            let Some((piece, node)) = self.engine.take(ev.tag) else { continue };
            match ev.result {
                Ok(Message::ReadOk(ReadOk {
                    crc,
                    data,
                    queue_len,
                    service_us,
                    primary_progress,
                    backup_depth,
                    ..
                })) => {
                    let state = ServerState { queue_len, service_us, primary_progress, node_load: None, backup_depth };
                    self.engine.on_state(now, node, state);
                    self.engine.on_service(node, data.len() as u64, service_us);
                    let p = *self.engine.piece(piece);
                    if data.len() != p.len as usize || crc32c::crc32c(&data) != crc {
                        tracing::warn!(node = %node, offset = p.dataset_offset, "block damaged in transit; reading it again");
                        self.engine.on_failure(now, piece, node, Failure::Corrupt);
                        continue;
                    }
                    if self.engine.on_data(now, piece, node) == Delivery::New {
                        self.fold(&p, crc);
                        let copy = self.manifest.layout.copy_on(p.fragment, node).unwrap_or(0);
                        crate::metrics::block_read(copy, data.len() as u64);
                        return Ok(Some(Block { dataset_offset: p.dataset_offset, data, node, piece }));
                    }
                }
                Ok(Message::WriteOk(WriteOk { queue_len, service_us, primary_progress, .. }))
                    if self.write.is_some() =>
                {
                    let state =
                        ServerState { queue_len, service_us, primary_progress, node_load: None, backup_depth: None };
                    self.engine.on_state(now, node, state);
                    let p = *self.engine.piece(piece);
                    self.engine.on_service(node, p.len as u64, service_us);
                    let w = self.write.as_mut().expect("a writer");
                    let crc = w.crcs[&piece];
                    w.placed.lock().unwrap_or_else(|e| e.into_inner()).on_acked(p.fragment, p.block, node);
                    if self.engine.on_data(now, piece, node) == Delivery::New {
                        self.fold(&p, crc);
                        crate::metrics::block_written(u64::from(p.len));
                        return Ok(Some(Block { dataset_offset: p.dataset_offset, data: Bytes::new(), node, piece }));
                    }
                }
                Ok(Message::Error(e, _)) if self.write.is_some() && e.code != ErrorCode::Cancelled => {
                    // A write refused (disk full, a checksum, a lost transaction) fails the
                    // write whole: the staging is aborted, nothing becomes visible.
                    return Err(ClientError::Server { node, err: e });
                }
                Ok(Message::Error(e, _)) => {
                    let why = match e.code {
                        ErrorCode::Cancelled => Failure::Cancelled,
                        ErrorCode::Corrupt => {
                            tracing::warn!(node = %node, dataset = %self.manifest.name, "{}", e.message);
                            Failure::Corrupt
                        }
                        _ => {
                            tracing::warn!(node = %node, dataset = %self.manifest.name, "{e}; using other copies");
                            Failure::Unavailable
                        }
                    };
                    self.engine.on_failure(now, piece, node, why);
                }
                Ok(other) => {
                    return Err(ClientError::Protocol {
                        node,
                        why: format!("unexpected reply kind {:#04x} to a read", other.kind()),
                    });
                }
                Err(_) => self.node_down(node),
            }
        }
    }

    /// The next event, or `None` when a probe falls due or after a stall check (the engine
    /// may have work to send).
    async fn next_event(&mut self) -> Option<Event> {
        let probe = self.engine.probe_at(self.now());
        let Some(deadline) = [self.engine.stall_deadline(), probe].into_iter().flatten().min() else {
            return Some(self.rx.recv().await.expect("the stream holds a sender"));
        };
        let at = self.epoch + Duration::from_nanos(deadline.0);
        match tokio::time::timeout_at(at.into(), self.rx.recv()).await {
            Ok(ev) => Some(ev.expect("the stream holds a sender")),
            Err(_) => {
                let now = self.now();
                for node in self.engine.check_stalls(now) {
                    self.down.insert(node);
                    tracing::warn!(
                        %node,
                        dataset = %self.manifest.name,
                        "no answer for {:?} while holding our requests; reading its share from other copies",
                        self.stall_timeout
                    );
                }
                None
            }
        }
    }

    pub fn report(&self) -> ReadReport {
        let seconds = span_secs(self.started, self.finished);
        ReadReport {
            policy: self.engine.policy_kind().to_string(),
            bytes: self.engine.done_bytes(),
            seconds,
            stats: self.engine.stats().clone(),
            digest: self.digest.finish(),
        }
    }

    /// Fold a delivered piece, whose CRC32C is `crc`, into the digest.
    fn fold(&mut self, p: &Piece, crc: u32) {
        let shape = &self.manifest.shape;
        let block_offset = p.dataset_offset - u64::from(p.start_in_block);
        self.digest.add(block_offset, shape.block_len(p.fragment, p.block), p.start_in_block, p.len, crc);
    }

    /// Make this stream a writer's (GW-1): its pieces are written, staged as `txid`, with
    /// the bytes `source` gives; where each lands goes to `placed`.
    pub(crate) fn start_writing(&mut self, txid: u64, source: Arc<dyn BlockSource>, placed: PlacedLog) {
        self.write = Some(WriteOp { txid, source, crcs: HashMap::new(), placed });
    }

    /// Stop reading: cancel what is still queued at servers. Returns the report.
    pub fn close(self) -> ReadReport {
        for (request, sent) in &self.sent {
            if self.engine.in_flight(*request).is_some_and(|(_, node)| node == sent.to)
                && let Ok(c) = self.client.conn(sent.to)
            {
                c.cancel(sent.request_id);
            }
        }
        self.report()
    }

    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }
}

impl Drop for ReadStream {
    /// Closed or dropped, its counters go to this process's metrics, and the bad blocks it
    /// met (read from other copies instead) are repaired in the background (heal on read).
    fn drop(&mut self) {
        let stats = self.engine.stats();
        crate::metrics::stream_closed(stats);
        if !stats.corrupt.is_empty() && self.write.is_none() {
            let corrupt = stats.corrupt.clone();
            crate::repair::heal_in_background(self.client.clone(), self.manifest.clone(), corrupt);
        }
    }
}

/// Open one stream per partition (default: one per fragment, consumer i reading fragment i).
pub fn open_scan(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    partitions: Option<Vec<Partition>>,
    opts: ReadOptions,
) -> Result<Vec<ReadStream>> {
    let parts = partitions.unwrap_or_else(|| manifest.shape.fragment_partitions());
    parts.into_iter().map(|p| ReadStream::open(client.clone(), manifest.clone(), p, opts)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ganges_core::route::{WINDOW_DEFAULT, WINDOW_GD, WINDOW_MAX, WINDOW_PLAN};

    #[test]
    fn each_policy_reads_with_its_own_window_unless_told() {
        const MIB: u64 = 1 << 20;
        let plan = ReadOptions::new(ReadPolicyKind::GdPlan);
        assert_eq!(ReadOptions::new(ReadPolicyKind::Gd).window_for(MIB / 4), WINDOW_GD);
        assert_eq!(ReadOptions::new(ReadPolicyKind::GdPc).window_for(MIB), WINDOW_DEFAULT);
        // gd-plan keeps its bytes in flight with smaller blocks or pieces, not with larger
        // ones: 1 MiB blocks are read in pieces of 256 KiB.
        assert_eq!(plan.window_for(MIB), 4 * WINDOW_PLAN);
        assert_eq!(plan.window_for(MIB / 4), 4 * WINDOW_PLAN);
        assert_eq!(plan.window_for(MIB / 8), 8 * WINDOW_PLAN);
        assert_eq!(plan.window_for(4 << 10), WINDOW_MAX);
        let mut whole = PolicySettings::default();
        whole.plan.piece_bytes = 16 << 20;
        let plan_whole = plan.with_settings(whole);
        assert_eq!((plan_whole.window_for(MIB), plan_whole.window_for(4 * MIB)), (WINDOW_PLAN, WINDOW_PLAN));
        assert_eq!(plan.with_window(3).window_for(MIB / 4), 3);
        assert_eq!(ReadOptions::default(), ReadOptions::new(ReadOptions::default().policy));
    }
}
