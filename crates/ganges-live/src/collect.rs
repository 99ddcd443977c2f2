//! What the live views show, gathered from the servers a few times a second.
//!
//! Each tick asks every server for its stats and for the consumer streams it served lately
//! (`ControlRequest::Consumers`: bytes by copy, and the progress each stream's requests
//! carried). Rates come from the difference of two ticks. Consumer streams are put together
//! into scans: streams of one dataset that started within `SCAN_GAP` of one another, before
//! any of them finished. A running scan's ideal is the layout-aware ideal at the rates in
//! force: the disk model's with its fault, else the rates the servers measured.

use ganges_client::Client;
use ganges_core::ids::NodeId;
use ganges_core::shape::Partition;
use ganges_proto::control::{ConsumerActivity, ControlReply, ControlRequest, ServerStats};
use ganges_proto::manifest::{DatasetName, Manifest};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Consumers of one dataset that started within this of one another are one scan.
pub const SCAN_GAP: f64 = 2.0;
/// Servers are asked one after another, so their "seconds ago" differ by a little: a stream
/// joins a scan only if it started this much before any of the scan's streams finished.
pub const SCAN_SKEW: f64 = 0.1;
/// A scan stays in view this long after its last read.
pub const SCAN_KEPT: f64 = 30.0;
/// Scans shown at once, newest first.
pub const SCANS_SHOWN: usize = 3;
/// A server that does not answer within this is shown as down for the tick.
const ASK_TIMEOUT: Duration = Duration::from_millis(1500);
/// While a server is down, the cluster is reconnected this often.
const RECONNECT_EVERY: Duration = Duration::from_secs(5);

