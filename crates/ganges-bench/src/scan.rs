//! `ganges bench scan` (and the demo, which is a small one): how close do the read policies
//! come to the best the hardware, with its faults, could have done? Per row: all consumers
//! start together after every connection is open, T is when the last one finishes, and T is
//! compared with the River ideal (MOD-1) and the layout-aware ideal (MOD-2) for the same
//! server rates and partitions (docs/design.md, "The ideals").
//!
//! A run is one (block size, fault count, partition ratio, policy); the bench makes one
//! dataset per block size and alternates everything else, `--repeat` times, reporting the
//! median. Faults are on for the whole run unless `--fault-schedule` turns them on and off
//! during it; then the ideal integrates the phases, every consumer's delivered bytes are
//! sampled every 100 ms, and the *adaptation time* after each change is reported: until
//! the slowest consumer's rate over 500 ms stays within 10% of its new ideal rate.
//!
//! With `--access random` each consumer reads as many whole blocks as its partition holds,
//! each picked anywhere in the dataset from the seed, through the async interface; the ideals
//! are computed for exactly those blocks.
//!
//! Every run also checks its own correctness: the digest of what the consumers received must
//! equal the dataset's (random reads: every byte asked for must have come back, each block's
//! checksum checked on arrival), or the bench fails instead of printing a number.

use crate::plot::{self, Series};
use crate::real::{Rates, RealSpec};
use crate::util::{BenchError, BenchResult, Table, fail, git_commit, process_cpu_secs, steps_bar};
use ganges_client::ClientError;
use ganges_client::client::Client;
use ganges_client::dataset::{self, CreateSpec};
use ganges_client::scan::{ReadOptions, ReadReport, ReadStream};
use ganges_client::stream::AsyncReader;
use ganges_core::datagen::{Generator, mix64};
use ganges_core::digest::Digest;
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::fault::{FaultLayout, place};
use ganges_core::ideal::{layout_ideal, read_demands, river_ideal_seconds};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::measure::{Change, SAMPLE_SECS, Sampled, scheduled_ideal};
use ganges_core::parse::ParseError;
use ganges_core::route::{PolicySettings, ReadPolicyKind, WINDOW_DEFAULT, WINDOW_GD, WINDOW_PLAN, WINDOW_RANDOM};
use ganges_core::shape::{Partition, Shape};
use ganges_core::units::{ByteSize, Dur, mb_per_sec};
use ganges_harness::local::{LocalCluster, LocalSpec};
use ganges_proto::control::{ControlReply, ControlRequest, ServerStats};
use ganges_proto::manifest::Manifest;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a `--real` scan should last when no fragment size is given: long enough that
/// start-up is a small part of T.
const REAL_RUN_SECONDS: f64 = 6.0;

/// Sampling period of consumer timelines: every 100 ms.
pub const SAMPLE_MS: u64 = (SAMPLE_SECS * 1000.0) as u64;

/// Data of even and odd consumers, `even:odd` (gd-enhancements §4.3: 1:1, 1:1.5, 1:2).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Ratio {
    pub even: f64,
    pub odd: f64,
}

impl Ratio {
    pub const EQUAL: Ratio = Ratio { even: 1.0, odd: 1.0 };
}

impl FromStr for Ratio {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Ratio, ParseError> {
        let bad = || ParseError::malformed("a ratio like 1:1.5", s, "even consumers' data : odd consumers'");
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        let (even, odd): (f64, f64) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        if !(even > 0.0 && odd > 0.0 && even.is_finite() && odd.is_finite()) {
            return Err(bad());
        }
        Ok(Ratio { even, odd })
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.even, self.odd)
    }
}

/// When faults are on during a run: from `start` to `end` (or to the end of the run).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FaultWindow {
    pub start_secs: f64,
    pub end_secs: Option<f64>,
}

impl FromStr for FaultWindow {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<FaultWindow, ParseError> {
        let bad = |why: &str| ParseError::malformed("a fault window like 2s-6s or 2s-", s, why);
        let (a, b) = s.split_once('-').ok_or_else(|| bad("no `-`"))?;
        let start = a.parse::<Dur>().map_err(|e| bad(&e.to_string()))?.0.as_secs_f64();
        let end = if b.trim().is_empty() {
            None
        } else {
            Some(b.parse::<Dur>().map_err(|e| bad(&e.to_string()))?.0.as_secs_f64())
        };
        if end.is_some_and(|e| e <= start) {
            return Err(bad("it ends before it starts"));
        }
        Ok(FaultWindow { start_secs: start, end_secs: end })
    }
}

/// Which layout the bench's dataset uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutChoice {
    Chained,
    Mirrored,
}

impl FromStr for LayoutChoice {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "chained" => Ok(LayoutChoice::Chained),
            "mirrored" => Ok(LayoutChoice::Mirrored),
            _ => Err(ParseError::unknown("layout", s, ["chained", "mirrored"])),
        }
    }
}

/// What each consumer of a bench run reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Its partition, whole, through a read stream: the papers' scans.
    Scan,
    /// As many whole blocks as its partition holds, each anywhere in the dataset (chosen
    /// from the seed), through the async interface with the window's reads at once: random
    /// access, as a training-data loader that shuffles reads.
    Random,
}

impl FromStr for Access {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "scan" => Ok(Access::Scan),
            "random" => Ok(Access::Random),
            _ => Err(ParseError::unknown("access", s, ["scan", "random"])),
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Scan => "scan",
            Access::Random => "random",
        })
    }
}

