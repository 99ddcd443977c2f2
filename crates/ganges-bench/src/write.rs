//! `ganges bench write`: how close do the write policies come to the best the disks, with
//! their faults, could have done? The rows and ideals are `bench scan`'s:
//! all writers start together once staging is open; T is when the last one has its last
//! block on disk; T is compared with the River ideal (MOD-1: any disk takes any byte) and
//! the layout-aware ideal (MOD-2: writer i's bytes go to its fragment's copies; for a DQ
//! write, whose blocks have no home, it is the River ideal).
//!
//! Writes with a choice of copy leave the dataset incomplete; the bench then runs replica
//! completion (GW-2) under the same faults and reports it against two figures: the disks'
//! aggregate rate (every copied byte is read on one disk and written on another, so the
//! disks move twice the bytes copied), and the best time the placement allows, the most
//! loaded disk's read and write bytes at its rate.
//!
//! With `--stress KIND --on NODES` (CW-1, CEFT-PVFS's experiments) the rows are the write
//! policies with no stress and with the stress on those nodes (one node, or a mirror pair),
//! every server its own node (`crate::stress`). A CPU stress leaves the disks' rates as they
//! are, so its ideal is the unstressed one; a disk or memory stress's competing stream takes
//! half of the stressed disks, and the ideals count it.
//!
//! Every run checks itself: the dataset's digest must be the one its writers computed from
//! the replies, or the bench fails instead of printing a number.

