//! Clusters for tests, benches and the command line.
//!
//! - [`local`]: a local cluster of `ganges serve` child processes (optionally each in a network
//!   namespace of its own: [`netns`]), and the `local up` supervisor.
//! - [`inproc`]: servers in this process (`ganges_server::run` on loopback), for the server's
//!   and client's own tests.
//! - [`parttime`]: a part-time I/O node: a server in the calling process, and a client that
//!   reaches it in memory (Panda's part-time I/O nodes).
//! - [`stress`]: nodes as cgroups, and the loads a stressed bench puts on them.
//! - [`sys`]: the process-management calls the harness makes.

pub mod error;
pub mod inproc;
pub mod local;
pub mod netns;
pub mod parttime;
pub mod stress;
pub mod sys;

pub use error::{HarnessError, HarnessResult};
pub use inproc::InProcessCluster;
pub use local::{LocalCluster, LocalSpec};
pub use parttime::PartTime;