#[derive(Clone, Debug)]
pub struct ScanBenchSpec {
    pub nodes: u32,
    pub replicas: u32,
    pub layout: LayoutChoice,
    pub fragment_bytes: u64,
    pub block_sizes: Vec<u32>,
    pub disk: Option<DiskParams>,
    pub fault: Fault,
    pub faults: Vec<u32>,
    pub fault_layout: FaultLayout,
    pub schedule: Vec<FaultWindow>,
    pub seed: u64,
    pub policies: Vec<ReadPolicyKind>,
    /// Requests in flight per consumer; `None`: each policy's default.
    pub window: Option<u32>,
    pub settings: PolicySettings,
    pub ratios: Vec<Ratio>,
    pub access: Access,
    pub repeat: u32,
    /// Also run every configuration in the simulator and print both (SIM-2).
    pub sim: bool,
    pub root: Option<PathBuf>,
    pub binary: PathBuf,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub plot_time: Option<PathBuf>,
    /// On real disks with direct I/O, faults made real (`crate::real`); `fragment_bytes` 0
    /// then means: long enough for 6 s runs at the measured rates.
    pub real: Option<RealSpec>,
    /// Servers serve Prometheus metrics, scraped every second while the bench runs (what
    /// metrics cost on the data path).
    pub metrics_scrape: bool,
    /// Serve the live dashboard here while the bench runs, its table filling run by run.
    pub dashboard: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Params {
    pub nodes: u32,
    pub replicas: u32,
    pub layout: LayoutChoice,
    pub fragment_bytes: u64,
    /// The first block size (kept for tools reading older documents).
    pub block_bytes: u32,
    pub block_sizes: Vec<u32>,
    pub disk_rate_bytes_per_sec: Option<f64>,
    pub seek_ms: f64,
    pub queue_depth: u32,
    pub fault: Fault,
    pub fault_factor: Option<f64>,
    pub fault_layout: FaultLayout,
    pub fault_schedule: Vec<FaultWindow>,
    pub seed: u64,
    /// `None`: each policy's default (`ReadPolicyKind::default_window`).
    pub window: Option<u32>,
    pub settings: PolicySettings,
    pub ratios: Vec<Ratio>,
    pub access: Access,
    pub repeat: u32,
    pub policies: Vec<ReadPolicyKind>,
    pub git_commit: String,
    /// Real disks and real faults (`--real`), and the rates measured before the runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real: Option<RealSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<Rates>,
    /// Every server's metrics were scraped each second during the runs.
    pub metrics_scrape: bool,
}

/// How long a consumer took to settle after a fault started or stopped.
#[derive(Clone, Debug, Serialize)]
pub struct Adaptation {
    pub at_secs: f64,
    /// "start" or "stop".
    pub change: &'static str,
    /// `None`: the slowest consumer never came within 10% of its new ideal share before the
    /// next change or the end of the run.
    pub seconds: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub policy: ReadPolicyKind,
    pub block_bytes: u32,
    pub ratio: Ratio,
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
    /// Every repeat's share of bytes read from backup copies, in run order (`backup_bytes_frac`
    /// is the median run's).
    pub repeat_backup_frac: Vec<f64>,
    /// Seeks the modelled disks paid during the run.
    pub seeks: u64,
    pub duplicates: u64,
    pub steals: u64,
    /// Last blocks sent to a second server at the end of the scan.
    pub hedges: u64,
    pub retries: u64,
    /// Requests servers handed to one another (GD-6).
    pub handed_off: u64,
    /// Peak resident memory of the largest server at the end of the run.
    pub server_peak_rss_bytes: u64,
    /// When each consumer finished, from the common start.
    pub consumer_seconds: Vec<f64>,
    /// Fraction of T each modelled disk spent seeking or transferring, per node.
    pub disk_busy_frac: Vec<f64>,
    /// Seeks each modelled disk paid, per node.
    pub disk_seeks: Vec<u64>,
    /// Bytes each consumer had received at every `SAMPLE_MS` since the start (the median
    /// run's), for rate-over-time plots.
    pub delivered: Vec<Vec<u64>>,
    /// With a fault schedule: the adaptation time after each change (the median run's).
    pub adaptation: Vec<Adaptation>,
    /// Each consumer's rate in the layout-aware ideal, with the faults on and off (bytes/s).
    pub ideal_consumer_rates_faulty: Vec<f64>,
    pub ideal_consumer_rates_free: Vec<f64>,
    /// With `--sim`: the same run in the simulator (its `sim_*` keys beside the real run's).
    #[serde(flatten)]
    pub sim: Option<Simulated>,
}

impl Row {
    /// The simulated run's adaptation times (none without `--sim` or a fault schedule).
    fn sim_adaptation(&self) -> &[Adaptation] {
        self.sim.as_ref().map_or(&[], |s| &s.sim_adaptation)
    }
}

/// A bench row's run in the simulator (`--sim`).
#[derive(Clone, Debug, Serialize)]
pub struct Simulated {
    pub sim_seconds: f64,
    pub sim_frac_layout_ideal: f64,
    /// With a fault schedule: the simulated run's adaptation times, by the same measure (no
    /// machine noise: what the policy itself does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sim_adaptation: Vec<Adaptation>,
    /// Where the simulated run's time went, to set beside the real run's `consumer_seconds`,
    /// `disk_busy_frac` and `seeks` (a disk's share of the time passes 1 by up to a read where
    /// it starts one the scan no longer needs before the last consumer's end).
    pub sim_consumer_seconds: Vec<f64>,
    pub sim_disk_busy_frac: Vec<f64>,
    pub sim_seeks: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// A raw TCP stream over loopback between two threads, same buffer size, same run.
    pub loopback_mb_per_sec: Option<f64>,
    pub cpus: usize,
    /// The share of the machine's CPU time that was busy in the half second before the runs
    /// (`/proc/stat`; `None` where there is none): the benches run in wall time, and work
    /// beside them reads as a slower cluster.
    pub busy_before: Option<f64>,
    /// The largest share of the machine's CPU time that processes other than the bench and
    /// its servers took during one timed run (`/proc/stat`'s busy time less the bench's and
    /// the servers' own): work that starts while the runs go on, which the look before them
    /// cannot see.
    pub busy_others_max: Option<f64>,
}

/// Over this share of busy CPU time before its runs, a bench warns that its figures may read
/// low. Idle servers waiting for the first run take next to none.
const BUSY_WARN: f64 = 0.25;

/// Over this share of the CPU time taken by other processes during a run, a bench warns that
/// its figures may read low. With nothing else running, the kernel's own threads take about
/// 1% here.
const BUSY_OTHERS_WARN: f64 = 0.1;

impl Machine {
    /// This machine as a bench starting its runs finds it: its CPUs, and how busy they are
    /// over half a second, with a warning on standard error when others are using them.
    pub async fn here(loopback_mb_per_sec: Option<f64>) -> Machine {
        let watch = CpuWatch::start();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let busy_before = watch.busy_share(0.0);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(busy) = busy_before.filter(|&b| b > BUSY_WARN) {
            eprintln!(
                "warning: the CPUs were {:.0}% busy before the runs; this bench runs in wall time, so other \
                 work on the machine makes its figures read low (recorded as machine.busy_before)",
                100.0 * busy
            );
        }
        Machine { loopback_mb_per_sec, cpus, busy_before, busy_others_max: None }
    }

    /// Notes what other processes took of the CPUs in runs (`others`, a share per run).
    pub fn note_runs(&mut self, others: impl IntoIterator<Item = Option<f64>>) {
        self.busy_others_max = self.busy_others_max.into_iter().chain(others.into_iter().flatten()).reduce(f64::max);
    }

    /// Once every run is in: a warning on standard error when other processes took more than
    /// `BUSY_OTHERS_WARN` of the CPUs in one.
    pub fn warn_if_others_busy(&self) {
        if let Some(busy) = self.busy_others_max.filter(|&b| b > BUSY_OTHERS_WARN) {
            eprintln!(
                "warning: other processes took up to {:.0}% of the CPUs during a run; this bench runs in wall \
                 time, so its figures may read low (recorded as machine.busy_others_max)",
                100.0 * busy
            );
        }
    }
}

/// The machine's busy and total CPU seconds when a span began (`None` without `/proc/stat`).
#[derive(Debug)]
pub struct CpuWatch(Option<(f64, f64)>);

impl CpuWatch {
    pub fn start() -> CpuWatch {
        CpuWatch(ganges_harness::sys::machine_cpu_secs())
    }

    /// The share of the machine's CPU time since `start` that was busy, less `ours` seconds
    /// (the bench's and its servers' own, to leave what other processes took).
    pub fn busy_share(&self, ours: f64) -> Option<f64> {
        let ((busy0, total0), (busy1, total1)) = (self.0?, ganges_harness::sys::machine_cpu_secs()?);
        (total1 > total0).then(|| ((busy1 - busy0 - ours) / (total1 - total0)).clamp(0.0, 1.0))
    }
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
    hedges: u64,
    retries: u64,
    handed_off: u64,
    peak_rss: u64,
    consumer_seconds: Vec<f64>,
    disk_busy_frac: Vec<f64>,
    disk_seeks: Vec<u64>,
    delivered: Vec<Vec<u64>>,
    /// The point of the wall clock's second the run started at, if it waited for one.
    phase: Option<Duration>,
    /// The share of the machine's CPU time other processes took during the run.
    others_busy: Option<f64>,
}

impl Sample {
    /// The share of the bytes read from backup copies.
    fn backup_frac(&self) -> f64 {
        self.backup_bytes as f64 / self.bytes.max(1) as f64
    }
}

/// What one run reads and under which faults.
struct Run<'a> {
    manifest: &'a Arc<Manifest>,
    policy: ReadPolicyKind,
    partitions: &'a [Partition],
    faulty: &'a [NodeId],
    /// Where in the wall clock's second the run starts (`run_phase`); `None`: at once.
    phase: Option<Duration>,
}

