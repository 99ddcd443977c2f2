//! `ganges bench array`: the Panda paper's Figures 4 to 7 for ganges, on a local cluster with
//! the disk model, slow servers at half speed.
//!
//! - **Figure 4**: a 512 MiB array (512³ f32) from 8 processes (2×2×2, BLOCK³), natural
//!   chunking on disk (the disk layout is the memory layout), 2 to 16 servers, 0 to all slow.
//! - **Figure 5**: the same from 32 processes (4×4×2), stored row-major (disk `BLOCK,*,*` over
//!   the servers): a reorganization on the way.
//! - **Figures 6 and 7**: 16 processes (4×2×2), row-major on disk, ten calls in a row; at the
//!   fifth one server turns twice as slow, at the sixth it recovers.
//!
//! - **Reads** (ours, beyond Panda): the array written with two copies (chained declustering),
//!   read back by 8 processes in another layout (`BLOCK,*,*`) with `static` (primary copies
//!   only), `gd` and `gd-plan` (graduated declustering), one server slow; against the
//!   layout-aware ideal of that read, the mean of `repeat` reads.
//!
//! - **Part-time I/O nodes** (Panda §2): Figure 4's write where the servers run inside the
//!   writing processes (the first `servers` of the 8, the rest compute only), each process's
//!   client handing its own server its pieces in memory; beside the same write to servers of
//!   their own (full-time), on the same disks, in the same run.
//!
//! With `--real` the servers write the real disk with direct I/O, each capped by the kernel at
//! an equal share of what the disk gives them all at once, and a slow server is one the kernel
//! caps at half of that (the scan and write benches' real faults, `crate::real`); the peak is
//! the sum of those caps.
//!
//! Each write's throughput is divided by the peak of the I/O subsystem as the paper computes
//! it: the sum of the servers' available rates (a slow server counts at half). A call is timed
//! from the open to the commit; static allocation's empirical test, run before a
//! configuration's first call, is not (the paper leaves it out too). Figures 4 and 5 report
//! the mean of `repeat` calls, each planned with the rates its predecessor measured.

use crate::plot::{self, Series};
use crate::real::{Rates as RealRates, RealSpec};
use crate::scan::BenchCluster;
use crate::util::{BenchResult, Table, fail, git_commit, steps_bar};
use bytes::Bytes;
use ganges_client::Client;
use ganges_client::array::{self as arr, ArraySpec, Rates};
use ganges_core::array::{AllocKind, ArrayLayout, DType, Dist, Schema, generated};
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::ids::NodeId;
use ganges_core::route::ReadPolicyKind;
use ganges_harness::PartTime;
use ganges_proto::control::ControlRequest;
use ganges_server::ServerConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How much slower a slow server is (the paper wrote each chunk twice).
pub const SLOW_FACTOR: f64 = 0.5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Figure {
    /// Figure 4: natural chunking.
    Natural,
    /// Figure 5: row-major on disk from 32 processes.
    RowMajor,
    /// Figures 6 and 7: a server slow for one call of ten.
    Iterations,
    /// Reads of an array with two copies, a server slow.
    Reads,
    /// Figure 4's write to part-time I/O nodes, beside full-time ones.
    PartTime,
}

#[derive(Clone, Debug)]
pub struct ArrayBenchSpec {
    pub figures: Vec<Figure>,
    pub servers: Vec<u32>,
    /// Server counts of the iterations figure.
    pub iteration_servers: Vec<u32>,
    /// Server counts of the reads figure.
    pub read_servers: Vec<u32>,
    /// Read policies of the reads figure.
    pub read_policies: Vec<ReadPolicyKind>,
    /// Server counts of the part-time figure (at most the 8 writing processes).
    pub part_time_servers: Vec<u32>,
    pub shape: Vec<u64>,
    pub allocs: Vec<AllocKind>,
    pub disk: DiskParams,
    pub repeat: u32,
    pub iterations: u32,
    pub binary: PathBuf,
    /// Real disks and kernel faults instead of the disk model.
    pub real: Option<RealSpec>,
}

