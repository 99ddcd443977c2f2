//! Bad input on the wire and at the API: typed errors, closed connections, no crash, and the
//! server keeps serving everyone else.

mod common;

use common::{create, start};
use ganges_client::ClientError;
use ganges_client::client::Client;
use ganges_client::cluster::{ClusterFile, ServerEntry};
use ganges_client::scan::{ReadOptions, ReadStream};
use ganges_core::datagen::Generator;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::sched::{Progress, ProgressMetric, Service};
use ganges_core::shape::Partition;
use ganges_proto::frame::{FrameHeader, HEADER_BYTES};
use ganges_proto::msg::{ErrorCode, Hello, Message, ReadReq, kind};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// Send raw bytes; return the error frame the server answers with, and whether it then
/// closed the connection.
fn raw(addr: String, bytes: &[u8]) -> (Option<ErrorCode>, bool) {
    let mut s = TcpStream::connect(addr.as_str()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut code = None;
    loop {
        let mut h = [0u8; HEADER_BYTES];
        if s.read_exact(&mut h).is_err() {
            return (code, true);
        }
        let header = FrameHeader::parse(&h).unwrap();
        let mut body = vec![0u8; header.body_len];
        s.read_exact(&mut body).unwrap();
        if let Ok(Message::Error(e, _)) = Message::decode(&header, body.into()) {
            code = Some(e.code);
        }
    }
}

/// A read of `len` bytes from `start` in block `block` of `fragment` of `dataset`.
fn read_of(dataset: &str, fragment: u32, block: u32, start: u32, len: u32) -> Message {
    Message::Read(ReadReq {
        stream: 1,
        progress: Progress { done_bytes: 0, total_bytes: 1, metric: ProgressMetric::Bytes },
        service: Service::FURTHEST_BEHIND,
        dataset: dataset.parse().unwrap(),
        fragment: FragmentId(fragment),
        block,
        start_in_block: start,
        len,
    })
}

fn hello() -> Vec<u8> {
    Message::Hello(Hello { client: "test".into(), client_id: 0 }).encode(1).to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversized_and_out_of_order_frames_get_typed_errors() {
    let c = start(1, None);
    let addr = c.local.cluster().servers[0].addr.clone();
    let client = c.client().await;
    create(&client, "ok", vec![100_000], 16 << 10, 1, Generator::Random { seed: 1 }).await;

    // Garbage: a header with a wrong version.
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    })
    .await
    .unwrap();
    assert!(closed);
    assert!(
        matches!(code, Some(ErrorCode::UnsupportedVersion | ErrorCode::FrameTooLarge | ErrorCode::BadFrame)),
        "{code:?}"
    );

    // A length far over the limit: refused before anything is allocated.
    let mut big = [0u8; HEADER_BYTES];
    FrameHeader::write(kind::READ, 7, 0, &mut big);
    big[0..4].copy_from_slice(&(1u32 << 30).to_le_bytes());
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, &big)
    })
    .await
    .unwrap();
    assert_eq!((code, closed), (Some(ErrorCode::FrameTooLarge), true));

    // A read before hello.
    let read = read_of("ok", 0, 0, 0, 10);
    let bytes = read.encode(2).to_vec();
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, &bytes)
    })
    .await
    .unwrap();
    assert_eq!((code, closed), (Some(ErrorCode::ProtocolViolation), true));

    // A kind only servers send, after a proper hello.
    let mut bytes = hello();
    let ack = ganges_proto::msg::WriteOk { queue_len: 0, service_us: 0, primary_progress: None, block: 0 };
    bytes.extend(Message::WriteOk(ack).encode(3).to_vec());
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, &bytes)
    })
    .await
    .unwrap();
    assert_eq!((code, closed), (Some(ErrorCode::ProtocolViolation), true));

    // A truncated body of a fixed-layout message.
    let mut bytes = hello();
    let mut h = [0u8; HEADER_BYTES];
    FrameHeader::write(kind::READ, 4, 5, &mut h);
    bytes.extend_from_slice(&h);
    bytes.extend_from_slice(&[1, 2, 3, 4, 5]);
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, &bytes)
    })
    .await
    .unwrap();
    assert_eq!((code, closed), (Some(ErrorCode::BadFrame), true));

    // A second hello.
    let mut bytes = hello();
    bytes.extend(hello());
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, &bytes)
    })
    .await
    .unwrap();
    assert_eq!((code, closed), (Some(ErrorCode::ProtocolViolation), true));

    // The client connected before all that still works, and so does a new one.
    let m = Arc::new(client.manifest(&"ok".parse().unwrap()).await.unwrap());
    let fresh = c.client().await;
    for cl in [&client, &fresh] {
        let mut s =
            ReadStream::open(cl.clone(), m.clone(), m.shape.fragment_partitions()[0], ReadOptions::default()).unwrap();
        let mut n = 0;
        while let Some(b) = s.next().await.unwrap() {
            n += b.data.len();
        }
        assert_eq!(n, 100_000);
    }
    let stats = common::stats(&client, NodeId(0)).await;
    assert_eq!(stats.protocol_errors, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_errors_are_typed_and_keep_the_connection() {
    let c = start(2, None);
    let client = c.client().await;
    let m = Arc::new(create(&client, "d", vec![50_000, 50_000], 16 << 10, 2, Generator::Random { seed: 1 }).await);
    let conn = client.conn(NodeId(0)).unwrap().clone();
    let read = |fragment, block, start, len, name: &str| read_of(name, fragment, block, start, len);
    let code = |m: Message| match m {
        Message::Error(e, _) => e.code,
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(code(conn.call(&read(0, 0, 0, 10, "nope")).await.unwrap()), ErrorCode::UnknownDataset);
    assert_eq!(code(conn.call(&read(0, 99, 0, 10, "d")).await.unwrap()), ErrorCode::OutOfRange);
    assert_eq!(code(conn.call(&read(0, 0, 16_000, 1000, "d")).await.unwrap()), ErrorCode::OutOfRange);
    assert_eq!(code(conn.call(&read(7, 0, 0, 10, "d")).await.unwrap()), ErrorCode::OutOfRange);
    // Still open: a good read works on the same connection.
    assert!(matches!(conn.call(&read(0, 0, 0, 10, "d")).await.unwrap(), Message::ReadOk(_)));

    // Unknown dataset through the client API.
    let err = client.manifest(&"missing".parse().unwrap()).await.unwrap_err();
    assert!(matches!(err, ClientError::UnknownDataset(_)));
    assert!(err.to_string().contains("ganges dataset ls"), "{err}");

    // A partition past the end of the dataset.
    let err =
        ReadStream::open(client.clone(), m.clone(), Partition { offset: 90_000, len: 20_000 }, ReadOptions::default())
            .unwrap_err();
    assert!(err.to_string().contains("past the end"), "{err}");

    // A block size out of range.
    let err = ganges_client::dataset::create(
        &client,
        ganges_client::dataset::CreateSpec {
            name: "tiny-blocks".parse().unwrap(),
            fragment_bytes: vec![10_000; 2],
            block_bytes: 1024,
            replicas: 2,
            generator: Generator::Random { seed: 1 },
        },
        None,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("4KiB to 16MiB"), "{err}");

    // Creating a name that exists.
    let err = ganges_client::dataset::create(
        &client,
        ganges_client::dataset::CreateSpec {
            name: "d".parse().unwrap(),
            fragment_bytes: vec![10_000; 2],
            block_bytes: 4096,
            replicas: 2,
            generator: Generator::Random { seed: 1 },
        },
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::DatasetExists));
    let (list, _) = ganges_client::dataset::list(&client, true).await.unwrap();
    assert_eq!(list.len(), 1, "the failed create left no staging behind: {list:?}");
}

#[tokio::test]
async fn a_cluster_file_naming_no_running_server_says_what_to_do() {
    // Bind and drop a listener: nothing listens on that port now.
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let file = ClusterFile::new(vec![ServerEntry::new(NodeId(0), addr.to_string())]).unwrap();
    let err = Client::connect(file).await.unwrap_err();
    assert!(matches!(err, ClientError::NoServers { .. }));
    assert!(err.to_string().contains("ganges local up"), "{err}");
}

/// A client that sends reads and never reads its replies: the server stops reading it once
/// its unsent replies pass their bound, its memory stays bounded, and another client's scan
/// runs as if it were not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_pins_bounded_memory_and_stalls_no_one() {
    let c = start(1, None);
    let addr = c.local.cluster().servers[0].addr.clone();
    let client = c.client().await;
    const BLOCK: u32 = 64 << 10;
    create(&client, "d", vec![8 << 20], BLOCK, 1, Generator::Random { seed: 3 }).await;
    let rss = |s: &ganges_proto::control::ServerStats| s.rss_bytes;
    let before = rss(&stats(&client).await);
    // 5,000,000 reads of a whole block: 330 GB of replies, were they all kept. The server
    // admits 1,024 at a time and refuses the rest with an error frame each; served blocks
    // and refusals both count against the bound, so the client stops being read however
    // fast the server serves.
    const READS: u64 = 5_000_000;
    let abuser = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr.as_str()).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        s.write_all(&hello()).unwrap();
        let mut sent = 0u64;
        for i in 0..READS {
            let read = read_of("d", 0, (i % 128) as u32, 0, BLOCK);
            // The server stops reading: the socket's buffers fill and the write times out.
            if s.write_all(&read.encode(i + 2).to_vec()).is_err() {
                break;
            }
            sent += 1;
        }
        (s, sent)
    });
    let (socket, sent) = tokio::task::spawn_blocking(move || abuser.join().unwrap()).await.unwrap();
    assert!(sent < READS, "the server read all {sent} requests of a client that reads nothing");
    // Meanwhile, and still, another client reads the whole dataset.
    let m = Arc::new(client.manifest(&"d".parse().unwrap()).await.unwrap());
    let started = std::time::Instant::now();
    let mut s =
        ReadStream::open(client.clone(), m.clone(), m.shape.fragment_partitions()[0], ReadOptions::default()).unwrap();
    let mut n = 0;
    while let Some(b) = s.next().await.unwrap() {
        n += b.data.len();
    }
    assert_eq!(n, 8 << 20);
    assert!(started.elapsed() < Duration::from_secs(10), "the scan took {:?}", started.elapsed());
    let grown = rss(&stats(&client).await).saturating_sub(before);
    let bound = ganges_server::conn::UNSENT_PER_CONNECTION_MAX
        + ganges_server::conn::INFLIGHT_PER_CONNECTION_MAX as u64 * BLOCK as u64;
    eprintln!(
        "{sent} requests sent before the server stopped reading; it grew by {} MiB (bound {} MiB)",
        grown >> 20,
        bound >> 20
    );
    assert!(grown < bound + (32 << 20), "the server grew by {grown} bytes");
    drop(socket);
}

