//! Collective array writes, server-directed (panda §2, §3): the processes of a collective
//! call only say what they hold; each server works out which subchunks are its to write, asks
//! every process holding part of one for its piece, assembles the subchunk and appends it to
//! its fragment of the array's staged dataset.
//!
//! **The exchange.** The first process stages the array's dataset (one append-mode fragment
//! per server) and sends every server `ArrayOpen` with the plan. Every process then long-polls
//! every server with `ArrayWants` (which subchunks do you want pieces of from me?) and answers
//! each with `Piece` frames. A server keeps a few subchunks in assembly at once
//! ([`GATHER_AHEAD`]), so memory stays bounded and the disk never waits for the network.
//!
//! **Who writes what.** Round-robin and static allocation are computed by every server alike
//! from the plan (ganges-core's `round_robin`, `static_alloc`; with part-time I/O nodes, the
//! plan says which server runs in which process, and static allocation keeps each process's
//! subchunks on its own server where balance allows). Dynamic allocation asks the manager, a
//! `Dynamic` state machine on the plan's manager server (which hands a part-time node its own
//! subchunks first), with `ArrayGrant` each time a batch is gathered, reporting the rate its
//! disk wrote the last batch at.
//!
//! **The end.** `ArrayFinish` waits for the server's last block and answers where each
//! subchunk went; the first process builds the manifest and commits the dataset as for any
//! write. Commit and abort reach the session, whose outcome ends every process's polling, so
//! every process learns whether the array was committed.

use crate::Shared;
use crate::disk::{Ctx, WriteCtx, WriteReply, WriteTarget};
use crate::handoff::PeerConn;
use crate::store::StoreError;
use bytes::Bytes;
use ganges_core::array::{
    AllocKind, Dynamic, HELD_AHEAD, Region, Subchunks, Thief, copy_overlap, round_robin, static_alloc, subchunk_homes,
};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::sched::{Job, Progress, ProgressMetric, Service, StreamKey};
use ganges_proto::DatasetName;
use ganges_proto::array::{ArrayOutcome, ArrayPlan, ArrayWritten};
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::msg::{APPEND, Message, PieceReq, WriteReq};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// Subchunks a server has in assembly at once (asked for, not yet all pieces in).
pub const GATHER_AHEAD: usize = 4;
/// Gathered subchunks waiting for the disk: enough that the disk never waits for a gather.
const WRITE_AHEAD: usize = 2;
/// A collective write that makes no progress for this long has lost a process: it fails.
pub const STALL: Duration = Duration::from_secs(60);
/// How long one `ArrayWants` poll waits for something to say.
const POLL: Duration = Duration::from_secs(20);
/// How long a finished session's outcome stays to be polled.
const LINGER: Duration = Duration::from_secs(120);

/// The array writes a server takes part in, by array name.
#[derive(Debug, Default)]
pub struct Arrays {
    sessions: Mutex<HashMap<DatasetName, Arc<Session>>>,
    /// Wakes anyone waiting for a session to open.
    opened: Notify,
}

#[derive(Debug)]
struct Session {
    plan: ArrayPlan,
    subs: Subchunks,
    /// The memory chunk of each process.
    chunks: Vec<Region>,
    /// Per process: the subchunks this server wants pieces of, as the gatherer asks.
    wants: Vec<tokio::sync::Mutex<mpsc::UnboundedReceiver<u32>>>,
    assembly: Mutex<HashMap<u32, Assembly>>,
    /// The manager of dynamic allocation, on the manager's server.
    manager: Option<Mutex<Dynamic>>,
    /// This server's unstarted subchunks (round-robin, static, steal): the gatherer takes
    /// from the front, a thief from the back.
    queue: Mutex<VecDeque<u32>>,
    /// What this server's disk did for this write so far.
    meter: Mutex<Meter>,
    written: watch::Sender<Option<Result<ArrayWritten, String>>>,
    outcome: watch::Sender<Option<ArrayOutcome>>,
}

#[derive(Debug)]
struct Assembly {
    /// Made at the first piece that is not the whole subchunk.
    buf: Option<Vec<u8>>,
    waiting: BTreeSet<u32>,
    done: Option<oneshot::Sender<Bytes>>,
}

fn bad(why: impl Into<String>) -> StoreError {
    StoreError::BadRequest(why.into())
}

impl Arrays {
    fn get(&self, name: &DatasetName) -> Option<Arc<Session>> {
        self.sessions.lock().get(name).cloned()
    }

