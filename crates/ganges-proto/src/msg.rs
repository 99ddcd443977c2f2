//! Messages and their binary layouts. `encode` and `decode` are pure functions of bytes.
//!
//! Data-path messages have fixed little-endian layouts so a block's bytes are never copied
//! to be framed: `Encoded` keeps the header and fields apart from the payload, which is
//! written with a vectored write; on receipt the payload is a slice of the frame's buffer.
//! `progress` below is 24 bytes: done u64, total u64, metric u8 (after a stream u64), and
//! `primary` is the server's primary consumers' progress in parts per billion, or u32::MAX
//! when nobody reads its primary copies. `depth` in a request is its `Service::depth`; in a
//! reply, the least depth among the backup reads queued at the server (0: none).
//!
//! | kind | message   | body |
//! |------|-----------|------|
//! | 0x01 | Hello     | JSON `{client, client_id}` |
//! | 0x02 | Read      | stream u64, progress, service u8, share u16, guard u8, depth u8, fragment u32, block u32, start u32, len u32, name_len u8, name |
//! | 0x03 | Cancel    | empty: the header's request id names the read to cancel |
//! | 0x04 | Write     | stream u64, progress, service u8, share u16, guard u8, depth u8, txid u64, fragment u32, block u32, crc u32, name_len u8, name, data |
//! | 0x05 | Progress  | stream u64, progress (no reply) |
//! | 0x06 | Probe     | stream u64, progress, name_len u8, name (answered by State) |
//! | 0x07 | Sink      | data, discarded (a network stress's traffic; no reply) |
//! | 0x08 | AuthInit  | client nonce (32 bytes): the first frame to a server with a cluster secret |
//! | 0x09 | AuthProof | client proof (32 bytes): HMAC-SHA256 over both nonces (`ganges-net`'s `auth`) |
//! | 0x10 | Control   | JSON `ControlRequest` |
//! | 0x81 | HelloOk   | JSON `{node, server_version}` |
//! | 0x82 | ReadOk    | crc u32, queue_len u32, service_us u32, primary u32, depth u8, data |
//! | 0x83 | ReadOk from a handed-off request | origin node u32, origin request u64, then as ReadOk |
//! | 0x84 | WriteOk   | queue_len u32, service_us u32, primary u32, block u32 |
//! | 0x85 | State     | queue_len u32, primary u32, disk rate u32 (KiB/s, 0 unknown), measured u8 (0 or 1), depth u8, then the node's load if sampled: cpu f32, load f32, free memory u64, free net f32, free disk f32 (bytes/s) |
//! | 0x87 | Error for a handed-off request | origin node u32, origin request u64, then as Error |
//! | 0x88 | Moved     | to node u32: the header's request id was handed to that server |
//! | 0x89 | Redirected | to node u32: the header's request (a DQ append) was given back unserved; send it to that server |
//! | 0x8A | AuthChallenge | server nonce (32 bytes), server proof (32 bytes) |
//! | 0x8B | AuthOk    | empty: the client's proof was right; `Hello` comes next |
//! | 0x90 | ControlOk | JSON `ControlReply` |
//! | 0xFF | Error     | code u16, message (UTF-8, at most 4 KiB) |

use crate::control::{ControlReply, ControlRequest};
use crate::frame::{CONTROL_BODY_MAX, FrameHeader, HEADER_BYTES, ProtoError};
use crate::manifest::DatasetName;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use ganges_core::ceft::NodeLoad;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::sched::{Progress, ProgressMetric, Service};
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod kind {
    pub const HELLO: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const CANCEL: u8 = 0x03;
    pub const WRITE: u8 = 0x04;
    pub const PROGRESS: u8 = 0x05;
    pub const PROBE: u8 = 0x06;
    pub const SINK: u8 = 0x07;
    pub const AUTH_INIT: u8 = 0x08;
    pub const AUTH_PROOF: u8 = 0x09;
    pub const PIECE: u8 = 0x0A;
    pub const CONTROL: u8 = 0x10;
    pub const HELLO_OK: u8 = 0x81;
    pub const READ_OK: u8 = 0x82;
    pub const READ_OK_MOVED: u8 = 0x83;
    pub const WRITE_OK: u8 = 0x84;
    pub const STATE: u8 = 0x85;
    pub const ERROR_MOVED: u8 = 0x87;
    pub const MOVED: u8 = 0x88;
    pub const REDIRECTED: u8 = 0x89;
    pub const AUTH_CHALLENGE: u8 = 0x8A;
    pub const AUTH_OK: u8 = 0x8B;
    pub const CONTROL_OK: u8 = 0x90;
    pub const ERROR: u8 = 0xFF;

    /// Whether a kind is one a client may send (the rest only come from servers).
    pub fn from_client(k: u8) -> bool {
        matches!(k, HELLO | READ | CANCEL | WRITE | PIECE | PROGRESS | PROBE | SINK | CONTROL | AUTH_INIT | AUTH_PROOF)
    }
}

/// Bytes of a handshake nonce and of a proof (an HMAC-SHA256).
pub const AUTH_BYTES: usize = 32;

