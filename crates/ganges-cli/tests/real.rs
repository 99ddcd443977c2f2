//! Real clusters and real faults, on this machine: servers in network namespaces of their
//! own, direct I/O, the kernel's block-I/O throttle, a competing reader, shaped links, a
//! cluster file of `host:port`s with a secret and TLS, and what is left when a supervisor
//! dies. Each test that needs what a machine may lack (root, namespaces, cgroup v1 blkio,
//! a file system that takes direct I/O) says so and why when it cannot run.

mod common;

use common::{Down, binary, ok};
use ganges_client::ClientError;
use ganges_client::client::Client;
use ganges_client::scan::{ReadOptions, ReadStream};
use ganges_core::datagen::Generator;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::route::ReadPolicyKind;
use ganges_core::shape::Partition;
use ganges_harness::local::{LocalCluster, LocalSpec};
use ganges_proto::control::{ControlRequest, RealFaults, ServerStats};
use ganges_proto::msg::ErrorCode;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::skip;

fn netns_unavailable() -> Option<String> {
    ganges_harness::netns::unavailable()
}

fn blkio_unavailable() -> Option<String> {
    if !Path::new("/sys/fs/cgroup/blkio/cgroup.procs").exists() {
        return Some("no cgroup-v1 blkio hierarchy at /sys/fs/cgroup/blkio".into());
    }
    (!rustix::process::geteuid().is_root()).then(|| "kernel throttles need root".into())
}

/// A folder for a cluster whose servers use direct I/O, or why there is none.
fn direct_root() -> Result<tempfile::TempDir, String> {
    let d = tempfile::tempdir().map_err(|e| e.to_string())?;
    ganges_server::direct::probe(d.path())
        .map(|()| d)
        .map_err(|e| format!("the temp folder does not take direct I/O ({e})"))
}

async fn stats(client: &Client, node: u32) -> ServerStats {
    common::stats(client, NodeId(node)).await
}

