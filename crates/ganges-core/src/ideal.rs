//! The two ideals every benchmark is measured against (docs/design.md, "The ideals").
//!
//! **MOD-1, River's model** (river §4.1). The aggregate bound: with server rates B_s after
//! faults, `T_river = bytes / sum(B_s)`, as if any server could serve any byte. [`Spectrum`]
//! gives River's piecewise-linear performance-availability spectrum for a resource with
//! application utilisation U_app and fault utilisation U_fault.
//!
//! **MOD-2, the layout-aware ideal.** A consumer can only be served by servers holding a
//! copy of its bytes. T is feasible if this flow routes every byte: source -> (consumer i,
//! fragment j) with capacity = bytes of j in i's partition -> each server holding a copy of j
//! (unbounded) -> sink with capacity `B_s * T`. By max-flow/min-cut, T is feasible iff for
//! every set X of (consumer, fragment) demands, `T * B(N(X)) >= bytes(X)`, where N(X) are the
//! servers holding X's fragments; so `T* = max_X bytes(X) / B(N(X))`.
//!
//! We find T* exactly by Dinkelbach's iteration: start from the lower bound `bytes / B(all)`;
//! while the flow at T cannot route everything, the min cut names a set X with
//! `T * B(N(X)) < bytes(X)`; move T up to that ratio. Each step strictly raises T through a
//! finite set of cut ratios, so it stops, and it stops at a ratio of a real cut, which is T*.
//! The final cut also names the bottleneck: which consumers and servers set the time.
//!
//! Max-flow is Dinic's algorithm on f64 capacities, written here because the graphs are small
//! (one node per demand and per server), we need the residual cut and not just the value,
//! and the flow crates on crates.io take integer capacities or pull in a graph library.

use crate::ids::{ConsumerId, FragmentId, NodeId};
use crate::layout::Layout;
use crate::shape::{Partition, Shape, ShapeError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// MOD-1: the time to move `total_bytes` at the sum of the servers' rates.
pub fn river_ideal_seconds(total_bytes: u64, rates: &[f64]) -> f64 {
    let sum: f64 = rates.iter().sum();
    if sum <= 0.0 { f64::INFINITY } else { total_bytes as f64 / sum }
}

/// River's performance-availability spectrum (river §4.1, Figure 8).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spectrum {
    /// Number of components.
    pub n: u32,
    /// Fraction of each component the application uses unperturbed (1 for an I/O-bound scan).
    pub u_app: f64,
    /// Fraction of a faulty component the fault takes (0.5 for a fault factor of 0.5).
    pub u_fault: f64,
}

impl Spectrum {
    /// Faults the ideal system absorbs with no loss. From river's derivation
    /// `n * U_app + x_loss * U_fault = n`, so `x_loss = n * (1 - U_app) / U_fault`, at least 0.
    /// (The paper's printed closed form, `(1 - U_app / U_fault) * n`, contradicts both this
    /// derivation and its own worked example, x_loss = 8 for n = 16, U_app = 0.75,
    /// U_fault = 0.5; we follow the derivation.)
    pub fn x_loss(&self) -> f64 {
        if self.u_fault <= 0.0 {
            return f64::INFINITY;
        }
        (self.n as f64 * (1.0 - self.u_app) / self.u_fault).max(0.0)
    }

    /// Performance with all n components faulty: `(1 - U_fault) / U_app`, at most 1.
    pub fn y_n(&self) -> f64 {
        ((1.0 - self.u_fault) / self.u_app).min(1.0)
    }

    /// Ideal performance with `x` faults, as a fraction of the fault-free ideal.
    pub fn y(&self, x: f64) -> f64 {
        let (x_loss, n) = (self.x_loss(), self.n as f64);
        if x <= x_loss || x_loss >= n { 1.0 } else { 1.0 + (self.y_n() - 1.0) / (n - x_loss) * (x - x_loss) }
    }
}