/// Where the servers keep their data: memory when there is room (the disk model is the disk
/// here; a real disk's flushes at commit would only add noise), else the temp folder.
fn scratch(array_bytes: u64) -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    match ganges_harness::sys::free_bytes(&shm) {
        Some(free) if free > 4 * array_bytes => shm,
        _ => std::env::temp_dir(),
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub figure: Figure,
    pub servers: u32,
    pub slow: u32,
    pub alloc: AllocKind,
    /// For the iterations figure: the call (1-based); else 0.
    pub iteration: u32,
    /// For the reads figure: the read policy (the fraction is then of the layout-aware ideal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub mb_per_sec: f64,
    pub peak_mb_per_sec: f64,
    /// Mean over the calls.
    pub frac_peak: f64,
    /// Each call's fraction of peak.
    pub calls: Vec<f64>,
    /// Bytes each server wrote in the last call.
    pub server_bytes: Vec<u64>,
    /// Part-time figure: the servers ran in the writing processes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub part_time: bool,
    /// Part-time figure: bytes of the last call that went to a process's own server in memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "array", for the pages that show it.
    pub bench: String,
    pub git_commit: String,
    /// With `--real`: what was measured before the runs, per server count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<(u32, RealRates)>,
    pub shape: Vec<u64>,
    pub disk_bytes_per_sec: f64,
    pub slow_factor: f64,
    pub repeat: u32,
    pub rows: Vec<Row>,
}

/// The slow counts Figures 4 and 5 show for `servers`: none, one, half, all but one, all.
pub fn slow_counts(servers: u32) -> Vec<u32> {
    let mut v = vec![0, 1, servers / 2, servers.saturating_sub(1), servers];
    v.sort_unstable();
    v.dedup();
    v
}

fn layout(mesh: &[u32], dist: &[Dist]) -> BenchResult<ArrayLayout> {
    ArrayLayout::new(mesh.to_vec(), dist.to_vec()).map_err(|e| crate::util::BenchError::Failed(e.to_string()))
}

/// The memory and disk layouts of a figure on `servers` servers.
fn layouts(figure: Figure, servers: u32, rank: usize) -> BenchResult<(ArrayLayout, ArrayLayout)> {
    let block = vec![Dist::Block; rank];
    let mut rows = vec![Dist::Star; rank];
    rows[0] = Dist::Block;
    let mesh = |m: &[u32]| -> Vec<u32> { (0..rank).map(|d| m.get(d).copied().unwrap_or(1)).collect() };
    Ok(match figure {
        Figure::Natural => (layout(&mesh(&[2, 2, 2]), &block)?, layout(&mesh(&[2, 2, 2]), &block)?),
        Figure::RowMajor => (layout(&mesh(&[4, 4, 2]), &block)?, layout(&[servers], &rows)?),
        Figure::Iterations => (layout(&mesh(&[4, 2, 2]), &block)?, layout(&[servers], &rows)?),
        Figure::Reads => (layout(&mesh(&[2, 2, 2]), &block)?, layout(&[servers], &rows)?),
        Figure::PartTime => (layout(&mesh(&[2, 2, 2]), &block)?, layout(&mesh(&[2, 2, 2]), &block)?),
    })
}