/// Seconds to read fragment `f` whole from its primary copy (the static policy).
async fn read_fragment(client: &Arc<Client>, manifest: &Arc<ganges_proto::manifest::Manifest>, f: u32) -> f64 {
    let shape = &manifest.shape;
    let part = Partition { offset: shape.fragment_start(FragmentId(f)), len: shape.fragment_bytes(FragmentId(f)) };
    let t = Instant::now();
    let mut s =
        ReadStream::open(client.clone(), manifest.clone(), part, ReadOptions::new(ReadPolicyKind::Static)).unwrap();
    while s.next().await.unwrap().is_some() {}
    t.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_netns_cluster_serves_across_namespaces_with_its_secret_and_a_link_fault_slows_one_link() {
    if let Some(why) = netns_unavailable() {
        return skip(&why);
    }
    let root = tempfile::tempdir().unwrap();
    let spec = LocalSpec { netns: true, ..LocalSpec::new(3, root.path().to_path_buf(), None, binary()) };
    let local = LocalCluster::start(&spec).unwrap();
    let file = local.cluster().clone();
    assert!(file.servers.iter().all(|s| !s.addr.starts_with("127.")), "own addresses: {:?}", file.servers);
    assert!(file.security.secret_file.is_some());
    let client = Client::connect(file.clone()).await.unwrap();
    let m = common::create(&client, "ns", vec![32 << 20; 3], 1 << 20, 2, Generator::Random { seed: 3 }).await;
    let m = Arc::new(m);

    // Without the secret, every server refuses, and the client says which and why.
    let mut plain = file.clone();
    plain.security.secret_file = None;
    match Client::connect(plain).await {
        Err(ClientError::Refused { err, .. }) => assert_eq!(err.code, ErrorCode::AuthRequired, "{err}"),
        other => panic!("{other:?}"),
    }
    // With another secret, too: refused for it, not reported as servers that are down.
    let other_secret = root.path().join("other-secret");
    ganges_net::Secret::generate(&other_secret).unwrap();
    let mut wrong = file.clone();
    wrong.security.secret_file = Some(other_secret);
    match Client::connect(wrong).await {
        Err(ClientError::Refused { err, .. }) => assert_eq!(err.code, ErrorCode::AuthFailed, "{err}"),
        other => panic!("{other:?}"),
    }

    // A link shaped to 16 MiB/s makes its fragment take about 2 s (32 MiB); clearing it
    // gives the link back.
    let before = read_fragment(&client, &m, 1).await;
    let faults = RealFaults { link_bytes_per_sec: Some(16 << 20), ..Default::default() };
    client.control(NodeId(1), ControlRequest::SetRealFaults { faults: faults.clone() }).await.unwrap();
    assert_eq!(stats(&client, 1).await.real_faults, faults);
    let shaped = read_fragment(&client, &m, 1).await;
    assert!(shaped > 1.5 && shaped > 4.0 * before, "shaped {shaped:.2} s, before {before:.2} s");
    let other = read_fragment(&client, &m, 0).await;
    assert!(other < shaped / 3.0, "another server's link is not shaped: {other:.2} s");
    client.control(NodeId(1), ControlRequest::SetRealFaults { faults: RealFaults::default() }).await.unwrap();
    let after = read_fragment(&client, &m, 1).await;
    assert!(after < shaped / 3.0, "cleared: {after:.2} s against {shaped:.2} s shaped");
    assert!(stats(&client, 1).await.real_faults.is_none());
}

#[test]
fn a_killed_supervisor_leaves_no_server_or_namespace_and_the_next_up_removes_its_bridge() {
    if let Some(why) = netns_unavailable() {
        return skip(&why);
    }
    let root = tempfile::tempdir().unwrap();
    let cluster = root.path().join("cluster.toml");
    let c = cluster.to_str().unwrap();
    let _down = Down(cluster.clone());
    ok(&["local", "up", "--nodes", "2", "--netns", "--disk-rate", "off", "--root", root.path().to_str().unwrap()]);
    let file = ganges_client::cluster::ClusterFile::load(&cluster).unwrap();
    let pid = file.local.as_ref().unwrap().supervisor_pid;
    let bridge = format!("gbr-{pid}");
    let links =
        || String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout).to_string();
    assert!(links().contains(&bridge));
    assert!(ganges_harness::sys::signal(pid, ganges_harness::sys::SIGKILL));
    // The servers die with their supervisor (PDEATHSIG), and their namespaces with them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::processes_with(c).is_empty() || links().contains(&format!("gv{pid}-")) {
        assert!(Instant::now() < deadline, "servers or veths outlived their supervisor: {}", links());
        std::thread::sleep(Duration::from_millis(50));
    }
    let netns =
        String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).to_string();
    assert!(!netns.contains(&format!("gns-{pid}-")), "no namespace name is left: {netns}");
    // Only the bridge is left, and the next netns cluster removes it.
    assert!(links().contains(&bridge));
    let root2 = tempfile::tempdir().unwrap();
    let c2 = root2.path().join("cluster.toml");
    let _down2 = Down(c2.clone());
    ok(&["local", "up", "--nodes", "1", "--netns", "--disk-rate", "off", "--root", root2.path().to_str().unwrap()]);
    assert!(!links().contains(&bridge), "the stale bridge is removed");
    ok(&["local", "down", "--cluster", c2.to_str().unwrap()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_throttle_caps_one_server_with_direct_io_and_clearing_removes_it() {
    if let Some(why) = blkio_unavailable() {
        return skip(&why);
    }
    let root = match direct_root() {
        Ok(r) => r,
        Err(why) => return skip(&why),
    };
    let spec = LocalSpec { direct_io: true, ..LocalSpec::new(2, root.path().to_path_buf(), None, binary()) };
    let local = LocalCluster::start(&spec).unwrap();
    let client = Client::connect(local.cluster().clone()).await.unwrap();
    let m = common::create(&client, "k", vec![24 << 20; 2], 1 << 20, 1, Generator::Random { seed: 5 }).await;
    let m = Arc::new(m);
    assert!(stats(&client, 1).await.direct_io);

    let faults = RealFaults { kernel_read_bytes_per_sec: Some(12 << 20), ..Default::default() };
    client.control(NodeId(1), ControlRequest::SetRealFaults { faults }).await.unwrap();
    let group = Path::new("/sys/fs/cgroup/blkio").join(format!("ganges-node1-{}", local.pid(NodeId(1)).unwrap()));
    let limit = std::fs::read_to_string(group.join("blkio.throttle.read_bps_device")).unwrap();
    assert!(limit.trim().ends_with(&(12u64 << 20).to_string()), "{limit}");
    // 24 MiB at 12 MiB/s: about 2 s, every read from the disk (direct I/O), none from memory.
    let capped = read_fragment(&client, &m, 1).await;
    assert!((1.6..4.0).contains(&capped), "capped read took {capped:.2} s");
    let free = read_fragment(&client, &m, 0).await;
    assert!(free < capped / 3.0, "the other server is not capped: {free:.2} s");

    client.control(NodeId(1), ControlRequest::SetRealFaults { faults: RealFaults::default() }).await.unwrap();
    assert!(!group.exists(), "the throttle group is removed with the fault");
    let after = read_fragment(&client, &m, 1).await;
    assert!(after < capped / 3.0, "cleared: {after:.2} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_competing_reader_runs_while_its_fault_is_set_and_dies_with_its_server() {
    if let Some(why) = blkio_unavailable() {
        return skip(&why);
    }
    let root = match direct_root() {
        Ok(r) => r,
        Err(why) => return skip(&why),
    };
    let spec = LocalSpec { direct_io: true, ..LocalSpec::new(2, root.path().to_path_buf(), None, binary()) };
    let mut local = LocalCluster::start(&spec).unwrap();
    let client = Client::connect(local.cluster().clone()).await.unwrap();
    let readers = || {
        common::processes_with(&format!("{}", root.path().join("node-1").display()))
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("compete"))
            })
            .count()
    };
    // The fault is acknowledged once the reader reads: its file made, the reader running.
    let file = root.path().join("node-1/data").join(ganges_server::realfault::COMPETE_FILE);
    let reading = |readers: &dyn Fn() -> usize| {
        assert_eq!(readers(), 1, "competing readers once the fault is acknowledged");
        let len = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        assert_eq!(len, ganges_server::realfault::COMPETE_FILE_BYTES, "the reader's file, made before the reply");
    };
    let faults = RealFaults { competing_reader: Some(0.5), ..Default::default() };
    client.control(NodeId(1), ControlRequest::SetRealFaults { faults }).await.unwrap();
    reading(&readers);
    client.control(NodeId(1), ControlRequest::SetRealFaults { faults: RealFaults::default() }).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while readers() > 0 {
        assert!(Instant::now() < deadline, "the reader outlived its fault");
        std::thread::sleep(Duration::from_millis(20));
    }
    let faults = RealFaults { competing_reader: Some(1.0), ..Default::default() };
    client.control(NodeId(1), ControlRequest::SetRealFaults { faults }).await.unwrap();
    reading(&readers);
    local.kill(NodeId(1));
    let deadline = Instant::now() + Duration::from_secs(5);
    while readers() > 0 {
        assert!(Instant::now() < deadline, "the reader outlived its server");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_io_servers_write_read_and_verify_every_byte() {
    let root = match direct_root() {
        Ok(r) => r,
        Err(why) => return skip(&why),
    };
    let spec = LocalSpec { direct_io: true, ..LocalSpec::new(3, root.path().to_path_buf(), None, binary()) };
    let local = LocalCluster::start(&spec).unwrap();
    let client = Client::connect(local.cluster().clone()).await.unwrap();
    // Fragments whose last block is short and no multiple of 4 KiB: the tails go buffered.
    let sizes = vec![(5 << 20) + 1234, 3 << 20, (1 << 20) + 7];
    let m = common::create(&client, "d", sizes, 256 << 10, 2, Generator::Random { seed: 9 }).await;
    let report = ganges_client::dataset::verify(&client, &m.name, None).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    let m = Arc::new(m);
    for policy in [ReadPolicyKind::Static, ReadPolicyKind::GdPlan] {
        let mut digest = ganges_core::digest::Digest::default();
        for mut s in ganges_client::scan::open_scan(&client, &m, None, ReadOptions::new(policy)).unwrap() {
            while s.next().await.unwrap().is_some() {}
            digest.merge(s.close().digest);
        }
        assert_eq!(digest, m.digest, "{policy}");
    }
}

/// A cluster of `host:port`s written by `cluster init --tls`, its servers started as a user
/// would on each machine (`serve --cluster FILE --node K`), then used by every command.
#[test]
fn cluster_init_then_serve_from_the_file_with_a_secret_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> =
        (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    let hosts = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let file = dir.path().join("cluster.toml");
    let f = file.to_str().unwrap();
    let data = dir.path().join("data");
    let out = ok(&["cluster", "init", "--hosts", &hosts, "--tls", "--out", f, "--data-dir", data.to_str().unwrap()]);
    assert!(out.contains("secret") && out.contains("certificates"), "{out}");
    let mut servers: Vec<std::process::Child> = (0..2)
        .map(|k| {
            // Each server its own data directory, as on its own machine.
            Command::new(binary())
                .args(["serve", "--cluster", f, "--node", &k.to_string(), "--data-dir"])
                .arg(data.join(k.to_string()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for s in &mut servers {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(s.stdout.take().unwrap()), &mut line).unwrap();
        assert!(line.starts_with("ganges-serve ready"), "{line}");
    }
    let status = ok(&["cluster", "status", "--cluster", f]);
    assert_eq!(status.matches("secret+tls").count(), 2, "{status}");
    ok(&["dataset", "create", "t", "--size", "8MiB", "--cluster", f]);
    let scan = ok(&["scan", "t", "--policy", "gd", "--cluster", f]);
    assert!(scan.contains("every byte delivered exactly once"), "{scan}");
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
}
