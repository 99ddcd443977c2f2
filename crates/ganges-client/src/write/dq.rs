//! DQ-1 writes: a producer of blocks in front of a distributed queue of disks (river §2.3,
//! §3.1, §6.1-6.3).
//!
//! Each writer puts its blocks; each goes to exactly one server, chosen by ganges-core's
//! [`DqRouter`] (the same object the simulator drives): at random among the servers where
//! this writer has a credit left, one credit per server, a credit coming back with each
//! reply. A slow disk answers slowly, keeps its credit, and so receives less. The servers
//! append each block to their copy of their own fragment (a log, in the order their disk
//! wrote them) and serve the writer furthest behind first (DQ-2: every write carries its
//! writer's progress).
//!
//! DQ-3 (river §7.2.2): with `run_blocks` K > 1 the unit of the queue is a run of K
//! consecutive blocks of the writer's stream (a sorted run, say): the router picks a server
//! per run, all of the run goes there, in order, served back to back (the writes ask for
//! runs), and the run's credit comes back with its last block. Runs are never withdrawn.
//!
//! At the end of a writer's stream, the blocks still queued behind slow disks are withdrawn
//! and written by the disks that answer (`dq::steal_at_end`): cancelled first, resent only
//! once the server confirms the cancel, so no block is written twice.
//!
//! The servers even out the end too (GD-6 for writes, `ganges-server`'s handoff): a server
//! that runs dry asks the others, and a busy one gives back some of its queued blocks,
//! unwritten, answering `Redirected` to the idle one; the writer sends each there at once,
//! past its credit there (the server asked for it). Pinned units and DQ-3's runs stay put.
//!
//! Every server's log must hold at least one block (a fragment is never empty), so each
//! writer first sends a few units to fixed servers (writer w of W: its j-th unit to server
//! w + jW, while there is one), and those are never withdrawn.
//!
//! A server that dies takes its log with it (one copy): the writer [`lose`](DqWriter::lose)s
//! it, and sends again every unit that was at it, landed or not, to the servers left; the
//! dataset is then the survivors' logs (`write_dq`). A server that answers with an error
//! fails the write, and the staging is aborted (nothing half-written is ever visible).

use crate::client::Client;
use crate::conn::Event;
use crate::dataset::ProgressFn;
use crate::error::{ClientError, Result};
use crate::scan::BlockSource;
use ganges_core::dq::{DqRouter, DqSettings, Ledger, Loads, Unanswered, movable, pins, steal_at_end};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::route::STALL_TIMEOUT_DEFAULT;
use ganges_core::sched::{Progress, ProgressMetric, Service};
use ganges_core::shape::Piece;
use ganges_core::time::Time;
use ganges_proto::manifest::DatasetName;
use ganges_proto::msg::{APPEND, ErrorCode, Message, WriteOk, WriteReq};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Where one block of a writer landed: the server, and the slot in its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landed {
    /// The block's index in the writer's stream.
    pub block: usize,
    /// Where it starts in the source.
    pub offset: u64,
    pub node: NodeId,
    pub slot: u32,
    pub len: u32,
    pub crc: u32,
}

#[derive(Debug)]
struct Pending {
    block: usize,
    unit: usize,
    consumer: usize,
    /// When it should be written, by what its server last said (`Load::due`).
    due: Time,
    request_id: u64,
    crc: u32,
}

/// One writer's DQ transfer.
#[derive(Debug)]
pub struct DqWriter {
    client: Arc<Client>,
    name: DatasetName,
    txid: u64,
    /// The writer's blocks: where each starts in its source, and its length.
    blocks: Vec<(u64, u32)>,
    source: Arc<dyn BlockSource>,
    router: DqRouter,
    stream: u64,
    /// Blocks per unit of the queue (DQ-3's runs; 1 for DQ-1).
    run_blocks: usize,
    /// The next unit never sent.
    next: usize,
    /// Units to send again (withdrawn or given back), and where to.
    resend: VecDeque<(usize, ResendTo)>,
    /// Blocks of each unit in flight still unanswered.
    unit_left: HashMap<usize, usize>,
    /// Where each unit is (sent, landed, or to send).
    ledger: Ledger,
    pending: HashMap<u64, Pending>,
    landed: Vec<Landed>,
    /// Blocks whose bytes progress has heard.
    counted: Vec<bool>,
    done_bytes: u64,
    total_bytes: u64,
    /// Blocks being withdrawn (their cancels are in flight), by tag, and the consumer each
    /// is for.
    withdrawing: HashMap<u64, usize>,
    /// Units pinned to a server (never withdrawn): unit j to `pins[j]`.
    pins: Vec<usize>,
    /// What each server last said of its queue and its disk's time per block.
    loads: Loads,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    next_tag: u64,
    epoch: Instant,
    pub steals: u64,
    /// Blocks servers gave back, redirected to an idle server.
    pub redirects: u64,
    /// For a stream: where its next blocks come from, until it ends.
    input: Option<Arc<Input>>,
}

