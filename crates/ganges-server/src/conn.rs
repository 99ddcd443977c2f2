//! One client connection: a reader that parses and dispatches frames, and a writer task
//! that sends replies in the order they are ready, those without bulk bytes (probe answers,
//! acknowledgements, errors) ahead of queued data.
//!
//! Protocol errors (a malformed or oversized frame, a request before `Hello`, a kind only
//! servers send) get one `Error` frame, and the connection is closed; the server keeps
//! serving everyone else. Request errors (unknown dataset, block out of range) get an
//! `Error` reply for that request id and the connection stays open.

use crate::Shared;
use crate::disk::{self, Ctx, JobCtx, WriteCtx, WriteReply, WriteTarget};
use crate::store::StoreError;
use ganges_core::disk::Fault;
use ganges_core::sched::{Job, Service, StreamKey};
use ganges_net::transport::{BoxRead, BoxWrite};
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::frame::{HEADER_BYTES, ProtoError};
use ganges_proto::io::{read_frame, write_frame};
use ganges_proto::msg::{Encoded, ErrorCode, HelloOk, Message, ReadReq, State, WireError, WriteReq, kind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};

/// Most requests one connection may have in flight (queued reads, writes and control
/// requests, and replies not yet written to its socket). A client runs a bounded window per
/// consumer, so this is far above normal use; it bounds the work and memory one misbehaving
/// client can pin.
pub const INFLIGHT_PER_CONNECTION_MAX: u32 = 1024;
/// Bytes of replies one connection may have waiting for its socket before the server stops
/// reading its requests: a client that stops reading its replies stops being read, and
/// what it pins is this plus its in-flight requests' replies.
pub const UNSENT_PER_CONNECTION_MAX: u64 = 64 << 20;
/// What a queued frame costs beyond its bytes (its allocations and the channel's node),
/// counted against `UNSENT_PER_CONNECTION_MAX`: millions of small refusals must not pin many
/// times the bound.
const FRAME_OVERHEAD: u64 = 256;
/// Most blocks of write data one connection may have queued. Past it the connection's
/// reader waits, and TCP pushes back on the writer: queued data stays bounded by this many
/// blocks (at most 16 MiB each) per connection, far above a writer's window.
pub const WRITES_PER_CONNECTION_MAX: usize = 64;

enum Outgoing {
    /// A frame; `tracked`: it answers a request counted in flight.
    Frame(Encoded, bool),
    /// Flush what is queued, then close the connection.
    Close,
}

/// Where replies to one connection go. Cheap to clone; each queued request holds one.
///
/// The channels are unbounded on purpose: the disk driver must never wait on one slow
/// client. What can queue is bounded by `INFLIGHT_PER_CONNECTION_MAX` replies, and by the
/// reader's pause at `UNSENT_PER_CONNECTION_MAX` bytes.
///
/// Two lanes: frames with bulk bytes in `tx`, the rest in `ahead`, which the writer empties
/// first. Behind a slow link a server's queue and speed would otherwise reach a client only
/// after every block already queued for it, long after they were true.
#[derive(Clone, Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
    ahead: mpsc::UnboundedSender<Outgoing>,
    backlog: Arc<Backlog>,
}

/// What a connection has in flight and waiting for its socket.
#[derive(Debug, Default)]
struct Backlog {
    inflight: AtomicU32,
    unsent: AtomicU64,
    /// Woken as `unsent` drops back under its bound, for a reader paused on it.
    drained: Notify,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outgoing::Frame(e, _) => write!(f, "Frame({} bytes)", e.len()),
            Outgoing::Close => write!(f, "Close"),
        }
    }
}

impl Outbox {
    /// Answer a request counted against the in-flight limit; it leaves the count once
    /// written to the socket.
    pub fn reply(&self, request_id: u64, msg: Message) {
        self.queue(request_id, msg, true);
    }

    /// Send a frame that answers no counted request (hello, a protocol error, an answer to a
    /// handed-over request that could not be queued).
    pub fn send_untracked(&self, request_id: u64, msg: Message) {
        self.send(request_id, msg);
    }

