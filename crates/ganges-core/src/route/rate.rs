//! GD-4, response-rate graduated declustering, with GD-5's primary servers (virtual-streams
//! §3.1.2 and §3.3).
//!
//! The paper's servers serve the consumer with the longest queue (so a consumer that needs a
//! server more, and queues more there, is served more), and every few picks the one furthest
//! behind by the progress its requests carried or it has told them since (the guard), and
//! run one consumer's requests back to back. Ours guard every pick by default
//! (`sched::GUARD_EVERY`: the `guard_every` setting gives the paper's back): the longer
//! queue belongs to whoever moved more reads there, which is not who needs the disk most.
//! The consumer side routes by disk speeds and answer times, and uses progress only to
//! catch up:
//!
//! - **Primary server (GD-5).** While nothing is wrong, every request goes to the primary
//!   server: most data (the paper's 99%; here all) comes from the primary and no disk
//!   alternates between files. Every server of the layout, backups and others, is measured
//!   by asking it for its state (which carries its measured disk speed) at once and every
//!   `probe_interval`.
//! - **Trouble** is read off the replies, which carry each request's time on the server's
//!   disk: the primary's *disk* is slow (its speed, and what it delivers us, more than
//!   `TROUBLE` below the fastest holder's disk, or `FAR_BELOW` the cluster's healthy disks:
//!   see "Slow against the cluster"), or the primary is *contended*: it holds a
//!   neighbour's requests that came to it for help while a backup has fewer waiting, or,
//!   with nobody else queued there, it delivers to us `UNSEEN_CONTENTION` below what its
//!   disk can do for a probe interval (a slow link). A decision waits for `warmup_replies`
//!   replies (lesson 3: no decision on setup noise).
//! - **In trouble (GD-4)** the consumer keeps a window per holder (ours), split over the
//!   holders in proportion to how fast each answered this consumer (replies per second while
//!   it had requests there; equal to start with), so more requests go where answers come
//!   faster, and a server that needs us, by longest queue, serves us more. Every server in
//!   use keeps at least `min_outstanding` requests (lesson 1: full pipelines); a server
//!   `slow_ratio` times slower than the fastest gets one at a time (lesson 5).
//! - **Catching up (ours).** Answer speeds balance rates, not progress: a consumer found in
//!   trouble a few tenths of a second into a scan, behind its neighbours by what its slow
//!   disk did not deliver meanwhile, then read at its fair rate and finished that far behind
//!   them. So in trouble a backup whose own reader (the least progress its server reports of
//!   its primary readers) is ahead of us by more than a block gets one more request per
//!   block of the lead, up to a window: at that server our queue is then the longest, and we
//!   are served until we have caught up. On 10 disks at 20 MiB/s with one at 0.35 of its
//!   speed (a 1.8 s scan), 87.8% of the layout-aware ideal before, 90.7% with it; with two
//!   slow, 91.1% and 94.4%; on 8 disks with one at half, 94.1% and 92.8%, the one
//!   configuration of `ganges sim generality` it costs more than a point.
//! - **Slow against the cluster (ours).** A primary whose backup is as slow has nowhere
//!   better among its holders, and judged against them alone it never found trouble; yet
//!   that backup's own reader has left it for a fast disk, and the layout-aware ideal has us
//!   share it. So a primary far below the healthy disks of the whole cluster (the fastest
//!   figure another comes near, as gd-plan judges) is trouble too. With 16 of 24 disks at a
//!   quarter of their speed, two by two, a 4 s scan read 79.6% of the layout-aware ideal,
//!   85.7% with it; real disks' figures do not swing by half.
//! - **A slow primary keeps its pipeline (ours).** In trouble with a slow disk, a backup
//!   whose reader is far ahead wants more than the window (catching up), and took every
//!   request that came free while our primary, ours alone, idled. Every holder not held to
//!   one request keeps `min_outstanding` first (lesson 1); the rest goes by the targets.
//!   With 16 of 24 slow: 88.7%; on 8 disks with one at half speed, 92.8% -> 95.8%. A
//!   primary found in trouble by contention is left as it was: a neighbour needs it more
//!   than we do.
//! - **Return to the primary (ours; virtual-streams §5 leaves it open).** With
//!   `return_to_primary`, once the primary's disk is no longer `TROUBLE` below the others,
//!   the consumer goes back to primary-only; trouble found by contention, which cannot be
//!   judged while the primary has less than a full share, after `CONTENDED_HOLD` probe
//!   intervals, to be judged again, unless others' reads still wait at the primary (which
//!   can be judged): then the hold starts over. Back at every hold's end, the consumers down
//!   a chain of 24 disks with one at a quarter of its speed each found the trouble again a
//!   few tenths of a second later, the far end of the chain took its share late, and a 2 s
//!   scan read 91.4% of the layout-aware ideal (95.5% now, with the guard at every pick).
//! - **A chain of trouble is not a ring (ours).** Contention passes trouble from consumer to
//!   consumer along the chain of copies, and on a ring of them it could come back to where
//!   it began and keep itself going with every disk well. So each backup read carries its
//!   place in the chain (`Service::depth`: 1 from a slow disk, one more than the reads that
//!   sent its consumer off its primary), servers report the least depth queued there, and
//!   nobody takes trouble from reads as deep as the layout has servers.
//!
//! Lesson 4, the guard against starvation, lives in `sched::LongestQueue`; its interval is the
//! `guard_every` setting, which every request carries to the servers. Lesson 2, "artificial
//! perturbations" to sense small differences, is the `TROUBLE` threshold's other face: we
//! react to differences above it and ignore the rest.

use super::policy::{NodeView, Pick, ProbeWhom, Probes, RateSettings, ReadPolicyKind, RoutePolicy, RouteView};
use crate::ids::NodeId;
use crate::sched::{Discipline, ProgressMetric, Service};