use crate::plot::{self, Series};
use crate::real::{Rates, RealSpec};
use crate::scan::{BenchCluster, CpuWatch, Faulting, Machine, all_stats, median_and_spread};
use crate::util::{BenchResult, Table, fail, git_commit, process_cpu_secs, steps_bar};
use ganges_client::client::Client;
use ganges_client::write::{WriteSource, WriteSpec};
use ganges_core::datagen::Generator;
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::fault::{FaultLayout, place};
use ganges_core::ideal::{layout_ideal, river_ideal_seconds, scan_demands};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::layout::Layout;
use ganges_core::route::ceft::CeftSettings;
use ganges_core::shape::Shape;
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_core::write::WritePolicyKind;
use ganges_harness::local::LocalCluster;
use ganges_harness::stress::StressKind;
use ganges_proto::control::ControlRequest;
use ganges_proto::manifest::{DatasetState, Manifest, RecordFormat};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct WriteBenchSpec {
    pub nodes: u32,
    /// Copies of a static or GD write (a DQ write keeps one).
    pub replicas: u32,
    /// Bytes each writer writes; one writer per node.
    pub fragment_bytes: u64,
    pub block_bytes: u32,
    /// The disk model; `None` with `real`.
    pub disk: Option<DiskParams>,
    pub fault: Fault,
    pub faults: Vec<u32>,
    pub fault_layout: FaultLayout,
    pub seed: u64,
    pub policies: Vec<WritePolicyKind>,
    /// Blocks in flight per writer; `None`: each policy's own.
    pub window: Option<u32>,
    pub repeat: u32,
    /// Run replica completion after each write that leaves copies incomplete.
    pub complete: bool,
    pub root: Option<PathBuf>,
    pub binary: PathBuf,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    /// Load these nodes instead of slowing disks (the `faults` list is then unused).
    pub stress: Option<(StressKind, Vec<u32>)>,
    /// LAY-2 mirrored groups for every policy; `None`: each policy's default.
    pub mirrored: Option<bool>,
    pub ceft: CeftSettings,
    /// On real disks with direct I/O and real faults (`crate::real`; `fragment_bytes` 0
    /// then means: long enough for 6 s writes at the measured rates).
    pub real: Option<RealSpec>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Params {
    pub nodes: u32,
    pub replicas: u32,
    pub fragment_bytes: u64,
    pub block_bytes: u32,
    pub disk_rate_bytes_per_sec: Option<f64>,
    pub seek_ms: f64,
    pub fault: Fault,
    pub fault_layout: FaultLayout,
    pub seed: u64,
    /// Blocks in flight per writer; `None`: each policy's own.
    pub window: Option<u32>,
    pub repeat: u32,
    pub policies: Vec<WritePolicyKind>,
    pub git_commit: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stress: Option<StressKind>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stress_on: Vec<u32>,
    /// Real disks and real faults (`--real`), and the rates measured before the runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real: Option<RealSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<Rates>,
}

/// Replica completion after a write (GW-2).
#[derive(Clone, Debug, Serialize)]
pub struct Completion {
    pub seconds: f64,
    /// Bytes copied between servers.
    pub bytes: u64,
    /// (bytes read + bytes written) / T against the disks' aggregate rate under the faults.
    pub frac_aggregate: f64,
    /// The most loaded disk's read and write bytes at its rate: the best this placement allows.
    pub bound_seconds: f64,
    pub frac_bound: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub policy: WritePolicyKind,
    /// LAY-2 mirrored groups, else chained declustering.
    pub mirrored: bool,
    /// Slow disks, or stressed nodes under `--stress`.
    pub faults: u32,
    pub fault_nodes: Vec<u32>,
    /// Median over repeats.
    pub seconds: f64,
    pub bytes: u64,
    pub aggregate_mb_per_sec: f64,
    /// The slowest writer's bytes over its own time.
    pub slowest_consumer_mb_per_sec: f64,
    pub ideal_river_seconds: f64,
    pub ideal_layout_seconds: f64,
    pub frac_river_ideal: f64,
    pub frac_layout_ideal: f64,
    /// Bytes written to backup copies (static, gd).
    pub backup_bytes_frac: f64,
    pub server_cpu_seconds: f64,
    pub client_cpu_seconds: f64,
    pub repeat_seconds: Vec<f64>,
    pub spread_seconds: f64,
    /// Blocks each server wrote during the write (the median run's).
    pub blocks_per_server: Vec<u64>,
    /// DQ: blocks withdrawn from slow disks at the end of a writer's stream and resent.
    pub steals: u64,
    /// DQ: queued blocks servers gave back to their writers for an idle server (GD-6 for
    /// writes).
    pub redirects: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<Completion>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub params: Params,
    pub machine: Machine,
    pub rows: Vec<Row>,
}

struct Sample {
    seconds: f64,
    bytes: u64,
    slowest: f64,
    backup: u64,
    server_cpu: f64,
    client_cpu: f64,
    blocks_per_server: Vec<u64>,
    steals: u64,
    redirects: u64,
    completion: Option<Completion>,
    /// The share of the machine's CPU time other processes took during the write.
    others_busy: Option<f64>,
}

impl WriteBenchSpec {
    fn validate(&self) -> BenchResult<()> {
        if let Some((_, on)) = &self.stress
            && (on.is_empty() || on.iter().any(|&n| n >= self.nodes))
        {
            return fail(format!("--on names nodes 0 to {} (one node, or a mirror pair)", self.nodes - 1));
        }
        if self.faults.iter().any(|&f| f > self.nodes) {
            return fail(format!("--faults may not exceed --nodes ({})", self.nodes));
        }
        if self.policies.is_empty() || self.faults.is_empty() {
            return fail("give at least one policy and one fault count");
        }
        match (&self.real, &self.disk) {
            (Some(r), None) => {
                r.validate()?;
                if self.stress.is_some() {
                    return fail("--stress loads nodes of the disk model; leave it out with --real");
                }
            }
            (Some(_), Some(_)) => return fail("--real writes to the real disks: leave out --disk-rate"),
            (None, None) => {
                return fail(
                    "bench write compares against the disk model or real disks: give a --disk-rate, or --real",
                );
            }
            (None, Some(_)) => {}
        }
        self.fault.validate()?;
        Ok(())
    }

    /// How this bench's faults are made, and the rates its ideals use.
    fn faulting(&self, rates: Option<Rates>) -> Faulting {
        match (self.real, rates) {
            (Some(spec), Some(rates)) => Faulting::Real { spec, rates },
            _ => Faulting::Model { fault: self.disk_fault(), disk: self.disk },
        }
    }

    /// The slow-disk fault: the configured one, or a stress's competing stream.
    fn disk_fault(&self) -> Fault {
        match self.stress {
            Some((kind, _)) if kind.loads_disk() => Fault::Competing { share: ganges_harness::stress::DISK_SHARE },
            _ => self.fault,
        }
    }

    /// The disks slowed in a state whose stressed (or faulty) nodes are `nodes`.
    fn slowed(&self, nodes: &[NodeId]) -> Vec<NodeId> {
        match self.stress {
            Some((kind, _)) if !kind.loads_disk() => vec![],
            _ => nodes.to_vec(),
        }
    }

    /// The states a run goes through: (slow disks or stressed nodes).
    fn states(&self) -> Vec<Vec<NodeId>> {
        match &self.stress {
            Some((_, on)) => vec![vec![], on.iter().map(|&n| NodeId(n)).collect()],
            None => self.faults.iter().map(|&f| place(self.fault_layout, self.nodes, f, self.seed)).collect(),
        }
    }

    fn mirrored(&self, policy: WritePolicyKind) -> bool {
        self.mirrored.unwrap_or(self.stress.is_some() || policy.default_mirrored())
    }

    fn layout(&self, policy: WritePolicyKind) -> BenchResult<Layout> {
        Ok(if self.mirrored(policy) {
            Layout::mirrored(self.nodes)?
        } else {
            Layout::chained(self.nodes, self.replicas)?
        })
    }

    /// (River, layout-aware) ideal seconds of a write by `policy` under `faulty`.
    fn ideals(
        &self,
        faulting: &Faulting,
        fragment_bytes: u64,
        policy: WritePolicyKind,
        faulty: &[NodeId],
    ) -> BenchResult<(f64, f64)> {
        let rates = faulting.rates(self.nodes, faulty).expect("a write bench has rates");
        let shape = Shape::uniform(self.nodes, fragment_bytes, self.block_bytes)?;
        let river = river_ideal_seconds(shape.total_bytes(), &rates);
        if policy == WritePolicyKind::Dq {
            return Ok((river, river));
        }
        let demands = scan_demands(&shape, &shape.fragment_partitions())?;
        Ok((river, layout_ideal(&demands, &self.layout(policy)?, &rates)?.seconds))
    }
}

/// Where the servers keep their data by default: memory (/dev/shm) when it has room for a
/// run, so that the modelled disks, and not this machine's file system, are what the policies
/// are measured against (on this 2-core machine, ext4 taking 500 MB/s of writes cost the
/// servers up to a tenth of their time in some runs); else the temp folder.
fn scratch(spec: &WriteBenchSpec) -> PathBuf {
    if spec.real.is_some() {
        // Real disks: the temp folder's (a tmpfs would refuse direct I/O, and say so).
        return std::env::temp_dir();
    }
    let shm = PathBuf::from("/dev/shm");
    // A run holds one dataset and its completed copies at a time.
    let need = 2 * spec.fragment_bytes * spec.nodes as u64 * spec.replicas.max(1) as u64;
    match ganges_harness::sys::free_bytes(&shm) {
        Some(free) if free > need => shm,
        _ => std::env::temp_dir(),
    }
}

pub fn run_write(spec: &WriteBenchSpec) -> BenchResult<Report> {
    spec.validate()?;
    let groups = match spec.stress {
        Some(_) => Some(ganges_harness::stress::NodeGroups::create(spec.nodes)?),
        None => None,
    };
    let cluster = BenchCluster {
        nodes: spec.nodes,
        disk: spec.disk,
        root: spec.root.clone(),
        scratch: scratch(spec),
        binary: spec.binary.clone(),
        node_groups: groups.as_ref().map(|g| ganges_harness::stress::NodeSpec {
            cgroup_parent: g.parent.clone(),
            memory_bytes: ganges_harness::stress::NODE_MEMORY,
            // A network stress needs a link that can be loaded: the link model, at
            // LINK_PER_DISK of the disk's rate.
            link_bytes_per_sec: (spec.stress.as_ref().map(|s| s.0) == Some(StressKind::Network))
                .then(|| spec.disk.map_or(0.0, |d| d.rate_bytes_per_sec) * ganges_harness::stress::LINK_PER_DISK),
        }),
        real: spec.real,
        metrics_scrape: false,
    };
    let started = cluster.start()?;
    let report = started.block_on(bench_on_cluster(spec, &started.cluster, groups.as_ref()));
    // The servers leave their groups before the groups go.
    drop(started);
    drop(groups);
    report
}

async fn bench_on_cluster(
    spec: &WriteBenchSpec,
    cluster: &LocalCluster,
    groups: Option<&ganges_harness::stress::NodeGroups>,
) -> BenchResult<Report> {
    let client = Client::connect(cluster.cluster().clone()).await?;
    let rates = match &spec.real {
        Some(real) => {
            eprintln!(
                "measuring every server's disk writes{}, alone and all at once",
                if real.netns() { " and link" } else { "" }
            );
            Some(crate::real::measure(&client, real).await?)
        }
        None => None,
    };
    let faulting = spec.faulting(rates);
    let fragment_bytes = match faulting.measured() {
        Some(r) if spec.fragment_bytes == 0 => crate::real::fragment_bytes_for(r, 6.0, u64::from(spec.block_bytes)),
        _ => spec.fragment_bytes,
    };
    let mut machine = Machine::here(None).await;
    let run = Runner { client: &client, spec, faulting: &faulting, fragment_bytes };
    let states = spec.states();
    let (nf, np) = (states.len(), spec.policies.len());
    let bar = steps_bar((spec.repeat as usize * nf * np) as u64, "write");
    // One untimed write first: fresh buffers, thread pools and page faults in every process
    // are not what any policy should be charged for.
    run.once(spec.policies[0], &[], "bench-write-warmup").await?;
    let mut samples: Vec<Vec<Vec<Sample>>> = (0..nf).map(|_| (0..np).map(|_| vec![]).collect()).collect();
    for _ in 0..spec.repeat {
        for (fi, nodes) in states.iter().enumerate() {
            // A stress's processes run through every policy of the state, then go.
            let mut stressors = vec![];
            if let (Some((kind, _)), Some(g)) = (&spec.stress, groups) {
                let kind = *kind;
                for n in nodes {
                    let leave = spec.fragment_bytes / 4;
                    let addr = &cluster.cluster().servers[n.0 as usize].addr;
                    stressors.extend(ganges_harness::stress::start(&spec.binary, kind, &g.group(n.0), addr, leave)?);
                }
                if !nodes.is_empty() {
                    bar.set_message(format!("{kind} stress on {} settling", nodes_text(nodes)));
                    tokio::time::sleep(ganges_harness::stress::SETTLE).await;
                }
            }
            let slowed = spec.slowed(nodes);
            for (pi, &policy) in spec.policies.iter().enumerate() {
                bar.set_message(format!(
                    "{policy}, {} {}",
                    nodes.len(),
                    if spec.stress.is_some() { "stressed" } else { "faults" }
                ));
                let mut sample = run.once(policy, &slowed, "bench-write").await?;
                if !stressors.is_empty() {
                    // The stress's own processes are the point of the run.
                    sample.others_busy = None;
                }
                samples[fi][pi].push(sample);
                bar.inc(1);
            }
            drop(stressors);
        }
    }
    faulting.apply(&client, &[]).await?;
    if spec.real.is_some() {
        crate::real::clear(&client).await?;
    }
    bar.finish_and_clear();
    machine.note_runs(samples.iter().flatten().flatten().map(|s| s.others_busy));
    machine.warn_if_others_busy();
    let mut rows = vec![];
    for (fi, nodes) in states.iter().enumerate() {
        let slowed = spec.slowed(nodes);
        for (pi, &policy) in spec.policies.iter().enumerate() {
            let (river, layout) = spec.ideals(&faulting, fragment_bytes, policy, &slowed)?;
            rows.push(row(policy, spec.mirrored(policy), nodes, &mut samples[fi][pi], river, layout));
        }
    }
    Ok(Report {
        bench: "write",
        params: Params {
            nodes: spec.nodes,
            replicas: spec.replicas,
            fragment_bytes,
            block_bytes: spec.block_bytes,
            disk_rate_bytes_per_sec: spec.disk.map(|d| d.rate_bytes_per_sec),
            seek_ms: spec.disk.map_or(0.0, |d| d.seek.as_secs_f64() * 1e3),
            fault: spec.fault,
            fault_layout: spec.fault_layout,
            seed: spec.seed,
            window: spec.window,
            repeat: spec.repeat,
            policies: spec.policies.clone(),
            git_commit: git_commit(),
            stress: spec.stress.as_ref().map(|s| s.0),
            stress_on: spec.stress.as_ref().map_or(vec![], |s| s.1.clone()),
            real: spec.real,
            measured: faulting.measured().cloned(),
        },
        machine,
        rows,
    })
}

/// What every run of a write bench shares.
struct Runner<'a> {
    client: &'a std::sync::Arc<Client>,
    spec: &'a WriteBenchSpec,
    faulting: &'a Faulting,
    /// Bytes each writer writes.
    fragment_bytes: u64,
}