/// The blocks of a streamed DQ write (`DqWriter::streaming`), made while it runs: every
/// block but the last is `block` bytes. A writer takes the next block when it has none left
/// to send, so several writers share one input; every block is kept until the write ends
/// (a server that dies takes its log with it, and its blocks are sent again).
#[derive(Debug)]
pub struct Input {
    block: u32,
    rx: tokio::sync::Mutex<mpsc::Receiver<bytes::Bytes>>,
    taken: std::sync::Mutex<Vec<bytes::Bytes>>,
    /// The short last block, if any, set before the input closes.
    tail: std::sync::Mutex<Option<bytes::Bytes>>,
    /// Set by the producer once it has put everything: an input that closes without it
    /// was abandoned, and the write fails.
    finished: std::sync::atomic::AtomicBool,
}

impl Input {
    /// An input of `block`-byte blocks, and where the producer puts them (`cap` queued).
    pub fn new(block: u32, cap: usize) -> (Arc<Input>, mpsc::Sender<bytes::Bytes>) {
        let (tx, rx) = mpsc::channel(cap.max(1));
        let input = Input {
            block,
            rx: tokio::sync::Mutex::new(rx),
            taken: Default::default(),
            tail: Default::default(),
            finished: Default::default(),
        };
        (Arc::new(input), tx)
    }

    /// The producer is done: `tail` (shorter than a block) is the last of the data.
    pub fn finish(&self, tail: Option<bytes::Bytes>) {
        *self.tail.lock().unwrap_or_else(|e| e.into_inner()) = tail.filter(|t| !t.is_empty());
        self.finished.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The next block the producer put, kept: where it starts in the data, and its length;
    /// `None` once the input has closed. The block is kept in the same step as it is
    /// received, so blocks that several writers take keep the order they were put in.
    async fn next(&self) -> Option<(u64, u32)> {
        let mut rx = self.rx.lock().await;
        let data = rx.recv().await?;
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.push(data);
        Some(((taken.len() as u64 - 1) * u64::from(self.block), taken[taken.len() - 1].len() as u32))
    }

    /// The short last block, where it starts and its length, once the input is finished.
    pub fn tail(&self) -> Option<(u64, u32)> {
        let start = self.taken.lock().unwrap_or_else(|e| e.into_inner()).len() as u64 * u64::from(self.block);
        self.tail.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|t| (start, t.len() as u32))
    }
}

impl BlockSource for Input {
    fn piece(&self, p: &Piece) -> std::io::Result<bytes::Bytes> {
        let k = (p.dataset_offset / u64::from(self.block)) as usize;
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let data = match taken.get(k) {
            Some(b) => Some(b.clone()),
            None if k == taken.len() => self.tail.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            None => None,
        };
        data.filter(|d| d.len() == p.len as usize && p.dataset_offset.is_multiple_of(u64::from(self.block)))
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no such block in the stream"))
    }
}

/// Where a unit is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResendTo {
    /// Wherever the router says.
    Anywhere,
    /// The idle server it was withdrawn for, if a credit there allows.
    Prefer(usize),
    /// The server it was redirected to, which asked for it: past the credit limits.
    Invited(usize),
}

