//! `ganges bench dashboard`: what the live dashboard costs. A local cluster (16 servers by
//! default) is scanned over and over by as many consumers while `ganges dashboard` runs as a
//! process of its own with pages connected to its event stream; for the measured window the
//! bench counts the frames each page got and the dashboard process's CPU time.
//!
//! The target: at least two updates a second to every page, under 5% of one core.

use crate::util::{BenchError, BenchResult, Table, git_commit};
use ganges_client::Client;
use ganges_client::dataset::{self, CreateSpec};
use ganges_client::scan::{ReadOptions, open_scan};
use ganges_core::datagen::Generator;
use ganges_core::disk::DiskParams;
use ganges_core::route::ReadPolicyKind;
use serde::Serialize;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct DashboardBenchSpec {
    pub nodes: u32,
    pub disk: DiskParams,
    pub fragment_bytes: u64,
    /// Pages connected to the event stream.
    pub viewers: u32,
    pub interval: Duration,
    /// The measured window, after a warm-up.
    pub seconds: f64,
    pub binary: PathBuf,
    pub json: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub nodes: u32,
    pub consumers: u32,
    pub viewers: u32,
    pub interval_ms: f64,
    pub seconds: f64,
    /// Frames per second the slowest page got.
    pub min_frames_per_sec: f64,
    /// The dashboard process's CPU time over the window, as a share of one core.
    pub cpu_share: f64,
    /// Frames that showed a running scan with every consumer.
    pub frames_with_scan: u64,
    /// Bytes per frame on the event stream (mean).
    pub frame_bytes: f64,
    pub scans: u64,
    pub git_commit: String,
}

