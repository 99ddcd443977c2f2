//! GD-4, response-rate graduated declustering, with GD-5's primary servers (virtual-streams
//! §3.1.2 and §3.3).
//!
//! No progress is used. The consumer judges each server by how fast it answers this
//! consumer (the smoothed time from request to reply) and keeps more requests at the servers
//! that answer faster; the servers serve the consumer with the longest queue, so a consumer
//! whose other servers are slow, and which therefore queues more here, is served more.
//! Each lesson of the paper is a setting (`RateSettings`):
//! 1. a minimum of requests at every server in use keeps its pipeline full;
//! 2. no decision before `warmup_replies` replies (setup noise);
//! 3. the servers' starvation guard (`sched::GUARD_EVERY`);
//! 4. a server `slow_ratio` times slower than the fastest gets one request at a time.
//!
//! And GD-5: the primary server is preferred (its score counts `PRIMARY_WEIGHT` times), a
//! backup gets one request in `sample_every` to keep it measured, and servers run one
//! consumer's requests back to back.
//!
//! **Return to the primary (ours, virtual-streams §5).** With `return_to_primary`, as soon as
//! the primary answers as fast as the fastest backup again, backups drop back to samples
//! instead of keeping the share they earned during the fault.

use super::policy::{Pick, RateSettings, ReadPolicyKind, RoutePolicy, RouteView};
use crate::ids::NodeId;
use crate::sched::{Discipline, ProgressMetric, Service};

/// How much more a primary server's answers count. With equal servers the primary then
/// holds four fifths of the window by score alone and all of it once sampling is accounted
/// for; a backup must answer four times faster per request to earn an equal share.
pub const PRIMARY_WEIGHT: f64 = 4.0;

#[derive(Debug)]
pub struct ResponseRate {
    s: RateSettings,
    handoff: bool,
    picks: u64,
    next_sample: usize,
}

impl ResponseRate {
    pub fn new(s: RateSettings, handoff: bool) -> ResponseRate {
        ResponseRate { s, handoff, picks: 0, next_sample: 0 }
    }

    /// How many requests this consumer should keep at each holder now.
    pub fn targets(&self, view: &RouteView<'_>, holders: &[NodeId]) -> Vec<(NodeId, f64)> {
        let primary = holders[0];
        let w = view.window as f64;
        let replies: u64 = holders.iter().map(|h| view.node(*h).replies).sum();
        let latency = |n: NodeId| view.node(n).latency_secs;
        if replies < self.s.warmup_replies as u64 || latency(primary).is_none() {
            // Warm-up: everything to the primary.
            return holders.iter().map(|&h| (h, if h == primary { w } else { 0.0 })).collect();
        }
        // Per-request speed: a reply every `latency` seconds per request in flight.
        let score = |n: NodeId| {
            let s = latency(n).map_or(0.0, |l| 1.0 / l.max(1e-6));
            if n == primary { s * PRIMARY_WEIGHT } else { s }
        };
        let fastest_latency = holders.iter().filter_map(|h| latency(*h)).fold(f64::INFINITY, f64::min);
        let primary_recovered = latency(primary).is_some_and(|l| l <= fastest_latency * 1.05);
        let total: f64 = holders.iter().map(|h| score(*h)).sum();
        holders
            .iter()
            .map(|&h| {
                let mut t = if total > 0.0 { w * score(h) / total } else { 0.0 };
                if h != primary && self.s.return_to_primary && primary_recovered {
                    t = 0.0;
                }
                // A server given a real share keeps its pipeline full...
                if t >= 1.0 {
                    t = t.max(self.s.min_outstanding as f64);
                }
                // ...unless it is very slow: then one request at a time.
                if latency(h).is_some_and(|l| l > fastest_latency * self.s.slow_ratio) {
                    t = t.min(1.0);
                }
                (h, t)
            })
            .collect()
    }
}

impl RoutePolicy for ResponseRate {
    fn kind(&self) -> ReadPolicyKind {
        if self.handoff { ReadPolicyKind::GdRrHandoff } else { ReadPolicyKind::GdRr }
    }

    fn metric(&self) -> ProgressMetric {
        ProgressMetric::Bytes
    }

    fn service(&self) -> Service {
        Service { discipline: Discipline::LongestQueue, runs: true, handoff: self.handoff }
    }

    fn steals_at_end(&self) -> bool {
        true
    }