/// Longest error message carried: enough to say what to do, bounded like everything else.
pub const ERROR_MESSAGE_MAX: usize = 4096;
/// `primary` on the wire when nobody reads the server's primary copies.
const PRIMARY_NONE: u32 = u32::MAX;
const PARTS: f64 = 1e9;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub client: String,
    /// Random per client process: lets a server that takes over another server's queued
    /// request (GD-6) find this client's connection to answer on.
    #[serde(default)]
    pub client_id: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloOk {
    pub node: NodeId,
    pub server_version: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadReq {
    /// The consumer stream this read belongs to (chosen by the client, unique per stream).
    pub stream: u64,
    pub progress: Progress,
    /// What the server should do with it (discipline, runs, handoff).
    pub service: Service,
    pub dataset: DatasetName,
    pub fragment: FragmentId,
    pub block: u32,
    pub start_in_block: u32,
    pub len: u32,
}

/// A consumer's progress, sent between requests to servers holding its queued reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressNote {
    pub stream: u64,
    pub progress: Progress,
}

/// A question to a server about its state (GD-3's periodic progress), for one dataset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub stream: u64,
    pub progress: Progress,
    pub dataset: DatasetName,
}

/// Where a handed-off request came from: the server and request id the client sent it as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    pub node: NodeId,
    pub request_id: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReadOk {
    /// CRC32C of `data`, computed by the server after it checked the stored block checksum.
    pub crc: u32,
    /// Requests queued at the server when this one finished.
    pub queue_len: u32,
    /// Time the request spent on the disk, in microseconds.
    pub service_us: u32,
    /// The server's primary consumers' progress for this dataset (GD-3).
    pub primary_progress: Option<f64>,
    /// The least `Service::depth` among the backup reads queued at the server.
    pub backup_depth: Option<u8>,
    /// Set when another server handed this request to the one answering (GD-6).
    pub origin: Option<Origin>,
    pub data: Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct State {
    pub queue_len: u32,
    pub primary_progress: Option<f64>,
    /// The server's disk bandwidth, bytes per second (KiB/s on the wire): measured, or the
    /// configured one before it has served anything.
    pub disk_bytes_per_sec: Option<f64>,
    /// Whether `disk_bytes_per_sec` was measured.
    pub disk_measured: bool,
    /// The least `Service::depth` among the backup reads queued at the server.
    pub backup_depth: Option<u8>,
    /// The node's load as its sampler last saw it (CW-1); `None` before its first interval.
    pub node_load: Option<NodeLoad>,
}

/// `WriteReq::block` of a block the server appends where it likes (DQ-1): its copy of the
/// fragment is a log of the blocks in the order its disk wrote them.
pub const APPEND: u32 = u32::MAX;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteReq {
    /// The writer stream this block belongs to; the server schedules writes like reads
    /// (river §6.3: the writer furthest behind first).
    pub stream: u64,
    pub progress: Progress,
    pub service: Service,
    /// The staging transaction the block belongs to.
    pub txid: u64,
    pub dataset: DatasetName,
    pub fragment: FragmentId,
    pub block: u32,
    /// CRC32C of `data`, checked by the server before it writes.
    pub crc: u32,
    pub data: Bytes,
}

/// A process's piece of a subchunk, sent when a server gathering the subchunk asked for it
/// (server-directed I/O, panda §2): the elements of the process's memory chunk that fall in
/// the subchunk, row-major over that overlap. Answered `ControlOk(Done)` once the server has
/// copied it into place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PieceReq {
    /// The collective write's staging transaction.
    pub txid: u64,
    pub subchunk: u32,
    /// The sending process.
    pub rank: u32,
    pub data: Bytes,
}

/// A block was written: what the server reports, as with a read (GD writes balance on it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WriteOk {
    pub queue_len: u32,
    /// Time the write spent on the disk, in microseconds.
    pub service_us: u32,
    pub primary_progress: Option<f64>,
    /// Where the block went: the block asked for, or for an `APPEND`, the slot the server gave it.
    pub block: u32,
}

/// Error codes on the wire. Each says what went wrong in terms a caller can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u16)]
pub enum ErrorCode {
    /// A frame could not be parsed.
    BadFrame = 1,
    /// A frame was larger than the protocol allows.
    FrameTooLarge = 2,
    /// The peer speaks another protocol version.
    UnsupportedVersion = 3,
    /// A valid frame at the wrong time (before `Hello`, a second `Hello`, a server-only kind).
    ProtocolViolation = 4,
    /// No committed dataset of that name on this server.
    UnknownDataset = 5,
    /// A fragment, block or byte range this server does not hold.
    OutOfRange = 6,
    /// The stored block failed its checksum; it was not sent.
    Corrupt = 7,
    /// A dataset of that name already exists.
    DatasetExists = 8,
    /// The server's file system failed.
    Io = 9,
    /// The connection has too many requests in flight.
    TooManyInFlight = 10,
    /// The read was cancelled before it ran.
    Cancelled = 11,
    /// The request is not supported by this server's configuration.
    Unsupported = 12,
    /// An argument is invalid.
    BadRequest = 13,
    /// No staging transaction of that id.
    NoSuchTransaction = 14,
    /// The server's disk is full.
    DiskFull = 15,
    /// The server is shutting down.
    ShuttingDown = 16,
    /// The server has a cluster secret and the connection did not begin with the handshake
    /// that proves it (a client without the secret, or a frame before the handshake).
    AuthRequired = 17,
    /// The handshake's proof was wrong: the two sides hold different cluster secrets (or
    /// the handshake was replayed from another connection).
    AuthFailed = 18,
    /// The client began a handshake, but this server has no cluster secret to prove.
    AuthUnsupported = 19,
    /// Too many failed handshakes from this address lately; it is refused for a while.
    AuthRateLimited = 20,
    /// The server has as many connections open as it takes; try again later.
    TooManyConnections = 21,
    /// Anything else; the message says what.
    Internal = 99,
}