/// Where in the wall clock's second a run of `policy` starts, if it waits for a point at
/// all: the next of the invocation's seeded `phases` when the policy's servers lay phase
/// slots out from whole seconds (gd-plan's, `Discipline::phase_period`). How such a scan
/// fares at one slow disk depends on where in the period it starts (by about three points);
/// left to the setup's timing, every invocation started its runs at the same few points, and
/// the figure was a sample of those. Drawn from the seed, the runs sample the period evenly, and the first starts
/// where `ganges sim` starts the same seed's scan, as the row's simulated run (`--sim`) does.
fn run_phase(
    policy: ReadPolicyKind,
    settings: &PolicySettings,
    phases: &mut impl Iterator<Item = Duration>,
) -> Option<Duration> {
    policy.build(settings).service().discipline.phase_period()?;
    phases.next()
}

/// How long from `now` until the wall clock next shows `phase` into a second, the phase the
/// servers' slots keep (`ganges_server::into_wall_second`).
fn until_phase(now: std::time::SystemTime, phase: Duration) -> Duration {
    const SECOND: u64 = 1_000_000_000;
    let into = u64::from(ganges_server::into_wall_second(now).subsec_nanos());
    Duration::from_nanos((phase.as_nanos() as u64 % SECOND + SECOND - into) % SECOND)
}

impl ScanBenchSpec {
    fn window_of(&self, policy: ReadPolicyKind, block_bytes: u32) -> u32 {
        let default = match self.access {
            Access::Scan => policy.default_window(u64::from(block_bytes), &self.settings),
            Access::Random => WINDOW_RANDOM,
        };
        self.window.unwrap_or(default)
    }

    fn validate(&self) -> BenchResult<()> {
        if self.faults.iter().any(|&f| f > self.nodes) {
            return fail(format!("--faults may not exceed --nodes ({})", self.nodes));
        }
        if let Some(r) = &self.real {
            r.validate()?;
            if self.disk.is_some() {
                return fail("--real runs on the real disks: leave out --disk-rate");
            }
            if self.sim {
                return fail("--sim simulates the disk model; leave it out with --real");
            }
        } else if self.disk.is_none() && self.faults.iter().any(|&f| f > 0) {
            return fail(
                "faults need the disk model or real disks: give --disk-rate, or --real, or use --faults 0 with --disk-rate off",
            );
        }
        if self.policies.is_empty() || self.faults.is_empty() || self.block_sizes.is_empty() || self.ratios.is_empty() {
            return fail("give at least one policy, fault count, block size and ratio");
        }
        if self.layout == LayoutChoice::Mirrored && (!self.nodes.is_multiple_of(2) || self.replicas != 2) {
            return fail("--layout mirrored needs an even number of nodes and 2 replicas");
        }
        if self.sim && self.access == Access::Random {
            return fail("--sim simulates scans only: leave out --sim or use --access scan");
        }
        let mut last_end = 0.0f64;
        for w in &self.schedule {
            if w.start_secs < last_end {
                return fail("fault windows must be in order and must not overlap");
            }
            last_end = w.end_secs.unwrap_or(f64::INFINITY);
        }
        self.fault.validate()?;
        self.settings.validate().map_err(|e| BenchError::Failed(e.to_string()))?;
        Ok(())
    }

    fn params(&self) -> Params {
        Params {
            nodes: self.nodes,
            replicas: self.replicas,
            layout: self.layout,
            fragment_bytes: self.fragment_bytes,
            block_bytes: self.block_sizes[0],
            block_sizes: self.block_sizes.clone(),
            disk_rate_bytes_per_sec: self.disk.map(|d| d.rate_bytes_per_sec),
            seek_ms: self.disk.map_or(0.0, |d| d.seek.as_secs_f64() * 1e3),
            queue_depth: self.disk.map_or(1, |d| d.queue_depth),
            fault: self.fault,
            fault_factor: match self.fault {
                Fault::Factor { factor } => Some(factor),
                Fault::Competing { .. } => None,
            },
            fault_layout: self.fault_layout,
            fault_schedule: self.schedule.clone(),
            seed: self.seed,
            window: self.window,
            settings: self.settings,
            ratios: self.ratios.clone(),
            access: self.access,
            repeat: self.repeat,
            policies: self.policies.clone(),
            git_commit: git_commit(),
            real: self.real,
            measured: None,
            metrics_scrape: self.metrics_scrape,
        }
    }
}

/// The fault changes of a schedule: (time, faults on after it).
fn changes(schedule: &[FaultWindow]) -> Vec<Change> {
    schedule.iter().flat_map(|w| std::iter::once((w.start_secs, true)).chain(w.end_secs.map(|e| (e, false)))).collect()
}

/// Partitions of `shape` for a ratio: consumer i gets a share proportional to `even` or
/// `odd` (`Shape::weighted_partitions`); equal shares with a consumer per fragment are the
/// fragments themselves.
pub fn ratio_partitions(shape: &Shape, consumers: u32, ratio: Ratio) -> Vec<Partition> {
    if ratio == Ratio::EQUAL && consumers == shape.fragment_count() {
        return shape.fragment_partitions();
    }
    let weights: Vec<f64> = (0..consumers).map(|i| if i % 2 == 0 { ratio.even } else { ratio.odd }).collect();
    shape.weighted_partitions(&weights)
}

/// Run the scan benchmark: start a cluster, make the datasets, run every row.
pub fn run_scan(spec: &ScanBenchSpec) -> BenchResult<Report> {
    spec.validate()?;
    let cluster = BenchCluster {
        nodes: spec.nodes,
        disk: spec.disk,
        root: spec.root.clone(),
        scratch: std::env::temp_dir(),
        binary: spec.binary.clone(),
        node_groups: None,
        real: spec.real,
        metrics_scrape: spec.metrics_scrape,
    };
    let started = cluster.start()?;
    started.block_on(bench_on_cluster(spec, &started.cluster))
}

/// The local cluster a bench runs on.
pub(crate) struct BenchCluster {
    pub nodes: u32,
    pub disk: Option<DiskParams>,
    /// Where its files go; else a temporary folder under `scratch`, removed afterwards.
    pub root: Option<PathBuf>,
    pub scratch: PathBuf,
    pub binary: PathBuf,
    /// Each server its own node (`LocalSpec::node_groups`).
    pub node_groups: Option<ganges_harness::stress::NodeSpec>,
    /// Real disks: servers with direct I/O (and each on its own link, for link faults).
    pub real: Option<RealSpec>,
    /// Servers serve metrics, and a scraper reads every server's each second.
    pub metrics_scrape: bool,
}

/// A bench's running cluster. Dropped in field order: the servers stop, then their
/// temporary folder goes.
pub(crate) struct Started {
    /// Stopped first, before the servers it scrapes.
    _scraper: Option<Scraper>,
    pub cluster: LocalCluster,
    _temp: Option<tempfile::TempDir>,
    rt: tokio::runtime::Runtime,
}

