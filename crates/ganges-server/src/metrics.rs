//! Metrics for Prometheus: what a server has done and what is in force on it, in the
//! Prometheus text format (version 0.0.4), served on a port of its own (`--metrics-listen`).
//!
//! The counters are the server's own (`Counters`, the disk's figures, `ServerStats`), so
//! nothing is counted twice. Two things are kept beside them: bytes served per consumer
//! stream and copy with the consumer's progress (bounded: the most recently served
//! consumers; also what the live view asks for), and, when metrics are served, a histogram
//! of read latency from arrival to reply. The format is written by hand (`ganges_net::prom`):
//! a registry would hold a second copy of every counter. A test parses the output with
//! Prometheus's own Python parser.

use crate::Shared;
use ganges_core::sched::Progress;
use ganges_core::time::Time;
use ganges_net::prom::{self, Text, number};
use ganges_proto::control::{ConsumerActivity, ServerStats};
use ganges_proto::manifest::DatasetName;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// Consumers whose bytes are kept by name; past this, the least recently served is dropped.
pub const CONSUMERS_KEPT: usize = 256;
/// How long a consumer stays in the live view after it was last served.
pub const ACTIVITY_WINDOW: Duration = Duration::from_secs(120);
/// Upper bounds of the read latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What one consumer stream got from this server: bytes by copy (0: primary, 1: backup),
/// its progress as its last request said, and when it was first and last served.
#[derive(Clone, Debug)]
struct Served {
    dataset: DatasetName,
    bytes: [u64; 2],
    done_bytes: u64,
    total_bytes: u64,
    first: Time,
    /// When it was last served: the least recent goes first when the map is full.
    last: Time,
}

/// One read served, as the activity log and the metrics take it.
#[derive(Clone, Copy, Debug)]
pub struct ServedRead<'a> {
    pub stream: u64,
    pub dataset: &'a DatasetName,
    pub progress: Progress,
    /// Which copy of its fragment this server read it from (0: the primary).
    pub copy: u32,
    pub bytes: u64,
    pub arrived: Time,
    pub now: Time,
}

/// What the server keeps for its metrics and for the live view (`ControlRequest::Consumers`).
/// Bytes per consumer are always kept (a map update per read); the latency histogram only
/// when metrics are served.
#[derive(Debug, Default)]
pub struct Metrics {
    served: Mutex<HashMap<u64, Served>>,
    served_by_copy: [AtomicU64; 2],
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
}