impl ErrorCode {
    pub fn from_u16(v: u16) -> ErrorCode {
        use ErrorCode::*;
        match v {
            1 => BadFrame,
            2 => FrameTooLarge,
            3 => UnsupportedVersion,
            4 => ProtocolViolation,
            5 => UnknownDataset,
            6 => OutOfRange,
            7 => Corrupt,
            8 => DatasetExists,
            9 => Io,
            10 => TooManyInFlight,
            11 => Cancelled,
            12 => Unsupported,
            13 => BadRequest,
            14 => NoSuchTransaction,
            15 => DiskFull,
            16 => ShuttingDown,
            17 => AuthRequired,
            18 => AuthFailed,
            19 => AuthUnsupported,
            20 => AuthRateLimited,
            21 => TooManyConnections,
            _ => Internal,
        }
    }
}

/// An error frame's content.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
}

impl WireError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        let mut message = message.into();
        if message.len() > ERROR_MESSAGE_MAX {
            let mut cut = ERROR_MESSAGE_MAX;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        WireError { code, message }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.message, self.code)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Hello(Hello),
    Read(ReadReq),
    Cancel,
    Write(WriteReq),
    Piece(PieceReq),
    Progress(ProgressNote),
    Probe(Probe),
    /// Bytes the server reads and drops: traffic that loads its link (`ganges stress network`).
    Sink(Bytes),
    Control(ControlRequest),
    HelloOk(HelloOk),
    ReadOk(ReadOk),
    WriteOk(WriteOk),
    State(State),
    /// The header's request was handed to another server, which will answer it.
    Moved {
        to: NodeId,
    },
    /// The header's request, a DQ append, was taken out of the server's queue unserved
    /// because `to` ran out of work (GD-6 for writes): the writer sends the block there.
    Redirected {
        to: NodeId,
    },
    ControlOk(Box<ControlReply>),
    /// The first frame of a connection to a server with a cluster secret: the client's nonce.
    AuthInit {
        nonce: [u8; AUTH_BYTES],
    },
    /// The server's answer: its own nonce, and its proof that it holds the secret.
    AuthChallenge {
        nonce: [u8; AUTH_BYTES],
        proof: [u8; AUTH_BYTES],
    },
    /// The client's proof that it holds the secret.
    AuthProof {
        proof: [u8; AUTH_BYTES],
    },
    /// The server accepted the client's proof.
    AuthOk,
    /// An error; `origin` is set when it answers a handed-off request.
    Error(WireError, Option<Origin>),
}

/// An encoded frame: header and fixed fields in `head`, bulk bytes in `payload`.
#[derive(Debug)]
pub struct Encoded {
    pub head: Bytes,
    pub payload: Bytes,
}

impl Encoded {
    pub fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Both parts in one buffer (tests and small frames).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = self.head.to_vec();
        v.extend_from_slice(&self.payload);
        v
    }
}

fn metric_byte(m: ProgressMetric) -> u8 {
    match m {
        ProgressMetric::Bytes => 0,
        ProgressMetric::Fraction => 1,
    }
}

fn put_name(b: &mut BytesMut, name: &DatasetName) {
    let n = name.as_str().as_bytes();
    b.put_u8(n.len() as u8);
    b.put_slice(n);
}

fn put_progress(b: &mut BytesMut, stream: u64, p: &Progress) {
    b.put_u64_le(stream);
    b.put_u64_le(p.done_bytes);
    b.put_u64_le(p.total_bytes);
    b.put_u8(metric_byte(p.metric));
}

fn put_primary(b: &mut BytesMut, p: Option<f64>) {
    b.put_u32_le(p.map_or(PRIMARY_NONE, |f| (f.clamp(0.0, 1.0) * PARTS).round() as u32));
}

fn put_origin(b: &mut BytesMut, o: &Origin) {
    b.put_u32_le(o.node.0);
    b.put_u64_le(o.request_id);
}

fn json<T: Serialize>(v: &T) -> Bytes {
    let body = serde_json::to_vec(v).expect("control messages always serialise");
    assert!(body.len() <= CONTROL_BODY_MAX, "control body over the limit");
    Bytes::from(body)
}

impl Message {
    pub fn kind(&self) -> u8 {
        match self {
            Message::Hello(_) => kind::HELLO,
            Message::Read(_) => kind::READ,
            Message::Cancel => kind::CANCEL,
            Message::Write(_) => kind::WRITE,
            Message::Piece(_) => kind::PIECE,
            Message::Progress(_) => kind::PROGRESS,
            Message::Probe(_) => kind::PROBE,
            Message::Sink(_) => kind::SINK,
            Message::Control(_) => kind::CONTROL,
            Message::HelloOk(_) => kind::HELLO_OK,
            Message::ReadOk(r) if r.origin.is_some() => kind::READ_OK_MOVED,
            Message::ReadOk(_) => kind::READ_OK,
            Message::WriteOk(_) => kind::WRITE_OK,
            Message::State(_) => kind::STATE,
            Message::Moved { .. } => kind::MOVED,
            Message::Redirected { .. } => kind::REDIRECTED,
            Message::ControlOk(_) => kind::CONTROL_OK,
            Message::AuthInit { .. } => kind::AUTH_INIT,
            Message::AuthChallenge { .. } => kind::AUTH_CHALLENGE,
            Message::AuthProof { .. } => kind::AUTH_PROOF,
            Message::AuthOk => kind::AUTH_OK,
            Message::Error(_, Some(_)) => kind::ERROR_MOVED,
            Message::Error(_, None) => kind::ERROR,
        }
    }

