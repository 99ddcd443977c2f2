//! Part-time I/O nodes (Panda §2): processes that compute and also serve their own disk. Here
//! four of them run in this test process, each a server and a client that reaches that server
//! in memory; a collective write from eight ranks hands every piece a rank's own server writes
//! over in memory (exactly those bytes, counted by the servers), sends the rest over sockets,
//! and reads back element for element.

use bytes::Bytes;
use ganges_client::Client;
use ganges_client::array::{self, ArraySpec, Rates};
use ganges_client::cluster::{ClusterFile, ServerEntry};
use ganges_core::array::{AllocKind, ArrayLayout, DType, Dist, Schema, generated};
use ganges_core::disk::DiskParams;
use ganges_core::ids::NodeId;
use ganges_harness::PartTime;
use ganges_harness::parttime::local_job;
use std::sync::Arc;
use std::time::Duration;

fn layout(mesh: &[u32], dist: &str) -> ArrayLayout {
    ArrayLayout::new(mesh.to_vec(), dist.split(',').map(|d| d.parse::<Dist>().unwrap()).collect()).unwrap()
}

/// Four part-time nodes in this process, with a fast disk model.
async fn start(dir: &std::path::Path) -> Vec<PartTime> {
    let disk = DiskParams { rate_bytes_per_sec: 200.0 * 1048576.0, seek: Duration::from_micros(200), queue_depth: 1 };
    local_job(4, dir, |mut c| {
        c.disk = Some(disk);
        c
    })
    .await
    .expect("four part-time nodes start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_time_nodes_take_their_own_pieces_in_memory_and_the_array_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start(dir.path()).await;
    let file = nodes[0].client().cluster().clone();
    let clients: Vec<Arc<Client>> = nodes.iter().map(|p| p.client().clone()).collect();
    for (k, c) in clients.iter().enumerate() {
        assert_eq!(c.local_node(), Some(NodeId(k as u32)));
    }
    // 2 MiB of f32 from 8 ranks (2×4 BLOCK), rows on disk over the 4 nodes, 128 KiB subchunks;
    // rank r is a process of node r % 4.
    let schema = Schema::new(vec![512, 1024], DType::F32).unwrap();
    for alloc in AllocKind::ALL {
        let before: Vec<u64> = nodes.iter().map(|p| p.local_traffic().1).collect();
        let name = format!("part-{alloc}");
        let mut spec = ArraySpec::new(
            name.parse().unwrap(),
            schema.clone(),
            layout(&[2, 4], "BLOCK,BLOCK"),
            layout(&[4], "BLOCK,*"),
            alloc,
        );
        spec.threshold = 128 << 10;
        spec.generated = true;
        let chunks: Vec<Bytes> =
            (0..spec.ranks()).map(|r| Bytes::from(generated(&schema, &spec.memory.chunk(&schema, r)))).collect();
        let report = array::write_ranks(&clients, &spec, &Rates::default(), chunks).await.expect("write");
        // What each node's own ranks held of the subchunks it wrote went over in memory.
        let meta = report.manifest.array.as_ref().unwrap();
        let subs = meta.subchunks().unwrap();
        let elem = u64::from(schema.dtype.size());
        let mut want = vec![0u64; 4];
        for (i, place) in meta.places.iter().enumerate() {
            for r in (0..spec.ranks()).filter(|r| r % 4 == place.fragment) {
                want[place.fragment as usize] +=
                    spec.memory.chunk(&schema, r).intersect(&subs.boxes[i]).elements() * elem;
            }
        }
        let got: Vec<u64> = nodes.iter().zip(&before).map(|(p, b)| p.local_traffic().1 - b).collect();
        assert_eq!(got, want, "{alloc}: bytes each node took in memory");
        assert!(got.iter().sum::<u64>() > 0 && got.iter().sum::<u64>() < schema.bytes(), "{alloc}: {got:?}");
        // Read back by a plain client into another layout.
        let reader = Client::connect(file.clone()).await.unwrap();
        let manifest = Arc::new(reader.manifest(&spec.name).await.unwrap());
        let other = layout(&[4, 1], "CYCLIC(3),*");
        for r in 0..other.positions() {
            let back = array::read_chunk(&reader, &manifest, &other, r).await.expect("read");
            assert!(back == generated(&schema, &other.chunk(&schema, r)), "{alloc}: chunk {r} differs");
        }
    }
    // Natural chunking, one process per node: static allocation keeps every subchunk in its
    // process; stealing plans the same, and dynamic hands each server its own first, but a
    // server that runs out first may take a few at the end; round-robin moves three quarters.
    for (alloc, local) in [
        (AllocKind::Static, 1.0..=1.0),
        (AllocKind::Steal, 0.5..=1.0),
        (AllocKind::Dynamic, 0.5..=1.0),
        (AllocKind::RoundRobin, 0.25..=0.25),
    ] {
        let before: u64 = nodes.iter().map(|p| p.local_traffic().1).sum();
        let rows = layout(&[4], "BLOCK,*");
        let mut spec =
            ArraySpec::new(format!("natural-{alloc}").parse().unwrap(), schema.clone(), rows.clone(), rows, alloc);
        spec.threshold = 128 << 10;
        let chunks: Vec<Bytes> =
            (0..4).map(|r| Bytes::from(generated(&schema, &spec.memory.chunk(&schema, r)))).collect();
        let report = array::write_ranks(&clients, &spec, &Rates(Some(vec![1e8; 4])), chunks).await.expect("write");
        let got = nodes.iter().map(|p| p.local_traffic().1).sum::<u64>() - before;
        let share = got as f64 / schema.bytes() as f64;
        assert!(local.contains(&share), "{alloc}: {share} in memory, {:?} by server", report.server_bytes);
    }
    // A stopped part-time node is down to its own client too, in memory as over sockets.
    let own = clients[1].clone();
    let mut nodes = nodes;
    nodes.remove(1).stop().await.unwrap();
    let err = own.control(NodeId(1), ganges_proto::control::ControlRequest::Stats).await.expect_err("stopped");
    assert!(matches!(err, ganges_client::ClientError::NodeDown { node: NodeId(1) }), "{err}");
    own.control(NodeId(2), ganges_proto::control::ControlRequest::Stats).await.expect("the others serve");
    for p in nodes {
        p.stop().await.unwrap();
    }
}

/// A cluster file of `n` loopback addresses free a moment ago, nobody serving them.
fn cluster_file(n: u32, dir: &std::path::Path) -> ClusterFile {
    let entries = (0..n)
        .map(|k| {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut e = ServerEntry::new(NodeId(k), format!("127.0.0.1:{port}"));
            e.data_dir = Some(dir.join(format!("node-{k}")));
            e
        })
        .collect();
    ClusterFile::new(entries).unwrap()
}

#[tokio::test]
async fn a_part_time_node_whose_peers_never_start_says_which_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster_file(3, dir.path());
    let err = PartTime::start(file, NodeId(1), None, Duration::from_millis(600), |c| c).await.expect_err("alone");
    let msg = err.to_string();
    assert!(msg.contains("node0") && msg.contains("node2") && !msg.contains("node1,"), "{msg}");
    assert!(msg.contains("other processes of the job"), "{msg}");
}
