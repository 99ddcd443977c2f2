//! The client against servers in this process (`ganges_harness::InProcessCluster`): a scan
//! delivers every byte once with the right content, and goes on when a server stops under
//! it.

use ganges_client::dataset::{self, CreateSpec};
use ganges_client::scan::{ReadOptions, ReadReport, open_scan};
use ganges_core::datagen::Generator;
use ganges_core::digest::Digest;
use ganges_core::disk::DiskParams;
use ganges_core::ids::NodeId;
use ganges_core::route::ReadPolicyKind;
use ganges_harness::InProcessCluster;
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::manifest::Manifest;
use std::sync::Arc;
use std::time::Duration;

fn disk(mib_per_sec: f64) -> Option<DiskParams> {
    Some(DiskParams {
        rate_bytes_per_sec: mib_per_sec * 1024.0 * 1024.0,
        seek: Duration::from_millis(1),
        queue_depth: 1,
    })
}

async fn create(c: &InProcessCluster, name: &str, g: Generator) -> Arc<Manifest> {
    let client = c.client().await.unwrap();
    let spec = CreateSpec {
        name: name.parse().unwrap(),
        fragment_bytes: vec![4 << 20; 4],
        block_bytes: 256 << 10,
        replicas: 2,
        generator: g,
    };
    Arc::new(dataset::create(&client, spec, None).await.expect("create"))
}

/// Every consumer's blocks, checked against the generator as they come, and its report.
async fn scan(c: &InProcessCluster, m: &Arc<Manifest>, policy: ReadPolicyKind, g: Generator) -> Vec<ReadReport> {
    let client = c.client().await.unwrap();
    let mut tasks = vec![];
    for mut s in open_scan(&client, m, None, ReadOptions::new(policy)).unwrap() {
        tasks.push(tokio::spawn(async move {
            while let Some(b) = s.next().await.unwrap() {
                let mut want = vec![0u8; b.data.len()];
                g.fill(b.dataset_offset, &mut want);
                assert!(b.data[..] == want[..], "content at {}", b.dataset_offset);
            }
            s.close()
        }));
    }
    let mut reports = vec![];
    for t in tasks {
        reports.push(t.await.unwrap());
    }
    reports
}

