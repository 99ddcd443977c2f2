//! River's dataflow (river §2.2, §7; FL-1, FL-2): a program is *stages* of module
//! instances connected by *edges*, and record batches flow along them.
//!
//! - [`records`]: fixed-size records with a key at the front (the sort-benchmark format,
//!   100 and 10 bytes) in [`Batch`]es: bytes, never a record at a time; a module reads
//!   records as slices of the batch it got.
//! - [`flow`]: a [`Flow`] of stages, each `n` instances of a [`Module`] (or of a source),
//!   run to completion with back-pressure, reporting each stage's records, bytes and time.
//! - An edge between two stages is one word ([`Edge`]): a local channel (instance i to
//!   instance i), a static partition of the records (by key hash, or by key range), or a
//!   distributed queue (river §3): each batch to a consumer chosen at random among those
//!   where its producer has a credit left, a credit coming back when the consumer has
//!   *taken* the batch, and each consumer serving the producer furthest behind first
//!   (DQ-2). The choice is ganges-core's [`DqRouter`](ganges_core::dq::DqRouter), the same
//!   object DQ writes and the simulator drive, and the consumer's order is ganges-core's
//!   furthest-behind scheduler: not a second copy of either.
//!
//! A static partition ties each batch to one consumer, so a slow consumer slows its whole
//! flow; a distributed queue sends a slow consumer less (river Figure 9). Changing one into
//! the other is the point of flexibility River is built on.

pub mod apps;
pub mod flow;
pub mod mesh;
pub mod records;
pub mod storage;

pub use flow::{Edge, Flow, FlowError, FlowReport, InstanceReport, Module, Out, StageReport};
pub use mesh::Mesh;
pub use records::{Batch, RecordLayout, Summary};