impl Runner<'_> {
    /// One write under `faulty`, then its completion if it left copies incomplete; the dataset
    /// is removed afterwards.
    async fn once(&self, policy: WritePolicyKind, faulty: &[NodeId], name: &str) -> BenchResult<Sample> {
        let (client, spec) = (self.client, self.spec);
        self.faulting.before_run(client, faulty).await?;
        let watch = CpuWatch::start();
        let before = all_stats(client).await?;
        let cpu0 = process_cpu_secs();
        let w = WriteSpec {
            name: name.parse()?,
            writers: spec.nodes,
            total_bytes: self.fragment_bytes * spec.nodes as u64,
            block_bytes: spec.block_bytes,
            replicas: if policy == WritePolicyKind::Dq { 1 } else { spec.replicas },
            policy,
            window: spec.window,
            source: WriteSource::Generated(Generator::Random { seed: spec.seed }),
            complete: false,
            run_blocks: 1,
            ceft: spec.ceft,
            mirrored: spec.mirrored(policy),
            records: RecordFormat::Bytes,
        };
        let out = ganges_client::write::write(client, w, None).await?;
        let client_cpu = process_cpu_secs() - cpu0;
        let after = all_stats(client).await?;
        let server_cpu = after.iter().zip(&before).map(|(a, b)| a.cpu_secs - b.cpu_secs).sum();
        let others_busy = watch.busy_share(client_cpu + server_cpu);
        let m = &out.manifest;
        let blocks_per_server = blocks_per_server(m);
        if blocks_per_server.iter().sum::<u64>() < m.shape.total_blocks() {
            return fail(format!("{policy}: the write placed fewer blocks than the dataset has"));
        }
        let completion = if spec.complete && m.state == DatasetState::Incomplete {
            Some(self.complete(m, faulty).await?)
        } else {
            None
        };
        let remove = ControlRequest::Remove { name: m.name.clone() };
        for (node, r) in client.control_all(&client.live_nodes(), &remove).await {
            r.map_err(|e| crate::util::BenchError::Failed(format!("removing the bench dataset on {node}: {e}")))?;
        }
        Ok(Sample {
            seconds: out.seconds,
            bytes: m.total_bytes(),
            slowest: out.writers.iter().map(|r| mb_per_sec(r.bytes, r.seconds)).fold(f64::INFINITY, f64::min),
            backup: out.writers.iter().map(|r| r.stats.backup_bytes()).sum(),
            server_cpu,
            client_cpu,
            blocks_per_server,
            steals: out.writers.iter().map(|r| r.stats.steals).sum(),
            redirects: out.writers.iter().map(|r| r.stats.moved).sum(),
            completion,
            others_busy,
        })
    }
}