    pub fn encode(&self, request_id: u64) -> Encoded {
        let mut fields = BytesMut::with_capacity(64);
        let mut payload = Bytes::new();
        match self {
            Message::Hello(h) => payload = json(h),
            Message::HelloOk(h) => payload = json(h),
            Message::Control(c) => payload = json(c),
            Message::ControlOk(c) => payload = json(c),
            Message::Cancel | Message::AuthOk => {}
            Message::Sink(data) => payload = data.clone(),
            Message::AuthInit { nonce } => fields.put_slice(nonce),
            Message::AuthChallenge { nonce, proof } => {
                fields.put_slice(nonce);
                fields.put_slice(proof);
            }
            Message::AuthProof { proof } => fields.put_slice(proof),
            Message::WriteOk(w) => {
                fields.put_u32_le(w.queue_len);
                fields.put_u32_le(w.service_us);
                put_primary(&mut fields, w.primary_progress);
                fields.put_u32_le(w.block);
            }
            Message::Read(r) => {
                put_progress(&mut fields, r.stream, &r.progress);
                put_service(&mut fields, &r.service);
                fields.put_u32_le(r.fragment.0);
                fields.put_u32_le(r.block);
                fields.put_u32_le(r.start_in_block);
                fields.put_u32_le(r.len);
                put_name(&mut fields, &r.dataset);
            }
            Message::Progress(p) => put_progress(&mut fields, p.stream, &p.progress),
            Message::Probe(p) => {
                put_progress(&mut fields, p.stream, &p.progress);
                put_name(&mut fields, &p.dataset);
            }
            Message::ReadOk(r) => {
                if let Some(o) = &r.origin {
                    put_origin(&mut fields, o);
                }
                fields.put_u32_le(r.crc);
                fields.put_u32_le(r.queue_len);
                fields.put_u32_le(r.service_us);
                put_primary(&mut fields, r.primary_progress);
                fields.put_u8(r.backup_depth.unwrap_or(0));
                payload = r.data.clone();
            }
            Message::State(s) => {
                fields.put_u32_le(s.queue_len);
                put_primary(&mut fields, s.primary_progress);
                let kib = s.disk_bytes_per_sec.map_or(0, |r| (r / 1024.0).round().clamp(1.0, u32::MAX as f64) as u32);
                fields.put_u32_le(kib);
                fields.put_u8(u8::from(s.disk_measured));
                fields.put_u8(s.backup_depth.unwrap_or(0));
                if let Some(l) = &s.node_load {
                    fields.put_f32_le(l.cpu_min_busy as f32);
                    fields.put_f32_le(l.load as f32);
                    fields.put_u64_le(l.mem_free_bytes);
                    fields.put_f32_le(l.net_free_bytes_per_sec as f32);
                    fields.put_f32_le(l.disk_free_bytes_per_sec as f32);
                }
            }
            Message::Moved { to } | Message::Redirected { to } => fields.put_u32_le(to.0),
            Message::Write(w) => {
                put_progress(&mut fields, w.stream, &w.progress);
                put_service(&mut fields, &w.service);
                fields.put_u64_le(w.txid);
                fields.put_u32_le(w.fragment.0);
                fields.put_u32_le(w.block);
                fields.put_u32_le(w.crc);
                put_name(&mut fields, &w.dataset);
                payload = w.data.clone();
            }
            Message::Piece(p) => {
                fields.put_u64_le(p.txid);
                fields.put_u32_le(p.subchunk);
                fields.put_u32_le(p.rank);
                payload = p.data.clone();
            }
            Message::Error(e, origin) => {
                if let Some(o) = origin {
                    put_origin(&mut fields, o);
                }
                fields.put_u16_le(e.code as u16);
                fields.put_slice(e.message.as_bytes());
            }
        }
        let mut head = BytesMut::with_capacity(HEADER_BYTES + fields.len());
        let mut h = [0u8; HEADER_BYTES];
        FrameHeader::write(self.kind(), request_id, fields.len() + payload.len(), &mut h);
        head.put_slice(&h);
        head.put_slice(&fields);
        Encoded { head: head.freeze(), payload }
    }

