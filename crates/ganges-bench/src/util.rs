//! Shared pieces of the benches: the error type, progress bars, tables, git commit.

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;

/// Why a bench or simulation could not run or report: one line that says what went wrong
/// and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Failed(String),
    /// Stopped by Ctrl-C, SIGTERM or SIGHUP, after stopping every server it started and
    /// removing its files.
    #[error("interrupted; every server this command started is stopped and its files removed")]
    Interrupted,
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
}

pub type BenchResult<T> = Result<T, BenchError>;

/// Run `bench` on `rt` until it ends or the process is asked to stop (Ctrl-C, SIGTERM,
/// SIGHUP): then [`BenchError::Interrupted`], so that the caller's drops stop its servers,
/// clear their faults and remove its scratch files, which a killed bench would leave behind
/// (gigabytes in `/dev/shm`). A stop asked for between two calls ends the next one at once;
/// a second stop exits the process without cleaning up.
pub fn block_on<T>(
    rt: &tokio::runtime::Runtime,
    bench: impl std::future::Future<Output = BenchResult<T>>,
) -> BenchResult<T> {
    let mut stop = stop_requests();
    rt.block_on(async {
        tokio::select! {
            r = bench => r,
            // A closed channel (no watcher) disables this branch.
            Ok(_) = stop.wait_for(|asked| *asked) => Err(BenchError::Interrupted),
        }
    })
}

/// Whether a stop was asked for, watched by a thread of its own that takes over SIGINT,
/// SIGTERM and SIGHUP for the rest of the process from the first call on (a bench calls it
/// before it makes anything to clean up).
pub(crate) fn stop_requests() -> tokio::sync::watch::Receiver<bool> {
    static STOP: std::sync::OnceLock<tokio::sync::watch::Receiver<bool>> = std::sync::OnceLock::new();
    STOP.get_or_init(|| {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let (ready_tx, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let made = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|rt| Ok((rt.block_on(async { ganges_harness::sys::StopSignals::new() })?, rt)));
            let (mut stops, rt) = match made {
                Ok(x) => x,
                Err(e) => {
                    // Nothing watches: a stop kills the bench as before, files and all.
                    tracing::warn!(error = %e, "cannot watch for Ctrl-C, SIGTERM and SIGHUP; a stopped bench leaves its files");
                    return;
                }
            };
            let _ = ready_tx.send(());
            rt.block_on(async {
                stops.recv().await;
                eprintln!("stopping: the servers stop and the bench's files go (again to exit at once)");
                let _ = tx.send(true);
                stops.recv().await;
                std::process::exit(130);
            });
        });
        // The handlers are in place before any bench starts.
        let _ = ready.recv();
        rx
    })
    .clone()
}

/// Serve the live dashboard of `cluster` on `addr` for as long as the runtime runs, with an
/// empty table of `columns` the bench fills as it goes.
pub async fn start_dashboard(
    cluster: &ganges_client::cluster::ClusterFile,
    addr: &str,
    title: &str,
    columns: &[&str],
) -> BenchResult<ganges_live::Live> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| BenchError::Failed(format!("cannot serve the dashboard on {addr}: {e}")))?;
    let client = ganges_client::Client::connect(cluster.clone()).await?;
    let live = ganges_live::Live::start(client, ganges_live::DEFAULT_PERIOD).await;
    live.set_table(title, columns);
    eprintln!("dashboard: http://{}/", listener.local_addr()?);
    tokio::spawn(ganges_live::web::serve(listener, live.clone()));
    Ok(live)
}

/// Write a bench's report as JSON to `path`, if given.
pub fn write_json<T: serde::Serialize>(report: &T, path: Option<&std::path::PathBuf>) -> BenchResult<()> {
    if let Some(p) = path {
        std::fs::write(p, serde_json::to_vec_pretty(report)?)
            .map_err(|e| BenchError::Failed(format!("writing {}: {e}", p.display())))?;
    }
    Ok(())
}

pub fn fail<T>(msg: impl Into<String>) -> BenchResult<T> {
    Err(BenchError::Failed(msg.into()))
}

/// A byte-count progress bar on stderr; hidden when stderr is not a terminal.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// A step-count progress bar on stderr; hidden when stderr is not a terminal.
pub fn steps_bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {wide_msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// A progress callback for the client library that moves a bar.
pub fn progress_fn(bar: &ProgressBar) -> ganges_client::dataset::ProgressFn {
    let bar = bar.clone();
    Arc::new(move |n| bar.inc(n))
}

/// A plain text table: a header row, then rows, columns padded to fit.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|s| s.to_string()).collect()] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> = (0..cols)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (i, r) in self.rows.iter().enumerate() {
            let line: Vec<String> = r.iter().enumerate().map(|(c, s)| format!("{s:>w$}", w = width[c])).collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
            if i == 0 {
                let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
                out.push_str(&rule.join("  "));
                out.push('\n');
            }
        }
        out
    }
}

/// The commit the binary runs from, when run inside a git checkout (`-dirty` when the code
/// differs from it).
pub fn git_commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".into() };
    // A run from uncommitted code says so: its results are not that commit's.
    let dirty = git(&["status", "--porcelain", "--untracked-files=no", "--", "crates", "Cargo.lock"])
        .is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

/// CPU seconds used by this process so far.
pub fn process_cpu_secs() -> f64 {
    ganges_server::sys::cpu_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&["policy", "MB/s"]);
        t.row(vec!["gd".into(), "1234.5".into()]);
        let s = t.render();
        assert_eq!(s.lines().next().unwrap(), "policy    MB/s");
        assert_eq!(s.lines().nth(2).unwrap(), "    gd  1234.5");
    }
}
