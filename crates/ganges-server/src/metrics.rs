//! Metrics for Prometheus: what a server has done and what is in force on it, in the
//! Prometheus text format (version 0.0.4), served on a port of its own (`--metrics-listen`).
//!
//! The counters are the server's own (`Counters`, the disk's figures, `ServerStats`), so
//! nothing is counted twice. Two things are kept only for metrics: bytes served per consumer
//! stream and copy (bounded: the most recently served consumers), and a histogram of read
//! latency from arrival to reply. The format is written by hand: it is a few lines of text
//! per metric, and a registry would hold a second copy of every counter. A test parses the
//! output with Prometheus's own Python parser.
//!
//! The HTTP side answers `GET /metrics` (and `/`) and nothing else, one request per
//! connection, with bounds on the request's size and time.

use crate::Shared;
use ganges_proto::control::ServerStats;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Consumers whose bytes are kept by name; past this, the least recently served is dropped.
pub const CONSUMERS_KEPT: usize = 256;
/// Upper bounds of the read latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// A request's head larger than this, or slower than `REQUEST_TIMEOUT`, is dropped.
const REQUEST_MAX: usize = 8 << 10;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes one consumer stream got from this server, by copy (0: primary, 1: backup).
#[derive(Clone, Copy, Debug, Default)]
struct Served {
    bytes: [u64; 2],
    /// When it was last served (a sequence number), for eviction.
    last: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    served: Mutex<(HashMap<u64, Served>, u64)>,
    served_by_copy: [AtomicU64; 2],
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
}

impl Metrics {
    /// A read of `bytes` for consumer `stream` from copy `copy` of its fragment, answered
    /// `latency` after it arrived.
    pub fn read_served(&self, stream: u64, copy: u32, bytes: u64, latency: Duration) {
        let class = usize::from(copy > 0);
        self.served_by_copy[class].fetch_add(bytes, Ordering::Relaxed);
        {
            let mut guard = self.served.lock().unwrap_or_else(|e| e.into_inner());
            let (map, seq) = &mut *guard;
            *seq += 1;
            let now = *seq;
            if !map.contains_key(&stream) && map.len() >= CONSUMERS_KEPT {
                let oldest = map.iter().min_by_key(|(_, s)| s.last).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    map.remove(&k);
                }
            }
            let s = map.entry(stream).or_default();
            s.bytes[class] += bytes;
            s.last = now;
        }
        let secs = latency.as_secs_f64();
        if let Some(b) = LATENCY_BUCKETS.iter().position(|&le| secs <= le) {
            self.latency_buckets[b].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Writes metric families: `# HELP`, `# TYPE`, then samples.
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {}", number(value));
    }

