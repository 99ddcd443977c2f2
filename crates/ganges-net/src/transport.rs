//! Connect and accept: TCP, then TLS if configured, then the cluster-secret handshake if
//! the cluster has a secret (see [`crate::auth`] for the exchange).
//!
//! A refused handshake gets one typed error frame before the connection closes, so the
//! other side can say exactly why: no secret (`AuthRequired`), a wrong one (`AuthFailed`),
//! a server without one (`AuthUnsupported`), too many failures (`AuthRateLimited`), or a
//! plain client at a TLS server. Handshake frames are small and read with a small limit,
//! so nobody can make a server allocate for a frame before proving the secret.

use crate::auth::{self, Side};
use crate::limit::Limiter;
use crate::secret::Secret;
use crate::tls;
use ganges_proto::frame::{FrameHeader, HEADER_BYTES, ProtoError};
use ganges_proto::io::{READ_BUFFER_BYTES, write_frame};
use ganges_proto::msg::{ERROR_MESSAGE_MAX, ErrorCode, Message, WireError};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long a connection may take to open: long enough for a loaded machine, short enough
/// that a dead address does not stall a command.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a server waits for a handshake to finish. A peer that holds a connection open
/// without finishing it is dropped after this long (a slow-handshake attack holds nothing).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest frame body read before the handshake is done: a nonce and a proof, or an
/// error frame's message.
const HANDSHAKE_BODY_MAX: usize = ERROR_MESSAGE_MAX + 64;
/// How long a refusing side waits for the peer to read its error frame and close, so the
/// error is not lost to a reset (closing with unread bytes resets the connection).
const LINGER: Duration = Duration::from_millis(500);
/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A connection whose handshake is done: read through a buffer of
/// `ganges_proto::io::READ_BUFFER_BYTES`, written directly (frames are written whole).
pub struct Stream {
    pub rd: BufReader<BoxRead>,
    pub wr: BoxWrite,
    pub peer: SocketAddr,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({})", self.peer)
    }
}

/// Why a connection could not be opened or accepted.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("timed out")]
    TimedOut,
    #[error("TLS: {0}")]
    Tls(String),
    /// The other side refused with an error frame; its code says why.
    #[error("refused: {0}")]
    Refused(WireError),
    #[error("the server could not prove it holds the cluster secret (the two sides hold different secrets)")]
    ServerUnproven,
    #[error("the client's proof does not match this server's cluster secret")]
    BadProof,
    #[error("the connection did not begin with the cluster-secret handshake (frame kind {kind:#04x} first)")]
    NoHandshake { kind: u8 },
    #[error("a plain connection to a server that requires TLS")]
    NotTls,
    #[error("too many failed handshakes from this address; refused for {0:?} more")]
    RateLimited(Duration),
    #[error("unexpected frame kind {kind:#04x} during the handshake")]
    Unexpected { kind: u8 },
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

impl HandshakeError {
    /// Whether this failure counts against the peer's address in the limiter: a wrong or
    /// missing secret, a broken TLS handshake, a handshake left hanging. A peer that merely
    /// went away does not count.
    fn counts(&self) -> bool {
        matches!(
            self,
            HandshakeError::BadProof
                | HandshakeError::NoHandshake { .. }
                | HandshakeError::NotTls
                | HandshakeError::Tls(_)
                | HandshakeError::TimedOut
                | HandshakeError::Unexpected { .. }
        )
    }
}

/// The security of a cluster's connections, for either side. Cheap to clone (the limiter
/// is shared by clones, so a server's every accept counts against one table).
#[derive(Clone, Default)]
pub struct Transport {
    secret: Option<Secret>,
    tls_client: Option<Arc<rustls::ClientConfig>>,
    tls_server: Option<Arc<rustls::ServerConfig>>,
    limiter: Arc<Mutex<Limiter>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("secret", &self.secret)
            .field("tls_client", &self.tls_client.is_some())
            .field("tls_server", &self.tls_server.is_some())
            .finish()
    }
}

impl Transport {
    /// Plain TCP, no secret: loopback clusters.
    pub fn plain() -> Transport {
        Transport::default()
    }