pub fn run(spec: &ArrayBenchSpec) -> BenchResult<Report> {
    if spec.shape.len() < 3 {
        return fail("the bench's layouts are three-dimensional: give a shape of 3 dimensions or more");
    }
    let schema =
        Schema::new(spec.shape.clone(), DType::F32).map_err(|e| crate::util::BenchError::Failed(e.to_string()))?;
    let mut counts: Vec<u32> = spec.servers.clone();
    if spec.figures.contains(&Figure::Iterations) {
        counts.extend(&spec.iteration_servers);
    }
    if spec.figures.contains(&Figure::Reads) {
        counts.extend(&spec.read_servers);
    }
    let part_time = spec.figures.contains(&Figure::PartTime);
    if part_time && spec.real.is_some() {
        return fail(
            "the part-time figure runs its servers inside the bench's own process, which the kernel's \
             per-process throttles cannot make one slow: leave it out with --real",
        );
    }
    if part_time {
        if let Some(&s) = spec.part_time_servers.iter().find(|&&s| s == 0 || s > PROCESSES) {
            return fail(format!("{s} part-time I/O nodes among {PROCESSES} writing processes: give 1 to {PROCESSES}"));
        }
        counts.extend(&spec.part_time_servers);
    }
    counts.sort_unstable();
    counts.dedup();
    let steps: usize = spec
        .figures
        .iter()
        .map(|f| match f {
            Figure::Iterations => spec.iteration_servers.len() * spec.allocs.len(),
            Figure::Reads => spec.read_servers.len(),
            Figure::PartTime => spec.part_time_servers.len() * spec.allocs.len() * 2,
            _ => spec.servers.iter().map(|&s| slow_counts(s).len() * spec.allocs.len()).sum(),
        })
        .sum();
    let bar = steps_bar(steps as u64, "array");
    let mut rows = vec![];
    let mut measured = vec![];
    for servers in counts {
        let cluster = BenchCluster {
            nodes: servers,
            disk: spec.real.is_none().then_some(spec.disk),
            root: None,
            scratch: if spec.real.is_some() { std::env::temp_dir() } else { scratch(schema.bytes()) },
            binary: spec.binary.clone(),
            node_groups: None,
            real: spec.real,
            metrics_scrape: false,
        };
        let started = cluster.start()?;
        let client = started.block_on(async { Ok(Client::connect(started.cluster.cluster().clone()).await?) })?;
        let real = match &spec.real {
            Some(r) => {
                eprintln!("measuring the {servers} servers' disk writes, alone and all at once");
                let rates = started.block_on(crate::real::measure(&client, r))?;
                measured.push((servers, rates.clone()));
                Some((*r, rates))
            }
            None => None,
        };
        for &figure in &spec.figures {
            let wanted = match figure {
                Figure::Iterations => spec.iteration_servers.contains(&servers),
                Figure::Reads => spec.read_servers.contains(&servers),
                Figure::PartTime => spec.part_time_servers.contains(&servers),
                _ => spec.servers.contains(&servers),
            };
            if !wanted {
                continue;
            }
            let (memory, disk) = layouts(figure, servers, schema.rank())?;
            let chunks: Vec<Bytes> =
                (0..memory.positions()).map(|r| Bytes::from(generated(&schema, &memory.chunk(&schema, r)))).collect();
            let clients = [client.clone()];
            let run_of = |spec_w| Run {
                clients: &clients,
                parts: &[],
                spec: spec_w,
                chunks: &chunks,
                disk: spec.disk,
                servers,
                real: real.as_ref(),
            };
            if figure == Figure::Reads {
                let mut spec_w = ArraySpec::new(
                    "bench-array".parse()?,
                    schema.clone(),
                    memory.clone(),
                    disk.clone(),
                    AllocKind::Dynamic,
                );
                spec_w.replicas = 2;
                let run = run_of(spec_w);
                bar.set_message(format!("reads: {servers} servers"));
                rows.extend(started.block_on(run.reads(&spec.read_policies, spec.repeat))?);
                bar.inc(1);
                continue;
            }
            if figure == Figure::PartTime {
                let (parts, _dir) = started.block_on(part_time_nodes(servers, spec.disk, &schema))?;
                let plain: Vec<std::sync::Arc<Client>> = started.block_on(async {
                    let file = parts[0].client().cluster().clone();
                    let mut v = vec![];
                    for _ in servers..PROCESSES {
                        v.push(Client::connect(file.clone()).await?);
                    }
                    BenchResult::Ok(v)
                })?;
                let nodes: Vec<&PartTime> = parts.iter().collect();
                let part_clients: Vec<_> =
                    nodes.iter().map(|p| p.client().clone()).chain(plain.iter().cloned()).collect();
                for &alloc in &spec.allocs {
                    let mut spec_w =
                        ArraySpec::new("bench-array".parse()?, schema.clone(), memory.clone(), disk.clone(), alloc);
                    spec_w.generated = true;
                    for (clients, parts) in [(&clients[..], &[][..]), (&part_clients[..], &nodes[..])] {
                        bar.set_message(format!(
                            "part-time: {alloc}, {servers} servers{}",
                            if parts.is_empty() { " (full-time)" } else { "" }
                        ));
                        let run = Run { clients, parts, ..run_of(spec_w.clone()) };
                        for slow in [0, 1] {
                            rows.push(started.block_on(run.calls(figure, slow, spec.repeat))?);
                        }
                        bar.inc(1);
                    }
                }
                started.block_on(async {
                    for p in parts {
                        p.stop().await?;
                    }
                    BenchResult::Ok(())
                })?;
                continue;
            }
            for &alloc in &spec.allocs {
                let mut spec_w =
                    ArraySpec::new("bench-array".parse()?, schema.clone(), memory.clone(), disk.clone(), alloc);
                spec_w.generated = true;
                let run = run_of(spec_w);
                if figure == Figure::Iterations {
                    bar.set_message(format!("figures 6-7: {alloc}, {servers} servers"));
                    rows.extend(started.block_on(run.iterations(spec.iterations))?);
                    bar.inc(1);
                    continue;
                }
                for slow in slow_counts(servers) {
                    bar.set_message(format!("{figure:?}: {alloc}, {slow}/{servers} slow"));
                    rows.push(started.block_on(run.calls(figure, slow, spec.repeat))?);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(Report {
        bench: "array".into(),
        git_commit: git_commit(),
        measured,
        shape: spec.shape.clone(),
        disk_bytes_per_sec: spec.disk.rate_bytes_per_sec,
        slow_factor: SLOW_FACTOR,
        repeat: spec.repeat,
        rows,
    })
}

/// Processes of the part-time figure (Figure 4's 2×2×2).
const PROCESSES: u32 = 8;

/// `servers` part-time I/O nodes in this process, with the disk model, and the folder that
/// holds their data (removed when dropped).
async fn part_time_nodes(
    servers: u32,
    disk: DiskParams,
    schema: &Schema,
) -> BenchResult<(Vec<PartTime>, tempfile::TempDir)> {
    let dir = tempfile::Builder::new().prefix("ganges-bench-part-").tempdir_in(scratch(schema.bytes()))?;
    let nodes =
        ganges_harness::parttime::local_job(servers, dir.path(), |c| ServerConfig { disk: Some(disk), ..c }).await?;
    Ok((nodes, dir))
}

struct Run<'a> {
    /// Process `r` writes through `clients[r % len]`; the first also coordinates.
    clients: &'a [std::sync::Arc<Client>],
    /// The part-time I/O nodes the clients are of, if any.
    parts: &'a [&'a PartTime],
    spec: ArraySpec,
    chunks: &'a [Bytes],
    disk: DiskParams,
    servers: u32,
    /// Real disks: the spec and what was measured.
    real: Option<&'a (RealSpec, RealRates)>,
}

impl Run<'_> {
    fn client(&self) -> &std::sync::Arc<Client> {
        &self.clients[0]
    }

    /// Bytes handed to part-time I/O nodes in memory so far.
    fn local_bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.local_traffic().1).sum()
    }

    /// Make the first `slow` servers slow, the rest healthy.
    async fn set_slow(&self, slow: u32) -> BenchResult<()> {
        if let Some((spec, rates)) = self.real {
            let faulty: Vec<NodeId> = (0..slow).map(NodeId).collect();
            return crate::real::apply(self.client(), spec, rates, &faulty).await;
        }
        for n in 0..self.servers {
            let fault = (n < slow).then_some(Fault::Factor { factor: SLOW_FACTOR });
            self.client().control(NodeId(n), ControlRequest::SetFault { fault }).await?;
        }
        Ok(())
    }

    /// Each server's available rate with the first `slow` slow.
    fn rates(&self, slow: u32) -> Vec<f64> {
        if let Some((spec, rates)) = self.real {
            let faulty: Vec<NodeId> = (0..slow).map(NodeId).collect();
            return crate::real::rates_with(spec, rates, &faulty);
        }
        let r = self.disk.rate_bytes_per_sec;
        (0..self.servers).map(|n| if n < slow { r * SLOW_FACTOR } else { r }).collect()
    }

    fn peak(&self, slow: u32) -> f64 {
        self.rates(slow).iter().sum()
    }

    /// One collective write; its fraction of peak and the rates it measured.
    async fn call(&self, slow: u32, rates: &mut Rates) -> BenchResult<(f64, Vec<u64>)> {
        let report = arr::write_ranks(self.clients, &self.spec, rates, self.chunks.to_vec()).await?;
        rates.0 = Some(report.rates.clone());
        ganges_client::dataset::remove(self.client(), &self.spec.name).await?;
        let rate = self.spec.schema.bytes() as f64 / report.seconds;
        Ok((rate / self.peak(slow), report.server_bytes))
    }

    async fn calls(&self, figure: Figure, slow: u32, repeat: u32) -> BenchResult<Row> {
        self.set_slow(slow).await?;
        let mut rates = Rates::default();
        let mut calls = vec![];
        let mut server_bytes = vec![];
        let mut local_bytes = 0;
        for _ in 0..repeat.max(1) {
            let before = self.local_bytes();
            let (frac, bytes) = self.call(slow, &mut rates).await?;
            local_bytes = self.local_bytes() - before;
            calls.push(frac);
            server_bytes = bytes;
        }
        let frac_peak = calls.iter().sum::<f64>() / calls.len() as f64;
        let peak = self.peak(slow);
        Ok(Row {
            figure,
            servers: self.servers,
            slow,
            alloc: self.spec.alloc,
            iteration: 0,
            policy: None,
            mb_per_sec: frac_peak * peak / 1e6,
            peak_mb_per_sec: peak / 1e6,
            frac_peak,
            calls,
            server_bytes,
            part_time: !self.parts.is_empty(),
            local_bytes: (figure == Figure::PartTime).then_some(local_bytes),
        })
    }

    /// Write the array once with two copies, then read it back as 8 processes holding
    /// `BLOCK,*,*` chunks, with each policy, with no server and then one server slow: the mean
    /// of `repeat` reads, each from servers that have forgotten their rates.
    async fn reads(&self, policies: &[ReadPolicyKind], repeat: u32) -> BenchResult<Vec<Row>> {
        self.set_slow(0).await?;
        let mut rates = Rates::default();
        let report = arr::write_all(self.client(), &self.spec, &rates, self.chunks.to_vec()).await?;
        rates.0 = Some(report.rates);
        let manifest = std::sync::Arc::new(report.manifest);
        let schema = &self.spec.schema;
        let mut rows_layout = vec![Dist::Star; schema.rank()];
        rows_layout[0] = Dist::Block;
        let memory = layout(&[8], &rows_layout)?;
        let reads: Vec<Vec<ganges_core::shape::Partition>> = (0..memory.positions())
            .map(|r| arr::region_reads(&manifest, &memory.chunk(schema, r)))
            .collect::<Result<_, _>>()?;
        let demands = ganges_core::ideal::read_demands(&manifest.shape, reads.iter().map(Vec::as_slice))?;
        let mut rows = vec![];
        for slow in [0, 1] {
            self.set_slow(slow).await?;
            let node_rates = self.rates(slow);
            let ideal = ganges_core::ideal::layout_ideal(&demands, &manifest.layout, &node_rates)?.seconds;
            let bytes: u64 = reads.iter().flatten().map(|p| p.len).sum();
            for &policy in policies {
                let mut calls = vec![];
                for _ in 0..repeat.max(1) {
                    calls.push(ideal / self.read_all(&manifest, &memory, policy).await?);
                }
                let frac = calls.iter().sum::<f64>() / calls.len() as f64;
                let secs = ideal / frac;
                rows.push(Row {
                    figure: Figure::Reads,
                    servers: self.servers,
                    slow,
                    alloc: AllocKind::Dynamic,
                    iteration: 0,
                    policy: Some(policy.to_string()),
                    mb_per_sec: bytes as f64 / secs / 1e6,
                    peak_mb_per_sec: bytes as f64 / ideal / 1e6,
                    frac_peak: frac,
                    calls,
                    server_bytes: vec![],
                    part_time: false,
                    local_bytes: None,
                });
            }
        }
        self.set_slow(0).await?;
        ganges_client::dataset::remove(self.client(), &self.spec.name).await?;
        Ok(rows)
    }

    /// One collective read of the array by `memory`'s processes with `policy`, from servers
    /// that have forgotten their rates, checked; its seconds.
    async fn read_all(
        &self,
        manifest: &std::sync::Arc<ganges_proto::manifest::Manifest>,
        memory: &ArrayLayout,
        policy: ReadPolicyKind,
    ) -> BenchResult<f64> {
        for n in 0..self.servers {
            self.client().control(NodeId(n), ControlRequest::ForgetRate).await?;
        }
        let t0 = std::time::Instant::now();
        let tasks: Vec<_> = (0..memory.positions())
            .map(|r| {
                let (client, manifest, memory) = (self.client().clone(), manifest.clone(), memory.clone());
                tokio::spawn(async move { arr::read_chunk_with(&client, &manifest, &memory, r, policy).await })
            })
            .collect();
        let mut got = vec![];
        for t in tasks {
            got.push(t.await.map_err(|e| crate::util::BenchError::Failed(format!("a reader failed: {e}")))??);
        }
        let secs = t0.elapsed().as_secs_f64();
        // Checked after the clock stops: generating the expected elements is not the read's cost.
        let schema = &self.spec.schema;
        for (r, chunk) in got.iter().enumerate() {
            if *chunk != generated(schema, &memory.chunk(schema, r as u32)) {
                return fail(format!("process {r} read elements that were not written"));
            }
        }
        Ok(secs)
    }

    /// Ten calls; server 0 is slow in the fifth only.
    async fn iterations(&self, iterations: u32) -> BenchResult<Vec<Row>> {
        let mut rates = Rates::default();
        let mut rows = vec![];
        for i in 1..=iterations {
            let slow = u32::from(i == 5);
            self.set_slow(slow).await?;
            let (frac, server_bytes) = self.call(slow, &mut rates).await?;
            let peak = self.peak(slow);
            rows.push(Row {
                figure: Figure::Iterations,
                servers: self.servers,
                slow,
                alloc: self.spec.alloc,
                iteration: i,
                policy: None,
                mb_per_sec: frac * peak / 1e6,
                peak_mb_per_sec: peak / 1e6,
                frac_peak: frac,
                calls: vec![frac],
                server_bytes,
                part_time: false,
                local_bytes: None,
            });
        }
        self.set_slow(0).await?;
        Ok(rows)
    }
}

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let allocs: Vec<AllocKind> =
        AllocKind::ALL.into_iter().filter(|a| report.rows.iter().any(|r| r.alloc == *a)).collect();
    for (figure, title) in [
        (Figure::Natural, "Figure 4: natural chunking, 8 processes (2x2x2)"),
        (Figure::RowMajor, "Figure 5: row-major on disk, 32 processes (4x4x2)"),
    ] {
        let rows: Vec<&Row> = report.rows.iter().filter(|r| r.figure == figure).collect();
        if rows.is_empty() {
            continue;
        }
        out.push_str(&format!("{title}: fraction of peak (MB/s)\n"));
        let mut header = vec!["slow/servers".to_string(), "peak MB/s".to_string()];
        header.extend(allocs.iter().map(|a| a.to_string()));
        let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
        let mut keys: Vec<(u32, u32)> = rows.iter().map(|r| (r.servers, r.slow)).collect();
        keys.sort_unstable();
        keys.dedup();
        for (servers, slow) in keys {
            let mut cells = vec![format!("{slow}/{servers}")];
            let peak = rows.iter().find(|r| (r.servers, r.slow) == (servers, slow)).map_or(0.0, |r| r.peak_mb_per_sec);
            cells.push(format!("{peak:.0}"));
            for a in &allocs {
                cells.push(match rows.iter().find(|r| (r.servers, r.slow, r.alloc) == (servers, slow, *a)) {
                    Some(r) => format!("{:.1}% ({:.0})", 100.0 * r.frac_peak, r.mb_per_sec),
                    None => "-".into(),
                });
            }
            t.row(cells);
        }
        out.push_str(&t.render());
        out.push('\n');
    }
    let reads: Vec<&Row> = report.rows.iter().filter(|r| r.figure == Figure::Reads).collect();
    if !reads.is_empty() {
        out.push_str(
            "Reads (ours): two copies, 8 processes reading BLOCK,*,*; fraction of the layout-aware ideal (MB/s)\n",
        );
        let mut t = Table::new(&["slow/servers", "policy", "of ideal"]);
        for r in &reads {
            t.row(vec![
                format!("{}/{}", r.slow, r.servers),
                r.policy.clone().unwrap_or_default(),
                format!("{:.1}% ({:.0})", 100.0 * r.frac_peak, r.mb_per_sec),
            ]);
        }
        out.push_str(&t.render());
        out.push('\n');
    }
    let parts: Vec<&Row> = report.rows.iter().filter(|r| r.figure == Figure::PartTime).collect();
    if !parts.is_empty() {
        out.push_str(
            "Part-time I/O nodes: Figure 4's write, servers inside the first processes of 8 or of their own; \
             fraction of peak (share of bytes handed over in memory)\n",
        );
        let mut header = vec!["slow/servers".to_string()];
        for a in &allocs {
            header.push(format!("{a} full-time"));
            header.push(format!("{a} part-time"));
        }
        let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
        let mut keys: Vec<(u32, u32)> = parts.iter().map(|r| (r.servers, r.slow)).collect();
        keys.sort_unstable();
        keys.dedup();
        let bytes = report.shape.iter().product::<u64>() as f64 * 4.0;
        for (servers, slow) in keys {
            let mut cells = vec![format!("{slow}/{servers}")];
            for a in &allocs {
                for part_time in [false, true] {
                    let r = parts
                        .iter()
                        .find(|r| (r.servers, r.slow, r.alloc, r.part_time) == (servers, slow, *a, part_time));
                    cells.push(match r {
                        Some(r) if part_time => format!(
                            "{:.1}% ({:.0}% local)",
                            100.0 * r.frac_peak,
                            100.0 * r.local_bytes.unwrap_or(0) as f64 / bytes
                        ),
                        Some(r) => format!("{:.1}%", 100.0 * r.frac_peak),
                        None => "-".into(),
                    });
                }
            }
            t.row(cells);
        }
        out.push_str(&t.render());
        out.push('\n');
    }
    let iters: Vec<&Row> = report.rows.iter().filter(|r| r.figure == Figure::Iterations).collect();
    if !iters.is_empty() {
        out.push_str("Figures 6-7: 16 processes (4x2x2), row-major on disk; server 0 half as fast in call 5 only\n");
        let mut servers: Vec<u32> = iters.iter().map(|r| r.servers).collect();
        servers.sort_unstable();
        servers.dedup();
        let mut header = vec!["servers".to_string(), "alloc".to_string()];
        let n = iters.iter().map(|r| r.iteration).max().unwrap_or(0);
        header.extend((1..=n).map(|i| i.to_string()));
        let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
        for s in servers {
            for a in &allocs {
                let mut cells = vec![s.to_string(), a.to_string()];
                for i in 1..=n {
                    cells.push(match iters.iter().find(|r| (r.servers, r.alloc, r.iteration) == (s, *a, i)) {
                        Some(r) => format!("{:.0}%", 100.0 * r.frac_peak),
                        None => "-".into(),
                    });
                }
                t.row(cells);
            }
        }
        out.push_str(&t.render());
    }
    out
}

