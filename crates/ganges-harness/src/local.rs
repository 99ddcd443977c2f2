//! Local clusters: N `ganges serve` child processes on this machine, one data directory and
//! one disk model (or the real disk) each, on 127.0.0.1 or, with `netns`, each in a network
//! namespace of its own (`crate::netns`). The demo, the benchmarks and the integration tests
//! all run on one.
//!
//! Every server is started with PR_SET_PDEATHSIG, so it dies with the process that started
//! it: a killed test, bench or supervisor leaves no server behind. `ganges local up` starts a
//! small detached *supervisor* process that owns the servers and waits for
//! `ganges local down` (SIGTERM); the supervisor is what the servers' lives are tied to.

use crate::error::{HarnessError, HarnessResult};
use crate::netns::Network;
use crate::sys;
use ganges_client::Client;
use ganges_client::cluster::{ClusterFile, LocalInfo, ServerEntry};
use ganges_core::disk::DiskParams;
use ganges_core::ids::NodeId;
use ganges_core::sched::SchedulerKind;
use ganges_proto::control::{ControlReply, ControlRequest};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to print its ready line: generous, for a loaded CI machine.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long servers get to exit after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(3);

#[derive(Clone, Debug)]
pub struct LocalSpec {
    pub nodes: u32,
    pub root: PathBuf,
    /// `None`: servers read the real file system with no model.
    pub disk: Option<DiskParams>,
    pub scheduler: SchedulerKind,
    /// The `ganges` binary to run servers from.
    pub binary: PathBuf,
    /// Each server its own node (`crate::stress`); `None`: the servers share the machine.
    pub node_groups: Option<crate::stress::NodeSpec>,
    /// Each server in a network namespace of its own, with its own address on a bridge
    /// (`crate::netns`; needs root). Such servers are not on loopback, so they get a secret.
    pub netns: bool,
    /// The servers read and write with direct I/O (`ganges serve --direct-io`).
    pub direct_io: bool,
    /// Give the cluster a secret (`ROOT/secret`) even on loopback.
    pub secret: bool,
    /// Encrypt every connection: a CA and a certificate per server in `ROOT/tls` (as
    /// `ganges cluster init --tls` makes them). Implies a secret.
    pub tls: bool,
    /// Each server serves Prometheus metrics on a free port of its own address (its stats
    /// say which).
    pub metrics: bool,
    /// `ganges serve --txn-timeout`: how long a server waits for a write's client before it
    /// applies the commit rule alone (`None`: the server's default).
    pub txn_timeout: Option<std::time::Duration>,
}

impl LocalSpec {
    /// A cluster of `nodes` servers under `root`, each with the disk model `disk` (or the
    /// real file system), sharing this machine's loopback.
    pub fn new(nodes: u32, root: PathBuf, disk: Option<DiskParams>, binary: PathBuf) -> LocalSpec {
        LocalSpec {
            nodes,
            root,
            disk,
            scheduler: SchedulerKind::Auto,
            binary,
            node_groups: None,
            netns: false,
            direct_io: false,
            secret: false,
            tls: false,
            metrics: false,
            txn_timeout: None,
        }
    }

    /// The cluster secret's file, if the cluster has one.
    pub fn secret_path(&self) -> Option<PathBuf> {
        (self.secret || self.netns || self.tls).then(|| self.root.join("secret"))
    }

    /// Where the cluster's CA and certificates are, if it has TLS.
    pub fn tls_dir(&self) -> Option<PathBuf> {
        self.tls.then(|| self.root.join("tls"))
    }