pub fn run(spec: &DashboardBenchSpec) -> BenchResult<Report> {
    let cluster = crate::scan::BenchCluster {
        nodes: spec.nodes,
        disk: Some(spec.disk),
        root: None,
        scratch: std::env::temp_dir(),
        binary: spec.binary.clone(),
        node_groups: None,
        real: None,
        metrics_scrape: false,
    };
    let started = cluster.start()?;
    let file = started.cluster.cluster().clone();
    started.block_on(async {
        let client = Client::connect(file.clone()).await?;
        let create = CreateSpec {
            name: "bench-dashboard".parse()?,
            fragment_bytes: vec![spec.fragment_bytes; spec.nodes as usize],
            block_bytes: 1 << 20,
            replicas: 2,
            generator: Generator::Random { seed: 1 },
        };
        let manifest = Arc::new(dataset::create(&client, create, None).await?);
        // The local cluster's file, where the dashboard process can read it.
        let dir = tempfile::tempdir()?;
        let cluster_path = dir.path().join("cluster.toml");
        file.save(&cluster_path)?;
        let mut dash = Dashboard::start(&spec.binary, &cluster_path, spec.interval)?;
        let stop = Arc::new(AtomicBool::new(false));
        let scans = Arc::new(AtomicU64::new(0));
        let scanning = {
            let (client, manifest, stop, scans) = (client.clone(), manifest.clone(), stop.clone(), scans.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let streams = open_scan(&client, &manifest, None, ReadOptions::new(ReadPolicyKind::Gd))?;
                    let tasks: Vec<_> = streams
                        .into_iter()
                        .map(|mut s| {
                            tokio::spawn(async move {
                                while s.next().await?.is_some() {}
                                Ok::<_, BenchError>(())
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.map_err(|e| BenchError::Failed(e.to_string()))??;
                    }
                    scans.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, BenchError>(())
            })
        };
        let viewers: Vec<_> =
            (0..spec.viewers).map(|_| Viewer::start(&dash.addr, spec.nodes)).collect::<Result<_, _>>()?;
        // Warm-up: every page has its history and the scans are running.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (cpu0, t0) = (dash.cpu_secs()?, Instant::now());
        let counts0: Vec<(u64, u64, u64)> = viewers.iter().map(Viewer::counts).collect();
        tokio::time::sleep(Duration::from_secs_f64(spec.seconds)).await;
        let (cpu1, wall) = (dash.cpu_secs()?, t0.elapsed().as_secs_f64());
        let counts1: Vec<(u64, u64, u64)> = viewers.iter().map(Viewer::counts).collect();
        stop.store(true, Ordering::Relaxed);
        scanning.await.map_err(|e| BenchError::Failed(e.to_string()))??;
        dash.stop();
        let frames: Vec<u64> = counts0.iter().zip(&counts1).map(|(a, b)| b.0 - a.0).collect();
        let with_scan: u64 = counts0.iter().zip(&counts1).map(|(a, b)| b.1 - a.1).sum();
        let bytes: u64 = counts0.iter().zip(&counts1).map(|(a, b)| b.2 - a.2).sum();
        let all_frames: u64 = frames.iter().sum();
        Ok(Report {
            bench: "dashboard",
            nodes: spec.nodes,
            consumers: spec.nodes,
            viewers: spec.viewers,
            interval_ms: spec.interval.as_secs_f64() * 1e3,
            seconds: wall,
            min_frames_per_sec: frames.iter().copied().min().unwrap_or(0) as f64 / wall,
            cpu_share: (cpu1 - cpu0) / wall,
            frames_with_scan: with_scan,
            frame_bytes: bytes as f64 / all_frames.max(1) as f64,
            scans: scans.load(Ordering::Relaxed),
            git_commit: git_commit(),
        })
    })
}

/// `ganges dashboard` as a process of its own, on a free port.
struct Dashboard {
    child: Child,
    addr: String,
}

impl Dashboard {
    fn start(binary: &Path, cluster: &Path, interval: Duration) -> BenchResult<Dashboard> {
        let mut child = Command::new(binary)
            .args(["dashboard", "--listen", "127.0.0.1:0", "--interval"])
            .arg(format!("{}ms", interval.as_millis()))
            .arg("--cluster")
            .arg(cluster)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::Failed(format!("starting {}: {e}", binary.display())))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .ok_or_else(|| BenchError::Failed(format!("the dashboard said {line:?}, not its address")))?
            .to_string();
        Ok(Dashboard { child, addr })
    }

    /// User and system CPU seconds of the process so far.
    fn cpu_secs(&self) -> BenchResult<f64> {
        ganges_harness::sys::cpu_secs(self.child.id())
            .ok_or_else(|| BenchError::Failed("the dashboard's CPU time is not readable in /proc".into()))
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A page on the event stream, in a thread: frames, frames showing a running scan with every
/// consumer, and bytes.
struct Viewer {
    counts: Arc<[AtomicU64; 3]>,
}

impl Viewer {
    fn start(addr: &str, consumers: u32) -> BenchResult<Viewer> {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.write_all(format!("GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())?;
        let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
        let c = counts.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(s).lines();
            while let Some(Ok(line)) = lines.next() {
                let Some(data) = line.strip_prefix("data: ") else { continue };
                let Ok(frame) = serde_json::from_str::<serde_json::Value>(data) else { continue };
                if frame.get("servers").is_none() {
                    continue; // the history
                }
                c[0].fetch_add(1, Ordering::Relaxed);
                c[2].fetch_add(data.len() as u64, Ordering::Relaxed);
                let full = frame["scans"].as_array().is_some_and(|scans| {
                    scans.iter().any(|s| {
                        s["running"] == true && s["consumers"].as_array().map(Vec::len) == Some(consumers as usize)
                    })
                });
                if full {
                    c[1].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Viewer { counts })
    }

    fn counts(&self) -> (u64, u64, u64) {
        (
            self.counts[0].load(Ordering::Relaxed),
            self.counts[1].load(Ordering::Relaxed),
            self.counts[2].load(Ordering::Relaxed),
        )
    }
}

pub fn render(r: &Report) -> String {
    let mut out = format!(
        "dashboard: {} servers scanned over and over by {} consumers, {} page(s) on the event stream, a frame every \
         {:.0} ms, {:.0} s measured, commit {}\n",
        r.nodes, r.consumers, r.viewers, r.interval_ms, r.seconds, r.git_commit
    );
    let mut t =
        Table::new(&["frames/s (slowest page)", "CPU (% of one core)", "frames with the scan", "bytes/frame", "scans"]);
    t.row(vec![
        format!("{:.2}", r.min_frames_per_sec),
        format!("{:.2}", r.cpu_share * 100.0),
        r.frames_with_scan.to_string(),
        format!("{:.0}", r.frame_bytes),
        r.scans.to_string(),
    ]);
    out.push_str(&t.render());
    out
}
