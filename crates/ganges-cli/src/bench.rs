//! `ganges bench scan` (and the demo, which is a small one): how close do the read policies
//! come to the best the hardware, with its faults, could have done? BENCHMARKS.md defines
//! every figure; in short, per (policy, fault count): all consumers start together after every
//! connection is open, T is when the last one finishes, and T is compared with the River
//! ideal (MOD-1) and the layout-aware ideal (MOD-2) for the same server rates.
//!
//! Every run also checks its own correctness: the digest of what the consumers received must
//! equal the dataset's, or the bench fails instead of printing a number.

use crate::local::{DiskSpec, LocalCluster, LocalSpec};
use crate::plot::{self, Series};
use crate::util::{CliError, CliResult, Table, fail, git_commit, process_cpu_secs, steps_bar};
use ganges_client::client::Client;
use ganges_client::dataset::{self, CreateSpec};
use ganges_client::scan::{ReadOptions, ReadReport, open_scan};
use ganges_core::datagen::Generator;
use ganges_core::digest::Digest;
use ganges_core::disk::Fault;
use ganges_core::fault::{FaultLayout, place};
use ganges_core::ideal::{layout_ideal, river_ideal_seconds, scan_demands};
use ganges_core::ids::NodeId;
use ganges_core::route::ReadPolicyKind;
use ganges_core::sched::SchedulerKind;
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_proto::control::{ControlReply, ControlRequest, ServerStats};
use ganges_proto::manifest::Manifest;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct ScanBenchSpec {
    pub nodes: u32,
    pub replicas: u32,
    pub fragment_bytes: u64,
    pub block_bytes: u32,
    pub disk: Option<DiskSpec>,
    pub fault: Fault,
    pub faults: Vec<u32>,
    pub fault_layout: FaultLayout,
    pub seed: u64,
    pub policies: Vec<ReadPolicyKind>,
    pub window: u32,
    pub repeat: u32,
    pub root: Option<PathBuf>,
    pub binary: PathBuf,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Params {
    pub nodes: u32,
    pub replicas: u32,
    pub fragment_bytes: u64,
    pub block_bytes: u32,
    pub disk_rate_bytes_per_sec: Option<f64>,
    pub seek_ms: f64,
    pub queue_depth: u32,
    pub fault: Fault,
    pub fault_factor: Option<f64>,
    pub fault_layout: FaultLayout,
    pub seed: u64,
    pub window: u32,
    pub repeat: u32,
    pub policies: Vec<ReadPolicyKind>,
    pub git_commit: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub policy: ReadPolicyKind,
    pub faults: u32,
    pub fault_nodes: Vec<u32>,
    /// Median over repeats.
    pub seconds: f64,
    pub bytes: u64,
    pub aggregate_mb_per_sec: f64,
    pub slowest_consumer_mb_per_sec: f64,
    pub ideal_river_seconds: f64,
    pub ideal_layout_seconds: f64,
    pub frac_river_ideal: f64,
    pub frac_layout_ideal: f64,
    pub backup_bytes_frac: f64,
    pub server_cpu_seconds: f64,
    pub client_cpu_seconds: f64,
    /// CPU seconds (servers and client) per GB (10^9 bytes) moved.
    pub cpu_seconds_per_gb: f64,
    /// Every repeat's T, in run order.
    pub repeat_seconds: Vec<f64>,
    /// max - min of the repeats' T.
    pub spread_seconds: f64,
    /// Seeks the modelled disks paid during the run.
    pub seeks: u64,
    pub duplicates: u64,
    pub steals: u64,
    pub retries: u64,
    /// Peak resident memory of the largest server at the end of the run.
    pub server_peak_rss_bytes: u64,
    /// When each consumer finished, from the common start (consumer i reads fragment i).
    pub consumer_seconds: Vec<f64>,
    /// Fraction of T each modelled disk spent seeking or transferring, per node.
    pub disk_busy_frac: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// A raw TCP stream over loopback between two threads, same buffer size, same run.
    pub loopback_mb_per_sec: Option<f64>,
    pub cpus: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub params: Params,
    pub machine: Machine,
    pub rows: Vec<Row>,
}

/// One run's raw figures.
#[derive(Clone, Debug)]
struct Sample {
    seconds: f64,
    bytes: u64,
    slowest_mb_per_sec: f64,
    backup_bytes: u64,
    server_cpu: f64,
    client_cpu: f64,
    seeks: u64,
    duplicates: u64,
    steals: u64,
    retries: u64,
    peak_rss: u64,
    consumer_seconds: Vec<f64>,
    disk_busy_frac: Vec<f64>,
}

impl ScanBenchSpec {
    fn validate(&self) -> CliResult<()> {
        if self.faults.iter().any(|&f| f > self.nodes) {
            return fail(format!("--faults may not exceed --nodes ({})", self.nodes));
        }
        if self.disk.is_none() && self.faults.iter().any(|&f| f > 0) {
            return fail("faults need the disk model: give --disk-rate, or use --faults 0 with --disk-rate off");
        }
        if self.policies.is_empty() || self.faults.is_empty() {
            return fail("give at least one policy and one fault count");
        }
        self.fault.validate()?;
        Ok(())
    }

    fn params(&self) -> Params {
        Params {
            nodes: self.nodes,
            replicas: self.replicas,
            fragment_bytes: self.fragment_bytes,
            block_bytes: self.block_bytes,
            disk_rate_bytes_per_sec: self.disk.map(|d| d.rate_bytes_per_sec),
            seek_ms: self.disk.map_or(0.0, |d| d.seek.as_secs_f64() * 1e3),
            queue_depth: self.disk.map_or(1, |d| d.queue_depth),
            fault: self.fault,
            fault_factor: match self.fault {
                Fault::Factor { factor } => Some(factor),
                Fault::Competing { .. } => None,
            },
            fault_layout: self.fault_layout,
            seed: self.seed,
            window: self.window,
            repeat: self.repeat,
            policies: self.policies.clone(),
            git_commit: git_commit(),
        }
    }
}

/// Run the scan benchmark: start a cluster, create the dataset, run every (policy, faults).
pub fn run_scan(spec: &ScanBenchSpec) -> CliResult<Report> {
    spec.validate()?;
    let temp;
    let root = match &spec.root {
        Some(r) => r.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("ganges-bench-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let local = LocalSpec {
        nodes: spec.nodes,
        root,
        disk: spec.disk,
        scheduler: SchedulerKind::Auto,
        binary: spec.binary.clone(),
    };
    let cluster = LocalCluster::start(&local)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = rt.block_on(async {
        tokio::select! {
            r = bench_on_cluster(spec, &cluster) => r,
            _ = tokio::signal::ctrl_c() => fail(crate::util::INTERRUPTED),
        }
    });
    drop(cluster);
    report
}

async fn bench_on_cluster(spec: &ScanBenchSpec, cluster: &LocalCluster) -> CliResult<Report> {
    let client = Client::connect(cluster.cluster().clone()).await?;
    let total = spec.fragment_bytes * spec.nodes as u64;
    let bar = crate::util::bytes_bar(total * spec.replicas as u64, "create");
    let manifest = dataset::create(
        &client,
        CreateSpec {
            name: "bench-scan".parse()?,
            fragment_bytes: vec![spec.fragment_bytes; spec.nodes as usize],
            block_bytes: spec.block_bytes,
            replicas: spec.replicas,
            generator: Generator::Random { seed: spec.seed },
        },
        Some(crate::util::progress_fn(&bar)),
    )
    .await?;
    bar.finish_and_clear();
    let manifest = Arc::new(manifest);

    let loopback = if spec.disk.is_none() {
        let bytes = total.min(2 << 30);
        let block = spec.block_bytes as usize;
        Some(tokio::task::spawn_blocking(move || loopback_mb_per_sec(bytes, block)).await.expect("measure")?)
    } else {
        None
    };

    // One untimed scan first: the first scan after a create pays for fresh buffers, thread
    // pools and page faults in every process (measured: 15% idle disks), which is not what
    // any policy should be charged for.
    set_faults(&client, spec, &[]).await?;
    run_once(&client, &manifest, spec.policies[0], spec.window).await?;

    let layout_of = |f: u32| -> Vec<NodeId> { place(spec.fault_layout, spec.nodes, f, spec.seed) };
    let runs = spec.repeat as u64 * spec.faults.len() as u64 * spec.policies.len() as u64;
    let bar = steps_bar(runs, "scan");
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![vec![]; spec.policies.len()]; spec.faults.len()];
    for _ in 0..spec.repeat {
        for (fi, &f) in spec.faults.iter().enumerate() {
            let faulty = layout_of(f);
            set_faults(&client, spec, &faulty).await?;
            for (pi, &policy) in spec.policies.iter().enumerate() {
                bar.set_message(format!("{policy}, {f} faults"));
                let s = run_once(&client, &manifest, policy, spec.window).await?;
                samples[fi][pi].push(s);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    set_faults(&client, spec, &[]).await?;

    let mut rows = vec![];
    for (fi, &f) in spec.faults.iter().enumerate() {
        let faulty = layout_of(f);
        let (river, layout) = ideals(spec, &manifest, &faulty)?;
        for (pi, &policy) in spec.policies.iter().enumerate() {
            rows.push(row(policy, f, &faulty, &samples[fi][pi], river, layout));
        }
    }
    Ok(Report {
        bench: "scan",
        params: spec.params(),
        machine: Machine {
            loopback_mb_per_sec: loopback,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        rows,
    })
}

/// The server rates with `faulty` nodes faulted, and both ideals for the whole scan.
fn ideals(spec: &ScanBenchSpec, manifest: &Manifest, faulty: &[NodeId]) -> CliResult<(f64, f64)> {
    let Some(disk) = spec.disk else {
        // No model: there is no rate to compare with; the loopback figure stands in.
        return Ok((f64::NAN, f64::NAN));
    };
    let rates: Vec<f64> = (0..spec.nodes)
        .map(|n| {
            let frac = if faulty.contains(&NodeId(n)) { spec.fault.rate_fraction() } else { 1.0 };
            disk.rate_bytes_per_sec * frac
        })
        .collect();
    let river = river_ideal_seconds(manifest.total_bytes(), &rates);
    let demands = scan_demands(&manifest.shape, &manifest.shape.fragment_partitions())?;
    let layout = layout_ideal(&demands, &manifest.layout, &rates)?.seconds;
    Ok((river, layout))
}

async fn set_faults(client: &Client, spec: &ScanBenchSpec, faulty: &[NodeId]) -> CliResult<()> {
    if spec.disk.is_none() {
        return Ok(());
    }
    for n in 0..spec.nodes {
        let node = NodeId(n);
        let fault = faulty.contains(&node).then_some(spec.fault);
        client.control(node, ControlRequest::SetFault { fault }).await?;
    }
    Ok(())
}

async fn all_stats(client: &Client) -> CliResult<Vec<ServerStats>> {
    let nodes: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let mut out = vec![];
    for (node, r) in client.control_all(&nodes, &ControlRequest::Stats).await {
        match r? {
            ControlReply::Stats { stats } => out.push(stats),
            other => return fail(format!("{node}: unexpected reply {other:?}")),
        }
    }
    Ok(out)
}

/// One scan: every consumer reads its fragment; returns T and the counters.
async fn run_once(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    policy: ReadPolicyKind,
    window: u32,
) -> CliResult<Sample> {
    let streams = open_scan(client, manifest, None, ReadOptions::new(policy).with_window(window))?;
    let before = all_stats(client).await?;
    let cpu_before = process_cpu_secs();
    let barrier = Arc::new(tokio::sync::Barrier::new(streams.len() + 1));
    let mut tasks = vec![];
    for mut s in streams {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            while s.next().await?.is_some() {}
            Ok::<(ReadReport, Instant), ganges_client::ClientError>((s.close(), Instant::now()))
        }));
    }
    barrier.wait().await;
    let t0 = Instant::now();
    let mut reports = vec![];
    for t in tasks {
        reports.push(t.await.map_err(|e| CliError(format!("consumer task failed: {e}")))??);
    }
    let t_end = reports.iter().map(|(_, end)| *end).max().expect("at least one consumer");
    let seconds = t_end.duration_since(t0).as_secs_f64();
    let client_cpu = process_cpu_secs() - cpu_before;
    let after = all_stats(client).await?;

    let mut digest = Digest::default();
    for (r, _) in &reports {
        digest.merge(r.digest);
    }
    if digest != manifest.digest {
        return fail(format!(
            "{policy}: the consumers' digest {digest} differs from the dataset's {}: bytes were lost or \
             delivered twice",
            manifest.digest
        ));
    }
    let bytes: u64 = reports.iter().map(|(r, _)| r.bytes).sum();
    let slowest = reports
        .iter()
        .map(|(r, end)| mb_per_sec(r.bytes, end.duration_since(t0).as_secs_f64()))
        .fold(f64::INFINITY, f64::min);
    Ok(Sample {
        seconds,
        bytes,
        slowest_mb_per_sec: slowest,
        backup_bytes: reports.iter().map(|(r, _)| r.stats.backup_bytes()).sum(),
        server_cpu: after.iter().zip(&before).map(|(a, b)| a.cpu_secs - b.cpu_secs).sum(),
        client_cpu,
        seeks: after.iter().zip(&before).map(|(a, b)| a.disk_stats.seeks - b.disk_stats.seeks).sum(),
        duplicates: reports.iter().map(|(r, _)| r.stats.duplicates).sum(),
        steals: reports.iter().map(|(r, _)| r.stats.steals).sum(),
        retries: reports.iter().map(|(r, _)| r.stats.retries).sum(),
        peak_rss: after.iter().map(|s| s.peak_rss_bytes).max().unwrap_or(0),
        consumer_seconds: reports.iter().map(|(_, end)| end.duration_since(t0).as_secs_f64()).collect(),
        disk_busy_frac: after
            .iter()
            .zip(&before)
            .map(|(a, b)| (a.disk_stats.busy_secs - b.disk_stats.busy_secs) / seconds)
            .collect(),
    })
}

fn row(policy: ReadPolicyKind, faults: u32, faulty: &[NodeId], samples: &[Sample], river: f64, layout: f64) -> Row {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by(|&a, &b| samples[a].seconds.total_cmp(&samples[b].seconds));
    let m = &samples[order[order.len() / 2]];
    let times: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
    let spread = times.iter().cloned().fold(f64::MIN, f64::max) - times.iter().cloned().fold(f64::MAX, f64::min);
    Row {
        policy,
        faults,
        fault_nodes: faulty.iter().map(|n| n.0).collect(),
        seconds: m.seconds,
        bytes: m.bytes,
        aggregate_mb_per_sec: mb_per_sec(m.bytes, m.seconds),
        slowest_consumer_mb_per_sec: m.slowest_mb_per_sec,
        ideal_river_seconds: river,
        ideal_layout_seconds: layout,
        frac_river_ideal: river / m.seconds,
        frac_layout_ideal: layout / m.seconds,
        backup_bytes_frac: m.backup_bytes as f64 / m.bytes.max(1) as f64,
        server_cpu_seconds: m.server_cpu,
        client_cpu_seconds: m.client_cpu,
        cpu_seconds_per_gb: (m.server_cpu + m.client_cpu) / (m.bytes as f64 / 1e9),
        repeat_seconds: times,
        spread_seconds: spread,
        seeks: m.seeks,
        duplicates: m.duplicates,
        steals: m.steals,
        retries: m.retries,
        server_peak_rss_bytes: m.peak_rss,
        consumer_seconds: m.consumer_seconds.clone(),
        disk_busy_frac: m.disk_busy_frac.clone(),
    }
}

/// Raw TCP over loopback between two threads, `chunk` bytes per write and read.
pub fn loopback_mb_per_sec(total: u64, chunk: usize) -> CliResult<f64> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let buf = vec![0x5Au8; chunk];
        let mut left = total;
        while left > 0 {
            let n = left.min(chunk as u64) as usize;
            s.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let mut c = std::net::TcpStream::connect(addr)?;
    let mut buf = vec![0u8; chunk];
    let t = Instant::now();
    let mut got = 0u64;
    while got < total {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    writer.join().expect("writer thread")?;
    Ok(mb_per_sec(got, secs))
}

/// Print the table (and with a disk model off, the loopback comparison).
pub fn render(report: &Report) -> String {
    let mut t = Table::new(&[
        "policy",
        "faults",
        "seconds",
        "MB/s",
        "slowest MB/s",
        "% river",
        "% layout",
        "backup %",
        "cpu s/GB",
    ]);
    for r in &report.rows {
        let pct = |x: f64| {
            if x.is_nan() { "-".to_string() } else { format!("{:.1}", x * 100.0) }
        };
        t.row(vec![
            r.policy.to_string(),
            r.faults.to_string(),
            format!("{:.3}", r.seconds),
            format!("{:.1}", r.aggregate_mb_per_sec),
            format!("{:.1}", r.slowest_consumer_mb_per_sec),
            pct(r.frac_river_ideal),
            pct(r.frac_layout_ideal),
            format!("{:.1}", r.backup_bytes_frac * 100.0),
            format!("{:.2}", r.cpu_seconds_per_gb),
        ]);
    }
    let p = &report.params;
    let disk = match p.disk_rate_bytes_per_sec {
        Some(r) => format!("disks {}/s with a {}ms seek", ByteSize(r as u64), p.seek_ms),
        None => "no disk model (page cache)".into(),
    };
    let mut out = format!(
        "scan: {} nodes, {} copies, {} fragments of {}, {} blocks, {disk}, fault {} ({} layout), window {}, \
         {} run(s) each (median), commit {}\n",
        p.nodes,
        p.replicas,
        p.nodes,
        ByteSize(p.fragment_bytes),
        ByteSize(p.block_bytes as u64),
        p.fault,
        p.fault_layout,
        p.window,
        p.repeat,
        p.git_commit
    );
    out.push_str(&t.render());
    let mut seen = std::collections::BTreeSet::new();
    let faulty: Vec<String> = report
        .rows
        .iter()
        .filter(|r| r.faults > 0 && seen.insert(r.faults))
        .map(|r| format!("{}: {}", r.faults, r.fault_nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(",")))
        .collect();
    if !faulty.is_empty() {
        let seed = if p.fault_layout == FaultLayout::Random { format!(", seed {}", p.seed) } else { String::new() };
        out.push_str(&format!("faulty nodes ({} layout{seed}): {}\n", p.fault_layout, faulty.join("; ")));
    }
    if let Some(lb) = report.machine.loopback_mb_per_sec {
        let best = report.rows.iter().map(|r| r.aggregate_mb_per_sec).fold(0.0, f64::max);
        out.push_str(&format!(
            "raw loopback TCP in this run: {lb:.1} MB/s; best scan: {best:.1} MB/s ({:.0}% of loopback)\n",
            best / lb * 100.0
        ));
    }
    out
}

/// Write the JSON document and the plot, as asked.
pub fn write_outputs(report: &Report, json: Option<&PathBuf>, plot_path: Option<&PathBuf>) -> CliResult<()> {
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(report)?)
            .map_err(|e| CliError(format!("writing {}: {e}", path.display())))?;
    }
    if let Some(path) = plot_path {
        let mut series: Vec<Series> = report
            .params
            .policies
            .iter()
            .map(|p| Series {
                name: p.to_string(),
                points: report
                    .rows
                    .iter()
                    .filter(|r| r.policy == *p && !r.frac_layout_ideal.is_nan())
                    .map(|r| (r.faults as f64, r.frac_layout_ideal))
                    .collect(),
                dashed: false,
            })
            .collect();
        let xs: Vec<f64> = report.rows.iter().map(|r| r.faults as f64).collect();
        let (lo, hi) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
        series.push(Series { name: "ideal (layout-aware)".into(), points: vec![(lo, 1.0), (hi, 1.0)], dashed: true });
        let p = &report.params;
        let title = format!(
            "scan: {} nodes, {} copies, {} faults (x{}), % of layout-aware ideal",
            p.nodes,
            p.replicas,
            p.fault_layout,
            p.fault.rate_fraction()
        );
        plot::line_chart(path, &title, "faulty disks", "fraction of ideal", &series, 1.1)?;
    }
    Ok(())
}
