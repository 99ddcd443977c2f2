//! One connection to one server, shared by every consumer of a process: many requests in
//! flight, each with its own id; replies are routed back by id.
//!
//! A reply goes either to a one-shot waiter (`call`) or, tagged, to a stream's event channel
//! (`send_tagged`), so a consumer with many reads in flight waits on one channel. When the
//! connection breaks, every pending request gets `NodeDown`: nothing waits forever.
//!
//! **Handed-off requests (GD-6).** A busy server may hand a queued read to another server,
//! which then answers on *its* connection, naming the request's origin (server, request id).
//! The busy server tells the client with `Moved`; the connection then moves the waiter to
//! the new server's connection (found in the shared [`Registry`]), and the stream learns of
//! the move through a `Moved` event. The answer may overtake the `Moved` notice (they travel
//! on different connections): then the new server's connection takes the waiter from the
//! origin's connection itself and reports the move first. If the new server's connection
//! breaks, moved waiters fail with `NodeDown` like its own.

use crate::error::{ClientError, Result};
use ganges_core::ids::NodeId;
use ganges_net::{HandshakeError, Transport};
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::io::{read_frame, write_frame};
use ganges_proto::msg::{Encoded, Hello, Message, Origin};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

pub use ganges_net::transport::CONNECT_TIMEOUT;

/// A reply (or failure) for a tagged request.
#[derive(Debug)]
pub struct Event {
    pub tag: u64,
    /// The server this event comes from (for `Moved`, the server the request left).
    pub node: NodeId,
    pub result: Result<Message>,
}

#[derive(Debug)]
enum Waiter {
    Once(oneshot::Sender<Result<Message>>),
    Tagged { tx: mpsc::UnboundedSender<Event>, tag: u64 },
}

impl Waiter {
    fn deliver(self, node: NodeId, result: Result<Message>) {
        match self {
            Waiter::Once(tx) => {
                let _ = tx.send(result);
            }
            Waiter::Tagged { tx, tag } => {
                let _ = tx.send(Event { tag, node, result });
            }
        }
    }

    /// Tell a tagged waiter its request moved from `from` to `to`; one-shot waiters (control
    /// calls) are never handed off.
    fn notify_moved(&self, from: NodeId, to: NodeId) {
        if let Waiter::Tagged { tx, tag } = self {
            let _ = tx.send(Event { tag: *tag, node: from, result: Ok(Message::Moved { to }) });
        }
    }
}

#[derive(Debug, Default)]
struct Pending {
    waiters: HashMap<u64, Waiter>,
    /// Requests handed to this connection's server by another, by their origin.
    moved: HashMap<(NodeId, u64), Waiter>,
    /// Set once the connection is gone; new requests fail at once.
    closed: bool,
}

/// Every connection's pending requests, by server: how a reply arriving on one connection
/// finds a request sent on another.
#[derive(Debug, Default)]
pub struct Registry {
    pending: Mutex<BTreeMap<NodeId, Arc<Mutex<Pending>>>>,
}

impl Registry {
    fn get(&self, node: NodeId) -> Option<Arc<Mutex<Pending>>> {
        self.pending.lock().expect("registry lock").get(&node).cloned()
    }
}

#[derive(Debug)]
pub struct Connection {
    node: NodeId,
    addr: String,
    /// Frames to the writer task. Unbounded: callers bound what they put in flight.
    tx: mpsc::UnboundedSender<Encoded>,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicU64,
}