    /// The session of `name`, waiting a while for it to open (processes may ask before the
    /// first one has opened it).
    async fn wait_for(&self, name: &DatasetName, txid: u64) -> Result<Arc<Session>, StoreError> {
        let deadline = tokio::time::Instant::now() + POLL;
        loop {
            let opened = self.opened.notified();
            if let Some(s) = self.get(name).filter(|s| s.plan.txid == txid) {
                return Ok(s);
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return Err(bad(format!("no collective write of `{name}` is open on this server")));
            }
        }
    }

    /// Tell the session of a transaction how it ended (from `Commit` and `Abort`).
    pub fn conclude(&self, name: &DatasetName, txid: u64, committed: bool) {
        if let Some(s) = self.get(name).filter(|s| s.plan.txid == txid) {
            let why = if committed { String::new() } else { "the write was aborted".into() };
            s.outcome.send_if_modified(|o| o.is_none() && o.replace(ArrayOutcome { committed, why }).is_none());
        }
    }
}

/// `ArrayOpen`: start this server's part of a collective write.
pub fn open(shared: &Arc<Shared>, plan: ArrayPlan) -> Result<ControlReply, StoreError> {
    let subs = plan.spec.check().map_err(|e| bad(e.to_string()))?;
    let servers = plan.rates.len() as u32;
    if servers == 0 || shared.config.node.0 >= servers {
        return Err(bad(format!("the plan has {servers} servers; this is {}", shared.config.node)));
    }
    if plan.spec.replicas == 0 || plan.spec.replicas > servers {
        return Err(bad(format!("{} copies of each subchunk on {servers} servers", plan.spec.replicas)));
    }
    // The staging must be there: appends will be checked against it.
    shared.store.check_write(plan.txid, &plan.spec.name, FragmentId(shared.config.node.0), APPEND, 1)?;
    let ranks = plan.ranks();
    let chunks: Vec<Region> = (0..ranks).map(|r| plan.spec.memory.chunk(&plan.spec.schema, r)).collect();
    let (senders, wants): (Vec<_>, Vec<_>) = (0..ranks)
        .map(|_| {
            let (tx, rx) = mpsc::unbounded_channel();
            (tx, tokio::sync::Mutex::new(rx))
        })
        .unzip();
    let manager = (plan.spec.alloc == AllocKind::Dynamic && plan.manager.node == shared.config.node).then(|| {
        let homes = subchunk_homes(&subs.boxes, &chunks, &plan.spec.homes);
        Mutex::new(Dynamic::with_homes(subs.sizes(), &plan.rates, plan.spec.per_round, &homes))
    });
    let session = Arc::new(Session {
        plan,
        subs,
        chunks,
        wants,
        assembly: Mutex::new(HashMap::new()),
        manager,
        queue: Mutex::new(VecDeque::new()),
        meter: Mutex::new(Meter::default()),
        written: watch::channel(None).0,
        outcome: watch::channel(None).0,
    });
    {
        let mut all = shared.arrays.sessions.lock();
        if let Some(old) = all.get(&session.plan.spec.name)
            && old.outcome.borrow().is_none()
        {
            return Err(bad(format!("`{}` is being written already", session.plan.spec.name)));
        }
        all.insert(session.plan.spec.name.clone(), session.clone());
    }
    shared.arrays.opened.notify_waiters();
    tracing::info!(node = %shared.config.node, array = %session.plan.spec.name, subchunks = session.subs.len(),
        alloc = %session.plan.spec.alloc, "collective write opened");
    let (shared, s) = (shared.clone(), session.clone());
    tokio::spawn(async move {
        let result = gather(&shared, &s, senders).await;
        if let Err(why) = &result {
            tracing::warn!(node = %shared.config.node, array = %s.plan.spec.name, why, "collective write failed");
            s.outcome.send_if_modified(|o| {
                o.is_none() && o.replace(ArrayOutcome { committed: false, why: why.clone() }).is_none()
            });
        }
        s.written.send_replace(Some(result));
        // Keep the outcome for late polls, then forget the session.
        let mut outcome = s.outcome.subscribe();
        let _ = tokio::time::timeout(STALL * 10, outcome.wait_for(Option::is_some)).await;
        tokio::time::sleep(LINGER).await;
        let mut all = shared.arrays.sessions.lock();
        if all.get(&s.plan.spec.name).is_some_and(|cur| Arc::ptr_eq(cur, &s)) {
            all.remove(&s.plan.spec.name);
        }
    });
    Ok(ControlReply::Done)
}

