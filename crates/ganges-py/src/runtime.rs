//! One tokio runtime per process, and blocking on it with the GIL released.
//!
//! A forked child (multiprocessing, data-loader workers) inherits the parent's memory but
//! none of its threads, so a runtime made before `fork` is dead there: each process makes
//! its own on first use, keyed by its pid. The parent's runtime is leaked in the child, never
//! dropped: dropping it would wait for worker threads that do not exist there.

use pyo3::prelude::*;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::runtime::Runtime;

/// How often a blocking call looks for Ctrl-C (Python's signal handlers run on the main
/// thread only when it holds the GIL).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// This process's runtime, made on first use.
pub fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut current = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = *current
        && owner == pid
    {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ganges-io")
        .build()
        .map_err(|e| crate::errors::GangesError::new_err(format!("starting ganges's I/O threads: {e}")))?;
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *current = Some((pid, rt));
    Ok(rt)
}

/// Run `fut` to completion with the GIL released, so other Python threads run meanwhile.
/// Ctrl-C (any exception a signal handler raises) drops the future, which cancels what it
/// was doing, and raises here.
pub fn wait<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    wait_made(py, move || fut)
}

/// As [`wait`], for a future that cannot cross threads (a flow's): `make` builds it on the
/// thread that runs it.
pub fn wait_made<M, F>(py: Python<'_>, make: M) -> PyResult<F::Output>
where
    M: FnOnce() -> F + Send,
    F: Future,
    F::Output: Send,
{
    let rt = runtime()?;
    py.detach(|| {
        rt.block_on(async move {
            let fut = make();
            let mut tick = tokio::time::interval(SIGNAL_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    out = &mut fut => return Ok(out),
                    _ = tick.tick() => Python::attach(|py| py.check_signals())?,
                }
            }
        })
    })
}

/// Fails when `owner` is not this process: objects holding connections or reads cannot
/// cross a `fork` (their I/O threads stayed in the parent).
pub fn same_process(owner: u32, what: &str) -> PyResult<()> {
    if owner == std::process::id() {
        Ok(())
    } else {
        Err(crate::errors::GangesError::new_err(format!(
            "this {what} was opened in process {owner}, before a fork; open it again in this process"
        )))
    }
}
