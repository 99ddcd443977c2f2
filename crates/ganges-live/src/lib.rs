//! ganges-live: what a cluster is doing, as it happens.
//!
//! A [`Live`] polls every server a few times a second ([`collect`]) and keeps the latest
//! snapshot, the last minute of per-server rates, and a results table a bench may fill as it
//! runs. Two views read it: [`web`], the page `ganges dashboard` serves (server-sent events
//! to a static page with a vendored chart library), and [`top`], the same in a terminal.

pub mod collect;
pub mod top;
pub mod web;

pub use collect::{Collector, Snapshot};

use ganges_client::Client;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How often the servers are asked, unless told otherwise.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(250);
/// How much history a page gets when it connects.
pub const HISTORY: Duration = Duration::from_secs(60);

/// A results table filled as a bench runs (shown under the live view).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One tick as the views get it: the snapshot, the table, and both as JSON, made once.
#[derive(Debug)]
pub struct Frame {
    pub snapshot: Snapshot,
    pub table: Option<Table>,
    pub json: String,
}

#[derive(Serialize)]
struct FrameJson<'a> {
    #[serde(flatten)]
    snapshot: &'a Snapshot,
    table: &'a Option<Table>,
}

/// Per-server rates and queues over the last minute, for a page that connects late.
#[derive(Debug, Default, Serialize)]
struct History {
    t: VecDeque<f64>,
    /// [node][tick]
    read_bytes_per_sec: Vec<VecDeque<f64>>,
    queued: Vec<VecDeque<u64>>,
}

#[derive(Debug)]
struct Shared {
    client: Mutex<Arc<Client>>,
    table: Mutex<Option<Table>>,
    history: Mutex<History>,
    frames: watch::Sender<Arc<Frame>>,
}

/// The live view of one cluster: a task polling it, and what it heard last.
#[derive(Clone, Debug)]
pub struct Live {
    shared: Arc<Shared>,
    period: Duration,
}

impl Live {
    /// Start polling on the current tokio runtime (the first snapshot is taken before this
    /// returns). The task ends when every `Live` and receiver is dropped.
    pub async fn start(client: Arc<Client>, period: Duration) -> Live {
        let mut collector = Collector::new(client.clone());
        let first = collector.tick().await;
        let frame = make_frame(first, None);
        let (frames, _) = watch::channel(Arc::new(frame));
        let shared = Arc::new(Shared {
            client: Mutex::new(client),
            table: Mutex::new(None),
            history: Mutex::new(History::default()),
            frames,
        });
        let weak = Arc::downgrade(&shared);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                let snapshot = collector.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                *lock(&shared.client) = collector.client().clone();
                shared.record(&snapshot, period);
                let table = lock(&shared.table).clone();
                shared.frames.send_replace(Arc::new(make_frame(snapshot, table)));
            }
        });
        Live { shared, period }
    }

    /// The latest frame, and every one after it.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Frame>> {
        self.shared.frames.subscribe()
    }

    pub fn latest(&self) -> Arc<Frame> {
        self.shared.frames.borrow().clone()
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// The client the collector uses now (it reconnects while a server is down).
    pub fn client(&self) -> Arc<Client> {
        lock(&self.shared.client).clone()
    }

    /// Show a results table, empty for now.
    pub fn set_table(&self, title: &str, columns: &[&str]) {
        *lock(&self.shared.table) = Some(Table {
            title: title.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: vec![],
        });
    }

    /// Add a row to the table (ignored when there is none).
    pub fn push_row(&self, row: Vec<String>) {
        if let Some(t) = lock(&self.shared.table).as_mut() {
            t.rows.push(row);
        }
    }

    /// Each server's served rate over the last minute, oldest first.
    pub fn rate_history(&self) -> Vec<Vec<f64>> {
        lock(&self.shared.history).read_bytes_per_sec.iter().map(|q| q.iter().copied().collect()).collect()
    }

    /// The last minute of per-server rates and queues, as JSON.
    pub fn history_json(&self) -> String {
        serde_json::to_string(&*lock(&self.shared.history)).unwrap_or_else(|_| "{}".into())
    }
}

impl Shared {
    fn record(&self, s: &Snapshot, period: Duration) {
        let keep = (HISTORY.as_secs_f64() / period.as_secs_f64()).ceil() as usize;
        let mut h = lock(&self.history);
        let n = s.servers.len();
        h.read_bytes_per_sec.resize_with(n, VecDeque::new);
        h.queued.resize_with(n, VecDeque::new);
        h.t.push_back(s.t);
        for (i, v) in s.servers.iter().enumerate() {
            h.read_bytes_per_sec[i].push_back(v.read_bytes_per_sec);
            h.queued[i].push_back(v.queued);
        }
        while h.t.len() > keep {
            h.t.pop_front();
            for q in &mut h.read_bytes_per_sec {
                q.pop_front();
            }
            for q in &mut h.queued {
                q.pop_front();
            }
        }
    }
}

fn make_frame(snapshot: Snapshot, table: Option<Table>) -> Frame {
    let json = serde_json::to_string(&FrameJson { snapshot: &snapshot, table: &table }).unwrap_or_else(|_| "{}".into());
    Frame { snapshot, table, json }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