/// `ArrayWants`: the subchunks this server wants pieces of from `rank`, once there are some;
/// the outcome once there will be none.
pub async fn wants(shared: &Arc<Shared>, name: &DatasetName, txid: u64, rank: u32) -> Result<ControlReply, StoreError> {
    let Ok(s) = shared.arrays.wait_for(name, txid).await else {
        // Not open yet: the process asks again.
        return Ok(ControlReply::ArrayWants { subchunks: vec![], outcome: None });
    };
    let Some(rx) = s.wants.get(rank as usize) else {
        return Err(bad(format!("`{name}` is written by {} processes; there is no process {rank}", s.wants.len())));
    };
    let mut rx = rx.lock().await;
    match tokio::time::timeout(POLL, rx.recv()).await {
        Ok(Some(first)) => {
            let mut subchunks = vec![first];
            while let Ok(more) = rx.try_recv() {
                subchunks.push(more);
            }
            Ok(ControlReply::ArrayWants { subchunks, outcome: None })
        }
        Ok(None) => {
            // Nothing more is wanted from this process: wait for the end.
            let mut outcome = s.outcome.subscribe();
            let got = tokio::time::timeout(POLL, outcome.wait_for(Option::is_some)).await;
            let outcome = got.ok().and_then(|o| o.ok().and_then(|o| o.clone()));
            Ok(ControlReply::ArrayWants { subchunks: vec![], outcome })
        }
        Err(_) => Ok(ControlReply::ArrayWants { subchunks: vec![], outcome: s.outcome.borrow().clone() }),
    }
}

/// A `Piece` frame: copy it into its subchunk's assembly.
pub fn piece(shared: &Arc<Shared>, p: PieceReq) -> Result<(), StoreError> {
    let s = {
        let all = shared.arrays.sessions.lock();
        all.values().find(|s| s.plan.txid == p.txid).cloned()
    };
    let s = s.ok_or_else(|| bad(format!("no collective write {:016x} is open on this server", p.txid)))?;
    let (Some(sub), Some(chunk)) = (s.subs.boxes.get(p.subchunk as usize), s.chunks.get(p.rank as usize)) else {
        return Err(bad(format!(
            "a piece of subchunk {} from process {}: no such subchunk or process",
            p.subchunk, p.rank
        )));
    };
    let part = chunk.intersect(sub);
    let elem = s.plan.spec.schema.dtype.size();
    let mut assembly = s.assembly.lock();
    let Some(a) = assembly.get_mut(&p.subchunk) else {
        return Err(bad(format!("subchunk {} was not asked for", p.subchunk)));
    };
    if !a.waiting.contains(&p.rank) {
        return Err(bad(format!("process {} sent subchunk {} twice, or was not asked", p.rank, p.subchunk)));
    }
    let whole = part.elements() == sub.elements();
    let len = (sub.elements() * u64::from(elem)) as usize;
    if whole && p.data.len() != len {
        let got = p.data.len();
        return Err(bad(format!(
            "the piece of subchunk {} from process {} is {got} bytes, not {len}",
            p.subchunk, p.rank
        )));
    }
    if !whole {
        let buf = a.buf.get_or_insert_with(|| vec![0; len]);
        copy_overlap(elem, &part, &p.data, sub, buf, &part)
            .map_err(|e| bad(format!("the piece of subchunk {} from process {}: {e}", p.subchunk, p.rank)))?;
    }
    a.waiting.remove(&p.rank);
    if a.waiting.is_empty() {
        let a = assembly.remove(&p.subchunk).expect("present");
        // One process held the whole subchunk: its piece is the subchunk, uncopied.
        let bytes = if whole { p.data } else { Bytes::from(a.buf.expect("pieces were copied in")) };
        if let Some(done) = a.done {
            let _ = done.send(bytes);
        }
    }
    Ok(())
}

/// The session of a server-to-server request from `from`, which must be a server of it.
async fn peer_session(
    shared: &Arc<Shared>,
    name: &DatasetName,
    txid: u64,
    from: NodeId,
) -> Result<Arc<Session>, StoreError> {
    let s = shared.arrays.wait_for(name, txid).await?;
    if from.0 as usize >= s.plan.rates.len() {
        return Err(bad(format!("{from} is not a server of the write of `{name}`")));
    }
    Ok(s)
}

/// `ArrayGrant`, on the manager's server: the asker's next batch.
pub async fn grant(
    shared: &Arc<Shared>,
    name: &DatasetName,
    txid: u64,
    from: NodeId,
    rate: Option<f64>,
) -> Result<ControlReply, StoreError> {
    let s = peer_session(shared, name, txid, from).await?;
    let Some(manager) = &s.manager else {
        return Err(bad(format!("{} does not manage the write of `{name}`", shared.config.node)));
    };
    let subchunks = manager.lock().grant(from.0, rate);
    Ok(ControlReply::ArrayGranted { subchunks })
}