impl DqWriter {
    /// Writer `writer` of `writers`, of `blocks` (offset in `source`, length) into staging
    /// `txid`, where server n appends to fragment n, `run_blocks` blocks to a unit.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Arc<Client>,
        name: DatasetName,
        txid: u64,
        (writer, writers): (u32, u32),
        blocks: Vec<(u64, u32)>,
        run_blocks: u32,
        source: Arc<dyn BlockSource>,
        settings: DqSettings,
        seed: u64,
    ) -> Result<DqWriter> {
        let nodes = client.nodes();
        let pins = pins(writer, writers, nodes, blocks.len().div_ceil(run_blocks.max(1) as usize))
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        DqWriter::make(client, name, txid, blocks, run_blocks, source, settings, seed, pins, None)
    }

    /// A writer of a stream: it takes its blocks from `input` as they are made (several
    /// writers may share one), each unit one block, with no pinned units (a server that gets
    /// nothing drops out of the dataset). It runs until the input closes and every block
    /// it took has landed.
    pub fn streaming(
        client: Arc<Client>,
        name: DatasetName,
        txid: u64,
        input: Arc<Input>,
        settings: DqSettings,
        seed: u64,
    ) -> Result<DqWriter> {
        let source: Arc<dyn BlockSource> = input.clone();
        DqWriter::make(client, name, txid, vec![], 1, source, settings, seed, vec![], Some(input))
    }

    #[allow(clippy::too_many_arguments)]
    fn make(
        client: Arc<Client>,
        name: DatasetName,
        txid: u64,
        blocks: Vec<(u64, u32)>,
        run_blocks: u32,
        source: Arc<dyn BlockSource>,
        settings: DqSettings,
        seed: u64,
        pins: Vec<usize>,
        input: Option<Arc<Input>>,
    ) -> Result<DqWriter> {
        let nodes = client.nodes();
        let run_blocks = run_blocks.max(1) as usize;
        let router = DqRouter::new(nodes, settings, seed).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let total_bytes = blocks.iter().map(|b| b.1 as u64).sum();
        let units = blocks.len().div_ceil(run_blocks);
        Ok(DqWriter {
            client,
            name,
            txid,
            blocks,
            source,
            router,
            stream: rand::random(),
            run_blocks,
            next: 0,
            resend: VecDeque::new(),
            unit_left: HashMap::new(),
            ledger: Ledger::new(units),
            pending: HashMap::new(),
            landed: vec![],
            counted: vec![false; units * run_blocks],
            done_bytes: 0,
            total_bytes,
            withdrawing: HashMap::new(),
            pins,
            loads: Loads::new(nodes),
            tx,
            rx,
            next_tag: 1,
            epoch: Instant::now(),
            steals: 0,
            redirects: 0,
            input,
        })
    }

    /// Whether more blocks may still come (a stream whose input is open).
    fn open(&self) -> bool {
        self.input.is_some()
    }

    /// A block of the stream (where it starts, its length), to send.
    fn take(&mut self, (offset, len): (u64, u32)) {
        self.blocks.push((offset, len));
        self.ledger.push();
        self.counted.push(false);
        self.total_bytes += u64::from(len);
    }

    fn time(&self, at: Instant) -> Time {
        Time(at.duration_since(self.epoch).as_nanos() as u64)
    }

    fn units(&self) -> usize {
        self.blocks.len().div_ceil(self.run_blocks)
    }

    /// Send units while the router gives credits.
    fn pump(&mut self) -> Result<()> {
        loop {
            let (unit, consumer) = match self.resend.front().copied() {
                Some((unit, ResendTo::Invited(to))) if self.router.take_invited(to) => (unit, to),
                Some((unit, ResendTo::Prefer(to))) if self.router.take(to) => (unit, to),
                Some((unit, _)) => match self.router.pick() {
                    Some(c) => (unit, c),
                    None => return Ok(()),
                },
                None if self.next < self.pins.len() && self.router.is_live(self.pins[self.next]) => {
                    if !self.router.take(self.pins[self.next]) {
                        return Ok(());
                    }
                    (self.next, self.pins[self.next])
                }
                None if self.next < self.units() => match self.router.pick() {
                    Some(c) => (self.next, c),
                    None => return Ok(()),
                },
                None => return Ok(()),
            };
            if self.resend.front().is_some_and(|r| r.0 == unit) {
                self.resend.pop_front();
            } else {
                self.next += 1;
            }
            let blocks = unit * self.run_blocks..((unit + 1) * self.run_blocks).min(self.blocks.len());
            self.unit_left.insert(unit, blocks.len());
            self.ledger.sent(unit, consumer);
            for block in blocks {
                match self.send(unit, block, consumer) {
                    Ok(()) => {}
                    Err(e) if e.unanswered() => {
                        // Gone before all of this unit left: it goes elsewhere, all of it.
                        self.lose(NodeId(consumer as u32))?;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Server `node` is gone, and its log with it: send every unit that was there again,
    /// to the servers left (whether it had landed or not). True if some unit was there; an
    /// error if no server is left.
    pub fn lose(&mut self, node: NodeId) -> Result<bool> {
        let k = node.index();
        if !self.router.is_live(k) {
            return Ok(false);
        }
        self.router.on_consumer_down(k);
        let units = self.ledger.lose(k);
        for l in self.landed.iter().filter(|l| l.node == node) {
            self.done_bytes -= l.len as u64;
        }
        self.landed.retain(|l| l.node != node);
        self.pending.retain(|tag, p| {
            let keep = p.consumer != k;
            if !keep {
                self.withdrawing.remove(tag);
            }
            keep
        });
        let held = !units.is_empty();
        for unit in units {
            self.unit_left.remove(&unit);
            self.resend.push_back((unit, ResendTo::Anywhere));
        }
        if !self.router.any_live() {
            return Err(ClientError::Invalid(format!(
                "every server went down during the write ({node} last); nothing of `{}` is visible",
                self.name
            )));
        }
        Ok(held)
    }

    /// The servers this writer has lost.
    pub fn lost(&self) -> Vec<NodeId> {
        (0..self.client.nodes()).filter(|&n| !self.router.is_live(n as usize)).map(NodeId).collect()
    }

    fn send(&mut self, unit: usize, block: usize, consumer: usize) -> Result<()> {
        {
            let (offset, len) = self.blocks[block];
            let piece = Piece { fragment: FragmentId(0), block: 0, start_in_block: 0, len, dataset_offset: offset };
            let data = self.source.piece(&piece).map_err(ClientError::io("reading the data to write"))?;
            let crc = crc32c::crc32c(&data);
            let node = NodeId(consumer as u32);
            let msg = Message::Write(WriteReq {
                stream: self.stream,
                progress: Progress {
                    done_bytes: self.done_bytes,
                    total_bytes: self.total_bytes,
                    metric: ProgressMetric::Bytes,
                },
                // A run's blocks back to back, where the scheduler can (GD-5's runs).
                service: Service {
                    runs: self.run_blocks > 1,
                    handoff: movable(unit, self.pins.len(), self.run_blocks),
                    ..Service::FURTHEST_BEHIND
                },
                txid: self.txid,
                dataset: self.name.clone(),
                fragment: FragmentId(node.0),
                block: APPEND,
                crc,
                data,
            });
            let tag = self.next_tag;
            self.next_tag += 1;
            let request_id = self.client.conn(node)?.send_tagged(&msg, &self.tx, tag)?;
            let now = self.time(Instant::now());
            let due = self.loads.on_send(consumer, now);
            self.pending.insert(tag, Pending { block, unit, consumer, due, request_id, crc });
        }
        Ok(())
    }

    /// Write every block. `progress` hears each block's bytes as it lands.
    pub async fn run(&mut self, progress: Option<&ProgressFn>) -> Result<()> {
        while self.open() || !self.ledger.is_done() {
            self.pump()?;
            let input = self.input.clone().filter(|_| self.next == self.units() && self.resend.is_empty());
            let stall = async {
                match self.pending.is_empty() {
                    true => std::future::pending().await,
                    false => tokio::time::sleep(STALL_TIMEOUT_DEFAULT).await,
                }
            };
            let ev = tokio::select! {
                ev = self.rx.recv() => ev.expect("the writer holds a sender"),
                more = async { input.as_ref().expect("a stream").next().await }, if input.is_some() => {
                    match more {
                        Some(block) => self.take(block),
                        None if input.is_some_and(|i| i.is_finished()) => self.input = None,
                        None => {
                            return Err(ClientError::Invalid(format!(
                                "the stream writing `{}` ended before its producer finished; nothing is visible",
                                self.name
                            )));
                        }
                    }
                    continue;
                }
                () = stall => {
                    return Err(ClientError::Invalid(format!("no server answered a write for {STALL_TIMEOUT_DEFAULT:?}")));
                }
            };
            let Some(p) = self.pending.remove(&ev.tag) else { continue };
            let node = NodeId(p.consumer as u32);
            match ev.result {
                Ok(Message::WriteOk(WriteOk { block: slot, queue_len, service_us, .. })) => {
                    let left = self.unit_left.get_mut(&p.unit).expect("a unit in flight");
                    *left -= 1;
                    if *left == 0 {
                        self.unit_left.remove(&p.unit);
                        self.router.on_reply(p.consumer);
                        self.ledger.landed(p.unit, p.consumer);
                    }
                    self.withdrawing.remove(&ev.tag);
                    self.loads.on_reply(p.consumer, queue_len, service_us as f64 * 1e-6);
                    let len = self.blocks[p.block].1;
                    self.done_bytes += len as u64;
                    crate::metrics::block_written(len as u64);
                    let offset = self.blocks[p.block].0;
                    self.landed.push(Landed { block: p.block, offset, node, slot, len, crc: p.crc });
                    // A block written again (its server died) counts once.
                    if let Some(f) = progress.filter(|_| !std::mem::replace(&mut self.counted[p.block], true)) {
                        f(len as u64);
                    }
                    self.maybe_withdraw(p.consumer);
                }
                Ok(Message::Error(e, _)) if e.code == ErrorCode::Cancelled => {
                    // Withdrawn before it ran (a unit of one block): write it where it was
                    // wanted.
                    self.unit_left.remove(&p.unit);
                    self.router.on_reply(p.consumer);
                    self.ledger.returned(p.unit, p.consumer);
                    let to = self.withdrawing.remove(&ev.tag);
                    self.resend.push_front((p.unit, to.map_or(ResendTo::Anywhere, ResendTo::Prefer)));
                }
                Ok(Message::Redirected { to }) => {
                    // Given back unwritten for an idle server (a withdraw of ours, if any, is
                    // moot: the server's word on its queue is better).
                    self.unit_left.remove(&p.unit);
                    self.router.on_reply(p.consumer);
                    self.ledger.returned(p.unit, p.consumer);
                    self.withdrawing.remove(&ev.tag);
                    self.loads.on_withdraw(p.consumer);
                    self.redirects += 1;
                    self.resend.push_front((p.unit, ResendTo::Invited(to.0 as usize)));
                }
                Ok(Message::Error(e, _)) => return Err(ClientError::Server { node, err: e }),
                Ok(other) => {
                    return Err(ClientError::Protocol {
                        node,
                        why: format!("unexpected reply kind {:#04x} to a write", other.kind()),
                    });
                }
                Err(e) if e.unanswered() => {
                    if self.client.first_seen_down(node) {
                        tracing::warn!(%node, %e, dataset = %self.name, "a server went down; writing its blocks to the others");
                    }
                    self.pending.insert(ev.tag, p);
                    self.lose(node)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// End of stream: consumer `idle` just answered and is running dry; withdraw a block
    /// queued at the busiest server for it (module docs).
    fn maybe_withdraw(&mut self, idle: usize) {
        if self.run_blocks > 1 || self.open() || self.next < self.units() || !self.resend.is_empty() {
            return;
        }
        // Blocks already being withdrawn are spoken for.
        let waiting: Vec<Unanswered> = self
            .pending
            .iter()
            .filter(|(tag, p)| !self.withdrawing.contains_key(tag) && p.unit >= self.pins.len())
            .map(|(_, p)| Unanswered { block: p.block, consumer: p.consumer, due: p.due })
            .collect();
        let now = self.time(Instant::now());
        let Some(u) = steal_at_end(&waiting, idle, self.loads.get(), now) else { return };
        let Some((&tag, p)) = self.pending.iter().find(|(_, p)| p.block == u.block) else { return };
        if let Ok(conn) = self.client.conn(NodeId(p.consumer as u32)) {
            conn.cancel(p.request_id);
            self.withdrawing.insert(tag, idle);
            self.steals += 1;
            self.loads.on_withdraw(p.consumer);
        }
    }

    /// Where every block landed.
    pub fn landed(&self) -> &[Landed] {
        &self.landed
    }
}
