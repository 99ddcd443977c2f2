//! ganges-client: everything a program needs to use a ganges cluster.
//!
//! Modules:
//! - [`cluster`]: the cluster file (which servers exist, where).
//! - [`conn`]: one multiplexed connection per server, many requests in flight.
//! - [`client`]: `Client`, the connections to a whole cluster.
//! - [`scan`]: `ReadStream`, one consumer's unordered read of its partition, driven by the
//!   read policies of ganges-core.
//! - [`stream`]: the ordered reader (bounded reorder buffer, reads of any size), the async
//!   reader (submit many reads, reap completions) and a blocking `read(offset, len)`.
//! - [`write`]: many writers at once (`write`) and replica completion (`complete`);
//!   `write::stream::WriteStream`, a writer whose blocks go to the copy a write policy picks
//!   (GW-1), and `write::dq::DqWriter`, a writer in front of a distributed queue of disks
//!   (DQ-1).
//! - [`array`]: N-dimensional arrays (Panda): collective, server-directed writes with
//!   round-robin, static or dynamic allocation, and reads into any memory layout.
//! - [`dataset`]: create, put, get, list, info, verify, remove.
//! - [`repair`]: scrub (check every copy, rewrite bad blocks from good ones) and heal on read.
//! - [`metrics`]: this process's reads and writes, for Prometheus.
//! - [`error`]: the error type, `ClientError`.
//!
//! ```no_run
//! # async fn demo() -> ganges_client::error::Result<()> {
//! use ganges_client::{cluster::{ClusterFile, default_cluster_path}, client::Client, scan};
//! let client = Client::connect(ClusterFile::load(&default_cluster_path())?).await?;
//! let manifest = std::sync::Arc::new(client.manifest(&"events".parse().unwrap()).await?);
//! for mut consumer in scan::open_scan(&client, &manifest, None, scan::ReadOptions::default())? {
//!     while let Some(block) = consumer.next().await? {
//!         println!("{} bytes at {}", block.data.len(), block.dataset_offset);
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod array;
pub mod client;
pub mod cluster;
pub mod conn;
pub mod dataset;
pub mod error;
pub mod fault;
pub mod metrics;
pub mod repair;
pub mod scan;
pub mod stream;
pub mod write;

pub use client::Client;
pub use error::{ClientError, Result};