/// `ArraySteal`, on any server of a `steal` write: give the thief its share of this
/// server's unstarted subchunks, from the back of the queue.
pub async fn steal(
    shared: &Arc<Shared>,
    name: &DatasetName,
    txid: u64,
    from: NodeId,
    rate: Option<f64>,
) -> Result<ControlReply, StoreError> {
    let s = peer_session(shared, name, txid, from).await?;
    let me = shared.config.node.0 as usize;
    let mine = s.meter.lock().rate().unwrap_or(s.plan.rates[me]);
    let thief = rate.unwrap_or(s.plan.rates[from.0 as usize]);
    let mut queue = s.queue.lock();
    let n = Thief::share(queue.len(), thief, mine);
    let at = queue.len() - n;
    let subchunks: Vec<u32> = queue.split_off(at).into();
    if !subchunks.is_empty() {
        tracing::debug!(node = %shared.config.node, thief = %from, n, "gave subchunks to a thief");
    }
    Ok(ControlReply::ArrayStolen { subchunks })
}

/// `ArrayFinish`: wait for this server's last block, then say where everything went.
pub async fn finish(shared: &Arc<Shared>, name: &DatasetName, txid: u64) -> Result<ControlReply, StoreError> {
    let s = shared.arrays.wait_for(name, txid).await?;
    let mut written = s.written.subscribe();
    let done = written.wait_for(Option::is_some).await.map_err(|_| bad("the write's gatherer is gone"))?;
    match done.clone().expect("some") {
        Ok(written) => Ok(ControlReply::ArrayWritten { written }),
        Err(why) => {
            Err(StoreError::Incomplete(format!("{} could not write its part of `{name}`: {why}", shared.config.node)))
        }
    }
}

/// Where this server's work comes from.
enum Work {
    /// The session's queue, planned at the start.
    Fixed,
    /// Batches from the manager.
    Managed { conn: Option<PeerConn>, batch: std::vec::IntoIter<u32> },
    /// The session's queue, then what other servers give.
    Steal { thief: Thief, conns: HashMap<u32, PeerConn> },
}

/// The gatherer: asks for pieces, assembles subchunks and hands them to the writer.
async fn gather(
    shared: &Arc<Shared>,
    s: &Arc<Session>,
    senders: Vec<mpsc::UnboundedSender<u32>>,
) -> Result<ArrayWritten, String> {
    let me = shared.config.node;
    let plan = &s.plan;
    let servers = plan.rates.len() as u32;
    let planned = match plan.spec.alloc {
        AllocKind::RoundRobin => round_robin(s.subs.len(), servers),
        AllocKind::Static | AllocKind::Steal => {
            let homes = subchunk_homes(&s.subs.boxes, &s.chunks, &plan.spec.homes);
            static_alloc(&s.subs.sizes(), &plan.rates, &homes)
        }
        AllocKind::Dynamic => vec![],
    };
    s.queue.lock().extend(mine(planned, me));
    let mut work = match plan.spec.alloc {
        AllocKind::RoundRobin | AllocKind::Static => Work::Fixed,
        AllocKind::Dynamic => Work::Managed { conn: None, batch: Vec::new().into_iter() },
        AllocKind::Steal => Work::Steal { thief: Thief::new(me.0, servers), conns: HashMap::new() },
    };
    // The writer holds back a partial block, so the bound is at least two blocks.
    let block = shared
        .store
        .check_write(plan.txid, &plan.spec.name, FragmentId(me.0), APPEND, 1)
        .map_err(|e| e.to_string())?
        .block_bytes();
    // Work taken early is work others cannot take: under dynamic allocation and stealing, a
    // server holds little ahead of its disk.
    let ahead_max = match work {
        Work::Managed { .. } | Work::Steal { .. } => HELD_AHEAD * plan.spec.threshold.max(u64::from(block)),
        Work::Fixed => u64::MAX,
    };
    let (tx, rx) = mpsc::channel::<(u32, Bytes)>(WRITE_AHEAD);
    let (progress, mut written) = watch::channel(0u64);
    let writer = tokio::spawn(write_all(shared.clone(), s.clone(), rx, progress));
    let mut inflight = futures_util::stream::FuturesOrdered::new();
    let mut exhausted = false;
    let mut taken = 0u64;
    loop {
        while !exhausted && inflight.len() < GATHER_AHEAD && taken.saturating_sub(*written.borrow()) < ahead_max {
            match next(shared, s, &mut work).await? {
                Some(i) => {
                    taken += s.subs.bytes(i as usize);
                    inflight.push_back(ask(s, &senders, i));
                }
                None => exhausted = true,
            }
        }
        if inflight.is_empty() {
            // Done, or holding all the work allowed ahead: wait for the disk.
            if exhausted || written.changed().await.is_err() {
                break;
            }
            continue;
        }
        use futures_util::StreamExt;
        let Some(got) = inflight.next().await else { break };
        let (i, buf) = got?;
        if tx.send((i, buf)).await.is_err() {
            break;
        }
    }
    drop(senders);
    drop(tx);
    let (placed, fragment_bytes) = writer.await.map_err(|e| format!("the writer failed: {e}"))??;
    let m = *s.meter.lock();
    Ok(ArrayWritten { placed, fragment_bytes, bytes: m.bytes, disk_secs: m.secs })
}