impl Metrics {
    /// A read answered; `latency` also goes into the histogram.
    pub fn read_served(&self, r: ServedRead<'_>, latency: bool) {
        let class = usize::from(r.copy > 0);
        self.served_by_copy[class].fetch_add(r.bytes, Ordering::Relaxed);
        {
            let mut map = self.served.lock();
            if !map.contains_key(&r.stream) && map.len() >= CONSUMERS_KEPT {
                let oldest = map.iter().min_by_key(|(_, s)| s.last).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    map.remove(&k);
                }
            }
            let s = map.entry(r.stream).or_insert_with(|| Served {
                dataset: r.dataset.clone(),
                bytes: [0; 2],
                done_bytes: 0,
                total_bytes: 0,
                first: r.now,
                last: r.now,
            });
            s.bytes[class] += r.bytes;
            s.done_bytes = s.done_bytes.max(r.progress.done_bytes);
            s.total_bytes = r.progress.total_bytes;
            s.last = r.now;
        }
        if latency {
            let waited = r.now.since(r.arrived);
            let secs = waited.as_secs_f64();
            if let Some(b) = LATENCY_BUCKETS.iter().position(|&le| secs <= le) {
                self.latency_buckets[b].fetch_add(1, Ordering::Relaxed);
            }
            self.latency_count.fetch_add(1, Ordering::Relaxed);
            self.latency_sum_us.fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// The consumers served within `window` before `now`, most recent first.
    pub fn consumers(&self, now: Time, window: Duration) -> Vec<ConsumerActivity> {
        let map = self.served.lock();
        let mut list: Vec<(Time, ConsumerActivity)> = map
            .iter()
            .filter(|(_, s)| now.since(s.last) <= window)
            .map(|(&stream, s)| {
                let a = ConsumerActivity {
                    stream,
                    dataset: s.dataset.clone(),
                    done_bytes: s.done_bytes,
                    total_bytes: s.total_bytes,
                    primary_bytes: s.bytes[0],
                    backup_bytes: s.bytes[1],
                    first_secs_ago: now.since(s.first).as_secs_f64(),
                    last_secs_ago: now.since(s.last).as_secs_f64(),
                };
                (s.last, a)
            })
            .collect();
        list.sort_by_key(|(last, a)| (std::cmp::Reverse(*last), a.stream));
        list.into_iter().map(|(_, a)| a).collect()
    }
}

const COPIES: [&str; 2] = ["primary", "backup"];

/// Every metric of this server, in the text format.
pub fn render(stats: &ServerStats, m: &Metrics) -> String {
    let mut t = Text::default();
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
        let guard = m.served.lock();
        let mut consumers: Vec<_> = guard.iter().collect();
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
    let refused = stats.refused_connections as f64;
    t.one("ganges_refused_connections_total", "counter", "Connections refused at the connection limit.", refused);
    t.one("ganges_handoffs_given_total", "counter", "Queued reads handed to other servers.", stats.handed_off as f64);
    t.one("ganges_handoffs_taken_total", "counter", "Reads taken over from other servers.", stats.taken_over as f64);
    let (out, inn) = (stats.redirected_out as f64, stats.redirected_in as f64);
    t.one("ganges_dq_redirected_out_total", "counter", "Queue appends given back to go to another server.", out);
    t.one("ganges_dq_redirected_in_total", "counter", "Queue appends taken for another server.", inn);
    t.one("ganges_datasets", "gauge", "Datasets this server holds a copy of.", stats.datasets as f64);

    if let Some(rate) = stats.measured_disk_bytes_per_sec {
        t.one("ganges_disk_measured_bytes_per_second", "gauge", "Disk bandwidth measured while serving.", rate);
    }
    if let Some(rate) = stats.measured_link_bytes_per_sec {
        let what = "Outgoing link bandwidth measured while replies waited for it.";
        t.one("ganges_link_measured_bytes_per_second", "gauge", what, rate);
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
    t.finish()
}

/// Serve `GET /metrics` on `listener` until the server stops.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    prom::serve(listener, move || render(&shared.stats(), &shared.metrics)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_bytes_are_kept_per_consumer_and_copy_and_bounded() {
        let m = Metrics::default();
        let ds: DatasetName = "d".parse().unwrap();
        let at = |ms: u64| Time(ms * 1_000_000);
        let read = |stream, copy, bytes, done, now_ms, waited_ms| ServedRead {
            stream,
            dataset: &ds,
            progress: Progress {
                done_bytes: done,
                total_bytes: 1000,
                metric: ganges_core::sched::ProgressMetric::Bytes,
            },
            copy,
            bytes,
            arrived: at(now_ms - waited_ms),
            now: at(now_ms),
        };
        m.read_served(read(7, 0, 100, 0, 100, 2), true);
        m.read_served(read(7, 1, 50, 100, 200, 30), true);
        m.read_served(read(9, 2, 10, 0, 20_300, 20_000), true);
        m.read_served(read(11, 0, 10, 0, 20_350, 20_000), false);
        let served = m.served.lock();
        assert_eq!(served[&7].bytes, [100, 50]);
        assert_eq!(served[&9].bytes, [0, 10]);
        drop(served);
        assert_eq!(m.served_by_copy[0].load(Ordering::Relaxed), 110);
        assert_eq!(m.served_by_copy[1].load(Ordering::Relaxed), 60);
        // 2 ms in the 2.5 ms bucket, 30 ms in the 50 ms one, 20 s past every bucket; the
        // fourth read is not timed.
        assert_eq!(m.latency_buckets[2].load(Ordering::Relaxed), 1);
        assert_eq!(m.latency_buckets[6].load(Ordering::Relaxed), 1);
        assert_eq!(m.latency_count.load(Ordering::Relaxed), 3);

        // The live view: stream 7 last served at 200 ms, the others at 20.3 s.
        let recent = m.consumers(at(20_400), Duration::from_secs(10));
        assert_eq!(recent.iter().map(|a| a.stream).collect::<Vec<_>>(), [11, 9]);
        let all = m.consumers(at(20_400), Duration::from_secs(60));
        let seven = all.iter().find(|a| a.stream == 7).unwrap();
        assert_eq!(
            (seven.primary_bytes, seven.backup_bytes, seven.done_bytes, seven.total_bytes),
            (100, 50, 100, 1000)
        );
        assert!((seven.first_secs_ago - 20.3).abs() < 1e-9 && (seven.last_secs_ago - 20.2).abs() < 1e-9);

        for s in 0..(CONSUMERS_KEPT as u64 + 10) {
            m.read_served(read(1000 + s, 0, 1, 0, 30_000, 0), false);
        }
        let served = m.served.lock();
        assert_eq!(served.len(), CONSUMERS_KEPT);
        assert!(!served.contains_key(&7), "the least recently served consumer goes first");
    }
}
