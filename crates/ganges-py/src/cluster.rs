//! `Cluster`: the connections to a cluster (any cluster file, or a local cluster this process
//! started), and every operation on datasets, writes and faults.

use crate::convert::{DurArg, RateArg, SizeArg, dataset_name, parse, progress, to_python};
use crate::errors::{self, invalid};
use crate::read::{RandomReader, Reader, Scan};
use crate::runtime::wait;
use bytes::Bytes;
use ganges_client::Client;
use ganges_client::cluster::{ClusterFile, default_cluster_path};
use ganges_client::dataset::{self, CreateSpec, Sizing};
use ganges_client::scan::ReadOptions;
use ganges_client::write::{self, WriteSource, WriteSpec};
use ganges_core::datagen::Generator;
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::ids::NodeId;
use ganges_core::layout::Layout;
use ganges_core::route::ReadPolicyKind;
use ganges_core::write::WritePolicyKind;
use ganges_harness::PartTime;
use ganges_harness::local::{LocalCluster, LocalSpec};
use ganges_proto::control::RealFaults;
use ganges_proto::manifest::RecordFormat;
use pyo3::prelude::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Servers this process runs (a local cluster, or its own part-time I/O node), stopped by
/// that process and by no other: a forked child that inherits the handle leaves them alone.
#[derive(Debug)]
struct Owned<T> {
    owner: u32,
    servers: Option<T>,
}

impl<T> Owned<T> {
    fn new(servers: T) -> Owned<T> {
        Owned { owner: std::process::id(), servers: Some(servers) }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if self.owner != std::process::id() {
            std::mem::forget(self.servers.take());
        }
    }
}

/// Where a write's bytes come from, as Python gave them.
#[derive(Debug, FromPyObject)]
pub enum SourceArg {
    Path(PathBuf),
    Buffers(Vec<pyo3_bytes::PyBytes>),
}

/// While a server is down, how often the connections are made afresh.
const RECONNECT_EVERY: Duration = Duration::from_secs(2);

#[pyclass(module = "ganges._ganges", frozen)]
#[derive(Debug)]
pub struct Cluster {
    file: ClusterFile,
    /// This process's connections (made again in a forked child), and when they were made.
    client: Mutex<Option<(u32, Arc<Client>, Instant)>>,
    local: Mutex<Option<Owned<LocalCluster>>>,
    /// This process's own server, when it is a part-time I/O node of the cluster.
    part_time: Mutex<Option<Owned<PartTime>>>,
}

impl Cluster {
    fn new(file: ClusterFile, local: Option<LocalCluster>) -> Cluster {
        Cluster {
            file,
            client: Mutex::new(None),
            local: Mutex::new(local.map(Owned::new)),
            part_time: Mutex::new(None),
        }
    }

    /// The connections for this process, made on first use in it.
    /// This process's connections; while some server is down, connected afresh now and then
    /// (at most every `RECONNECT_EVERY`), so a server that is back is used again.
    pub fn client(&self, py: Python<'_>) -> PyResult<Arc<Client>> {
        let pid = std::process::id();
        let cached = self.client.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some((owner, c, tried)) = cached
            && owner == pid
        {
            if c.is_whole() || tried.elapsed() < RECONNECT_EVERY {
                return Ok(c);
            }
            let fresh = wait(py, c.reconnected())?;
            *self.client.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, fresh.clone(), Instant::now()));
            return Ok(fresh);
        }
        let c = wait(py, Client::connect(self.file.clone()))?.map_err(errors::client)?;
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, c.clone(), Instant::now()));
        Ok(c)
    }

    async fn manifest(client: &Client, name: &str) -> PyResult<Arc<ganges_proto::manifest::Manifest>> {
        Ok(Arc::new(client.manifest(&dataset_name(name)?).await.map_err(errors::client)?))
    }
}