/// Blocks each server holds after the write: its copies' present blocks.
fn blocks_per_server(m: &Manifest) -> Vec<u64> {
    let mut per = vec![0u64; m.layout.nodes() as usize];
    for f in 0..m.shape.fragment_count() {
        let fragment = FragmentId(f);
        for copy in 0..m.layout.replicas() {
            let n = m.layout.node_of(fragment, copy).0 as usize;
            per[n] += match (&m.state, &m.placement) {
                (DatasetState::Incomplete, Some(p)) => p.present(fragment, copy) as u64,
                _ => m.shape.blocks_in(fragment) as u64,
            };
        }
    }
    per
}

impl Runner<'_> {
    /// Replica completion of `m`, measured against the disks' aggregate rate and the bound its
    /// placement sets (module docs).
    async fn complete(&self, m: &Manifest, faulty: &[NodeId]) -> BenchResult<Completion> {
        let (client, spec) = (self.client, self.spec);
        let p = m.placement.as_ref().expect("an incomplete dataset has a placement");
        let mut disk_bytes = vec![0u64; spec.nodes as usize];
        for f in 0..m.shape.fragment_count() {
            let fragment = FragmentId(f);
            for copy in 0..m.layout.replicas() {
                for b in p.missing(fragment, copy) {
                    let len = m.shape.block_len(fragment, b) as u64;
                    let src = p.copies(fragment, b).next().expect("held somewhere");
                    disk_bytes[m.layout.node_of(fragment, copy).0 as usize] += len;
                    disk_bytes[m.layout.node_of(fragment, src).0 as usize] += len;
                }
            }
        }
        let mut rates = self.faulting.rates(spec.nodes, faulty).expect("a write bench has rates");
        if let Faulting::Real { .. } = self.faulting {
            // A kernel throttle keeps a budget for reads and another for writes, and
            // completion reads on one disk what it writes on another: each disk can move its
            // rate both ways at once (the model charges both against one rate).
            rates.iter_mut().for_each(|r| *r *= 2.0);
        }
        let c = ganges_client::write::complete(client, &m.name).await?;
        let total: u64 = disk_bytes.iter().sum();
        let bound = disk_bytes.iter().zip(&rates).map(|(b, r)| *b as f64 / r).fold(0.0, f64::max);
        Ok(Completion {
            seconds: c.seconds,
            bytes: c.bytes,
            frac_aggregate: total as f64 / c.seconds / rates.iter().sum::<f64>(),
            bound_seconds: bound,
            frac_bound: bound / c.seconds,
        })
    }
}