/// How far below expectation the primary must fall to count as trouble. Disk speeds measured
/// over single requests vary by a few percent with the model's timer; 20% is a real fault.
pub const TROUBLE: f64 = 0.20;
/// How far below its disk's speed a primary nobody else is queued at must deliver to us to
/// count as contended: a slow link (which the disk's speed does not show) does this, and the
/// figures of a disk under a kernel throttle, which swing by a fifth or more, do not.
pub const UNSEEN_CONTENTION: f64 = 0.35;
/// Probe intervals a primary's disk must read slow before it is trouble.
pub const SLOW_FOR: u32 = 2;
/// How far below the fastest holder a primary's disk must read (and what it delivers us, by
/// `TROUBLE` at least) to be trouble after one probe interval, not `SLOW_FOR`: real disks'
/// figures swing a fifth or so (a third for a moment at a throttle's first burst), not half;
/// the simulator's short scans with a slow disk lost up to a tenth of their time waiting the
/// second interval out.
pub const FAR_BELOW: f64 = 0.5;
/// Probe intervals trouble found by contention lasts before it is judged again.
pub const CONTENDED_HOLD: u32 = 4;
/// Seconds after trouble found by others' reads queued at the primary ends before what the
/// primary delivers us may find new trouble: the delivered rate remembers the last
/// `RateMeter::WINDOW_SECS` or so, when the primary served them too. Two of those leave a
/// seventh of the old figure. (After a slow link's trouble the old figure is the link's, and
/// finds it again a probe interval later, as it should.)
pub const FRESH_AFTER_SECS: f64 = 2.0 * crate::handoff::RateMeter::WINDOW_SECS;

#[derive(Debug)]
pub struct ResponseRate {
    s: RateSettings,
    handoff: bool,
    trouble: bool,
    /// Since when the primary's disk has read slow, while it does.
    slow_since: Option<crate::time::Time>,
    /// Since when the primary has delivered us short of its disk with nobody else queued.
    short_since: Option<crate::time::Time>,
    /// When contention (not a slow disk) put us in trouble.
    contended_since: Option<crate::time::Time>,
    /// Backups seen, and when each was last asked for its state.
    probes: Probes,
    /// Holders of the piece last placed: in trouble, each gets a window's worth.
    holders: u32,
    /// Our place in a chain of trouble while in it (`Service::depth`).
    depth: u8,
    /// The layout's servers: no chain of trouble is longer.
    horizon: u8,
    /// Whether others' reads queued at the primary put us in trouble.
    by_others: bool,
    /// When trouble that others' reads caused last ended.
    left_at: Option<crate::time::Time>,
}

impl ResponseRate {
    pub fn new(s: RateSettings, handoff: bool) -> ResponseRate {
        ResponseRate {
            s,
            handoff,
            trouble: false,
            slow_since: None,
            short_since: None,
            contended_since: None,
            probes: Probes::default(),
            holders: 1,
            depth: 0,
            horizon: u8::MAX,
            by_others: false,
            left_at: None,
        }
    }

    pub fn in_trouble(&self) -> bool {
        self.trouble
    }