    fn serve_args(&self, node: u32, listen: &str) -> Vec<String> {
        let mut args = vec![
            "serve".to_string(),
            "--node".into(),
            node.to_string(),
            "--data-dir".into(),
            self.root.join(format!("node-{node}")).join("data").display().to_string(),
            "--listen".into(),
            listen.to_string(),
            "--scheduler".into(),
            self.scheduler.to_string(),
        ];
        match self.disk {
            Some(d) => args.extend([
                "--disk-rate".into(),
                format!("{}B/s", d.rate_bytes_per_sec.round() as u64),
                "--seek".into(),
                format!("{}us", d.seek.as_micros()),
                "--queue-depth".into(),
                d.queue_depth.to_string(),
            ]),
            None => args.extend(["--disk-rate".into(), "off".into()]),
        }
        if self.direct_io {
            args.push("--direct-io".into());
        }
        if let Some(t) = self.txn_timeout {
            args.extend(["--txn-timeout".into(), format!("{}ms", t.as_millis())]);
        }
        if self.metrics {
            let host = listen.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h);
            args.extend(["--metrics-listen".into(), format!("{host}:0")]);
        }
        if let Some(s) = self.secret_path() {
            args.extend(["--secret-file".into(), s.display().to_string()]);
        }
        if let Some(dir) = self.tls_dir() {
            let (cert, key) = ganges_net::tls::node_files(&dir, node);
            for (flag, path) in [("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", dir.join("ca.pem"))] {
                args.extend([flag.to_string(), path.display().to_string()]);
            }
        }
        if let Some(n) = &self.node_groups {
            args.extend([
                "--node-cgroup".into(),
                crate::stress::node_group(&n.cgroup_parent, node),
                "--node-memory".into(),
                format!("{}B", n.memory_bytes),
            ]);
            if let Some(rate) = n.link_bytes_per_sec {
                args.extend(["--net-rate".into(), format!("{}B/s", rate.round() as u64), "--model-link".into()]);
            }
        }
        args
    }

    pub fn log_path(&self, node: u32) -> PathBuf {
        self.root.join(format!("node-{node}")).join("server.log")
    }
}

/// The line a server prints on stdout once it listens.
pub fn ready_line(node: NodeId, addr: SocketAddr) -> String {
    format!("ganges-serve ready {} {addr}", node.0)
}