fn mine(alloc: Vec<u32>, me: NodeId) -> impl Iterator<Item = u32> {
    alloc.into_iter().enumerate().filter(move |(_, s)| *s == me.0).map(|(i, _)| i as u32)
}

/// The next subchunk this server is to write, asking the manager when a batch runs out.
async fn next(shared: &Arc<Shared>, s: &Arc<Session>, work: &mut Work) -> Result<Option<u32>, String> {
    let meter = &s.meter;
    let own = || s.queue.lock().pop_front();
    match work {
        Work::Fixed => Ok(own()),
        Work::Steal { thief, conns } => {
            if let Some(i) = own() {
                return Ok(Some(i));
            }
            let rate = meter.lock().rate();
            let (me, servers) = (shared.config.node, s.plan.rates.len() as u32);
            while let Some(victim) = thief.victim() {
                let peer = s
                    .plan
                    .peers
                    .iter()
                    .find(|p| p.node.0 == victim)
                    .ok_or_else(|| format!("no address for node{victim}"))?;
                let c = match conns.entry(victim) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(
                        PeerConn::connect(shared, &peer.addr)
                            .await
                            .map_err(|e| format!("reaching {}: {e}", peer.addr))?,
                    ),
                };
                let req =
                    ControlRequest::ArraySteal { name: s.plan.spec.name.clone(), txid: s.plan.txid, from: me, rate };
                let got = match tokio::time::timeout(STALL, c.control(req)).await {
                    Ok(Ok(ControlReply::ArrayStolen { subchunks })) => subchunks,
                    Ok(Ok(other)) => return Err(format!("node{victim} answered a steal with {other:?}")),
                    // A server that cannot answer has nothing to give; its own part fails the write if it is gone.
                    Ok(Err(e)) => {
                        tracing::debug!(%victim, %e, "steal refused");
                        vec![]
                    }
                    Err(_) => vec![],
                };
                thief.on_reply(got.len());
                debug_assert!(victim < servers);
                if !got.is_empty() {
                    let mut q = s.queue.lock();
                    q.extend(got);
                    return Ok(q.pop_front());
                }
            }
            Ok(None)
        }
        Work::Managed { conn, batch } => {
            if let Some(i) = batch.next() {
                return Ok(Some(i));
            }
            let rate = meter.lock().rate();
            let (name, txid, me) = (s.plan.spec.name.clone(), s.plan.txid, shared.config.node);
            let reply = if s.plan.manager.node == me {
                grant(shared, &name, txid, me, rate).await.map_err(|e| e.to_string())?
            } else {
                if conn.is_none() {
                    let c = PeerConn::connect(shared, &s.plan.manager.addr)
                        .await
                        .map_err(|e| format!("reaching the manager at {}: {e}", s.plan.manager.addr))?;
                    *conn = Some(c);
                }
                let c = conn.as_mut().expect("connected");
                let req = ControlRequest::ArrayGrant { name, txid, from: me, rate };
                tokio::time::timeout(STALL, c.control(req))
                    .await
                    .map_err(|_| "the manager did not answer".to_string())?
                    .map_err(|e| format!("asking the manager for work: {e}"))?
            };
            match reply {
                ControlReply::ArrayGranted { subchunks } => {
                    *batch = subchunks.into_iter();
                    Ok(batch.next())
                }
                other => Err(format!("the manager answered {other:?}")),
            }
        }
    }
}

