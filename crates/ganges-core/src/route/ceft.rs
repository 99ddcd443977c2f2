//! CW-1's write routings on mirror pairs (CEFT-PVFS, "Scheduling algorithms"): for each block
//! a writer puts, which of the two nodes holding its fragment gets it first. The other node
//! gets it afterwards by replica completion (GW-2), as in CEFT-PVFS the chosen node mirrors
//! what it received to its partner.
//!
//! - `ceft`: the paper's rule ([`crate::ceft::choose`]) on what the two nodes report of their
//!   CPUs, load, memory, network and disk (each node samples itself about once a second; the
//!   writer asks each node of its pairs for its figures as often, in probes). The paper's
//!   skipping flag drops a pair from a stripe; a ganges fragment has no other home, so a
//!   skipped pair writes to its primary node, as the always-primary baseline does.
//! - `ceft-adaptive` (ours): no thresholds. The block goes to the node of the pair that would
//!   finish it first by what the writer has measured there: its outstanding blocks plus this
//!   one, at the rate the node has been acknowledging this writer's blocks. Whatever slows a
//!   node (CPU, memory, network or disk) shows in that rate, which no threshold has to
//!   foresee. A node left unused for `explore_interval` gets one block, so a node whose
//!   trouble has passed is measured again.

use super::policy::{Pick, ProbeWhom, Probes, ReadPolicyKind, RoutePolicy, RouteView, ServerState};
use crate::ceft::{MirrorChoice, NodeLoad, choose};
use crate::ids::NodeId;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The settings of both CW-1 routings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CeftSettings {
    pub thresholds: crate::ceft::CeftThresholds,
    /// How often `ceft` asks each node of its pairs for its load (nodes sample once a second).
    pub probe_interval: Duration,
    /// How long `ceft-adaptive` leaves a node of a pair unused before it sends it one block.
    pub explore_interval: Duration,
}

impl Default for CeftSettings {
    fn default() -> Self {
        // The probe matches the nodes' own sampling: asking more often sees nothing new.
        // One block a second to a node measured slow costs little (at 32 MiB/s and 1 MiB
        // blocks, a thirtieth of a disk's second) and notices when its trouble has passed.
        CeftSettings {
            thresholds: Default::default(),
            probe_interval: Duration::from_secs(1),
            explore_interval: Duration::from_secs(1),
        }
    }
}

/// `ceft`: the paper's rule. See the module docs.
#[derive(Debug)]
pub struct Ceft {
    settings: CeftSettings,
    probes: Probes,
    loads: BTreeMap<NodeId, NodeLoad>,
}

impl Ceft {
    pub fn new(settings: CeftSettings) -> Ceft {
        Ceft { settings, probes: Probes::default(), loads: BTreeMap::new() }
    }
}

impl RoutePolicy for Ceft {
    fn kind(&self) -> ReadPolicyKind {
        ReadPolicyKind::Ceft
    }

    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        self.probes.meet(holders);
        let (i, j) = match holders {
            [i, j, ..] => (*i, *j),
            _ => return Pick::To(holders[0]),
        };
        let (Some(li), Some(lj)) = (self.loads.get(&i), self.loads.get(&j)) else {
            // Until both have reported, as the baseline does.
            return Pick::To(i);
        };
        // DISK_max: the fastest disk of the writer's nodes, as they report their rate.
        let disk_max = view
            .nodes
            .values()
            .filter_map(|n| n.disk_bytes_per_sec)
            .fold(li.disk_free_bytes_per_sec.max(lj.disk_free_bytes_per_sec), f64::max);
        match choose(li, lj, view.total_bytes, disk_max, &self.settings.thresholds) {
            MirrorChoice::I | MirrorChoice::Skip => Pick::To(i),
            MirrorChoice::J => Pick::To(j),
        }
    }

    fn on_state(&mut self, _now: Time, node: NodeId, state: &ServerState) {
        if let Some(l) = state.node_load {
            self.loads.insert(node, l);
        }
    }

    fn poll_probe(&mut self, view: &RouteView<'_>) -> Option<NodeId> {
        self.probes.due(view, self.settings.probe_interval, ProbeWhom::All)
    }
}

/// `ceft-adaptive`: measured service rates instead of thresholds. See the module docs.
#[derive(Debug)]
pub struct CeftAdaptive {
    settings: CeftSettings,
    last_sent: BTreeMap<NodeId, Time>,
}

