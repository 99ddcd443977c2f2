//! GD-6, server request handoff, on the wire (virtual-streams §3.4).
//!
//! **Idle side.** When the disk driver finds the queue empty while consumers that allow
//! handoff are about, it wakes the asker task here. The asker picks a peer holding copies of
//! the same fragments (ganges-core's `Asker`: one ask at a time, round-robin, backing off a
//! peer that had nothing to give), sends it `HandoffAsk` with this server's measured rate
//! and the clients it has connections to, and queues the requests it gets back. It serves
//! them like its own and answers the clients directly, naming each request's origin.
//!
//! **Busy side.** On `HandoffAsk`, a server takes the share ganges-core's `handoff::share`
//! computes of its queued requests that the asker can serve (requests allowing handoff, from
//! clients connected to the asker, for fragments the asker holds), the newest first; tells
//! each request's client where it went (`Moved`), then hands them over. From then on the
//! request is the asker's: if the asker dies, the client's connection to it breaks and the
//! client reads the block elsewhere. Nothing is served twice (a request is in exactly one
//! queue) and nothing is lost (the client always knows which server owes it the answer).
//!
//! **DQ appends (ours).** A DQ block has no home: any server of the write may append it to
//! its own log. So the same ask also names the DQ writes the asker is staging, and a busy
//! server with nothing to hand over gives back its share of their queued appends (those the
//! writer marked movable, i.e. not pinned), answering each writer `Redirected` to the
//! asker. The block's data is the writer's, so it travels from the writer to the asker
//! (as a moved read's would from the busy server). Taken out of the queue under the disk
//! lock, an append is written by neither server until the writer resends it, and the writer
//! holds it until some server acknowledges it: nothing is written twice or lost. The asker
//! waits for the appends it was given (`ServerNode::expect`) before it asks again. This
//! evens out the end of a DQ write, which River's credits alone leave to chance: the last
//! blocks queued at each disk are whatever was there when the writers ran out.

use crate::Shared;
use crate::disk::{Ctx, JobCtx, WriteCtx, WriteReply, WriteTarget};
use ganges_core::handoff::{APPEND_HANDOFF_MIN, REDIRECT_WAIT, share_at_least};
use ganges_core::ids::NodeId;
use ganges_core::sched::{Job, Progress, ProgressMetric, StreamKey};
use ganges_core::serve::Ask;
use ganges_net::transport::{BoxRead, BoxWrite};
use ganges_proto::control::{ControlReply, ControlRequest, HandedJob, Peer};
use ganges_proto::io::{read_frame, write_frame};
use ganges_proto::msg::{ErrorCode, Hello, Message, Origin, WireError};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::BufReader;

/// How long an ask may take before the asker gives that peer up for now: a busy server
/// answers within a scheduling decision, so anything longer means it is hung.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection to a peer server, opened through the cluster's transport (TLS and the
/// secret's handshake, as a client's would be).
pub(crate) struct PeerConn {
    rd: BufReader<BoxRead>,
    wr: BoxWrite,
    next_id: u64,
}

impl PeerConn {
    pub(crate) async fn connect(shared: &Shared, addr: &str) -> std::io::Result<PeerConn> {
        let stream = tokio::time::timeout(ASK_TIMEOUT, shared.config.transport.connect(addr))
            .await
            .map_err(|_| std::io::Error::other("connecting timed out"))?
            .map_err(std::io::Error::other)?;
        let (rd, mut wr) = (stream.rd, stream.wr);
        let hello = Message::Hello(Hello { client: "ganges-server peer".into(), client_id: 0 });
        write_frame(&mut wr, &hello.encode(1)).await?;
        let mut conn = PeerConn { rd, wr, next_id: 2 };
        match conn.read().await? {
            Message::HelloOk(_) => Ok(conn),
            other => Err(std::io::Error::other(format!("peer answered hello with kind {:#04x}", other.kind()))),
        }
    }

    async fn read(&mut self) -> std::io::Result<Message> {
        Ok(self.read_tagged().await?.1)
    }

    /// The next frame and the request id it answers.
    pub(crate) async fn read_tagged(&mut self) -> std::io::Result<(u64, Message)> {
        let (h, body) = read_frame(&mut self.rd)
            .await
            .map_err(std::io::Error::other)?
            .ok_or_else(|| std::io::Error::other("peer closed the connection"))?;
        Ok((h.request_id, Message::decode(&h, body).map_err(std::io::Error::other)?))
    }

    /// Send a request; returns its id.
    pub(crate) async fn send(&mut self, msg: &Message) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut self.wr, &msg.encode(id)).await?;
        Ok(id)
    }

    pub(crate) async fn control(&mut self, req: ControlRequest) -> std::io::Result<ControlReply> {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut self.wr, &Message::Control(req).encode(id)).await?;
        match self.read().await? {
            Message::ControlOk(r) => Ok(*r),
            Message::Error(e, _) => Err(std::io::Error::other(e.to_string())),
            other => Err(std::io::Error::other(format!("unexpected kind {:#04x}", other.kind()))),
        }
    }
}