/// The disk model from Python's `disk_rate` and `seek` (`None`: the real disk).
fn disk_model(disk_rate: Option<RateArg>, seek: Option<DurArg>) -> PyResult<Option<DiskParams>> {
    let Some(r) = disk_rate else { return Ok(None) };
    let rate = r.bytes_per_sec("disk_rate")?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(invalid(format!("disk_rate {rate}: give a rate above 0, or None for the real disk")));
    }
    let seek = seek.map(|s| s.duration("seek")).transpose()?.unwrap_or(Duration::from_millis(5));
    Ok(Some(DiskParams { rate_bytes_per_sec: rate, seek, queue_depth: 1 }))
}

fn read_options(policy: &str, window: Option<u32>) -> PyResult<ReadOptions> {
    let opts = ReadOptions::new(parse::<ReadPolicyKind>("policy", policy)?);
    Ok(match window {
        Some(0) => return Err(invalid("window must be at least 1")),
        Some(w) => opts.with_window(w),
        None => opts,
    })
}

fn nodes_arg(nodes: Vec<u32>) -> Vec<NodeId> {
    nodes.into_iter().map(NodeId).collect()
}

#[pymethods]
impl Cluster {
    /// Connect to the cluster a cluster file lists (default: $GANGES_CLUSTER, else the local
    /// cluster's file).
    #[staticmethod]
    #[pyo3(signature = (path=None))]
    fn connect(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Cluster> {
        let path = path.unwrap_or_else(default_cluster_path);
        let file = ClusterFile::load(&path).map_err(errors::client)?;
        let cluster = Cluster::new(file, None);
        cluster.client(py)?;
        Ok(cluster)
    }

    /// Start `nodes` servers on this machine under `root`, from the `ganges` binary
    /// `binary`; `disk_rate` (bytes/s) gives each the disk model, `None` the real disk.
    #[staticmethod]
    #[pyo3(signature = (nodes, root, binary, disk_rate=None, seek=None, direct_io=false, secret=false, metrics=false))]
    fn start_local(
        py: Python<'_>,
        nodes: u32,
        root: PathBuf,
        binary: PathBuf,
        disk_rate: Option<RateArg>,
        seek: Option<DurArg>,
        direct_io: bool,
        secret: bool,
        metrics: bool,
    ) -> PyResult<Cluster> {
        let disk = disk_model(disk_rate, seek)?;
        let mut spec = LocalSpec::new(nodes, root, disk, binary);
        spec.direct_io = direct_io;
        spec.secret = secret;
        spec.metrics = metrics;
        // On this thread, not an I/O thread: the servers are tied to the thread that starts
        // them and die with it.
        let servers = py.detach(|| LocalCluster::start(&spec)).map_err(errors::harness)?;
        let mut file = servers.cluster().clone();
        let path = spec.root.join("cluster.toml");
        file.save(&path).map_err(errors::client)?;
        file.path = path;
        let cluster = Cluster::new(file, Some(servers));
        cluster.client(py)?;
        Ok(cluster)
    }

    /// Serve node `node` of the cluster file at `path` in this process (a part-time I/O
    /// node: Panda's), and connect once every node answers (within `wait_for`). A collective
    /// array write from this process hands its own server its pieces in memory.
    #[staticmethod]
    #[pyo3(signature = (path, node, data_dir=None, wait_for=None, disk_rate=None, seek=None))]
    fn part_time(
        py: Python<'_>,
        path: PathBuf,
        node: u32,
        data_dir: Option<PathBuf>,
        wait_for: Option<DurArg>,
        disk_rate: Option<RateArg>,
        seek: Option<DurArg>,
    ) -> PyResult<Cluster> {
        let file = ClusterFile::load(&path).map_err(errors::client)?;
        if node >= file.nodes() {
            return Err(invalid(format!("node {node} is not in {} (nodes 0..{})", path.display(), file.nodes())));
        }
        let disk = disk_model(disk_rate, seek)?;
        let wait_for =
            wait_for.map(|w| w.duration("wait_for")).transpose()?.unwrap_or(ganges_harness::parttime::GATHER_WAIT);
        let start = PartTime::start(file.clone(), NodeId(node), data_dir, wait_for, move |mut c| {
            c.disk = disk;
            c
        });
        let part = wait(py, start)?.map_err(errors::harness)?;
        let cluster = Cluster::new(file, None);
        *cluster.client.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((std::process::id(), part.client().clone(), Instant::now()));
        *cluster.part_time.lock().unwrap_or_else(|e| e.into_inner()) = Some(Owned::new(part));
        Ok(cluster)
    }

    /// For a part-time I/O node: the frames and bytes its own client handed it in memory.
    #[getter]
    fn local_traffic(&self) -> Option<(u64, u64)> {
        let part = self.part_time.lock().unwrap_or_else(|e| e.into_inner());
        part.as_ref().and_then(|p| p.servers.as_ref()).map(PartTime::local_traffic)
    }

    /// Stop a local cluster's servers, or this process's own server (nothing for a cluster
    /// this process did not start).
    fn stop(&self, py: Python<'_>) {
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner()).take();
        let part = self.part_time.lock().unwrap_or_else(|e| e.into_inner()).take();
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = None;
        py.detach(move || drop(local));
        // Only the process that started it stops it (in a forked child, dropping forgets it).
        if let Some(mut p) = part
            && p.owner == std::process::id()
            && let Some(server) = p.servers.take()
        {
            let _ = wait(py, server.stop());
        }
    }