fn parse_ready(line: &str) -> Option<(u32, SocketAddr)> {
    let rest = line.trim().strip_prefix("ganges-serve ready ")?;
    let (node, addr) = rest.split_once(' ')?;
    Some((node.parse().ok()?, addr.parse().ok()?))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A running local cluster. Dropping it stops every server (and removes its network).
#[derive(Debug)]
pub struct LocalCluster {
    spec: LocalSpec,
    children: Vec<Option<Child>>,
    cluster: ClusterFile,
    /// The namespaces' bridge (`--netns`); dropped after the servers stop.
    network: Option<Network>,
}

impl LocalCluster {
    pub fn start(spec: &LocalSpec) -> HarnessResult<LocalCluster> {
        if spec.nodes == 0 {
            return Err(HarnessError::Spec("a cluster needs at least one node (--nodes 1 or more)".into()));
        }
        std::fs::create_dir_all(&spec.root)?;
        if let Some(path) = spec.secret_path()
            && !path.exists()
        {
            ganges_net::Secret::generate(&path).map_err(|e| HarnessError::Security(e.to_string()))?;
        }
        let network = if spec.netns { Some(Network::create(spec.nodes, std::process::id())?) } else { None };
        if let Some(dir) = spec.tls_dir() {
            // Certificates for the servers' hosts: their namespace addresses, else loopback.
            let hosts: Vec<String> = match &network {
                Some(net) => net.hosts.iter().map(|h| h.ip.to_string()).collect(),
                None => vec!["127.0.0.1".to_string(); spec.nodes as usize],
            };
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            ganges_net::tls::generate(&dir, &hosts).map_err(|e| HarnessError::Security(e.to_string()))?;
        }
        // Owned from here on, so an early return below stops the servers already started.
        let empty = ClusterFile::new(vec![ServerEntry::new(NodeId(0), "127.0.0.1:0")])?;
        let mut cluster = LocalCluster { spec: spec.clone(), children: vec![], cluster: empty, network };
        let mut outs = Vec::new();
        for node in 0..spec.nodes {
            let listen = match &cluster.network {
                Some(net) => net.hosts[node as usize].addr(),
                None => "127.0.0.1:0".to_string(),
            };
            let (child, out) = cluster.spawn_server(node, &listen, false, &[])?;
            outs.push(out);
            cluster.children.push(Some(child));
        }
        let mut servers = Vec::new();
        let deadline = Instant::now() + READY_TIMEOUT;
        for (node, out) in outs.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            match ganges_server::sys::first_line(out, left).as_deref().and_then(parse_ready) {
                Some((n, addr)) if n == node as u32 => servers.push(ServerEntry::new(NodeId(n), addr.to_string())),
                _ => {
                    let log = spec.log_path(node as u32);
                    return Err(HarnessError::Start(format!(
                        "node {node} did not start; the end of {}:\n{}",
                        log.display(),
                        tail(&log, 10)
                    )));
                }
            }
        }
        if let Some(net) = &cluster.network {
            net.release_names();
        }
        let mut file = ClusterFile::new(servers)?;
        file.path = spec.root.join("cluster.toml");
        file.security.secret_file = spec.secret_path();
        file.tls = spec
            .tls_dir()
            .map(|dir| ganges_client::cluster::TlsSection { ca: dir.join("ca.pem"), cert_dir: Some(dir) });
        tell_peers(&file)?;
        cluster.cluster = file;
        Ok(cluster)
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.cluster
    }

    pub fn spec(&self) -> &LocalSpec {
        &self.spec
    }

    /// Start server `node` listening on `listen` (in its namespace, with `netns`); `again`:
    /// a restart, whose log follows the one before it.
    fn spawn_server(
        &self,
        node: u32,
        listen: &str,
        again: bool,
        env: &[(&str, &str)],
    ) -> HarnessResult<(Child, std::process::ChildStdout)> {
        let spec = &self.spec;
        let log_path = spec.log_path(node);
        std::fs::create_dir_all(log_path.parent().expect("has a parent"))?;
        let log =
            std::fs::OpenOptions::new().create(true).write(true).append(again).truncate(!again).open(&log_path)?;
        let mut cmd = match &self.network {
            // nsenter enters the network namespace only and then runs the server in its
            // own process, so the server keeps the machine's view of cgroups and files.
            Some(net) => {
                let host = &net.hosts[node as usize];
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", host.netns_path()))
                    .arg("--")
                    .arg(&spec.binary)
                    .args(spec.serve_args(node, listen));
                c
            }
            None => {
                let mut c = Command::new(&spec.binary);
                c.args(spec.serve_args(node, listen));
                c
            }
        };
        cmd.envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
        sys::tie_to_parent(&mut cmd, false);
        let mut child = cmd.spawn().map_err(HarnessError::io(format!("starting {}", spec.binary.display())))?;
        let out = child.stdout.take().expect("piped");
        Ok((child, out))
    }

    /// Start server `node` again on its data directory and address, as after a crash
    /// (stopping it first if it still runs), and tell every server where the others are.
    /// The server cleans its staging leftovers as it starts.
    pub fn restart(&mut self, node: NodeId) -> HarnessResult<()> {
        self.restart_with_env(node, &[])
    }

    /// `restart`, with more environment for the new process (a test's fail points,
    /// `GANGES_FAIL_AT`).
    pub fn restart_with_env(&mut self, node: NodeId, env: &[(&str, &str)]) -> HarnessResult<()> {
        let addr = self.cluster.server(node).map_err(|e| HarnessError::Spec(e.to_string()))?.addr.clone();
        if let Some(Some(child)) = self.children.get_mut(node.index()) {
            stop_child(child);
        }
        let (child, out) = self.spawn_server(node.0, &addr, true, env)?;
        self.children[node.index()] = Some(child);
        match ganges_server::sys::first_line(out, READY_TIMEOUT).as_deref().and_then(parse_ready) {
            Some((n, at)) if n == node.0 && at.to_string() == addr => {}
            other => {
                let log = self.spec.log_path(node.0);
                return Err(HarnessError::Start(format!(
                    "{node} did not start again on {addr} (said {other:?}); the end of {}:\n{}",
                    log.display(),
                    tail(&log, 10)
                )));
            }
        }
        tell_peers(&self.cluster)
    }

    /// The process id of a running server.
    pub fn pid(&self, node: NodeId) -> Option<u32> {
        self.children.get(node.index()).and_then(|c| c.as_ref()).map(|c| c.id())
    }

    /// Kill one server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self, node: NodeId) {
        if let Some(Some(child)) = self.children.get_mut(node.index()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(c) = self.children.get_mut(node.index()) {
            *c = None;
        }
    }

    /// Servers that exited on their own (crashed), with their exit status.
    pub fn exited(&mut self) -> Vec<(NodeId, String)> {
        let mut out = vec![];
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(child) = c
                && let Ok(Some(status)) = child.try_wait()
            {
                out.push((NodeId(i as u32), status.to_string()));
                *c = None;
            }
        }
        out
    }

    /// Stop every server: SIGTERM, a grace period, then SIGKILL.
    pub fn stop(&mut self) {
        for child in self.children.iter().flatten() {
            sys::signal(child.id(), sys::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        for c in self.children.iter_mut() {
            if let Some(child) = c.as_mut() {
                wait_or_kill(child, deadline);
            }
            *c = None;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
        // The servers are gone, and their namespaces with them; then the bridge.
        self.network.take();
    }
}

/// Tell every server where the others are (request handoff needs it), through the
/// cluster's own transport (its secret, if it has one).
fn tell_peers(file: &ClusterFile) -> HarnessResult<()> {
    let peers = file.peers();
    let nodes: Vec<NodeId> = file.servers.iter().map(|s| s.node).collect();
    let req = ControlRequest::SetPeers { peers };
    for (node, r) in blocking_control_all(file, &nodes, req)? {
        r.map_err(|e| HarnessError::Start(format!("telling {node} its peers: {e}")))?;
    }
    Ok(())
}

/// One control request to each of `nodes`, from synchronous code (or from inside a runtime:
/// it runs on a thread of its own with a runtime of its own).
pub fn blocking_control_all(
    file: &ClusterFile,
    nodes: &[NodeId],
    req: ControlRequest,
) -> HarnessResult<Vec<(NodeId, ganges_client::Result<ControlReply>)>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let client = Client::connect(file.clone()).await?;
                Ok(client.control_all(nodes, &req).await)
            })
        })
        .join()
        .expect("the control thread does not panic")
    })
}