impl CeftAdaptive {
    pub fn new(settings: CeftSettings) -> CeftAdaptive {
        CeftAdaptive { settings, last_sent: BTreeMap::new() }
    }

    /// Seconds until `node` would have finished one more block of `block_bytes`, by this
    /// writer's measurements; `None` before it has acknowledged anything.
    fn finish_secs(view: &RouteView<'_>, node: NodeId, block_bytes: f64) -> Option<f64> {
        let v = view.node(node);
        let rate = v.rate_bytes_per_sec.filter(|r| *r > 0.0)?;
        Some((v.outstanding as f64 + 1.0) * block_bytes / rate)
    }
}

impl RoutePolicy for CeftAdaptive {
    fn kind(&self) -> ReadPolicyKind {
        ReadPolicyKind::CeftAdaptive
    }

    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        let now = view.now;
        let pair = &holders[..holders.len().min(2)];
        let block = view.block_bytes();
        // A node of the pair left unused for a while is measured again with one block.
        let stale = pair.iter().copied().find(|&h| {
            view.node(h).outstanding == 0
                && self.last_sent.get(&h).is_some_and(|t| now.since(*t) >= self.settings.explore_interval)
        });
        let to = stale.unwrap_or_else(|| {
            // A node not yet measured is tried (with nothing of ours there yet) before the
            // measured ones are compared; ties go to the primary (the first holder).
            let unmeasured = pair
                .iter()
                .copied()
                .find(|&h| Self::finish_secs(view, h, block).is_none() && view.node(h).outstanding == 0);
            unmeasured.unwrap_or_else(|| {
                let key =
                    |h: NodeId| (Self::finish_secs(view, h, block).unwrap_or(f64::INFINITY), view.node(h).outstanding);
                pair.iter().copied().fold(pair[0], |best, h| if key(h) < key(best) { h } else { best })
            })
        });
        self.last_sent.insert(to, now);
        Pick::To(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ceft::NodeLoad;
    use crate::route::NodeView;

    const MB: f64 = 1e6;
    const P: [NodeId; 2] = [NodeId(0), NodeId(1)];

    fn view(nodes: &BTreeMap<NodeId, NodeView>, now_ms: u64) -> RouteView<'_> {
        RouteView {
            now: Time::ZERO + Duration::from_millis(now_ms),
            block_fraction: 1.0 / 64.0,
            total_bytes: 64 << 20,
            ..RouteView::test(nodes)
        }
    }

    fn idle() -> NodeLoad {
        NodeLoad {
            cpu_min_busy: 0.05,
            load: 0.1,
            mem_free_bytes: 8 << 30,
            net_free_bytes_per_sec: 100.0 * MB,
            disk_free_bytes_per_sec: 32.0 * MB,
        }
    }

    fn told(p: &mut Ceft, node: NodeId, l: NodeLoad) {
        p.on_state(Time::ZERO, node, &ServerState { node_load: Some(l), ..ServerState::default() });
    }

