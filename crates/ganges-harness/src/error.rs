//! The harness's errors: each says what failed and what to do about it.

/// Why a local cluster, a network of namespaces or a node stress could not be made.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// What was asked for cannot be made (no nodes, too many for a subnet, a bad stress).
    #[error("{0}")]
    Spec(String),
    /// A server, the supervisor or a stress did not start or answer; the message quotes the
    /// end of its log where there is one.
    #[error("{0}")]
    Start(String),
    /// What the machine lacks or refused: root, network namespaces, cgroups, `ip`, `tc`.
    #[error("{0}")]
    System(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The cluster's secret or certificates could not be made.
    #[error("{0}")]
    Security(String),
    /// A node's cgroups could not be joined or read.
    #[error(transparent)]
    Node(#[from] ganges_server::node::NodeError),
    #[error(transparent)]
    Os(#[from] std::io::Error),
    #[error(transparent)]
    Client(#[from] ganges_client::ClientError),
}

impl HarnessError {
    /// An I/O error with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
        let what = what.into();
        move |source| HarnessError::Io { what, source }
    }
}

pub type HarnessResult<T> = std::result::Result<T, HarnessError>;
