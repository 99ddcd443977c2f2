//! `Client`: connections to every server of a cluster, opened at once and shared.

use crate::cluster::ClusterFile;
use crate::conn::{Connection, Registry};
use crate::error::{ClientError, Result};
use futures_util::future::join_all;
use ganges_core::ids::NodeId;
use ganges_net::local::LocalServer;
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::manifest::{DatasetName, Manifest};
use ganges_proto::msg::{ErrorCode, Message};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug)]
pub struct Client {
    cluster: ClusterFile,
    /// One per node; `None` where the server could not be reached at connect time.
    conns: Vec<Option<Arc<Connection>>>,
    /// Nodes a stream of this client has found down and said so (`first_seen_down`).
    said_down: Mutex<BTreeSet<NodeId>>,
    /// The server running in this process, if it is one of the cluster's (a part-time I/O
    /// node): frames for it go to it in memory.
    local: OnceLock<Arc<dyn LocalServer>>,
}

/// Where a frame for one server goes: over its connection, or straight to it when it runs in
/// this process.
#[derive(Clone, Copy, Debug)]
pub enum Route<'a> {
    Conn(&'a Arc<Connection>),
    Local(&'a Arc<dyn LocalServer>),
}

impl Route<'_> {
    /// One request and its reply.
    pub async fn call(&self, msg: Message) -> Result<Message> {
        match self {
            Route::Conn(c) => c.call(&msg).await,
            Route::Local(server) => Ok(server.call(msg).await),
        }
    }

    /// A control request, as `Connection::control` makes it.
    pub async fn control(&self, req: ControlRequest) -> Result<ControlReply> {
        let server = match self {
            Route::Conn(c) => return c.control(req).await,
            Route::Local(server) => server,
        };
        let (node, op, limit) = (NodeId(server.node()), req.op(), req.timeout());
        let reply = tokio::time::timeout(limit, server.call(Message::Control(req)))
            .await
            .map_err(|_| ClientError::Timeout { node, op, secs: limit.as_secs() })?;
        crate::conn::control_reply(node, reply)
    }
}

impl Client {
    /// Connect to every server of the cluster. Servers that cannot be reached are left out
    /// (reads fail over around them); if none can be reached, that is an error.
    pub async fn connect(cluster: ClusterFile) -> Result<Arc<Client>> {
        let (client, unreachable) = Client::open(cluster).await?;
        for e in unreachable {
            tracing::warn!(%e, "server unreachable");
        }
        if client.conns.iter().all(Option::is_none) {
            return Err(ClientError::NoServers {
                cluster: client.cluster.path.display().to_string(),
                tried: client.cluster.servers.len(),
            });
        }
        Ok(Arc::new(client))
    }

    /// Connect to every server of the cluster, or say which could not be reached (quietly:
    /// a process waiting for the other processes of its job tries again).
    pub async fn connect_every(cluster: ClusterFile) -> Result<std::result::Result<Arc<Client>, Vec<NodeId>>> {
        let (client, unreachable) = Client::open(cluster).await?;
        if unreachable.is_empty() {
            return Ok(Ok(Arc::new(client)));
        }
        Ok(Err((0..client.nodes())
            .map(NodeId)
            .filter(|n| !matches!(client.conns.get(n.index()), Some(Some(_))))
            .collect()))
    }

    /// A connection to every server that answers, and why the others did not.
    async fn open(cluster: ClusterFile) -> Result<(Client, Vec<ClientError>)> {
        // Random and non-zero: servers use it to find this client's connection when they take
        // over one of its requests from another server (GD-6).
        let client_id = rand::random::<u64>() | 1;
        let registry = Arc::new(Registry::default());
        let transport = cluster.transport()?;
        let attempts = cluster
            .servers
            .iter()
            .map(|s| Connection::connect(&transport, s.node, &s.addr, client_id, registry.clone()));
        let results = join_all(attempts).await;
        let mut conns = Vec::with_capacity(results.len());
        let mut unreachable = vec![];
        for r in results {
            match r {
                Ok(c) => conns.push(Some(c)),
                // A server that refuses us (a wrong secret, TLS required) will refuse every
                // retry too: say so now, instead of reading around it as if it were down.
                Err(e @ ClientError::Refused { .. }) => return Err(e),
                Err(e) => {
                    unreachable.push(e);
                    conns.push(None);
                }
            }
        }
        Ok((Client { cluster, conns, said_down: Mutex::default(), local: OnceLock::new() }, unreachable))
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.cluster
    }

    pub fn nodes(&self) -> u32 {
        self.cluster.nodes()
    }