    #[test]
    fn ceft_writes_to_the_primary_until_both_nodes_report_then_follows_the_rule() {
        let nodes = BTreeMap::new();
        let mut p = Ceft::new(CeftSettings::default());
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[0]));
        told(&mut p, P[1], idle());
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[0]), "one report is not enough");
        // A saturated primary: the mirror gets the data first.
        told(&mut p, P[0], NodeLoad { cpu_min_busy: 1.0, load: 4.0, ..idle() });
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[1]));
        // A busier network on the mirror, the primary's CPU fine again: the primary.
        told(&mut p, P[0], idle());
        told(&mut p, P[1], NodeLoad { net_free_bytes_per_sec: 40.0 * MB, ..idle() });
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[0]));
        // Both saturated: the paper skips the pair; here the primary takes it.
        let hot = NodeLoad { cpu_min_busy: 1.0, load: 4.0, ..idle() };
        told(&mut p, P[0], hot);
        told(&mut p, P[1], hot);
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[0]));
        // A single holder (the other is down) is always the answer.
        assert_eq!(p.pick(&view(&nodes, 0), &P[1..]), Pick::To(P[1]));
    }

    #[test]
    fn ceft_asks_every_node_of_its_pairs_once_per_interval_busy_or_not() {
        let mut nodes = BTreeMap::new();
        nodes.insert(P[0], NodeView { outstanding: 3, ..NodeView::default() });
        let mut p = Ceft::new(CeftSettings::default());
        assert_eq!(p.poll_probe(&view(&nodes, 0)), None, "no pair met yet");
        p.pick(&view(&nodes, 0), &P);
        let asked: Vec<_> = std::iter::from_fn(|| p.poll_probe(&view(&nodes, 0))).collect();
        assert_eq!(asked, P.to_vec(), "the busy primary is asked too");
        assert_eq!(p.poll_probe(&view(&nodes, 999)), None);
        assert_eq!(p.poll_probe(&view(&nodes, 1000)), Some(P[0]));
    }

    #[test]
    fn ceft_takes_disk_max_from_the_fastest_reported_disk() {
        // Both short of memory: the slower of disk and network decides, and a pair whose
        // disks both have at most half of DISK_max free is skipped (to the primary).
        let short = |disk: f64| NodeLoad { mem_free_bytes: 1 << 20, disk_free_bytes_per_sec: disk * MB, ..idle() };
        let mut nodes = BTreeMap::new();
        let mut p = Ceft::new(CeftSettings::default());
        told(&mut p, P[0], short(10.0));
        told(&mut p, P[1], short(14.0));
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[1]), "DISK_max is 14 MB/s: not skipped");
        nodes.insert(NodeId(7), NodeView { disk_bytes_per_sec: Some(32.0 * MB), ..NodeView::default() });
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[0]), "DISK_max 32 MB/s: both at most half, skipped");
    }

    fn measured(rate_mb: f64, outstanding: u32) -> NodeView {
        NodeView { outstanding, rate_bytes_per_sec: Some(rate_mb * MB), ..NodeView::default() }
    }

    #[test]
    fn adaptive_sends_where_the_block_would_finish_first() {
        let mut p = CeftAdaptive::new(CeftSettings::default());
        let mut nodes = BTreeMap::new();
        // Nothing measured: the primary first, then the unmeasured mirror.
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[0]));
        nodes.insert(P[0], measured(32.0, 1));
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[1]));
        // Equal rates: the shorter queue; equal queues: the primary.
        nodes.insert(P[1], measured(32.0, 2));
        assert_eq!(p.pick(&view(&nodes, 10), &P), Pick::To(P[0]));
        nodes.insert(P[1], measured(32.0, 1));
        assert_eq!(p.pick(&view(&nodes, 10), &P), Pick::To(P[0]));
        // The primary at a quarter of the mirror's rate: the mirror, until its queue is four
        // times as long.
        nodes.insert(P[0], measured(8.0, 1));
        nodes.insert(P[1], measured(32.0, 6));
        assert_eq!(p.pick(&view(&nodes, 20), &P), Pick::To(P[1]), "7 blocks at 32 beat 2 at 8");
        nodes.insert(P[1], measured(32.0, 8));
        assert_eq!(p.pick(&view(&nodes, 20), &P), Pick::To(P[0]), "9 blocks at 32 lose to 2 at 8");
    }

    #[test]
    fn adaptive_measures_a_node_again_after_leaving_it_unused() {
        let mut p = CeftAdaptive::new(CeftSettings::default());
        let mut nodes = BTreeMap::new();
        nodes.insert(P[0], measured(4.0, 0));
        nodes.insert(P[1], measured(32.0, 0));
        assert_eq!(p.pick(&view(&nodes, 0), &P), Pick::To(P[1]));
        // Never sent to the slow primary yet: nothing to refresh.
        assert_eq!(p.pick(&view(&nodes, 5_000), &P), Pick::To(P[1]));
        p.last_sent.insert(P[0], Time::ZERO);
        assert_eq!(p.pick(&view(&nodes, 999), &P), Pick::To(P[1]));
        assert_eq!(p.pick(&view(&nodes, 1_000), &P), Pick::To(P[0]), "a second unused: one block");
        assert_eq!(p.pick(&view(&nodes, 1_001), &P), Pick::To(P[1]));
        // With a block of ours still there, it is not sent another.
        nodes.insert(P[0], measured(4.0, 1));
        assert_eq!(p.pick(&view(&nodes, 9_000), &P), Pick::To(P[1]));
    }
}