    /// Decode a frame body. Never panics, whatever the bytes.
    pub fn decode(header: &FrameHeader, body: Bytes) -> Result<Message, ProtoError> {
        let mut b = body;
        Ok(match header.kind {
            kind::HELLO => Message::Hello(from_json("hello", &b)?),
            kind::HELLO_OK => Message::HelloOk(from_json("hello-ok", &b)?),
            kind::CONTROL => Message::Control(from_json("control request", &b)?),
            kind::CONTROL_OK => Message::ControlOk(Box::new(from_json("control reply", &b)?)),
            kind::CANCEL => {
                empty("cancel", &b)?;
                Message::Cancel
            }
            kind::SINK => Message::Sink(b),
            kind::AUTH_INIT => Message::AuthInit { nonce: get_auth("auth-init", &mut b)? },
            kind::AUTH_PROOF => Message::AuthProof { proof: get_auth("auth-proof", &mut b)? },
            kind::AUTH_CHALLENGE => {
                need("auth-challenge", &b, 2 * AUTH_BYTES)?;
                let nonce = get_auth("auth-challenge", &mut b.split_to(AUTH_BYTES))?;
                Message::AuthChallenge { nonce, proof: get_auth("auth-challenge", &mut b)? }
            }
            kind::AUTH_OK => {
                empty("auth-ok", &b)?;
                Message::AuthOk
            }
            kind::WRITE_OK => {
                need("write-ok", &b, 16)?;
                let queue_len = b.get_u32_le();
                let service_us = b.get_u32_le();
                let primary_progress = get_primary("write-ok", &mut b)?;
                let block = b.get_u32_le();
                empty("write-ok", &b)?;
                Message::WriteOk(WriteOk { queue_len, service_us, primary_progress, block })
            }
            kind::READ => {
                need("read", &b, 47)?;
                let (stream, progress) = get_progress("read", &mut b)?;
                let service = get_service("read", &mut b)?;
                let fragment = FragmentId(b.get_u32_le());
                let block = b.get_u32_le();
                let start_in_block = b.get_u32_le();
                let len = b.get_u32_le();
                let dataset = get_name("read", &mut b)?;
                empty("read", &b)?;
                Message::Read(ReadReq { stream, progress, service, dataset, fragment, block, start_in_block, len })
            }
            kind::PROGRESS => {
                need("progress", &b, 25)?;
                let (stream, progress) = get_progress("progress", &mut b)?;
                empty("progress", &b)?;
                Message::Progress(ProgressNote { stream, progress })
            }
            kind::PROBE => {
                need("probe", &b, 26)?;
                let (stream, progress) = get_progress("probe", &mut b)?;
                let dataset = get_name("probe", &mut b)?;
                empty("probe", &b)?;
                Message::Probe(Probe { stream, progress, dataset })
            }
            kind::READ_OK | kind::READ_OK_MOVED => {
                let origin = get_origin_if(header.kind == kind::READ_OK_MOVED, "read-ok", &mut b)?;
                need("read-ok", &b, 17)?;
                let crc = b.get_u32_le();
                let queue_len = b.get_u32_le();
                let service_us = b.get_u32_le();
                let primary_progress = get_primary("read-ok", &mut b)?;
                let backup_depth = get_depth(&mut b);
                Message::ReadOk(ReadOk { crc, queue_len, service_us, primary_progress, backup_depth, origin, data: b })
            }
            kind::STATE => {
                need("state", &b, 14)?;
                let queue_len = b.get_u32_le();
                let primary_progress = get_primary("state", &mut b)?;
                let kib = b.get_u32_le();
                let disk_measured = match b.get_u8() {
                    0 => false,
                    1 => true,
                    v => return Err(ProtoError::malformed("state", format!("measured byte {v}"))),
                };
                let backup_depth = get_depth(&mut b);
                let node_load = match b.remaining() {
                    0 => None,
                    NODE_LOAD_BYTES => Some(get_node_load(&mut b)?),
                    n => return Err(ProtoError::malformed("state", format!("{n} bytes after the disk rate"))),
                };
                let disk_bytes_per_sec = (kib > 0).then_some(kib as f64 * 1024.0);
                Message::State(State {
                    queue_len,
                    primary_progress,
                    disk_bytes_per_sec,
                    disk_measured,
                    backup_depth,
                    node_load,
                })
            }
            kind::MOVED | kind::REDIRECTED => {
                let what = if header.kind == kind::MOVED { "moved" } else { "redirected" };
                need(what, &b, 4)?;
                let to = NodeId(b.get_u32_le());
                empty(what, &b)?;
                if header.kind == kind::MOVED { Message::Moved { to } } else { Message::Redirected { to } }
            }
            kind::WRITE => {
                need("write", &b, 51)?;
                let (stream, progress) = get_progress("write", &mut b)?;
                let service = get_service("write", &mut b)?;
                let txid = b.get_u64_le();
                let fragment = FragmentId(b.get_u32_le());
                let block = b.get_u32_le();
                let crc = b.get_u32_le();
                let dataset = get_name("write", &mut b)?;
                Message::Write(WriteReq { stream, progress, service, txid, dataset, fragment, block, crc, data: b })
            }
            kind::PIECE => {
                need("piece", &b, 16)?;
                let txid = b.get_u64_le();
                let subchunk = b.get_u32_le();
                let rank = b.get_u32_le();
                Message::Piece(PieceReq { txid, subchunk, rank, data: b })
            }
            kind::ERROR | kind::ERROR_MOVED => {
                let origin = get_origin_if(header.kind == kind::ERROR_MOVED, "error", &mut b)?;
                need("error", &b, 2)?;
                let code = ErrorCode::from_u16(b.get_u16_le());
                if b.len() > ERROR_MESSAGE_MAX {
                    return Err(ProtoError::malformed("error", "message too long"));
                }
                let message = String::from_utf8(b.to_vec())
                    .map_err(|_| ProtoError::malformed("error", "message is not UTF-8"))?;
                Message::Error(WireError { code, message }, origin)
            }
            k => return Err(ProtoError::UnknownKind(k)),
        })
    }
}

/// The 25 bytes of (stream, progress); the caller checked they are there.
fn get_progress(what: &'static str, b: &mut Bytes) -> Result<(u64, Progress), ProtoError> {
    let stream = b.get_u64_le();
    let done_bytes = b.get_u64_le();
    let total_bytes = b.get_u64_le();
    let metric = match b.get_u8() {
        0 => ProgressMetric::Bytes,
        1 => ProgressMetric::Fraction,
        m => return Err(ProtoError::malformed(what, format!("progress metric {m}"))),
    };
    if done_bytes > total_bytes {
        return Err(ProtoError::malformed(what, "progress past the total"));
    }
    Ok((stream, Progress { done_bytes, total_bytes, metric }))
}

/// A request's service: its byte, the share and the guard (4 bytes).
fn put_service(b: &mut BytesMut, s: &Service) {
    b.put_u8(crate::service::to_byte(*s));
    b.put_u16_le(s.share);
    b.put_u8(s.guard_every);
    b.put_u8(s.depth);
}