/// Ask every process holding part of subchunk `i` for its piece, and wait for them all.
fn ask(
    s: &Arc<Session>,
    senders: &[mpsc::UnboundedSender<u32>],
    i: u32,
) -> impl std::future::Future<Output = Result<(u32, Bytes), String>> + use<> {
    let sub = &s.subs.boxes[i as usize];
    let holders: BTreeSet<u32> =
        (0..s.chunks.len() as u32).filter(|&r| !s.chunks[r as usize].intersect(sub).is_empty()).collect();
    let (done, rx) = oneshot::channel();
    let assembly = Assembly { buf: None, waiting: holders.clone(), done: Some(done) };
    s.assembly.lock().insert(i, assembly);
    for r in &holders {
        let _ = senders[*r as usize].send(i);
    }
    async move {
        match tokio::time::timeout(STALL, rx).await {
            Ok(Ok(buf)) => Ok((i, buf)),
            Ok(Err(_)) => Err(format!("subchunk {i} was dropped")),
            Err(_) => Err(format!(
                "no piece of subchunk {i} for {}s from processes {holders:?}: a process of the call is gone",
                STALL.as_secs()
            )),
        }
    }
}

/// What the disk did for this write: the rate dynamic allocation and the next call's static
/// allocation plan with.
#[derive(Clone, Copy, Debug, Default)]
struct Meter {
    bytes: u64,
    secs: f64,
}

impl Meter {
    fn rate(&self) -> Option<f64> {
        (self.bytes > 0 && self.secs > 0.0).then(|| self.bytes as f64 / self.secs)
    }
}

/// The writer: packs gathered subchunks into the fragment's blocks, in order through the disk
/// queue (and, with more than one copy, to the servers holding the other copies, in the same
/// order, so that every copy's log is the same), and records where each subchunk starts.
async fn write_all(
    shared: Arc<Shared>,
    s: Arc<Session>,
    mut rx: mpsc::Receiver<(u32, Bytes)>,
    progress: watch::Sender<u64>,
) -> Result<(Vec<(u32, u64)>, u64), String> {
    let fragment = FragmentId(shared.config.node.0);
    let block_bytes = shared
        .store
        .check_write(s.plan.txid, &s.plan.spec.name, fragment, APPEND, 1)
        .map_err(|e| e.to_string())?
        .block_bytes() as usize;
    let meter = &s.meter;
    let mut w = BlockWriter::new(&shared, &s, fragment);
    w.connect_copies().await?;
    let mut placed = vec![];
    let mut offset = 0u64;
    let mut pending: Vec<u8> = Vec::with_capacity(block_bytes);
    while let Some((i, buf)) = rx.recv().await {
        placed.push((i, offset));
        offset += buf.len() as u64;
        if pending.is_empty() && buf.len() == block_bytes {
            // A subchunk of exactly a block, at a block's start: written as it came.
            w.write(buf, offset).await?;
            progress.send_replace(meter.lock().bytes);
            continue;
        }
        let mut rest = &buf[..];
        while !rest.is_empty() {
            let take = (block_bytes - pending.len()).min(rest.len());
            pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if pending.len() == block_bytes {
                let block = std::mem::replace(&mut pending, Vec::with_capacity(block_bytes));
                w.write(Bytes::from(block), offset).await?;
                progress.send_replace(meter.lock().bytes);
            }
        }
    }
    if offset == 0 {
        // Every fragment of a dataset holds at least one block: a server given no subchunk
        // holds one byte no subchunk points at.
        pending.push(0);
        offset = 1;
    }
    let padding = u64::from(placed.is_empty());
    if !pending.is_empty() {
        w.write(Bytes::from(pending), offset).await?;
    }
    w.flush().await?;
    meter.lock().bytes -= padding;
    Ok((placed, offset))
}

/// Appends blocks to this server's fragment, here and at the other copies' servers.
struct BlockWriter<'a> {
    shared: &'a Arc<Shared>,
    s: &'a Session,
    fragment: FragmentId,
    /// Blocks queued so far: the slot the next one must land in, everywhere.
    slots: u32,
    /// Connections to the servers holding the fragment's other copies.
    copies: Vec<(NodeId, PeerConn)>,
    /// This server's writes queued at its disk, oldest first.
    landing: Landing,
}

/// Local writes queued at the disk and not yet landed.
struct Landing {
    queued: VecDeque<Queued>,
    /// How many may be: two where the disk serves one request at a time (the disk model's
    /// default), so that the next block waits behind the one in service and the disk starts it
    /// the moment that one ends, not once the writer has woken up and queued it (at 16 servers
    /// on two cores those wake-ups left the disk idle a tenth of a call). One where the disk
    /// serves several at once: they could land out of order, and a log's blocks must not.
    most: usize,
    /// When the last one landed: a write's disk time starts then or at its queueing, whichever
    /// is later.
    last: Option<Instant>,
}

