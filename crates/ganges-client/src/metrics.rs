//! What this process's reads and writes did, for Prometheus: a long-running client (a
//! training job, a service, `ganges scan`) can serve them with [`serve`] on a port of its own,
//! beside the servers' metrics.
//!
//! Counters are process-wide atomics: bytes as blocks are delivered or land, and each
//! stream's request counters (duplicates, hedges, steals, retries, handoffs) when it closes.

use ganges_core::route::ReadStats;
use ganges_net::prom::{self, Text};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;

#[derive(Debug)]
struct Counters {
    /// Bytes delivered to this process's consumers, from primary copies and from backups.
    read_bytes: [AtomicU64; 2],
    read_blocks: AtomicU64,
    written_bytes: AtomicU64,
    streams_opened: AtomicU64,
    streams_closed: AtomicU64,
    requests: AtomicU64,
    duplicates: AtomicU64,
    hedges: AtomicU64,
    steals: AtomicU64,
    retries: AtomicU64,
    moved: AtomicU64,
    corrupt: AtomicU64,
}

static COUNTERS: Counters = Counters {
    read_bytes: [AtomicU64::new(0), AtomicU64::new(0)],
    read_blocks: AtomicU64::new(0),
    written_bytes: AtomicU64::new(0),
    streams_opened: AtomicU64::new(0),
    streams_closed: AtomicU64::new(0),
    requests: AtomicU64::new(0),
    duplicates: AtomicU64::new(0),
    hedges: AtomicU64::new(0),
    steals: AtomicU64::new(0),
    retries: AtomicU64::new(0),
    moved: AtomicU64::new(0),
    corrupt: AtomicU64::new(0),
};

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> f64 {
    c.load(Ordering::Relaxed) as f64
}

/// A block of `bytes` delivered from copy `copy` of its fragment (0: the primary).
pub(crate) fn block_read(copy: u32, bytes: u64) {
    add(&COUNTERS.read_bytes[usize::from(copy > 0)], bytes);
    add(&COUNTERS.read_blocks, 1);
}

pub(crate) fn block_written(bytes: u64) {
    add(&COUNTERS.written_bytes, bytes);
}

pub(crate) fn stream_opened() {
    add(&COUNTERS.streams_opened, 1);
}

/// A stream closed, with what its requests did.
pub(crate) fn stream_closed(s: &ReadStats) {
    let c = &COUNTERS;
    add(&c.streams_closed, 1);
    add(&c.requests, s.requests);
    add(&c.duplicates, s.duplicates);
    add(&c.hedges, s.hedges);
    add(&c.steals, s.steals);
    add(&c.retries, s.retries);
    add(&c.moved, s.moved);
    add(&c.corrupt, s.corrupt.len() as u64);
}

/// This process's client metrics in the Prometheus text format.
pub fn render() -> String {
    let c = &COUNTERS;
    let mut t = Text::default();
    t.family("ganges_client_read_bytes_total", "counter", "Bytes delivered to this process's consumers, by copy.");
    for (i, copy) in ["primary", "backup"].iter().enumerate() {
        t.sample("ganges_client_read_bytes_total", &[("copy", copy)], get(&c.read_bytes[i]));
    }
    t.one("ganges_client_read_blocks_total", "counter", "Blocks delivered to consumers.", get(&c.read_blocks));
    t.one("ganges_client_written_bytes_total", "counter", "Bytes written and acknowledged.", get(&c.written_bytes));
    let open = get(&c.streams_opened) - get(&c.streams_closed);
    t.one("ganges_client_streams", "gauge", "Read and write streams open.", open.max(0.0));
    t.family(
        "ganges_client_stream_events_total",
        "counter",
        "What closed streams' requests did: requests sent, duplicates received, hedges, steals, retries, \
         handoffs between servers, corrupt blocks reported.",
    );
    let events = [
        ("request", &c.requests),
        ("duplicate", &c.duplicates),
        ("hedge", &c.hedges),
        ("steal", &c.steals),
        ("retry", &c.retries),
        ("moved", &c.moved),
        ("corrupt", &c.corrupt),
    ];
    for (kind, v) in events {
        t.sample("ganges_client_stream_events_total", &[("kind", kind)], get(v));
    }
    t.finish()
}

/// Serve this process's client metrics on `listener` (`GET /metrics`) until the task is
/// dropped.
pub async fn serve(listener: TcpListener) {
    prom::serve(listener, render).await
}
