//! Messages and their binary layouts. `encode` and `decode` are pure functions of bytes.
//!
//! Data-path messages have fixed little-endian layouts so a block's bytes are never copied
//! to be framed: `Encoded` keeps the header and fields apart from the payload, which is
//! written with a vectored write; on receipt the payload is a slice of the frame's buffer.
//!
//! | kind | message   | body |
//! |------|-----------|------|
//! | 0x01 | Hello     | JSON `{client}` |
//! | 0x02 | Read      | stream u64, done u64, total u64, metric u8, fragment u32, block u32, start u32, len u32, name_len u8, name |
//! | 0x03 | Cancel    | empty: the header's request id names the read to cancel |
//! | 0x04 | Write     | txid u64, fragment u32, block u32, crc u32, name_len u8, name, data |
//! | 0x05 | Progress  | stream u64, done u64, total u64, metric u8 (no reply) |
//! | 0x10 | Control   | JSON `ControlRequest` |
//! | 0x81 | HelloOk   | JSON `{node, server_version}` |
//! | 0x82 | ReadOk    | crc u32, queue_len u32, service_us u32, data |
//! | 0x84 | WriteOk   | empty |
//! | 0x90 | ControlOk | JSON `ControlReply` |
//! | 0xFF | Error     | code u16, message (UTF-8, at most 4 KiB) |

use crate::control::{ControlReply, ControlRequest};
use crate::frame::{CONTROL_BODY_MAX, FrameHeader, HEADER_BYTES, ProtoError};
use crate::manifest::DatasetName;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::sched::{Progress, ProgressMetric};
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod kind {
    pub const HELLO: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const CANCEL: u8 = 0x03;
    pub const WRITE: u8 = 0x04;
    pub const PROGRESS: u8 = 0x05;
    pub const CONTROL: u8 = 0x10;
    pub const HELLO_OK: u8 = 0x81;
    pub const READ_OK: u8 = 0x82;
    pub const WRITE_OK: u8 = 0x84;
    pub const CONTROL_OK: u8 = 0x90;
    pub const ERROR: u8 = 0xFF;

    /// Whether a kind is one a client may send (the rest only come from servers).
    pub fn from_client(k: u8) -> bool {
        matches!(k, HELLO | READ | CANCEL | WRITE | PROGRESS | CONTROL)
    }
}

