//! GD-3, primary copies (gd-enhancements §3.2).
//!
//! Consumer i reads only its primary copy until the consumer whose primary copy lives on a
//! backup server gets ahead of it by more than the high watermark; then it also reads from
//! that backup until the gap closes below the low watermark. The backup server knows that
//! other consumer's progress (it serves its primary reads) and reports it with every reply;
//! while consumer i is not reading from the backup, it asks for the figure every
//! `probe_interval` ("periodic progress updates"). With equal disks no request ever goes to a
//! backup, so disks never alternate between copies and pay no seeks.
//!
//! Generalised beyond the paper's two copies: every backup holder is judged on its own gap.
//! A backup server whose primary copies nobody reads counts as progress 1 once that is
//! certain: its primary consumer was seen and has finished, or nobody has read there for two
//! probe intervals (there is no such consumer). Right at the start a server may simply not
//! have heard from its consumer yet, and that must not send anyone to a backup.
//!
//! **Passing help down the chain (ours).** The watermarks alone hand a slow disk's extra work
//! on a hop at a time: consumer i's reads of its backup slow that backup's own consumer, which
//! must fall a whole high watermark behind its neighbour before it reads its backup in turn.
//! On a ring of 8 disks with one at a quarter of its speed, a 6-second scan read 83% of the
//! layout-aware ideal, its far disks idle at the end. So a consumer also reads its backup
//! while its primary *helps* another (its queue holds requests that are not ours: a
//! neighbour behind us reads its backup copy there), wherever the backup's own reader is:
//! that server serves the reader furthest behind first, so our requests take only what its
//! own reader does not need. It stops once the primary helps nobody, as the paper's rule
//! says. Equal disks help nobody, so with no fault nothing changes. Help used to be passed on
//! only while the backup's queue was shorter than the primary's and its reader not behind us
//! by more than the low watermark; both held it back at every hop, since that reader's
//! figure comes up to a probe interval old and reads behind ours, and a reader starved at its
//! primary (serving the neighbour behind it) judges again only when a reply comes. On 8
//! disks at 32 MiB/s with one at half speed, a 1.1 s scan's last three consumers never
//! helped, and the slow disk's reader finished 0.2 s after them: 88.6% of the layout-aware
//! ideal; 92.5% without the two conditions and with slow lines (`route`'s module docs),
//! each of which alone did nothing there (`ganges sim generality`).
//! Help is never passed on to a backup whose disk reads `TROUBLE` slower than the primary's
//! (by its figure: we may have read nothing there yet): our requests would wait on it, and
//! the scan end on them. A neighbour's progress is taken as of now, moved on at our own pace
//! since its server reported it (`now_at`): as it came, up to a probe interval old, it
//! showed equal readers behind us, and help stopped at every hop until a real gap had built
//! up. And help goes a hop deeper each time (`Service::depth`, as gd-rr's trouble does): none
//! is taken from reads as deep as the layout has servers, which came round a ring from us.
//!
//! **Probes on time, judged as they answer (ours).** The driver wakes the consumer when a
//! probe falls due (`RoutePolicy::probe_at`), though no reply comes, and a backup whose disk
//! reads `TROUBLE` faster than the primary's is judged as its probe's answer comes in
//! (`RoutePolicy::on_answer`). The consumer that most needs its backup, whose window waits at
//! a slow primary, hears from that primary and picks once per slow block. On 10 disks at
//! 20 MiB/s, with two at 0.35 of their speed, probing only when a reply came, a 1.6 s scan
//! read 86.1% of the layout-aware ideal (91.1% now); with one at 0.35 and backups judged
//! only at picks, 74.7% (91.8% now). Every other report is judged at the pick that follows,
//! once our own progress has moved. Judged at once, a report that comes while our own reads
//! wait (a kernel throttle's pause on real disks, a CPU shared by 32 processes on the live
//! model) shows a neighbour a high watermark ahead for a moment: consumers judging every
//! report read a median 4.2% of their bytes from backups with no fault on real disks, and
//! judging every probe's answer, 3-35% on the live model, where a ring of consumers sent to
//! their backups keeps itself there.
//!
//! **A slow primary keeps its backup (ours).** A consumer whose primary disk reads
//! `TROUBLE` slower than a backup's, and delivers it that much less, treats that backup as a
//! helping consumer does. By the paper's rule alone it left the backup once it had caught
//! up with that backup's reader (the backup's server, serving the furthest behind first,
//! closes the gap within a tenth of a second) and came back only a high watermark later: its
//! progress swung by a band, and each hop down the chain added one: on a ring of 16 disks
//! with one at half speed, a 10 s scan read 87.8% of the layout-aware ideal (97.2% now).
//! A primary less than `FAR_BELOW` slower must have read so at every judgement for
//! `SLOW_FOR` probe intervals: equal real disks under kernel caps read a fifth apart for a
//! moment now and then, and each moment sent a consumer to its backup for a few blocks (no
//! fault, 8 servers: 0.9-4.3% of gd-pc's bytes from backups over eleven runs; 0-1.5% over
//! seven with the wait). One far slower is judged at once: a wait of even one probe interval
//! cost a 1.7 s scan on 10 disks with one at 0.35 of its speed 2.2 points (91.8% -> 89.6%).
//!
//! **A window per copy in use, scaled down a slow disk's chain (ours).** In a chain of help
//! that a slow disk began (our primary is slow, or reads of such a chain wait at it), the
//! consumer keeps a window at each backup in use as well as at its primary, scaled by its
//! share of the help the chain passes on (`rate::reach`, gd-rr's: all of it at the head,
//! `(n - d) / (n - 1)` of it `d` hops down a chain of `n` servers), and sends each request
//! to the copy it leaves least loaded for its share. With one window shared, requests queued
//! at a slow primary, or at one that serves the neighbour behind us first, held its slots:
//! the consumer picked again only when one came back, so each hop reached its backup late and
//! kept half its window waiting. On 16 disks at 20 MiB/s with one at a quarter of its speed,
//! help passed a hop every 150 ms and a 2.4 s scan read 88.5% of the layout-aware ideal
//! (95.4% now); `ganges sim generality` had 4 of its 20 cells under 93% (least 88.5%), and
//! 40 configurations we had not tuned on, 22 of their 80 cells for gd-pc and gd-pc-shrink
//! (least 87.2%); now one (92.95%) and 7 (least 91.0%). With a whole window at every backup
//! in use, help went undiminished to the chain's far end, whose backup is the slow disk
//! (least 87.9%).
//! A chain that no slow disk began (a consumer catching up on its backup's reader, the
//! paper's rule, on equal disks) is marked `sched::CATCH_UP` and keeps a window at a backup
//! only while that backup's reader is ahead of ours by more than the low watermark, which
//! drift between equal disks stays within. Widened like a slow disk's, consumers of equal
//! disks whose speeds swung by a tenth each second passed a moment's catching up round the
//! ring and read 2.3-2.5% of their bytes from backups (0.4-0.7% marked); and on real disks
//! with no fault a window per copy in use once let a ring of consumers helping each other
//! feed itself, every one reading half its bytes from its backup.
//!
//! **Levelled (ours).** The servers level a gd-pc consumer's progress with their other
//! readers' (`sched::FurthestBehind`), as gd's. A backup serving a slow disk's consumer
//! beside its own otherwise settles a standing lag of up to a block between them, and the
//! lags add up down a chain of help. Levelling it was once worse: a backup reader, there
//! only a window at a time, lost its bias at each gap. With the bias kept over the gaps,
//! `ganges sim generality`'s least rose from 92.5% to 93.2% of the layout-aware ideal
//! (8 disks at 32 MiB/s with one at half speed: 92.5 -> 93.8). With no fault a disk serves its
//! own reader alone and nothing changes.
//!
//! **Shrinking high watermark (ours, gd-enhancements §5).** With `shrink`, the high watermark
//! closes linearly towards the low one as the consumer's own progress goes from 0 to 1. Early
//! on the wide band lets neighbours drift without multiplexing disks; near the end a narrow
//! band keeps the last consumer from lagging by a whole band when the others finish. It
//! stops a block above the low one: a band narrower than a block flaps, and near the end a
//! consumer a block behind a slow backup's reader joined that slow disk and waited there.