impl BenchCluster {
    pub(crate) fn start(&self) -> BenchResult<Started> {
        crate::util::stop_requests();
        let (root, temp) = match &self.root {
            Some(r) => (r.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("ganges-bench-").tempdir_in(&self.scratch)?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let local = LocalSpec {
            node_groups: self.node_groups.clone(),
            direct_io: self.real.is_some(),
            netns: self.real.is_some_and(|r| r.netns()),
            metrics: self.metrics_scrape,
            ..LocalSpec::new(self.nodes, root, self.disk, self.binary.clone())
        };
        let cluster = LocalCluster::start(&local)?;
        let scraper = if self.metrics_scrape { Some(Scraper::start(cluster.cluster())?) } else { None };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        Ok(Started { _scraper: scraper, cluster, _temp: temp, rt })
    }
}

/// A thread that GETs every server's `/metrics` once a second, as Prometheus would.
struct Scraper {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Scraper {
    fn start(file: &ganges_client::cluster::ClusterFile) -> BenchResult<Scraper> {
        use ganges_proto::control::{ControlReply, ControlRequest};
        let nodes: Vec<NodeId> = file.servers.iter().map(|s| s.node).collect();
        let mut addrs = vec![];
        for (node, r) in ganges_harness::local::blocking_control_all(file, &nodes, ControlRequest::Stats)? {
            match r {
                Ok(ControlReply::Stats { stats }) => addrs.extend(stats.metrics_addr),
                _ => return Err(BenchError::Failed(format!("{node} did not say where its metrics are"))),
            }
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut scrapes = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for addr in &addrs {
                    if scrape(addr).is_ok() {
                        scrapes += 1;
                    }
                }
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            scrapes
        });
        Ok(Scraper { stop, thread: Some(thread) })
    }
}

/// One `GET /metrics`; the body's length.
fn scrape(addr: &str) -> std::io::Result<usize> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    if !body.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other("not 200"));
    }
    Ok(body.len())
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take()
            && let Ok(n) = t.join()
        {
            tracing::info!(scrapes = n, "metrics scraped");
        }
    }
}

impl Started {
    /// Run a bench on the cluster, stopping early when asked to ([`crate::util::block_on`]).
    pub(crate) fn block_on<T>(&self, bench: impl std::future::Future<Output = BenchResult<T>>) -> BenchResult<T> {
        crate::util::block_on(&self.rt, bench)
    }
}

async fn create_dataset(
    client: &Arc<Client>,
    spec: &ScanBenchSpec,
    block: u32,
    fragment_bytes: u64,
) -> BenchResult<Arc<Manifest>> {
    let total = fragment_bytes * spec.nodes as u64;
    let bar = crate::util::bytes_bar(total * spec.replicas as u64, "create");
    let name = format!("bench-scan-{block}");
    let spec_c = CreateSpec {
        name: name.parse()?,
        fragment_bytes: vec![fragment_bytes; spec.nodes as usize],
        block_bytes: block,
        replicas: spec.replicas,
        generator: Generator::Random { seed: spec.seed },
    };
    let m = match spec.layout {
        LayoutChoice::Chained => dataset::create(client, spec_c, Some(crate::util::progress_fn(&bar))).await?,
        LayoutChoice::Mirrored => {
            dataset::create_with_layout(
                client,
                spec_c,
                ganges_core::layout::Layout::mirrored(spec.nodes)?,
                Some(crate::util::progress_fn(&bar)),
            )
            .await?
        }
    };
    bar.finish_and_clear();
    Ok(Arc::new(m))
}

/// How a scan bench's faults are made, and the server rates its ideals use.
pub(crate) enum Faulting {
    /// The disk model's fault, at the model's rate.
    Model { fault: Fault, disk: Option<DiskParams> },
    /// Real faults, at rates measured before the runs.
    Real { spec: RealSpec, rates: Rates },
}

impl Faulting {
    /// Every server's rate in a run with `faulty` servers (`None`: no rate is known, as
    /// with the page cache and no model).
    pub(crate) fn rates(&self, nodes: u32, faulty: &[NodeId]) -> Option<Vec<f64>> {
        match self {
            Faulting::Model { fault, disk } => disk.map(|d| {
                (0..nodes)
                    .map(|n| {
                        d.rate_bytes_per_sec * if faulty.contains(&NodeId(n)) { fault.rate_fraction() } else { 1.0 }
                    })
                    .collect()
            }),
            Faulting::Real { spec, rates } => Some(crate::real::rates_with(spec, rates, faulty)),
        }
    }

    /// Make `faulty` the faulty servers, the others healthy.
    pub(crate) async fn apply(&self, client: &Client, faulty: &[NodeId]) -> BenchResult<()> {
        match self {
            Faulting::Model { disk: None, .. } => Ok(()),
            Faulting::Model { fault, .. } => {
                for n in 0..client.nodes() {
                    let node = NodeId(n);
                    let fault = faulty.contains(&node).then_some(*fault);
                    client.control(node, ControlRequest::SetFault { fault }).await?;
                }
                Ok(())
            }
            Faulting::Real { spec, rates } => crate::real::apply(client, spec, rates, faulty).await,
        }
    }

    /// Faults as `apply` sets them, then every server's measured rate forgotten: each run
    /// starts from servers that know nothing of the runs before it (a policy that plans on
    /// measured rates would otherwise start a run on the last run's faults). Real faults are
    /// given a moment to take hold, and the page cache is dropped.
    pub(crate) async fn before_run(&self, client: &Client, faulty: &[NodeId]) -> BenchResult<()> {
        self.apply(client, faulty).await?;
        if let Faulting::Real { .. } = self {
            tokio::time::sleep(crate::real::SETTLE).await;
            tokio::task::spawn_blocking(crate::real::drop_caches)
                .await
                .map_err(|e| BenchError::Failed(e.to_string()))?;
        }
        for n in client.live_nodes() {
            client.control(n, ControlRequest::ForgetRate).await?;
        }
        Ok(())
    }

    /// The rates measured for a real bench.
    pub(crate) fn measured(&self) -> Option<&Rates> {
        match self {
            Faulting::Real { rates, .. } => Some(rates),
            Faulting::Model { .. } => None,
        }
    }
}