struct Queued {
    landed: oneshot::Receiver<Result<u32, StoreError>>,
    slot: u32,
    at: Instant,
    len: u64,
}

impl Landing {
    /// Wait for the oldest write to land in its slot, and charge the meter with its time.
    async fn one(&mut self, fragment: FragmentId, meter: &Mutex<Meter>) -> Result<(), String> {
        let Some(q) = self.queued.pop_front() else { return Ok(()) };
        let slot = match q.landed.await {
            Ok(Ok(slot)) => slot,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("the disk driver dropped a write".to_string()),
        };
        if slot != q.slot {
            return Err(format!("block {} of {fragment} landed in slot {slot}", q.slot));
        }
        let now = Instant::now();
        let from = self.last.map_or(q.at, |t| t.max(q.at));
        self.last = Some(now);
        let mut m = meter.lock();
        m.bytes += q.len;
        m.secs += now.saturating_duration_since(from).as_secs_f64();
        Ok(())
    }

    /// Wait until fewer than `keep` writes are queued.
    async fn below(&mut self, keep: usize, fragment: FragmentId, meter: &Mutex<Meter>) -> Result<(), String> {
        while self.queued.len() >= keep.max(1) {
            self.one(fragment, meter).await?;
        }
        Ok(())
    }
}

impl BlockWriter<'_> {
    fn new<'a>(shared: &'a Arc<Shared>, s: &'a Session, fragment: FragmentId) -> BlockWriter<'a> {
        let most = if shared.config.disk_depth() == 1 { 2 } else { 1 };
        let landing = Landing { queued: VecDeque::new(), most, last: None };
        BlockWriter { shared, s, fragment, slots: 0, copies: vec![], landing }
    }

    async fn connect_copies(&mut self) -> Result<(), String> {
        let plan = &self.s.plan;
        let servers = plan.rates.len() as u32;
        for c in 1..plan.spec.replicas {
            let node = NodeId((self.fragment.0 + c) % servers);
            let peer = plan.peers.iter().find(|p| p.node == node).ok_or_else(|| format!("no address for {node}"))?;
            let conn = PeerConn::connect(self.shared, &peer.addr)
                .await
                .map_err(|e| format!("reaching {node} for copy {c} at {}: {e}", peer.addr))?;
            self.copies.push((node, conn));
        }
        Ok(())
    }

    /// Queue a block at this server's disk and write it to the other copies; returns once
    /// the copies hold it and the disk has room for the next.
    async fn write(&mut self, data: Bytes, done: u64) -> Result<(), String> {
        let (shared, plan) = (self.shared, &self.s.plan);
        let len = data.len() as u64;
        let crc = crc32c::crc32c(&data);
        let progress =
            Progress { done_bytes: done, total_bytes: plan.spec.schema.bytes(), metric: ProgressMetric::Bytes };
        let staged = shared
            .store
            .check_write(plan.txid, &plan.spec.name, self.fragment, APPEND, data.len())
            .map_err(|e| e.to_string())?;
        let (tx, landed) = oneshot::channel();
        let job = Job {
            id: 0,
            stream: StreamKey { conn: 0, stream: plan.txid },
            file: staged.key,
            bytes: len,
            progress,
            service: Service::FURTHEST_BEHIND,
            arrival: shared.now(),
        };
        let ctx = WriteCtx {
            conn: 0,
            request_id: 0,
            target: WriteTarget::Staged(staged),
            block: APPEND,
            crc,
            data: data.clone(),
            reply: WriteReply::Local(tx),
        };
        let want = self.slots;
        self.slots += 1;
        self.landing.queued.push_back(Queued { landed, slot: want, at: Instant::now(), len });
        shared.disk.lock().enqueue(job, Ctx::Write(ctx));
        shared.disk_wake.notify_one();
        let req = WriteReq {
            stream: plan.txid,
            progress,
            service: Service::FURTHEST_BEHIND,
            txid: plan.txid,
            dataset: plan.spec.name.clone(),
            fragment: self.fragment,
            block: APPEND,
            crc,
            data,
        };
        let (fragment, meter) = (self.fragment, &self.s.meter);
        let copies = &mut self.copies;
        let remote = async move {
            for (node, conn) in copies.iter_mut() {
                let slot = forward(conn, *node, &req).await?;
                if slot != want {
                    return Err(format!("block {want} of {fragment} landed in slot {slot} on {node}"));
                }
            }
            Ok::<_, String>(())
        };
        let most = self.landing.most;
        let (local, remote) = tokio::join!(self.landing.below(most, fragment, meter), remote);
        local.and(remote)
    }

    /// Wait for every queued write to land.
    async fn flush(&mut self) -> Result<(), String> {
        self.landing.below(1, self.fragment, &self.s.meter).await
    }
}