/// The peers worth asking: servers holding copies of fragments this server holds, in the
/// datasets it has open, among the peers it knows; every peer while it stages a DQ write
/// (`appending`), since every server of such a write holds its queued appends' home.
fn neighbours(shared: &Shared, appending: bool) -> Vec<Peer> {
    if appending {
        return shared.peers.lock().clone();
    }
    let me = shared.config.node;
    let mut near = BTreeSet::new();
    for ds in shared.store.open_datasets() {
        let m = &ds.manifest;
        for (f, _) in m.layout.copies_on(me, m.shape.fragment_count()) {
            near.extend(m.layout.holders(f).into_iter().filter(|n| *n != me));
        }
    }
    shared.peers.lock().iter().filter(|p| near.contains(&p.node)).cloned().collect()
}

/// The asker task: runs until the server shuts down (aborted). It sleeps until the disk
/// driver reports an empty queue, then asks peers for work for as long as the queue stays
/// empty and some peer is worth asking, sleeping out back-offs; it never spins.
pub async fn run_asker(shared: Arc<Shared>) {
    let mut conns: HashMap<NodeId, PeerConn> = HashMap::new();
    loop {
        shared.idle.notified().await;
        loop {
            let now = shared.now();
            if !shared.disk.lock().wants_work(now) {
                break;
            }
            let appends = shared.store.append_txids();
            let peers = neighbours(&shared, !appends.is_empty());
            let nodes: Vec<NodeId> = peers.iter().map(|p| p.node).collect();
            let next = shared.disk.lock().poll_ask(now, &nodes);
            let node = match next {
                Ask::Peer(node) => node,
                Ask::At(t) => {
                    tokio::time::sleep_until(shared.instant(t)).await;
                    continue;
                }
                Ask::Idle => break,
            };
            let addr = &peers.iter().find(|p| p.node == node).expect("asked a listed peer").addr;
            let given = match ask(&shared, &mut conns, (node, addr), appends).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!(peer = %node, %e, "handoff ask failed");
                    conns.remove(&node);
                    0
                }
            };
            shared.disk.lock().on_ask_answer(shared.now(), node, given);
            if given > 0 {
                shared.disk_wake.notify_one();
                break;
            }
            // Nothing there: the loop tries the next peer at once (this one is backed off).
        }
    }
}

async fn ask(
    shared: &Arc<Shared>,
    conns: &mut HashMap<NodeId, PeerConn>,
    (node, addr): (NodeId, &str),
    appends: Vec<u64>,
) -> std::io::Result<usize> {
    if let std::collections::hash_map::Entry::Vacant(e) = conns.entry(node) {
        e.insert(PeerConn::connect(shared, addr).await?);
    }
    let conn = conns.get_mut(&node).expect("inserted above");
    let rate = shared.rate_bytes_per_sec();
    let clients: Vec<u64> = shared.clients.lock().keys().copied().collect();
    let req = ControlRequest::HandoffAsk { from: shared.config.node, rate_bytes_per_sec: rate, clients, appends };
    let asked_at = shared.disk.lock().enqueued();
    let reply = tokio::time::timeout(ASK_TIMEOUT, conn.control(req))
        .await
        .map_err(|_| std::io::Error::other("handoff ask timed out"))??;
    match reply {
        ControlReply::HandoffGive { jobs, redirected } => {
            if redirected > 0 {
                let until = shared.now() + REDIRECT_WAIT;
                shared.disk.lock().expect(redirected, asked_at, until);
                shared.counters.redirected_in.fetch_add(redirected as u64, Ordering::Relaxed);
            }
            Ok(take_over(shared, jobs) + redirected as usize)
        }
        other => Err(std::io::Error::other(format!("unexpected reply {other:?}"))),
    }
}