    /// The cluster file (other processes connect with it).
    #[getter]
    fn path(&self) -> PathBuf {
        self.file.path.clone()
    }

    #[getter]
    fn nodes(&self) -> u32 {
        self.file.nodes()
    }

    /// Process ids of a local cluster's servers (None where one has exited).
    fn server_pids(&self) -> Vec<Option<u32>> {
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let Some(servers) = local.as_ref().and_then(|l| l.servers.as_ref()) else { return vec![] };
        (0..self.file.nodes()).map(|n| servers.pid(NodeId(n))).collect()
    }

    /// Kill one server of a local cluster (to see reads survive it).
    fn kill(&self, node: u32) -> PyResult<()> {
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let Some(servers) = local.as_mut().and_then(|l| l.servers.as_mut()) else {
            return Err(invalid("kill stops a server of a local cluster this process started"));
        };
        if node >= self.file.nodes() {
            return Err(invalid(format!("node {node} is not in the cluster (nodes 0..{})", self.file.nodes())));
        }
        servers.kill(NodeId(node));
        Ok(())
    }

    fn restart(&self, py: Python<'_>, node: u32) -> PyResult<()> {
        if node >= self.file.nodes() {
            return Err(invalid(format!("node {node} is not in the cluster (nodes 0..{})", self.file.nodes())));
        }
        py.detach(|| {
            let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            let Some(servers) = local.as_mut().and_then(|l| l.servers.as_mut()) else {
                return Err(invalid("restart starts a server of a local cluster this process started"));
            };
            servers.restart(NodeId(node)).map_err(|e| errors::GangesError::new_err(e.to_string()))
        })?;
        // Connect afresh on next use: the old connection to that server is closed.
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    #[pyo3(signature = (name, size=None, fragment_size=None, fragments=None, replicas=2, block_size=None, records=false, seed=1, layout="chained", progress_cb=None))]
    fn create<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        size: Option<SizeArg>,
        fragment_size: Option<SizeArg>,
        fragments: Option<u32>,
        replicas: u32,
        block_size: Option<SizeArg>,
        records: bool,
        seed: u64,
        layout: &str,
        progress_cb: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let block_bytes = block_size.map_or(Ok(1 << 20), |b| b.block_bytes())?;
        let sizing = match (size, fragment_size) {
            (Some(_), Some(_)) => return Err(invalid("give size (in all) or fragment_size (each), not both")),
            (Some(t), None) => Sizing::Total(t.bytes("size")?),
            (None, Some(f)) => Sizing::PerFragment(f.bytes("fragment_size")?),
            (None, None) => Sizing::PerFragment(64 << 20),
        };
        let generator = if records { Generator::Records { seed } } else { Generator::Random { seed } };
        let fragments = fragments.unwrap_or(client.nodes());
        let fragment_bytes =
            sizing.fragment_bytes(fragments, block_bytes, generator.align()).map_err(errors::client)?;
        let layout = match layout {
            "chained" => Layout::chained(client.nodes(), replicas),
            "mirrored" if replicas == 2 => Layout::mirrored(client.nodes()),
            "mirrored" => return Err(invalid("layout mirrored keeps two copies, one in each group: replicas=2")),
            other => return Err(invalid(format!("layout {other:?}: chained or mirrored"))),
        }
        .map_err(|e| invalid(e.to_string()))?;
        let spec = CreateSpec { name: dataset_name(name)?, fragment_bytes, block_bytes, replicas, generator };
        let m = wait(py, dataset::create_with_layout(&client, spec, layout, progress(progress_cb)))?
            .map_err(errors::client)?;
        to_python(py, &m)
    }