use super::policy::{Pick, PrimarySettings, ProbeWhom, Probes, ReadPolicyKind, RoutePolicy, RouteView, ServerState};
use super::rate::{FAR_BELOW, SLOW_FOR, TROUBLE, reach};
use crate::ids::NodeId;
use crate::sched::{CATCH_UP, ProgressMetric};
use crate::time::Time;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug)]
pub struct PrimaryCopies {
    s: PrimarySettings,
    shrink: bool,
    /// Backups being read from (crossed the high watermark, not yet back under the low).
    using: BTreeSet<NodeId>,
    /// Backups whose own consumer was ahead of ours by more than the low watermark when last
    /// judged.
    ahead: BTreeSet<NodeId>,
    /// The latest primary progress each server reported and when (`None`: nobody reads its
    /// primaries).
    reported: BTreeMap<NodeId, Option<(f64, Time)>>,
    /// Servers that have reported a primary reader at least once.
    had_reader: BTreeSet<NodeId>,
    /// Since when each server has reported nobody reading its primaries.
    none_since: BTreeMap<NodeId, Time>,
    probes: Probes,
    /// When this consumer first picked: its own rate of progress counts from then.
    started: Option<Time>,
    /// Since when the primary has read `slower` than each backup, while it does.
    slow_since: BTreeMap<NodeId, Time>,
    /// The holders of the piece last picked for, primary first.
    holders: Vec<NodeId>,
    /// Our place in a chain of help while we read a backup (`Service::depth`): 1 for a slow
    /// primary or a backup's reader a high watermark ahead, one more than the reads queued
    /// at our primary for help passed on.
    depth: u8,
    /// Whether a slow disk began that chain: ours, or one whose reads wait at our primary
    /// (see "A window per copy in use").
    for_slow_disk: bool,
    /// The layout's servers: no chain of help is longer.
    horizon: u8,
}

/// The most blocks the high watermark may stand for. Fractions of the partition are the
/// paper's measure, but each hop down a chain of consumers may lag its neighbour by a high
/// watermark before it helps, and on a long partition 4% is many blocks: on 8 real servers
/// reading 553 blocks each (4%: 22 blocks), with one disk's link at half or a competing
/// reader on it, gd-pc read 91% and 90% of the ideal, its consumers finishing in a staircase
/// from the slow disk down the chain. Capped at 6 blocks (1%), 98% and 94%, and with a kernel
/// throttle 97% (96% before). The price was paid with no fault, where a 6-block gap is
/// within a real disk's bursts: `HIGH_MIN_SECS` is the floor in time that pays it back.
pub const HIGH_MAX_BLOCKS: f64 = 6.0;
/// The most blocks the low watermark may stand for (a quarter of `HIGH_MAX_BLOCKS`, as 1% is
/// of 4%).
pub const LOW_MAX_BLOCKS: f64 = 1.5;
/// The least time of our own reading the high watermark stands for (up to the paper's 4%).
/// A real disk delivers in bursts: a kernel throttle lets reads through a slice (100 ms) at a
/// time, a cloud volume's token bucket likewise, and two equal disks out of phase put their
/// readers that far apart now and then. Six blocks alone are 35-60 ms of reading on 4 and 8
/// real servers: with no fault, gd-pc read 2.3-8.0% of its bytes from backups over six runs;
/// with the 0.15 s floor, 0.3-1.1% over six. With one slow disk (a kernel throttle at a
/// quarter, a competing reader) it read as much of the ideal as before; with one link at
/// half about 1.5 points less (97-98%): that consumer's swings between its copies are wider.
/// A slow primary slows our own progress and so the floor: the consumer of a slow disk still
/// leaves it at about 6 blocks behind. The simulator's scans (1 MiB blocks at 20-32 MiB/s)
/// read fewer than 6 blocks in 0.15 s, so they are unchanged.
pub const HIGH_MIN_SECS: f64 = 0.15;