async fn bench_on_cluster(spec: &ScanBenchSpec, cluster: &LocalCluster) -> BenchResult<Report> {
    let client = Client::connect(cluster.cluster().clone()).await?;
    let live = match &spec.dashboard {
        Some(addr) => Some(crate::util::start_dashboard(cluster.cluster(), addr, "bench scan", &SCAN_COLUMNS).await?),
        None => None,
    };
    let faulting = match spec.real {
        Some(real) => {
            eprintln!(
                "measuring every server's disk{}, alone and all at once",
                if real.netns() { " and link" } else { "" }
            );
            let rates = crate::real::measure(&client, &real).await?;
            Faulting::Real { spec: real, rates }
        }
        None => Faulting::Model { fault: spec.fault, disk: spec.disk },
    };
    let fragment_bytes = match faulting.measured() {
        Some(rates) if spec.fragment_bytes == 0 => {
            crate::real::fragment_bytes_for(rates, REAL_RUN_SECONDS, u64::from(spec.block_sizes[0]))
        }
        _ => spec.fragment_bytes,
    };
    let loopback = if spec.disk.is_none() && spec.real.is_none() {
        let bytes = (spec.fragment_bytes * spec.nodes as u64).min(1 << 30);
        let block = spec.block_sizes[0] as usize;
        let best = move || -> BenchResult<f64> {
            (0..LOOPBACK_TRIES).try_fold(0.0, |best: f64, _| Ok(best.max(loopback_mb_per_sec(bytes, block)?)))
        };
        Some(tokio::task::spawn_blocking(best).await.expect("measure")?)
    } else {
        None
    };
    let mut machine = Machine::here(loopback).await;
    let layout_of = |f: u32| -> Vec<NodeId> { place(spec.fault_layout, spec.nodes, f, spec.seed) };
    let runs =
        spec.block_sizes.len() * spec.repeat as usize * spec.faults.len() * spec.ratios.len() * spec.policies.len();
    let bar = steps_bar(runs as u64, "scan");
    let mut rows = vec![];
    let mut phases = ganges_sim::scan::start_phases(spec.seed);
    for &block in &spec.block_sizes {
        let manifest = create_dataset(&client, spec, block, fragment_bytes).await?;
        // One untimed scan first: the first scan after a create pays for fresh buffers, thread
        // pools and page faults in every process (measured: 15% idle disks), which is not what
        // any policy should be charged for.
        faulting.before_run(&client, &[]).await?;
        let all = manifest.shape.fragment_partitions();
        let warm = Run { manifest: &manifest, policy: spec.policies[0], partitions: &all, faulty: &[], phase: None };
        run_once(&client, spec, &faulting, &warm).await?;

        // samples[fault][ratio][policy] over repeats
        let (nf, nr, np) = (spec.faults.len(), spec.ratios.len(), spec.policies.len());
        let mut samples: Vec<Vec<Vec<Vec<Sample>>>> = vec![vec![vec![vec![]; np]; nr]; nf];
        let partitions: Vec<Vec<Partition>> =
            spec.ratios.iter().map(|&r| ratio_partitions(&manifest.shape, spec.nodes, r)).collect();
        for _ in 0..spec.repeat {
            for (fi, &f) in spec.faults.iter().enumerate() {
                let faulty = layout_of(f);
                for (ri, parts) in partitions.iter().enumerate() {
                    for (pi, &policy) in spec.policies.iter().enumerate() {
                        let at_start = if spec.schedule.is_empty() { &faulty[..] } else { &[] };
                        faulting.before_run(&client, at_start).await?;
                        bar.set_message(format!("{policy}, {f} faults"));
                        let phase = run_phase(policy, &spec.settings, &mut phases);
                        let run = Run { manifest: &manifest, policy, partitions: parts, faulty: &faulty, phase };
                        let sample = run_once(&client, spec, &faulting, &run).await?;
                        if let Some(live) = &live {
                            let layout = ideals(spec, &faulting, &manifest, parts, &faulty)?.1;
                            live.push_row(scan_row(block, f, policy, &sample, layout));
                        }
                        samples[fi][ri][pi].push(sample);
                        bar.inc(1);
                    }
                }
            }
        }
        faulting.apply(&client, &[]).await?;
        for (fi, &f) in spec.faults.iter().enumerate() {
            let faulty = layout_of(f);
            for (ri, &ratio) in spec.ratios.iter().enumerate() {
                let (river, layout, shares) = ideals(spec, &faulting, &manifest, &partitions[ri], &faulty)?;
                for (pi, &policy) in spec.policies.iter().enumerate() {
                    let mut r = row(policy, f, &faulty, &samples[fi][ri][pi], river, layout);
                    r.block_bytes = block;
                    r.ratio = ratio;
                    r.ideal_consumer_rates_faulty = shares.0.clone();
                    r.ideal_consumer_rates_free = shares.1.clone();
                    if f > 0 && !spec.schedule.is_empty() {
                        r.adaptation = adaptation(&changes(&spec.schedule), &r.delivered, &shares, &r.consumer_seconds);
                    }
                    if spec.sim {
                        let phase = samples[fi][ri][pi].first().and_then(|s| s.phase);
                        let run =
                            Run { manifest: &manifest, policy, partitions: &partitions[ri], faulty: &faulty, phase };
                        let sim = simulate(spec, &run)?;
                        let sim_adaptation = if f > 0 && !spec.schedule.is_empty() {
                            adaptation(&changes(&spec.schedule), &sim.delivered, &shares, &sim.consumer_seconds)
                        } else {
                            vec![]
                        };
                        r.sim = Some(Simulated {
                            sim_seconds: sim.seconds,
                            sim_frac_layout_ideal: layout / sim.seconds,
                            sim_adaptation,
                            sim_disk_busy_frac: sim.disk_busy_secs.iter().map(|b| b / sim.seconds).collect(),
                            sim_seeks: sim.seeks,
                            sim_consumer_seconds: sim.consumer_seconds,
                        });
                    }
                    rows.push(r);
                }
            }
        }
        client.control_all(&client.live_nodes(), &ControlRequest::Remove { name: manifest.name.clone() }).await;
        machine.note_runs(samples.iter().flatten().flatten().flatten().map(|s| s.others_busy));
    }
    bar.finish_and_clear();
    machine.warn_if_others_busy();
    if spec.real.is_some() {
        crate::real::clear(&client).await?;
    }
    let mut params = spec.params();
    params.fragment_bytes = fragment_bytes;
    params.measured = faulting.measured().cloned();
    Ok(Report { bench: "scan", params, machine, rows })
}

/// The dashboard's table of a scan bench: one row a run, as it ends.
const SCAN_COLUMNS: [&str; 7] = ["block", "slow", "policy", "seconds", "MB/s", "of ideal", "backup"];

fn scan_row(block: u32, faults: u32, policy: ReadPolicyKind, s: &Sample, ideal: f64) -> Vec<String> {
    let of_ideal = if ideal.is_finite() { format!("{:.0}%", 100.0 * ideal / s.seconds) } else { "-".into() };
    vec![
        ganges_core::units::ByteSize(u64::from(block)).to_string(),
        faults.to_string(),
        policy.to_string(),
        format!("{:.2}", s.seconds),
        format!("{:.1}", s.bytes as f64 / s.seconds / 1e6),
        of_ideal,
        format!("{:.0}%", 100.0 * s.backup_frac()),
    ]
}

/// The same run in the simulator (SIM-2's cross-check): the same layout, partitions,
/// policy, settings, window, disk model and faults, in virtual time; sampled as the real
/// run is when faults come and go.
fn simulate(spec: &ScanBenchSpec, run: &Run<'_>) -> BenchResult<ganges_sim::scan::ScanOutcome> {
    let Some(disk) = spec.disk else {
        return fail("--sim needs the disk model (a --disk-rate)");
    };
    let sim = ganges_sim::scan::ScanSpec {
        layout: run.manifest.layout.clone(),
        shape: run.manifest.shape.clone(),
        partitions: run.partitions.to_vec(),
        disk,
        faults: run.faulty.iter().map(|&n| (n, spec.fault)).collect(),
        schedule: spec
            .schedule
            .iter()
            .map(|w| ganges_sim::scan::FaultWindow {
                start: Duration::from_secs_f64(w.start_secs),
                end: w.end_secs.map(Duration::from_secs_f64),
            })
            .collect(),
        consumer_rate: None,
        net: ganges_sim::net::NetParams::LOCAL,
        policy: run.policy,
        settings: spec.settings,
        window: spec.window_of(run.policy, run.manifest.shape.block_bytes()),
        start_jitter: Duration::from_micros(200),
        start_phase: run.phase.unwrap_or_else(|| ganges_sim::scan::start_phase(spec.seed)),
        sample_every: (!spec.schedule.is_empty()).then(|| Duration::from_millis(SAMPLE_MS)),
        time_limit: Duration::from_secs(86_400),
        seed: spec.seed,
        chaos: vec![],
        check: false,
        write: false,
    };
    ganges_sim::scan::run_scan(&sim).map_err(|e| BenchError::Failed(format!("simulating {}: {e}", run.policy)))
}

/// Each consumer's ideal rate (bytes/s) with and without the faults, in that order.
type Shares = (Vec<f64>, Vec<f64>);

