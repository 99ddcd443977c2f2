//! `ganges bench apps`: River's Figure 15 for ganges. Each of the six query primitives
//! (`ganges_flow::apps`), static and robust, on a local cluster with the disk model, with 0
//! to all of its disks slow (half speed), against the ideal.
//!
//! The ideal (river §4): the time to move the primitive's bytes through the disks at their
//! peak rates, `(bytes read + bytes written) / sum of the disks' rates after the faults`:
//! reads and writes share the disks, and any disk could take any byte. The input has two
//! copies (chained declustering, so GD can move reads off a slow disk); the outputs have one.
//!
//! Every run checks itself before its time counts: the scan's records and checksum are the
//! input's, generate wrote what it was asked, filter kept the share of the keys it was
//! asked, top-N's records are in key order, join wrote pairs, and sort's output read back in
//! written order is the input, in key order (valsort's check). A run that fails its check
//! fails the bench.

use crate::plot::{self, Series};
use crate::scan::BenchCluster;
use crate::util::{BenchError, BenchResult, Table, fail, git_commit, process_cpu_secs, steps_bar};
use ganges_client::Client;
use ganges_client::dataset::{self, CreateSpec};
use ganges_core::datagen::Generator;
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::fault::{FaultLayout, place};
use ganges_core::ids::NodeId;
use ganges_flow::apps::{self, AppReport, Setup};
use ganges_proto::control::ControlRequest;
use ganges_proto::manifest::DatasetName;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// How much slower a slow disk is (river §7: a fault halves a disk).
pub const SLOW_FACTOR: f64 = 0.5;

/// The filter's share of the key space kept.
const FILTER_KEEP: f64 = 0.1;

/// Bytes of the key a join matches (1/2^24 of the pairs meet).
const JOIN_KEY_BYTES: u32 = 3;

/// Top-N's N.
const TOP_N: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum App {
    Scan,
    Generate,
    Filter,
    Topn,
    Join,
    Sort,
}

impl App {
    pub const ALL: [App; 6] = [App::Scan, App::Generate, App::Filter, App::Topn, App::Join, App::Sort];
}

impl std::fmt::Display for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_value(self).map_err(|_| std::fmt::Error)?;
        f.write_str(s.as_str().unwrap_or("?"))
    }
}

impl std::str::FromStr for App {
    type Err = ganges_core::parse::ParseError;
    fn from_str(s: &str) -> Result<App, Self::Err> {
        App::ALL
            .into_iter()
            .find(|a| a.to_string() == s)
            .ok_or_else(|| ganges_core::parse::ParseError::unknown("app", s, App::ALL))
    }
}

#[derive(Clone, Debug)]
pub struct AppsBenchSpec {
    pub nodes: u32,
    /// Input bytes per disk (the join's right side is a quarter of that).
    pub per_disk: u64,
    pub disk: DiskParams,
    /// Slow disk counts.
    pub slow: Vec<u32>,
    /// Which disks are slow (`best`: spread out, as `bench scan` places them).
    pub fault_layout: FaultLayout,
    pub apps: Vec<App>,
    /// Runs of each; the median's row is kept.
    pub repeat: u32,
    pub binary: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub app: App,
    pub robust: bool,
    pub slow: u32,
    pub seconds: f64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Of the bytes read, from a backup copy.
    pub backup_frac: f64,
    pub ideal_seconds: f64,
    pub frac_ideal: f64,
    /// This process's CPU (the workers) per GB read and written.
    pub cpu_seconds_per_gb: f64,
    /// Every run's seconds; the row is the median run's.
    pub repeat_seconds: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "apps", for the pages that show it.
    pub bench: String,
    pub git_commit: String,
    pub nodes: u32,
    pub per_disk_bytes: u64,
    pub disk_bytes_per_sec: f64,
    pub seek_ms: f64,
    pub slow_factor: f64,
    pub fault_layout: FaultLayout,
    pub repeat: u32,
    pub rows: Vec<Row>,
    /// Sort with no disk model (the servers' files in memory), against the memory.
    pub memory: Option<Memory>,
}