impl PrimaryCopies {
    pub fn new(s: PrimarySettings, shrink: bool) -> PrimaryCopies {
        PrimaryCopies {
            s,
            shrink,
            using: BTreeSet::new(),
            ahead: BTreeSet::new(),
            reported: BTreeMap::new(),
            had_reader: BTreeSet::new(),
            none_since: BTreeMap::new(),
            probes: Probes::default(),
            started: None,
            slow_since: BTreeMap::new(),
            holders: Vec::new(),
            depth: 0,
            for_slow_disk: false,
            horizon: CATCH_UP - 1,
        }
    }

    /// Our own progress per second since we first picked (fractions of the partition).
    fn own_rate(&self, view: &RouteView<'_>) -> Option<f64> {
        let secs = view.now.since(self.started?).as_secs_f64();
        (secs > 0.0).then(|| view.own_fraction / secs)
    }

    /// Where a neighbour that reported `progress` at `at` is now, if it has read at our own
    /// pace since: a backup's figure comes with a probe's answer, up to a probe interval old,
    /// while ours is this moment's. Compared as they came, equal consumers on the simulator's
    /// disks (32 MiB/s, 100 ms between probes) read one to three blocks *behind* us, so a
    /// consumer caught up with its backup's reader by that figure while it was still behind
    /// it, kept no window there, and left it once its primary helped nobody: on 16 disks with
    /// one at a quarter of its speed, a 2.2 s scan read 89.2% of the layout-aware ideal with
    /// figures taken as they came, 92.7% moved on. The guess moves a figure by at most `low`,
    /// the low watermark: no reader counts a high watermark ahead by the guess alone.
    /// Uncapped, a consumer whose own reads waited for a CPU (its pace meanwhile the
    /// average of a scan that takes 30 ms) moved equal neighbours a fifth of its partition on
    /// and read 20-37% of its bytes from backups with no fault, on a loaded 2-core machine.
    fn now_at(&self, view: &RouteView<'_>, progress: f64, at: Time, low: f64) -> f64 {
        let pace = self.own_rate(view).unwrap_or(0.0);
        (progress + (pace * view.now.since(at).as_secs_f64()).min(low)).min(1.0)
    }

    /// The watermarks in effect, never finer than progress itself can be measured: a gap of
    /// less than half a block is noise, and a band narrower than a block flaps. Nor coarser
    /// than `HIGH_MAX_BLOCKS` and `LOW_MAX_BLOCKS` blocks of a long partition, unless those
    /// blocks are less than `HIGH_MIN_SECS` of our own reading.
    fn watermarks(&self, view: &RouteView<'_>) -> (f64, f64) {
        let block = view.block_fraction;
        let low = self.s.low_watermark.min(LOW_MAX_BLOCKS * block).max(0.5 * block);
        let timed = self.own_rate(view).map_or(0.0, |r| r * HIGH_MIN_SECS);
        let high = self.s.high_watermark.min((HIGH_MAX_BLOCKS * block).max(timed)).max(2.0 * block).max(low + block);
        if self.shrink {
            let left = (1.0 - view.own_fraction).clamp(0.0, 1.0);
            ((low + (high - low) * left).max(low + block), low)
        } else {
            (high, low)
        }
    }

    /// Update which backups are in use from the latest reports.
    fn update_using(&mut self, view: &RouteView<'_>, primary: NodeId, backups: &[NodeId]) {
        let (high, low) = self.watermarks(view);
        self.probes.meet(backups);
        // Help passed on from reads as deep as the layout has servers came round a ring of
        // copies from us: with each consumer's neighbour's figure taken as of now
        // (`now_at`), the consumers of a ring of 8 helped each other on for the rest of an
        // 8 s scan after a fault of half a second, reading 44% of their bytes from backups.
        let reported = view.node(primary).last_state.and_then(|s| s.backup_depth);
        let others = reported.map(|d| d & !CATCH_UP);
        let helping = view.node(primary).holds_others() && others.is_none_or(|d| d < self.horizon);
        let slow_disks_chain = reported.is_some_and(|d| d & CATCH_UP == 0);
        for &b in backups {
            let slow = self.slower_for_a_while(view, primary, b);
            let helping = helping || slow;
            // Nobody reading the server's primary copies (finished, or none) counts as
            // progress 1: its disk is ours only if we are really behind, so equal disks
            // finishing a few blocks apart never send a request to a backup.
            let theirs = match self.reported.get(&b) {
                Some(Some((p, at))) => Some(self.now_at(view, *p, *at, low)),
                Some(None) => {
                    let settled =
                        self.none_since.get(&b).is_some_and(|t| view.now.since(*t) >= 2 * self.s.probe_interval);
                    (self.had_reader.contains(&b) || settled).then_some(1.0)
                }
                None => None,
            };
            if let Some(theirs) = theirs {
                let gap = theirs - view.own_fraction;
                if gap > low {
                    self.ahead.insert(b);
                } else {
                    self.ahead.remove(&b);
                }
                if gap > high || (helping && !disk_slower(view, b, primary)) {
                    self.using.insert(b);
                    self.depth = if gap > high || slow { 1 } else { others.unwrap_or(0).saturating_add(1) };
                    self.for_slow_disk = slow || slower(view, primary, b) || slow_disks_chain;
                } else if gap < -high || (!helping && gap < low) {
                    self.using.remove(&b);
                }
            }
        }
    }