fn nodes_text(nodes: &[NodeId]) -> String {
    nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(",")
}

fn row(
    policy: WritePolicyKind,
    mirrored: bool,
    faulty: &[NodeId],
    samples: &mut [Sample],
    river: f64,
    layout: f64,
) -> Row {
    let times: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
    let (median, spread) = median_and_spread(&times);
    let m = &mut samples[median];
    Row {
        policy,
        mirrored,
        faults: faulty.len() as u32,
        fault_nodes: faulty.iter().map(|n| n.0).collect(),
        seconds: m.seconds,
        bytes: m.bytes,
        aggregate_mb_per_sec: mb_per_sec(m.bytes, m.seconds),
        slowest_consumer_mb_per_sec: m.slowest,
        ideal_river_seconds: river,
        ideal_layout_seconds: layout,
        frac_river_ideal: river / m.seconds,
        frac_layout_ideal: layout / m.seconds,
        backup_bytes_frac: m.backup as f64 / m.bytes.max(1) as f64,
        server_cpu_seconds: m.server_cpu,
        client_cpu_seconds: m.client_cpu,
        repeat_seconds: times,
        spread_seconds: spread,
        blocks_per_server: std::mem::take(&mut m.blocks_per_server),
        steals: m.steals,
        redirects: m.redirects,
        completion: m.completion.take(),
    }
}