fn get_service(what: &'static str, b: &mut Bytes) -> Result<Service, ProtoError> {
    let v = b.get_u8();
    let share = b.get_u16_le();
    let guard = b.get_u8();
    let depth = b.get_u8();
    crate::service::from_byte(v, share, guard, depth)
        .ok_or_else(|| ProtoError::malformed(what, format!("unknown discipline in service byte {v:#04x}")))
}

/// A reply's least backup-read depth: 0 on the wire is none.
fn get_depth(b: &mut Bytes) -> Option<u8> {
    Some(b.get_u8()).filter(|d| *d > 0)
}

/// The node-load tail of a State frame: 4 + 4 + 8 + 4 + 4 bytes.
const NODE_LOAD_BYTES: usize = 24;

fn get_node_load(b: &mut Bytes) -> Result<NodeLoad, ProtoError> {
    let cpu = b.get_f32_le() as f64;
    let load = b.get_f32_le() as f64;
    let mem_free_bytes = b.get_u64_le();
    let net = b.get_f32_le() as f64;
    let disk = b.get_f32_le() as f64;
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    if !(ok(cpu) && cpu <= 1.0 && ok(load) && ok(net) && ok(disk)) {
        return Err(ProtoError::malformed("state", format!("node load cpu {cpu} load {load} net {net} disk {disk}")));
    }
    Ok(NodeLoad { cpu_min_busy: cpu, load, mem_free_bytes, net_free_bytes_per_sec: net, disk_free_bytes_per_sec: disk })
}

fn get_primary(what: &'static str, b: &mut Bytes) -> Result<Option<f64>, ProtoError> {
    match b.get_u32_le() {
        PRIMARY_NONE => Ok(None),
        v if v as f64 <= PARTS => Ok(Some(v as f64 / PARTS)),
        v => Err(ProtoError::malformed(what, format!("primary progress {v} above one billion parts"))),
    }
}

/// The origin prefix of a reply to a handed-off request, when `moved` says there is one.
fn get_origin_if(moved: bool, what: &'static str, b: &mut Bytes) -> Result<Option<Origin>, ProtoError> {
    if !moved {
        return Ok(None);
    }
    need(what, b, 12)?;
    Ok(Some(Origin { node: NodeId(b.get_u32_le()), request_id: b.get_u64_le() }))
}

/// Exactly one nonce or proof.
fn get_auth(what: &'static str, b: &mut Bytes) -> Result<[u8; AUTH_BYTES], ProtoError> {
    need(what, b, AUTH_BYTES)?;
    let mut out = [0u8; AUTH_BYTES];
    b.copy_to_slice(&mut out);
    empty(what, b)?;
    Ok(out)
}

fn need(what: &'static str, b: &Bytes, n: usize) -> Result<(), ProtoError> {
    if b.len() < n {
        return Err(ProtoError::malformed(what, format!("{} bytes, need {n}", b.len())));
    }
    Ok(())
}

fn empty(what: &'static str, b: &Bytes) -> Result<(), ProtoError> {
    if !b.is_empty() {
        return Err(ProtoError::malformed(what, format!("{} unexpected trailing bytes", b.len())));
    }
    Ok(())
}

fn get_name(what: &'static str, b: &mut Bytes) -> Result<DatasetName, ProtoError> {
    need(what, b, 1)?;
    let n = b.get_u8() as usize;
    need(what, b, n)?;
    let raw = b.split_to(n);
    let s = std::str::from_utf8(&raw).map_err(|_| ProtoError::malformed(what, "name is not UTF-8"))?;
    s.parse().map_err(|e: crate::manifest::BadName| ProtoError::malformed(what, e.to_string()))
}