/// Bytes consumer `consumer` must read from fragment `fragment`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    pub consumer: ConsumerId,
    pub fragment: FragmentId,
    pub bytes: u64,
}

/// The demands of a scan where consumer i reads `partitions[i]`.
pub fn scan_demands(shape: &Shape, partitions: &[Partition]) -> Result<Vec<Demand>, ShapeError> {
    read_demands(shape, partitions.iter().map(std::slice::from_ref))
}

/// The demands of a read where consumer i reads the ranges of `reads[i]` (random blocks,
/// say), each fragment's bytes summed per consumer.
pub fn read_demands<'a>(
    shape: &Shape,
    reads: impl IntoIterator<Item = &'a [Partition]>,
) -> Result<Vec<Demand>, ShapeError> {
    let mut bytes: BTreeMap<(u32, FragmentId), u64> = BTreeMap::new();
    for (i, ranges) in (0..).zip(reads) {
        for p in ranges {
            for (fragment, b) in shape.partition_demand(*p)? {
                *bytes.entry((i, fragment)).or_default() += b;
            }
        }
    }
    Ok(bytes.into_iter().map(|((i, fragment), bytes)| Demand { consumer: ConsumerId(i), fragment, bytes }).collect())
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutIdeal {
    pub seconds: f64,
    /// The consumers whose demand sets the time (the bottleneck cut).
    pub bottleneck_consumers: Vec<ConsumerId>,
    /// The servers that bound them.
    pub bottleneck_nodes: Vec<NodeId>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IdealError {
    #[error("{consumer} needs {fragment}, but every server holding it has rate 0")]
    Unservable { consumer: ConsumerId, fragment: FragmentId },
    #[error("a server rate is negative or not a number")]
    BadRate,
}

/// MOD-2: the smallest time in which every demand can be served by the servers holding a
/// copy, each server `s` delivering at most `rates[s]` bytes per second.
pub fn layout_ideal(demands: &[Demand], layout: &Layout, rates: &[f64]) -> Result<LayoutIdeal, IdealError> {
    if rates.iter().any(|r| r.is_nan() || *r < 0.0) {
        return Err(IdealError::BadRate);
    }
    let demands: Vec<Demand> = demands.iter().copied().filter(|d| d.bytes > 0).collect();
    if demands.is_empty() {
        return Ok(LayoutIdeal { seconds: 0.0, bottleneck_consumers: vec![], bottleneck_nodes: vec![] });
    }
    let holders: Vec<Vec<usize>> =
        demands.iter().map(|d| layout.holders(d.fragment).iter().map(|n| n.index()).collect()).collect();
    for (d, h) in demands.iter().zip(&holders) {
        if h.iter().all(|&s| rates.get(s).copied().unwrap_or(0.0) <= 0.0) {
            return Err(IdealError::Unservable { consumer: d.consumer, fragment: d.fragment });
        }
    }
    let total: f64 = demands.iter().map(|d| d.bytes as f64).sum();
    let used: BTreeSet<usize> = holders.iter().flatten().copied().collect();
    let b_used: f64 = used.iter().map(|&s| rates[s]).sum();

    let mut t = total / b_used;
    // The cut whose ratio is the current t: at first every demand and every server used.
    let mut bottleneck: (Vec<usize>, BTreeSet<usize>) = ((0..demands.len()).collect(), used);
    // Each iteration strictly raises t through the finite set of cut ratios; the bound is
    // far above what any real layout needs and stops a numerical bug from spinning forever.
    for _ in 0..10_000 {
        let (flow, cut) = max_flow(&demands, &holders, rates, t);
        if flow >= total * (1.0 - 1e-12) {
            break;
        }
        let bytes_x: f64 = cut.iter().map(|&i| demands[i].bytes as f64).sum();
        let nbrs: BTreeSet<usize> = cut.iter().flat_map(|&i| holders[i].iter().copied()).collect();
        let b_x: f64 = nbrs.iter().map(|&s| rates[s]).sum();
        let next = bytes_x / b_x;
        if next <= t * (1.0 + 1e-12) {
            // Numerically converged: the cut's ratio is t itself.
            break;
        }
        t = next;
        bottleneck = (cut, nbrs);
    }
    let consumers: BTreeSet<ConsumerId> = bottleneck.0.iter().map(|&i| demands[i].consumer).collect();
    Ok(LayoutIdeal {
        seconds: t,
        bottleneck_consumers: consumers.into_iter().collect(),
        bottleneck_nodes: bottleneck.1.iter().map(|&s| NodeId(s as u32)).collect(),
    })
}

/// A schedule that meets MOD-2: for each demand, the bytes each holder serves.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub seconds: f64,
    /// Per demand (in the order given), `(server, bytes)` for each of its holders.
    pub flows: Vec<Vec<(NodeId, f64)>>,
}

/// A flow that meets [`layout_ideal`]'s time, reading primary copies as much as it can.
///
/// The flow network of MOD-2 at `T*` (slightly above, so rounding cannot leave a byte
/// unrouted) is filled in two rounds: first with primary-copy edges only, then with every
/// copy. Augmenting paths of the second round may shift some primary flow to backups to make
/// room, so the result is not the least-backup flow in general, but on chains and mirrors it
/// leaves a demand on its primary whenever the faults do not need otherwise, which is what
/// keeps a plan's reads from seeking between two files with no fault (gd-plan).
pub fn plan(demands: &[Demand], layout: &Layout, rates: &[f64]) -> Result<Plan, IdealError> {
    let ideal = layout_ideal(demands, layout, rates)?;
    let t = ideal.seconds * (1.0 + 1e-9);
    let holders: Vec<Vec<usize>> =
        demands.iter().map(|d| layout.holders(d.fragment).iter().map(|n| n.index()).collect()).collect();
    let servers: BTreeSet<usize> = holders.iter().flatten().copied().collect();
    let server_node: BTreeMap<usize, usize> =
        servers.iter().enumerate().map(|(i, &s)| (s, 2 + demands.len() + i)).collect();
    let (source, sink) = (0, 1);
    let mut g = Dinic::new(2 + demands.len() + servers.len());
    for &s in &servers {
        g.add_edge(server_node[&s], sink, rates[s] * t);
    }
    // edge[i][h]: the index of demand i's edge to its h-th holder.
    let mut edge: Vec<Vec<usize>> = vec![vec![]; demands.len()];
    for (i, d) in demands.iter().enumerate() {
        g.add_edge(source, 2 + i, d.bytes as f64);
        if let Some(&p) = holders[i].first() {
            edge[i].push(g.edges.len());
            g.add_edge(2 + i, server_node[&p], f64::INFINITY);
        }
    }
    g.run(source, sink);
    for (i, h) in holders.iter().enumerate() {
        for s in h.iter().skip(1) {
            edge[i].push(g.edges.len());
            g.add_edge(2 + i, server_node[s], f64::INFINITY);
        }
    }
    g.run(source, sink);
    let flows = holders
        .iter()
        .zip(&edge)
        .map(|(h, es)| h.iter().zip(es).map(|(&s, &e)| (NodeId(s as u32), g.edges[e ^ 1].cap)).collect())
        .collect();
    Ok(Plan { seconds: ideal.seconds, flows })
}

/// Max-flow of the MOD-2 network at time `t`, and the demands on the source side of the
/// min cut (those whose bytes cannot all be routed).
fn max_flow(demands: &[Demand], holders: &[Vec<usize>], rates: &[f64], t: f64) -> (f64, Vec<usize>) {
    let servers: BTreeSet<usize> = holders.iter().flatten().copied().collect();
    let server_node: BTreeMap<usize, usize> =
        servers.iter().enumerate().map(|(i, &s)| (s, 2 + demands.len() + i)).collect();
    let (source, sink) = (0, 1);
    let mut g = Dinic::new(2 + demands.len() + servers.len());
    for (i, d) in demands.iter().enumerate() {
        g.add_edge(source, 2 + i, d.bytes as f64);
        for s in &holders[i] {
            g.add_edge(2 + i, server_node[s], f64::INFINITY);
        }
    }
    for &s in &servers {
        g.add_edge(server_node[&s], sink, rates[s] * t);
    }
    let flow = g.run(source, sink);
    let reach = g.reachable(source);
    (flow, (0..demands.len()).filter(|i| reach[2 + i]).collect())
}

#[derive(Debug)]
struct Edge {
    to: usize,
    cap: f64,
}

/// Dinic's max-flow on f64 capacities. Residual capacities below `EPS` relative to the
/// largest finite capacity count as saturated, so rounding cannot loop forever.
#[derive(Debug)]
struct Dinic {
    edges: Vec<Edge>,
    adj: Vec<Vec<usize>>,
    level: Vec<i32>,
    next: Vec<usize>,
    eps: f64,
}

impl Dinic {
    fn new(n: usize) -> Dinic {
        Dinic { edges: vec![], adj: vec![vec![]; n], level: vec![], next: vec![], eps: 0.0 }
    }

    fn add_edge(&mut self, from: usize, to: usize, cap: f64) {
        if cap.is_finite() {
            self.eps = self.eps.max(cap * 1e-13);
        }
        self.adj[from].push(self.edges.len());
        self.edges.push(Edge { to, cap });
        self.adj[to].push(self.edges.len());
        self.edges.push(Edge { to: from, cap: 0.0 });
    }

    fn bfs(&mut self, s: usize, t: usize) -> bool {
        self.level = vec![-1; self.adj.len()];
        self.level[s] = 0;
        let mut q = VecDeque::from([s]);
        while let Some(u) = q.pop_front() {
            for &e in &self.adj[u] {
                let v = self.edges[e].to;
                if self.edges[e].cap > self.eps && self.level[v] < 0 {
                    self.level[v] = self.level[u] + 1;
                    q.push_back(v);
                }
            }
        }
        self.level[t] >= 0
    }

    fn dfs(&mut self, u: usize, t: usize, pushed: f64) -> f64 {
        if u == t {
            return pushed;
        }
        while self.next[u] < self.adj[u].len() {
            let e = self.adj[u][self.next[u]];
            let v = self.edges[e].to;
            if self.edges[e].cap > self.eps && self.level[v] == self.level[u] + 1 {
                let got = self.dfs(v, t, pushed.min(self.edges[e].cap));
                if got > 0.0 {
                    self.edges[e].cap -= got;
                    self.edges[e ^ 1].cap += got;
                    return got;
                }
            }
            self.next[u] += 1;
        }
        0.0
    }

    fn run(&mut self, s: usize, t: usize) -> f64 {
        let mut flow = 0.0;
        while self.bfs(s, t) {
            self.next = vec![0; self.adj.len()];
            loop {
                let f = self.dfs(s, t, f64::INFINITY);
                if f <= 0.0 {
                    break;
                }
                flow += f;
            }
        }
        flow
    }

    fn reachable(&self, s: usize) -> Vec<bool> {
        let mut seen = vec![false; self.adj.len()];
        seen[s] = true;
        let mut q = VecDeque::from([s]);
        while let Some(u) = q.pop_front() {
            for &e in &self.adj[u] {
                let v = self.edges[e].to;
                if self.edges[e].cap > self.eps && !seen[v] {
                    seen[v] = true;
                    q.push_back(v);
                }
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{FaultLayout, place};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn read_demands_sum_each_consumers_ranges_per_fragment() {
        let shape = Shape::uniform(3, 4 * 4096, 4096).unwrap();
        let block = |f: u64, b: u64| Partition { offset: (f * 4 + b) * 4096, len: 4096 };
        // Consumer 0 reads block 1 of fragment 2 twice and a range across fragments 0 and 1;
        // consumer 1 one block of fragment 0.
        let across = Partition { offset: 3 * 4096, len: 2 * 4096 };
        let reads = [vec![block(2, 1), across, block(2, 1)], vec![block(0, 0)]];
        let d = read_demands(&shape, reads.iter().map(Vec::as_slice)).unwrap();
        let got: Vec<(u32, u32, u64)> = d.iter().map(|d| (d.consumer.0, d.fragment.0, d.bytes)).collect();
        assert_eq!(got, vec![(0, 0, 4096), (0, 1, 4096), (0, 2, 8192), (1, 0, 4096)]);
        // A scan's demands are the same with one range each.
        let parts = shape.fragment_partitions();
        let one_each: Vec<Vec<Partition>> = parts.iter().map(|p| vec![*p]).collect();
        assert_eq!(
            scan_demands(&shape, &parts).unwrap(),
            read_demands(&shape, one_each.iter().map(Vec::as_slice)).unwrap()
        );
    }

    /// n fragments of `bytes` each, consumer i reads fragment i, chained layout with r copies.
    fn scan(n: u32, r: u32, bytes: u64, rates: &[f64]) -> LayoutIdeal {
        let shape = Shape::uniform(n, bytes, 4096).unwrap();
        let demands = scan_demands(&shape, &shape.fragment_partitions()).unwrap();
        layout_ideal(&demands, &Layout::chained(n, r).unwrap(), rates).unwrap()
    }

    fn uniform_plan(n: u32, rates: &[f64]) -> Plan {
        let shape = Shape::uniform(n, 1 << 20, 4096).unwrap();
        let demands = scan_demands(&shape, &shape.fragment_partitions()).unwrap();
        plan(&demands, &Layout::chained(n, 2).unwrap(), rates).unwrap()
    }

    #[test]
    fn a_plan_routes_every_byte_within_every_server_s_rate() {
        let mut rates = vec![1e6; 16];
        rates[3] = 0.5e6;
        rates[9] = 0.25e6;
        let p = uniform_plan(16, &rates);
        let mut load = [0.0; 16];
        for f in &p.flows {
            let got: f64 = f.iter().map(|(_, b)| b).sum();
            assert!(close(got, (1 << 20) as f64), "{got}");
            for (n, b) in f {
                assert!(*b >= 0.0);
                load[n.index()] += b;
            }
        }
        for (s, l) in load.iter().enumerate() {
            assert!(*l <= rates[s] * p.seconds * (1.0 + 1e-6), "server {s}: {l} in {}", p.seconds);
        }
    }

    #[test]
    fn with_no_fault_a_plan_reads_only_primaries() {
        let p = uniform_plan(8, &[1e6; 8]);
        for f in &p.flows {
            assert!(f[1].1 < 1e-3, "{f:?}");
        }
    }

    #[test]
    fn one_slow_disk_s_deficit_goes_round_the_ring() {
        // One disk at half speed among 16: every disk ends together, each carrying
        // 1/15.5 of the work; the slow disk's consumer reads 0.484 of its fragment from its
        // backup, each hop 1/31 less, and one consumer reads nothing from its backup.
        let mut rates = vec![1.0; 16];
        rates[0] = 0.5;
        let p = uniform_plan(16, &rates);
        let mb = (1 << 20) as f64;
        let backup: Vec<f64> = p.flows.iter().map(|f| f[1].1 / mb).collect();
        assert!((backup[0] - 15.0 / 31.0).abs() < 1e-6, "{backup:?}");
        for k in 1..16 {
            assert!((backup[k] - (15.0 - k as f64) / 31.0).abs() < 1e-6, "{backup:?}");
        }
    }

    #[test]
    fn river_spectrum_matches_the_papers_worked_example() {
        // river §4.1: 16 CPUs, U_app = 0.75, U_fault = 0.5: x_loss = 8 and y_n = 2/3.
        let s = Spectrum { n: 16, u_app: 0.75, u_fault: 0.5 };
        assert!(close(s.x_loss(), 8.0));
        assert!(close(s.y_n(), 2.0 / 3.0));
        assert!(close(s.y(8.0), 1.0));
        assert!(close(s.y(12.0), 1.0 - (1.0 / 3.0) / 2.0));
        // U_app + U_fault < 1: no loss even with every component faulty.
        let s = Spectrum { n: 16, u_app: 0.25, u_fault: 0.5 };
        assert!(s.x_loss() > 16.0);
        assert!(close(s.y(16.0), 1.0));
        // I/O-bound scan with faults taking half a disk: any fault costs, linearly to 1/2.
        let s = Spectrum { n: 16, u_app: 1.0, u_fault: 0.5 };
        assert_eq!(s.x_loss(), 0.0);
        assert!(close(s.y_n(), 0.5));
        assert!(close(s.y(8.0), 0.75));
    }

    #[test]
    fn river_ideal_is_bytes_over_aggregate_rate() {
        assert!(close(river_ideal_seconds(100, &[10.0, 30.0]), 2.5));
        assert_eq!(river_ideal_seconds(1, &[0.0]), f64::INFINITY);
    }

    /// Without faults, the layout-aware ideal equals River's.
    #[test]
    fn no_faults_means_both_ideals_agree() {
        let rates = vec![1.0; 8];
        let got = scan(8, 2, 1000, &rates);
        assert!(close(got.seconds, 1000.0));
    }

    /// river Figure 7, worked by hand: 4 nodes, 2 copies, node 0 at half rate B/2. The
    /// aggregate is 3.5B; every consumer can get 7/8 B, since the slow node's two consumers
    /// (0 and 3) borrow from nodes 1 and 3, who lend to 1 and 2 in turn. T = F / (7B/8).
    #[test]
    fn one_slow_node_of_four_is_absorbed_by_its_neighbours() {
        let got = scan(4, 2, 7000, &[0.5, 1.0, 1.0, 1.0]);
        assert!(close(got.seconds, 8000.0), "{got:?}");
    }

    /// Three adjacent faults with two copies (river §5.2, "worst" layout), by hand: 8 nodes,
    /// nodes 0-2 at half rate, fragments of F = 3000. Consumers 0 and 1 can only use nodes
    /// 0, 1 and 2, which give 1.5 B/s together, so T >= 2F / 1.5 = 4000 s; River's aggregate
    /// bound is 8F / 6.5 = 3692 s. No other set of consumers is worse (checked by the
    /// brute-force test below), so the layout-aware ideal is 4000 s.
    #[test]
    fn adjacent_faults_hit_both_copies() {
        let mut rates = vec![1.0; 8];
        rates[..3].fill(0.5);
        let got = scan(8, 2, 3000, &rates);
        assert!(close(got.seconds, 4000.0), "{got:?}");
        assert_eq!(got.bottleneck_consumers, vec![ConsumerId(0), ConsumerId(1)]);
        assert_eq!(got.bottleneck_nodes, vec![NodeId(0), NodeId(1), NodeId(2)]);
        assert!(close(river_ideal_seconds(8 * 3000, &rates), 24000.0 / 6.5));
    }

    /// With full replication (R = N), any server can serve anything: MOD-2 = MOD-1.
    #[test]
    fn full_replication_reaches_the_river_ideal() {
        let rates = [0.2, 1.0, 0.7, 0.1];
        let got = scan(4, 4, 1000, &rates);
        assert!(close(got.seconds, river_ideal_seconds(4000, &rates)));
    }

    /// One copy: each consumer is bound by its own server; the slowest sets the time.
    #[test]
    fn no_replication_is_bound_by_the_slowest_server() {
        let got = scan(4, 1, 1000, &[1.0, 0.25, 1.0, 1.0]);
        assert!(close(got.seconds, 4000.0));
        assert_eq!(got.bottleneck_consumers, vec![ConsumerId(1)]);
        assert_eq!(got.bottleneck_nodes, vec![NodeId(1)]);
    }

    /// Best placement at R = 2 tolerates up to N/2 faults at River's ideal; the worst does not.
    #[test]
    fn placement_matters_with_limited_replication() {
        let n = 16;
        for f in [1u32, 2, 4, 8] {
            let mut rates = vec![1.0; n as usize];
            for node in place(FaultLayout::Best, n, f, 0) {
                rates[node.index()] = 0.5;
            }
            let got = scan(n, 2, 1000, &rates);
            let river = river_ideal_seconds(16_000, &rates);
            assert!(close(got.seconds, river), "best, {f} faults");
        }
        let mut rates = vec![1.0; n as usize];
        for node in place(FaultLayout::Worst, n, 4, 0) {
            rates[node.index()] = 0.5;
        }
        let got = scan(n, 2, 1000, &rates);
        assert!(got.seconds > river_ideal_seconds(16_000, &rates) * 1.01);
    }

    #[test]
    fn unequal_partitions_finish_together() {
        // Two fragments of 1000 and 3000 bytes on two nodes, fully replicated: 4000 bytes at
        // 2 B/s is 2000 s, and the big consumer gets three times the rate.
        let shape = Shape::new(vec![1000, 3000], 4096).unwrap();
        let demands = scan_demands(&shape, &shape.fragment_partitions()).unwrap();
        let got = layout_ideal(&demands, &Layout::chained(2, 2).unwrap(), &[1.0, 1.0]).unwrap();
        assert!(close(got.seconds, 2000.0));
        // Without replication the big fragment's server alone sets the time.
        let got = layout_ideal(&demands, &Layout::chained(2, 1).unwrap(), &[1.0, 1.0]).unwrap();
        assert!(close(got.seconds, 3000.0));
    }

    #[test]
    fn dead_copies_are_an_error() {
        let shape = Shape::uniform(2, 10, 4096).unwrap();
        let demands = scan_demands(&shape, &shape.fragment_partitions()).unwrap();
        let err = layout_ideal(&demands, &Layout::chained(2, 1).unwrap(), &[1.0, 0.0]).unwrap_err();
        assert_eq!(err, IdealError::Unservable { consumer: ConsumerId(1), fragment: FragmentId(1) });
        assert_eq!(layout_ideal(&demands, &Layout::chained(2, 1).unwrap(), &[1.0, f64::NAN]), Err(IdealError::BadRate));
    }

    /// A random cross-check: the exact answer is a feasible time and no set of demands can
    /// beat it (brute force over all subsets of a small instance).
    #[test]
    fn exact_answer_matches_brute_force_over_cuts() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for _ in 0..200 {
            let n = rng.random_range(2..=6u32);
            let r = rng.random_range(1..=n.min(3));
            let sizes: Vec<u64> = (0..n).map(|_| rng.random_range(1..5000)).collect();
            let rates: Vec<f64> = (0..n).map(|_| rng.random_range(0.1..2.0)).collect();
            let shape = Shape::new(sizes, 4096).unwrap();
            let layout = Layout::chained(n, r).unwrap();
            let demands = scan_demands(&shape, &shape.fragment_partitions()).unwrap();
            let got = layout_ideal(&demands, &layout, &rates).unwrap();
            let mut best: f64 = 0.0;
            for mask in 1u32..(1 << demands.len()) {
                let mut bytes = 0.0;
                let mut nb = BTreeSet::new();
                for (i, d) in demands.iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        bytes += d.bytes as f64;
                        nb.extend(layout.holders(d.fragment).iter().map(|x| x.index()));
                    }
                }
                best = best.max(bytes / nb.iter().map(|&s| rates[s]).sum::<f64>());
            }
            assert!(close(got.seconds, best), "{} vs brute force {}", got.seconds, best);
        }
    }
}
