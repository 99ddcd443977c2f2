//! Part-time I/O nodes (Panda, "Parallel Input/Output with Heterogeneous Disks", §2): a
//! compute process that also serves its own disk. [`PartTime::start`] runs node `K` of a
//! cluster file inside the calling process (its address, data directory and secret from the
//! file) and connects a client to the whole cluster once every node answers. That client
//! hands its own server frames in memory, so in a collective array write the pieces of this
//! process's chunk that its own server writes never touch a socket.
//!
//! Under an MPI launcher every rank starts one (`PartTime::start(file, rank, ..)`) and then
//! writes its chunk with `ganges_client::array::write_rank`; ranks beyond the file's nodes
//! are plain clients.

use crate::error::{HarnessError, HarnessResult};
use ganges_client::Client;
use ganges_client::cluster::{ClusterFile, ServerEntry};
use ganges_core::ids::NodeId;
use ganges_server::{Embedded, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a part-time node waits for the cluster's other nodes to answer: the processes of
/// one job start at about the same time, not at once.
pub const GATHER_WAIT: Duration = Duration::from_secs(60);

/// This process's server and its client of the whole cluster. Dropping it stops the server.
#[derive(Debug)]
pub struct PartTime {
    server: Embedded,
    client: Arc<Client>,
    node: NodeId,
}

impl PartTime {
    /// Serve node `node` of `file` in this process, with the server's configuration passed
    /// through `configure` (given the file's data directory, peers and secret), and connect
    /// once every node of the file answers (at most `wait`).
    pub async fn start(
        file: ClusterFile,
        node: NodeId,
        data_dir: Option<PathBuf>,
        wait: Duration,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> HarnessResult<PartTime> {
        let entry = file.server(node)?;
        let listen = entry.listen.clone().unwrap_or_else(|| entry.addr.clone());
        let listener = tokio::net::TcpListener::bind(listen.as_str())
            .await
            .map_err(HarnessError::io(format!("{node} listening on {listen}")))?;
        PartTime::start_on(listener, file, node, data_dir, wait, configure).await
    }

    /// As [`PartTime::start`], serving `listener` (bound already to the file's address).
    async fn start_on(
        listener: tokio::net::TcpListener,
        file: ClusterFile,
        node: NodeId,
        data_dir: Option<PathBuf>,
        wait: Duration,
        configure: impl FnOnce(ServerConfig) -> ServerConfig,
    ) -> HarnessResult<PartTime> {
        let data_dir = data_dir.or(file.server(node)?.data_dir.clone()).ok_or_else(|| {
            HarnessError::Spec(format!("give a data directory, or a cluster file whose {node} has a data_dir"))
        })?;
        let config = configure(ServerConfig {
            peers: file.peers().into_iter().filter(|p| p.node != node).collect(),
            transport: file.server_transport(node)?,
            ..ServerConfig::new(node, data_dir)
        });
        let server =
            Embedded::start(config, listener).await.map_err(|e| HarnessError::Start(format!("{node}: {e}")))?;
        let client = connect_all(&file, wait).await?;
        client.attach_local(server.local())?;
        Ok(PartTime { server, client, node })
    }

    /// The client of the whole cluster whose frames for this process's server stay in memory.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Frames and piece bytes this process's client handed its own server in memory so far.
    pub fn local_traffic(&self) -> (u64, u64) {
        self.server.local_traffic()
    }

    /// Stop serving.
    pub async fn stop(self) -> HarnessResult<()> {
        let node = self.node;
        self.server.stop().await.map_err(|e| HarnessError::Start(format!("{node} stopped with: {e}")))
    }
}

/// A job of `nodes` part-time I/O nodes in this process, on loopback ports of their own,
/// their data under `dir/node-K`, each server's configuration passed through `configure`: what
/// the bench and the tests run, where a job's ranks would each start one.
pub async fn local_job(
    nodes: u32,
    dir: &Path,
    configure: impl Fn(ServerConfig) -> ServerConfig,
) -> HarnessResult<Vec<PartTime>> {
    let mut listeners = vec![];
    let mut entries = vec![];
    for k in 0..nodes {
        let l =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(HarnessError::io("binding a loopback port"))?;
        let mut e = ServerEntry::new(NodeId(k), l.local_addr()?.to_string());
        e.data_dir = Some(dir.join(format!("node-{k}")));
        entries.push(e);
        listeners.push(l);
    }
    let file = ClusterFile::new(entries)?;
    let starts = listeners
        .into_iter()
        .enumerate()
        .map(|(k, l)| PartTime::start_on(l, file.clone(), NodeId(k as u32), None, GATHER_WAIT, &configure));
    futures_util::future::join_all(starts).await.into_iter().collect()
}

/// A client of every node of `file`, trying again until all answer or `wait` has passed.
pub async fn connect_all(file: &ClusterFile, wait: Duration) -> HarnessResult<Arc<Client>> {
    let began = Instant::now();
    loop {
        let missing = match Client::connect_every(file.clone()).await? {
            Ok(client) => return Ok(client),
            Err(missing) => missing,
        };
        if began.elapsed() >= wait {
            let missing: Vec<String> =
                missing.iter().map(|n| format!("{n} at {}", file.servers[n.index()].addr)).collect();
            return Err(HarnessError::Start(format!(
                "not every node of the cluster answered within {}s: {} did not (are the other processes \
                 of the job running?)",
                wait.as_secs(),
                missing.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