    /// A family with one unlabelled sample.
    fn one(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

const COPIES: [&str; 2] = ["primary", "backup"];

/// Every metric of this server, in the text format.
pub fn render(stats: &ServerStats, m: &Metrics) -> String {
    let mut t = Text(String::with_capacity(8 << 10));
    let node = stats.node.0.to_string();
    let flag = |b: bool| if b { "true" } else { "false" };
    t.family("ganges_server_info", "gauge", "This server: its node, version and configuration (always 1).");
    let scheduler = stats.scheduler.to_string();
    let labels = [
        ("node", node.as_str()),
        ("version", stats.version.as_str()),
        ("scheduler", scheduler.as_str()),
        ("direct_io", flag(stats.direct_io)),
        ("secret", flag(stats.secret)),
        ("tls", flag(stats.tls)),
        ("disk_model", flag(stats.disk.is_some())),
    ];
    t.sample("ganges_server_info", &labels, 1.0);
    t.one("ganges_uptime_seconds", "gauge", "Seconds since the server started.", stats.uptime_secs);

    t.one("ganges_reads_total", "counter", "Reads served.", stats.reads as f64);
    t.one("ganges_read_bytes_total", "counter", "Bytes served by reads.", stats.read_bytes as f64);
    t.family("ganges_served_bytes_total", "counter", "Bytes served, by the copy they were read from.");
    for (class, name) in COPIES.iter().enumerate() {
        t.sample(
            "ganges_served_bytes_total",
            &[("copy", name)],
            m.served_by_copy[class].load(Ordering::Relaxed) as f64,
        );
    }
    t.family(
        "ganges_consumer_served_bytes_total",
        "counter",
        "Bytes served to each consumer stream (the most recent 256), by copy.",
    );
    {
        let guard = m.served.lock().unwrap_or_else(|e| e.into_inner());
        let mut consumers: Vec<_> = guard.0.iter().collect();
        consumers.sort_by_key(|(k, _)| **k);
        for (stream, s) in consumers {
            let id = format!("{stream:016x}");
            for (class, name) in COPIES.iter().enumerate() {
                t.sample(
                    "ganges_consumer_served_bytes_total",
                    &[("consumer", &id), ("copy", name)],
                    s.bytes[class] as f64,
                );
            }
        }
    }
    t.family("ganges_read_latency_seconds", "histogram", "Time from a read's arrival to its reply.");
    let mut cumulative = 0;
    for (b, le) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += m.latency_buckets[b].load(Ordering::Relaxed);
        t.sample("ganges_read_latency_seconds_bucket", &[("le", &number(*le))], cumulative as f64);
    }
    let count = m.latency_count.load(Ordering::Relaxed);
    t.sample("ganges_read_latency_seconds_bucket", &[("le", "+Inf")], count as f64);
    t.sample("ganges_read_latency_seconds_sum", &[], m.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6);
    t.sample("ganges_read_latency_seconds_count", &[], count as f64);

    t.one("ganges_writes_total", "counter", "Blocks written.", stats.writes as f64);
    t.one("ganges_write_bytes_total", "counter", "Bytes written.", stats.write_bytes as f64);
    t.one("ganges_queue_depth", "gauge", "Requests queued for the disk.", stats.queued as f64);
    t.one("ganges_connections", "gauge", "Connections open.", stats.connections as f64);
    t.one("ganges_cancelled_total", "counter", "Queued reads cancelled before they ran.", stats.cancelled as f64);
    t.one("ganges_corrupt_blocks_total", "counter", "Blocks that failed their checksum.", stats.corrupt_blocks as f64);
    t.one("ganges_protocol_errors_total", "counter", "Malformed or misplaced frames.", stats.protocol_errors as f64);
    let hs = stats.handshake_failures as f64;
    t.one("ganges_handshake_failures_total", "counter", "Connections refused at the handshake.", hs);
    t.one("ganges_handoffs_given_total", "counter", "Queued reads handed to other servers.", stats.handed_off as f64);
    t.one("ganges_handoffs_taken_total", "counter", "Reads taken over from other servers.", stats.taken_over as f64);
    let (out, inn) = (stats.redirected_out as f64, stats.redirected_in as f64);
    t.one("ganges_dq_redirected_out_total", "counter", "Queue appends given back to go to another server.", out);
    t.one("ganges_dq_redirected_in_total", "counter", "Queue appends taken for another server.", inn);
    t.one("ganges_datasets", "gauge", "Datasets this server holds a copy of.", stats.datasets as f64);

    if let Some(rate) = stats.measured_disk_bytes_per_sec {
        t.one("ganges_disk_measured_bytes_per_second", "gauge", "Disk bandwidth measured while serving.", rate);
    }
    if let Some(d) = stats.disk {
        let fraction = stats.fault.map_or(1.0, |f| f.rate_fraction());
        t.one("ganges_disk_model_bytes_per_second", "gauge", "The disk model's peak rate.", d.rate_bytes_per_sec);
        t.one(
            "ganges_disk_model_fault_fraction",
            "gauge",
            "Fraction of its peak the modelled disk delivers.",
            fraction,
        );
        let ds = &stats.disk_stats;
        t.one("ganges_disk_requests_total", "counter", "Requests the modelled disk ran.", ds.requests as f64);
        t.one("ganges_disk_seeks_total", "counter", "Seeks of the modelled disk.", ds.seeks as f64);
        t.one("ganges_disk_busy_seconds_total", "counter", "Time the modelled disk was busy.", ds.busy_secs);
    }
    t.family("ganges_real_fault", "gauge", "Real faults in force: rates in bytes/s, a share, a delay in seconds.");
    let rf = &stats.real_faults;
    let real: [(&str, Option<f64>); 5] = [
        ("kernel_read_bytes_per_second", rf.kernel_read_bytes_per_sec.map(|v| v as f64)),
        ("kernel_write_bytes_per_second", rf.kernel_write_bytes_per_sec.map(|v| v as f64)),
        ("competing_reader_share", rf.competing_reader),
        ("link_bytes_per_second", rf.link_bytes_per_sec.map(|v| v as f64)),
        ("link_delay_seconds", rf.link_delay_us.map(|v| v as f64 / 1e6)),
    ];
    for (kind, v) in real {
        if let Some(v) = v {
            t.sample("ganges_real_fault", &[("kind", kind)], v);
        }
    }

    t.one("process_cpu_seconds_total", "counter", "User and system CPU time of the server process.", stats.cpu_secs);
    t.one("process_resident_memory_bytes", "gauge", "Resident memory of the server process.", stats.rss_bytes as f64);
    t.0
}

/// Serve `GET /metrics` on `listener` until the server stops.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &shared)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > REQUEST_MAX {
            return respond(&mut stream, "431 Request Header Fields Too Large", "text/plain", "request too large\n")
                .await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = std::str::from_utf8(line).unwrap_or("").split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics" | "/") => {
            let stats = shared.stats();
            let body = render(&stats, &shared.metrics);
            respond(&mut stream, "200 OK", "text/plain; version=0.0.4; charset=utf-8", &body).await
        }
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "ganges serves /metrics only\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "GET /metrics\n").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_bytes_are_kept_per_consumer_and_copy_and_bounded() {
        let m = Metrics::default();
        m.read_served(7, 0, 100, Duration::from_millis(2));
        m.read_served(7, 1, 50, Duration::from_millis(30));
        m.read_served(9, 2, 10, Duration::from_secs(20));
        let served = m.served.lock().unwrap();
        assert_eq!(served.0[&7].bytes, [100, 50]);
        assert_eq!(served.0[&9].bytes, [0, 10]);
        drop(served);
        assert_eq!(m.served_by_copy[0].load(Ordering::Relaxed), 100);
        assert_eq!(m.served_by_copy[1].load(Ordering::Relaxed), 60);
        // 2 ms in the 2.5 ms bucket, 30 ms in the 50 ms one, 20 s past every bucket.
        assert_eq!(m.latency_buckets[2].load(Ordering::Relaxed), 1);
        assert_eq!(m.latency_buckets[6].load(Ordering::Relaxed), 1);
        assert_eq!(m.latency_count.load(Ordering::Relaxed), 3);
        for s in 0..(CONSUMERS_KEPT as u64 + 10) {
            m.read_served(1000 + s, 0, 1, Duration::ZERO);
        }
        let served = m.served.lock().unwrap();
        assert_eq!(served.0.len(), CONSUMERS_KEPT);
        assert!(!served.0.contains_key(&7), "the least recently served consumer goes first");
    }

    #[test]
    fn label_values_are_escaped_and_numbers_plain() {
        let mut t = Text(String::new());
        t.sample("x", &[("a", "q\"b\\c\nd")], 3.0);
        t.sample("y", &[], 0.25);
        assert_eq!(t.0, "x{a=\"q\\\"b\\\\c\\nd\"} 3\ny 0.25\n");
    }
}
