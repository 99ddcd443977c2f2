//! The cluster secret on a real server, in process (`ganges_server::run` on port 0): every
//! way a connection can fail the handshake gets its own typed refusal, and the server goes on
//! serving the clients that hold the secret.

use ganges_core::ids::NodeId;
use ganges_net::{HandshakeError, Secret, Transport};
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::io::{read_frame, write_frame};
use ganges_proto::msg::{ErrorCode, Hello, Message};
use ganges_server::{ServeError, ServerConfig};
use std::os::unix::fs::PermissionsExt;
use tokio::net::TcpListener;

const KEY: &str = "a secret of the cluster, 32 bytes";

fn secret(s: &str) -> Option<Secret> {
    Secret::from_bytes(s.as_bytes())
}

/// A server with `transport`, listening on loopback; stops when the returned sender drops.
async fn server(transport: Transport) -> (String, tempfile::TempDir, tokio::sync::oneshot::Sender<()>) {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig { transport, ..ServerConfig::new(NodeId(0), dir.path().to_path_buf()) };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        ganges_server::run(config, listener, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (addr, dir, stop)
}

/// Hello, then Stats: a connection the server really serves. Returns its handshake failures.
async fn served(transport: &Transport, addr: &str) -> u64 {
    let mut s = transport.connect(addr).await.expect("the handshake passes");
    write_frame(&mut s.wr, &Message::Hello(Hello { client: "t".into(), client_id: 0 }).encode(1)).await.unwrap();
    write_frame(&mut s.wr, &Message::Control(ControlRequest::Stats).encode(2)).await.unwrap();
    loop {
        let (h, body) = read_frame(&mut s.rd).await.unwrap().expect("an answer");
        match Message::decode(&h, body).unwrap() {
            Message::HelloOk(_) => continue,
            Message::ControlOk(r) => match *r {
                ControlReply::Stats { stats } => {
                    assert!(stats.secret, "the server says it requires the secret");
                    return stats.handshake_failures;
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

/// The error frame a plain connection gets after sending `first`.
async fn refusal_of(addr: &str, first: Message) -> ErrorCode {
    let mut s = Transport::plain().connect(addr).await.unwrap();
    write_frame(&mut s.wr, &first.encode(1)).await.unwrap();
    let (h, body) = read_frame(&mut s.rd).await.unwrap().expect("an error frame before the close");
    let Message::Error(e, None) = Message::decode(&h, body).unwrap() else { panic!("not an error frame") };
    assert!(read_frame(&mut s.rd).await.map_or(true, |f| f.is_none()), "then the connection closes");
    e.code
}

#[tokio::test]
async fn every_handshake_failure_is_refused_with_its_own_error_and_the_rest_are_served() {
    let good = Transport::plain().with_secret(secret(KEY));
    let (addr, _dir, _stop) = server(good.clone()).await;
    assert_eq!(served(&good, &addr).await, 0);

    // A wrong secret: the client finds the server cannot prove it holds the client's secret.
    let wrong = Transport::plain().with_secret(secret("another secret, also 32 bytes..."));
    assert!(matches!(wrong.connect(&addr).await, Err(HandshakeError::ServerUnproven)));
    // No secret at all: the first frame is a hello, refused as AuthRequired.
    let hello = Message::Hello(Hello { client: "t".into(), client_id: 0 });
    assert_eq!(refusal_of(&addr, hello).await, ErrorCode::AuthRequired);
    // A frame before the handshake, of any kind, likewise.
    assert_eq!(refusal_of(&addr, Message::Control(ControlRequest::Stats)).await, ErrorCode::AuthRequired);
    // A proof that is not the secret's.
    let mut s = Transport::plain().connect(&addr).await.unwrap();
    write_frame(&mut s.wr, &Message::AuthInit { nonce: [1; 32] }.encode(0)).await.unwrap();
    let (h, b) = read_frame(&mut s.rd).await.unwrap().unwrap();
    assert!(matches!(Message::decode(&h, b).unwrap(), Message::AuthChallenge { .. }));
    write_frame(&mut s.wr, &Message::AuthProof { proof: [2; 32] }.encode(0)).await.unwrap();
    let (h, b) = read_frame(&mut s.rd).await.unwrap().unwrap();
    assert!(matches!(Message::decode(&h, b).unwrap(), Message::Error(e, None) if e.code == ErrorCode::AuthFailed));

    // A replay: the frames of a good handshake, recorded, sent again on a new connection.
    let key = secret(KEY).unwrap();
    let handshake = async |recorded: Option<[u8; 32]>| {
        let mut s = Transport::plain().connect(&addr).await.unwrap();
        let client_nonce = [9u8; 32];
        write_frame(&mut s.wr, &Message::AuthInit { nonce: client_nonce }.encode(0)).await.unwrap();
        let (h, b) = read_frame(&mut s.rd).await.unwrap().unwrap();
        let Message::AuthChallenge { nonce, .. } = Message::decode(&h, b).unwrap() else { panic!() };
        let proof = recorded
            .unwrap_or_else(|| ganges_net::auth::proof(&key, ganges_net::auth::Side::Client, &client_nonce, &nonce));
        write_frame(&mut s.wr, &Message::AuthProof { proof }.encode(0)).await.unwrap();
        let (h, b) = read_frame(&mut s.rd).await.unwrap().unwrap();
        (Message::decode(&h, b).unwrap(), proof)
    };
    let (first, recorded) = handshake(None).await;
    assert_eq!(first, Message::AuthOk);
    let (replayed, _) = handshake(Some(recorded)).await;
    assert!(matches!(replayed, Message::Error(ref e, None) if e.code == ErrorCode::AuthFailed), "{replayed:?}");

    // Still serving the right secret, and it counted the refusals (the wrong secret's client
    // gave up before sending a proof, so four).
    assert_eq!(served(&good, &addr).await, 4);
}

#[tokio::test]
async fn a_server_without_a_secret_refuses_a_handshake_and_a_non_loopback_listen() {
    let (addr, _dir, _stop) = server(Transport::plain()).await;
    let with = Transport::plain().with_secret(secret(KEY));
    match with.connect(&addr).await {
        Err(HandshakeError::Refused(e)) => assert_eq!(e.code, ErrorCode::AuthUnsupported, "{e}"),
        other => panic!("{other:?}"),
    }
    // Every address of this machine that is not loopback would do; 0.0.0.0 is one.
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let r = ganges_server::run(ServerConfig::new(NodeId(0), dir.path().to_path_buf()), listener, async {}).await;
    assert!(matches!(r, Err(ServeError::NoSecret(_))), "{r:?}");
}

#[test]
fn a_secret_file_others_can_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = Secret::load(&path).unwrap_err().to_string();
    assert!(e.contains("chmod 600"), "{e}");
}