impl Connection {
    /// Connect through `transport` (TLS and the cluster secret's handshake, as the cluster
    /// has them), say hello as `client_id`, and check the server is the node the cluster file
    /// says. Replies that name another server's requests are routed through `registry`.
    pub async fn connect(
        transport: &Transport,
        node: NodeId,
        addr: &str,
        client_id: u64,
        registry: Arc<Registry>,
    ) -> Result<Arc<Connection>> {
        let fail = |why: String| ClientError::Connect { node, addr: addr.to_string(), why };
        let refused = |err| ClientError::Refused { node, addr: addr.to_string(), err };
        let stream = transport.connect(addr).await.map_err(|e| match e {
            HandshakeError::Refused(err) => refused(err),
            // Not a server that is down: one with another secret, refused like a wrong proof.
            e @ HandshakeError::ServerUnproven => {
                refused(ganges_proto::msg::WireError::new(ganges_proto::msg::ErrorCode::AuthFailed, e.to_string()))
            }
            e => fail(e.to_string()),
        })?;
        let (mut rd, mut wr) = (stream.rd, stream.wr);
        let client = format!("ganges-client/{}", env!("CARGO_PKG_VERSION"));
        let hello = Message::Hello(Hello { client, client_id });
        let handshake = async {
            write_frame(&mut wr, &hello.encode(0)).await.map_err(|e| fail(e.to_string()))?;
            let (h, body) = read_frame(&mut rd)
                .await
                .map_err(|e| fail(e.to_string()))?
                .ok_or_else(|| fail("closed during hello".into()))?;
            match Message::decode(&h, body).map_err(|e| fail(e.to_string()))? {
                Message::HelloOk(ok) if ok.node == node => Ok(()),
                Message::HelloOk(ok) => Err(fail(format!(
                    "it answers as {}, but the cluster file says {node}; the cluster file is stale",
                    ok.node
                ))),
                Message::Error(e, _) => Err(refused(e)),
                other => Err(fail(format!("unexpected reply to hello: kind {:#04x}", other.kind()))),
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, handshake).await.map_err(|_| fail("hello timed out".into()))??;

        let (tx, mut rx) = mpsc::unbounded_channel::<Encoded>();
        let pending = Arc::new(Mutex::new(Pending::default()));
        registry.pending.lock().expect("registry lock").insert(node, pending.clone());
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if write_frame(&mut wr, &frame).await.is_err() {
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            let why = loop {
                match read_frame(&mut rd).await {
                    Ok(Some((h, body))) => {
                        let msg = match Message::decode(&h, body) {
                            Ok(m) => m,
                            Err(e) => break format!("bad frame from server: {e}"),
                        };
                        if h.request_id == 0 {
                            // Request id 0 is never used for requests: a connection-level error.
                            break format!("server closed the connection: {msg:?}");
                        }
                        route(node, &reader_pending, &registry, h.request_id, msg);
                    }
                    Ok(None) => break "server closed the connection".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            tracing::debug!(%node, why, "connection lost");
            let (waiters, moved) = {
                let mut p = reader_pending.lock().expect("pending lock");
                p.closed = true;
                (std::mem::take(&mut p.waiters), std::mem::take(&mut p.moved))
            };
            for w in waiters.into_values().chain(moved.into_values()) {
                w.deliver(node, Err(ClientError::NodeDown { node }));
            }
        });
        Ok(Arc::new(Connection { node, addr: addr.to_string(), tx, pending, next_id: AtomicU64::new(1) }))
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.pending.lock().expect("pending lock").closed
    }

    fn send(&self, msg: &Message, waiter: Waiter) -> Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut p = self.pending.lock().expect("pending lock");
            if p.closed {
                return Err(ClientError::NodeDown { node: self.node });
            }
            p.waiters.insert(id, waiter);
        }
        if self.tx.send(msg.encode(id)).is_err() {
            self.pending.lock().expect("pending lock").waiters.remove(&id);
            return Err(ClientError::NodeDown { node: self.node });
        }
        Ok(id)
    }

    /// Send a request whose reply goes to `tx` as an `Event` with `tag`. Returns the
    /// request id (to cancel it).
    pub fn send_tagged(&self, msg: &Message, tx: &mpsc::UnboundedSender<Event>, tag: u64) -> Result<u64> {
        self.send(msg, Waiter::Tagged { tx: tx.clone(), tag })
    }