    /// Update the trouble state from what the primary and the others reported.
    fn assess(&mut self, view: &RouteView<'_>, holders: &[NodeId]) {
        let replies: u64 = holders.iter().map(|h| view.node(*h).replies).sum();
        let p = view.node(holders[0]);
        // No decision on setup noise (lesson 3): not before the primary's own server has said
        // how fast its disk is (its meter covers a MiB at least), and not before a few replies
        // unless every holder has said so (a primary whose disk is slow sends those few
        // replies slowly: five took 0.7 s of a 1.8 s scan at 7 MiB/s).
        let measured = |h: &NodeId| view.node(*h).reported_disk_bytes_per_sec().is_some();
        if !measured(&holders[0]) || (replies < self.s.warmup_replies as u64 && !holders.iter().all(measured)) {
            return;
        }
        // Measured speeds where there are any: a server that has not measured its disk yet
        // reports the speed it was configured with, which says nothing of a fault. Blended
        // into a measured figure it made every consumer find trouble while every disk was
        // equally slow; alone (a backup nobody reads) it is the best guess there is.
        let speed = |h: &NodeId| {
            let v = view.node(*h);
            v.disk_speed().or(v.disk_bytes_per_sec)
        };
        let fastest = holders.iter().filter_map(speed).fold(0.0, f64::max);
        let (Some(disk), true) = (speed(&holders[0]), fastest > 0.0) else { return };
        // A slow disk once it read slow for `SLOW_FOR` probe intervals, so over several of its
        // server's figures: one figure of a real disk can be a fifth off, and under a kernel
        // throttle a server's first figures, which hold the burst the throttle lets through
        // when reads begin, read half again above its rate for a meter's window.
        //
        // And only while the primary also delivers us that much less than the fastest holder's
        // disk (once we are in trouble we send it less, so then by the disk alone). Servers'
        // figures of equal real disks under a kernel throttle stay apart by up to a fifth for
        // seconds (each server's meter counts its own pauses), while what a primary delivers
        // us agrees with its throttle: a lone figure kept consumers of healthy disks in
        // trouble, reading up to a third of their bytes from backups with no fault at all.
        // (`NodeView::delivers_below` waits for half a server meter's window of replies.)
        //
        // Or far below the cluster's healthy disks, whatever the other holders read: a
        // primary whose backup is as slow has nowhere better among its holders, yet the
        // backup's own reader has left it for a fast disk, and sharing our reads with it is
        // what the layout-aware ideal does.
        let healthy = view.healthy_disk_speed().unwrap_or(0.0);
        let below_cluster =
            disk < healthy * (1.0 - FAR_BELOW) && (self.trouble || p.delivers_below(healthy, FAR_BELOW));
        let slow_now =
            below_cluster || (disk < fastest * (1.0 - TROUBLE) && (self.trouble || p.delivers_below(fastest, TROUBLE)));
        self.slow_since = if slow_now { self.slow_since.or(Some(view.now)) } else { None };
        let far = below_cluster || disk < fastest * (1.0 - FAR_BELOW);
        let slow_for = self.s.probe_interval * if far { 1 } else { SLOW_FOR };
        let slow_disk = self.slow_since.is_some_and(|t| view.now.since(t) >= slow_for);
        // Contention (a neighbour served there too, or a slow link: either way it delivers us
        // less than its disk can do) shows only while we still send the primary a full share.
        // At once: the chain of consumers around a slow disk hands the trouble on a hop at a
        // time, and a wait at every hop is paid as many times. Others' requests waiting there
        // too (its queue holds more than all of ours) are contention as they are seen, with
        // no shortfall to wait for: what we are delivered is averaged over half a server
        // meter's window, which each hop waited out (the bench's scan with 12 slow disks of
        // 16: 88.7% of the layout-aware ideal, 93.8% without the wait). Others queue
        // at a primary only when someone is in trouble, so with no fault this never fires.
        // With nobody else queued (a slow link, or a real disk's figures swinging), a
        // shortfall of `UNSEEN_CONTENTION` or more is.
        let others_queued = p.holds_others();
        let fresh = self.left_at.is_none_or(|t| view.now.since(t).as_secs_f64() >= FRESH_AFTER_SECS);
        let short = !self.trouble && (others_queued || (fresh && p.delivers_below(disk, UNSEEN_CONTENTION)));
        // Unseen, it must last a probe interval too: a real disk's figure and our delivered
        // rate swing apart for a moment when the consumer or the server waits for a CPU.
        self.short_since = if short && !others_queued { self.short_since.or(Some(view.now)) } else { None };
        // Seen, only where another holder has less waiting: when the consumers of a ring of
        // equal disks have all moved reads to their backups, every primary holds others'
        // requests, and that is no reason to move more (it kept them all in trouble, reading
        // two fifths of their bytes from backups, with no fault).
        let queued = |h: &NodeId| view.node(*h).queued();
        let lighter_elsewhere =
            queued(&holders[0]).is_some_and(|mine| holders[1..].iter().any(|h| queued(h).is_some_and(|q| q < mine)));
        // And only from a chain shorter than the ring: reads as deep as the layout has servers
        // came round from us. Without this, one consumer's trouble for half a second made a
        // ring of 8 read 47% of its bytes from backups for the rest of an 8 s scan, with no
        // fault (and on real disks, 42.9% after a kernel throttle of 1 s).
        let others_depth = p.last_state.and_then(|s| s.backup_depth).unwrap_or(0);
        let next_depth = others_depth.saturating_add(1);
        let contended = short
            && ((others_queued && lighter_elsewhere && others_depth < self.horizon)
                || self.short_since.is_some_and(|t| view.now.since(t) >= self.s.probe_interval));
        if slow_disk {
            (self.trouble, self.contended_since, self.depth, self.by_others) = (true, None, 1, false);
        } else if contended {
            let depth = if others_queued { next_depth } else { 1 };
            (self.trouble, self.contended_since, self.depth, self.by_others) =
                (true, Some(view.now), depth, others_queued);
        } else if self.trouble && self.s.return_to_primary && !slow_now {
            // Back as soon as the disk is no longer slow: figures that would say it is "as fast
            // as the others again" can stay a fifth apart on equal real disks, and trouble never
            // ended. Contention cannot be judged while we send the primary less than a full
            // share, so trouble it caused is held for `CONTENDED_HOLD` probe intervals, then
            // judged again: a slow link is found again a probe interval later and holds most of
            // the time, a moment's swing costs one hold.
            let held = self.contended_since.is_none_or(|t| view.now.since(t) >= self.s.probe_interval * CONTENDED_HOLD);
            //
            // Unless others' reads, from a chain shorter than the ring, still wait at the
            // primary: that contention can be judged while we send it less, and it has not
            // ended. Left at every hold's end, each consumer down a chain went back to its
            // primary for a few tenths of a second and found the trouble again; the hops
            // after it did the same, and the far end of the chain took its share late.
            let still_contended = self.by_others && others_queued && others_depth < self.horizon;
            if held && still_contended {
                (self.contended_since, self.depth) = (Some(view.now), next_depth);
            } else if held {
                if self.by_others {
                    self.left_at = Some(view.now);
                }
                (self.trouble, self.contended_since) = (false, None);
            }
        }
    }

    fn reach(&self) -> f64 {
        reach(self.depth, self.horizon)
    }

    /// How many requests this consumer should keep at each holder now: in trouble, the window
    /// split by answer speed, the backups' parts scaled by `reach`, and `min_outstanding` at
    /// every holder however deep in a chain (lesson 1: over a real link, one request leaves
    /// the pipeline empty for a round trip).
    pub fn targets(&self, view: &RouteView<'_>, holders: &[NodeId]) -> Vec<(NodeId, f64)> {
        let w = view.window as f64;
        if !self.trouble {
            return holders.iter().enumerate().map(|(i, &h)| (h, if i == 0 { w } else { 0.0 })).collect();
        }
        // Replies per second per request kept there; unknown servers count as the average.
        let speed = |v: NodeView| v.latency_secs.map(|l| 1.0 / l.max(1e-6));
        let known: Vec<f64> = holders.iter().filter_map(|h| speed(view.node(*h))).collect();
        let avg = if known.is_empty() { 1.0 } else { known.iter().sum::<f64>() / known.len() as f64 };
        let speeds: Vec<f64> = holders.iter().map(|h| speed(view.node(*h)).unwrap_or(avg)).collect();
        let reach = self.reach();
        let weight = |i: usize, sp: f64| if i == 0 { sp } else { sp * reach };
        let total: f64 = speeds.iter().enumerate().map(|(i, &sp)| weight(i, sp)).sum();
        let fastest = speeds.iter().cloned().fold(0.0, f64::max);
        holders
            .iter()
            .zip(&speeds)
            .enumerate()
            .map(|(i, (&h, &sp))| {
                let mut t = (w * weight(i, sp) / total).max(self.s.min_outstanding as f64);
                if sp * self.s.slow_ratio < fastest {
                    t = 1.0;
                }
                if i > 0 {
                    t += lead_blocks(view, h).min(w);
                }
                (h, t)
            })
            .collect()
    }
}

/// What share of the first consumer's help (ours, after River's graduated declustering) a
/// consumer sends its backup, `depth` hops down a chain of trouble or help from a slow disk,
/// on a layout of `horizon` servers: with one slow disk among `n` on a chain of copies, the
/// layout-aware ideal has the consumer at depth `d` read `(n - d) / (n - 1)` as much from its
/// backup as the first does, and the last none (its backup is the slow disk). Sending more
/// only hands the trouble on, round the ring to that last consumer, which has nowhere to go.
/// With more slow disks the chains are shorter and this sends more than the ideal, as before
/// it. gd-rr and gd-pc share it.
pub fn reach(depth: u8, horizon: u8) -> f64 {
    if depth <= 1 || horizon <= 1 {
        return 1.0;
    }
    let (n, d) = (f64::from(horizon), f64::from(depth));
    ((n - d) / (n - 1.0)).clamp(0.0, 1.0)
}