pub fn render(report: &Report) -> String {
    let p = &report.params;
    let load = match p.stress {
        Some(kind) => format!(
            "{kind} stress on node {} (every server its own node: one CPU, {})",
            p.stress_on.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
            ByteSize(ganges_harness::stress::NODE_MEMORY)
        ),
        None => format!("fault {} ({} layout)", p.fault, p.fault_layout),
    };
    let disks = match (&p.real, &p.measured, p.disk_rate_bytes_per_sec) {
        (Some(real), Some(rates), _) => crate::real::describe(real, rates),
        (_, _, Some(rate)) => format!("disks {}/s ({} ms seek)", ByteSize(rate as u64), p.seek_ms),
        _ => "real disks".into(),
    };
    let load = if p.real.is_some() { format!("{} faulty layout", p.fault_layout) } else { load };
    let mut out = format!(
        "write: {} writers of {} on {} nodes, {disks}, {} blocks, {} copies (dq: 1), {load}, median of {}, \
         commit {}\n",
        p.nodes,
        ByteSize(p.fragment_bytes),
        p.nodes,
        ByteSize(p.block_bytes as u64),
        p.replicas,
        p.repeat,
        p.git_commit
    );
    let mut t = Table::new(&[
        "policy",
        "layout",
        if p.stress.is_some() { "stressed" } else { "faults" },
        "seconds",
        "MB/s",
        "% river",
        "% layout",
        "backup %",
        "complete s",
        "% of disks",
        "% of bound",
    ]);
    for r in &report.rows {
        let c = r.completion.as_ref();
        t.row(vec![
            r.policy.to_string(),
            if r.mirrored { "mirrored" } else { "chained" }.into(),
            r.faults.to_string(),
            format!("{:.2}", r.seconds),
            format!("{:.1}", r.aggregate_mb_per_sec),
            format!("{:.1}", 100.0 * r.frac_river_ideal),
            format!("{:.1}", 100.0 * r.frac_layout_ideal),
            format!("{:.1}", 100.0 * r.backup_bytes_frac),
            c.map_or("-".into(), |c| format!("{:.2}", c.seconds)),
            c.map_or("-".into(), |c| format!("{:.1}", 100.0 * c.frac_aggregate)),
            c.map_or("-".into(), |c| format!("{:.1}", 100.0 * c.frac_bound)),
        ]);
    }
    out.push_str(&t.render());
    out.push_str(
        "% river / % layout: the ideal time over the measured one (dq's blocks have no home, so its layout \
         ideal is river's). complete: replica completion under the same faults, against the disks' \
         aggregate rate (each copied byte is read once and written once) and against the most loaded \
         disk's share.\n",
    );
    out
}