/// Sort's throughput with the disks out of the way, beside the machine's memory bandwidth
/// measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    /// Input bytes sorted a second (the median of `repeat`, robust).
    pub sort_mb_per_sec: f64,
    pub cpu_seconds_per_gb: f64,
    /// Bytes copied a second, a thread per core.
    pub copy_mb_per_sec: f64,
}

pub fn run(spec: &AppsBenchSpec) -> BenchResult<Report> {
    if spec.nodes < 2 || spec.per_disk < 1 << 20 {
        return fail("bench apps needs 2 servers or more and at least 1 MiB per disk");
    }
    if let Some(s) = spec.slow.iter().find(|&&s| s > spec.nodes) {
        return fail(format!("{s} slow disks of {} servers", spec.nodes));
    }
    let bar = steps_bar((spec.slow.len() * spec.apps.len() * 2) as u64, "apps");
    let rows = on_cluster(spec, Some(spec.disk), async |bench: &Bench<'_>| {
        let mut rows = vec![];
        for &slow in &spec.slow {
            bench.set_slow(slow).await?;
            for &app in &spec.apps {
                for robust in [false, true] {
                    bar.set_message(format!("{app} {}, {slow} slow", if robust { "robust" } else { "static" }));
                    rows.push(bench.median(app, robust, slow).await?);
                    bar.inc(1);
                }
            }
        }
        Ok(rows)
    })?;
    bar.finish_and_clear();
    let memory = match spec.apps.contains(&App::Sort) {
        true => Some(on_cluster(spec, None, async |bench: &Bench<'_>| {
            let sort = bench.median(App::Sort, true, 0).await?;
            Ok(Memory {
                sort_mb_per_sec: sort.bytes_read as f64 / sort.seconds / 1e6,
                cpu_seconds_per_gb: sort.cpu_seconds_per_gb,
                copy_mb_per_sec: memory_copy_rate() / 1e6,
            })
        })?),
        false => None,
    };
    Ok(Report {
        bench: "apps".into(),
        git_commit: git_commit(),
        nodes: spec.nodes,
        per_disk_bytes: spec.per_disk,
        disk_bytes_per_sec: spec.disk.rate_bytes_per_sec,
        seek_ms: spec.disk.seek.as_secs_f64() * 1e3,
        slow_factor: SLOW_FACTOR,
        fault_layout: spec.fault_layout,
        repeat: spec.repeat.max(1),
        rows,
        memory,
    })
}