    /// Ask the server to drop a queued read. Its reply (data, or a `Cancelled` error) still
    /// goes to the read's own waiter.
    pub fn cancel(&self, request_id: u64) {
        let _ = self.tx.send(Message::Cancel.encode(request_id));
    }

    /// Send a message that has no reply (a progress notice).
    pub fn notify(&self, msg: &Message) {
        let _ = self.tx.send(msg.encode(0));
    }

    /// Send a request and wait for its reply.
    pub async fn call(&self, msg: &Message) -> Result<Message> {
        let (tx, rx) = oneshot::channel();
        self.send(msg, Waiter::Once(tx))?;
        rx.await.unwrap_or(Err(ClientError::NodeDown { node: self.node }))
    }

    /// A control request; server errors become `ClientError::Server`, and a server that does
    /// not answer within the request's timeout gives `ClientError::Timeout`.
    pub async fn control(&self, req: ControlRequest) -> Result<ControlReply> {
        let (op, limit) = (req.op(), req.timeout());
        let (tx, rx) = oneshot::channel();
        let id = self.send(&Message::Control(req), Waiter::Once(tx))?;
        let reply = match tokio::time::timeout(limit, rx).await {
            Ok(r) => r.unwrap_or(Err(ClientError::NodeDown { node: self.node }))?,
            Err(_) => {
                self.pending.lock().expect("pending lock").waiters.remove(&id);
                return Err(ClientError::Timeout { node: self.node, op, secs: limit.as_secs() });
            }
        };
        control_reply(self.node, reply)
    }
}

/// A control request's answer from `node`: its reply, or the server's error.
pub(crate) fn control_reply(node: NodeId, reply: Message) -> Result<ControlReply> {
    match reply {
        Message::ControlOk(reply) => Ok(*reply),
        Message::Error(err, _) => Err(ClientError::Server { node, err }),
        other => Err(ClientError::Protocol {
            node,
            why: format!("unexpected reply kind {:#04x} to a control request", other.kind()),
        }),
    }
}

/// The origin of a reply, if it answers a request handed over from another server.
fn origin_of(msg: &Message) -> Option<Origin> {
    match msg {
        Message::ReadOk(r) => r.origin,
        Message::Error(_, o) => *o,
        _ => None,
    }
}

/// Deliver a frame that arrived on `node`'s connection.
fn route(node: NodeId, pending: &Arc<Mutex<Pending>>, registry: &Registry, request_id: u64, msg: Message) {
    if let Message::Moved { to } = msg {
        let Some(w) = pending.lock().expect("pending lock").waiters.remove(&request_id) else {
            // The answer overtook the notice and was delivered already.
            return;
        };
        w.notify_moved(node, to);
        if let Some(target) = registry.get(to) {
            let mut t = target.lock().expect("pending lock");
            if !t.closed {
                t.moved.insert((node, request_id), w);
                return;
            }
        }
        // The new server is gone (or was never reachable): the request is lost there, and
        // the stream reads the block elsewhere.
        w.deliver(to, Err(ClientError::NodeDown { node: to }));
        return;
    }
    if let Some(origin) = origin_of(&msg) {
        let own = pending.lock().expect("pending lock").moved.remove(&(origin.node, origin.request_id));
        let w = own.or_else(|| {
            // The answer overtook the `Moved` notice: take the waiter from the origin's
            // connection and report the move first.
            let w = registry.get(origin.node)?.lock().expect("pending lock").waiters.remove(&origin.request_id)?;
            w.notify_moved(origin.node, node);
            Some(w)
        });
        match w {
            Some(w) => w.deliver(node, Ok(msg)),
            None => tracing::debug!(%node, ?origin, "answer to a handed-off request nobody waits for"),
        }
        return;
    }
    let waiter = pending.lock().expect("pending lock").waiters.remove(&request_id);
    match waiter {
        Some(w) => w.deliver(node, Ok(msg)),
        None => tracing::debug!(%node, id = request_id, "reply to no request"),
    }
}