    fn send(&self, request_id: u64, msg: Message) {
        self.queue(request_id, msg, false);
    }

    fn queue(&self, request_id: u64, msg: Message, tracked: bool) {
        let frame = msg.encode(request_id);
        self.backlog.unsent.fetch_add(frame.len() as u64 + FRAME_OVERHEAD, Ordering::AcqRel);
        let lane = if frame.payload.is_empty() { &self.ahead } else { &self.tx };
        // A closed connection drops its replies: nobody is there to read them.
        let _ = lane.send(Outgoing::Frame(frame, tracked));
    }

    /// Count a new request; false if the connection is at its limit.
    pub fn admit(&self) -> bool {
        let prev = self.backlog.inflight.fetch_add(1, Ordering::AcqRel);
        if prev >= INFLIGHT_PER_CONNECTION_MAX {
            self.backlog.inflight.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Wait while this connection's unsent replies are over their bound.
    async fn room(&self) {
        while self.backlog.unsent.load(Ordering::Acquire) > UNSENT_PER_CONNECTION_MAX {
            self.backlog.drained.notified().await;
        }
    }
}

/// Why a connection is being closed by the server.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error("protocol violation: {0}")]
    Violation(String),
    #[error("the client began the cluster-secret handshake, but this server has no secret")]
    NoSecret,
}

impl ConnError {
    /// The error frame to send before closing, if the peer can still read one.
    fn wire(&self) -> Option<WireError> {
        let code = match self {
            ConnError::Proto(ProtoError::Io(_) | ProtoError::Truncated) => return None,
            ConnError::Proto(ProtoError::TooLarge { .. }) => ErrorCode::FrameTooLarge,
            ConnError::Proto(ProtoError::Version(_)) => ErrorCode::UnsupportedVersion,
            ConnError::Proto(_) => ErrorCode::BadFrame,
            ConnError::Violation(_) => ErrorCode::ProtocolViolation,
            ConnError::NoSecret => ErrorCode::AuthUnsupported,
        };
        Some(WireError::new(code, self.to_string()))
    }
}

pub async fn handle(shared: Arc<Shared>, tcp: TcpStream, conn: u64) {
    // TLS and the cluster secret's handshake, as this server has them; a refused peer has
    // had its typed error frame, and the server goes on serving everyone else.
    let stream = match shared.config.transport.accept(tcp).await {
        Ok(s) => s,
        Err(e) => {
            shared.counters.handshake_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(node = %shared.config.node, %e, "refused a connection at the handshake");
            return;
        }
    };
    let peer = Some(stream.peer);
    let (rd, wr) = (stream.rd, stream.wr);
    let (tx, rx) = mpsc::unbounded_channel();
    let (ahead, ahead_rx) = mpsc::unbounded_channel();
    let backlog = Arc::new(Backlog::default());
    let mut writer = AbortOnDrop(tokio::spawn(write_loop(shared.clone(), wr, [ahead_rx, rx], backlog.clone())));
    let outbox = Outbox { tx, ahead, backlog };
    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
    let mut client_id = 0;
    let result = read_loop(&shared, rd, &outbox, conn, &mut client_id).await;
    // Writes still queued from this connection are dropped with it: their writer is gone,
    // and its transaction will never be committed.
    if client_id != 0 {
        let mut clients = shared.clients.lock();
        if clients.get(&client_id).is_some_and(|(c, _)| *c == conn) {
            clients.remove(&client_id);
        }
    }
    let dropped = shared.disk.lock().drop_connection(conn);
    shared.counters.connections.fetch_sub(1, Ordering::Relaxed);
    if let Err(e) = result {
        tracing::debug!(?peer, %e, dropped, "closing connection");
        if let Some(w) = e.wire() {
            shared.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
            outbox.send(0, Message::Error(w, None));
            // Behind every queued data frame: they are flushed first.
            let _ = outbox.tx.send(Outgoing::Close);
        }
    }
    drop(outbox);
    let _ = (&mut writer.0).await;
}

/// The connection's writer, aborted when the connection's task ends however it ends: a
/// stopping server aborts its connections' tasks, and queued replies (which hold the
/// writer's channel) must not keep the connection open after that.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// With a modelled link, wait until it has carried a frame of `bytes` (sent or received).
async fn cross_link(shared: &Shared, bytes: usize) {
    let Some(link) = &shared.link else { return };
    let done = link.lock().carry(shared.now(), bytes as u64);
    tokio::time::sleep_until(shared.instant(done)).await;
}

async fn write_loop(
    shared: Arc<Shared>,
    mut wr: BoxWrite,
    [mut ahead, mut rx]: [mpsc::UnboundedReceiver<Outgoing>; 2],
    backlog: Arc<Backlog>,
) {
    loop {
        let item = tokio::select! {
            biased;
            Some(item) = ahead.recv() => item,
            Some(item) = rx.recv() => item,
            else => break,
        };
        match item {
            Outgoing::Frame(f, tracked) => {
                let began = shared.now();
                cross_link(&shared, f.head.len() + f.payload.len()).await;
                if write_frame(&mut wr, &f).await.is_err() {
                    break;
                }
                let cost = f.len() as u64 + FRAME_OVERHEAD;
                // The link's meter (`ServerNode::sent`): a full socket held the write until
                // the link had drained room for it.
                shared.disk.lock().sent(cost, began, shared.now());
                let before = backlog.unsent.fetch_sub(cost, Ordering::AcqRel);
                if tracked {
                    backlog.inflight.fetch_sub(1, Ordering::AcqRel);
                }
                // Only a reader paused over the bound waits: wake it as the backlog drops
                // back under (its permit keeps if it has not started waiting yet).
                if before > UNSENT_PER_CONNECTION_MAX && before - cost <= UNSENT_PER_CONNECTION_MAX {
                    backlog.drained.notify_one();
                }
            }
            Outgoing::Close => break,
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_loop(
    shared: &Arc<Shared>,
    mut rd: BufReader<BoxRead>,
    outbox: &Outbox,
    conn: u64,
    client_id: &mut u64,
) -> Result<(), ConnError> {
    let mut greeted = false;
    let writes = Arc::new(Semaphore::new(WRITES_PER_CONNECTION_MAX));
    loop {
        // A client that does not read its replies is not read either.
        outbox.room().await;
        let Some((header, body)) = read_frame(&mut rd).await? else {
            return Ok(());
        };
        cross_link(shared, HEADER_BYTES + body.len()).await;
        if !kind::from_client(header.kind) {
            return Err(ConnError::Violation(format!("kind {:#04x} is only sent by servers", header.kind)));
        }
        let msg = Message::decode(&header, body)?;
        let id = header.request_id;
        match msg {
            Message::Hello(h) if !greeted => {
                greeted = true;
                if h.client_id != 0 {
                    shared.clients.lock().insert(h.client_id, (conn, outbox.clone()));
                    *client_id = h.client_id;
                }
                let hello = HelloOk { node: shared.config.node, server_version: crate::VERSION.to_string() };
                outbox.send(id, Message::HelloOk(hello));
            }
            Message::Hello(_) => return Err(ConnError::Violation("a second hello".into())),
            Message::AuthInit { .. } if !greeted => return Err(ConnError::NoSecret),
            _ if !greeted => return Err(ConnError::Violation("a request before hello".into())),
            Message::AuthInit { .. } | Message::AuthProof { .. } => {
                return Err(ConnError::Violation("a handshake frame after hello".into()));
            }
            Message::Cancel => {
                let ctx = shared.disk.lock().cancel(conn, id);
                if let Some(ctx) = ctx {
                    shared.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    ctx.answer_now(disk::cancelled());
                }
            }
            // Its bytes have crossed the link; that was its purpose.
            Message::Sink(data) => {
                shared.counters.sink_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            Message::Progress(p) => {
                let stream = StreamKey { conn, stream: p.stream };
                let now = shared.now();
                shared.disk.lock().note_progress(stream, p.progress, now);
            }
            Message::Probe(p) => {
                let reply = match shared.store.dataset_id(&p.dataset) {
                    Ok(id) => {
                        let r = shared.disk.lock().report(id, shared.now());
                        let (queue_len, primary_progress) = (r.queue_len, r.primary_progress);
                        Message::State(State {
                            queue_len,
                            primary_progress,
                            disk_bytes_per_sec: r.disk_bytes_per_sec,
                            disk_measured: r.disk_measured,
                            backup_depth: r.backup_depth,
                            node_load: *shared.node_load.lock(),
                        })
                    }
                    Err(e) => store_error(e),
                };
                outbox.send(id, reply);
            }
            Message::Read(r) => {
                if !outbox.admit() {
                    outbox.send(id, too_many());
                    continue;
                }
                if let Err(e) = enqueue_read(shared, outbox, conn, *client_id, id, r) {
                    outbox.reply(id, Message::Error(e, None));
                }
            }
            Message::Write(w) => {
                if !outbox.admit() {
                    outbox.send(id, too_many());
                    continue;
                }
                let permit = writes.clone().acquire_owned().await.expect("the semaphore is never closed");
                if let Err(e) = enqueue_write(shared, outbox, conn, id, w, permit) {
                    outbox.reply(id, Message::Error(e, None));
                }
            }
            Message::Piece(p) => {
                if !outbox.admit() {
                    outbox.send(id, too_many());
                    continue;
                }
                outbox.reply(id, piece(shared, p));
            }
            Message::Control(c) => {
                if !outbox.admit() {
                    outbox.send(id, too_many());
                    continue;
                }
                let (shared, outbox) = (shared.clone(), outbox.clone());
                tokio::spawn(async move {
                    let reply = control(&shared, c).await;
                    outbox.reply(id, reply);
                });
            }
            Message::HelloOk(_)
            | Message::ReadOk(_)
            | Message::WriteOk(_)
            | Message::State(_)
            | Message::Moved { .. }
            | Message::Redirected { .. }
            | Message::ControlOk(_)
            | Message::AuthChallenge { .. }
            | Message::AuthOk
            | Message::Error(..) => {
                unreachable!("server-only kinds are refused before decoding")
            }
        }
    }
}

fn too_many() -> Message {
    Message::Error(
        WireError::new(
            ErrorCode::TooManyInFlight,
            format!("more than {INFLIGHT_PER_CONNECTION_MAX} requests in flight on one connection"),
        ),
        None,
    )
}

/// A `Piece` frame's answer, from a connection or from the process's own client.
pub(crate) fn piece(shared: &Arc<Shared>, p: ganges_proto::msg::PieceReq) -> Message {
    match crate::array::piece(shared, p) {
        Ok(()) => Message::ControlOk(Box::new(ControlReply::Done)),
        Err(e) => store_error(e),
    }
}

fn wire_error(e: StoreError) -> WireError {
    WireError::new(e.code(), e.to_string())
}

fn store_error(e: StoreError) -> Message {
    Message::Error(wire_error(e), None)
}

fn reply_of(r: Result<ControlReply, StoreError>) -> Message {
    match r {
        Ok(reply) => Message::ControlOk(Box::new(reply)),
        Err(e) => store_error(e),
    }
}

fn enqueue_read(
    shared: &Arc<Shared>,
    outbox: &Outbox,
    conn: u64,
    client_id: u64,
    id: u64,
    r: ReadReq,
) -> Result<(), WireError> {
    let ds = shared.store.dataset(&r.dataset).map_err(wire_error)?;
    shared.store.check_read(&ds, r.fragment, r.block, r.start_in_block, r.len).map_err(wire_error)?;
    let copy = ds.copy(r.fragment).map_err(wire_error)?;
    let now = shared.now();
    let stream = StreamKey { conn, stream: r.stream };
    let job = Job {
        id: 0,
        stream,
        file: copy.key,
        bytes: r.len as u64,
        progress: r.progress,
        service: r.service,
        arrival: now,
    };
    let primary = copy.copy == 0;
    let dataset_id = ds.manifest.id;
    let ctx = JobCtx {
        conn,
        client_id,
        copy: copy.copy,
        origin: None,
        request_id: id,
        dataset: ds.clone(),
        fragment: r.fragment,
        block: r.block,
        start: r.start_in_block,
        len: r.len,
        outbox: outbox.clone(),
    };
    {
        let mut d = shared.disk.lock();
        if d.has_request(conn, id) {
            return Err(WireError::new(
                ErrorCode::BadRequest,
                format!("request id {id} is already in flight on this connection"),
            ));
        }
        d.enqueue_request(job, Ctx::Read(ctx), primary.then_some(dataset_id), now);
    }
    shared.disk_wake.notify_one();
    Ok(())
}

/// Queue a client's block for the disk, after the checks that need no I/O on the data.
fn enqueue_write(
    shared: &Arc<Shared>,
    outbox: &Outbox,
    conn: u64,
    id: u64,
    w: WriteReq,
    permit: OwnedSemaphorePermit,
) -> Result<(), WireError> {
    let staged = shared.store.check_write(w.txid, &w.dataset, w.fragment, w.block, w.data.len()).map_err(wire_error)?;
    let (file, copy, dataset) = (staged.key, staged.copy, staged.dataset());
    let now = shared.now();
    let stream = StreamKey { conn, stream: w.stream };
    let job = Job {
        id: 0,
        stream,
        file,
        bytes: w.data.len() as u64,
        progress: w.progress,
        // A block for its place in this node's copy stays here; a DQ append may be given back
        // to its writer for an idle server (GD-6 for writes), if the writer allows it.
        service: Service { handoff: w.service.handoff && staged.appends(), ..w.service },
        arrival: now,
    };
    let ctx = WriteCtx {
        conn,
        request_id: id,
        target: WriteTarget::Staged(staged),
        block: w.block,
        crc: w.crc,
        data: w.data,
        reply: WriteReply::Conn { outbox: outbox.clone(), _permit: permit },
    };
    {
        let mut d = shared.disk.lock();
        if d.has_request(conn, id) {
            return Err(WireError::new(
                ErrorCode::BadRequest,
                format!("request id {id} is already in flight on this connection"),
            ));
        }
        // Writers of this server's primary copies report progress as readers do (GD-3).
        d.enqueue_request(job, Ctx::Write(ctx), (copy == 0).then_some(dataset), now);
    }
    shared.disk_wake.notify_one();
    Ok(())
}

pub(crate) async fn control(shared: &Arc<Shared>, req: ControlRequest) -> Message {
    let op = req.op();
    match req {
        ControlRequest::Stats => Message::ControlOk(Box::new(ControlReply::Stats { stats: Box::new(shared.stats()) })),
        ControlRequest::Consumers => {
            let consumers = shared.metrics.consumers(shared.now(), crate::metrics::ACTIVITY_WINDOW);
            Message::ControlOk(Box::new(ControlReply::Consumers { consumers }))
        }
        ControlRequest::SetFault { fault } => set_fault(shared, fault),
        ControlRequest::SetRealFaults { faults } => {
            let s = shared.clone();
            let set = move || {
                let mut st = s.real_faults.lock();
                let r = if faults.is_none() {
                    st.clear(&s.fault_env);
                    Ok(())
                } else {
                    st.set(faults, &s.fault_env)
                };
                (r, st.faults().clone())
            };
            match tokio::task::spawn_blocking(set).await {
                Ok((Ok(()), now)) => {
                    tracing::info!(node = %shared.config.node, faults = %now, "real faults set");
                    Message::ControlOk(Box::new(ControlReply::Done))
                }
                Ok((Err(e), now)) => {
                    tracing::warn!(node = %shared.config.node, %e, faults = %now, "setting real faults failed");
                    let code = match e {
                        crate::realfault::RealFaultError::Invalid(_) => ErrorCode::BadRequest,
                        _ => ErrorCode::Unsupported,
                    };
                    Message::Error(WireError::new(code, format!("{}: {e}", shared.config.node)), None)
                }
                Err(e) => Message::Error(WireError::new(ErrorCode::Internal, format!("set-real-faults: {e}")), None),
            }
        }
        ControlRequest::Calibrate { bytes, seconds, write } => {
            let dir = shared.config.data_dir.clone();
            match tokio::task::spawn_blocking(move || crate::direct::calibrate(&dir, bytes, seconds, write)).await {
                Ok(Ok(calibration)) => Message::ControlOk(Box::new(ControlReply::Calibrated { calibration })),
                Ok(Err(e)) => Message::Error(
                    WireError::new(
                        ErrorCode::Unsupported,
                        format!("{}: calibrating the disk with direct I/O: {e}", shared.config.node),
                    ),
                    None,
                ),
                Err(e) => Message::Error(WireError::new(ErrorCode::Internal, format!("calibrate: {e}")), None),
            }
        }
        ControlRequest::ForgetRate => {
            shared.disk.lock().forget_rates();
            Message::ControlOk(Box::new(ControlReply::Done))
        }
        ControlRequest::Meet { run, rank, size, addr } => {
            let met = shared.meetings.lock().meet(run, rank, size, &addr, shared.now());
            match met {
                Ok(addrs) => Message::ControlOk(Box::new(ControlReply::Met { addrs })),
                Err(e) => Message::Error(WireError::new(ErrorCode::BadRequest, e.to_string()), None),
            }
        }
        ControlRequest::SetPeers { peers } => {
            *shared.peers.lock() = peers;
            Message::ControlOk(Box::new(ControlReply::Done))
        }
        ControlRequest::HandoffAsk { from, rate_bytes_per_sec, clients, appends } => {
            Message::ControlOk(Box::new(crate::handoff::give(shared, from, rate_bytes_per_sec, &clients, &appends)))
        }
        ControlRequest::WriteProbe { bytes, count } => reply_of(crate::array::probe(shared, bytes, count).await),
        ControlRequest::ArrayOpen { plan } => reply_of(crate::array::open(shared, *plan)),
        ControlRequest::ArrayWants { name, txid, rank } => {
            reply_of(crate::array::wants(shared, &name, txid, rank).await)
        }
        ControlRequest::ArrayGrant { name, txid, from, rate } => {
            reply_of(crate::array::grant(shared, &name, txid, from, rate).await)
        }
        ControlRequest::ArraySteal { name, txid, from, rate } => {
            reply_of(crate::array::steal(shared, &name, txid, from, rate).await)
        }
        ControlRequest::ArrayFinish { name, txid } => reply_of(crate::array::finish(shared, &name, txid).await),
        ControlRequest::Fill { name, fragment, peers, repair } => {
            match crate::fill::fill(shared, &name, fragment, &peers, &repair).await {
                Ok(reply) => Message::ControlOk(Box::new(reply)),
                Err(e) => {
                    tracing::warn!(node = %shared.config.node, dataset = %name, %fragment, %e, "replica completion failed");
                    store_error(e)
                }
            }
        }
        other => {
            // Commit and abort end a collective array write of that transaction, if any.
            let ends = match &other {
                ControlRequest::Commit { txid, name } => Some((name.clone(), *txid, true)),
                ControlRequest::Abort { txid, name } => Some((name.clone(), *txid, false)),
                _ => None,
            };
            let store = shared.store.clone();
            let result = tokio::task::spawn_blocking(move || blocking_control(&store, other)).await;
            if let Some((name, txid, commit)) = ends {
                shared.arrays.conclude(&name, txid, commit && matches!(result, Ok(Ok(_))));
            }
            match result {
                Ok(Ok(reply)) => Message::ControlOk(Box::new(reply)),
                Ok(Err(e)) => {
                    tracing::debug!(op, %e, "control request failed");
                    store_error(e)
                }
                Err(e) => Message::Error(WireError::new(ErrorCode::Internal, format!("{op} failed: {e}")), None),
            }
        }
    }
}

fn set_fault(shared: &Arc<Shared>, fault: Option<Fault>) -> Message {
    let mut d = shared.disk.lock();
    let Some(model) = d.model.as_mut() else {
        if fault.is_none() {
            // Nothing modelled, nothing to clear.
            return Message::ControlOk(Box::new(ControlReply::Done));
        }
        return Message::Error(
            WireError::new(
                ErrorCode::Unsupported,
                format!(
                    "{} has no disk model (it was started with --disk-rate off); restart it with a rate to inject faults",
                    shared.config.node
                ),
            ),
            None,
        );
    };
    match model.set_fault(fault) {
        Ok(()) => {
            tracing::info!(node = %shared.config.node, fault = ?fault, "fault set");
            Message::ControlOk(Box::new(ControlReply::Done))
        }
        Err(e) => Message::Error(WireError::new(ErrorCode::BadRequest, e.to_string()), None),
    }
}

fn blocking_control(store: &crate::store::Store, req: ControlRequest) -> Result<ControlReply, StoreError> {
    Ok(match req {
        ControlRequest::ListDatasets { staging } => ControlReply::Datasets { datasets: store.list(staging)? },
        ControlRequest::GetManifest { name } => {
            ControlReply::Manifest { manifest: Box::new(store.dataset(&name)?.manifest.clone()) }
        }
        ControlRequest::Stage { txid, manifest, append } => {
            ganges_net::failpoint::hit("server.stage.received");
            store.stage(txid, manifest, append)?;
            ControlReply::Done
        }
        ControlRequest::Generate { txid, name, fragment, block_from, block_to } => {
            store.generate(txid, &name, fragment, block_from, block_to)?;
            ControlReply::Done
        }
        ControlRequest::Prepare { txid, manifest, coordinator, members } => {
            store.prepare(txid, &manifest, coordinator, &members)?;
            ControlReply::Done
        }
        ControlRequest::Commit { txid, name } => {
            store.commit(txid, &name)?;
            ControlReply::Done
        }
        ControlRequest::Abort { txid, name } => {
            store.abort(txid, &name)?;
            ControlReply::Done
        }
        ControlRequest::TxnStatus { txid, name, asker } => {
            ControlReply::TxnStatus { status: store.txn_status(txid, &name, asker) }
        }
        ControlRequest::Remove { name } => {
            let (committed, staging) = store.remove(&name)?;
            ControlReply::Removed { committed, staging }
        }
        ControlRequest::Verify { name, fragment, block_from, block_to } => {
            ControlReply::Verified { report: store.verify(&name, fragment, block_from, block_to)? }
        }
        ControlRequest::Checksums { name, fragment, txid } => {
            ControlReply::Checksums { crcs: store.checksums(&name, fragment, txid)? }
        }
        ControlRequest::MarkComplete { manifest } => {
            store.mark_complete(&manifest)?;
            ControlReply::Done
        }
        ControlRequest::Stats
        | ControlRequest::Consumers
        | ControlRequest::Fill { .. }
        | ControlRequest::SetFault { .. }
        | ControlRequest::SetRealFaults { .. }
        | ControlRequest::Calibrate { .. }
        | ControlRequest::ForgetRate
        | ControlRequest::Meet { .. }
        | ControlRequest::SetPeers { .. }
        | ControlRequest::HandoffAsk { .. }
        | ControlRequest::WriteProbe { .. }
        | ControlRequest::ArrayOpen { .. }
        | ControlRequest::ArrayWants { .. }
        | ControlRequest::ArrayGrant { .. }
        | ControlRequest::ArraySteal { .. }
        | ControlRequest::ArrayFinish { .. } => {
            unreachable!("handled without blocking")
        }
    })
}