pub fn write_outputs(report: &Report, json: Option<&PathBuf>, plot_path: Option<&PathBuf>) -> BenchResult<()> {
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(report)?)
            .map_err(|e| crate::util::BenchError::Failed(format!("writing {}: {e}", path.display())))?;
    }
    let Some(path) = plot_path else { return Ok(()) };
    let mut series = vec![];
    for (k, a) in AllocKind::ALL.into_iter().enumerate() {
        let mut servers: Vec<u32> =
            report.rows.iter().filter(|r| r.figure == Figure::RowMajor).map(|r| r.servers).collect();
        servers.sort_unstable();
        servers.dedup();
        for (j, s) in servers.into_iter().enumerate() {
            let points: Vec<(f64, f64)> = report
                .rows
                .iter()
                .filter(|r| r.figure == Figure::RowMajor && r.alloc == a && r.servers == s)
                .map(|r| (f64::from(r.slow) / f64::from(s), r.frac_peak))
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    name: format!("{a}"),
                    points,
                    color: Some(k),
                    unlabelled: j > 0,
                    ..Default::default()
                });
            }
        }
    }
    series.push(Series {
        name: "peak".into(),
        points: vec![(0.0, 1.0), (1.0, 1.0)],
        dashed: true,
        ..Default::default()
    });
    plot::line_chart(
        path,
        "array writes (Figure 5): fraction of peak",
        "share of servers slow",
        "fraction of peak",
        &series,
        1.1,
    )
}