pub fn write_outputs(report: &Report, json: Option<&PathBuf>, plot_path: Option<&PathBuf>) -> BenchResult<()> {
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(report)?)
            .map_err(|e| crate::util::BenchError::Failed(format!("writing {}: {e}", path.display())))?;
    }
    if let Some(path) = plot_path {
        let p = &report.params;
        let mut series: Vec<Series> = p
            .policies
            .iter()
            .map(|&policy| Series {
                name: policy.to_string(),
                points: report
                    .rows
                    .iter()
                    .filter(|r| r.policy == policy)
                    .map(|r| (r.faults as f64, r.frac_layout_ideal))
                    .collect(),
                ..Default::default()
            })
            .collect();
        let xs: Vec<f64> = report.rows.iter().map(|r| r.faults as f64).collect();
        let (lo, hi) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
        series.push(Series {
            name: "ideal".into(),
            points: vec![(lo, 1.0), (hi, 1.0)],
            dashed: true,
            ..Default::default()
        });
        let (title, x) = match p.stress {
            Some(kind) => (format!("write: {} writers, {kind} stress, % of ideal", p.nodes), "stressed nodes"),
            None => (
                format!("write: {} writers, {} faults ({}), % of ideal", p.nodes, p.fault_layout, p.fault),
                "faulty disks",
            ),
        };
        plot::line_chart(path, &title, x, "fraction of ideal", &series, 1.1)?;
    }
    Ok(())
}