fn digest(reports: &[ReadReport]) -> Digest {
    let mut d = Digest::default();
    for r in reports {
        d.merge(r.digest);
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_in_process_servers_delivers_every_byte_once() {
    let c = InProcessCluster::start(4, disk(64.0)).await.unwrap();
    let g = Generator::Random { seed: 7 };
    let m = create(&c, "inproc", g).await;
    for policy in [ReadPolicyKind::Static, ReadPolicyKind::Gd, ReadPolicyKind::GdPlan] {
        let reports = scan(&c, &m, policy, g).await;
        assert_eq!(digest(&reports), m.digest, "{policy:?}: every byte once");
        assert!(reports.iter().all(|r| r.stats.duplicates == 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_goes_on_when_a_server_stops_under_it() {
    let mut c = InProcessCluster::start(4, disk(4.0)).await.unwrap();
    let g = Generator::Random { seed: 8 };
    let m = create(&c, "stops", g).await;
    let running = {
        let (file, m) = (c.cluster().clone(), m.clone());
        tokio::spawn(async move {
            let client = ganges_client::Client::connect(file).await.unwrap();
            let mut tasks = vec![];
            for mut s in open_scan(&client, &m, None, ReadOptions::new(ReadPolicyKind::Gd)).unwrap() {
                tasks.push(tokio::spawn(async move {
                    let mut first = true;
                    while let Some(b) = s.next().await.unwrap() {
                        let mut want = vec![0u8; b.data.len()];
                        g.fill(b.dataset_offset, &mut want);
                        assert!(b.data[..] == want[..]);
                        first = false;
                    }
                    assert!(!first, "every consumer read something");
                    s.close()
                }));
            }
            let mut reports = vec![];
            for t in tasks {
                reports.push(t.await.unwrap());
            }
            reports
        })
    };
    // Stop server 2 once it has served a block of the scan.
    let watcher = c.client().await.unwrap();
    loop {
        let reply = watcher.control(NodeId(2), ControlRequest::Stats).await.unwrap();
        if let ControlReply::Stats { stats } = reply
            && stats.read_bytes > 0
        {
            break;
        }
        assert!(!running.is_finished(), "the scan ended before server 2 served anything");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(!running.is_finished(), "the scan still runs when the server stops");
    assert!(c.stop(2).await.is_some_and(|r| r.is_ok()), "the server stopped cleanly");
    let reports = running.await.unwrap();
    assert_eq!(digest(&reports), m.digest, "every byte once despite the stopped server");
    assert!(reports.iter().map(|r| r.stats.retries).sum::<u64>() > 0, "its requests were read again elsewhere");
}

/// A finished scan leaves no reader behind: a server reports its primary readers' least
/// progress to the consumers of its backup copies, and a scan that ended a moment ago must not
/// count as one all but done, or the next scan of the dataset reads its backups from the
/// start (GD-3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_scan_is_not_reported_as_a_reader_to_the_next() {
    use ganges_core::sched::{Progress, ProgressMetric};
    use ganges_proto::msg::{Message, Probe};
    let c = InProcessCluster::start(4, disk(64.0)).await.unwrap();
    let g = Generator::Random { seed: 9 };
    let m = create(&c, "again", g).await;
    let client = c.client().await.unwrap();
    let mut tasks = vec![];
    for mut s in open_scan(&client, &m, None, ReadOptions::new(ReadPolicyKind::GdPc)).unwrap() {
        tasks.push(tokio::spawn(async move { while s.next().await.unwrap().is_some() {} }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // At once, over the connections the scan used (its notices went ahead on them).
    let progress = Progress { done_bytes: 0, total_bytes: 1, metric: ProgressMetric::Fraction };
    for n in 0..4 {
        let probe = Message::Probe(Probe { stream: 1, progress, dataset: m.name.clone() });
        match client.conn(NodeId(n)).unwrap().call(&probe).await.unwrap() {
            Message::State(st) => assert_eq!(st.primary_progress, None, "node {n}: nobody reads its primary copies"),
            other => panic!("node {n} answered a probe with {other:?}"),
        }
    }
}

/// A server whose link is slower than its disk measures the link as it sends, and reports
/// the slower of the two as its speed: a planner that took the disk's figure (gd-plan) gave
/// that server a full share and its reader finished last. So with the link's figure, gd-plan
/// reads much of that server's primary copy from its backup. `ForgetRate` forgets both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_behind_a_slow_link_reports_the_link_as_its_speed() {
    use ganges_proto::msg::{Message, Probe};
    let mib = 1024.0 * 1024.0;
    let c = InProcessCluster::start_with(4, |mut config| {
        config.disk = disk(32.0);
        if config.node == NodeId(0) {
            (config.model_link, config.node_sampling.net_bytes_per_sec) = (true, 8.0 * mib);
        }
        config
    })
    .await
    .unwrap();
    let client = c.client().await.unwrap();
    let g = Generator::Random { seed: 10 };
    let spec = CreateSpec {
        name: "link".parse().unwrap(),
        fragment_bytes: vec![16 << 20; 4],
        block_bytes: 256 << 10,
        replicas: 2,
        generator: g,
    };
    let m = Arc::new(dataset::create(&client, spec, None).await.expect("create"));
    let rates = |node: u32| {
        let client = client.clone();
        async move {
            match client.control(NodeId(node), ControlRequest::Stats).await.unwrap() {
                ControlReply::Stats { stats } => (stats.measured_disk_bytes_per_sec, stats.measured_link_bytes_per_sec),
                other => panic!("node {node} answered Stats with {other:?}"),
            }
        }
    };
    for n in 0..4 {
        client.control(NodeId(n), ControlRequest::ForgetRate).await.unwrap();
    }
    let reports = scan(&c, &m, ReadPolicyKind::Static, g).await;
    assert_eq!(digest(&reports), m.digest);
    let (disk0, link0) = rates(0).await;
    let (disk0, link0) = (disk0.expect("node 0's disk measured"), link0.expect("node 0's link was busy a second"));
    assert!(disk0 > 24.0 * mib, "its disk at about 32 MiB/s, not {disk0}");
    assert!(link0 > 6.0 * mib && link0 < 9.0 * mib, "its link at about 8 MiB/s, not {link0}");
    let (disk1, link1) = rates(1).await;
    assert!(disk1.is_some() && link1.is_none_or(|l| l > disk1.unwrap()), "a fast link: {link1:?}");
    let progress = ganges_core::sched::Progress {
        done_bytes: 0,
        total_bytes: 1,
        metric: ganges_core::sched::ProgressMetric::Fraction,
    };
    let probe = Message::Probe(Probe { stream: 1, progress, dataset: m.name.clone() });
    match client.conn(NodeId(0)).unwrap().call(&probe).await.unwrap() {
        // The answers since crossed the link too, so its figure moved a little.
        Message::State(st) => {
            let speed = st.disk_bytes_per_sec.expect("measured");
            assert!((speed / link0 - 1.0).abs() < 0.05, "the link is what it serves at: {speed}, not {link0}");
        }
        other => panic!("node 0 answered a probe with {other:?}"),
    }
    let reports = scan(&c, &m, ReadPolicyKind::GdPlan, g).await;
    assert_eq!(digest(&reports), m.digest);
    // The plan moves most of node 0's copy to the backup: a balanced finish reads 0.69 of it
    // there (8 MiB/s against 3 x 32). Its probe answers go out ahead of the data already
    // queued on the slow link; behind it (as before they had a lane of their own) it read 0.5.
    let backup = reports[0].stats.backup_bytes() as f64 / reports[0].bytes as f64;
    assert!(backup > 0.55, "gd-plan read {backup:.2} of node 0's primary copy from its backup");
    client.control(NodeId(0), ControlRequest::ForgetRate).await.unwrap();
    assert_eq!(rates(0).await, (None, None), "forgotten");
}