/// Past `--max-connections` a connection is refused with a typed error; the server serves
/// the connections it has, and new ones once some close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_refused_with_a_typed_error() {
    let cluster = ganges_harness::inproc::InProcessCluster::start_with(1, |c| ganges_server::ServerConfig {
        max_connections: 8,
        ..c
    })
    .await
    .unwrap();
    let addr = cluster.cluster().servers[0].addr.clone();
    // The connection that set the cluster up closes in the background: let it go first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held: Vec<TcpStream> = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || {
            (0..8)
                .map(|i| {
                    let mut s = TcpStream::connect(addr.as_str()).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    s.write_all(&hello()).unwrap();
                    let mut h = [0u8; HEADER_BYTES];
                    s.read_exact(&mut h).unwrap();
                    assert_eq!(FrameHeader::parse(&h).unwrap().kind, kind::HELLO_OK, "connection {i} is admitted");
                    s
                })
                .collect()
        }
    })
    .await
    .unwrap();
    let (code, closed) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw(addr, &hello())
    })
    .await
    .unwrap();
    assert_eq!((code, closed), (Some(ErrorCode::TooManyConnections), true));
    let err = Client::connect(cluster.cluster().clone()).await.map(|_| ()).expect_err("refused");
    assert!(err.to_string().contains("--max-connections"), "{err}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = Client::connect(cluster.cluster().clone()).await.expect("room again");
    assert_eq!(stats(&client).await.refused_connections, 2);
}

async fn stats(client: &Client) -> ganges_proto::control::ServerStats {
    common::stats(client, NodeId(0)).await
}
