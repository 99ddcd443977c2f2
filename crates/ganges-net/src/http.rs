//! Just enough HTTP/1.1 for ganges's own pages: the metrics endpoint and the dashboard.
//!
//! One request per connection (`Connection: close`), a bounded head and body, a fixed set of
//! routes. Written here rather than taken from hyper because that is all it needs: a few
//! dozen lines against a stack of crates, and the same code serves both users.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A request's head larger than this is refused.
pub const HEAD_MAX: usize = 8 << 10;
/// A request's body larger than this is refused.
pub const BODY_MAX: usize = 64 << 10;

/// A parsed request: method, path without its query, and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("request head or body too large")]
    TooLarge,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Read one request. `Ok(None)`: the peer closed before sending one.
pub async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Option<Request>, HttpError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        let found = buf.windows(4).position(|w| w == b"\r\n\r\n");
        if found.unwrap_or(buf.len()) > HEAD_MAX {
            return Err(HttpError::TooLarge);
        }
        if let Some(i) = found {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return if buf.is_empty() { Ok(None) } else { Err(HttpError::Malformed("cut short")) };
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| HttpError::Malformed("head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, target) = match (first.next(), first.next()) {
        (Some(m), Some(t)) if !m.is_empty() && t.starts_with('/') => (m.to_string(), t),
        _ => return Err(HttpError::Malformed("request line")),
    };
    let path = target.split('?').next().unwrap_or("/").to_string();
    let mut length = 0usize;
    for line in lines {
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().map_err(|_| HttpError::Malformed("content-length"))?;
        }
    }
    if length > BODY_MAX {
        return Err(HttpError::TooLarge);
    }
    let mut body = buf.split_off(head_end);
    if body.len() < length {
        let have = body.len();
        body.resize(length, 0);
        stream.read_exact(&mut body[have..]).await?;
    }
    body.truncate(length);
    Ok(Some(Request { method, path, body }))
}

/// Write a whole response and close the sending side.
pub async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    kind: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

/// The answer to a request that could not be read.
pub async fn respond_error<S: AsyncWrite + Unpin>(stream: &mut S, e: &HttpError) -> std::io::Result<()> {
    match e {
        HttpError::TooLarge => respond(stream, "413 Content Too Large", "text/plain", b"request too large\n").await,
        HttpError::Malformed(_) => respond(stream, "400 Bad Request", "text/plain", format!("{e}\n").as_bytes()).await,
        HttpError::Io(_) => Ok(()),
    }
}

/// Start a stream of server-sent events; then write each with [`sse_event`].
pub async fn sse_start<S: AsyncWrite + Unpin>(stream: &mut S) -> std::io::Result<()> {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await?;
    stream.flush().await
}

/// One server-sent event named `event` carrying `data` (one line: no newlines in it).
pub async fn sse_event<S: AsyncWrite + Unpin>(stream: &mut S, event: &str, data: &str) -> std::io::Result<()> {
    debug_assert!(!data.contains('\n'));
    let frame = format!("event: {event}\ndata: {data}\n\n");
    stream.write_all(frame.as_bytes()).await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(raw: &[u8]) -> Result<Option<Request>, HttpError> {
        let mut r = raw;
        read_request(&mut r).await
    }

    #[tokio::test]
    async fn reads_a_get_and_a_post_with_its_body() {
        let get = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap().unwrap();
        assert_eq!((get.method.as_str(), get.path.as_str(), get.body.len()), ("GET", "/metrics", 0));
        let post =
            parse(b"POST /api/fault HTTP/1.1\r\ncontent-length: 7\r\n\r\n{\"a\":1}trailing").await.unwrap().unwrap();
        assert_eq!((post.method.as_str(), post.body.as_slice()), ("POST", &b"{\"a\":1}"[..]));
    }

    #[tokio::test]
    async fn refuses_what_is_malformed_or_too_large() {
        assert!(parse(b"").await.unwrap().is_none());
        assert!(matches!(parse(b"GET").await, Err(HttpError::Malformed(_))));
        assert!(matches!(parse(b"NONSENSE\r\n\r\n").await, Err(HttpError::Malformed(_))));
        assert!(matches!(parse(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").await, Err(HttpError::Malformed(_))));
        let big = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", BODY_MAX + 1);
        assert!(matches!(parse(big.as_bytes()).await, Err(HttpError::TooLarge)));
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(HEAD_MAX + 10));
        assert!(matches!(parse(long.as_bytes()).await, Err(HttpError::TooLarge)));
        assert!(matches!(parse(b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc").await, Err(HttpError::Io(_))));
    }
}