/// Queue requests handed over by a peer; they are answered on the clients' own connections.
fn take_over(shared: &Arc<Shared>, jobs: Vec<HandedJob>) -> usize {
    let now = shared.now();
    let mut taken = 0;
    for hj in jobs {
        let origin = Origin { node: hj.origin_node, request_id: hj.origin_request };
        let client = shared.clients.lock().get(&hj.client_id).cloned();
        let Some((conn, outbox)) = client else {
            // The client left between the ask and the answer: nobody to answer.
            continue;
        };
        let prepared = shared.store.dataset(&hj.dataset).and_then(|ds| {
            shared.store.check_read(&ds, hj.fragment, hj.block, hj.start_in_block, hj.len)?;
            let key = ds.copy(hj.fragment)?.key;
            Ok((ds, key))
        });
        let (ds, file) = match prepared {
            Ok(x) => x,
            Err(e) => {
                // Answer at once, so the client reads the block elsewhere.
                outbox.send_untracked(
                    origin.request_id,
                    Message::Error(WireError::new(e.code(), e.to_string()), Some(origin)),
                );
                continue;
            }
        };
        let Some(service) = ganges_proto::service::from_byte(hj.service, 0, hj.guard_every, hj.depth) else {
            let why = format!("a handed-off read's service byte {:#04x} names no discipline", hj.service);
            outbox.send_untracked(
                origin.request_id,
                Message::Error(WireError::new(ErrorCode::BadRequest, why), Some(origin)),
            );
            continue;
        };
        if !outbox.admit() {
            let e = WireError::new(ErrorCode::TooManyInFlight, "too many requests in flight to take a handoff");
            outbox.send_untracked(origin.request_id, Message::Error(e, Some(origin)));
            continue;
        }
        let metric = if hj.fraction { ProgressMetric::Fraction } else { ProgressMetric::Bytes };
        let job = Job {
            id: 0,
            stream: StreamKey { conn, stream: hj.stream },
            file,
            bytes: hj.len as u64,
            progress: Progress { done_bytes: hj.done_bytes.min(hj.total_bytes), total_bytes: hj.total_bytes, metric },
            service,
            arrival: now,
        };
        let copy = ds.manifest.layout.copy_on(hj.fragment, shared.config.node).unwrap_or(0);
        let ctx = JobCtx {
            conn,
            client_id: hj.client_id,
            copy,
            request_id: origin.request_id,
            dataset: ds,
            fragment: hj.fragment,
            block: hj.block,
            start: hj.start_in_block,
            len: hj.len,
            outbox,
            origin: Some(origin),
        };
        shared.disk.lock().enqueue(job, Ctx::Read(ctx));
        taken += 1;
    }
    shared.counters.taken_over.fetch_add(taken as u64, Ordering::Relaxed);
    taken
}

/// The busy side: answer a peer's `HandoffAsk` with a share of the queue: queued reads it
/// can serve, else queued appends of the DQ writes it stages (`appends`), redirected.
pub fn give(shared: &Arc<Shared>, from: NodeId, rate_idle: f64, clients: &[u64], appends: &[u64]) -> ControlReply {
    if from == shared.config.node {
        return ControlReply::HandoffGive { jobs: vec![], redirected: 0 };
    }
    let clients: BTreeSet<u64> = clients.iter().copied().collect();
    let holds = |c: &Ctx| matches!(c, Ctx::Read(c) if c.dataset.manifest.layout.copy_on(c.fragment, from).is_some());
    let my_rate = shared.rate_bytes_per_sec();
    let taken = shared.disk.lock().give(|c| clients.contains(&c), holds, rate_idle, my_rate);
    let me = shared.config.node;
    let jobs: Vec<HandedJob> = taken
        .into_iter()
        .map(|(job, ctx)| match ctx {
            Ctx::Read(ctx) => (job, ctx),
            Ctx::Write(_) => unreachable!("only reads are eligible for handoff"),
        })
        .map(|(job, ctx): (Job, JobCtx)| {
            // The client learns first where its request went; the request no longer counts
            // against its connection here.
            ctx.outbox.reply(ctx.request_id, Message::Moved { to: from });
            HandedJob {
                client_id: ctx.client_id,
                origin_node: me,
                origin_request: ctx.request_id,
                stream: job.stream.stream,
                done_bytes: job.progress.done_bytes,
                total_bytes: job.progress.total_bytes,
                fraction: job.progress.metric == ProgressMetric::Fraction,
                service: ganges_proto::service::to_byte(job.service),
                guard_every: job.service.guard_every,
                depth: job.service.depth,
                dataset: ctx.dataset.manifest.name.clone(),
                fragment: ctx.fragment,
                block: ctx.block,
                start_in_block: ctx.start,
                len: ctx.len,
            }
        })
        .collect();
    if !jobs.is_empty() {
        tracing::debug!(node = %me, to = %from, n = jobs.len(), "handed off queued requests");
        shared.counters.handed_off.fetch_add(jobs.len() as u64, Ordering::Relaxed);
    }
    let redirected = if jobs.is_empty() { redirect_appends(shared, from, rate_idle, appends) } else { 0 };
    ControlReply::HandoffGive { jobs, redirected }
}

/// Give back to their writers, redirected to `to`, the share of the queued appends of
/// the transactions `appends` that makes this server and `to` finish together.
fn redirect_appends(shared: &Arc<Shared>, to: NodeId, rate_idle: f64, appends: &[u64]) -> u32 {
    // Only appends are queued movable (`enqueue_write`); `appends` lists append transactions.
    let eligible = |_: &Job, c: &Ctx| {
        matches!(c, Ctx::Write(WriteCtx { target: WriteTarget::Staged(s), reply: WriteReply::Conn { .. }, .. })
            if appends.contains(&s.txid))
    };
    let my_rate = shared.rate_bytes_per_sec();
    let taken = {
        let mut d = shared.disk.lock();
        let n = share_at_least(APPEND_HANDOFF_MIN, d.count_eligible(eligible), rate_idle, my_rate);
        d.hand_off(n, eligible)
    };
    let n = taken.len() as u32;
    for (_, ctx) in taken {
        ctx.answer_now(Message::Redirected { to });
    }
    if n > 0 {
        tracing::debug!(node = %shared.config.node, %to, n, "gave queued appends back, redirected");
        shared.counters.redirected_out.fetch_add(n as u64, Ordering::Relaxed);
    }
    n
}