/// SIGTERM, a grace period, then SIGKILL.
fn stop_child(child: &mut Child) {
    sys::signal(child.id(), sys::SIGTERM);
    wait_or_kill(child, Instant::now() + STOP_GRACE);
}

/// Wait for `child` to exit until `deadline`, then kill it.
fn wait_or_kill(child: &mut Child, deadline: Instant) {
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The supervisor of `ganges local up`: start the servers, publish the cluster file, wait
/// for SIGTERM or SIGINT, stop the servers, remove the cluster file.
pub fn supervise(spec: &LocalSpec, cluster_path: &Path, foreground: bool) -> HarnessResult<()> {
    let mut cluster = LocalCluster::start(spec)?;
    let mut file = cluster.cluster().clone();
    file.local = Some(LocalInfo {
        root: spec.root.clone(),
        supervisor_pid: std::process::id(),
        disk_rate_bytes_per_sec: spec.disk.map(|d| d.rate_bytes_per_sec),
        seek_ms: spec.disk.map_or(0.0, |d| d.seek.as_secs_f64() * 1e3),
        netns: spec.netns,
        direct_io: spec.direct_io,
    });
    file.save(cluster_path)?;
    if foreground {
        println!("{} servers up; cluster file {} (Ctrl-C stops them)", spec.nodes, cluster_path.display());
    } else {
        println!("ganges-local ready");
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut stops = sys::StopSignals::new().expect("signal handler");
        let mut usr1 = signal(SignalKind::user_defined1()).expect("signal handler");
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                () = stops.recv() => break,
                _ = usr1.recv() => restart_requested(&mut cluster, &spec.root),
                _ = tick.tick() => {
                    for (node, status) in cluster.exited() {
                        eprintln!("server {node} exited ({status}); see {}", spec.log_path(node.0).display());
                        record_exit(&spec.root, node, Some(&status));
                    }
                }
            }
        }
    });
    let _ = std::fs::remove_file(cluster_path);
    cluster.stop();
    Ok(())
}

/// Servers of a local cluster that exited on their own, with how (kept by the supervisor in
/// `ROOT/exited`, a line `NODE STATUS` each, until they are restarted).
pub fn exited_servers(root: &Path) -> std::collections::BTreeMap<u32, String> {
    let text = std::fs::read_to_string(root.join(EXITED)).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, status)| Some((n.parse().ok()?, status.to_string())))
        .collect()
}