/// Both ideals for a run, and every consumer's ideal rate with and without the faults. With
/// a schedule the ideal integrates its phases: each phase moves data at that phase's ideal
/// throughput.
fn ideals(
    spec: &ScanBenchSpec,
    faulting: &Faulting,
    manifest: &Manifest,
    partitions: &[Partition],
    faulty: &[NodeId],
) -> BenchResult<(f64, f64, Shares)> {
    let (Some(r_free), Some(r_fault)) = (faulting.rates(spec.nodes, &[]), faulting.rates(spec.nodes, faulty)) else {
        // No model and no measured rates: no rate to compare with; the loopback figure
        // stands in.
        return Ok((f64::NAN, f64::NAN, (vec![], vec![])));
    };
    let reads = consumer_reads(spec.access, spec.seed, &manifest.shape, partitions);
    let demands = read_demands(&manifest.shape, reads.iter().map(Vec::as_slice))?;
    let total: u64 = demands.iter().map(|d| d.bytes).sum();
    let river = (river_ideal_seconds(total, &r_free), river_ideal_seconds(total, &r_fault));
    let layout = (
        layout_ideal(&demands, &manifest.layout, &r_free)?.seconds,
        layout_ideal(&demands, &manifest.layout, &r_fault)?.seconds,
    );
    let per_consumer: Vec<u64> = reads.iter().map(|r| r.iter().map(|p| p.len).sum()).collect();
    let share = |t: f64| per_consumer.iter().map(|&b| b as f64 / t).collect::<Vec<f64>>();
    let shares = (share(layout.1), share(layout.0));
    if spec.schedule.is_empty() {
        return Ok((river.1, layout.1, shares));
    }
    let changes = changes(&spec.schedule);
    let integrate = |(t_free, t_fault): (f64, f64)| scheduled_ideal(total as f64, t_free, t_fault, &changes);
    Ok((integrate(river), integrate(layout), shares))
}

/// Adaptation time after each change, measured as the simulator does.
fn adaptation(changes: &[Change], delivered: &[Vec<u64>], shares: &Shares, finished: &[f64]) -> Vec<Adaptation> {
    let sampled = Sampled {
        changes,
        delivered,
        sample_secs: SAMPLE_SECS,
        ideal_faulty: &shares.0,
        ideal_free: &shares.1,
        finished,
    };
    let times = sampled.adaptation_times();
    changes
        .iter()
        .zip(times)
        .map(|(&(at, faults_on), seconds)| Adaptation {
            at_secs: at,
            change: if faults_on { "start" } else { "stop" },
            seconds,
        })
        .collect()
}

pub(crate) async fn all_stats(client: &Client) -> BenchResult<Vec<ServerStats>> {
    let nodes: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let mut out = vec![];
    for (node, r) in client.control_all(&nodes, &ControlRequest::Stats).await {
        match r? {
            ControlReply::Stats { stats } => out.push(*stats),
            other => return fail(format!("{node}: unexpected reply {other:?}")),
        }
    }
    Ok(out)
}

/// Each consumer's reads: its partition whole (a scan), or as many whole blocks of the
/// dataset as the partition holds, each picked from `seed` (random access).
fn consumer_reads(access: Access, seed: u64, shape: &Shape, partitions: &[Partition]) -> Vec<Vec<Partition>> {
    if access == Access::Scan {
        return partitions.iter().map(|p| vec![*p]).collect();
    }
    let blocks: Vec<Partition> = (0..shape.fragment_count())
        .map(FragmentId)
        .flat_map(|f| {
            (0..shape.blocks_in(f)).map(move |b| Partition {
                offset: shape.fragment_start(f) + shape.block_offset(b),
                len: shape.block_len(f, b) as u64,
            })
        })
        .collect();
    let pick = |consumer: u64, k: u64| {
        blocks[(mix64(seed.wrapping_add(mix64(consumer)).wrapping_add(k)) % blocks.len() as u64) as usize]
    };
    partitions
        .iter()
        .zip(0..)
        .map(|(p, i)| (0..p.len.div_ceil(shape.block_bytes() as u64)).map(|k| pick(i, k)).collect())
        .collect()
}

/// One consumer of a run, connected before the start (boxed: each is a kilobyte or more).
enum Consumer {
    Scan(Box<ReadStream>),
    Random(Box<AsyncReader>, Vec<Partition>),
}

impl Consumer {
    fn open(
        client: &Arc<Client>,
        manifest: &Arc<Manifest>,
        access: Access,
        reads: Vec<Partition>,
        opts: ReadOptions,
    ) -> Result<Consumer, ClientError> {
        Ok(match access {
            Access::Scan => {
                Consumer::Scan(Box::new(ReadStream::open(client.clone(), manifest.clone(), reads[0], opts)?))
            }
            Access::Random => {
                Consumer::Random(Box::new(AsyncReader::open(client.clone(), manifest.clone(), opts)?), reads)
            }
        })
    }

    /// Read everything; the report, when it ended, and the timeline: when each block
    /// arrived and the bytes delivered by then.
    async fn run(self, window: u32) -> Result<(ReadReport, Instant, Vec<(Instant, u64)>), ClientError> {
        let mut marks: Vec<(Instant, u64)> = Vec::with_capacity(128);
        let mut bytes = 0u64;
        let report = match self {
            Consumer::Scan(mut s) => {
                while let Some(b) = s.next().await? {
                    bytes += b.data.len() as u64;
                    marks.push((Instant::now(), bytes));
                }
                s.close()
            }
            Consumer::Random(mut r, reads) => {
                let mut reads = reads.into_iter();
                loop {
                    while r.pending() < window as usize
                        && let Some(p) = reads.next()
                    {
                        r.submit(p.offset, p.len)?;
                    }
                    let Some((_, data)) = r.reap().await? else { break };
                    bytes += data.len() as u64;
                    marks.push((Instant::now(), bytes));
                }
                r.close()
            }
        };
        Ok((report, Instant::now(), marks))
    }
}

/// One run: every consumer reads its partition, or its random blocks; returns T and the
/// counters.
async fn run_once(
    client: &Arc<Client>,
    spec: &ScanBenchSpec,
    faulting: &Faulting,
    run: &Run<'_>,
) -> BenchResult<Sample> {
    let window = spec.window_of(run.policy, run.manifest.shape.block_bytes());
    let opts = ReadOptions::new(run.policy).with_window(window).with_settings(spec.settings);
    let reads = consumer_reads(spec.access, spec.seed, &run.manifest.shape, run.partitions);
    let asked: u64 = reads.iter().flatten().map(|p| p.len).sum();
    let consumers: Vec<Consumer> = reads
        .into_iter()
        .map(|r| Consumer::open(client, run.manifest, spec.access, r, opts))
        .collect::<Result<_, _>>()?;
    let watch = CpuWatch::start();
    let before = all_stats(client).await?;
    let cpu_before = process_cpu_secs();
    let barrier = Arc::new(tokio::sync::Barrier::new(consumers.len() + 1));
    let mut tasks = vec![];
    for c in consumers {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            c.run(window).await
        }));
    }
    if let Some(phase) = run.phase {
        tokio::time::sleep(until_phase(std::time::SystemTime::now(), phase)).await;
    }
    barrier.wait().await;
    let t0 = Instant::now();
    // Faults that start and stop during the run (FI-3).
    let scheduler = (!spec.schedule.is_empty() && !run.faulty.is_empty()).then_some(async {
        for (at, on) in changes(&spec.schedule) {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(at)).into()).await;
            let faulty = if on { run.faulty } else { &[] };
            if let Err(e) = faulting.apply(client, faulty).await {
                tracing::warn!(%e, "changing the faults during a run");
            }
        }
        // The run goes on to its end after the last change.
        std::future::pending::<()>().await
    });
    let consumers_done = async {
        let mut out = vec![];
        for t in tasks {
            out.push(t.await.map_err(|e| BenchError::Failed(format!("consumer task failed: {e}")))??);
        }
        Ok::<_, BenchError>(out)
    };
    let done = match scheduler {
        Some(changes) => tokio::select! {
            done = consumers_done => done,
            () = changes => unreachable!("the fault schedule waits forever after its last change"),
        },
        None => consumers_done.await,
    }?;
    if !spec.schedule.is_empty() && !run.faulty.is_empty() {
        faulting.apply(client, &[]).await?;
    }
    let mut reports = vec![];
    let mut timelines = vec![];
    for (report, end, marks) in done {
        reports.push((report, end));
        timelines.push(marks);
    }
    let t_end = reports.iter().map(|(_, end)| *end).max().expect("at least one consumer");
    let seconds = t_end.duration_since(t0).as_secs_f64();
    let client_cpu = process_cpu_secs() - cpu_before;
    let after = all_stats(client).await?;
    let server_cpu = after.iter().zip(&before).map(|(a, b)| a.cpu_secs - b.cpu_secs).sum();
    let others_busy = watch.busy_share(client_cpu + server_cpu);

    let mut digest = Digest::default();
    for (r, _) in &reports {
        digest.merge(r.digest);
    }
    let bytes: u64 = reports.iter().map(|(r, _)| r.bytes).sum();
    if spec.access == Access::Scan && digest != run.manifest.digest {
        return fail(format!(
            "{}: the consumers' digest {digest} differs from the dataset's {}: bytes were lost or delivered twice",
            run.policy, run.manifest.digest
        ));
    }
    if bytes != asked {
        return fail(format!("{}: the consumers received {bytes} bytes of the {asked} they read", run.policy));
    }
    let slowest = reports
        .iter()
        .map(|(r, end)| mb_per_sec(r.bytes, end.duration_since(t0).as_secs_f64()))
        .fold(f64::INFINITY, f64::min);
    let delta = |f: fn(&ServerStats) -> u64| -> u64 { after.iter().zip(&before).map(|(a, b)| f(a) - f(b)).sum() };
    Ok(Sample {
        seconds,
        bytes,
        slowest_mb_per_sec: slowest,
        backup_bytes: reports.iter().map(|(r, _)| r.stats.backup_bytes()).sum(),
        server_cpu,
        client_cpu,
        seeks: delta(|s| s.disk_stats.seeks),
        duplicates: reports.iter().map(|(r, _)| r.stats.duplicates).sum(),
        steals: reports.iter().map(|(r, _)| r.stats.steals).sum(),
        hedges: reports.iter().map(|(r, _)| r.stats.hedges).sum(),
        retries: reports.iter().map(|(r, _)| r.stats.retries).sum(),
        handed_off: delta(|s| s.handed_off),
        peak_rss: after.iter().map(|s| s.peak_rss_bytes).max().unwrap_or(0),
        consumer_seconds: reports.iter().map(|(_, end)| end.duration_since(t0).as_secs_f64()).collect(),
        disk_busy_frac: after
            .iter()
            .zip(&before)
            .map(|(a, b)| (a.disk_stats.busy_secs - b.disk_stats.busy_secs) / seconds)
            .collect(),
        disk_seeks: after.iter().zip(&before).map(|(a, b)| a.disk_stats.seeks - b.disk_stats.seeks).collect(),
        delivered: sample_timelines(&timelines, t0, t_end),
        phase: run.phase,
        others_busy,
    })
}

