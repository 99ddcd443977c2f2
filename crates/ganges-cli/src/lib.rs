//! The `ganges` command, as a library so its integration tests can run what the binary runs.
//!
//! - [`array`]: what the array subcommands do.
//! - [`commands`]: what the dataset, scan, write, fault, model and local subcommands do.
//! - [`error`]: the command line's error and exit codes.
//! - [`run`]: `ganges run`, River's query primitives.
//!
//! Local clusters are `ganges-harness`'s; the benches and the simulator's reports are
//! `ganges-bench`'s.

pub mod array;
pub mod commands;
pub mod error;
pub mod run;
