//! The `ganges` command, as a library so integration tests can start local clusters and run
//! benchmarks the way the binary does.
//!
//! Modules:
//! - [`local`]: local clusters of `ganges serve` child processes (and the `local up`
//!   supervisor).
//! - [`bench`]: `ganges bench scan` and the demo: policies against the two ideals.
//! - [`bench_write`]: `ganges bench write`: write policies against the same ideals, and
//!   replica completion.
//! - [`commands`]: what the dataset, scan, fault, model and local subcommands do.
//! - [`sim`]: `ganges sim`, the paper scenarios in virtual time.
//! - [`stress`]: one node of a local cluster loaded (`bench write --stress`).
//! - [`plot`]: SVG and PNG line charts.
//! - [`util`]: the CLI's error type, progress bars, tables.
//! - [`sys`]: the process-management system calls.

pub mod bench;
pub mod bench_transport;
pub mod bench_write;
pub mod commands;
pub mod local;
pub mod netns;
pub mod plot;
pub mod real;
pub mod sim;
pub mod stress;
pub mod sys;
pub mod util;