/// One tick: every server and every scan in view.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// Seconds since the collector started.
    pub t: f64,
    pub cluster: String,
    pub servers: Vec<ServerView>,
    pub scans: Vec<ScanView>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ServerView {
    pub node: u32,
    pub addr: String,
    pub up: bool,
    /// Bytes/s served and written since the last tick.
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    pub queued: u64,
    pub connections: u64,
    /// What the disk can do now: the model's rate with its fault, or the rate measured while
    /// serving (`None` before the first read of a real disk).
    pub disk_bytes_per_sec: Option<f64>,
    pub disk_model: bool,
    /// Faults in force, in words (`None`: none).
    pub fault: Option<String>,
    pub handed_off: u64,
    pub taken_over: u64,
    pub metrics_addr: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScanView {
    pub dataset: String,
    /// Seconds from its first read to now, or to its last read once it is over.
    pub elapsed: f64,
    pub running: bool,
    /// The least time the disks could scan it in at today's rates; `None` if unknown.
    pub ideal_seconds: Option<f64>,
    pub consumers: Vec<ConsumerView>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConsumerView {
    /// The stream id's first hex digits.
    pub id: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub primary_bytes: u64,
    pub backup_bytes: u64,
    /// Bytes from each server, in node order.
    pub from: Vec<u64>,
}

impl ConsumerView {
    pub fn fraction(&self) -> f64 {
        if self.total_bytes == 0 { 0.0 } else { (self.done_bytes as f64 / self.total_bytes as f64).min(1.0) }
    }
}

impl ScanView {
    /// Where the ideal run would be now, as a fraction of the scan.
    pub fn ideal_fraction(&self) -> Option<f64> {
        self.ideal_seconds.map(|s| if s > 0.0 { (self.elapsed / s).min(1.0) } else { 1.0 })
    }
}

/// Polls the cluster and turns what it hears into snapshots.
#[derive(Debug)]
pub struct Collector {
    client: Arc<Client>,
    started: Instant,
    /// Per node: when its last stats came, and its read and write byte counters then.
    last: Vec<Option<(Instant, u64, u64)>>,
    manifests: HashMap<DatasetName, Option<Arc<Manifest>>>,
    /// Each scan's ideal, by dataset and its least consumer id.
    ideals: HashMap<(String, String), f64>,
    last_connect: Instant,
}

impl Collector {
    pub fn new(client: Arc<Client>) -> Collector {
        let n = client.nodes() as usize;
        Collector {
            client,
            started: Instant::now(),
            last: vec![None; n],
            manifests: HashMap::new(),
            ideals: HashMap::new(),
            last_connect: Instant::now(),
        }
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// Ask every server, and make the snapshot.
    pub async fn tick(&mut self) -> Snapshot {
        self.reconnect_if_down().await;
        let nodes: Vec<NodeId> = (0..self.client.nodes()).map(NodeId).collect();
        let asks = nodes.iter().map(|&n| {
            let client = self.client.clone();
            async move {
                let stats = ask(&client, n, ControlRequest::Stats).await;
                let consumers = ask(&client, n, ControlRequest::Consumers).await;
                let stats = match stats {
                    Some(ControlReply::Stats { stats }) => Some(*stats),
                    _ => None,
                };
                let consumers = match consumers {
                    Some(ControlReply::Consumers { consumers }) => consumers,
                    _ => vec![],
                };
                (stats, consumers)
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let now = Instant::now();
        let mut servers = Vec::with_capacity(nodes.len());
        let mut activity = Vec::with_capacity(nodes.len());
        let mut stats_all = Vec::with_capacity(nodes.len());
        for (i, (stats, consumers)) in answers.into_iter().enumerate() {
            servers.push(self.server_view(i, stats.as_ref(), now));
            stats_all.push(stats);
            activity.push(consumers);
        }
        let rates = current_rates(&stats_all);
        let mut scans = group_scans(&activity);
        for scan in &mut scans {
            // A running scan's ideal follows the rates in force; a finished one keeps the
            // ideal it had when it ended.
            let key =
                (scan.dataset.clone(), scan.consumers.iter().map(|c| c.id.as_str()).min().unwrap_or("").to_string());
            scan.ideal_seconds = match (&rates, self.ideals.get(&key)) {
                (_, Some(&kept)) if !scan.running => Some(kept),
                (Some(r), _) => self.ideal(&scan.dataset, &scan.consumers, r).await,
                (None, _) => None,
            };
            if let Some(i) = scan.ideal_seconds {
                if self.ideals.len() > 64 {
                    self.ideals.clear();
                }
                self.ideals.insert(key, i);
            }
        }
        Snapshot {
            t: now.duration_since(self.started).as_secs_f64(),
            cluster: self.client.cluster().path.display().to_string(),
            servers,
            scans,
        }
    }

    fn server_view(&mut self, i: usize, stats: Option<&ServerStats>, now: Instant) -> ServerView {
        let addr = self.client.cluster().servers.get(i).map(|s| s.addr.clone()).unwrap_or_default();
        let node = i as u32;
        let Some(s) = stats else {
            self.last[i] = None;
            return ServerView {
                node,
                addr,
                up: false,
                read_bytes_per_sec: 0.0,
                write_bytes_per_sec: 0.0,
                queued: 0,
                connections: 0,
                disk_bytes_per_sec: None,
                disk_model: false,
                fault: None,
                handed_off: 0,
                taken_over: 0,
                metrics_addr: None,
            };
        };
        let (read, write) = match self.last[i] {
            Some((at, r, w)) if now > at => {
                let dt = now.duration_since(at).as_secs_f64();
                (s.read_bytes.saturating_sub(r) as f64 / dt, s.write_bytes.saturating_sub(w) as f64 / dt)
            }
            _ => (0.0, 0.0),
        };
        self.last[i] = Some((now, s.read_bytes, s.write_bytes));
        ServerView {
            node,
            addr,
            up: true,
            read_bytes_per_sec: read,
            write_bytes_per_sec: write,
            queued: s.queued,
            connections: s.connections,
            disk_bytes_per_sec: disk_rate(s),
            disk_model: s.disk.is_some(),
            fault: fault_words(s),
            handed_off: s.handed_off,
            taken_over: s.taken_over,
            metrics_addr: s.metrics_addr.clone(),
        }
    }

    /// The layout-aware ideal of `consumers` reading `dataset` in consecutive partitions of
    /// their sizes (one a fragment, when the sizes are the fragments').
    async fn ideal(&mut self, dataset: &str, consumers: &[ConsumerView], rates: &[f64]) -> Option<f64> {
        let name: DatasetName = dataset.parse().ok()?;
        if !self.manifests.contains_key(&name) {
            let m = self.client.manifest(&name).await.ok().map(Arc::new);
            self.manifests.insert(name.clone(), m);
        }
        let manifest = self.manifests.get(&name)?.as_ref()?;
        let shape = &manifest.shape;
        let partitions: Vec<Partition> = if consumers.len() == shape.fragment_count() as usize {
            shape.fragment_partitions()
        } else {
            let weights: Vec<f64> = consumers.iter().map(|c| c.total_bytes.max(1) as f64).collect();
            shape.weighted_partitions(&weights)
        };
        let demands = ganges_core::ideal::scan_demands(shape, &partitions).ok()?;
        let best = ganges_core::ideal::layout_ideal(&demands, &manifest.layout, rates).ok()?;
        Some(best.seconds)
    }

    /// A server that went down may be back: connect afresh now and then while one is down.
    async fn reconnect_if_down(&mut self) {
        if self.client.is_whole() || self.last_connect.elapsed() < RECONNECT_EVERY {
            return;
        }
        self.last_connect = Instant::now();
        self.client = self.client.reconnected().await;
    }
}

async fn ask(client: &Client, node: NodeId, req: ControlRequest) -> Option<ControlReply> {
    tokio::time::timeout(ASK_TIMEOUT, client.control(node, req)).await.ok()?.ok()
}

/// The disk's rate now: the model's with its fault, else the one measured.
fn disk_rate(s: &ServerStats) -> Option<f64> {
    if s.disk.is_some() { s.model_rate() } else { s.measured_disk_bytes_per_sec }
}

fn fault_words(s: &ServerStats) -> Option<String> {
    let mut parts = vec![];
    if let Some(f) = s.fault {
        parts.push(format!("model: {f}"));
    }
    if !s.real_faults.is_none() {
        parts.push(s.real_faults.to_string());
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Every server's disk rate, if every server is up and has one.
fn current_rates(stats: &[Option<ServerStats>]) -> Option<Vec<f64>> {
    stats.iter().map(|s| s.as_ref().and_then(disk_rate)).collect()
}

/// One consumer stream as all servers together saw it.
#[derive(Debug)]
struct Stream {
    dataset: DatasetName,
    done: u64,
    total: u64,
    primary: u64,
    backup: u64,
    from: Vec<u64>,
    first_ago: f64,
    last_ago: f64,
}

/// Put the servers' consumer streams together into scans, newest first.
pub(crate) fn group_scans(per_node: &[Vec<ConsumerActivity>]) -> Vec<ScanView> {
    let n = per_node.len();
    let mut streams: BTreeMap<u64, Stream> = BTreeMap::new();
    for (node, list) in per_node.iter().enumerate() {
        for a in list {
            let s = streams.entry(a.stream).or_insert_with(|| Stream {
                dataset: a.dataset.clone(),
                done: 0,
                total: 0,
                primary: 0,
                backup: 0,
                from: vec![0; n],
                first_ago: 0.0,
                last_ago: f64::INFINITY,
            });
            s.done = s.done.max(a.done_bytes);
            s.total = s.total.max(a.total_bytes);
            s.primary += a.primary_bytes;
            s.backup += a.backup_bytes;
            s.from[node] += a.primary_bytes + a.backup_bytes;
            s.first_ago = s.first_ago.max(a.first_secs_ago);
            s.last_ago = s.last_ago.min(a.last_secs_ago);
        }
    }
    // The progress a stream's last request carried lags by the requests in flight: what the
    // servers served it (duplicates aside) is nearer, and is all of it once the scan is over.
    for s in streams.values_mut() {
        s.done = s.done.max((s.primary + s.backup).min(s.total));
    }
    let mut by_dataset: BTreeMap<&DatasetName, Vec<(u64, &Stream)>> = BTreeMap::new();
    for (id, s) in &streams {
        by_dataset.entry(&s.dataset).or_default().push((*id, s));
    }
    let mut scans: Vec<(f64, ScanView)> = vec![];
    for (dataset, mut list) in by_dataset {
        // Oldest start first. A stream joins the scan before it if it started within SCAN_GAP
        // of the last one and before any of them had finished (scans run back to back are
        // two scans).
        list.sort_by(|a, b| b.1.first_ago.total_cmp(&a.1.first_ago).then(a.0.cmp(&b.0)));
        let mut groups: Vec<Vec<(u64, &Stream)>> = vec![];
        for item in list {
            let joins = |g: &Vec<(u64, &Stream)>| {
                let last_start = g.last().map_or(f64::INFINITY, |l| l.1.first_ago);
                let first_end = g.iter().map(|l| l.1.last_ago).fold(0.0, f64::max);
                last_start - item.1.first_ago <= SCAN_GAP && item.1.first_ago > first_end + SCAN_SKEW
            };
            match groups.last_mut() {
                Some(g) if joins(g) => g.push(item),
                _ => groups.push(vec![item]),
            }
        }
        for g in groups {
            let first = g.iter().map(|s| s.1.first_ago).fold(0.0, f64::max);
            let last = g.iter().map(|s| s.1.last_ago).fold(f64::INFINITY, f64::min);
            if last > SCAN_KEPT {
                continue;
            }
            let finished = g.iter().all(|s| s.1.total > 0 && s.1.done >= s.1.total);
            let running = !finished && last < SCAN_GAP;
            let mut consumers: Vec<ConsumerView> = g
                .iter()
                .map(|(id, s)| ConsumerView {
                    id: format!("{id:016x}")[..6].to_string(),
                    done_bytes: s.done,
                    total_bytes: s.total,
                    primary_bytes: s.primary,
                    backup_bytes: s.backup,
                    from: s.from.clone(),
                })
                .collect();
            // The order partitions come in: by where each consumer's reads mostly came from.
            consumers.sort_by_key(|c| (main_source(&c.from), c.id.clone()));
            let elapsed = if running { first } else { first - last };
            let view = ScanView { dataset: dataset.to_string(), elapsed, running, ideal_seconds: None, consumers };
            scans.push((first, view));
        }
    }
    scans.sort_by(|a, b| a.0.total_cmp(&b.0));
    scans.into_iter().take(SCANS_SHOWN).map(|(_, v)| v).collect()
}

fn main_source(from: &[u64]) -> usize {
    from.iter().enumerate().max_by_key(|(i, b)| (**b, std::cmp::Reverse(*i))).map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(
        stream: u64,
        dataset: &str,
        done: u64,
        primary: u64,
        backup: u64,
        first: f64,
        last: f64,
    ) -> ConsumerActivity {
        ConsumerActivity {
            stream,
            dataset: dataset.parse().unwrap(),
            done_bytes: done,
            total_bytes: 100,
            primary_bytes: primary,
            backup_bytes: backup,
            first_secs_ago: first,
            last_secs_ago: last,
        }
    }

    #[test]
    fn streams_are_summed_over_servers_and_grouped_into_scans() {
        let per_node = vec![
            // Node 0 serves stream 1's primary and stream 2's backup; stream 9 is an older
            // scan of the same dataset (its last requests said 90 of 100), stream 5 another
            // dataset's.
            vec![
                act(1, "a", 40, 40, 0, 5.0, 0.1),
                act(2, "a", 30, 0, 10, 4.5, 0.2),
                act(9, "a", 90, 100, 0, 20.0, 12.0),
            ],
            vec![act(2, "a", 45, 40, 0, 5.2, 0.1), act(1, "a", 55, 0, 20, 4.0, 0.3), act(5, "b", 10, 10, 0, 1.0, 0.0)],
        ];
        let scans = group_scans(&per_node);
        assert_eq!(scans.len(), 3, "{scans:?}");
        // Newest first: b (started 1 s ago), then a's running scan, then a's finished one.
        assert_eq!((scans[0].dataset.as_str(), scans[0].consumers.len()), ("b", 1));
        let a = &scans[1];
        assert!(a.running);
        assert!((a.elapsed - 5.2).abs() < 1e-9);
        let ones: Vec<_> =
            a.consumers.iter().map(|c| (c.primary_bytes, c.backup_bytes, c.done_bytes, c.from.clone())).collect();
        assert_eq!(ones, [(40, 20, 60, vec![40, 20]), (40, 10, 50, vec![10, 40])]);
        let old = &scans[2];
        assert!(!old.running && (old.elapsed - 8.0).abs() < 1e-9 && old.consumers[0].fraction() == 1.0);
    }

    #[test]
    fn scans_run_back_to_back_are_two_scans() {
        // The first scan's consumers read from 5 s ago to 3.6 s ago; the second's started
        // 3.5 s ago, within SCAN_GAP of the first's starts but after they had finished.
        let per_node = vec![vec![
            act(1, "a", 100, 100, 0, 5.0, 3.6),
            act(2, "a", 100, 100, 0, 4.9, 3.7),
            act(3, "a", 10, 10, 0, 3.5, 0.1),
            act(4, "a", 10, 10, 0, 3.4, 0.1),
        ]];
        let scans = group_scans(&per_node);
        let sizes: Vec<(usize, bool)> = scans.iter().map(|s| (s.consumers.len(), s.running)).collect();
        assert_eq!(sizes, [(2, true), (2, false)]);
    }

    #[test]
    fn a_scan_idle_too_long_leaves_the_view() {
        let scans = group_scans(&[vec![act(1, "a", 100, 100, 0, 90.0, SCAN_KEPT + 1.0)]]);
        assert!(scans.is_empty());
    }
}
