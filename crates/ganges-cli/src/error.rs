//! The command line's error: one line that says what went wrong and what to do, and the
//! process's exit code for it.

use ganges_bench::BenchError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Failed(String),
    /// A write stopped by Ctrl-C, SIGTERM or SIGHUP, after it removed its staging.
    #[error("interrupted; the write was abandoned and its staging removed, nothing of it is visible")]
    WriteInterrupted,
    #[error(transparent)]
    Bench(#[from] BenchError),
    #[error(transparent)]
    Harness(#[from] ganges_harness::HarnessError),
    #[error(transparent)]
    Client(#[from] ganges_client::ClientError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Shape(#[from] ganges_core::shape::ShapeError),
    #[error(transparent)]
    Layout(#[from] ganges_core::layout::LayoutError),
    #[error(transparent)]
    Ideal(#[from] ganges_core::ideal::IdealError),
    #[error(transparent)]
    Fault(#[from] ganges_core::disk::FaultError),
    #[error(transparent)]
    Name(#[from] ganges_proto::manifest::BadName),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Node(#[from] ganges_server::node::NodeError),
    #[error(transparent)]
    App(#[from] ganges_flow::apps::AppError),
    #[error(transparent)]
    Mesh(#[from] ganges_flow::mesh::MeshError),
    #[error(transparent)]
    Parse(#[from] ganges_core::parse::ParseError),
}

impl CliError {
    /// 130 for a command stopped by Ctrl-C (as shells report SIGINT), else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::WriteInterrupted | CliError::Bench(BenchError::Interrupted) => 130,
            _ => 1,
        }
    }
}

pub type CliResult<T> = Result<T, CliError>;

pub fn fail<T>(msg: impl Into<String>) -> CliResult<T> {
    Err(CliError::Failed(msg.into()))
}
