//! The live view against servers in this process: the dashboard's event stream during a real
//! scan (every server, the scan's consumers, their bytes adding up to the dataset), its fault
//! buttons' API, bad requests, and a server that stops.

use ganges_client::dataset::{self, CreateSpec};
use ganges_client::scan::{ReadOptions, open_scan};
use ganges_core::datagen::Generator;
use ganges_core::disk::DiskParams;
use ganges_core::route::ReadPolicyKind;
use ganges_harness::InProcessCluster;
use ganges_live::Live;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const MIB: f64 = 1024.0 * 1024.0;

fn disk() -> Option<DiskParams> {
    Some(DiskParams { rate_bytes_per_sec: 32.0 * MIB, seek: Duration::from_millis(1), queue_depth: 1 })
}

/// One request, the whole answer: status code and body.
async fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

/// The dashboard's event stream, one event at a time.
struct Events(BufReader<TcpStream>);

impl Events {
    async fn open(addr: &str) -> Events {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        loop {
            line.clear();
            r.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if line.to_ascii_lowercase().starts_with("content-type") {
                assert!(line.contains("text/event-stream"), "{line}");
            }
        }
        Events(r)
    }

    async fn next(&mut self) -> (String, Value) {
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(5), self.0.read_line(&mut line)).await.unwrap().unwrap();
            assert!(n > 0, "the event stream ended");
            match line.trim_end() {
                "" if !event.is_empty() => return (event, serde_json::from_str(&data).unwrap()),
                l if l.starts_with("event: ") => event = l[7..].to_string(),
                l if l.starts_with("data: ") => data = l[6..].to_string(),
                _ => {}
            }
        }
    }

    /// Frames until one passes `want`, for up to `within`; the one that passed.
    async fn until(&mut self, within: Duration, want: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let (event, v) = self.next().await;
            if event == "frame" && want(&v) {
                return v;
            }
            assert!(start.elapsed() < within, "no frame as wanted within {within:?}; the last: {v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_scan_as_it_runs_and_sets_faults() {
    let cluster = InProcessCluster::start(4, disk()).await.unwrap();
    let client = cluster.client().await.unwrap();
    let spec = CreateSpec {
        name: "live".parse().unwrap(),
        fragment_bytes: vec![24 << 20; 4],
        block_bytes: 1 << 20,
        replicas: 2,
        generator: Generator::Random { seed: 3 },
    };
    let manifest = std::sync::Arc::new(dataset::create(&client, spec, None).await.unwrap());
    let period = Duration::from_millis(100);
    let live = Live::start(cluster.client().await.unwrap(), period).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(ganges_live::web::serve(listener, live.clone()));

    let mut events = Events::open(&addr).await;
    let (first, _) = events.next().await;
    assert_eq!(first, "history", "a page gets the last minute first");

    // A scan of 96 MiB at 128 MiB/s in all: under a second of frames while it runs.
    let streams = open_scan(&client, &manifest, None, ReadOptions::new(ReadPolicyKind::Gd)).unwrap();
    let scan = tokio::spawn(async move {
        let mut tasks = vec![];
        for mut s in streams {
            tasks.push(tokio::spawn(async move {
                while s.next().await.unwrap().is_some() {}
                s.close().stats
            }));
        }
        let mut stats = ganges_core::route::ReadStats::default();
        for t in tasks {
            stats.merge(t.await.unwrap());
        }
        stats
    });
    let started = Instant::now();
    let running = events
        .until(Duration::from_secs(10), |f| {
            f["scans"].as_array().is_some_and(|s| s.iter().any(|s| s["running"] == true))
        })
        .await;
    let servers = running["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 4);
    assert!(servers.iter().all(|s| s["up"] == true && s["disk_bytes_per_sec"].as_f64() == Some(32.0 * MIB)));
    let ticks = {
        let t0 = running["t"].as_f64().unwrap();
        let later = events.until(Duration::from_secs(5), |f| f["t"].as_f64().unwrap() >= t0 + 0.5).await;
        later["t"].as_f64().unwrap() - t0
    };
    assert!(ticks < 1.0, "frames come every {period:?}, not every {ticks} s");
    let stats = scan.await.unwrap();
    let scan_took = started.elapsed();

    // Once over, the scan's consumers got the whole dataset between them, at the ideal's
    // pace or a little slower.
    let done = events
        .until(Duration::from_secs(5), |f| {
            f["scans"].as_array().is_some_and(|s| s.iter().any(|s| s["running"] == false))
        })
        .await;
    let scan = &done["scans"][0];
    assert_eq!(scan["dataset"], "live");
    let consumers = scan["consumers"].as_array().unwrap();
    assert_eq!(consumers.len(), 4);
    let served: u64 =
        consumers.iter().map(|c| c["primary_bytes"].as_u64().unwrap() + c["backup_bytes"].as_u64().unwrap()).sum();
    // Every byte, and no more than the blocks asked twice (hedges at the end of the scan,
    // requests cancelled too late): servers serve only what was asked.
    let total = manifest.total_bytes();
    let extra = (stats.requests - (total >> 20)) << 20;
    assert!(served >= total && served <= total + extra, "served {served} of {total}, up to {extra} twice");
    for c in consumers {
        assert_eq!(c["done_bytes"], c["total_bytes"], "{c}");
        let from: u64 = c["from"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(from, c["primary_bytes"].as_u64().unwrap() + c["backup_bytes"].as_u64().unwrap());
    }
    let ideal = scan["ideal_seconds"].as_f64().unwrap();
    assert!((ideal - 96.0 / 128.0).abs() < 0.01, "ideal {ideal}");
    let elapsed = scan["elapsed"].as_f64().unwrap();
    assert!(elapsed >= ideal * 0.95 && elapsed <= scan_took.as_secs_f64() + 0.5, "elapsed {elapsed}");

    // The fault buttons' API: node 2 at half speed shows within two seconds, then clears.
    let (code, body) = http(&addr, "POST", "/api/fault", r#"{"node": 2, "factor": 0.5}"#).await;
    assert_eq!(code, 200, "{body}");
    let asked = Instant::now();
    events.until(Duration::from_secs(2), |f| f["servers"][2]["disk_bytes_per_sec"].as_f64() == Some(16.0 * MIB)).await;
    assert!(asked.elapsed() < Duration::from_secs(2));
    let (code, _) = http(&addr, "POST", "/api/fault", r#"{"node": 2, "clear": true}"#).await;
    assert_eq!(code, 200);
    events.until(Duration::from_secs(2), |f| f["servers"][2]["fault"].is_null()).await;

    // Bad requests get a clear answer and change nothing.
    for (body, says) in [
        (r#"{"node": 9, "factor": 0.5}"#, "not in the cluster"),
        (r#"{"node": 1, "factor": 1.5}"#, "fault factor must be in (0, 1]"),
        (r#"{"node": 1}"#, "give one of"),
        ("not json", "bad request"),
    ] {
        let (code, answer) = http(&addr, "POST", "/api/fault", body).await;
        assert_eq!(code, 400, "{body}");
        assert!(answer.contains(says), "{body}: {answer}");
    }
    assert_eq!(http(&addr, "GET", "/nowhere", "").await.0, 404);
    assert_eq!(http(&addr, "DELETE", "/", "").await.0, 405);
    let (code, page) = http(&addr, "GET", "/", "").await;
    assert!(code == 200 && page.contains("EventSource"));
    assert!(http(&addr, "GET", "/uPlot.iife.min.js", "").await.1.contains("uPlot"));
    let snapshot: Value = serde_json::from_str(&http(&addr, "GET", "/api/snapshot", "").await.1).unwrap();
    assert!(snapshot["servers"][2]["fault"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_shows_as_down_and_the_rest_go_on() {
    let mut cluster = InProcessCluster::start(3, disk()).await.unwrap();
    let live = Live::start(cluster.client().await.unwrap(), Duration::from_millis(100)).await;
    let mut frames = live.subscribe();
    cluster.stop(1).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let f = frames.borrow_and_update().clone();
        let up: Vec<bool> = f.snapshot.servers.iter().map(|s| s.up).collect();
        if up == [true, false, true] {
            break;
        }
        assert!(Instant::now() < deadline, "node1 never shown down: {up:?}");
        tokio::time::timeout(Duration::from_secs(5), frames.changed()).await.unwrap().unwrap();
    }
}