    /// Whether the primary reads `slower` than backup `b`: at once when `FAR_BELOW` slower,
    /// else once it has at every judgement for `SLOW_FOR` probe intervals.
    fn slower_for_a_while(&mut self, view: &RouteView<'_>, primary: NodeId, b: NodeId) -> bool {
        if !slower(view, primary, b) {
            self.slow_since.remove(&b);
            return false;
        }
        let since = *self.slow_since.entry(b).or_insert(view.now);
        let far = match (view.node(primary).disk_speed(), view.node(b).disk_speed()) {
            (Some(p), Some(theirs)) => p < (1.0 - FAR_BELOW) * theirs,
            _ => false,
        };
        far || view.now.since(since) >= self.s.probe_interval * SLOW_FOR
    }

    /// Our share of the help a slow disk's chain passes on (`rate::reach`): the whole of it
    /// at its head (depth 1), less the deeper help passed on came from. A chain of catching
    /// up is not scaled.
    fn reach(&self) -> f64 {
        if self.for_slow_disk { reach(self.depth, self.horizon) } else { 1.0 }
    }

    pub fn is_using(&self, node: NodeId) -> bool {
        self.using.contains(&node)
    }
}

/// Whether the primary's disk reads `TROUBLE` slower than backup `b`'s and delivers us that
/// much less too: a real disk's figure alone swings by a fifth now and then.
fn slower(view: &RouteView<'_>, primary: NodeId, b: NodeId) -> bool {
    let Some(theirs) = view.node(b).disk_speed() else { return false };
    let p = view.node(primary);
    p.disk_speed().is_some_and(|d| d < (1.0 - TROUBLE) * theirs) && p.delivers_below(theirs, TROUBLE)
}

/// Whether `a`'s disk reads `TROUBLE` slower than `b`'s, by the figures alone.
fn disk_slower(view: &RouteView<'_>, a: NodeId, b: NodeId) -> bool {
    match (view.node(a).disk_speed(), view.node(b).disk_speed()) {
        (Some(a), Some(b)) => a < (1.0 - TROUBLE) * b,
        _ => false,
    }
}

impl RoutePolicy for PrimaryCopies {
    fn kind(&self) -> ReadPolicyKind {
        if self.shrink { ReadPolicyKind::GdPcShrink } else { ReadPolicyKind::GdPc }
    }

    fn metric(&self) -> ProgressMetric {
        ProgressMetric::Fraction
    }

    fn steals_at_end(&self) -> bool {
        true
    }

    fn notifies_progress(&self) -> bool {
        true
    }

    /// A window at a slow primary and one at the backup, as GD's pull rule keeps: the slow
    /// disk's line is the last to be served, and a backup that answers takes from it.
    fn steals_from_slow_lines(&self) -> bool {
        true
    }

    fn service(&self) -> crate::sched::Service {
        let depth = match (self.using.is_empty(), self.for_slow_disk) {
            (true, _) => 0,
            (false, true) => self.depth,
            (false, false) => self.depth | CATCH_UP,
        };
        crate::sched::Service { depth, level: true, ..crate::sched::Service::FURTHEST_BEHIND }
    }

    fn on_layout(&mut self, layout: &crate::layout::Layout) {
        self.horizon = u8::try_from(layout.nodes()).unwrap_or(u8::MAX).min(CATCH_UP - 1);
    }