    /// Tell the client that `server`, one of its cluster's, runs in this process (a part-time
    /// I/O node): a collective array write then hands that server this process's pieces in
    /// memory. Once per client.
    pub fn attach_local(&self, server: Arc<dyn LocalServer>) -> Result<()> {
        let node = NodeId(server.node());
        if node.0 >= self.nodes() {
            return Err(ClientError::Invalid(format!("{node} is not in the cluster file")));
        }
        self.local
            .set(server)
            .map_err(|_| ClientError::Invalid("this client already has a server in its process".into()))
    }

    /// The node of the server in this process, if there is one.
    pub fn local_node(&self) -> Option<NodeId> {
        self.local.get().map(|s| NodeId(s.node()))
    }

    /// Where frames for `node` go: to the server in this process if it is `node`, else over
    /// the connection, if it is up.
    pub fn route(&self, node: NodeId) -> Result<Route<'_>> {
        match self.local.get() {
            Some(server) if server.node() == node.0 && server.is_up() => Ok(Route::Local(server)),
            Some(server) if server.node() == node.0 => Err(ClientError::NodeDown { node }),
            _ => self.conn(node).map(Route::Conn),
        }
    }

    /// The connection to `node`, if it is up.
    pub fn conn(&self, node: NodeId) -> Result<&Arc<Connection>> {
        match self.conns.get(node.index()) {
            Some(Some(c)) if !c.is_closed() => Ok(c),
            Some(_) => Err(ClientError::NodeDown { node }),
            None => Err(ClientError::Invalid(format!("{node} is not in the cluster file"))),
        }
    }

    /// True the first time any stream of this client finds `node` down: a read over many
    /// fragments (every consumer of a bench, `dataset read`) says so once, not once a stream.
    pub fn first_seen_down(&self, node: NodeId) -> bool {
        self.said_down.lock().unwrap_or_else(|e| e.into_inner()).insert(node)
    }

    /// Whether every server's connection is up.
    pub fn is_whole(&self) -> bool {
        self.live_nodes().len() == self.nodes() as usize
    }

    /// This client, or one connected afresh to the same cluster if that reaches more servers
    /// (one that was down is back). Callers holding a client for long ask now and then.
    pub async fn reconnected(self: &Arc<Self>) -> Arc<Client> {
        if self.is_whole() {
            return self.clone();
        }
        match Client::connect(self.cluster.clone()).await {
            Ok(c) if c.live_nodes().len() > self.live_nodes().len() => {
                if let Some(local) = self.local.get() {
                    let _ = c.local.set(local.clone());
                }
                c
            }
            _ => self.clone(),
        }
    }

    /// Nodes whose connection is up.
    pub fn live_nodes(&self) -> Vec<NodeId> {
        (0..self.nodes()).map(NodeId).filter(|n| self.conn(*n).is_ok()).collect()
    }

    /// Require every server up (creating a dataset writes to all of them).
    pub fn require_all(&self) -> Result<()> {
        for n in 0..self.nodes() {
            self.conn(NodeId(n))?;
        }
        Ok(())
    }

    /// A control request to one node.
    pub async fn control(&self, node: NodeId, req: ControlRequest) -> Result<ControlReply> {
        self.route(node)?.control(req).await
    }

    /// The same control request to many nodes at once; results in the order of `nodes`.
    pub async fn control_all(&self, nodes: &[NodeId], req: &ControlRequest) -> Vec<(NodeId, Result<ControlReply>)> {
        let futs = nodes.iter().map(|&n| {
            let req = req.clone();
            async move { (n, self.control(n, req).await) }
        });
        join_all(futs).await
    }

    /// A dataset's manifest, from any live node that holds a copy.
    pub async fn manifest(&self, name: &DatasetName) -> Result<Manifest> {
        let req = ControlRequest::GetManifest { name: name.clone() };
        let mut other: Option<ClientError> = None;
        for (_, r) in self.control_all(&self.live_nodes(), &req).await {
            match r {
                Ok(ControlReply::Manifest { manifest }) => {
                    if manifest.layout.nodes() != self.nodes() {
                        return Err(ClientError::Invalid(format!(
                            "`{name}` was written for a cluster of {} nodes, but {} lists {}; \
                             use the cluster it was written on, or remove it with `ganges dataset rm {name}`",
                            manifest.layout.nodes(),
                            self.cluster.path.display(),
                            self.nodes()
                        )));
                    }
                    return Ok(*manifest);
                }
                Ok(_) => {}
                Err(e) if e.code() == Some(ErrorCode::UnknownDataset) => {}
                Err(e) => other = Some(e),
            }
        }
        Err(other.unwrap_or_else(|| ClientError::UnknownDataset(name.clone())))
    }
}
