//! `ganges bench transport`: what securing the connections costs on the data path. Three
//! one-server clusters run side by side, plain, with the cluster secret, and with the secret
//! and TLS; one consumer reads a dataset from each in turn from the page cache (no disk
//! model, so nothing but the data path is measured), `--repeat` times alternating, and each
//! is reported in MB/s and CPU seconds per GB (server and client), against the plain one.
//!
//! The secret's handshake happens once per connection, before any data moves, so its cost on
//! the data path should be nothing; TLS encrypts and authenticates every byte.

use crate::scan::median_and_spread;
use crate::util::{BenchError, BenchResult, Table, git_commit, process_cpu_secs};
use ganges_client::Client;
use ganges_client::dataset::{self, CreateSpec};
use ganges_client::scan::{ReadOptions, ReadStream};
use ganges_core::datagen::Generator;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::route::ReadPolicyKind;
use ganges_core::shape::Partition;
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_harness::local::{LocalCluster, LocalSpec};
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::manifest::Manifest;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct TransportBenchSpec {
    /// Bytes the consumer reads from each cluster per run.
    pub bytes: u64,
    pub block_bytes: u32,
    pub repeat: u32,
    pub binary: PathBuf,
    pub json: Option<PathBuf>,
}

/// The three ways a connection can go.
const TRANSPORTS: [&str; 3] = ["plain", "secret", "secret+tls"];

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub transport: &'static str,
    /// The median run's.
    pub mb_per_sec: f64,
    pub cpu_seconds_per_gb: f64,
    /// Against the plain transport's MB/s.
    pub frac_plain: f64,
    pub repeat_mb_per_sec: Vec<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub bench: &'static str,
    pub bytes: u64,
    pub block_bytes: u32,
    pub repeat: u32,
    pub git_commit: String,
    pub rows: Vec<Row>,
}

async fn server_cpu(client: &Client) -> BenchResult<f64> {
    match client.control(NodeId(0), ControlRequest::Stats).await? {
        ControlReply::Stats { stats } => Ok(stats.cpu_secs),
        other => Err(BenchError::Failed(format!("unexpected reply {other:?}"))),
    }
}

/// One read of the whole dataset by one consumer: (MB/s, CPU s/GB of server and client).
async fn read_once(client: &Arc<Client>, m: &Arc<Manifest>) -> BenchResult<(f64, f64)> {
    let (server0, client0) = (server_cpu(client).await?, process_cpu_secs());
    let part = Partition { offset: 0, len: m.shape.fragment_bytes(FragmentId(0)) };
    let mut s = ReadStream::open(client.clone(), m.clone(), part, ReadOptions::new(ReadPolicyKind::Static))?;
    let t = Instant::now();
    while s.next().await?.is_some() {}
    let secs = t.elapsed().as_secs_f64();
    let report = s.close();
    if report.digest != m.digest {
        return Err(BenchError::Failed("the bytes read differ from the dataset's: the data path is broken".into()));
    }
    let cpu_secs = server_cpu(client).await? - server0 + process_cpu_secs() - client0;
    Ok((mb_per_sec(report.bytes, secs), cpu_secs / (report.bytes as f64 / 1e9)))
}

pub fn run(spec: &TransportBenchSpec) -> BenchResult<Report> {
    crate::util::stop_requests();
    let root = tempfile::Builder::new().prefix("ganges-bench-transport-").tempdir()?;
    let clusters: Vec<LocalCluster> = TRANSPORTS
        .iter()
        .map(|t| {
            let mut s = LocalSpec::new(1, root.path().join(t), None, spec.binary.clone());
            (s.secret, s.tls) = (*t != "plain", *t == "secret+tls");
            Ok(LocalCluster::start(&s)?)
        })
        .collect::<BenchResult<_>>()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    crate::util::block_on(&rt, async {
        let mut setups = vec![];
        for c in &clusters {
            let client = Client::connect(c.cluster().clone()).await?;
            let create = CreateSpec {
                name: "bench-transport".parse()?,
                fragment_bytes: vec![spec.bytes],
                block_bytes: spec.block_bytes,
                replicas: 1,
                generator: Generator::Random { seed: 1 },
            };
            let m = Arc::new(dataset::create(&client, create, None).await?);
            // One untimed read: the page cache, buffers and thread pools warm.
            read_once(&client, &m).await?;
            setups.push((client, m));
        }
        let mut samples: Vec<Vec<(f64, f64)>> = vec![vec![]; TRANSPORTS.len()];
        for _ in 0..spec.repeat {
            for (i, (client, m)) in setups.iter().enumerate() {
                samples[i].push(read_once(client, m).await?);
            }
        }
        let mut rows = vec![];
        for (i, t) in TRANSPORTS.iter().enumerate() {
            // The median by time (the slowest rate is the longest run).
            let secs: Vec<f64> = samples[i].iter().map(|(r, _)| 1.0 / r).collect();
            let (median, _) = median_and_spread(&secs);
            let (mbps, cpu) = samples[i][median];
            rows.push(Row {
                transport: t,
                mb_per_sec: mbps,
                cpu_seconds_per_gb: cpu,
                frac_plain: f64::NAN,
                repeat_mb_per_sec: samples[i].iter().map(|s| s.0).collect(),
            });
        }
        let plain = rows[0].mb_per_sec;
        rows.iter_mut().for_each(|r| r.frac_plain = r.mb_per_sec / plain);
        Ok(Report {
            bench: "transport",
            bytes: spec.bytes,
            block_bytes: spec.block_bytes,
            repeat: spec.repeat,
            git_commit: git_commit(),
            rows,
        })
    })
}

pub fn render(r: &Report) -> String {
    let mut out = format!(
        "transport: one consumer reads {} from one server (page cache, no disk model), {} blocks, plain, with the \
         cluster secret, and with the secret and TLS, alternating, {} run(s) each (median), commit {}\n",
        ByteSize(r.bytes),
        ByteSize(r.block_bytes as u64),
        r.repeat,
        r.git_commit
    );
    let mut t = Table::new(&["transport", "MB/s", "cpu s/GB", "% of plain"]);
    for row in &r.rows {
        t.row(vec![
            row.transport.to_string(),
            format!("{:.1}", row.mb_per_sec),
            format!("{:.2}", row.cpu_seconds_per_gb),
            format!("{:.1}", row.frac_plain * 100.0),
        ]);
    }
    out.push_str(&t.render());
    out
}
