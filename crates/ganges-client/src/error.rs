//! The client's error type: one variant per thing a caller can act on.

use ganges_core::digest::Digest;
use ganges_core::ids::NodeId;
use ganges_proto::manifest::DatasetName;
use ganges_proto::msg::WireError;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no server of cluster file {cluster} is reachable (tried {tried}); start a local cluster \
         with `ganges local up`, or pass --cluster FILE"
    )]
    NoServers { cluster: String, tried: usize },
    #[error("{node} at {addr} is unreachable: {why}")]
    Connect { node: NodeId, addr: String, why: String },
    /// The server refused the connection with a typed error (a wrong or missing cluster
    /// secret, TLS required, too many failed handshakes).
    #[error("{node} at {addr} refused the connection: {err}")]
    Refused { node: NodeId, addr: String, err: WireError },
    #[error("{node} is down (its connection is closed)")]
    NodeDown { node: NodeId },
    #[error("{node} did not answer `{op}` within {secs} s; it may be hung")]
    Timeout { node: NodeId, op: &'static str, secs: u64 },
    #[error("{node}: {err}")]
    Server { node: NodeId, err: WireError },
    #[error("no dataset `{0}` in this cluster (list them with `ganges dataset ls`)")]
    UnknownDataset(DatasetName),
    #[error("{node}: protocol error: {why}")]
    Protocol { node: NodeId, why: String },
    #[error(transparent)]
    Route(#[from] ganges_core::route::RouteError),
    #[error(transparent)]
    Shape(#[from] ganges_core::shape::ShapeError),
    #[error(transparent)]
    Layout(#[from] ganges_core::layout::LayoutError),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("cluster file {path}: {why}")]
    Cluster { path: String, why: String },
    #[error("`{name}`: delivered digest {got} differs from the dataset's {expected}")]
    DigestMismatch { name: DatasetName, expected: Digest, got: Digest },
    /// The coordinator of a write did not answer its commit: the write is committed if and
    /// only if the coordinator committed it, which the servers settle among themselves by
    /// the commit rule once it is back.
    #[error(
        "`{name}`: {node} did not answer its commit ({why}); the write is committed if {node} committed it, \
         and its servers finish or roll it back by themselves once {node} is back: see `ganges dataset info {name}`"
    )]
    CommitInDoubt { name: DatasetName, node: NodeId, why: String },
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClientError {
        let what = what.into();
        move |err| ClientError::Io { what, err }
    }

    /// The server did not answer (down, hung or unreachable), as opposed to answering with
    /// an error: what it did with the request is unknown.
    pub fn unanswered(&self) -> bool {
        matches!(self, ClientError::NodeDown { .. } | ClientError::Timeout { .. } | ClientError::Connect { .. })
    }

    /// The server's error code, if a server answered with an error.
    pub fn code(&self) -> Option<ganges_proto::msg::ErrorCode> {
        match self {
            ClientError::Server { err, .. } | ClientError::Refused { err, .. } => Some(err.code),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;