    /// Import a local file as a dataset.
    #[pyo3(signature = (name, path, fragments=None, replicas=2, block_size=None, progress_cb=None))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        path: PathBuf,
        fragments: Option<u32>,
        replicas: u32,
        block_size: Option<SizeArg>,
        progress_cb: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let block_bytes = block_size.map_or(Ok(1 << 20), |b| b.block_bytes())?;
        let fragments = fragments.unwrap_or(client.nodes());
        let name = dataset_name(name)?;
        let m = wait(py, dataset::put(&client, name, &path, fragments, block_bytes, replicas, progress(progress_cb)))?
            .map_err(errors::client)?;
        to_python(py, &m)
    }

    /// Export a dataset to a local file (checked against its digest before it appears).
    #[pyo3(signature = (name, path, policy="gd", progress_cb=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        path: PathBuf,
        policy: &str,
        progress_cb: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let (name, opts) = (dataset_name(name)?, read_options(policy, None)?);
        let (_, file, report) =
            wait(py, dataset::get(&client, &name, &path, opts, progress(progress_cb)))?.map_err(errors::client)?;
        to_python(py, &json!({ "path": file, "report": report }))
    }

    /// Every dataset (with `staging`, writes not yet committed too).
    #[pyo3(signature = (staging=false))]
    fn ls<'py>(&self, py: Python<'py>, staging: bool) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let (entries, unreachable) = wait(py, dataset::list(&client, staging))?.map_err(errors::client)?;
        to_python(py, &json!({ "datasets": entries, "unreachable": unreachable }))
    }

    fn info<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let name = dataset_name(name)?;
        let info = wait(py, dataset::info(&client, &name))?.map_err(errors::client)?;
        to_python(py, &info)
    }

    #[pyo3(signature = (name, progress_cb=None))]
    fn verify<'py>(&self, py: Python<'py>, name: &str, progress_cb: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let name = dataset_name(name)?;
        let v = wait(py, dataset::verify(&client, &name, progress(progress_cb)))?.map_err(errors::client)?;
        let clean = v.is_clean();
        let out = to_python(py, &v)?;
        out.set_item("clean", clean)?;
        Ok(out)
    }

    #[pyo3(signature = (name, progress_cb=None))]
    fn scrub<'py>(&self, py: Python<'py>, name: &str, progress_cb: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let name = dataset_name(name)?;
        let r =
            wait(py, ganges_client::repair::scrub(&client, &name, progress(progress_cb)))?.map_err(errors::client)?;
        let clean = r.is_clean();
        let out = to_python(py, &r)?;
        out.set_item("clean", clean)?;
        Ok(out)
    }

    fn rm<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let name = dataset_name(name)?;
        let s = wait(py, dataset::remove(&client, &name))?.map_err(errors::client)?;
        to_python(py, &s)
    }

    /// Fill every copy of a dataset written with a choice of copy (replica completion).
    fn complete<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let name = dataset_name(name)?;
        let c = wait(py, write::complete(&client, &name))?.map_err(errors::client)?;
        to_python(py, &c)
    }

    /// Write a dataset from `writers` writers at once through a write policy, from a file,
    /// buffers in memory, or (with `size`) generated bytes.
    #[pyo3(signature = (name, source=None, size=None, writers=None, policy="gd", replicas=None, block_size=None, complete=true, seed=1, window=None, progress_cb=None))]
    fn write<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        source: Option<SourceArg>,
        size: Option<SizeArg>,
        writers: Option<u32>,
        policy: &str,
        replicas: Option<u32>,
        block_size: Option<SizeArg>,
        complete: bool,
        seed: u64,
        window: Option<u32>,
        progress_cb: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let policy: WritePolicyKind = parse("policy", policy)?;
        let (source, total_bytes) = match (source, size) {
            (Some(_), Some(_)) => return Err(invalid("give a source or a size to generate, not both")),
            (None, None) => return Err(invalid("give a source (a path or buffers) or a size to generate")),
            (None, Some(s)) => (WriteSource::Generated(Generator::Random { seed }), s.bytes("size")?),
            (Some(SourceArg::Path(p)), None) => (WriteSource::File(p), 0),
            (Some(SourceArg::Buffers(b)), None) => {
                let buffers: Arc<[Bytes]> = b.into_iter().map(pyo3_bytes::PyBytes::into_inner).collect();
                (WriteSource::Buffers(buffers), 0)
            }
        };
        let spec = WriteSpec {
            name: dataset_name(name)?,
            writers: writers.unwrap_or(client.nodes()),
            total_bytes,
            block_bytes: block_size.map_or(Ok(1 << 20), |b| b.block_bytes())?,
            replicas: replicas.unwrap_or(policy.default_replicas()),
            policy,
            window,
            source,
            complete,
            run_blocks: 1,
            ceft: Default::default(),
            mirrored: policy.default_mirrored(),
            records: RecordFormat::Bytes,
        };
        let out = wait(py, write::write(&client, spec, progress(progress_cb)))?.map_err(errors::client)?;
        to_python(py, &out)
    }

    /// Set faults on servers: the disk model's (`factor`, `competing_share`) or real ones.
    #[pyo3(signature = (nodes, factor=None, competing_share=None, kernel_read_rate=None, kernel_write_rate=None, competing_reader=None, link_rate=None, link_delay=None))]
    fn fault_set<'py>(
        &self,
        py: Python<'py>,
        nodes: Vec<u32>,
        factor: Option<f64>,
        competing_share: Option<f64>,
        kernel_read_rate: Option<RateArg>,
        kernel_write_rate: Option<RateArg>,
        competing_reader: Option<f64>,
        link_rate: Option<RateArg>,
        link_delay: Option<DurArg>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let model = match (factor, competing_share) {
            (Some(_), Some(_)) => return Err(invalid("give factor or competing_share, not both")),
            (Some(factor), None) => Some(Fault::Factor { factor }),
            (None, Some(share)) => Some(Fault::Competing { share }),
            (None, None) => None,
        };
        let rate = |r: Option<RateArg>, what: &str| -> PyResult<Option<u64>> {
            r.map(|r| r.bytes_per_sec(what).map(|b| b.round() as u64)).transpose()
        };
        let real = RealFaults {
            kernel_read_bytes_per_sec: rate(kernel_read_rate, "kernel_read_rate")?,
            kernel_write_bytes_per_sec: rate(kernel_write_rate, "kernel_write_rate")?,
            competing_reader,
            competing_bytes_per_sec: None,
            link_bytes_per_sec: rate(link_rate, "link_rate")?,
            link_delay_us: link_delay.map(|d| d.duration("link_delay").map(|d| d.as_micros() as u64)).transpose()?,
        };
        let nodes = nodes_arg(nodes);
        let done = wait(py, ganges_client::fault::set(&client, &nodes, model, &real))?.map_err(errors::client)?;
        let out: Vec<_> = done
            .iter()
            .map(|d| {
                json!({
                    "node": d.node.0,
                    "model": d.model.map(|f| f.to_string()),
                    "real": d.real.as_ref().map(|r| r.to_string()),
                    "warning": d.warning,
                })
            })
            .collect();
        to_python(py, &out)
    }

    /// Remove every fault from `nodes` (default: every live server).
    #[pyo3(signature = (nodes=None))]
    fn fault_clear(&self, py: Python<'_>, nodes: Option<Vec<u32>>) -> PyResult<()> {
        let client = self.client(py)?;
        let nodes = nodes.map(nodes_arg);
        wait(py, ganges_client::fault::clear(&client, nodes.as_deref()))?.map_err(errors::client)
    }

    /// Every server's disk, faults in force and counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let stats = wait(py, ganges_client::fault::all_stats(&client))?;
        to_python(py, &stats)
    }

    /// The ideal time of a scan by `consumers` consumers (default: one per fragment): the
    /// least time in which the servers, at their modelled rates with the faults in force,
    /// can deliver every consumer's share from the copies that hold it. None when a server
    /// reads a real disk (no model rate to reckon with) or is unreachable.
    #[pyo3(signature = (name, consumers=None))]
    fn ideal_seconds(&self, py: Python<'_>, name: &str, consumers: Option<u32>) -> PyResult<Option<f64>> {
        let client = self.client(py)?;
        let manifest = wait(py, Cluster::manifest(&client, name))??;
        let parts = crate::read::partitions(&manifest.shape, consumers)?;
        wait(py, ganges_client::fault::scan_ideal_seconds(&client, &manifest, &parts))?.map_err(errors::client)
    }

    /// One consumer's unordered read: `consumer` of `consumers` reads its share of the
    /// dataset (one fragment each by default).
    #[pyo3(signature = (name, consumer=0, consumers=None, policy="gd", window=None))]
    fn scan(
        &self,
        py: Python<'_>,
        name: &str,
        consumer: u32,
        consumers: Option<u32>,
        policy: &str,
        window: Option<u32>,
    ) -> PyResult<Scan> {
        let client = self.client(py)?;
        let opts = read_options(policy, window)?;
        let manifest = wait(py, Cluster::manifest(&client, name))??;
        Scan::open(client, manifest, consumer, consumers, opts)
    }

    /// One of River's query primitives, as `ganges run PRIMITIVE DATASETS...` runs it (every
    /// worker a task of this process): what it did, as a dict.
    #[pyo3(signature = (primitive, *datasets, workers=None, robust=true, seed=1, keep=0.1, n=10, after=None, key_bytes=3, records=None, data_seed=1, check=false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        primitive: &str,
        datasets: Vec<String>,
        workers: Option<usize>,
        robust: bool,
        seed: u64,
        keep: f64,
        n: usize,
        after: Option<usize>,
        key_bytes: u32,
        records: Option<u64>,
        data_seed: u64,
        check: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        let names = datasets.iter().map(|d| dataset_name(d)).collect::<PyResult<Vec<_>>>()?;
        let o = crate::run::Options { workers, robust, seed, keep, n, after, key_bytes, records, data_seed, check };
        crate::run::run(py, client, primitive, names, o)
    }

    /// An ordered reader of `length` bytes at `offset` (default: to the end), at most
    /// `buffer_blocks` blocks read ahead; `written_order` reads a dq write in its writers' order.
    #[pyo3(signature = (name, offset=0, length=None, policy="gd", buffer_blocks=32, written_order=false))]
    fn reader(
        &self,
        py: Python<'_>,
        name: &str,
        offset: u64,
        length: Option<u64>,
        policy: &str,
        buffer_blocks: u32,
        written_order: bool,
    ) -> PyResult<Reader> {
        let client = self.client(py)?;
        let opts = read_options(policy, None)?;
        let manifest = wait(py, Cluster::manifest(&client, name))??;
        Reader::open(client, manifest, offset, length, opts, buffer_blocks, written_order)
    }

    /// A random-access reader: `read(offset, length)` and `read_many(ranges)`.
    #[pyo3(signature = (name, policy="gd"))]
    fn random_reader(&self, py: Python<'_>, name: &str, policy: &str) -> PyResult<RandomReader> {
        let client = self.client(py)?;
        let opts = read_options(policy, None)?;
        let manifest = wait(py, Cluster::manifest(&client, name))??;
        RandomReader::open(client, manifest, opts)
    }
}