/// Whole blocks by which `backup`'s own reader was ahead of us when its server last
/// reported, if more than one; else 0 (see "Catching up").
fn lead_blocks(view: &RouteView<'_>, backup: NodeId) -> f64 {
    let Some(theirs) = view.node(backup).last_state.and_then(|s| s.primary_progress) else { return 0.0 };
    let lead = ((theirs - view.own_fraction) / view.block_fraction.max(f64::MIN_POSITIVE)).floor();
    if lead > 1.0 { lead } else { 0.0 }
}

impl RoutePolicy for ResponseRate {
    fn kind(&self) -> ReadPolicyKind {
        if self.handoff { ReadPolicyKind::GdRrHandoff } else { ReadPolicyKind::GdRr }
    }

    fn metric(&self) -> ProgressMetric {
        ProgressMetric::Bytes
    }

    fn service(&self) -> Service {
        Service {
            discipline: Discipline::LongestQueue,
            runs: true,
            handoff: self.handoff,
            // Validated to fit (`PolicySettings::validate`).
            guard_every: u8::try_from(self.s.guard_every).unwrap_or(u8::MAX),
            depth: if self.trouble { self.depth } else { 0 },
            ..Service::FURTHEST_BEHIND
        }
    }

    fn steals_at_end(&self) -> bool {
        true
    }

    /// In trouble we keep `min_outstanding` requests at every holder, a slow one too, so at
    /// the end of a scan our last pieces can wait in a slow disk's line while a fast holder
    /// idles. Taken from there, on 10 disks at 20 MiB/s with two at 0.35 of their speed,
    /// gd-rr read 94.4% of the layout-aware ideal, not 92.3%; on the bench's 16 disks with
    /// two at half speed, 95.9%, not 93.8% (`ganges sim generality`, `bench-scan`).
    fn steals_from_slow_lines(&self) -> bool {
        true
    }

    fn on_layout(&mut self, layout: &crate::layout::Layout) {
        self.horizon = u8::try_from(layout.nodes()).unwrap_or(u8::MAX);
        self.probes.meet(&(0..layout.nodes()).map(NodeId).collect::<Vec<_>>());
    }

    /// In trouble, a window per holder: every server in use keeps `min_outstanding` requests
    /// (lesson 1), which with two holders is all of a window of four, and then nothing is
    /// left for the split by reply rates to move: a slow primary kept half the requests and
    /// the backup, serving the longest queue, gave its own consumer twice the share. With a
    /// window per holder the backup holds more of ours than of its own consumer's while it
    /// answers faster (the simulator's scans with a slow disk: 3-10% faster, none slower).
    fn window(&self, base: u32) -> u32 {
        if self.trouble { base.saturating_mul(self.holders) } else { base }
    }

    /// The guard serves the consumer furthest behind by the progress its requests carry,
    /// and a consumer in trouble leaves requests waiting at its contended primary while it
    /// reads on at its backup: there they said it was as far as when it sent them. On 16
    /// disks with one at a quarter of its speed, consumer 1 was served at disk 1 on a figure
    /// of 36% of its scan, ahead of the slow disk's consumer at 39%, when it had read 51%;
    /// the slow disk's consumer never caught up and the scan read 88.9% of the layout-aware
    /// ideal (92.9% with servers told). Each reply tells the other servers holding our
    /// requests (none but the primary with no fault).
    fn notifies_progress(&self) -> bool {
        true
    }

    fn probe_at(&self, view: &RouteView<'_>) -> Option<crate::time::Time> {
        self.probes.next_at(view, self.s.probe_interval, ProbeWhom::All)
    }

    fn poll_probe(&mut self, view: &RouteView<'_>) -> Option<NodeId> {
        // Every server is asked for its disk speed, the primary too: a backup we send nothing
        // to can be measured no other way (no data is read from a backup without trouble),
        // the primary is then judged by the same measure as the backups (its server's meter),
        // not by its replies to us, which on a bursty disk swing by a third, and the others
        // say how fast a healthy disk is.
        self.probes.due(view, self.s.probe_interval, ProbeWhom::All)
    }

    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        self.probes.meet(holders);
        self.holders = u32::try_from(holders.len()).unwrap_or(u32::MAX);
        self.assess(view, holders);
        let targets = self.targets(view, holders);
        let out = |h: NodeId| view.node(h).outstanding as f64;
        let floor = self.s.min_outstanding as f64;
        let slow_trouble = self.trouble && self.contended_since.is_none();
        if slow_trouble && let Some(&(h, _)) = targets.iter().find(|(h, t)| *t >= floor && out(*h) < floor) {
            return Pick::To(h);
        }
        // The largest deficit, the first holder on a tie.
        let best = targets.into_iter().map(|(h, t)| (h, t - out(h))).reduce(|b, c| if b.1 >= c.1 { b } else { c });
        match best {
            Some((h, deficit)) if deficit > 0.0 => Pick::To(h),
            _ => Pick::Hold,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const H: [NodeId; 2] = [NodeId(0), NodeId(1)];

    /// Two holders: disk speeds, delivered rates, latencies, requests outstanding.
    fn nodes(disk: [f64; 2], rate: [f64; 2], lat: [f64; 2], out: [u32; 2]) -> BTreeMap<NodeId, NodeView> {
        (0..2)
            .map(|i| {
                let v = NodeView {
                    outstanding: out[i],
                    outstanding_at_state: out[i],
                    replies: 50,
                    latency_secs: Some(lat[i]),
                    rate_bytes_per_sec: Some(rate[i]),
                    disk_bytes_per_sec: Some(disk[i]),
                    reports: crate::route::policy::RecentReports::of(disk[i]),
                    ..NodeView::default()
                };
                (NodeId(i as u32), v)
            })
            .collect()
    }

    /// `nodes`, with what the primary delivered us covering a fifth of a second.
    fn judged(mut n: BTreeMap<NodeId, NodeView>) -> BTreeMap<NodeId, NodeView> {
        let p = n.get_mut(&NodeId(0)).expect("two holders");
        let rate = p.rate_bytes_per_sec.expect("a delivered rate");
        p.delivered.note((rate * 0.2) as u64, 0.2, 0.25);
        n
    }

    fn view(nodes: &BTreeMap<NodeId, NodeView>) -> RouteView<'_> {
        RouteView { window: 8, ..RouteView::test(nodes) }
    }

