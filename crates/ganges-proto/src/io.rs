//! Reading and writing frames on async byte streams.
//!
//! `read_frame` checks the header (length, version, flags) before it allocates the body, and
//! reads the body straight into a buffer of exactly its size, which then becomes the `Bytes`
//! a payload is sliced from: no further copy. `write_frame` hands the header and the payload
//! to one vectored write.

use crate::frame::{FrameHeader, HEADER_BYTES, ProtoError};
use crate::msg::Encoded;
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Read buffer size for connections: big enough to take many small frames per syscall,
/// small enough that most of a large block's bytes go straight into their own buffer.
pub const READ_BUFFER_BYTES: usize = 32 * 1024;

/// Read one frame. `Ok(None)` is a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<(FrameHeader, Bytes)>, ProtoError> {
    let mut h = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        let n = r.read(&mut h[got..]).await?;
        if n == 0 {
            return if got == 0 { Ok(None) } else { Err(ProtoError::Truncated) };
        }
        got += n;
    }
    let header = FrameHeader::parse(&h)?;
    let mut body = BytesMut::with_capacity(header.body_len);
    while body.len() < header.body_len {
        let want = (header.body_len - body.len()) as u64;
        let n = (&mut *r).take(want).read_buf(&mut body).await?;
        if n == 0 {
            return Err(ProtoError::Truncated);
        }
    }
    Ok(Some((header, body.freeze())))
}

/// Write one encoded frame (header and payload in one vectored write where the stream
/// supports it).
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Encoded) -> std::io::Result<()> {
    let mut buf = frame.head.clone().chain(frame.payload.clone());
    w.write_all_buf(&mut buf).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{Message, ReadOk};

    #[tokio::test]
    async fn frames_cross_a_pipe_intact() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let m = Message::ReadOk(ReadOk {
            crc: 5,
            queue_len: 2,
            service_us: 9,
            primary_progress: Some(0.25),
            backup_depth: Some(2),
            origin: None,
            data: Bytes::from(vec![7u8; 300_000]),
        });
        let send = m.clone();
        tokio::spawn(async move {
            write_frame(&mut a, &send.encode(42)).await.unwrap();
            write_frame(&mut a, &Message::Cancel.encode(43)).await.unwrap();
        });
        let (h, body) = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(h.request_id, 42);
        assert_eq!(Message::decode(&h, body).unwrap(), m);
        let (h, _) = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(h.request_id, 43);
        assert!(read_frame(&mut b).await.unwrap().is_none(), "clean end of stream");
    }

    #[tokio::test]
    async fn a_frame_cut_short_is_truncated() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let enc = Message::Cancel.encode(1).to_vec();
        tokio::spawn(async move {
            a.write_all(&enc[..10]).await.unwrap();
        });
        assert!(matches!(read_frame(&mut b).await, Err(ProtoError::Truncated)));
    }
}
