//! Helpers for integration tests: local clusters of real `ganges serve` processes.
#![allow(dead_code)]

use ganges_client::client::Client;
use ganges_client::dataset::{self, CreateSpec};
use ganges_core::datagen::Generator;
use ganges_core::disk::DiskParams;
use ganges_harness::local::{LocalCluster, LocalSpec};
use ganges_proto::manifest::Manifest;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

/// Say that a test could not run here and why, where it is seen: straight to the process's
/// stderr, which the test harness does not capture (it captures `eprintln!`), so a skipped
/// test never passes silently. With `GANGES_NO_SKIP=1` (a machine that must run everything)
/// a skip is a failure.
#[allow(dead_code)]
pub fn skip(why: &str) {
    use std::io::Write;
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if std::env::var_os("GANGES_NO_SKIP").is_some() {
        panic!("{test} cannot run here and GANGES_NO_SKIP is set: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Whether this machine lets a test make cgroup-v1 groups (as root, with the cpu, cpuacct and
/// memory controllers mounted).
pub fn cgroups_writable() -> bool {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let probe = root.join("cpu").join(format!("ganges-probe-{}", std::process::id()));
    let ok = std::fs::create_dir(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    ok && ["cpuacct", "memory"].iter().all(|c| root.join(c).exists())
}

pub struct TestCluster {
    pub local: LocalCluster,
    pub root: tempfile::TempDir,
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ganges"))
}

/// A disk model fast enough for tests but real: every reply waits for it.
pub fn disk(rate_mib_per_sec: f64) -> Option<DiskParams> {
    Some(DiskParams {
        rate_bytes_per_sec: rate_mib_per_sec * 1024.0 * 1024.0,
        seek: Duration::from_millis(1),
        queue_depth: 1,
    })
}

pub fn start(nodes: u32, disk: Option<DiskParams>) -> TestCluster {
    let root = tempfile::tempdir().unwrap();
    let spec = LocalSpec::new(nodes, root.path().to_path_buf(), disk, binary());
    let local = LocalCluster::start(&spec).expect("local cluster starts");
    TestCluster { local, root }
}

impl TestCluster {
    pub async fn client(&self) -> Arc<Client> {
        Client::connect(self.local.cluster().clone()).await.expect("client connects")
    }

    /// The cluster file, saved beside the servers' folders, for commands run from the shell.
    pub fn cluster_file(&self) -> String {
        let path = self.root.path().join("cluster.toml");
        self.local.cluster().save(&path).expect("the cluster file saves");
        path.display().to_string()
    }

    pub fn data_dir(&self, node: u32) -> PathBuf {
        self.root.path().join(format!("node-{node}")).join("data")
    }
}

pub async fn create(
    client: &Arc<Client>,
    name: &str,
    fragments: Vec<u64>,
    block: u32,
    replicas: u32,
    generator: Generator,
) -> Manifest {
    dataset::create(
        client,
        CreateSpec { name: name.parse().unwrap(), fragment_bytes: fragments, block_bytes: block, replicas, generator },
        None,
    )
    .await
    .expect("create")
}

/// Run the `ganges` binary.
pub fn ganges(args: &[&str]) -> Output {
    Command::new(binary()).args(args).output().expect("ganges runs")
}

pub fn ok(args: &[&str]) -> String {
    let out = ganges(args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "ganges {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Run and expect failure with exit code `code`; returns stderr.
pub fn fails(args: &[&str], code: i32) -> String {
    let out = ganges(args);
    assert_eq!(out.status.code(), Some(code), "ganges {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Stops the local cluster of a cluster file when dropped (however the test ends).
pub struct Down(pub std::path::PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(binary()).args(["local", "down", "--cluster"]).arg(&self.0).output();
    }
}

/// Processes whose command line mentions `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            out.push(pid);
        }
    }
    out
}

/// Poll `done` every 2 ms until it holds; after 30 s fail the test, saying what never came.
pub async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Wait until `node` has read (or, with `writes`, written) at least `bytes`, polling its
/// stats: a fault injected after this lands in the middle of the transfer whatever this
/// machine's speed, where a fixed sleep lands wherever the setup's timing puts it.
pub async fn until_moved(client: &Client, node: ganges_core::ids::NodeId, bytes: u64, writes: bool) {
    use ganges_proto::control::{ControlReply, ControlRequest};
    until(&format!("{node} moved {bytes} bytes"), || async {
        match client.control(node, ControlRequest::Stats).await {
            Ok(ControlReply::Stats { stats }) => (if writes { stats.write_bytes } else { stats.read_bytes }) >= bytes,
            _ => false,
        }
    })
    .await;
}

/// A server's counters (`ganges node stats`).
pub async fn stats(client: &Client, node: ganges_core::ids::NodeId) -> ganges_proto::control::ServerStats {
    use ganges_proto::control::{ControlReply, ControlRequest};
    match client.control(node, ControlRequest::Stats).await.unwrap() {
        ControlReply::Stats { stats } => *stats,
        other => panic!("{other:?}"),
    }
}

/// Unmounts a tmpfs when the test ends, however it ends.
pub struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A tmpfs of `size` (`mount`'s form: `2m`) on `dir`, for a real ENOSPC; `None` (the test
/// skips) where mounting needs a root this user is not.
pub fn tmpfs(dir: &std::path::Path, size: &str) -> Option<Mount> {
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        skip("mounting a tmpfs needs root");
    }
    mounted.then(|| Mount(dir.to_path_buf()))
}

/// A cluster whose node 1 keeps its data on a tmpfs of `size`, for a real ENOSPC. Fields
/// drop in order: the servers stop, then the tmpfs is unmounted, then the folder goes.
pub struct SmallDisk {
    pub local: LocalCluster,
    /// Node 1's data directory (the tmpfs).
    pub data: PathBuf,
    _mount: Mount,
    _root: tempfile::TempDir,
}

/// `nodes` servers with the disk model `disk`, node 1's data on a tmpfs of `size` (`mount`'s
/// form: `2m`); `None` (the test skips) where mounting needs a root this user is not.
pub fn start_with_small_disk(nodes: u32, size: &str, disk: Option<DiskParams>) -> Option<SmallDisk> {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("node-1").join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mount = tmpfs(&data, size)?;
    let spec = LocalSpec::new(nodes, root.path().to_path_buf(), disk, binary());
    let local = LocalCluster::start(&spec).expect("cluster starts");
    Some(SmallDisk { local, data, _mount: mount, _root: root })
}

/// Wait until process `pid` has stopped itself (a `stop` fail point), for 30 s at most.
pub fn wait_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.contains(") T ")).unwrap_or(false) {
        assert!(std::time::Instant::now() < deadline, "process {pid} never stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
}