/// Start a cluster of `spec.nodes` servers on `disk` (`None`: no disk model, the files in
/// memory), make the inputs, and run `body` on it.
fn on_cluster<T>(
    spec: &AppsBenchSpec,
    disk: Option<DiskParams>,
    body: impl AsyncFnOnce(&Bench<'_>) -> BenchResult<T>,
) -> BenchResult<T> {
    let cluster = BenchCluster {
        nodes: spec.nodes,
        disk,
        root: None,
        scratch: scratch(4 * spec.per_disk * u64::from(spec.nodes)),
        binary: spec.binary.clone(),
        node_groups: None,
        real: None,
        metrics_scrape: false,
    };
    let started = cluster.start()?;
    started.block_on(async {
        let client = Client::connect(started.cluster.cluster().clone()).await?;
        let bench = Bench { client, spec };
        bench.inputs().await?;
        body(&bench).await
    })
}

/// The machine's memory copy rate: bytes copied a second, one thread per core each copying
/// its own 128 MiB, the best of four (the first pays for the pages).
fn memory_copy_rate() -> f64 {
    const BYTES: usize = 128 << 20;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut buffers: Vec<(Vec<u8>, Vec<u8>)> =
        (0..threads).map(|i| (vec![i as u8 + 1; BYTES], vec![0; BYTES])).collect();
    let mut best = f64::MAX;
    for _ in 0..4 {
        let t = std::time::Instant::now();
        std::thread::scope(|s| {
            for (from, to) in &mut buffers {
                s.spawn(move || to.copy_from_slice(from));
            }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    (threads * BYTES) as f64 / best
}

/// Memory when there is room (the disk model is the disk), else the temp folder.
fn scratch(bytes: u64) -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    match ganges_harness::sys::free_bytes(&shm) {
        Some(free) if free > 2 * bytes => shm,
        _ => std::env::temp_dir(),
    }
}

fn name(s: &str) -> DatasetName {
    s.parse().expect("a bench's dataset names are valid")
}

struct Bench<'a> {
    client: Arc<Client>,
    spec: &'a AppsBenchSpec,
}

impl Bench<'_> {
    /// The input (`per_disk` on each disk, two copies) and the join's right side.
    async fn inputs(&self) -> BenchResult<()> {
        let n = self.spec.nodes;
        for (dataset, per_disk, seed) in [("input", self.spec.per_disk, 1), ("right", self.spec.per_disk / 4, 2)] {
            let fragment = per_disk / 100 * 100;
            let spec = CreateSpec {
                name: name(dataset),
                fragment_bytes: vec![fragment; n as usize],
                block_bytes: 1 << 20,
                replicas: 2,
                generator: Generator::Records { seed },
            };
            dataset::create(&self.client, spec, None).await?;
        }
        Ok(())
    }

    async fn set_slow(&self, slow: u32) -> BenchResult<()> {
        let slow = place(self.spec.fault_layout, self.spec.nodes, slow, 1);
        for n in 0..self.spec.nodes {
            let fault = slow.contains(&NodeId(n)).then_some(Fault::Factor { factor: SLOW_FACTOR });
            self.client.control(NodeId(n), ControlRequest::SetFault { fault }).await?;
        }
        Ok(())
    }

    fn aggregate(&self, slow: u32) -> f64 {
        let r = self.spec.disk.rate_bytes_per_sec;
        (0..self.spec.nodes).map(|n| if n < slow { r * SLOW_FACTOR } else { r }).sum()
    }

    /// `spec.repeat` runs of `app`: the median run's row (of an even count, the slower of the
    /// two in the middle), with every run's seconds.
    async fn median(&self, app: App, robust: bool, slow: u32) -> BenchResult<Row> {
        let mut runs = vec![];
        for _ in 0..self.spec.repeat.max(1) {
            runs.push(self.one(app, robust, slow).await?);
        }
        let all: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
        runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        let mut median = runs.swap_remove(runs.len() / 2);
        median.repeat_seconds = all;
        Ok(median)
    }

    /// One run of `app`, checked, its output removed after.
    async fn one(&self, app: App, robust: bool, slow: u32) -> BenchResult<Row> {
        let setup = Setup::in_process(self.client.clone(), self.spec.nodes as usize, robust, 1);
        let (input, out) = (name("input"), name("output"));
        let cpu = process_cpu_secs();
        let r = match app {
            App::Scan => apps::scan(&setup, &input).await,
            App::Generate => {
                apps::generate(&setup, &out, self.spec.per_disk / 100 * u64::from(self.spec.nodes), 9).await
            }
            App::Filter => apps::filter(&setup, &input, &out, apps::key_below(FILTER_KEEP)).await,
            App::Topn => apps::topn(&setup, &input, &out, TOP_N).await,
            App::Join => apps::join(&setup, &input, &name("right"), &out, JOIN_KEY_BYTES).await,
            App::Sort => apps::sort(&setup, &input, &out).await,
        }
        .map_err(|e| BenchError::Failed(format!("{app}: {e}")))?;
        let cpu = process_cpu_secs() - cpu;
        self.check(app, &r).await?;
        if r.output.is_some() {
            dataset::remove(&self.client, &out).await?;
        }
        let moved = r.bytes_read + r.bytes_written;
        let ideal = moved as f64 / self.aggregate(slow);
        Ok(Row {
            app,
            robust,
            slow,
            seconds: r.seconds,
            bytes_read: r.bytes_read,
            bytes_written: r.bytes_written,
            backup_frac: r.backup_bytes as f64 / r.bytes_read.max(1) as f64,
            ideal_seconds: ideal,
            frac_ideal: ideal / r.seconds,
            cpu_seconds_per_gb: cpu / (moved as f64 / 1e9),
            repeat_seconds: vec![],
        })
    }

    async fn check(&self, app: App, r: &AppReport) -> BenchResult<()> {
        let records = self.spec.per_disk / 100 * u64::from(self.spec.nodes);
        let bad = |why: String| Err(BenchError::Failed(format!("{app} gave a wrong result: {why}")));
        match app {
            App::Scan if r.summary.records != records => bad(format!("{} records of {records}", r.summary.records)),
            App::Generate if r.summary.records != records => bad(format!("{} records of {records}", r.summary.records)),
            App::Filter => {
                let kept = r.summary.records as f64 / records as f64;
                if (kept - FILTER_KEEP).abs() > 0.02 { bad(format!("kept {kept:.3} of the records")) } else { Ok(()) }
            }
            App::Topn if r.top.len() != TOP_N || r.top.windows(2).any(|w| w[0][..10] > w[1][..10]) => {
                bad(format!("{} records, in key order or not", r.top.len()))
            }
            App::Join if r.summary.records == 0 => bad("no pairs".into()),
            App::Sort => {
                let out =
                    apps::check(&self.client, &name("output")).await.map_err(|e| BenchError::Failed(e.to_string()))?;
                if out.same_records(&r.input) && out.unordered == 0 && r.input.records == records {
                    Ok(())
                } else {
                    bad(format!("{out:?} of {:?}", r.input))
                }
            }
            _ => Ok(()),
        }
    }
}

/// The rows as a table: each primitive's fraction of the ideal, static and robust, by slow disks.
pub fn render(report: &Report) -> String {
    let mut slows: Vec<u32> = report.rows.iter().map(|r| r.slow).collect();
    slows.sort_unstable();
    slows.dedup();
    let mut header = vec!["primitive".to_string(), "version".to_string()];
    header.extend(slows.iter().map(|s| format!("{s} slow")));
    header.push("CPU s/GB".into());
    let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
    for app in App::ALL {
        for robust in [false, true] {
            let rows: Vec<&Row> = report.rows.iter().filter(|r| r.app == app && r.robust == robust).collect();
            if rows.is_empty() {
                continue;
            }
            let mut cells = vec![app.to_string(), if robust { "robust" } else { "static" }.to_string()];
            for s in &slows {
                cells.push(match rows.iter().find(|r| r.slow == *s) {
                    Some(r) => format!("{:.0}%", 100.0 * r.frac_ideal),
                    None => "-".into(),
                });
            }
            let cpu = rows.iter().map(|r| r.cpu_seconds_per_gb).sum::<f64>() / rows.len() as f64;
            cells.push(format!("{cpu:.2}"));
            t.row(cells);
        }
    }
    let memory = report.memory.as_ref().map_or(String::new(), |m| {
        format!(
            "sort with no disk model: {:.0} MB/s ({:.1} CPU s/GB), {:.1}% of the memory's copy rate ({:.0} MB/s)\n",
            m.sort_mb_per_sec,
            m.cpu_seconds_per_gb,
            100.0 * m.sort_mb_per_sec / m.copy_mb_per_sec,
            m.copy_mb_per_sec
        )
    });
    format!(
        "River's primitives on {} servers, {} MiB per disk, disks at {:.0} MiB/s (a slow one at half), {}: fraction of the ideal\n{}{memory}",
        report.nodes,
        report.per_disk_bytes >> 20,
        report.disk_bytes_per_sec / (1 << 20) as f64,
        match report.repeat {
            2 => "the slower of 2 runs".to_string(),
            n if n % 2 == 0 => format!("the slower middle run of {n}"),
            n => format!("median of {n}"),
        },
        t.render()
    )
}

pub fn write_outputs(report: &Report, json: Option<&PathBuf>, plot_path: Option<&PathBuf>) -> BenchResult<()> {
    crate::util::write_json(report, json)?;
    let Some(path) = plot_path else { return Ok(()) };
    let mut series = vec![];
    for (k, app) in App::ALL.into_iter().enumerate() {
        for robust in [false, true] {
            let points: Vec<(f64, f64)> = report
                .rows
                .iter()
                .filter(|r| r.app == app && r.robust == robust)
                .map(|r| (f64::from(r.slow), r.frac_ideal))
                .collect();
            if !points.is_empty() {
                let version = if robust { "robust" } else { "static" };
                series.push(Series {
                    name: format!("{app} {version}"),
                    points,
                    color: Some(k),
                    dashed: !robust,
                    ..Default::default()
                });
            }
        }
    }
    plot::line_chart(path, "River's primitives: fraction of the ideal", "slow disks", "fraction of ideal", &series, 1.1)
}
