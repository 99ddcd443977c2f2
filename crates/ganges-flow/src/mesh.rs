//! The workers of a flow as processes: a [`Mesh`] of connections between them.
//!
//! Worker `rank` of `size` listens on a port, tells a storage server where
//! (`ControlRequest::Meet`, `ganges_core::meet`), and waits until the server has heard from
//! every worker of the run: the workers find each other through the cluster's servers,
//! with no coordinator of their own. Each then connects to every other (the cluster secret's
//! handshake when the cluster has one), so between any two workers there is one connection
//! each way; frames between two workers arrive in the order they were sent.
//!
//! A flow run over a mesh ([`Flow::run_on`](crate::Flow::run_on)) runs instance `rank` of
//! every stage here; a batch or a credit for an instance elsewhere crosses the mesh as a
//! frame. A worker whose connection breaks before it said goodbye has died: every flow
//! running here then fails, naming it.

use crate::flow::InstanceReport;
use crate::records::{RecordLayout, Summary};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use ganges_client::Client;
use ganges_core::ids::NodeId;
use ganges_net::Transport;
use ganges_proto::control::{ControlReply, ControlRequest};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// How long the workers of a run wait for each other to arrive.
pub const MEET_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of a frame's payload, at most (a batch is about 1 MiB).
const PAYLOAD_MAX: u32 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("meeting the other workers: {0}")]
    Meet(String),
    #[error(
        "only {arrived} of {size} workers arrived within {MEET_TIMEOUT:?}; did every worker start, with the same run id?"
    )]
    Missing { arrived: usize, size: u32 },
    #[error("connecting to worker {rank} at {addr}: {why}")]
    Connect { rank: u32, addr: String, why: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// One frame between workers.
#[derive(Debug)]
pub(crate) enum Wire {
    /// A batch from producer `from` to consumer `to` of edge `edge`.
    Batch { flow: u16, edge: u16, from: u32, to: u32, progress: u64, data: Bytes },
    /// Producer `from` has finished, for consumer `to`.
    End { flow: u16, edge: u16, from: u32, to: u32 },
    /// Consumer `from` took a batch of producer `to`.
    Credit { flow: u16, edge: u16, from: u32, to: u32 },
    /// A batch of instance `from`'s output (the last stage's), for worker 0, with its
    /// records' layout (a module may put out records of another size than it took).
    Output { flow: u16, from: u32, layout: RecordLayout, data: Bytes },
    /// What instance `from` of stage `edge` did, for worker 0.
    Report { flow: u16, edge: u16, from: u32, report: InstanceReport },
    /// Worker `from` is done with the flow (its output and reports are sent).
    Done { flow: u16, from: u32 },
    /// Worker `from` failed (or, from the mesh itself, went away): every flow fails.
    Failed { from: u32, why: String },
    /// Worker `from` leaves in good order: its connection closing is no failure.
    Bye { from: u32 },
}

const BATCH: u8 = 1;
const END: u8 = 2;
const CREDIT: u8 = 3;
const OUTPUT: u8 = 4;
const REPORT: u8 = 5;
const DONE: u8 = 6;
const FAILED: u8 = 7;
const BYE: u8 = 8;
/// kind, flow, edge, from, to, progress, payload length.
const HEADER: usize = 1 + 2 + 2 + 4 + 4 + 8 + 4;
/// A report: five counts, then a summary's flag and five parts.
const REPORT_BYTES: usize = 5 * 8 + 1 + 5 * 8;

impl Wire {
    fn encode(&self) -> (BytesMut, Option<Bytes>) {
        let mut h = BytesMut::with_capacity(HEADER + 64);
        let (kind, flow, edge, from, to, progress, payload): (u8, u16, u16, u32, u32, u64, Bytes) = match self {
            Wire::Batch { flow, edge, from, to, progress, data } => {
                (BATCH, *flow, *edge, *from, *to, *progress, data.clone())
            }
            Wire::End { flow, edge, from, to } => (END, *flow, *edge, *from, *to, 0, Bytes::new()),
            Wire::Credit { flow, edge, from, to } => (CREDIT, *flow, *edge, *from, *to, 0, Bytes::new()),
            Wire::Output { flow, from, layout, data } => {
                let shape = (u64::from(layout.record_bytes) << 32) | u64::from(layout.key_bytes);
                (OUTPUT, *flow, 0, *from, 0, shape, data.clone())
            }
            Wire::Report { flow, edge, from, report } => {
                let mut p = BytesMut::with_capacity(REPORT_BYTES);
                for v in [
                    report.batches_in,
                    report.records_in,
                    report.records_out,
                    report.busy.as_nanos() as u64,
                    report.finished.as_nanos() as u64,
                ] {
                    p.put_u64(v);
                }
                p.put_u8(u8::from(report.summary.is_some()));
                for v in report.summary.unwrap_or_default().parts() {
                    p.put_u64(v);
                }
                (REPORT, *flow, *edge, *from, 0, 0, p.freeze())
            }
            Wire::Done { flow, from } => (DONE, *flow, 0, *from, 0, 0, Bytes::new()),
            Wire::Failed { from, why } => (FAILED, 0, 0, *from, 0, 0, Bytes::copy_from_slice(why.as_bytes())),
            Wire::Bye { from } => (BYE, 0, 0, *from, 0, 0, Bytes::new()),
        };
        h.put_u8(kind);
        h.put_u16(flow);
        h.put_u16(edge);
        h.put_u32(from);
        h.put_u32(to);
        h.put_u64(progress);
        h.put_u32(payload.len() as u32);
        (h, (!payload.is_empty()).then_some(payload))
    }

    async fn read<R: tokio::io::AsyncRead + Unpin>(rd: &mut R) -> std::io::Result<Wire> {
        let mut h = [0u8; HEADER];
        rd.read_exact(&mut h).await?;
        let mut b = &h[..];
        let (kind, flow, edge, from, to, progress, len) =
            (b.get_u8(), b.get_u16(), b.get_u16(), b.get_u32(), b.get_u32(), b.get_u64(), b.get_u32());
        if len > PAYLOAD_MAX {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame of {len} bytes")));
        }
        // Into spare capacity: a batch's megabyte is not zeroed first.
        let mut data = Vec::with_capacity(len as usize);
        (&mut *rd).take(u64::from(len)).read_to_end(&mut data).await?;
        if data.len() != len as usize {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let data = Bytes::from(data);
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        Ok(match kind {
            BATCH => Wire::Batch { flow, edge, from, to, progress, data },
            END => Wire::End { flow, edge, from, to },
            CREDIT => Wire::Credit { flow, edge, from, to },
            OUTPUT => {
                let layout = RecordLayout { record_bytes: (progress >> 32) as u32, key_bytes: progress as u32 };
                Wire::Output { flow, from, layout, data }
            }
            REPORT => {
                if data.len() != REPORT_BYTES {
                    return Err(bad("a report frame of the wrong size"));
                }
                let mut p = &data[..];
                let mut report = InstanceReport {
                    batches_in: p.get_u64(),
                    records_in: p.get_u64(),
                    records_out: p.get_u64(),
                    busy: Duration::from_nanos(p.get_u64()),
                    finished: Duration::from_nanos(p.get_u64()),
                    summary: None,
                };
                let has = p.get_u8() == 1;
                let parts = [p.get_u64(), p.get_u64(), p.get_u64(), p.get_u64(), p.get_u64()];
                report.summary = has.then(|| Summary::from_parts(parts));
                Wire::Report { flow, edge, from, report }
            }
            DONE => Wire::Done { flow, from },
            FAILED => Wire::Failed { from, why: String::from_utf8_lossy(&data).into_owned() },
            BYE => Wire::Bye { from },
            k => return Err(bad(&format!("unknown frame kind {k}"))),
        })
    }

    /// The flow a frame belongs to (`None`: every flow's business).
    fn flow(&self) -> Option<u16> {
        match self {
            Wire::Batch { flow, .. }
            | Wire::End { flow, .. }
            | Wire::Credit { flow, .. }
            | Wire::Output { flow, .. }
            | Wire::Report { flow, .. }
            | Wire::Done { flow, .. } => Some(*flow),
            Wire::Failed { .. } | Wire::Bye { .. } => None,
        }
    }
}

/// This worker's place among the workers of a run, and its connections to the others.
#[derive(Debug)]
pub struct Mesh {
    rank: u32,
    size: u32,
    to: Vec<Option<mpsc::UnboundedSender<Wire>>>,
    register: mpsc::UnboundedSender<(u16, mpsc::UnboundedSender<Wire>)>,
    next_flow: AtomicU16,
    /// The tasks writing to the others, which end once they have sent `Bye`.
    writers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Mesh {
    /// Join run `run` as worker `rank` of `size`: listen, meet the others through the
    /// cluster's first live server, connect to each. Every worker of the run calls this.
    pub async fn join(client: &Arc<Client>, run: u64, rank: u32, size: u32) -> Result<Arc<Mesh>, MeshError> {
        let cluster = client.cluster();
        let transport = Transport::plain().with_secret(cluster.secret().map_err(|e| MeshError::Meet(e.to_string()))?);
        let meet_at = *client.live_nodes().first().ok_or_else(|| MeshError::Meet("no server answers".into()))?;
        // Listen where this machine reaches the servers, so the others reach it there too.
        let server_addr = &cluster.servers[meet_at.0 as usize].addr;
        // The interface a packet to the server would leave by (a UDP socket's route: nothing
        // is sent, and the server sees no stray connection).
        let server = tokio::net::lookup_host(server_addr.as_str())
            .await?
            .next()
            .ok_or_else(|| MeshError::Meet(format!("{server_addr} names no address")))?;
        let any: std::net::SocketAddr =
            if server.is_ipv6() { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() } else { ([0, 0, 0, 0], 0).into() };
        let route = tokio::net::UdpSocket::bind(any).await?;
        route.connect(server).await?;
        let ip = route.local_addr()?.ip();
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let me = listener.local_addr()?.to_string();
        let addrs = meet(client, meet_at, run, rank, size, &me).await?;

        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        // Accept the others' connections (theirs to us: frames from them).
        let accepting = {
            let (transport, incoming_tx) = (transport.clone(), incoming_tx.clone());
            tokio::spawn(async move {
                for _ in 1..size {
                    let (tcp, _) = listener.accept().await?;
                    let mut s = transport.accept(tcp).await.map_err(|e| std::io::Error::other(e.to_string()))?;
                    let mut hello = [0u8; 12];
                    s.rd.read_exact(&mut hello).await?;
                    let mut h = &hello[..];
                    let (their_run, from) = (h.get_u64(), h.get_u32());
                    if their_run != run || from >= size {
                        return Err(std::io::Error::other(format!(
                            "a connection from run {their_run:x} worker {from}"
                        )));
                    }
                    tokio::spawn(read_from(from, s.rd, incoming_tx.clone()));
                }
                Ok::<_, std::io::Error>(())
            })
        };
        // Connect to each other worker (ours to them: frames to them).
        let mut to = vec![];
        let mut writers = vec![];
        for (peer, addr) in addrs.iter().enumerate() {
            if peer as u32 == rank {
                to.push(None);
                continue;
            }
            let fail = |why: String| MeshError::Connect { rank: peer as u32, addr: addr.clone(), why };
            let mut s = transport.connect(addr).await.map_err(|e| fail(e.to_string()))?;
            let mut hello = BytesMut::with_capacity(12);
            hello.put_u64(run);
            hello.put_u32(rank);
            s.wr.write_all(&hello).await.map_err(|e| fail(e.to_string()))?;
            let (tx, rx) = mpsc::unbounded_channel();
            writers.push(tokio::spawn(write_to(s.wr, rx)));
            to.push(Some(tx));
        }
        tokio::time::timeout(MEET_TIMEOUT, accepting)
            .await
            .map_err(|_| MeshError::Missing { arrived: 0, size })?
            .map_err(|e| MeshError::Meet(e.to_string()))??;
        let (register, registrations) = mpsc::unbounded_channel();
        tokio::spawn(dispatch(incoming, registrations));
        Ok(Arc::new(Mesh {
            rank,
            size,
            to,
            register,
            next_flow: AtomicU16::new(0),
            writers: std::sync::Mutex::new(writers),
        }))
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub(crate) fn send(&self, peer: u32, w: Wire) {
        if let Some(Some(tx)) = self.to.get(peer as usize) {
            let _ = tx.send(w);
        }
    }

    /// Tell every other worker.
    pub(crate) fn broadcast(&self, w: impl Fn() -> Wire) {
        for peer in 0..self.size {
            if peer != self.rank {
                self.send(peer, w());
            }
        }
    }

    /// The next flow's number (every worker runs the same flows in the same order), and
    /// its frames from the others, those that came early first.
    pub(crate) fn open_flow(&self) -> (u16, mpsc::UnboundedReceiver<Wire>) {
        let flow = self.next_flow.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = self.register.send((flow, tx));
        (flow, rx)
    }

    /// Leave in good order: the others will not take this worker's going for a failure.
    /// Returns once every frame sent is written (or the others are gone).
    pub async fn leave(&self) {
        self.broadcast(|| Wire::Bye { from: self.rank });
        let writers = std::mem::take(&mut *self.writers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in writers {
            let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
        }
    }
}

/// Tell the server where this worker listens until it knows every worker of the run.
async fn meet(
    client: &Client,
    node: NodeId,
    run: u64,
    rank: u32,
    size: u32,
    addr: &str,
) -> Result<Vec<String>, MeshError> {
    let started = Instant::now();
    loop {
        let req = ControlRequest::Meet { run, rank, size, addr: addr.to_string() };
        let addrs = match client.control(node, req).await.map_err(|e| MeshError::Meet(e.to_string()))? {
            ControlReply::Met { addrs } => addrs,
            other => return Err(MeshError::Meet(format!("unexpected reply {other:?}"))),
        };
        let arrived = addrs.iter().filter(|a| a.is_some()).count();
        if arrived == size as usize {
            return Ok(addrs.into_iter().flatten().collect());
        }
        if started.elapsed() > MEET_TIMEOUT {
            return Err(MeshError::Missing { arrived, size });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Frames to one worker, through a buffer: credits, ends and headers queued together go out
/// in one write (flushed whenever the queue runs dry); a batch's bytes go past it.
async fn write_to(wr: ganges_net::transport::BoxWrite, mut rx: mpsc::UnboundedReceiver<Wire>) {
    let mut wr = tokio::io::BufWriter::with_capacity(64 << 10, wr);
    while let Some(w) = rx.recv().await {
        let bye = matches!(w, Wire::Bye { .. });
        let (head, payload) = w.encode();
        if wr.write_all(&head).await.is_err() {
            return;
        }
        if let Some(p) = payload
            && wr.write_all(&p).await.is_err()
        {
            return;
        }
        if (bye || rx.is_empty()) && wr.flush().await.is_err() {
            return;
        }
        if bye {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_from<R: tokio::io::AsyncRead + Unpin>(from: u32, mut rd: R, incoming: mpsc::UnboundedSender<Wire>) {
    loop {
        match Wire::read(&mut rd).await {
            Ok(w) => {
                let bye = matches!(w, Wire::Bye { .. });
                if incoming.send(w).is_err() || bye {
                    return;
                }
            }
            Err(e) => {
                let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "went away (its process ended or its connection broke)".to_string()
                } else {
                    format!("sent what no worker sends ({e})")
                };
                let _ = incoming.send(Wire::Failed { from, why });
                return;
            }
        }
    }
}

/// Hand each frame to the flow it belongs to; keep those of a flow not open here yet; a
/// failure goes to every flow, open now or later.
async fn dispatch(
    mut incoming: mpsc::UnboundedReceiver<Wire>,
    mut registrations: mpsc::UnboundedReceiver<(u16, mpsc::UnboundedSender<Wire>)>,
) {
    let mut flows: HashMap<u16, mpsc::UnboundedSender<Wire>> = HashMap::new();
    let mut early: HashMap<u16, Vec<Wire>> = HashMap::new();
    let mut failed: Option<(u32, String)> = None;
    loop {
        tokio::select! {
            r = registrations.recv() => {
                let Some((flow, tx)) = r else { return };
                for w in early.remove(&flow).unwrap_or_default() {
                    let _ = tx.send(w);
                }
                if let Some((from, why)) = &failed {
                    let _ = tx.send(Wire::Failed { from: *from, why: why.clone() });
                }
                flows.insert(flow, tx);
            }
            w = incoming.recv() => {
                let Some(w) = w else { return };
                match w.flow() {
                    Some(flow) => match flows.get(&flow) {
                        Some(tx) => { let _ = tx.send(w); }
                        None => early.entry(flow).or_default().push(w),
                    },
                    None => {
                        if let Wire::Failed { from, why } = &w {
                            failed.get_or_insert((*from, why.clone()));
                            for tx in flows.values() {
                                let _ = tx.send(Wire::Failed { from: *from, why: why.clone() });
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(w: &Wire) -> std::io::Result<Wire> {
        let (head, payload) = w.encode();
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(&payload.unwrap_or_default());
        Wire::read(&mut &bytes[..]).await
    }

    #[tokio::test]
    async fn every_frame_reads_back_as_written() {
        let mut s = Summary::default();
        s.add(&crate::records::Batch::new(Bytes::from(vec![3u8; 300]), RecordLayout::SORT_BENCHMARK).unwrap());
        let report = InstanceReport {
            batches_in: 1,
            records_in: 2,
            records_out: 3,
            busy: Duration::from_micros(4),
            finished: Duration::from_millis(5),
            // As it crosses: without the last key.
            summary: Some(Summary::from_parts(s.parts())),
        };
        let layout = RecordLayout { record_bytes: 200, key_bytes: 3 };
        let frames = [
            Wire::Batch { flow: 1, edge: 2, from: 3, to: 4, progress: 5, data: Bytes::from_static(b"abc") },
            Wire::End { flow: 1, edge: 2, from: 3, to: 4 },
            Wire::Credit { flow: 1, edge: 2, from: 3, to: 4 },
            Wire::Output { flow: 9, from: 2, layout, data: Bytes::from(vec![1u8; 400]) },
            Wire::Report { flow: 1, edge: 1, from: 2, report: report.clone() },
            Wire::Done { flow: 7, from: 1 },
            Wire::Failed { from: 2, why: "a module failed".into() },
            Wire::Bye { from: 3 },
        ];
        for w in &frames {
            let back = round_trip(w).await.unwrap();
            assert_eq!(format!("{back:?}"), format!("{w:?}"));
        }
        // A report's summary combines as the one sent.
        let Wire::Report { report: back, .. } = round_trip(&frames[4]).await.unwrap() else { panic!() };
        assert!(back.summary.unwrap().same_records(&s));
    }

    #[tokio::test]
    async fn a_frame_no_worker_sends_is_refused() {
        let (mut head, _) = Wire::Bye { from: 0 }.encode();
        head[0] = 99;
        assert!(Wire::read(&mut &head[..]).await.is_err(), "unknown kind");
        let (mut head, _) = Wire::Done { flow: 0, from: 0 }.encode();
        let n = head.len();
        head[n - 4..].copy_from_slice(&(PAYLOAD_MAX + 1).to_be_bytes());
        assert!(Wire::read(&mut &head[..]).await.is_err(), "too large");
        let (head, _) = Wire::Report { flow: 0, edge: 0, from: 0, report: InstanceReport::default() }.encode();
        assert!(Wire::read(&mut &head[..]).await.is_err(), "cut short");
    }
}