    pub fn with_secret(mut self, secret: Option<Secret>) -> Transport {
        self.secret = secret;
        self
    }

    /// Connect with TLS, trusting this configuration's roots.
    pub fn with_tls_client(mut self, config: Arc<rustls::ClientConfig>) -> Transport {
        self.tls_client = Some(config);
        self
    }

    /// Accept TLS only, presenting this configuration's certificate.
    pub fn with_tls_server(mut self, config: Arc<rustls::ServerConfig>) -> Transport {
        self.tls_server = Some(config);
        self
    }

    /// A server's TLS from its PEM files: present `cert` (with `key`), and trust `ca` when
    /// reaching its peers.
    pub fn with_tls_node(self, cert: &Path, key: &Path, ca: &Path) -> Result<Transport, tls::TlsError> {
        Ok(self.with_tls_server(tls::server_config(cert, key)?).with_tls_client(tls::client_config(ca)?))
    }

    pub fn has_secret(&self) -> bool {
        self.secret.is_some()
    }

    pub fn has_tls(&self) -> bool {
        self.tls_client.is_some() || self.tls_server.is_some()
    }

    /// Open a connection to `addr` (`host:port`) and prove the secret, if there is one.
    pub async fn connect(&self, addr: &str) -> Result<Stream, HandshakeError> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.connect_inner(addr)).await.unwrap_or(Err(HandshakeError::TimedOut))
    }

    async fn connect_inner(&self, addr: &str) -> Result<Stream, HandshakeError> {
        let tcp = TcpStream::connect(addr).await.map_err(HandshakeError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let peer = tcp.peer_addr().map_err(HandshakeError::Connect)?;
        let (rd, mut wr): (BoxRead, BoxWrite) = match &self.tls_client {
            Some(config) => {
                let name = tls::server_name(addr).map_err(|e| HandshakeError::Tls(e.to_string()))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await.map_err(|e| {
                    HandshakeError::Tls(format!("{e} (does the server run with TLS, and this cluster's CA?)"))
                })?;
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
            None => {
                let (r, w) = tcp.into_split();
                (Box::new(r), Box::new(w))
            }
        };
        let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        if let Some(secret) = &self.secret {
            let client_nonce = auth::nonce();
            write_frame(&mut wr, &Message::AuthInit { nonce: client_nonce }.encode(0)).await.map_err(ProtoError::Io)?;
            let server_nonce = match read_small(&mut rd).await? {
                Message::AuthChallenge { nonce, proof } => {
                    if !auth::verify(secret, Side::Server, &client_nonce, &nonce, &proof) {
                        return Err(HandshakeError::ServerUnproven);
                    }
                    nonce
                }
                Message::Error(e, _) => return Err(HandshakeError::Refused(e)),
                other => return Err(HandshakeError::Unexpected { kind: other.kind() }),
            };
            let proof = auth::proof(secret, Side::Client, &client_nonce, &server_nonce);
            write_frame(&mut wr, &Message::AuthProof { proof }.encode(0)).await.map_err(ProtoError::Io)?;
            match read_small(&mut rd).await? {
                Message::AuthOk => {}
                Message::Error(e, _) => return Err(HandshakeError::Refused(e)),
                other => return Err(HandshakeError::Unexpected { kind: other.kind() }),
            }
        }
        Ok(Stream { rd, wr, peer })
    }

    /// Accept a connection: TLS if this server has a certificate, then the handshake if it
    /// has a secret. A refused peer gets a typed error frame; repeated failures from one
    /// address are refused at once for a while.
    pub async fn accept(&self, tcp: TcpStream) -> Result<Stream, HandshakeError> {
        let _ = tcp.set_nodelay(true);
        let peer = tcp.peer_addr().map_err(HandshakeError::Connect)?;
        let limited = self.limiter.lock().unwrap_or_else(|e| e.into_inner()).check(peer.ip(), Instant::now());
        if let Err(wait) = limited {
            let (rd, wr) = tcp.into_split();
            let why = format!(
                "too many failed handshakes from {}; try again in {} s",
                peer.ip(),
                wait.as_secs_f64().ceil() as u64
            );
            refuse(BufReader::new(Box::new(rd)), Box::new(wr), WireError::new(ErrorCode::AuthRateLimited, why)).await;
            return Err(HandshakeError::RateLimited(wait));
        }
        let result = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.accept_inner(tcp, peer))
            .await
            .unwrap_or(Err(HandshakeError::TimedOut));
        if let Err(e) = &result
            && e.counts()
        {
            self.limiter.lock().unwrap_or_else(|e| e.into_inner()).failed(peer.ip(), Instant::now());
        }
        result
    }

    async fn accept_inner(&self, tcp: TcpStream, peer: SocketAddr) -> Result<Stream, HandshakeError> {
        let (rd, wr): (BoxRead, BoxWrite) = match &self.tls_server {
            Some(config) => {
                let mut first = [0u8; 1];
                let n = tcp.peek(&mut first).await.map_err(HandshakeError::Connect)?;
                if n == 1 && first[0] != TLS_HANDSHAKE_RECORD {
                    // A client speaking plain ganges: tell it in its own framing.
                    let (rd, wr) = tcp.into_split();
                    let why = "this server accepts TLS connections only; give the client the cluster's CA \
                               (the cluster file's [tls] ca)";
                    refuse(BufReader::new(Box::new(rd)), Box::new(wr), WireError::new(ErrorCode::AuthRequired, why))
                        .await;
                    return Err(HandshakeError::NotTls);
                }
                let tls = tokio_rustls::TlsAcceptor::from(config.clone())
                    .accept(tcp)
                    .await
                    .map_err(|e| HandshakeError::Tls(e.to_string()))?;
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
            None => {
                let (r, w) = tcp.into_split();
                (Box::new(r), Box::new(w))
            }
        };
        let mut rd = BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        let mut wr = wr;
        if let Some(secret) = &self.secret {
            let client_nonce = match read_small(&mut rd).await? {
                Message::AuthInit { nonce } => nonce,
                other => {
                    let why = "this server requires the cluster secret: give the client the cluster file's \
                               [security] secret_file (or GANGES_SECRET_FILE)";
                    refuse(rd, wr, WireError::new(ErrorCode::AuthRequired, why)).await;
                    return Err(HandshakeError::NoHandshake { kind: other.kind() });
                }
            };
            let server_nonce = auth::nonce();
            let proof = auth::proof(secret, Side::Server, &client_nonce, &server_nonce);
            write_frame(&mut wr, &Message::AuthChallenge { nonce: server_nonce, proof }.encode(0))
                .await
                .map_err(ProtoError::Io)?;
            match read_small(&mut rd).await? {
                Message::AuthProof { proof }
                    if auth::verify(secret, Side::Client, &client_nonce, &server_nonce, &proof) =>
                {
                    write_frame(&mut wr, &Message::AuthOk.encode(0)).await.map_err(ProtoError::Io)?;
                }
                Message::AuthProof { .. } => {
                    let why = "wrong cluster secret: the client's proof does not match this server's secret";
                    refuse(rd, wr, WireError::new(ErrorCode::AuthFailed, why)).await;
                    return Err(HandshakeError::BadProof);
                }
                other => {
                    let why = format!("frame kind {:#04x} in the middle of the handshake", other.kind());
                    refuse(rd, wr, WireError::new(ErrorCode::ProtocolViolation, why)).await;
                    return Err(HandshakeError::Unexpected { kind: other.kind() });
                }
            }
        }
        Ok(Stream { rd, wr, peer })
    }
}

/// Read one handshake frame, refusing bodies over `HANDSHAKE_BODY_MAX` before reading them.
async fn read_small(rd: &mut BufReader<BoxRead>) -> Result<Message, HandshakeError> {
    let mut h = [0u8; HEADER_BYTES];
    rd.read_exact(&mut h).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ProtoError::Truncated,
        _ => ProtoError::Io(e),
    })?;
    let header = FrameHeader::parse(&h)?;
    if header.body_len > HANDSHAKE_BODY_MAX {
        return Err(ProtoError::TooLarge { len: header.body_len, max: HANDSHAKE_BODY_MAX }.into());
    }
    let mut body = vec![0u8; header.body_len];
    rd.read_exact(&mut body).await.map_err(|_| ProtoError::Truncated)?;
    Ok(Message::decode(&header, body.into())?)
}

