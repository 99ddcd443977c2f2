//! `ganges._ganges`: the Python binding of ganges. Newtypes and conversions only; every
//! decision is the Rust library's. The `ganges` Python package wraps it (python/ganges).
//!
//! - [`cluster`]: `Cluster`, a cluster's connections and every operation on it.
//! - [`array`]: collective array writes (each process its chunk), reads of any layout, Zarr.
//! - [`read`]: scans, ordered and random-access readers, blocks as zero-copy buffers.
//! - [`run`]: River's query primitives (`Cluster.run`), every worker a task of this process.
//! - [`metrics`]: this process's client metrics for Prometheus.
//! - [`errors`]: Rust errors as a small Python exception hierarchy.
//! - [`runtime`]: one tokio runtime per process (again after `fork`), the GIL released
//!   while waiting.

// Methods mirror Python's keyword arguments, which are many by design.
#![allow(clippy::too_many_arguments)]

mod array;
mod cluster;
mod convert;
mod errors;
mod metrics;
mod read;
mod run;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _ganges(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<cluster::Cluster>()?;
    m.add_class::<read::Block>()?;
    m.add_class::<read::Scan>()?;
    m.add_class::<read::Reader>()?;
    m.add_class::<read::RandomReader>()?;
    m.add_class::<pyo3_bytes::PyBytes>()?;
    m.add_function(wrap_pyfunction!(array::array_write_part, m)?)?;
    m.add_function(wrap_pyfunction!(array::array_write, m)?)?;
    m.add_function(wrap_pyfunction!(array::array_read, m)?)?;
    m.add_function(wrap_pyfunction!(array::array_export_zarr, m)?)?;
    m.add_function(wrap_pyfunction!(array::launcher_rank, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::serve_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::client_metrics, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)
}