/// Longest error message carried: enough to say what to do, bounded like everything else.
pub const ERROR_MESSAGE_MAX: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub client: String,
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOk {
    /// CRC32C of `data`, computed by the server after it checked the stored block checksum.
    pub crc: u32,
    /// Requests queued at the server when this one finished (server state for policies).
    pub queue_len: u32,
    /// Time the request spent on the disk, in microseconds.
    pub service_us: u32,
    pub data: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteReq {
    /// The staging transaction the block belongs to.
    pub txid: u64,
    pub dataset: DatasetName,
    pub fragment: FragmentId,
    pub block: u32,
    /// CRC32C of `data`, checked by the server before it writes.
    pub crc: u32,
    pub data: Bytes,
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
    Progress(ProgressNote),
    Control(ControlRequest),
    HelloOk(HelloOk),
    ReadOk(ReadOk),
    WriteOk,
    ControlOk(Box<ControlReply>),
    Error(WireError),
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

fn json<T: Serialize>(v: &T) -> Bytes {
    let body = serde_json::to_vec(v).expect("control messages always serialise");
    assert!(
        body.len() <= CONTROL_BODY_MAX,
        "control body over the limit"
    );
    Bytes::from(body)
}

impl Message {
    pub fn kind(&self) -> u8 {
        match self {
            Message::Hello(_) => kind::HELLO,
            Message::Read(_) => kind::READ,
            Message::Cancel => kind::CANCEL,
            Message::Write(_) => kind::WRITE,
            Message::Progress(_) => kind::PROGRESS,
            Message::Control(_) => kind::CONTROL,
            Message::HelloOk(_) => kind::HELLO_OK,
            Message::ReadOk(_) => kind::READ_OK,
            Message::WriteOk => kind::WRITE_OK,
            Message::ControlOk(_) => kind::CONTROL_OK,
            Message::Error(_) => kind::ERROR,
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
            Message::Cancel | Message::WriteOk => {}
            Message::Read(r) => {
                put_progress(&mut fields, r.stream, &r.progress);
                fields.put_u32_le(r.fragment.0);
                fields.put_u32_le(r.block);
                fields.put_u32_le(r.start_in_block);
                fields.put_u32_le(r.len);
                put_name(&mut fields, &r.dataset);
            }
            Message::Progress(p) => put_progress(&mut fields, p.stream, &p.progress),
            Message::ReadOk(r) => {
                fields.put_u32_le(r.crc);
                fields.put_u32_le(r.queue_len);
                fields.put_u32_le(r.service_us);
                payload = r.data.clone();
            }
            Message::Write(w) => {
                fields.put_u64_le(w.txid);
                fields.put_u32_le(w.fragment.0);
                fields.put_u32_le(w.block);
                fields.put_u32_le(w.crc);
                put_name(&mut fields, &w.dataset);
                payload = w.data.clone();
            }
            Message::Error(e) => {
                fields.put_u16_le(e.code as u16);
                fields.put_slice(e.message.as_bytes());
            }
        }
        let mut head = BytesMut::with_capacity(HEADER_BYTES + fields.len());
        let mut h = [0u8; HEADER_BYTES];
        FrameHeader::write(
            self.kind(),
            request_id,
            fields.len() + payload.len(),
            &mut h,
        );
        head.put_slice(&h);
        head.put_slice(&fields);
        Encoded {
            head: head.freeze(),
            payload,
        }
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
            kind::WRITE_OK => {
                empty("write-ok", &b)?;
                Message::WriteOk
            }
            kind::READ => {
                need("read", &b, 42)?;
                let (stream, progress) = get_progress("read", &mut b)?;
                let fragment = FragmentId(b.get_u32_le());
                let block = b.get_u32_le();
                let start_in_block = b.get_u32_le();
                let len = b.get_u32_le();
                let dataset = get_name("read", &mut b)?;
                empty("read", &b)?;
                Message::Read(ReadReq {
                    stream,
                    progress,
                    dataset,
                    fragment,
                    block,
                    start_in_block,
                    len,
                })
            }
            kind::PROGRESS => {
                need("progress", &b, 25)?;
                let (stream, progress) = get_progress("progress", &mut b)?;
                empty("progress", &b)?;
                Message::Progress(ProgressNote { stream, progress })
            }
            kind::READ_OK => {
                need("read-ok", &b, 12)?;
                let crc = b.get_u32_le();
                let queue_len = b.get_u32_le();
                let service_us = b.get_u32_le();
                Message::ReadOk(ReadOk {
                    crc,
                    queue_len,
                    service_us,
                    data: b,
                })
            }
            kind::WRITE => {
                need("write", &b, 21)?;
                let txid = b.get_u64_le();
                let fragment = FragmentId(b.get_u32_le());
                let block = b.get_u32_le();
                let crc = b.get_u32_le();
                let dataset = get_name("write", &mut b)?;
                Message::Write(WriteReq {
                    txid,
                    dataset,
                    fragment,
                    block,
                    crc,
                    data: b,
                })
            }
            kind::ERROR => {
                need("error", &b, 2)?;
                let code = ErrorCode::from_u16(b.get_u16_le());
                if b.len() > ERROR_MESSAGE_MAX {
                    return Err(ProtoError::malformed("error", "message too long"));
                }
                let message = String::from_utf8(b.to_vec())
                    .map_err(|_| ProtoError::malformed("error", "message is not UTF-8"))?;
                Message::Error(WireError { code, message })
            }
            k => return Err(ProtoError::UnknownKind(k)),
        })
    }
}

fn put_progress(b: &mut BytesMut, stream: u64, p: &Progress) {
    b.put_u64_le(stream);
    b.put_u64_le(p.done_bytes);
    b.put_u64_le(p.total_bytes);
    b.put_u8(metric_byte(p.metric));
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
    Ok((
        stream,
        Progress {
            done_bytes,
            total_bytes,
            metric,
        },
    ))
}

fn need(what: &'static str, b: &Bytes, n: usize) -> Result<(), ProtoError> {
    if b.len() < n {
        return Err(ProtoError::malformed(
            what,
            format!("{} bytes, need {n}", b.len()),
        ));
    }
    Ok(())
}

fn empty(what: &'static str, b: &Bytes) -> Result<(), ProtoError> {
    if !b.is_empty() {
        return Err(ProtoError::malformed(
            what,
            format!("{} unexpected trailing bytes", b.len()),
        ));
    }
    Ok(())
}

fn get_name(what: &'static str, b: &mut Bytes) -> Result<DatasetName, ProtoError> {
    need(what, b, 1)?;
    let n = b.get_u8() as usize;
    need(what, b, n)?;
    let raw = b.split_to(n);
    let s =
        std::str::from_utf8(&raw).map_err(|_| ProtoError::malformed(what, "name is not UTF-8"))?;
    s.parse()
        .map_err(|e: crate::manifest::BadName| ProtoError::malformed(what, e.to_string()))
}