fn from_json<T: for<'de> Deserialize<'de>>(what: &'static str, b: &Bytes) -> Result<T, ProtoError> {
    if b.len() > CONTROL_BODY_MAX {
        return Err(ProtoError::TooLarge { len: b.len(), max: CONTROL_BODY_MAX });
    }
    serde_json::from_slice(b).map_err(|e| ProtoError::malformed(what, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER_BYTES;
    use ganges_core::disk::Fault;
    use ganges_core::sched::{COPY_MAX, Discipline};
    use proptest::prelude::*;

    fn round_trip(m: &Message, id: u64) -> Message {
        let enc = m.encode(id);
        let bytes = enc.to_vec();
        let h = FrameHeader::parse(bytes[..HEADER_BYTES].try_into().unwrap()).unwrap();
        assert_eq!(h.request_id, id);
        assert_eq!(h.body_len, bytes.len() - HEADER_BYTES);
        Message::decode(&h, Bytes::copy_from_slice(&bytes[HEADER_BYTES..])).unwrap()
    }

    fn name() -> impl Strategy<Value = DatasetName> {
        "[a-zA-Z0-9_][a-zA-Z0-9._-]{0,40}".prop_map(|s| s.parse().unwrap())
    }

    fn progress() -> impl Strategy<Value = Progress> {
        (any::<u64>(), any::<u64>(), prop_oneof![Just(ProgressMetric::Bytes), Just(ProgressMetric::Fraction)])
            .prop_map(|(a, b, metric)| Progress { done_bytes: a.min(b), total_bytes: a.max(b), metric })
    }

    fn service() -> impl Strategy<Value = Service> {
        (
            prop::sample::select(Discipline::ALL.to_vec()),
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
            0..=COPY_MAX,
            any::<bool>(),
            any::<u8>(),
            any::<u8>(),
            any::<bool>(),
        )
            .prop_map(|(discipline, runs, handoff, share, copy, phased, guard_every, depth, level)| Service {
                discipline,
                runs,
                handoff,
                share,
                copy,
                phased,
                guard_every,
                depth,
                level,
            })
    }

    /// A least backup-read depth as the wire carries it (0 is none).
    fn depth() -> impl Strategy<Value = Option<u8>> {
        prop::option::of(1u8..=u8::MAX)
    }

    /// Fractions that survive parts-per-billion exactly.
    fn primary() -> impl Strategy<Value = Option<f64>> {
        prop::option::of((0u32..=1_000_000_000).prop_map(|v| v as f64 / PARTS))
    }

    /// Loads whose figures survive f32 exactly.
    fn node_load() -> impl Strategy<Value = NodeLoad> {
        (0f32..=1.0, 0f32..64.0, any::<u64>(), 0f32..1e10, 0f32..1e10).prop_map(|(cpu, load, mem, net, disk)| {
            NodeLoad {
                cpu_min_busy: cpu as f64,
                load: load as f64,
                mem_free_bytes: mem,
                net_free_bytes_per_sec: net as f64,
                disk_free_bytes_per_sec: disk as f64,
            }
        })
    }

    fn origin() -> impl Strategy<Value = Option<Origin>> {
        prop::option::of((any::<u32>(), any::<u64>()).prop_map(|(n, r)| Origin { node: NodeId(n), request_id: r }))
    }

    fn message() -> impl Strategy<Value = Message> {
        let data = prop::collection::vec(any::<u8>(), 0..5000).prop_map(Bytes::from);
        prop_oneof![
            ("[ -~]{0,30}", any::<u64>()).prop_map(|(client, client_id)| Message::Hello(Hello { client, client_id })),
            (any::<u32>(), "[ -~]{0,30}")
                .prop_map(|(n, v)| Message::HelloOk(HelloOk { node: NodeId(n), server_version: v })),
            (any::<u64>(), progress(), service(), name(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>())
                .prop_map(|(stream, progress, service, dataset, f, block, start, len)| Message::Read(ReadReq {
                    stream,
                    progress,
                    service,
                    dataset,
                    fragment: FragmentId(f),
                    block,
                    start_in_block: start,
                    len,
                })),
            Just(Message::Cancel),
            prop::collection::vec(any::<u8>(), 0..64).prop_map(|v| Message::Sink(Bytes::from(v))),
            (any::<u32>(), any::<u32>(), primary(), any::<u32>()).prop_map(
                |(queue_len, service_us, primary_progress, block)| {
                    Message::WriteOk(WriteOk { queue_len, service_us, primary_progress, block })
                }
            ),
            (any::<u64>(), progress())
                .prop_map(|(stream, progress)| Message::Progress(ProgressNote { stream, progress })),
            (any::<u64>(), progress(), name()).prop_map(|(stream, progress, dataset)| Message::Probe(Probe {
                stream,
                progress,
                dataset
            })),
            (any::<u32>(), any::<u32>(), any::<u32>(), primary(), depth(), origin(), data.clone()).prop_map(
                |(crc, queue_len, service_us, primary_progress, backup_depth, origin, data)| Message::ReadOk(ReadOk {
                    crc,
                    queue_len,
                    service_us,
                    primary_progress,
                    backup_depth,
                    origin,
                    data
                })
            ),
            (
                any::<u32>(),
                primary(),
                prop::option::of(1u32..u32::MAX),
                any::<bool>(),
                depth(),
                prop::option::of(node_load())
            )
                .prop_map(|(queue_len, primary_progress, kib, disk_measured, backup_depth, node_load)| {
                    let disk_bytes_per_sec = kib.map(|k| k as f64 * 1024.0);
                    Message::State(State {
                        queue_len,
                        primary_progress,
                        disk_bytes_per_sec,
                        disk_measured,
                        backup_depth,
                        node_load,
                    })
                }),
            any::<u32>().prop_map(|n| Message::Moved { to: NodeId(n) }),
            any::<u32>().prop_map(|n| Message::Redirected { to: NodeId(n) }),
            (
                any::<u64>(),
                progress(),
                service(),
                any::<u64>(),
                name(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                data.clone()
            )
                .prop_map(
                    |(stream, progress, service, txid, dataset, f, block, crc, data)| Message::Write(WriteReq {
                        stream,
                        progress,
                        service,
                        txid,
                        dataset,
                        fragment: FragmentId(f),
                        block,
                        crc,
                        data
                    })
                ),
            (any::<u64>(), any::<u32>(), any::<u32>(), data.clone())
                .prop_map(|(txid, subchunk, rank, data)| Message::Piece(PieceReq { txid, subchunk, rank, data })),
            (any::<u16>(), "[ -~]{0,100}", origin())
                .prop_map(|(c, m, o)| Message::Error(WireError::new(ErrorCode::from_u16(c), m), o)),
            (name(), prop::option::of(0.01f64..1.0)).prop_map(|(n, f)| Message::Control(if f.is_some() {
                ControlRequest::SetFault { fault: f.map(|factor| Fault::Factor { factor }) }
            } else {
                ControlRequest::Remove { name: n }
            })),
            Just(Message::ControlOk(Box::new(ControlReply::Removed { committed: true, staging: 2 }))),
            any::<[u8; AUTH_BYTES]>().prop_map(|nonce| Message::AuthInit { nonce }),
            any::<[u8; AUTH_BYTES]>().prop_map(|proof| Message::AuthProof { proof }),
            (any::<[u8; AUTH_BYTES]>(), any::<[u8; AUTH_BYTES]>())
                .prop_map(|(nonce, proof)| Message::AuthChallenge { nonce, proof }),
            Just(Message::AuthOk),
        ]
    }

    proptest! {
        /// Every message survives encode then decode, with any request id.
        #[test]
        fn codec_round_trip(m in message(), id in any::<u64>()) {
            prop_assert_eq!(round_trip(&m, id), m);
        }

        /// The decoder returns an error, never panics, for any body under any kind.
        #[test]
        fn decode_never_panics(kind in any::<u8>(), body in prop::collection::vec(any::<u8>(), 0..200)) {
            let h = FrameHeader { version: 1, kind, flags: 0, request_id: 0, body_len: body.len() };
            let _ = Message::decode(&h, Bytes::from(body));
        }

        /// Truncating a valid fixed-layout frame anywhere gives an error, not a panic.
        #[test]
        fn truncated_bodies_are_errors(m in message(), cut in any::<prop::sample::Index>()) {
            let enc = m.encode(1).to_vec();
            let body = &enc[HEADER_BYTES..];
            if !body.is_empty() {
                let at = cut.index(body.len());
                let h = FrameHeader { version: 1, kind: m.kind(), flags: 0, request_id: 1, body_len: at };
                if let Ok(d) = Message::decode(&h, Bytes::copy_from_slice(&body[..at])) {
                    // Only payload-carrying messages may decode from a prefix (a shorter
                    // payload), and a State cut exactly before its optional node load.
                    let state_without_load = match (&m, &d) {
                        (Message::State(a), Message::State(b)) => *b == State { node_load: None, ..*a },
                        _ => false,
                    };
                    prop_assert!(
                        state_without_load
                            || matches!(
                                d,
                                Message::ReadOk(_) | Message::Write(_) | Message::Piece(_) | Message::Sink(_) | Message::Error(..)
                            )
                    );
                }
            }
        }
    }

    #[test]
    fn bad_names_metrics_and_disciplines_are_rejected() {
        let r = Message::Read(ReadReq {
            stream: 1,
            progress: Progress { done_bytes: 0, total_bytes: 1, metric: ProgressMetric::Bytes },
            service: Service::FURTHEST_BEHIND,
            dataset: "ok".parse().unwrap(),
            fragment: FragmentId(0),
            block: 0,
            start_in_block: 0,
            len: 1,
        });
        let mut v = r.encode(1).to_vec();
        let h = FrameHeader::parse(v[..HEADER_BYTES].try_into().unwrap()).unwrap();
        let decode = |v: &[u8]| Message::decode(&h, Bytes::copy_from_slice(&v[HEADER_BYTES..]));
        v[HEADER_BYTES + 24] = 7; // metric
        assert!(decode(&v).is_err());
        v[HEADER_BYTES + 24] = 0;
        assert!(decode(&v).is_ok());
        v[HEADER_BYTES + 25] = 2; // discipline 2: no build of this version asks for it
        assert!(matches!(decode(&v), Err(ProtoError::Malformed { why, .. }) if why.contains("discipline")));
        v[HEADER_BYTES + 25] = 0;
        assert!(decode(&v).is_ok());
        let at = v.len() - 2;
        v[at] = b'/'; // a path separator in the name
        assert!(decode(&v).is_err());
    }

    #[test]
    fn long_error_messages_are_cut_at_a_char_boundary() {
        let e = WireError::new(ErrorCode::Io, "é".repeat(5000));
        assert!(e.message.len() <= ERROR_MESSAGE_MAX);
    }

    #[test]
    fn a_node_load_out_of_range_or_cut_short_is_malformed() {
        let load = NodeLoad {
            cpu_min_busy: 0.5,
            load: 1.0,
            mem_free_bytes: 1 << 30,
            net_free_bytes_per_sec: 1e8,
            disk_free_bytes_per_sec: 3e7,
        };
        let state = State {
            queue_len: 0,
            primary_progress: None,
            disk_bytes_per_sec: None,
            disk_measured: false,
            backup_depth: Some(3),
            node_load: Some(load),
        };
        let v = Message::State(state).encode(1).to_vec();
        let h = FrameHeader::parse(v[..HEADER_BYTES].try_into().unwrap()).unwrap();
        let body = &v[HEADER_BYTES..];
        assert_eq!(Message::decode(&h, Bytes::copy_from_slice(body)).unwrap(), Message::State(state));
        // A CPU above 100%, a NaN rate, a tail cut short: each refused.
        for (at, bytes) in [(14, 1.5f32.to_le_bytes()), (30, f32::NAN.to_le_bytes())] {
            let mut bad = body.to_vec();
            bad[at..at + 4].copy_from_slice(&bytes);
            assert!(Message::decode(&h, Bytes::from(bad)).is_err());
        }
        assert!(Message::decode(&h, Bytes::copy_from_slice(&body[..body.len() - 1])).is_err());
    }

    #[test]
    fn primary_progress_above_one_is_malformed() {
        let state = State {
            queue_len: 1,
            primary_progress: Some(0.5),
            disk_bytes_per_sec: None,
            disk_measured: false,
            backup_depth: None,
            node_load: None,
        };
        let mut v = Message::State(state).encode(1).to_vec();
        let h = FrameHeader::parse(v[..HEADER_BYTES].try_into().unwrap()).unwrap();
        v[HEADER_BYTES + 4..HEADER_BYTES + 8].copy_from_slice(&2_000_000_000u32.to_le_bytes());
        assert!(Message::decode(&h, Bytes::copy_from_slice(&v[HEADER_BYTES..])).is_err());
    }
}