    /// A window at the primary; in a slow disk's chain of help, at each backup in use one
    /// scaled by our `reach`; else one at each backup in use whose reader is ahead of ours by
    /// more than the low watermark (see "A window per copy in use").
    fn window(&self, base: u32) -> u32 {
        let backups = if self.for_slow_disk {
            self.using.len() as f64 * self.reach()
        } else {
            self.using.intersection(&self.ahead).count() as f64
        };
        base.saturating_add((f64::from(base) * backups).ceil() as u32)
    }

    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        let (primary, backups) = holders.split_first().expect("holders are never empty");
        self.started.get_or_insert(view.now);
        if self.holders != holders {
            self.holders = holders.to_vec();
        }
        self.update_using(view, *primary, backups);
        // The copy in use that one more request leaves least loaded for its share of the
        // window (the primary's 1, a backup's our `reach`), the primary on ties. In steady
        // state this is GD's pull rule (each reply frees a slot at the server that sent it);
        // unlike the pull rule it also gives a backup that has just joined its share at once.
        // A share of 0 (the ring's last) leaves a backup infinitely loaded.
        let reach = self.reach();
        let load = |&(n, share): &(NodeId, f64)| f64::from(view.node(n).outstanding + 1) / share;
        let in_use = backups.iter().filter(|b| self.using.contains(b)).map(|&b| (b, reach));
        let best = std::iter::once((*primary, 1.0)).chain(in_use).min_by(|a, b| load(a).total_cmp(&load(b)));
        Pick::To(best.map_or(*primary, |(n, _)| n))
    }

    fn on_state(&mut self, now: Time, node: NodeId, state: &ServerState) {
        self.reported.insert(node, state.primary_progress.map(|p| (p, now)));
        match state.primary_progress {
            Some(_) => {
                self.had_reader.insert(node);
                self.none_since.remove(&node);
            }
            None => {
                self.none_since.entry(node).or_insert(now);
            }
        }
    }

    fn on_answer(&mut self, view: &RouteView<'_>, node: NodeId) {
        let holders = std::mem::take(&mut self.holders);
        if let Some((primary, backups)) = holders.split_first()
            && backups.contains(&node)
            && slower(view, *primary, node)
        {
            self.update_using(view, *primary, backups);
        }
        self.holders = holders;
    }

    fn probe_at(&self, view: &RouteView<'_>) -> Option<Time> {
        self.probes.next_at(view, self.s.probe_interval, ProbeWhom::Idle)
    }

    fn poll_probe(&mut self, view: &RouteView<'_>) -> Option<NodeId> {
        self.probes.due(view, self.s.probe_interval, ProbeWhom::Idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::policy::NodeView;
    use std::time::Duration;

    /// A partition of 100 blocks: the default watermarks (4% and 1%) stand as they are.
    fn view<'a>(nodes: &'a BTreeMap<NodeId, NodeView>, own: f64) -> RouteView<'a> {
        RouteView { own_fraction: own, block_fraction: 0.01, ..RouteView::test(nodes) }
    }

    fn state(p: Option<f64>) -> ServerState {
        ServerState { primary_progress: p, ..ServerState::default() }
    }

    const H: [NodeId; 2] = [NodeId(0), NodeId(1)];

    #[test]
    fn the_backup_is_used_between_the_watermarks_only() {
        let nodes = BTreeMap::new();
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        // Nothing known of the backup yet: primary only.
        assert_eq!(p.pick(&view(&nodes, 0.10), &H), Pick::To(NodeId(0)));
        // The backup's primary consumer is 3% ahead: under the 4% high watermark.
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.13)));
        for _ in 0..4 {
            assert_eq!(p.pick(&view(&nodes, 0.10), &H), Pick::To(NodeId(0)));
        }
        // 5% ahead: the backup joins and, having nothing of ours in flight, gets the next.
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.15)));
        let mut busy = BTreeMap::new();
        busy.insert(NodeId(0), NodeView { outstanding: 2, ..NodeView::default() });
        assert_eq!(p.pick(&view(&busy, 0.10), &H), Pick::To(NodeId(1)));
        // The gap closes to 2%: still between the watermarks, the backup stays in use...
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.14)));
        p.pick(&view(&nodes, 0.12), &H);
        assert!(p.is_using(NodeId(1)));
        // ...until it is under 1%.
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.145)));
        p.pick(&view(&nodes, 0.14), &H);
        assert!(!p.is_using(NodeId(1)));
    }

    /// A consumer on `layout` at 30% of its scan, its primary holding two of others' reads
    /// (the least of their depths `depth_there`) besides `out[0]` of ours, `out[1]` of ours
    /// at its backup, whose reader is at `theirs`: the policy after a pick, and the pick.
    fn helper(layout: &crate::layout::Layout, depth_there: u8, out: [u32; 2], theirs: f64) -> (PrimaryCopies, Pick) {
        let mut nodes = queues(out, [out[0] + 2, out[1]]);
        nodes.get_mut(&NodeId(0)).unwrap().last_state.as_mut().unwrap().backup_depth = Some(depth_there);
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_layout(layout);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(theirs)));
        let pick = p.pick(&view(&nodes, 0.30), &H);
        assert!(p.is_using(NodeId(1)), "our primary helps others: the backup is in use");
        (p, pick)
    }

    /// Help passed on `depth` hops down a ring of 4 disks with one slow: the layout-aware
    /// ideal has us read `(4 - depth) / 3` as much from our backup as the slow disk's reader.
    #[test]
    fn help_passed_on_takes_a_share_that_shrinks_down_the_chain() {
        let layout = crate::layout::Layout::chained(4, 2).unwrap();
        let helping = |depth_there: u8, out: [u32; 2]| {
            let (p, pick) = helper(&layout, depth_there, out, 0.30);
            (pick, p.window(4))
        };
        // Depth 2, two thirds of a window: with 3 requests at the primary, the backup's share
        // is full at 2.
        assert_eq!(helping(1, [3, 1]), (Pick::To(NodeId(1)), 7));
        assert_eq!(helping(1, [3, 2]).0, Pick::To(NodeId(0)));
        // Depth 3, a third: 1.
        assert_eq!(helping(2, [3, 0]), (Pick::To(NodeId(1)), 6));
        assert_eq!(helping(2, [3, 1]).0, Pick::To(NodeId(0)));
        // Depth 4, the ring's last: its backup is the slow disk, nothing goes there.
        assert_eq!(helping(3, [3, 0]), (Pick::To(NodeId(0)), 4));
    }

    #[test]
    fn a_backup_nobody_reads_as_primary_counts_as_finished() {
        let nodes = BTreeMap::new();
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.4)));
        p.on_state(Time::ZERO, NodeId(1), &state(None));
        // Half the partition left: far behind a finished neighbour, use its disk.
        p.pick(&view(&nodes, 0.5), &H);
        assert!(p.is_using(NodeId(1)));
        // 2% left at the end of an even scan: under the high watermark, stay on the primary.
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.9)));
        p.on_state(Time::ZERO, NodeId(1), &state(None));
        p.pick(&view(&nodes, 0.98), &H);
        assert!(!p.is_using(NodeId(1)));
    }

    #[test]
    fn a_backup_that_has_not_heard_from_its_consumer_yet_is_left_alone_until_it_is_clear() {
        let nodes = BTreeMap::new();
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        // The very first probe can reach the backup before its own consumer's first request.
        p.on_state(Time::ZERO, NodeId(1), &state(None));
        p.pick(&view(&nodes, 0.0), &H);
        assert!(!p.is_using(NodeId(1)), "not a finished consumer, just an early probe");
        // Still nobody after two probe intervals: there is no such consumer; its disk is free.
        let later = RouteView { now: Time::ZERO + Duration::from_millis(100), ..view(&nodes, 0.1) };
        p.pick(&later, &H);
        assert!(p.is_using(NodeId(1)));
    }

    #[test]
    fn a_backup_not_read_from_is_probed_periodically() {
        let mut nodes = BTreeMap::new();
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.pick(&view(&nodes, 0.0), &H);
        let mut v = view(&nodes, 0.0);
        assert_eq!(p.probe_at(&v), Some(Time::ZERO), "due at once");
        assert_eq!(p.poll_probe(&v), Some(NodeId(1)));
        assert_eq!(p.poll_probe(&v), None, "not again within the interval");
        // The driver is told when to wake for the next, whatever else arrives meanwhile.
        let next = Time::ZERO + Duration::from_millis(50);
        assert_eq!(p.probe_at(&v), Some(next));
        v.now = next;
        assert_eq!(p.poll_probe(&v), Some(NodeId(1)));
        // While requests are outstanding there, replies carry the figure: no probe, no wake.
        nodes.insert(NodeId(1), NodeView { outstanding: 1, ..NodeView::default() });
        let v = RouteView { now: Time::ZERO + Duration::from_secs(1), ..view(&nodes, 0.0) };
        assert_eq!(p.poll_probe(&v), None);
        assert_eq!(p.probe_at(&v), None);
    }

    /// Holders with `ours` of our requests outstanding at each and `queue` queued there when
    /// each last answered.
    fn queues(ours: [u32; 2], queue: [u32; 2]) -> BTreeMap<NodeId, NodeView> {
        (0..2)
            .map(|i| {
                let state = ServerState { queue_len: queue[i], ..ServerState::default() };
                let v = NodeView {
                    outstanding: ours[i],
                    outstanding_at_state: ours[i],
                    last_state: Some(state),
                    ..NodeView::default()
                };
                (NodeId(i as u32), v)
            })
            .collect()
    }

    #[test]
    fn a_primary_that_helps_a_neighbour_sends_us_to_the_backup_until_it_helps_nobody() {
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        // The backup's reader is level with us, under every watermark.
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.30)));
        // Only our requests queued at the primary: nobody to help, primary only.
        p.pick(&view(&queues([3, 0], [3, 2]), 0.30), &H);
        assert!(!p.is_using(NodeId(1)), "equal disks never read a backup");
        // Two of another consumer's queued there too: the help is passed on at once...
        p.pick(&view(&queues([3, 0], [5, 2]), 0.30), &H);
        assert!(p.is_using(NodeId(1)));
        // ...and kept while the primary helps, however far the backup's reader falls behind
        // us (its server serves it first) and however loaded the backup is.
        p.pick(&view(&queues([2, 1], [4, 3]), 0.35), &H);
        assert!(p.is_using(NodeId(1)));
        p.pick(&view(&queues([2, 1], [4, 6]), 0.40), &H);
        assert!(p.is_using(NodeId(1)));
        // The primary helps nobody any more: the paper's rule, out under the low watermark.
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.405)));
        p.pick(&view(&queues([2, 1], [2, 3]), 0.40), &H);
        assert!(!p.is_using(NodeId(1)));
        // A backup whose reader is ahead joins whether or not the primary helps.
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.40)));
        p.pick(&view(&queues([3, 0], [3, 5]), 0.30), &H);
        assert!(p.is_using(NodeId(1)));
    }

    #[test]
    fn help_is_passed_on_one_hop_deeper_and_never_round_the_ring() {
        let layout = crate::layout::Layout::chained(4, 2).unwrap();
        let helped_at_depth = |depth: u8| {
            let mut nodes = queues([3, 0], [5, 2]);
            let s = nodes.get_mut(&NodeId(0)).unwrap().last_state.as_mut().unwrap();
            s.backup_depth = Some(depth);
            let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
            p.on_layout(&layout);
            p.on_state(Time::ZERO, NodeId(1), &state(Some(0.30)));
            p.pick(&view(&nodes, 0.30), &H);
            (p.is_using(NodeId(1)), p.service().depth)
        };
        assert_eq!(helped_at_depth(1), (true, 2));
        assert_eq!(helped_at_depth(3), (true, 4));
        assert_eq!(helped_at_depth(4), (false, 0), "reads as deep as the ring is long came from us");
    }

    /// Equal disks, a consumer catching up on its backup's reader: a chain no slow disk began,
    /// marked `CATCH_UP`. Its helpers keep a window at a backup only while its reader is
    /// ahead of theirs, and share the window unscaled; a slow disk's helpers, by `reach`.
    #[test]
    fn a_chain_no_slow_disk_began_is_marked_and_not_widened() {
        let layout = crate::layout::Layout::chained(4, 2).unwrap();
        let mut head = PrimaryCopies::new(PrimarySettings::default(), false);
        head.on_layout(&layout);
        assert_eq!(head.window(4), 4, "the primary alone");
        head.on_state(Time::ZERO, NodeId(1), &state(Some(0.15)));
        head.pick(&view(&queues([4, 0], [3, 0]), 0.10), &H);
        assert_eq!(head.service().depth, 1 | CATCH_UP, "5% behind the backup's reader, on equal disks");
        assert_eq!(head.window(4), 8, "catching up: a window at the backup");
        // A helper whose backup's reader is level with it.
        let helping = |depth_there: u8| {
            let (p, pick) = helper(&layout, depth_there, [3, 1], 0.305);
            (p.service().depth, p.window(4), pick)
        };
        assert_eq!(helping(1 | CATCH_UP), (2 | CATCH_UP, 4, Pick::To(NodeId(1))), "one window, the least loaded copy");
        assert_eq!(helping(1), (2, 7, Pick::To(NodeId(1))), "two thirds of a window more");
    }

    #[test]
    fn a_neighbours_figure_counts_as_moved_on_at_our_pace_since_it_came() {
        let at = |ms: u64| Time::ZERO + Duration::from_millis(ms);
        let alone = queues([3, 0], [2, 0]);
        let still_used_with = |reported_at: u64| {
            let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
            p.pick(&view(&alone, 0.0), &H);
            // The backup's reader 6% ahead: in use.
            p.on_state(at(1000), NodeId(1), &state(Some(0.36)));
            p.pick(&RouteView { now: at(1000), ..view(&alone, 0.30) }, &H);
            assert!(p.is_using(NodeId(1)));
            p.on_state(at(reported_at), NodeId(1), &state(Some(0.305)));
            p.pick(&RouteView { now: at(1000), ..view(&alone, 0.30) }, &H);
            p.is_using(NodeId(1))
        };
        // At 1 s we have read 30% (0.3 a second). The backup's reader said 30.5% a tenth of a
        // second ago: half a percent ahead as it came, one and a half (past the low
        // watermark) now, so we are still behind it and stay.
        assert!(still_used_with(900));
        // The same figure just in: that reader is level with us, and our primary helps
        // nobody: back to the primary alone.
        assert!(!still_used_with(1000));
    }

    /// Our own reads stalled (a CPU elsewhere): a level neighbour's old figure, moved on at
    /// our average pace, must not make it a high watermark ahead.
    #[test]
    fn a_neighbours_figure_is_moved_on_by_the_low_watermark_at_most() {
        let at = |ms: u64| Time::ZERO + Duration::from_millis(ms);
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        let alone = queues([4, 0], [4, 0]);
        p.pick(&view(&alone, 0.0), &H);
        // The neighbour said 30% at 100 ms; at 300 ms we have read 30% too, at a pace of 1 a
        // second: uncapped, the guess moves it on to 50%, 20% ahead of us.
        p.on_state(at(100), NodeId(1), &state(Some(0.30)));
        p.pick(&RouteView { now: at(300), ..view(&alone, 0.30) }, &H);
        assert!(!p.is_using(NodeId(1)), "a gap of 20% by the guess alone is no gap");
        // A real gap is still seen.
        p.on_state(at(300), NodeId(1), &state(Some(0.36)));
        p.pick(&RouteView { now: at(300), ..view(&alone, 0.30) }, &H);
        assert!(p.is_using(NodeId(1)));
    }

    /// Holders whose disks read at these speeds (bytes/s), as measured from replies, each
    /// having delivered us as much for a fifth of a second.
    fn speeds(primary: f64, backup: f64) -> BTreeMap<NodeId, NodeView> {
        [primary, backup]
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let mut v = NodeView {
                    replied_disk_bytes_per_sec: Some(s),
                    rate_bytes_per_sec: Some(s),
                    ..NodeView::default()
                };
                v.delivered.note((s * 0.2) as u64, 0.2, 0.25);
                (NodeId(i as u32), v)
            })
            .collect()
    }

    /// A consumer 5% behind its backup's reader (it joins the backup), then level with it
    /// (where the paper's rule leaves) `after` the first pick, on holders like `nodes`.
    fn caught_up_after(nodes: &BTreeMap<NodeId, NodeView>, after: Duration) -> PrimaryCopies {
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.15)));
        p.pick(&view(nodes, 0.10), &H);
        assert!(p.is_using(NodeId(1)));
        p.on_state(Time::ZERO + after, NodeId(1), &state(Some(0.20)));
        p.pick(&RouteView { now: Time::ZERO + after, ..view(nodes, 0.20) }, &H);
        p
    }

    /// `caught_up_after` one probe interval.
    fn caught_up(nodes: &BTreeMap<NodeId, NodeView>) -> PrimaryCopies {
        caught_up_after(nodes, PrimarySettings::default().probe_interval)
    }

    /// A consumer whose window waits at a slow primary picks once per slow block; a faster
    /// backup is judged as its probe's answer comes in, not at that pick.
    #[test]
    fn a_faster_backup_is_judged_when_its_probe_answers() {
        // `node` answers that its primary reader is at `theirs`; ours is at 0.10.
        fn answer(p: &mut PrimaryCopies, nodes: &BTreeMap<NodeId, NodeView>, node: u32, theirs: f64) -> bool {
            p.on_state(Time::ZERO, NodeId(node), &state(Some(theirs)));
            p.on_answer(&view(nodes, 0.10), NodeId(node));
            p.is_using(NodeId(node))
        }
        let slow = speeds(8e6, 32e6);
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.pick(&view(&slow, 0.10), &H);
        assert!(!answer(&mut p, &slow, 2, 0.9), "a server that holds no copy of what we read");
        assert!(answer(&mut p, &slow, 1, 0.07), "a slow primary: in use at once, its reader served first there");
        assert_eq!(p.window(4), 8, "the head of a chain of help: a window there too");
        // Equal disks: the answer waits for the next pick, when our own progress has moved.
        let equal = speeds(32e6, 32e6);
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.pick(&view(&equal, 0.10), &H);
        assert!(!answer(&mut p, &equal, 1, 0.15));
        p.pick(&view(&equal, 0.10), &H);
        assert!(p.is_using(NodeId(1)));
    }

    /// On a partition of 1,000 blocks 6 blocks are a few milliseconds of a fast disk: the
    /// high watermark stands for `HIGH_MIN_SECS` of our own reading, up to the paper's 4%.
    #[test]
    fn the_high_watermark_covers_a_time_of_our_own_reading() {
        let nodes = BTreeMap::new();
        let at = |secs: f64, own: f64| RouteView {
            now: Time::from_secs_f64(secs),
            own_fraction: own,
            block_fraction: 0.001,
            ..RouteView::test(&nodes)
        };
        let backup_joins = |own_after_a_second: f64, gap: f64| {
            let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
            p.pick(&at(0.0, 0.0), &H);
            p.on_state(Time::from_secs_f64(1.0), NodeId(1), &state(Some(own_after_a_second + gap)));
            p.pick(&at(1.0, own_after_a_second), &H);
            p.is_using(NodeId(1))
        };
        // Half the partition a second: 0.15 s of it is 7.5%, so 4% stands; 20 blocks ahead is
        // under it.
        assert!(!backup_joins(0.5, 0.02));
        assert!(backup_joins(0.5, 0.045));
        // A twentieth a second: 0.75% (7.5 blocks), and 20 blocks ahead is over it.
        assert!(backup_joins(0.05, 0.02));
        assert!(!backup_joins(0.05, 0.007));
    }

    #[test]
    fn help_is_not_passed_on_to_a_slower_backup() {
        // Our primary helps a neighbour (another's requests queued there), the backup's queue
        // is shorter and its reader level with us; but its disk reads a quarter as fast:
        // our requests would wait on it, the scan ending on them.
        let mut nodes = queues([3, 0], [5, 2]);
        for (n, speed) in [(0, 32e6), (1, 8e6)] {
            let v = nodes.get_mut(&NodeId(n)).unwrap();
            (v.replied_disk_bytes_per_sec, v.rate_bytes_per_sec) = (Some(speed), Some(speed));
            v.delivered.note((speed * 0.2) as u64, 0.2, 0.25);
        }
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.30)));
        p.pick(&view(&nodes, 0.30), &H);
        assert!(!p.is_using(NodeId(1)));
        // Its reader the high watermark ahead of us: the paper's rule, slow or not (it serves
        // the furthest behind first).
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.35)));
        p.pick(&view(&nodes, 0.30), &H);
        assert!(p.is_using(NodeId(1)));
        // A backup we have read nothing from yet is judged by its disk's figure alone.
        let mut nodes = queues([3, 0], [5, 2]);
        for (n, speed) in [(0, 32e6), (1, 8e6)] {
            nodes.get_mut(&NodeId(n)).unwrap().replied_disk_bytes_per_sec = Some(speed);
        }
        let mut p = PrimaryCopies::new(PrimarySettings::default(), false);
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.30)));
        p.pick(&view(&nodes, 0.30), &H);
        assert!(!p.is_using(NodeId(1)));
    }

    #[test]
    fn a_slow_primary_keeps_its_backup() {
        // A primary a quarter as fast stays on its backup, even once the backup's reader is the
        // high watermark behind us: that server serves its reader first.
        let slow = speeds(8e6, 32e6);
        let mut p = caught_up(&slow);
        assert!(p.is_using(NodeId(1)));
        p.pick(&view(&slow, 0.25), &H);
        assert!(p.is_using(NodeId(1)));
        // Disks within `TROUBLE` of each other leave, as the paper says.
        assert!(!caught_up(&speeds(28e6, 32e6)).is_using(NodeId(1)));
        // So does a slow figure alone, the primary delivering us as much as the backup's
        // disk: a real disk's swing.
        let mut swing = slow.clone();
        swing.get_mut(&NodeId(0)).unwrap().rate_bytes_per_sec = Some(30e6);
        assert!(!caught_up(&swing).is_using(NodeId(1)));
    }

    /// A real disk's figure swings by a fifth for a moment: a primary keeps its backup only
    /// once it has read slower for `SLOW_FOR` probe intervals (at once when `FAR_BELOW`).
    #[test]
    fn a_slow_primary_keeps_its_backup_only_once_it_has_read_slow_for_a_while() {
        let interval = PrimarySettings::default().probe_interval;
        let slower = speeds(22e6, 32e6);
        assert!(!caught_up_after(&slower, Duration::ZERO).is_using(NodeId(1)), "one figure");
        assert!(!caught_up_after(&slower, interval).is_using(NodeId(1)), "not far below: two intervals");
        assert!(caught_up_after(&slower, interval * SLOW_FOR).is_using(NodeId(1)));
        assert!(caught_up_after(&speeds(8e6, 32e6), Duration::ZERO).is_using(NodeId(1)), "far below: at once");
        // A figure in between that is not slow starts the wait again.
        let mut p = caught_up_after(&slower, interval);
        let even = speeds(32e6, 32e6);
        p.pick(&RouteView { now: Time::ZERO + interval, ..view(&even, 0.20) }, &H);
        p.on_state(Time::ZERO + interval * SLOW_FOR, NodeId(1), &state(Some(0.20)));
        p.pick(&RouteView { now: Time::ZERO + interval * SLOW_FOR, ..view(&slower, 0.20) }, &H);
        assert!(!p.is_using(NodeId(1)));
    }

    #[test]
    fn the_shrinking_watermark_closes_towards_the_low_one() {
        let nodes = BTreeMap::new();
        let s = PrimarySettings { high_watermark: 0.05, low_watermark: 0.01, ..PrimarySettings::default() };
        let p = PrimaryCopies::new(s, true);
        let (h0, l0) = p.watermarks(&view(&nodes, 0.0));
        let (h5, l5) = p.watermarks(&view(&nodes, 0.5));
        assert!((h0 - 0.05).abs() < 1e-12 && (l0 - 0.01).abs() < 1e-12);
        assert!((h5 - 0.03).abs() < 1e-12 && l5 == l0);
        // Never a band narrower than a block (0.01 here), which flaps.
        let (h9, _) = p.watermarks(&view(&nodes, 0.9));
        assert!((h9 - 0.02).abs() < 1e-12, "{h9}");
        let fixed = PrimaryCopies::new(s, false);
        assert_eq!(fixed.watermarks(&view(&nodes, 0.9)).0, 0.05);
    }

    #[test]
    fn watermarks_never_go_below_what_a_block_can_resolve() {
        let nodes = BTreeMap::new();
        let p = PrimaryCopies::new(PrimarySettings::default(), false);
        // 8 blocks in the partition: a block is 12.5%.
        let v = RouteView { block_fraction: 0.125, ..view(&nodes, 0.0) };
        let (high, low) = p.watermarks(&v);
        assert_eq!((high, low), (0.25, 0.0625));
    }

    #[test]
    fn watermarks_of_a_long_partition_stand_for_a_few_blocks() {
        let nodes = BTreeMap::new();
        let p = PrimaryCopies::new(PrimarySettings::default(), false);
        // 553 blocks: 4% and 1% would be 22 and 5.5 blocks.
        let v = RouteView { block_fraction: 1.0 / 553.0, ..view(&nodes, 0.0) };
        let (high, low) = p.watermarks(&v);
        assert!((high * 553.0 - HIGH_MAX_BLOCKS).abs() < 1e-9 && (low * 553.0 - LOW_MAX_BLOCKS).abs() < 1e-9);
        // A backup's reader 2% ahead is 11 blocks: help, where 4% would have waited.
        let mut p = p;
        p.on_state(Time::ZERO, NodeId(1), &state(Some(0.12)));
        p.pick(&RouteView { own_fraction: 0.10, ..v }, &H);
        assert!(p.is_using(NodeId(1)));
    }
}
