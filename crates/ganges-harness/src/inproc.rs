//! Servers in this process: `ganges_server::run` on loopback listeners, each with a data
//! directory of its own under one temporary folder. No binary and no child processes, so the
//! server's and the client's own tests can start a cluster in a line, as mini-redis's tests
//! start its server.

use crate::error::{HarnessError, HarnessResult};
use ganges_client::Client;
use ganges_client::cluster::{ClusterFile, ServerEntry};
use ganges_core::disk::DiskParams;
use ganges_core::ids::NodeId;
use ganges_proto::control::ControlRequest;
use ganges_server::ServerConfig;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A cluster of servers running as tasks of the caller's runtime. Dropping it stops them.
#[derive(Debug)]
pub struct InProcessCluster {
    file: ClusterFile,
    dir: tempfile::TempDir,
    servers: Vec<Option<Server>>,
}

#[derive(Debug)]
struct Server {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ganges_server::ServeError>>,
}

impl InProcessCluster {
    /// `nodes` servers with the disk model `disk` (`None`: the file system as it is), each told
    /// where the others are.
    pub async fn start(nodes: u32, disk: Option<DiskParams>) -> HarnessResult<InProcessCluster> {
        Self::start_with(nodes, |mut c| {
            c.disk = disk;
            c
        })
        .await
    }

    /// As [`InProcessCluster::start`], with each server's configuration passed through
    /// `configure` (given the default for its node and data directory).
    pub async fn start_with(
        nodes: u32,
        configure: impl Fn(ServerConfig) -> ServerConfig,
    ) -> HarnessResult<InProcessCluster> {
        if nodes == 0 {
            return Err(HarnessError::Spec("a cluster needs at least one node".into()));
        }
        let dir = tempfile::tempdir().map_err(HarnessError::io("making a folder for the servers' data"))?;
        let mut entries = Vec::new();
        let mut servers = Vec::new();
        for n in 0..nodes {
            let data = dir.path().join(format!("node-{n}"));
            let config = configure(ServerConfig::new(NodeId(n), data));
            let listener =
                TcpListener::bind("127.0.0.1:0").await.map_err(HarnessError::io("binding a loopback port"))?;
            let addr = listener.local_addr()?.to_string();
            let (stop, stopped) = oneshot::channel::<()>();
            let task = tokio::spawn(ganges_server::run(config, listener, async {
                let _ = stopped.await;
            }));
            entries.push(ServerEntry::new(NodeId(n), addr));
            servers.push(Some(Server { stop, task }));
        }
        let file = ClusterFile::new(entries)?;
        let cluster = InProcessCluster { file, dir, servers };
        let peers = cluster.file.peers();
        let client = cluster.client().await?;
        let nodes: Vec<NodeId> = cluster.file.servers.iter().map(|s| s.node).collect();
        for (node, r) in client.control_all(&nodes, &ControlRequest::SetPeers { peers }).await {
            r.map_err(|e| HarnessError::Start(format!("telling {node} its peers: {e}")))?;
        }
        Ok(cluster)
    }

    /// The cluster file a client connects with.
    pub fn cluster(&self) -> &ClusterFile {
        &self.file
    }

    /// A new client of this cluster.
    pub async fn client(&self) -> HarnessResult<Arc<Client>> {
        Ok(Client::connect(self.file.clone()).await?)
    }

    /// Where server `node` keeps its data.
    pub fn data_dir(&self, node: u32) -> std::path::PathBuf {
        self.dir.path().join(format!("node-{node}"))
    }

    /// Stop server `node` as a crash would look to its clients: its listener and every
    /// connection close at once. Returns what its `run` returned (`None`: no such server
    /// running).
    pub async fn stop(&mut self, node: u32) -> Option<Result<(), ganges_server::ServeError>> {
        let server = self.servers.get_mut(node as usize)?.take()?;
        let _ = server.stop.send(());
        Some(server.task.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())))
    }
}

impl Drop for InProcessCluster {
    fn drop(&mut self) {
        for s in self.servers.iter_mut().filter_map(Option::take) {
            let _ = s.stop.send(());
            s.task.abort();
        }
    }
}