/// Append a block to another server's copy of the fragment; the slot it landed in.
async fn forward(conn: &mut PeerConn, node: NodeId, req: &WriteReq) -> Result<u32, String> {
    let fail = |why: String| format!("writing a copy on {node}: {why}");
    let id = conn.send(&Message::Write(req.clone())).await.map_err(|e| fail(e.to_string()))?;
    loop {
        let (got, reply) = tokio::time::timeout(STALL, conn.read_tagged())
            .await
            .map_err(|_| fail(format!("no answer for {}s", STALL.as_secs())))?
            .map_err(|e| fail(e.to_string()))?;
        if got != id {
            continue;
        }
        return match reply {
            Message::WriteOk(ok) => Ok(ok.block),
            Message::Error(e, _) => Err(fail(e.to_string())),
            other => Err(fail(format!("unexpected reply kind {:#04x}", other.kind()))),
        };
    }
}

/// The least time a write probe runs: a kernel throttle lets a burst through at the disk's
/// own speed (a token bucket), and three 1 MiB writes fit inside it, so a short probe would
/// take a throttled disk for a fast one.
const PROBE_MIN: Duration = Duration::from_millis(250);
/// The scratch file's largest size: the probe writes round it.
const PROBE_FILE_WRITES: u32 = 16;

/// `WriteProbe`: panda's empirical test, `count` writes of `bytes` through the disk queue (so
/// a disk model and its faults apply as to any write), continued until [`PROBE_MIN`] has
/// passed (ours), then a sync; the rate it took.
pub async fn probe(shared: &Arc<Shared>, bytes: u32, count: u32) -> Result<ControlReply, StoreError> {
    if bytes == 0 || count == 0 || u64::from(bytes) * u64::from(count) > 64 << 20 {
        return Err(bad("a write probe writes 1 byte to 64 MiB in all"));
    }
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = shared.config.data_dir.join(format!("write-probe-{n}.tmp"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(|err| StoreError::Io { what: format!("creating {}", path.display()), err })?;
    let file = Arc::new(file);
    // With direct I/O, as the server's data goes: a kernel throttle then holds the probe too.
    let direct = match shared.config.direct_io {
        true => Some(Arc::new(
            crate::direct::open(&path, true)
                .map_err(|err| StoreError::Io { what: format!("opening {} for direct I/O", path.display()), err })?,
        )),
        false => None,
    };
    let data = Bytes::from(vec![0x5a; bytes as usize]);
    let began = Instant::now();
    let mut result = Ok(());
    let mut k = 0u32;
    while (k < count || began.elapsed() < PROBE_MIN) && u64::from(k) * u64::from(bytes) < 256 << 20 {
        let (tx, rx) = oneshot::channel();
        let job = Job {
            id: 0,
            stream: StreamKey { conn: 0, stream: u64::MAX },
            file: u64::MAX - u64::from(shared.config.node.0),
            bytes: u64::from(bytes),
            progress: Progress { done_bytes: 0, total_bytes: 1, metric: ProgressMetric::Bytes },
            service: Service::FURTHEST_BEHIND,
            arrival: shared.now(),
        };
        let offset = u64::from(k % PROBE_FILE_WRITES) * u64::from(bytes);
        let ctx = WriteCtx {
            conn: 0,
            request_id: 0,
            target: WriteTarget::Scratch { file: file.clone(), direct: direct.clone(), offset },
            block: k,
            crc: 0,
            data: data.clone(),
            reply: WriteReply::Local(tx),
        };
        shared.disk.lock().enqueue(job, Ctx::Write(ctx));
        shared.disk_wake.notify_one();
        result = rx.await.unwrap_or_else(|_| Err(bad("the disk driver dropped a write"))).map(drop);
        if result.is_err() {
            break;
        }
        k += 1;
    }
    let synced = {
        let f = file.clone();
        tokio::task::spawn_blocking(move || f.sync_data()).await
    };
    let secs = began.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    result?;
    synced
        .map_err(|e| bad(format!("sync task failed: {e}")))?
        .map_err(|err| StoreError::Io { what: "syncing the write probe".into(), err })?;
    Ok(ControlReply::Rate { bytes_per_sec: u64::from(bytes) as f64 * f64::from(k) / secs.max(1e-9) })
}