    fn notifies_progress(&self) -> bool {
        false
    }

    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        self.picks += 1;
        let backups = &holders[1..];
        // Keep every backup measured: one request in `sample_every`, to one with nothing there.
        if !backups.is_empty() && self.picks.is_multiple_of(self.s.sample_every as u64) {
            let b = backups[self.next_sample % backups.len()];
            self.next_sample += 1;
            if view.node(b).outstanding == 0 {
                return Pick::To(b);
            }
        }
        let targets = self.targets(view, holders);
        let best = targets.iter().map(|&(h, t)| (h, t - view.node(h).outstanding as f64)).fold(
            None,
            |best: Option<(NodeId, f64)>, (h, d)| match best {
                Some((_, bd)) if bd >= d => best,
                _ => Some((h, d)),
            },
        );
        match best {
            Some((h, deficit)) if deficit > 0.0 => Pick::To(h),
            _ => Pick::Hold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::policy::NodeView;
    use crate::time::Time;
    use std::collections::BTreeMap;

    const H: [NodeId; 2] = [NodeId(0), NodeId(1)];

    fn nodes(lat: [Option<f64>; 2], out: [u32; 2], replies: u64) -> BTreeMap<NodeId, NodeView> {
        (0..2)
            .map(|i| {
                (
                    NodeId(i),
                    NodeView {
                        outstanding: out[i as usize],
                        replies,
                        latency_secs: lat[i as usize],
                        ..NodeView::default()
                    },
                )
            })
            .collect()
    }

    fn view(nodes: &BTreeMap<NodeId, NodeView>) -> RouteView<'_> {
        RouteView { now: Time::ZERO, nodes, own_fraction: 0.0, block_fraction: 0.01, window: 8 }
    }

    #[test]
    fn warm_up_sends_everything_to_the_primary() {
        let n = nodes([None, None], [0, 0], 0);
        let mut p = ResponseRate::new(RateSettings::default(), false);
        for _ in 0..8 {
            assert_eq!(p.pick(&view(&n), &H), Pick::To(NodeId(0)));
        }
        let full = nodes([None, None], [8, 0], 0);
        assert_eq!(p.pick(&view(&full), &H), Pick::Hold);
    }

    #[test]
    fn with_equal_servers_the_primary_keeps_the_window() {
        let n = nodes([Some(0.1), Some(0.1)], [4, 0], 10);
        let p = ResponseRate::new(RateSettings::default(), false);
        let t = p.targets(&view(&n), &H);
        assert_eq!(t[1].1, 0.0, "the primary answers as fast: backups drop to samples");
    }

    #[test]
    fn a_slow_primary_moves_requests_to_the_faster_backup() {
        // The backup answers five times faster per request.
        let n = nodes([Some(0.5), Some(0.1)], [2, 0], 20);
        let mut p = ResponseRate::new(RateSettings { return_to_primary: false, ..RateSettings::default() }, false);
        let t = p.targets(&view(&n), &H);
        assert!(t[1].1 > t[0].1 * 0.5, "{t:?}");
        assert_eq!(p.pick(&view(&n), &H), Pick::To(NodeId(1)));
    }

    #[test]
    fn a_very_slow_server_gets_one_request_at_a_time() {
        let n = nodes([Some(0.1), Some(0.9)], [0, 0], 20);
        let p = ResponseRate::new(RateSettings { return_to_primary: false, ..RateSettings::default() }, false);
        let t = p.targets(&view(&n), &H);
        assert!(t[1].1 <= 1.0);
    }

    #[test]
    fn backups_are_sampled_now_and_then() {
        let n = nodes([Some(0.1), Some(0.1)], [1, 0], 20);
        let mut p = ResponseRate::new(RateSettings { sample_every: 4, ..RateSettings::default() }, false);
        let picks: Vec<Pick> = (0..8).map(|_| p.pick(&view(&n), &H)).collect();
        assert_eq!(picks.iter().filter(|x| **x == Pick::To(NodeId(1))).count(), 2);
    }

    #[test]
    fn the_servers_are_asked_for_longest_queue_runs_and_handoff_as_configured() {
        let p = ResponseRate::new(RateSettings::default(), true);
        assert_eq!(p.service(), Service { discipline: Discipline::LongestQueue, runs: true, handoff: true });
        assert_eq!(p.kind(), ReadPolicyKind::GdRrHandoff);
    }
}