fn from_json<T: for<'de> Deserialize<'de>>(what: &'static str, b: &Bytes) -> Result<T, ProtoError> {
    if b.len() > CONTROL_BODY_MAX {
        return Err(ProtoError::TooLarge {
            len: b.len(),
            max: CONTROL_BODY_MAX,
        });
    }
    serde_json::from_slice(b).map_err(|e| ProtoError::malformed(what, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER_BYTES;
    use ganges_core::disk::Fault;
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

    fn metric() -> impl Strategy<Value = ProgressMetric> {
        prop_oneof![Just(ProgressMetric::Bytes), Just(ProgressMetric::Fraction)]
    }

    fn message() -> impl Strategy<Value = Message> {
        let data = prop::collection::vec(any::<u8>(), 0..5000).prop_map(Bytes::from);
        prop_oneof![
            "[ -~]{0,30}".prop_map(|client| Message::Hello(Hello { client })),
            (any::<u32>(), "[ -~]{0,30}").prop_map(|(n, v)| Message::HelloOk(HelloOk {
                node: NodeId(n),
                server_version: v
            })),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                metric(),
                name(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(stream, a, b, metric, dataset, f, block, start, len)| {
                    let (done_bytes, total_bytes) = (a.min(b), a.max(b));
                    Message::Read(ReadReq {
                        stream,
                        progress: Progress {
                            done_bytes,
                            total_bytes,
                            metric,
                        },
                        dataset,
                        fragment: FragmentId(f),
                        block,
                        start_in_block: start,
                        len,
                    })
                }),
            Just(Message::Cancel),
            Just(Message::WriteOk),
            (any::<u64>(), any::<u64>(), any::<u64>(), metric()).prop_map(
                |(stream, a, b, metric)| {
                    let (done_bytes, total_bytes) = (a.min(b), a.max(b));
                    Message::Progress(ProgressNote {
                        stream,
                        progress: Progress {
                            done_bytes,
                            total_bytes,
                            metric,
                        },
                    })
                }
            ),
            (any::<u32>(), any::<u32>(), any::<u32>(), data.clone()).prop_map(
                |(crc, q, s, data)| Message::ReadOk(ReadOk {
                    crc,
                    queue_len: q,
                    service_us: s,
                    data
                })
            ),
            (
                any::<u64>(),
                name(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                data
            )
                .prop_map(|(txid, dataset, f, block, crc, data)| Message::Write(
                    WriteReq {
                        txid,
                        dataset,
                        fragment: FragmentId(f),
                        block,
                        crc,
                        data
                    }
                )),
            (any::<u16>(), "[ -~]{0,100}")
                .prop_map(|(c, m)| { Message::Error(WireError::new(ErrorCode::from_u16(c), m)) }),
            (name(), prop::option::of(0.01f64..1.0)).prop_map(|(n, f)| Message::Control(
                if f.is_some() {
                    ControlRequest::SetFault {
                        fault: f.map(|factor| Fault::Factor { factor }),
                    }
                } else {
                    ControlRequest::Remove { name: n }
                }
            )),
            Just(Message::ControlOk(Box::new(ControlReply::Removed {
                committed: true,
                staging: 2
            }))),
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
                    // Only payload-carrying messages may decode from a prefix (a shorter payload).
                    prop_assert!(matches!(d, Message::ReadOk(_) | Message::Write(_) | Message::Error(_)));
                }
            }
        }
    }

    #[test]
    fn bad_names_and_metrics_are_rejected() {
        let r = Message::Read(ReadReq {
            stream: 1,
            progress: Progress {
                done_bytes: 0,
                total_bytes: 1,
                metric: ProgressMetric::Bytes,
            },
            dataset: "ok".parse().unwrap(),
            fragment: FragmentId(0),
            block: 0,
            start_in_block: 0,
            len: 1,
        });
        let mut v = r.encode(1).to_vec();
        let h = FrameHeader::parse(v[..HEADER_BYTES].try_into().unwrap()).unwrap();
        v[HEADER_BYTES + 24] = 7; // metric
        assert!(Message::decode(&h, Bytes::copy_from_slice(&v[HEADER_BYTES..])).is_err());
        v[HEADER_BYTES + 24] = 0;
        let at = v.len() - 2;
        v[at] = b'/'; // a path separator in the name
        assert!(Message::decode(&h, Bytes::copy_from_slice(&v[HEADER_BYTES..])).is_err());
    }

    #[test]
    fn long_error_messages_are_cut_at_a_char_boundary() {
        let e = WireError::new(ErrorCode::Io, "é".repeat(5000));
        assert!(e.message.len() <= ERROR_MESSAGE_MAX);
    }
}
