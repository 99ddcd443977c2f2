//! This process's client metrics for Prometheus, served from the ganges I/O threads.

use crate::errors::GangesError;
use crate::runtime::{runtime, wait};
use pyo3::prelude::*;

/// Serve this process's client metrics (`GET /metrics`) at `addr` until the process ends;
/// the address it listens on (port 0 picks a free one).
#[pyfunction]
#[pyo3(signature = (addr = "127.0.0.1:0"))]
pub fn serve_metrics(py: Python<'_>, addr: &str) -> PyResult<String> {
    let listener = wait(py, tokio::net::TcpListener::bind(addr.to_string()))?
        .map_err(|e| GangesError::new_err(format!("cannot serve metrics on {addr}: {e}")))?;
    let local = listener.local_addr().map_err(|e| GangesError::new_err(e.to_string()))?;
    runtime()?.spawn(ganges_client::metrics::serve(listener));
    Ok(local.to_string())
}

/// This process's client metrics in the Prometheus text format.
#[pyfunction]
pub fn client_metrics() -> String {
    ganges_client::metrics::render()
}