/// Each consumer's delivered bytes at every `SAMPLE_MS` from `t0` to just past `t_end`.
fn sample_timelines(timelines: &[Vec<(Instant, u64)>], t0: Instant, t_end: Instant) -> Vec<Vec<u64>> {
    let ticks = (t_end.duration_since(t0).as_millis() as u64).div_ceil(SAMPLE_MS) + 1;
    timelines
        .iter()
        .map(|marks| {
            let mut out = Vec::with_capacity(ticks as usize);
            let mut i = 0;
            let mut bytes = 0;
            for k in 0..ticks {
                let at = t0 + Duration::from_millis(k * SAMPLE_MS);
                while i < marks.len() && marks[i].0 <= at {
                    bytes = marks[i].1;
                    i += 1;
                }
                out.push(bytes);
            }
            out
        })
        .collect()
}

/// Of repeated runs' times: the median run's index, and max - min.
pub(crate) fn median_and_spread(times: &[f64]) -> (usize, f64) {
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|&a, &b| times[a].total_cmp(&times[b]));
    let spread = times[order[order.len() - 1]] - times[order[0]];
    (order[order.len() / 2], spread)
}

fn row(policy: ReadPolicyKind, faults: u32, faulty: &[NodeId], samples: &[Sample], river: f64, layout: f64) -> Row {
    let times: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
    let (median, spread) = median_and_spread(&times);
    let m = &samples[median];
    Row {
        policy,
        block_bytes: 0,
        ratio: Ratio::EQUAL,
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
        backup_bytes_frac: m.backup_frac(),
        server_cpu_seconds: m.server_cpu,
        client_cpu_seconds: m.client_cpu,
        cpu_seconds_per_gb: (m.server_cpu + m.client_cpu) / (m.bytes as f64 / 1e9),
        repeat_seconds: times,
        spread_seconds: spread,
        repeat_backup_frac: samples.iter().map(Sample::backup_frac).collect(),
        seeks: m.seeks,
        duplicates: m.duplicates,
        steals: m.steals,
        hedges: m.hedges,
        retries: m.retries,
        handed_off: m.handed_off,
        server_peak_rss_bytes: m.peak_rss,
        consumer_seconds: m.consumer_seconds.clone(),
        disk_busy_frac: m.disk_busy_frac.clone(),
        disk_seeks: m.disk_seeks.clone(),
        delivered: m.delivered.clone(),
        adaptation: vec![],
        ideal_consumer_rates_faulty: vec![],
        ideal_consumer_rates_free: vec![],
        sim: None,
    }
}

/// Streams of raw loopback TCP a bench measures; it reports the fastest. A limit is a
/// maximum: one stream, measured while the kernel was still dropping the previous run's
/// files, gave less than the scans themselves moved.
pub const LOOPBACK_TRIES: usize = 3;