fn record_exit(root: &Path, node: NodeId, status: Option<&str>) {
    let mut all = exited_servers(root);
    match status {
        Some(s) => all.insert(node.0, s.replace('\n', " ")),
        None => all.remove(&node.0),
    };
    let text: String = all.iter().map(|(n, s)| format!("{n} {s}\n")).collect();
    let _ = std::fs::write(root.join(EXITED), text);
}

/// In a local cluster's root: what the supervisor knows of servers that exited.
const EXITED: &str = "exited";

fn restart_request(root: &Path, node: u32) -> PathBuf {
    root.join(format!("restart-{node}.request"))
}

fn restart_result(root: &Path, node: u32) -> PathBuf {
    root.join(format!("restart-{node}.result"))
}

/// The supervisor's side of `local restart`: every requested node started again, and the
/// outcome written beside the request.
fn restart_requested(cluster: &mut LocalCluster, root: &Path) {
    for node in 0..cluster.spec.nodes {
        if std::fs::remove_file(restart_request(root, node)).is_err() {
            continue;
        }
        let outcome = match cluster.restart(NodeId(node)) {
            Ok(()) => {
                record_exit(root, NodeId(node), None);
                eprintln!("server node{node} restarted");
                "ok".to_string()
            }
            Err(e) => format!("error: {e}"),
        };
        let _ = std::fs::write(restart_result(root, node), outcome);
    }
}

/// Ask the supervisor of the local cluster at `root` (process `supervisor`) to start server
/// `node` again, and wait for it.
pub fn request_restart(root: &Path, supervisor: u32, node: NodeId) -> HarnessResult<()> {
    let result = restart_result(root, node.0);
    let _ = std::fs::remove_file(&result);
    std::fs::write(restart_request(root, node.0), b"")?;
    if !sys::signal(supervisor, sys::SIGUSR1) {
        let _ = std::fs::remove_file(restart_request(root, node.0));
        return Err(HarnessError::Start(format!(
            "the local cluster's supervisor (pid {supervisor}) is not running; start the cluster with `ganges local up`"
        )));
    }
    let deadline = Instant::now() + READY_TIMEOUT + STOP_GRACE + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&result) {
            let _ = std::fs::remove_file(&result);
            return match text.strip_prefix("error: ") {
                None => Ok(()),
                Some(why) => Err(HarnessError::Start(why.to_string())),
            };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(HarnessError::Start(format!(
        "the supervisor did not restart {node} in time; see {}",
        root.join("supervisor.log").display()
    )))
}

/// Start a detached supervisor for `spec` and wait until its cluster is ready.
pub fn up_detached(spec: &LocalSpec, supervise_args: &[String]) -> HarnessResult<u32> {
    std::fs::create_dir_all(&spec.root)?;
    let log_path = spec.root.join("supervisor.log");
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = Command::new(&spec.binary);
    cmd.args(supervise_args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    sys::tie_to_parent(&mut cmd, true);
    let mut child = cmd.spawn().map_err(HarnessError::io("starting the supervisor"))?;
    let out = child.stdout.take().expect("piped");
    match ganges_server::sys::first_line(out, READY_TIMEOUT + Duration::from_secs(5)) {
        Some(l) if l.trim() == "ganges-local ready" => Ok(child.id()),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(HarnessError::Start(format!(
                "the local cluster did not start; the end of {}:\n{}",
                log_path.display(),
                tail(&log_path, 15)
            )))
        }
    }
}

/// Stop the cluster whose supervisor `pid` is; waits until it is gone.
pub fn down(pid: u32) -> bool {
    if !sys::signal(pid, sys::SIGTERM) {
        return false;
    }
    let deadline = Instant::now() + STOP_GRACE * 3;
    while sys::alive(pid) {
        if Instant::now() >= deadline {
            sys::signal(pid, sys::SIGKILL);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_round_trip() {
        let l = ready_line(NodeId(3), "127.0.0.1:4567".parse().unwrap());
        assert_eq!(parse_ready(&l), Some((3, "127.0.0.1:4567".parse().unwrap())));
        assert_eq!(parse_ready("something else"), None);
    }
}
