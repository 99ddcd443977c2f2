//! Frame header and limits.
//!
//! ```text
//! 0       4        5      6        8                16
//! | len   | version| kind | flags  | request id     | body (len - 12 bytes) ...
//!   u32 LE   u8       u8    u16 LE   u64 LE
//! ```
//! `len` counts everything after itself, so the smallest frame has `len = 12`.

use ganges_core::shape::BLOCK_BYTES_MAX;

/// The protocol version this build speaks. A peer sending another version gets an
/// `UnsupportedVersion` error frame and the connection closes.
pub const VERSION: u8 = 5;
/// Bytes of the fixed header, including the length field.
pub const HEADER_BYTES: usize = 16;
/// Bytes counted by `len` that belong to the header.
pub const HEADER_AFTER_LEN: u32 = 12;
/// The largest body: one maximal block plus room for its request fields.
pub const BODY_MAX: usize = BLOCK_BYTES_MAX as usize + 64 * 1024;
/// The largest JSON body of a control message: manifests of the largest datasets (65,536
/// fragments) fit with room to spare; anything bigger is a broken or hostile peer.
pub const CONTROL_BODY_MAX: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {len} bytes is over the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("frame length {0} is shorter than a header")]
    TooShort(u32),
    #[error("unsupported protocol version {0} (this build speaks {VERSION})")]
    Version(u8),
    #[error("unknown message kind {0:#04x}")]
    UnknownKind(u8),
    #[error("reserved flags set: {0:#06x}")]
    Flags(u16),
    #[error("malformed {what}: {why}")]
    Malformed { what: &'static str, why: String },
    #[error("connection closed in the middle of a frame")]
    Truncated,
}

impl ProtoError {
    pub fn malformed(what: &'static str, why: impl Into<String>) -> ProtoError {
        ProtoError::Malformed { what, why: why.into() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub version: u8,
    pub kind: u8,
    pub flags: u16,
    pub request_id: u64,
    /// Bytes of body that follow the header.
    pub body_len: usize,
}

impl FrameHeader {
    /// Parse and check a header. Checks the length against `BODY_MAX` before anyone
    /// allocates for the body, so a hostile length cannot exhaust memory.
    pub fn parse(buf: &[u8; HEADER_BYTES]) -> Result<FrameHeader, ProtoError> {
        let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        if len < HEADER_AFTER_LEN {
            return Err(ProtoError::TooShort(len));
        }
        let body_len = (len - HEADER_AFTER_LEN) as usize;
        if body_len > BODY_MAX {
            return Err(ProtoError::TooLarge { len: body_len, max: BODY_MAX });
        }
        let version = buf[4];
        if version != VERSION {
            return Err(ProtoError::Version(version));
        }
        let flags = u16::from_le_bytes(buf[6..8].try_into().expect("2 bytes"));
        if flags != 0 {
            return Err(ProtoError::Flags(flags));
        }
        Ok(FrameHeader {
            version,
            kind: buf[5],
            flags,
            request_id: u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
            body_len,
        })
    }

    pub fn write(kind: u8, request_id: u64, body_len: usize, out: &mut [u8; HEADER_BYTES]) {
        assert!(body_len <= BODY_MAX, "encoder produced an oversized body");
        let len = body_len as u32 + HEADER_AFTER_LEN;
        out[0..4].copy_from_slice(&len.to_le_bytes());
        out[4] = VERSION;
        out[5] = kind;
        out[6..8].copy_from_slice(&0u16.to_le_bytes());
        out[8..16].copy_from_slice(&request_id.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let mut b = [0u8; HEADER_BYTES];
        FrameHeader::write(7, 0xDEAD_BEEF, 1000, &mut b);
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!((h.kind, h.request_id, h.body_len), (7, 0xDEAD_BEEF, 1000));
    }

    #[test]
    fn bad_headers_are_typed_errors() {
        let mut b = [0u8; HEADER_BYTES];
        FrameHeader::write(1, 1, 0, &mut b);
        let mut v = b;
        v[4] = 9;
        assert!(matches!(FrameHeader::parse(&v), Err(ProtoError::Version(9))));
        let mut l = b;
        l[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(FrameHeader::parse(&l), Err(ProtoError::TooLarge { .. })));
        let mut s = b;
        s[0..4].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(FrameHeader::parse(&s), Err(ProtoError::TooShort(3))));
        let mut f = b;
        f[6] = 1;
        assert!(matches!(FrameHeader::parse(&f), Err(ProtoError::Flags(1))));
    }
}