/// Raw TCP over loopback between two threads, `chunk` bytes per write and read.
pub fn loopback_mb_per_sec(total: u64, chunk: usize) -> BenchResult<f64> {
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

/// The table (and with a disk model off, the loopback comparison; with a fault schedule,
/// the adaptation times).
pub fn render(report: &Report) -> String {
    let p = &report.params;
    let many_blocks = p.block_sizes.len() > 1;
    let many_ratios = p.ratios.len() > 1;
    let mut header = vec!["policy"];
    if many_blocks {
        header.push("block");
    }
    if many_ratios {
        header.push("ratio");
    }
    header.extend(["faults", "seconds", "MB/s", "slowest MB/s", "% river", "% layout", "backup %", "cpu s/GB"]);
    let sim = report.rows.iter().any(|r| r.sim.is_some());
    if sim {
        header.extend(["sim % layout", "sim - real"]);
    }
    let mut t = Table::new(&header);
    for r in &report.rows {
        let pct = |x: f64| if x.is_nan() { "-".to_string() } else { format!("{:.1}", x * 100.0) };
        let mut cells = vec![r.policy.to_string()];
        if many_blocks {
            cells.push(ByteSize(r.block_bytes as u64).to_string());
        }
        if many_ratios {
            cells.push(r.ratio.to_string());
        }
        cells.extend([
            r.faults.to_string(),
            format!("{:.3}", r.seconds),
            format!("{:.1}", r.aggregate_mb_per_sec),
            format!("{:.1}", r.slowest_consumer_mb_per_sec),
            pct(r.frac_river_ideal),
            pct(r.frac_layout_ideal),
            format!("{:.1}", r.backup_bytes_frac * 100.0),
            format!("{:.2}", r.cpu_seconds_per_gb),
        ]);
        if sim {
            let s = r.sim.as_ref().map_or(f64::NAN, |s| s.sim_frac_layout_ideal);
            cells.extend([pct(s), format!("{:+.1}", (s - r.frac_layout_ideal) * 100.0)]);
        }
        t.row(cells);
    }
    let disk = match (&p.real, &p.measured, p.disk_rate_bytes_per_sec) {
        (Some(real), Some(rates), _) => crate::real::describe(real, rates),
        (_, _, Some(r)) => format!("disks {}/s with a {}ms seek", ByteSize(r as u64), p.seek_ms),
        _ => "no disk model (page cache)".into(),
    };
    let blocks: Vec<String> = p.block_sizes.iter().map(|b| ByteSize(*b as u64).to_string()).collect();
    let layout = match p.layout {
        LayoutChoice::Chained => format!("{} copies", p.replicas),
        LayoutChoice::Mirrored => "mirrored groups".to_string(),
    };
    let access = match p.access {
        Access::Scan => "",
        Access::Random => " (random reads)",
    };
    let fault = if p.real.is_some() { "real".to_string() } else { p.fault.to_string() };
    let mut out = format!(
        "scan{access}: {} nodes, {layout}, {} fragments of {}, {} blocks, {disk}, fault {} ({} layout{}), window {}, \
         {} run(s) each (median), commit {}\n",
        p.nodes,
        p.nodes,
        ByteSize(p.fragment_bytes),
        blocks.join(","),
        fault,
        p.fault_layout,
        if p.fault_schedule.is_empty() { String::new() } else { ", scheduled".into() },
        p.window.map_or_else(
            || match p.access {
                Access::Scan =>
                    format!("by policy (gd {WINDOW_GD}, gd-plan {WINDOW_PLAN} MiB, others {WINDOW_DEFAULT})"),
                Access::Random => WINDOW_RANDOM.to_string(),
            },
            |w| w.to_string()
        ),
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
    let adapt: Vec<&Row> = report.rows.iter().filter(|r| !r.adaptation.is_empty()).collect();
    if !adapt.is_empty() {
        let sim = adapt.iter().any(|r| !r.sim_adaptation().is_empty());
        let mut header = vec!["policy", "faults", "change", "at s", "adaptation s"];
        if sim {
            header.push("sim adaptation s");
        }
        let mut t = Table::new(&header);
        let secs = |a: &Adaptation| a.seconds.map_or("never".into(), |s| format!("{s:.1}"));
        for r in adapt {
            for (i, a) in r.adaptation.iter().enumerate() {
                let mut cells = vec![
                    r.policy.to_string(),
                    r.faults.to_string(),
                    a.change.to_string(),
                    format!("{:.1}", a.at_secs),
                    secs(a),
                ];
                if sim {
                    cells.push(r.sim_adaptation().get(i).map_or("-".into(), secs));
                }
                t.row(cells);
            }
        }
        out.push_str("adaptation: time until the slowest consumer stays within 10% of its new ideal rate\n");
        out.push_str(&t.render());
    }
    if let Some(lb) = report.machine.loopback_mb_per_sec {
        let best = report.rows.iter().map(|r| r.aggregate_mb_per_sec).fold(0.0, f64::max);
        out.push_str(&format!(
            "raw loopback TCP in this run (best of {LOOPBACK_TRIES}): {lb:.1} MB/s; best scan: {best:.1} MB/s ({:.0}% of loopback)\n",
            best / lb * 100.0
        ));
    }
    out
}

/// Write the JSON document and the plots, as asked.
pub fn write_outputs(
    report: &Report,
    json: Option<&PathBuf>,
    plot_path: Option<&PathBuf>,
    plot_time: Option<&PathBuf>,
) -> BenchResult<()> {
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(report)?)
            .map_err(|e| BenchError::Failed(format!("writing {}: {e}", path.display())))?;
    }
    let p = &report.params;
    if let Some(path) = plot_path {
        // One line per policy (and per ratio and block size when there are several).
        let mut series: Vec<Series> = vec![];
        for &block in &p.block_sizes {
            for &ratio in &p.ratios {
                for &policy in &p.policies {
                    let mut name = policy.to_string();
                    if p.block_sizes.len() > 1 {
                        name.push_str(&format!(" {}", ByteSize(block as u64)));
                    }
                    if p.ratios.len() > 1 {
                        name.push_str(&format!(" {ratio}"));
                    }
                    let points = report
                        .rows
                        .iter()
                        .filter(|r| {
                            r.policy == policy
                                && r.block_bytes == block
                                && r.ratio == ratio
                                && !r.frac_layout_ideal.is_nan()
                        })
                        .map(|r| (r.faults as f64, r.frac_layout_ideal))
                        .collect();
                    series.push(Series { name, points, dashed: false, ..Default::default() });
                }
            }
        }
        let xs: Vec<f64> = report.rows.iter().map(|r| r.faults as f64).collect();
        let (lo, hi) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
        series.push(Series {
            name: "ideal (layout-aware)".into(),
            points: vec![(lo, 1.0), (hi, 1.0)],
            dashed: true,
            ..Default::default()
        });
        let title = format!(
            "scan: {} nodes, {} copies, {} faults ({}), % of layout-aware ideal",
            p.nodes, p.replicas, p.fault_layout, p.fault
        );
        plot::line_chart(path, &title, "faulty disks", "fraction of ideal", &series, 1.1)?;
    }
    if let Some(path) = plot_time {
        time_plot(report, path)?;
    }
    Ok(())
}

/// For each policy at the largest fault count: the slowest running consumer's rate over time
/// (500 ms windows), as a fraction of its ideal rate for the faults in force; 1 is ideal.
fn time_plot(report: &Report, path: &std::path::Path) -> BenchResult<()> {
    let p = &report.params;
    let faults = report.rows.iter().map(|r| r.faults).max().unwrap_or(0);
    let changes = changes(&p.fault_schedule);
    let mut series = vec![];
    for r in report.rows.iter().filter(|r| r.faults == faults && !r.ideal_consumer_rates_free.is_empty()) {
        let points = Sampled {
            changes: &changes,
            delivered: &r.delivered,
            sample_secs: SAMPLE_SECS,
            ideal_faulty: &r.ideal_consumer_rates_faulty,
            ideal_free: &r.ideal_consumer_rates_free,
            finished: &r.consumer_seconds,
        }
        .slowest_over_time();
        series.push(Series { name: r.policy.to_string(), points, dashed: false, ..Default::default() });
    }
    for &(at, on) in &changes {
        let name = format!("fault {} at {at}s", if on { "starts" } else { "stops" });
        series.push(Series { name, points: vec![(at, 0.0), (at, 1.4)], dashed: true, ..Default::default() });
    }
    let title = format!("slowest consumer's rate / its ideal rate, {faults} faults ({})", p.fault);
    plot::line_chart(path, &title, "seconds", "of ideal rate", &series, 1.4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_run_waits_for_its_point_of_the_second() {
        let at = |secs: f64| UNIX_EPOCH + Duration::from_secs_f64(secs);
        let ms = Duration::from_millis;
        assert_eq!(until_phase(at(5.1), ms(200)), ms(100));
        assert_eq!(until_phase(at(5.3), ms(200)), ms(900), "past it: the next second's");
        assert_eq!(until_phase(at(5.2), ms(200)), Duration::ZERO);
        assert_eq!(until_phase(at(5.1), ms(1200)), ms(100), "a phase is a point of any second");
    }

    #[test]
    fn gd_plan_runs_start_at_seeded_points_and_the_first_where_the_simulator_does() {
        let (plan, settings) = (ReadPolicyKind::GdPlan, PolicySettings::default());
        let mut series = ganges_sim::scan::start_phases(7);
        assert_eq!(run_phase(ReadPolicyKind::Gd, &settings, &mut series), None, "gd does not phase: at once");
        assert_eq!(run_phase(plan, &settings, &mut series), Some(ganges_sim::scan::start_phase(7)));
        let phases: Vec<Duration> = (0..7).map(|_| run_phase(plan, &settings, &mut series).expect("waits")).collect();
        assert!(phases.iter().all(|p| *p < Duration::from_secs(1)));
        let distinct: std::collections::BTreeSet<_> = phases.iter().collect();
        assert_eq!(distinct.len(), phases.len(), "every run its own point: {phases:?}");
    }
}