/// Refuse a connection before any handshake with a typed error frame (in plain framing:
/// a TLS client sees its handshake fail), e.g. when the server is at its connection limit.
pub async fn refuse_tcp(tcp: TcpStream, err: WireError) {
    let (rd, wr) = tcp.into_split();
    refuse(BufReader::new(Box::new(rd)), Box::new(wr), err).await;
}

/// Send one error frame, close our side, and give the peer a moment to read it before the
/// connection is dropped (bytes it sent that we never read would otherwise reset it).
async fn refuse(mut rd: BufReader<BoxRead>, mut wr: BoxWrite, err: WireError) {
    tracing::debug!(%err, "refusing a connection");
    let _ = tokio::time::timeout(LINGER, async {
        let _ = write_frame(&mut wr, &Message::Error(err, None).encode(0)).await;
        let _ = wr.shutdown().await;
        let mut sink = [0u8; 4096];
        while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ganges_proto::io::read_frame;
    use ganges_proto::msg::Hello;
    use tokio::net::TcpListener;

    fn secret(s: &str) -> Option<Secret> {
        Secret::from_bytes(s.as_bytes())
    }

    /// A server that accepts with `t` and answers every accepted connection's first frame
    /// with `AuthOk` (a stand-in for `HelloOk`), returning what `accept` said each time.
    async fn server(t: Transport) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Result<(), String>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = l.accept().await.unwrap();
                let (t, tx) = (t.clone(), tx.clone());
                tokio::spawn(async move {
                    match t.accept(tcp).await {
                        Ok(mut s) => {
                            let _ = tx.send(Ok(()));
                            if let Ok(Some(_)) = read_frame(&mut s.rd).await {
                                let _ = write_frame(&mut s.wr, &Message::AuthOk.encode(1)).await;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                });
            }
        });
        (addr, rx)
    }

    async fn hello_round_trip(s: &mut Stream) -> bool {
        let hello = Message::Hello(Hello { client: "t".into(), client_id: 0 });
        write_frame(&mut s.wr, &hello.encode(1)).await.unwrap();
        matches!(read_frame(&mut s.rd).await, Ok(Some(_)))
    }

    fn refused_with(r: Result<Stream, HandshakeError>, code: ErrorCode) {
        match r {
            Err(HandshakeError::Refused(e)) => assert_eq!(e.code, code, "{e}"),
            other => panic!("expected a refusal with {code:?}, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_right_secret_passes_and_every_wrong_one_gets_its_own_error() {
        let good = Transport::plain().with_secret(secret("the right secret, 32 bytes long!"));
        let (addr, mut accepted) = server(good.clone()).await;
        let addr = addr.to_string();
        let mut s = good.connect(&addr).await.unwrap();
        assert!(hello_round_trip(&mut s).await);
        assert_eq!(accepted.recv().await.unwrap(), Ok(()));

        let wrong = Transport::plain().with_secret(secret("a wrong secret, also 32 bytes!!!"));
        assert!(matches!(wrong.connect(&addr).await, Err(HandshakeError::ServerUnproven)));
        assert!(accepted.recv().await.unwrap().is_err());

        // No secret: the first frame is Hello, which the server refuses.
        let mut none = Transport::plain().connect(&addr).await.unwrap();
        let hello = Message::Hello(Hello { client: "t".into(), client_id: 0 });
        write_frame(&mut none.wr, &hello.encode(1)).await.unwrap();
        match read_frame(&mut none.rd).await.unwrap().map(|(h, b)| Message::decode(&h, b).unwrap()) {
            Some(Message::Error(e, None)) => assert_eq!(e.code, ErrorCode::AuthRequired),
            other => panic!("{other:?}"),
        }
        assert!(accepted.recv().await.unwrap().unwrap_err().contains("did not begin"));

        // Still serving the right secret after both failures.
        let mut s = good.connect(&addr).await.unwrap();
        assert!(hello_round_trip(&mut s).await);
    }

    /// A client proof taken from one connection fails on the next: the server's nonce differs.
    #[tokio::test]
    async fn a_replayed_handshake_is_refused() {
        let key = secret("the right secret, 32 bytes long!").unwrap();
        let (addr, mut accepted) = server(Transport::plain().with_secret(Some(key.clone()))).await;
        let replay = async |client_nonce: [u8; 32], proof: Option<[u8; 32]>| {
            let mut s = Transport::plain().connect(&addr.to_string()).await.unwrap();
            write_frame(&mut s.wr, &Message::AuthInit { nonce: client_nonce }.encode(0)).await.unwrap();
            let Message::AuthChallenge { nonce, .. } = read_small(&mut s.rd).await.unwrap() else { panic!() };
            let proof = proof.unwrap_or_else(|| auth::proof(&key, Side::Client, &client_nonce, &nonce));
            write_frame(&mut s.wr, &Message::AuthProof { proof }.encode(0)).await.unwrap();
            (read_small(&mut s.rd).await.unwrap(), proof)
        };
        let cn = [7u8; 32];
        let (first, recorded) = replay(cn, None).await;
        assert_eq!(first, Message::AuthOk);
        assert_eq!(accepted.recv().await.unwrap(), Ok(()));
        let (second, _) = replay(cn, Some(recorded)).await;
        assert!(matches!(second, Message::Error(ref e, None) if e.code == ErrorCode::AuthFailed), "{second:?}");
    }

    /// A client that opens a connection and says nothing is dropped after the handshake's
    /// time; one that announces an oversized handshake frame is dropped at once.
    #[tokio::test(start_paused = true)]
    async fn silent_and_oversized_handshakes_are_dropped() {
        let key = secret("the right secret, 32 bytes long!");
        let (addr, mut accepted) = server(Transport::plain().with_secret(key)).await;
        let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let began = tokio::time::Instant::now();
        let said = accepted.recv().await.unwrap().unwrap_err();
        assert_eq!(said, HandshakeError::TimedOut.to_string());
        assert!(began.elapsed() >= HANDSHAKE_TIMEOUT, "dropped after {:?}", began.elapsed());

        let mut big = Transport::plain().connect(&addr.to_string()).await.unwrap();
        let mut h = [0u8; HEADER_BYTES];
        FrameHeader::write(ganges_proto::msg::kind::AUTH_INIT, 0, 1 << 20, &mut h);
        big.wr.write_all(&h).await.unwrap();
        let said = accepted.recv().await.unwrap().unwrap_err();
        assert!(said.contains("over the limit"), "{said}");
    }

    #[tokio::test]
    async fn an_address_past_its_failures_is_refused_at_once() {
        let key = secret("the right secret, 32 bytes long!");
        let (addr, _accepted) = server(Transport::plain().with_secret(key.clone())).await;
        // Frames before the handshake count against the address (a client with a wrong
        // secret gives up at the server's proof and sends nothing the server could count).
        for _ in 0..crate::limit::FAILURES_MAX {
            let mut s = Transport::plain().connect(&addr.to_string()).await.unwrap();
            let _ = write_frame(&mut s.wr, &Message::Cancel.encode(1)).await;
            let _ = read_frame(&mut s.rd).await;
        }
        let right = Transport::plain().with_secret(key);
        refused_with(right.connect(&addr.to_string()).await, ErrorCode::AuthRateLimited);
    }

    #[tokio::test]
    async fn tls_carries_the_handshake_and_a_plain_client_is_told_to_use_tls() {
        let dir = tempfile::tempdir().unwrap();
        let certs = tls::generate(dir.path(), &["127.0.0.1".to_string()]).unwrap();
        let key = secret("the right secret, 32 bytes long!");
        let (cert, pkey) = &certs.nodes[0];
        let srv = Transport::plain().with_secret(key.clone()).with_tls_server(tls::server_config(cert, pkey).unwrap());
        let (addr, _accepted) = server(srv).await;
        let cli =
            Transport::plain().with_secret(key.clone()).with_tls_client(tls::client_config(&certs.ca_cert).unwrap());
        let mut s = cli.connect(&addr.to_string()).await.unwrap();
        assert!(hello_round_trip(&mut s).await);
        refused_with(Transport::plain().with_secret(key).connect(&addr.to_string()).await, ErrorCode::AuthRequired);
    }
}