    /// Pick at `intervals` probe intervals from the start.
    fn pick_at(p: &mut ResponseRate, nodes: &BTreeMap<NodeId, NodeView>, intervals: u32) -> Pick {
        let at = crate::time::Time::ZERO + RateSettings::default().probe_interval * intervals;
        p.pick(&RouteView { now: at, ..view(nodes) }, &H)
    }

    /// Pick at the start and again as long after as a slow disk must stay slow.
    fn pick_over_time(p: &mut ResponseRate, nodes: &BTreeMap<NodeId, NodeView>) -> Pick {
        p.pick(&view(nodes), &H);
        pick_at(p, nodes, SLOW_FOR)
    }

    #[test]
    fn warm_up_and_equal_servers_keep_everything_on_the_primary() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let empty = BTreeMap::new();
        assert_eq!(p.pick(&view(&empty), &H), Pick::To(NodeId(0)));
        // Both holders are asked at once, the backup (read nothing from) and the primary
        // (judged by its server's own meter like the backup), then not again for a while.
        assert_eq!(p.poll_probe(&view(&empty)), Some(NodeId(0)));
        assert_eq!(p.poll_probe(&view(&empty)), Some(NodeId(1)));
        assert_eq!(p.poll_probe(&view(&empty)), None);
        let n = nodes([32.0, 32.0], [31.0, 4.0], [0.1, 0.3], [4, 0]);
        for _ in 0..10 {
            p.pick(&view(&n), &H);
        }
        assert!(!p.in_trouble());
        assert_eq!(p.targets(&view(&n), &H)[1].1, 0.0);
        let full = nodes([32.0, 32.0], [31.0, 4.0], [0.1, 0.3], [8, 1]);
        assert_eq!(p.pick(&view(&full), &H), Pick::Hold);
    }

    #[test]
    fn a_slow_primary_disk_is_trouble_and_the_window_splits() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let n = judged(nodes([16.0, 32.0], [16.0, 4.0], [0.2, 0.2], [4, 0]));
        p.pick(&view(&n), &H);
        assert!(!p.in_trouble(), "one figure is not yet a slow disk");
        pick_at(&mut p, &n, SLOW_FOR - 1);
        assert!(!p.in_trouble(), "nor slow for less than SLOW_FOR probe intervals");
        assert_eq!(pick_at(&mut p, &n, SLOW_FOR), Pick::To(NodeId(1)));
        assert!(p.in_trouble());
        let t = p.targets(&view(&n), &H);
        assert_eq!((t[0].1, t[1].1), (4.0, 4.0), "equal answer speeds: equal shares");
    }

    /// In trouble, a backup whose reader is ahead of us gets one more request per whole block
    /// of the lead beyond the first, up to a window; with no trouble, none.
    #[test]
    fn in_trouble_a_backup_whose_reader_is_ahead_gets_more_requests() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let mut n = judged(nodes([16.0, 32.0], [16.0, 4.0], [0.2, 0.2], [4, 0]));
        let ahead_by = |n: &mut BTreeMap<NodeId, NodeView>, lead: f64| {
            let state = crate::route::ServerState { primary_progress: Some(0.30 + lead), ..Default::default() };
            n.get_mut(&NodeId(1)).expect("two holders").last_state = Some(state);
        };
        // A partition of 100 blocks: each block is 0.01; we are at 0.30.
        fn at(n: &BTreeMap<NodeId, NodeView>) -> RouteView<'_> {
            RouteView { own_fraction: 0.30, block_fraction: 0.01, ..view(n) }
        }
        ahead_by(&mut n, 0.055);
        assert_eq!(p.targets(&at(&n), &H)[1].1, 0.0, "no trouble: the primary only");
        p.pick(&at(&n), &H);
        pick_at(&mut p, &n, SLOW_FOR);
        assert!(p.in_trouble());
        let backup = |p: &ResponseRate, n: &BTreeMap<NodeId, NodeView>| p.targets(&at(n), &H)[1].1;
        assert_eq!(backup(&p, &n), 4.0 + 5.0, "five whole blocks ahead");
        ahead_by(&mut n, 0.015);
        assert_eq!(backup(&p, &n), 4.0, "one block and a half: within a block's noise");
        ahead_by(&mut n, -0.05);
        assert_eq!(backup(&p, &n), 4.0, "behind us");
        ahead_by(&mut n, 0.5);
        assert_eq!(backup(&p, &n), 4.0 + 8.0, "at most a window more");
    }

    /// Every disk equally slow: the backup measured its disk at the primary's speed, though
    /// the configured speed it reported before is still in the smoothed figure. No trouble.
    /// A backup that never measured anything (nobody reads it) counts at its configured speed.
    #[test]
    fn a_measured_speed_beats_a_configured_one() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let mut n = judged(nodes([16.0, 16.0], [16.0, 0.0], [0.2, 0.2], [4, 0]));
        n.get_mut(&NodeId(1)).expect("two holders").disk_bytes_per_sec = Some(28.0);
        for _ in 0..10 {
            p.pick(&view(&n), &H);
        }
        assert!(!p.in_trouble());
        n.get_mut(&NodeId(1)).expect("two holders").reports = crate::route::policy::RecentReports::default();
        pick_over_time(&mut p, &n);
        assert!(p.in_trouble(), "unmeasured, the backup's configured 28 against a measured 16");
    }

    /// Equal real disks under a kernel throttle: the primary's server figures its disk a
    /// quarter below the backup's for seconds, but it delivers us as much as the backup's
    /// figure says: no trouble. Once it delivers that much less too, trouble.
    #[test]
    fn a_slow_figure_is_a_slow_disk_only_if_the_primary_delivers_less_too() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let n = judged(nodes([200.0, 260.0], [230.0, 0.0], [0.2, 0.2], [4, 0]));
        for i in 0..=3 * SLOW_FOR {
            pick_at(&mut p, &n, i);
        }
        assert!(!p.in_trouble(), "the primary keeps up with the backup's figure");
        let n = judged(nodes([200.0, 260.0], [200.0, 0.0], [0.2, 0.2], [4, 0]));
        pick_at(&mut p, &n, 3 * SLOW_FOR + 1);
        assert!(!p.in_trouble(), "not slow for SLOW_FOR probe intervals yet");
        pick_at(&mut p, &n, 4 * SLOW_FOR + 1);
        assert!(p.in_trouble(), "its figure and its delivery both a fifth below the backup");
    }

    /// A primary far below the backup (its figure under half, its delivery short too) is a
    /// slow disk after one probe interval; real disks' figures do not swing that far.
    #[test]
    fn a_primary_far_below_is_trouble_after_one_probe_interval() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let n = judged(nodes([10.0, 32.0], [10.0, 0.0], [0.2, 0.2], [4, 0]));
        p.pick(&view(&n), &H);
        assert!(!p.in_trouble(), "one figure is not yet a slow disk");
        pick_at(&mut p, &n, 1);
        assert!(p.in_trouble());
    }

    /// `n` with the queue lengths its two holders reported last, and the least depth of the
    /// backup reads queued at the primary.
    fn queued(
        mut n: BTreeMap<NodeId, NodeView>,
        [primary, backup]: [u32; 2],
        depth: Option<u8>,
    ) -> BTreeMap<NodeId, NodeView> {
        let state =
            |queue_len, backup_depth| Some(crate::route::ServerState { queue_len, backup_depth, ..Default::default() });
        n.get_mut(&NodeId(0)).expect("two holders").last_state = state(primary, depth);
        n.get_mut(&NodeId(1)).expect("two holders").last_state = state(backup, None);
        n
    }

    /// A consumer of a ring of 8 (chains of trouble stop at depth 8), not in trouble.
    fn on_ring_of_8() -> ResponseRate {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        p.on_layout(&crate::layout::Layout::chained(8, 2).expect("a ring of 8"));
        p
    }

    /// `n` with servers 2 and 3, holders of neither copy, measured at these speeds.
    fn with_others(mut n: BTreeMap<NodeId, NodeView>, speeds: [f64; 2]) -> BTreeMap<NodeId, NodeView> {
        for (i, d) in speeds.into_iter().enumerate() {
            let v = NodeView { reports: crate::route::policy::RecentReports::of(d), ..NodeView::default() };
            n.insert(NodeId(2 + i as u32), v);
        }
        n
    }

    /// Both holders equally slow, two other servers measured four times as fast: the primary
    /// is far below the cluster's healthy disks, and that is trouble after one probe
    /// interval, the window split over the two slow holders. One fast figure alone is not
    /// believed (a real disk's figure spikes), and with the others as slow as ours, or not
    /// known, nothing says ours is slow.
    #[test]
    fn a_primary_far_below_the_cluster_is_trouble_though_its_backup_is_as_slow() {
        let two = judged(nodes([8.0, 8.0], [8.0, 0.0], [0.2, 0.2], [4, 0]));
        for (others, why) in [
            (two.clone(), "nothing else known"),
            (with_others(two.clone(), [8.5, 7.5]), "the others as slow"),
            (with_others(two.clone(), [32.0, 8.0]), "one fast figure"),
        ] {
            let mut p = ResponseRate::new(RateSettings::default(), false);
            for i in 0..=3 * SLOW_FOR {
                pick_at(&mut p, &others, i);
            }
            assert!(!p.in_trouble(), "{why}");
        }
        let n = with_others(two, [32.0, 31.0]);
        let mut p = ResponseRate::new(RateSettings::default(), false);
        p.pick(&view(&n), &H);
        assert!(!p.in_trouble(), "one figure is not yet a slow disk");
        pick_at(&mut p, &n, 1);
        assert!(p.in_trouble());
        let t = p.targets(&view(&n), &H);
        assert_eq!((t[0].1, t[1].1), (4.0, 4.0), "equal answer speeds: equal shares");
    }

    /// In trouble with a slow disk, a backup whose reader is far ahead wants more than the
    /// window, yet the primary, ours alone, is never left without `min_outstanding`
    /// requests: the next pick goes there.
    #[test]
    fn a_slow_primary_keeps_its_pipeline_while_we_catch_up_at_the_backup() {
        let mut n = with_others(judged(nodes([8.0, 8.0], [8.0, 0.0], [0.2, 0.2], [4, 0])), [32.0, 31.0]);
        let state = crate::route::ServerState { primary_progress: Some(0.40), ..Default::default() };
        n.get_mut(&NodeId(1)).expect("two holders").last_state = Some(state);
        fn at(n: &BTreeMap<NodeId, NodeView>) -> RouteView<'_> {
            RouteView { own_fraction: 0.30, block_fraction: 0.01, ..view(n) }
        }
        let mut p = ResponseRate::new(RateSettings::default(), false);
        p.pick(&at(&n), &H);
        p.pick(&RouteView { now: crate::time::Time::ZERO + RateSettings::default().probe_interval, ..at(&n) }, &H);
        assert!(p.in_trouble());
        let t = p.targets(&at(&n), &H);
        assert!(t[1].1 - 7.0 > t[0].1, "the backup's lead outweighs the primary's share: {t:?}");
        for (node, v) in n.iter_mut() {
            v.outstanding = if *node == NodeId(1) { 7 } else { 0 };
        }
        let later = crate::time::Time::ZERO + RateSettings::default().probe_interval * 2;
        assert_eq!(p.pick(&RouteView { now: later, ..at(&n) }, &H), Pick::To(NodeId(0)));
    }

    /// In trouble every holder gets a window's worth of requests: with the pipelines'
    /// minimum at each, a single window would leave nothing for the split by reply rates.
    #[test]
    fn in_trouble_the_window_grows_to_one_per_holder() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let n = judged(nodes([10.0, 32.0], [10.0, 0.0], [0.1, 0.1], [4, 0]));
        p.pick(&view(&n), &H);
        assert_eq!(p.window(4), 4, "primary only: the consumer's window");
        pick_at(&mut p, &n, 1);
        assert!(p.in_trouble());
        assert_eq!(p.window(4), 8);
        // The backup answers three times as fast: it gets three quarters of the eight.
        let n = nodes([10.0, 32.0], [10.0, 30.0], [0.3, 0.1], [0, 0]);
        let t = p.targets(&RouteView { window: p.window(4), ..view(&n) }, &H);
        assert!((t[0].1 - 2.0).abs() < 1e-9 && (t[1].1 - 6.0).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn a_contended_primary_is_trouble_too() {
        // The disk is fine, but the primary delivers us half of it (it serves a neighbour, or
        // its link is slow), as seen over a tenth of a second of its replies.
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let mut n = nodes([32.0, 32.0], [16.0, 4.0], [0.2, 0.2], [4, 0]);
        n.get_mut(&NodeId(0)).unwrap().delivered.note(16 << 20, 0.05, 0.25);
        p.pick(&view(&n), &H);
        assert!(!p.in_trouble(), "a twentieth of a second says too little");
        n.get_mut(&NodeId(0)).unwrap().delivered.note(16 << 20, 0.1, 0.25);
        p.pick(&view(&n), &H);
        assert!(!p.in_trouble(), "with nobody else queued there, a shortfall must last");
        pick_at(&mut p, &n, 1);
        assert!(p.in_trouble(), "half short for a probe interval");
        // A neighbour's requests queued there are contention as soon as they are seen, before
        // what the primary delivers us shows it (the full disk so far); a quarter short with
        // none is the disk's figures swinging.
        let mut n = nodes([32.0, 32.0], [24.0, 4.0], [0.2, 0.2], [4, 0]);
        n.get_mut(&NodeId(0)).unwrap().delivered.note(24 << 20, 0.2, 0.25);
        let mut unseen = ResponseRate::new(RateSettings::default(), false);
        unseen.pick(&view(&n), &H);
        assert!(!unseen.in_trouble());
        n.get_mut(&NodeId(0)).unwrap().rate_bytes_per_sec = Some(32.0);
        let n = queued(n, [3, 4], None);
        let mut q = ResponseRate::new(RateSettings::default(), false);
        q.pick(&view(&n), &H);
        assert!(!q.in_trouble());
        let n = queued(n, [6, 4], None);
        q.pick(&view(&n), &H);
        assert!(q.in_trouble(), "others queued at the primary, fewer at the backup");
        // As many waiting at the backup (a ring of equal disks whose consumers all moved some
        // reads): no reason to move more.
        let n = queued(n, [6, 6], None);
        let mut r = ResponseRate::new(RateSettings::default(), false);
        r.pick(&view(&n), &H);
        assert!(!r.in_trouble(), "no holder has less waiting");
    }

    /// Trouble found by contention cannot be judged while the primary gets less than a full
    /// share: it holds for `CONTENDED_HOLD` probe intervals, then the primary has it all
    /// again, to be judged afresh.
    #[test]
    fn contention_is_held_then_judged_again() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let mut n = nodes([32.0, 32.0], [16.0, 4.0], [0.2, 0.2], [4, 0]);
        n.get_mut(&NodeId(0)).unwrap().delivered.note(16 << 20, 0.2, 0.25);
        p.pick(&view(&queued(n, [8, 4], None)), &H);
        assert!(p.in_trouble(), "half short with others queued there: contended at once");
        let fine = nodes([32.0, 32.0], [16.0, 16.0], [0.2, 0.2], [2, 2]);
        pick_at(&mut p, &fine, CONTENDED_HOLD - 1);
        assert!(p.in_trouble(), "held while the primary cannot be judged");
        pick_at(&mut p, &fine, CONTENDED_HOLD);
        assert!(!p.in_trouble(), "back to the primary, to be judged again");
    }

    /// Trouble that others' reads queued at the primary caused is held again while they are
    /// still queued there when the hold ends (from a chain shorter than the ring); it ends
    /// at the first hold's end that finds them gone.
    #[test]
    fn contention_by_others_lasts_while_their_reads_wait_at_the_primary() {
        let with_queues = |primary: u32, depth: Option<u8>| {
            queued(nodes([32.0, 32.0], [32.0, 4.0], [0.2, 0.2], [4, 0]), [primary, 2], depth)
        };
        let mut p = on_ring_of_8();
        p.pick(&view(&with_queues(8, Some(2))), &H);
        assert!(p.in_trouble());
        assert_eq!(p.service().depth, 3);
        pick_at(&mut p, &with_queues(8, Some(4)), CONTENDED_HOLD);
        assert!(p.in_trouble(), "others still queued at the hold's end: held again");
        assert_eq!(p.service().depth, 5, "one further than the reads queued now");
        pick_at(&mut p, &with_queues(8, Some(8)), 2 * CONTENDED_HOLD);
        assert!(!p.in_trouble(), "reads as deep as the ring came round from us");
        // Others gone by the hold's end (the queue is ours alone): back to the primary.
        let mut q = on_ring_of_8();
        q.pick(&view(&with_queues(8, Some(2))), &H);
        pick_at(&mut q, &with_queues(4, None), CONTENDED_HOLD);
        assert!(!q.in_trouble());
    }

    /// Others' reads queued at the primary pass trouble on one place further down the chain,
    /// but not from reads as deep as the layout has servers: those came round a ring.
    #[test]
    fn trouble_passes_down_a_chain_but_not_round_a_ring() {
        let contended = |depth: Option<u8>| {
            let n = queued(nodes([32.0, 32.0], [32.0, 4.0], [0.2, 0.2], [4, 0]), [8, 4], depth);
            let mut p = on_ring_of_8();
            assert_eq!(p.service().depth, 0, "not in trouble: no depth");
            p.pick(&view(&n), &H);
            p
        };
        let p = contended(Some(3));
        assert!(p.in_trouble());
        assert_eq!(p.service().depth, 4, "one further than the reads that sent us");
        assert_eq!(contended(None).service().depth, 1, "others queued there, none of them in trouble");
        assert!(contended(Some(7)).in_trouble());
        assert!(!contended(Some(8)).in_trouble(), "8 servers: depth 8 came round the ring");
        // A slow disk begins a chain.
        let mut p = ResponseRate::new(RateSettings::default(), false);
        pick_over_time(&mut p, &judged(nodes([8.0, 32.0], [8.0, 32.0], [0.5, 0.1], [4, 0])));
        assert!(p.in_trouble());
        assert_eq!(p.service().depth, 1);
    }

    /// Deeper in a chain of trouble, less of the window goes to the backup, as in the
    /// layout-aware ideal: with equal answer speeds, half at depth 1, then shrinking to
    /// `min_outstanding` at the last place before the ring closes.
    #[test]
    fn the_deeper_in_a_chain_the_less_help_is_sent() {
        let n = nodes([32.0, 32.0], [32.0, 32.0], [0.2, 0.2], [0, 0]);
        let backup_at = |depth: u8| {
            let mut p = on_ring_of_8();
            (p.trouble, p.depth) = (true, depth);
            let t = p.targets(&view(&n), &H);
            (t[0].1, t[1].1)
        };
        assert_eq!(backup_at(1), (4.0, 4.0));
        let shares: Vec<f64> = (2..=7).map(|d| backup_at(d).1).collect();
        assert!(shares.windows(2).all(|w| w[1] <= w[0]), "{shares:?}");
        assert!(shares[0] < 4.0 && shares[0] > 3.0, "depth 2 of 8 sends 6/7 of depth 1's help: {shares:?}");
        assert_eq!(backup_at(7), (7.0, 2.0), "depth 7 of 8: min_outstanding, the floor");
    }

    /// What the primary delivered us while others' reads queued there put us in trouble is
    /// no shortfall once they are gone.
    #[test]
    fn a_shortfall_counts_only_once_the_delivered_rate_forgot_the_trouble() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        let mut n = nodes([32.0, 32.0], [16.0, 4.0], [0.2, 0.2], [4, 0]);
        n.get_mut(&NodeId(0)).unwrap().delivered.note(16 << 20, 0.2, 0.25);
        (p.trouble, p.by_others) = (true, true);
        p.contended_since = Some(crate::time::Time::ZERO);
        pick_at(&mut p, &n, CONTENDED_HOLD);
        assert!(!p.in_trouble(), "the hold is over");
        let left = (RateSettings::default().probe_interval * CONTENDED_HOLD).as_secs_f64();
        let at = |secs: f64| RouteView { now: crate::time::Time::from_secs_f64(secs), ..view(&n) };
        for t in [left + 0.1, left + 0.3, left + FRESH_AFTER_SECS - 0.01] {
            p.pick(&at(t), &H);
            assert!(!p.in_trouble(), "at {t}: the figure still holds the trouble's");
        }
        p.pick(&at(left + FRESH_AFTER_SECS), &H);
        p.pick(&at(left + FRESH_AFTER_SECS + 0.1), &H);
        assert!(p.in_trouble(), "half short, measured since");
        // Trouble a slow link made (nobody else queued) is found again once the shortfall has
        // lasted a probe interval from its end: the figure is the link's.
        let mut p = ResponseRate::new(RateSettings::default(), false);
        p.trouble = true;
        p.contended_since = Some(crate::time::Time::ZERO);
        pick_at(&mut p, &n, CONTENDED_HOLD);
        assert!(!p.in_trouble(), "the hold is over");
        pick_at(&mut p, &n, CONTENDED_HOLD + 1);
        pick_at(&mut p, &n, CONTENDED_HOLD + 2);
        assert!(p.in_trouble(), "the link is still slow");
    }

    #[test]
    fn faster_answers_earn_more_of_the_window_and_a_very_slow_server_one_request() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        p.trouble = true;
        let n = nodes([16.0, 32.0], [8.0, 24.0], [0.3, 0.1], [0, 0]);
        let t = p.targets(&view(&n), &H);
        assert!((t[1].1 - 6.0).abs() < 1e-9 && (t[0].1 - 2.0).abs() < 1e-9, "{t:?}");
        let n = nodes([4.0, 32.0], [2.0, 30.0], [0.9, 0.1], [0, 0]);
        assert_eq!(p.targets(&view(&n), &H)[0].1, 1.0);
    }

    #[test]
    fn the_primary_gets_its_share_back_when_its_disk_recovers() {
        let mut p = ResponseRate::new(RateSettings::default(), false);
        pick_over_time(&mut p, &judged(nodes([16.0, 32.0], [16.0, 8.0], [0.2, 0.2], [4, 0])));
        assert!(p.in_trouble());
        p.pick(&view(&nodes([24.0, 32.0], [16.0, 16.0], [0.2, 0.2], [2, 2])), &H);
        assert!(p.in_trouble(), "a quarter below the backup is still slow");
        // A sixth below: equal real disks' figures stay that far apart, so it is over.
        p.pick(&view(&nodes([27.0, 32.0], [16.0, 16.0], [0.2, 0.2], [2, 2])), &H);
        assert!(!p.in_trouble(), "back to primary-only");
        let mut keep = ResponseRate::new(RateSettings { return_to_primary: false, ..RateSettings::default() }, false);
        pick_over_time(&mut keep, &judged(nodes([16.0, 32.0], [16.0, 8.0], [0.2, 0.2], [4, 0])));
        keep.pick(&view(&nodes([31.0, 32.0], [16.0, 16.0], [0.2, 0.2], [2, 2])), &H);
        assert!(keep.in_trouble(), "without return-to-primary the split stays");
    }

    #[test]
    fn the_servers_are_asked_for_longest_queue_runs_and_handoff_as_configured() {
        let p = ResponseRate::new(RateSettings::default(), true);
        let asked = Service {
            discipline: Discipline::LongestQueue,
            runs: true,
            handoff: true,
            guard_every: crate::sched::GUARD_EVERY,
            ..Service::FURTHEST_BEHIND
        };
        assert_eq!(p.service(), asked);
        assert_eq!(p.kind(), ReadPolicyKind::GdRrHandoff);
        // The starvation guard's interval travels with every request.
        let p = ResponseRate::new(RateSettings { guard_every: 3, ..RateSettings::default() }, false);
        assert_eq!(p.service(), Service { handoff: false, guard_every: 3, ..asked });
    }
}
