//! gd-plan (ours): graduated declustering whose servers are told each consumer's share.
//!
//! Progress-based GD (river §3.3) can only give a consumer more than half of a server while
//! that consumer is behind, so a ring of servers that must give unequal shares holds a
//! progress gradient of about a block per hop, and the consumers furthest from a slow disk
//! finish early while the ones next to it still read: the tail that keeps GD a few percent
//! below the layout-aware ideal on short scans. The shares that meet the
//! ideal are computable: they are a flow of MOD-2's network ([`crate::ideal::plan`]), given
//! every server's rate. So:
//!
//! - **Rates.** Each consumer asks every server of the layout for its disk speed, one probe
//!   every `probe_interval / nodes`, so each is asked every `probe_interval`; a server's
//!   answer is its bytes over busy time of its last few reads, whoever's they were
//!   ([`crate::handoff::RateMeter`]), so all consumers plan on the same figures. Until a
//!   server has answered, the speed its replies showed stands in; a server not heard of at
//!   all counts at the median of the others. Speeds within `EQUAL_WITHIN` of a healthy
//!   disk's (the fastest that another comes near: `healthy_speed`) count as equal (seeks
//!   make a busy disk look a little slow); a slower one counts as slow once its readers fall
//!   behind too (`SLOW_LAG_BLOCKS` or `SLOW_LAG_SHARE` of a fragment, whichever is less, or
//!   `SLOW_LAG_SECS` of reading if that is more; at once if it is far below, `FAR_BELOW`),
//!   as a real disk's figure swings where its speed does not, and stays slow while it
//!   measures slower and its readers do not get as far ahead. Slow ones are planned a little
//!   below their speed, a reserve for the end of the scan (`SLOW_RESERVE_SECS` of the time it
//!   has left, `SLOW_MARGIN` at most).
//! - **Plan.** From those rates, the layout, and what is left of every fragment (a scan
//!   reads each fragment whole; the primary servers report their readers' progress), the
//!   consumer computes the flow that finishes everything at MOD-2's time while reading
//!   primaries where it can, and from it, for each fragment and holder, the share of that
//!   holder's disk the fragment's reader should get. A reader that fell behind is planned a
//!   larger share, so the plan corrects itself; with every disk equally fast the plan is
//!   primaries only. It plans again when a rate moves by more than `REPLAN_CHANGE` or what is
//!   left of a fragment by more than a block.
//! - **Requests** carry that share (`Service::share`) and the copy they read; servers give
//!   each stream a slot of every period as long as its share, in the same phase at every
//!   server and backup readers first, so that a consumer's two disks take turns at it, and
//!   serve by credits on the shares with GD-5 runs and a correction for the current lag
//!   where no slot decides (`sched::PlannedShares::planned`).
//! - **Routing.** Holders the plan gives (almost) nothing of a fragment are not used (with no
//!   fault: the primary only, so no disk alternates between files); each of the rest always
//!   has two requests of ours queued (`QUEUED_PER_HOLDER`; one for a reader of several
//!   fragments at once), so its shares can act and its slot for us does not wait a round
//!   trip after the first block, and beyond that each reply pulls the next request to the
//!   server that sent it, as in GD. A reader of several fragments instead sends each to the
//!   holder furthest below its planned part of that fragment: its servers give it no slots,
//!   so only its routing can split a fragment as planned. Requests a plan strands at a disk
//!   judged slow, one it no longer uses for their fragment, are taken back and sent again.
//!   Placed there in a scan's first few tenths of a second, before the consumer's figures
//!   showed every slow disk, they were served a few a period for two seconds, and took that
//!   slow disk's time from its other reader, which needed all of it. On 24 disks with 16 at
//!   a quarter of their speed, two by two, such a reader read 6 of its 64 MiB from its slow
//!   primary, and the scan read 90.6% of the layout-aware ideal (92.9% taken back; `ganges
//!   sim bench-scan --producers 24 --fault-rate 8MiB/s`).
//! - **Pieces.** A block is read in pieces of `PlanSettings::piece_bytes` (256 KiB), each a
//!   request of its own: the servers check them against their own checksum units
//!   (`shape::CHECK_BYTES`), so a piece costs the disk its own length, and a slot's boundary
//!   and a consumer's rate over a window are rounded to a piece instead of a block.
//!
//! Every consumer computes the same plan from nearly the same rates; shares are normalised
//! by the servers over the streams they actually have, so a consumer alone at a server gets
//! all of it whatever its plan says.
//!
//! **Logical partitions** (GD-7, gd-enhancements' Figures 4 and 5). A partition that spans
//! fragments reads its part of each at the same pace (`RoutePolicy::reads_in_step`), so its
//! fraction done, which the servers balance and the plan counts on, is also each part's; and
//! its share of a disk holding two of its fragments is the sum of both fragments' shares.
//! With every disk equally fast the plan stays primaries only, and the fragment's readers
//! split its primary between them. Read one part after another, a partition of twice the
//! size would wait on one disk at a time, and read far below the ideal with no fault.

use super::policy::{EQUAL_WITHIN, Pick, PlanSettings, Pulls, ReadPolicyKind, RoutePolicy, RouteView, healthy_speed};
use crate::ideal::{Demand, plan};
use crate::ids::{ConsumerId, FragmentId, NodeId};
use crate::layout::Layout;
use crate::sched::{Discipline, ProgressMetric, SHARE_ONE, Service, plan_units};
use crate::time::Time;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A rate that moved by more than this fraction since the last plan makes a new plan. Plans
/// are cheap (a max-flow over a node per fragment and per server) and move smoothly with the
/// rates, so a small change is worth following: a plan made on a rate caught half-way through
/// a server's smoothing would otherwise stay wrong.
pub const REPLAN_CHANGE: f64 = 0.05;
/// A disk measured slow counts as slow only once its primary fragments' readers are this
/// many blocks (of 1 MiB) behind the mean, and no longer once they are as far ahead (its
/// slowness was overrated). Real disks' figures swing: on one machine whose servers share
/// its two cores and one device, healthy disks under the same kernel cap measured from 72 to
/// 92 MB/s at once, so with every disk well most measured `EQUAL_WITHIN` below the fastest
/// and got backup readers (2 to 7% of the bytes read from backups in 8-server scans). A
/// disk that is really slow holds its readers back; one that only measured slow does not.
pub const SLOW_LAG_BLOCKS: f64 = 4.0;
/// The lag of `SLOW_LAG_BLOCKS` is at least this much reading at the fastest disk's speed:
/// 4 blocks at 32 MiB/s, but on real disks at 90 to 250 MB/s a block count is a moment (16 to
/// 45 ms), which the servers of one machine, waiting for its two CPUs, fall behind by now
/// and then. With 4 blocks, 8-server scans with no fault read 1.8-3.3% of their bytes from
/// backups (5.4% once on 4); with the time, 0.6 and 1.1%, 0.0 on 4, and the same under
/// faults (a disk far below is slow at once, whatever the lag).
pub const SLOW_LAG_SECS: f64 = 0.125;
/// Nor more than this share of a fragment (the paper's high watermark, 4%), unless
/// `SLOW_LAG_SECS` asks for more. On a short scan with a mild fault the lag of
/// `SLOW_LAG_BLOCKS` came too late: on 8 disks at 20 MiB/s with 6 ms seeks and 24 MiB
/// fragments, two at 0.75 of their speed (measured 0.84 of the healthy ones, which pay
/// seeks: slow only once behind), their readers fell 4 blocks behind the mean only near
/// the end, so gd-plan read primaries alone and 79.9% of the layout-aware ideal (93.5-96.5%
/// over five seeds with the share). Over 40 configurations of 8 to 24 disks and 1 to 5 s
/// scans, its cells under 93% went from 6 to 4, the least from 79.9% to 90.3%; one cell lost
/// 1.4 points (24 disks, 24 MiB, 6 at 0.6: median 93.2% -> 91.8%). Fragments of 100 blocks
/// or more, every real bench's, are judged as before.
pub const SLOW_LAG_SHARE: f64 = 0.04;
/// A disk measured under this fraction of the fastest is slow at once, its readers behind or
/// not: no swing of a healthy disk's figure goes that far, and a disk that slow would cost
/// the wait for its readers' lag (on short scans, up to 3 points of the layout-aware ideal).
pub const FAR_BELOW: f64 = 0.6;
/// Slow disks are planned at this fraction less than their measured speed. A slow disk is
/// the scan's scarcest resource and was busy to the very end of the scan (its readers
/// finishing last) when planned at its full speed; planned a little short, the many fast
/// disks absorb what the plan did not foresee (worth about a point at 1 to 8 slow disks).
pub const SLOW_MARGIN: f64 = 0.06;
/// The slow disks' reserve is a time, not a part of the scan: they are planned short by at
/// most this much of the time the scan has left (and by `SLOW_MARGIN` at most), which is the
/// `SLOW_MARGIN` of the default bench's two-second scans. A fixed fraction kept a reserve
/// that grew with the scan and went, while the scan lasted, to the readers of the slow disks
/// (whose disk serves them alone, so pays no seeks), ahead of everyone else.
pub const SLOW_RESERVE_SECS: f64 = 0.12;
/// Progress within this many blocks (of 1 MiB: `sched::plan_units`) of the mean counts as
/// on track (see `on_track`): the
/// plan moves shares for a reader only once it is further behind (or ahead) than this; a
/// smaller lag is left to the disks' own lag terms (`sched::PlannedShares`). A plan that
/// follows every block of lag makes each reader that caught up slow its neighbours down, and
/// the slowest consumer's 500 ms rate swings with it (in the simulator's fault-schedule case,
/// 8 blocks kept it on track in about twice as many windows as 1 block). But those terms do
/// not close a lag a slow disk's reader took before its disk was found slow: with 8 blocks,
/// on 12 disks at 25 MiB/s with one at 0.3 of its speed, it stayed 3 to 5 blocks behind for
/// all of a 2 s scan and finished last, at 92.6% of the layout-aware ideal (94.1% with 2);
/// `ganges sim generality`'s least rose from 92.9% to 94.7%, and the fault-schedule case
/// adapts as fast at seeds 1 to 8.
pub const ON_TRACK_BLOCKS: f64 = 2.0;
/// `ON_TRACK_BLOCKS` for a consumer that reads parts of fragments (logical partitions,
/// GD-7). With 8 blocks for them too, unequal partitions under slow disks fell a few points
/// below equal ones; why the wide band costs partitions is not established.
pub const PARTIAL_ON_TRACK_BLOCKS: f64 = 1.0;
/// The fragments' sizes in a plan: plans are in fractions of a fragment, scaled to bytes.
const PLAN_BYTES: f64 = (1u64 << 30) as f64;
/// A holder planned to serve less than this fraction of a fragment is not sent requests.
pub const USE_FRACTION: f64 = 0.02;
/// Requests of ours every holder the plan uses keeps queued (as the window allows: each
/// gets one before any gets two). One is enough for its shares to act, but not for its
/// slots: while a consumer's slot runs at one of its disks, its replies pull its requests
/// there, and when its slot at the other disk begins, that disk finds one request of ours,
/// serves it, and waits a round trip for the next (anticipation), idle, at every slot of
/// every period. With two, the next is already queued when the disk finishes one (worth
/// most at one slow disk on a real cluster, whose round trips are longer than the
/// simulator's); three read as two. A reply whose freed request this rule placed leaves its
/// pull for a later request (`Pulls`). A consumer that reads several fragments at once,
/// which its servers do not phase, keeps one: two cost unequal partitions a little.
pub const QUEUED_PER_HOLDER: u32 = 2;
/// Requests of one fragment a reader of several fragments remembers routing (`Planned`'s
/// counts are halved past it): a plan that changes mid-read is followed within a few times as
/// many requests, where counts kept from the start would pay the old plan's split back first
/// (a holder whose part grew would get every request until its count caught up).
pub const ROUTED_MEMORY: f64 = 128.0;

#[derive(Debug)]
pub struct Planned {
    s: PlanSettings,
    layout: Option<Layout>,
    /// Probe round: the next node to ask, when, and how many of the first round are left
    /// (the first round goes out at once).
    probe_next: u32,
    probe_at: Option<Time>,
    first_round: u32,
    /// The rates the current plan was made with, by node, and how many were known.
    planned_with: Vec<f64>,
    known_with: usize,
    remaining_with: Vec<f64>,
    /// For each fragment of the layout's period and each holder: the planned share of the
    /// holder's disk, and the fraction of the fragment it serves.
    shares: BTreeMap<(u32, NodeId), (f64, f64)>,
    /// The fragments of the last window of requests: a partition that spans fragments reads
    /// them at once (in step), and its share of a disk is the sum of theirs.
    recent: VecDeque<FragmentId>,
    /// The part of each fragment this consumer reads: its readers, reading in step, split
    /// the fragment's planned shares by their parts.
    parts: BTreeMap<FragmentId, f64>,
    pulls: Pulls,
    /// Whether the last plan reads primary copies only.
    primaries_only: bool,
    /// How many times plans have dropped holders (`RoutePolicy::drop_epoch`): returned to
    /// primaries only, or stranded a fragment's requests at a slow disk not stranded before.
    dropped: u64,
    /// Requests a reader of several fragments routed by the plan's parts, by fragment of
    /// the layout's period and holder, recent ones counting most (`note_routed`).
    sent: BTreeMap<(u32, NodeId), f64>,
    /// Which disks count as slow, by node (`judge_slow`).
    slow: Vec<bool>,
    /// The (fragment of the period, holder) pairs the last plan strands (`strands`).
    stranded: BTreeSet<(u32, NodeId)>,
}

impl Planned {
    pub fn new(s: PlanSettings) -> Planned {
        Planned {
            s,
            layout: None,
            probe_next: 0,
            probe_at: None,
            first_round: 0,
            planned_with: vec![],
            known_with: 0,
            remaining_with: vec![],
            shares: BTreeMap::new(),
            recent: VecDeque::new(),
            parts: BTreeMap::new(),
            pulls: Pulls::default(),
            primaries_only: false,
            dropped: 0,
            sent: BTreeMap::new(),
            slow: vec![],
            stranded: BTreeSet::new(),
        }
    }

    /// Whether the plan strands requests of `fragment` at `node`: its disk counts as slow and
    /// the plan no longer uses it for that fragment (see "Routing" in the module's doc).
    fn strands(&self, fragment: FragmentId, node: NodeId) -> bool {
        self.slow.get(node.index()).copied().unwrap_or(false)
            && self.fraction(fragment, node).is_some_and(|x| x < USE_FRACTION)
    }

    /// Planned share of `node`'s disk for a reader of `fragment`, if there is a plan.
    pub fn disk_share(&self, fragment: FragmentId, node: NodeId) -> Option<f64> {
        self.planned(fragment, node).map(|p| p.0)
    }

    /// Planned fraction of `fragment` that `node` serves, if there is a plan.
    pub fn fraction(&self, fragment: FragmentId, node: NodeId) -> Option<f64> {
        self.planned(fragment, node).map(|p| p.1)
    }

    fn planned(&self, fragment: FragmentId, node: NodeId) -> Option<(f64, f64)> {
        // Empty until a plan, which needs the layout.
        self.shares.get(&(self.period_key(fragment), node)).copied()
    }

    /// The fragment of the layout's period that `fragment` is laid out as: plans and routed
    /// counts are kept by it.
    fn period_key(&self, fragment: FragmentId) -> u32 {
        fragment.0 % self.layout.as_ref().map_or(1, Layout::period)
    }

    /// Count a request of a reader of several fragments routed to `node`, and halve the
    /// fragment's counts once they pass `ROUTED_MEMORY`.
    fn note_routed(&mut self, key: u32, node: NodeId) {
        *self.sent.entry((key, node)).or_default() += 1.0;
        let of_fragment = (key, NodeId(0))..=(key, NodeId(u32::MAX));
        if self.sent.range(of_fragment.clone()).map(|(_, c)| c).sum::<f64>() > ROUTED_MEMORY {
            self.sent.range_mut(of_fragment).for_each(|(_, c)| *c /= 2.0);
        }
    }

    /// Which disks are `slow`, by node (see the module's doc), from their `figures` and what
    /// is `left` of each fragment: a disk measured `EQUAL_WITHIN` below the fastest turns
    /// slow once its primary fragments' readers fall behind the mean by `lag_blocks` (a
    /// fraction of a fragment of `fragment_bytes`) or `SLOW_LAG_SECS` of reading at the fastest
    /// figure, whichever is more, or at once if it measures under `FAR_BELOW` of the fastest;
    /// it stays slow while it measures `EQUAL_WITHIN` below and its readers do not get as far
    /// ahead.
    fn judge_slow(
        slow: &mut Vec<bool>,
        figures: &[Option<f64>],
        left: &[f64],
        lag_blocks: f64,
        fragment_bytes: f64,
        layout: &Layout,
    ) {
        let healthy = healthy_speed(figures).unwrap_or(0.0);
        let lag = lag_blocks.max(SLOW_LAG_SECS * healthy / fragment_bytes.max(1.0));
        let mean = mean(left);
        // Where each disk's primary readers stand against the others: behind (Greater: more
        // left), ahead (Less), or on track.
        let mut stand = vec![Ordering::Equal; figures.len()];
        for (f, r) in left.iter().enumerate() {
            let at = &mut stand[layout.node_of(FragmentId(f as u32), 0).0 as usize];
            if *r > mean + lag {
                *at = Ordering::Greater;
            } else if *r < mean - lag && *at == Ordering::Equal {
                *at = Ordering::Less;
            }
        }
        slow.resize(figures.len(), false);
        for ((slow, figure), stand) in slow.iter_mut().zip(figures).zip(stand) {
            let below = |by: f64| figure.is_some_and(|r| r < healthy * by);
            let behind = stand == Ordering::Greater;
            *slow = below(1.0 - EQUAL_WITHIN) && ((*slow && stand != Ordering::Less) || behind || below(FAR_BELOW));
        }
    }

    /// Every server's disk speed as this consumer knows it, if it does.
    fn figures(view: &RouteView<'_>, nodes: u32) -> Vec<Option<f64>> {
        (0..nodes).map(|n| view.node(NodeId(n)).disk_speed()).collect()
    }

    /// Every server's rate for a plan from its `figures`: unknown ones at the median of the
    /// known (most disks are well), all but the `slow` ones at a healthy disk's, slow ones short
    /// by their reserve for a scan with `left_bytes` to read; and how many are known.
    fn rates(figures: &[Option<f64>], left_bytes: f64, slow: &[bool]) -> (Vec<f64>, usize) {
        let mut sorted: Vec<f64> = figures.iter().flatten().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(1.0);
        let healthy = healthy_speed(figures).unwrap_or(1.0);
        // The time the scan has left at these rates (MOD-1's bound), and the slow disks'
        // reserve in it.
        let secs_left = left_bytes / figures.iter().map(|r| r.unwrap_or(median)).sum::<f64>();
        let margin = SLOW_MARGIN.min(SLOW_RESERVE_SECS / secs_left);
        let rate = |(r, slow): (&Option<f64>, &bool)| {
            let r = r.unwrap_or(median);
            if *slow { r * (1.0 - margin) } else { healthy }
        };
        (figures.iter().zip(slow).map(rate).collect(), sorted.len())
    }

    /// What is left of each fragment of the layout's period, as a fraction: this consumer's
    /// own figure for its fragment, the progress each primary server last reported for the
    /// others.
    fn left(view: &RouteView<'_>, layout: &Layout) -> Vec<f64> {
        let period = layout.period();
        (0..period)
            .map(|f| {
                let progress = if view.fragment.is_some_and(|x| x.0 % period == f) {
                    view.own_fraction
                } else {
                    let state = view.node(layout.node_of(FragmentId(f), 0)).last_state;
                    state.and_then(|s| s.primary_progress).unwrap_or(view.own_fraction)
                };
                (1.0 - progress).max(0.0)
            })
            .collect()
    }

    /// `left` with the figures within `band` (a fraction) of the mean at the mean, so the
    /// jitter of healthy reads does not move reads to backups.
    fn on_track(left: &[f64], band: f64) -> Vec<f64> {
        let mean = mean(left);
        left.iter().map(|&r| if (r - mean).abs() <= band { mean } else { r }).collect()
    }

    /// Plan again if a server became known, a rate moved by more than `REPLAN_CHANGE`, or
    /// what is left of a fragment moved by more than a block since the last plan.
    fn replan(&mut self, view: &RouteView<'_>) {
        let Some(layout) = &self.layout else { return };
        let period = layout.period();
        let partial = self.parts.values().any(|p| *p < 1.0);
        let units = plan_units(view.block_bytes().round() as u64);
        let on_track_blocks = if partial { PARTIAL_ON_TRACK_BLOCKS } else { ON_TRACK_BLOCKS * units };
        let raw = Self::left(view, layout);
        let left = Self::on_track(&raw, on_track_blocks * view.block_fraction);
        let figures = Self::figures(view, layout.nodes());
        let lag_blocks = (SLOW_LAG_BLOCKS * units * view.block_fraction).min(SLOW_LAG_SHARE);
        Self::judge_slow(&mut self.slow, &figures, &raw, lag_blocks, view.total_bytes as f64, layout);
        let left_bytes = left.iter().sum::<f64>() * view.total_bytes as f64;
        let (rates, known) = Self::rates(&figures, left_bytes, &self.slow);
        // With every disk equally fast the plan is primaries only, whatever the progress:
        // nothing is gained by moving reads, and every move costs seeks.
        let fastest = rates.iter().copied().fold(0.0, f64::max);
        let remaining = if rates.iter().all(|r| *r >= fastest) { vec![1.0; period as usize] } else { left };
        let moved = |new: &[f64], old: &[f64], by: &dyn Fn(f64, f64) -> bool| {
            new.len() != old.len() || new.iter().zip(old).any(|(n, o)| by(*n, *o))
        };
        if known == self.known_with
            && !moved(&rates, &self.planned_with, &|r, o| (r - o).abs() > REPLAN_CHANGE * o)
            && !moved(&remaining, &self.remaining_with, &|r, o| (r - o).abs() > view.block_fraction)
        {
            return;
        }
        let demands: Vec<Demand> = (0..period)
            .map(|f| Demand {
                consumer: ConsumerId(f),
                fragment: FragmentId(f),
                // One byte at least: a finished fragment keeps a (null) plan.
                bytes: (remaining[f as usize] * PLAN_BYTES) as u64 + 1,
            })
            .collect();
        let Ok(p) = plan(&demands, layout, &rates) else { return };
        // Each holder's planned bytes, to turn flows into shares of its disk.
        let mut load: BTreeMap<NodeId, f64> = BTreeMap::new();
        for flows in &p.flows {
            for (n, b) in flows {
                *load.entry(*n).or_default() += b;
            }
        }
        self.shares.clear();
        for (f, flows) in p.flows.iter().enumerate() {
            let fragment: f64 = flows.iter().map(|(_, b)| b).sum();
            for (n, b) in flows {
                let share = if load[n] > 0.0 { b / load[n] } else { 0.0 };
                self.shares.insert((f as u32, *n), (share, b / fragment));
            }
        }
        let stranded: BTreeSet<(u32, NodeId)> =
            self.shares.keys().copied().filter(|&(f, n)| self.strands(FragmentId(f), n)).collect();
        let primaries_only = p.flows.iter().all(|flows| flows.iter().skip(1).all(|(_, b)| *b == 0.0));
        let newly_stranded = stranded.difference(&self.stranded).next().is_some();
        self.dropped += u64::from((primaries_only && !self.primaries_only) || newly_stranded);
        self.stranded = stranded;
        self.primaries_only = primaries_only;
        self.planned_with = rates;
        self.known_with = known;
        self.remaining_with = remaining;
    }
}

impl RoutePolicy for Planned {
    fn kind(&self) -> ReadPolicyKind {
        ReadPolicyKind::GdPlan
    }
    fn metric(&self) -> ProgressMetric {
        ProgressMetric::Fraction
    }
    fn service(&self) -> Service {
        Service { discipline: Discipline::Planned, runs: true, ..Service::FURTHEST_BEHIND }
    }
    fn share(&self, fragment: FragmentId, node: NodeId) -> u16 {
        // Never 0 on the wire: 0 means "no plan", and a planned stream with a tiny share must
        // still be served when it is alone. This consumer's stream at `node` is served for
        // every fragment it reads now: its share is theirs together, each fragment's split
        // among its readers by their parts (they read in step). Fragments a period apart
        // share one plan entry.
        let Some(layout) = &self.layout else { return SHARE_ONE / 2 };
        let period = layout.period();
        let fragments: BTreeSet<FragmentId> = self.recent.iter().copied().chain([fragment]).collect();
        let mut parts: BTreeMap<u32, f64> = BTreeMap::new();
        for f in fragments {
            *parts.entry(f.0 % period).or_default() += self.parts.get(&f).copied().unwrap_or(1.0);
        }
        let shares: Vec<f64> =
            parts.iter().filter_map(|(&f, part)| Some(self.disk_share(FragmentId(f), node)? * part.min(1.0))).collect();
        if shares.is_empty() {
            return SHARE_ONE / 2;
        }
        let s = shares.iter().sum::<f64>().min(1.0);
        ((s * SHARE_ONE as f64).round() as u16).max(1)
    }
    fn steals_at_end(&self) -> bool {
        true
    }
    fn notifies_progress(&self) -> bool {
        true
    }
    fn piece_bytes(&self) -> Option<u32> {
        Some(self.s.piece_bytes)
    }
    fn reads_in_step(&self) -> bool {
        true
    }
    fn on_range(&mut self, parts: &BTreeMap<FragmentId, f64>) {
        for (f, part) in parts {
            let p = self.parts.entry(*f).or_default();
            *p = (*p + part).min(1.0);
        }
    }
    fn on_layout(&mut self, layout: &Layout) {
        self.layout = Some(layout.clone());
    }
    fn drop_epoch(&self) -> u64 {
        self.dropped
    }
    fn drops(&self, fragment: FragmentId, node: NodeId) -> bool {
        // When the plan is back to primaries only (the faults ended), every request still
        // queued at a backup comes home (virtual-streams §5's return to the primary). While
        // faults hold, plans move every block, and a backup planned nothing now may be planned
        // a share the next: taking requests back from a healthy one cost a little. Requests
        // stranded at a slow disk take it from the reader that needs it (see "Routing").
        (self.primaries_only && self.fraction(fragment, node) == Some(0.0)) || self.strands(fragment, node)
    }
    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> Pick {
        self.replan(view);
        if let Some(f) = view.fragment {
            self.recent.push_back(f);
            while self.recent.len() > view.window as usize {
                self.recent.pop_front();
            }
        }
        let used = |n: &NodeId| view.fragment.and_then(|f| self.fraction(f, *n)).is_none_or(|x| x >= USE_FRACTION);
        let planned: Vec<NodeId> = holders.iter().copied().filter(used).collect();
        let allowed = if planned.is_empty() { &holders[..1] } else { &planned[..] };
        // Every holder the plan uses keeps a request of ours queued, so its shares can act,
        // then a second (`QUEUED_PER_HOLDER`) if its servers phase us (`RouteView::phased`);
        // beyond that, replies pull requests to the servers that answer. A consumer that
        // reads several fragments at once gets no slots, so a second request has no slot
        // start to wait for, and its three or four holders would take its whole window.
        let queued = if view.phased { QUEUED_PER_HOLDER } else { 1 };
        for depth in 1..=queued {
            if let Some(short) = allowed.iter().find(|n| view.outstanding_at(**n) < depth) {
                return Pick::To(*short);
            }
        }
        // A reader of several fragments gets no slots, so nothing at the servers splits a
        // fragment between its holders as planned; its requests do: each goes to the holder
        // furthest below its planned part of the fragment's requests (ours: two-copy array
        // reads, one of 4 or 8 servers slow, 91-92% of the layout-aware ideal by the pull
        // rule, 94-95% by this).
        if !view.phased
            && allowed.len() > 1
            && let Some(f) = view.fragment
        {
            let key = self.period_key(f);
            let even = 1.0 / allowed.len() as f64;
            let sent = |n: &NodeId| self.sent.get(&(key, *n)).copied().unwrap_or(0.0);
            let total: f64 = allowed.iter().map(sent).sum();
            // How far short of its part of the requests routed so far, this one included.
            let short = |n: &NodeId| self.fraction(f, *n).unwrap_or(even) * (total + 1.0) - sent(n);
            let n = *allowed.iter().max_by(|a, b| short(a).total_cmp(&short(b))).expect("a holder");
            self.note_routed(key, n);
            return Pick::To(n);
        }
        Pick::To(self.pulls.next(view, allowed))
    }
    fn on_reply(&mut self, view: &RouteView<'_>, node: NodeId) {
        // A reader of several fragments routes by the plan's parts, not by pulls.
        if view.phased {
            self.pulls.push(node);
        }
    }
    fn poll_probe(&mut self, view: &RouteView<'_>) -> Option<NodeId> {
        let nodes = self.layout.as_ref()?.nodes();
        let step = self.s.probe_interval / nodes;
        match self.probe_at {
            None => {
                self.probe_at = Some(view.now + step);
                self.first_round = nodes;
            }
            Some(_) if self.first_round > 0 => {}
            // Probes that fell due while the driver was not asking go out now, at most a
            // round's worth.
            Some(t) if view.now >= t => {
                let floor = Time(view.now.0.saturating_sub(self.s.probe_interval.as_nanos() as u64));
                self.probe_at = Some(t.max(floor) + step);
            }
            Some(_) => return None,
        }
        self.first_round = self.first_round.saturating_sub(1);
        let n = NodeId(self.probe_next % nodes);
        self.probe_next = (self.probe_next + 1) % nodes;
        Some(n)
    }
}

/// The mean of `xs` (0 for none).
fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::{NodeView, ServerState};

    fn view(nodes: &BTreeMap<NodeId, NodeView>, fragment: u32) -> RouteView<'_> {
        RouteView { fragment: Some(FragmentId(fragment)), ..RouteView::test(nodes) }
    }

    /// Servers at these speeds, each having answered us before, `out[i]` requests of ours
    /// outstanding at the first ones.
    fn servers(r: &[f64], out: &[u32]) -> BTreeMap<NodeId, NodeView> {
        r.iter()
            .enumerate()
            .map(|(i, &d)| {
                let v = NodeView {
                    reports: crate::route::policy::RecentReports::of(d),
                    replies: 1,
                    outstanding: out.get(i).copied().unwrap_or(0),
                    ..NodeView::default()
                };
                (NodeId(i as u32), v)
            })
            .collect()
    }

    fn rates(r: &[f64]) -> BTreeMap<NodeId, NodeView> {
        servers(r, &[])
    }

    /// Disk 0 at half the speed of the others, in GB/s: the test view's four 1 GiB
    /// fragments take about a second, so slow disks are planned `SLOW_MARGIN` short.
    const SLOW_FIRST: &[f64] = &[0.5e9, 1e9, 1e9, 1e9];

    fn policy(nodes: u32) -> Planned {
        let mut p = Planned::new(PlanSettings::default());
        p.on_layout(&Layout::chained(nodes, 2).unwrap());
        p
    }

    #[test]
    fn with_equal_disks_every_request_goes_to_the_primary() {
        let mut p = policy(4);
        let n = rates(&[1e6; 4]);
        for _ in 0..8 {
            assert_eq!(p.pick(&view(&n, 2), &[NodeId(2), NodeId(3)]), Pick::To(NodeId(2)));
            p.on_reply(&view(&n, 2), NodeId(3));
        }
        assert_eq!(p.disk_share(FragmentId(2), NodeId(2)), Some(1.0));
        assert_eq!(RoutePolicy::share(&p, FragmentId(2), NodeId(2)), SHARE_ONE);
    }

    #[test]
    fn a_slow_disk_s_reader_is_planned_a_share_of_its_backup() {
        let mut p = policy(4);
        let n = rates(SLOW_FIRST);
        p.pick(&view(&n, 0), &[NodeId(0), NodeId(1)]);
        // Disk 0 is planned at r = 0.5 (1 - SLOW_MARGIN) GB/s: 3 + r GB/s for 4 fragments,
        // every disk busy for T = 4 / (3 + r) s. Disk 0 does r T of fragment 0; its reader
        // gets 1 - r T from disk 1, which is (1 - r T) / T = 3 (1 - r) / 4 of disk 1 (3/8
        // with no margin).
        let r = 0.5 * (1.0 - SLOW_MARGIN);
        let backup = p.disk_share(FragmentId(0), NodeId(1)).unwrap();
        assert!((backup - 3.0 * (1.0 - r) / 4.0).abs() < 1e-6, "{backup}");
        assert!((p.disk_share(FragmentId(0), NodeId(0)).unwrap() - 1.0).abs() < 1e-6);
        // Requests now go to both holders: one with nothing of ours queued gets the next,
        // even where the other has fewer than `QUEUED_PER_HOLDER`.
        let busy = servers(SLOW_FIRST, &[1, 0]);
        assert_eq!(p.pick(&view(&busy, 0), &[NodeId(0), NodeId(1)]), Pick::To(NodeId(1)));
        // Then each gets a second, whatever the replies.
        let one_each = servers(SLOW_FIRST, &[2, 1]);
        p.on_reply(&view(&one_each, 0), NodeId(0));
        assert_eq!(p.pick(&view(&one_each, 0), &[NodeId(0), NodeId(1)]), Pick::To(NodeId(1)));
        // Beyond that, replies pull requests.
        let both = servers(SLOW_FIRST, &[2, 2]);
        assert_eq!(p.pick(&view(&both, 0), &[NodeId(0), NodeId(1)]), Pick::To(NodeId(0)));
    }

    #[test]
    fn requests_stranded_at_a_slow_disk_are_taken_back() {
        let mut p = policy(6);
        let holders = [NodeId(1), NodeId(2)];
        // Disk 1 alone at a quarter: its reader is planned a part of it.
        let one = rates(&[1e9, 0.25e9, 1e9, 1e9, 1e9, 1e9]);
        p.pick(&view(&one, 1), &holders);
        assert!(p.fraction(FragmentId(1), NodeId(1)).unwrap() > USE_FRACTION);
        assert!(!p.drops(FragmentId(1), NodeId(1)));
        let before = p.drop_epoch();
        // Disk 0 at a quarter too: fragment 0 can be read from disks 0 and 1 only, and needs
        // all of both, so fragment 1 is planned nothing of disk 1, and what it queued there
        // is taken back.
        let two = rates(&[0.25e9, 0.25e9, 1e9, 1e9, 1e9, 1e9]);
        p.pick(&view(&two, 1), &holders);
        assert!(p.fraction(FragmentId(1), NodeId(1)).unwrap() < USE_FRACTION);
        assert!(p.drops(FragmentId(1), NodeId(1)) && !p.drops(FragmentId(1), NodeId(2)));
        assert_eq!(p.drop_epoch(), before + 1);
        // Nothing newly stranded, nothing more to take back.
        p.pick(&view(&two, 1), &holders);
        assert_eq!(p.drop_epoch(), before + 1);
    }

    /// Route `picks` requests of fragment 0 between its holders 0 and 1: how many went to each.
    fn routed(p: &mut Planned, view: &RouteView<'_>, picks: u32) -> [u32; 2] {
        let mut to = [0u32; 2];
        for _ in 0..picks {
            let Pick::To(n) = p.pick(view, &[NodeId(0), NodeId(1)]) else { panic!("routed") };
            to[n.0 as usize] += 1;
        }
        to
    }

    #[test]
    fn a_reader_of_several_fragments_queues_one_at_each_holder_then_splits_by_the_plan() {
        let mut p = policy(4);
        p.on_range(&BTreeMap::from([(FragmentId(0), 0.25), (FragmentId(1), 1.0)]));
        let n = servers(SLOW_FIRST, &[1, 1]);
        let unphased = RouteView { phased: false, ..view(&n, 0) };
        p.pick(&unphased, &[NodeId(0), NodeId(1)]);
        // Both holders of fragment 0 have one of ours (a reader of one fragment would fill
        // disk 0 to two first). Beyond that, replies do not pull requests: each goes to the
        // holder furthest below its planned part of fragment 0.
        p.on_reply(&unphased, NodeId(1));
        let part = |p: &Planned, n: u32| p.fraction(FragmentId(0), NodeId(n)).unwrap();
        let (slow, backup) = (part(&p, 0), part(&p, 1));
        assert!(slow > 0.3 && backup > 0.3, "{slow} {backup}");
        let to = routed(&mut p, &unphased, 100);
        assert!((f64::from(to[0]) - 100.0 * slow).abs() <= 1.0, "{to:?} for parts {slow} {backup}");
    }

    #[test]
    fn a_reader_of_several_fragments_follows_a_changed_plan_within_its_memory() {
        let mut p = policy(4);
        p.on_range(&BTreeMap::from([(FragmentId(0), 0.25), (FragmentId(1), 1.0)]));
        let n = servers(SLOW_FIRST, &[1, 1]);
        let unphased = RouteView { phased: false, ..view(&n, 0) };
        p.pick(&unphased, &[NodeId(0), NodeId(1)]);
        let slow = p.fraction(FragmentId(0), NodeId(0)).unwrap();
        // An earlier plan sent the slow disk far more than its part now.
        p.sent.insert((0, NodeId(0)), 1000.0);
        p.sent.insert((0, NodeId(1)), 0.0);
        // Counted once the old counts have been halved away.
        routed(&mut p, &unphased, 300);
        let to = routed(&mut p, &unphased, 100);
        assert!((f64::from(to[0]) - 100.0 * slow).abs() <= 2.0, "{to:?} for the slow disk's part {slow}");
    }

    #[test]
    fn a_reader_of_two_fragments_asks_a_common_holder_for_its_parts_of_both_shares() {
        let mut p = policy(4);
        let n = rates(SLOW_FIRST);
        // Node 1 holds fragment 0's backup and fragment 1's primary copy.
        p.pick(&view(&n, 1), &[NodeId(1), NodeId(2)]);
        let alone = RoutePolicy::share(&p, FragmentId(1), NodeId(1));
        let (s0, s1) =
            (p.disk_share(FragmentId(0), NodeId(1)).unwrap(), p.disk_share(FragmentId(1), NodeId(1)).unwrap());
        assert_eq!(alone, (s1 * SHARE_ONE as f64).round() as u16);
        p.pick(&view(&n, 0), &[NodeId(0), NodeId(1)]);
        let both = RoutePolicy::share(&p, FragmentId(1), NodeId(1));
        assert!(s0 > 0.1, "the slow disk's fragment is planned a part of node 1: {s0}");
        assert_eq!(both, ((s0 + s1).min(1.0) * SHARE_ONE as f64).round() as u16);
        // Reading a quarter of fragment 0, this consumer gets a quarter of its share.
        p.on_range(&BTreeMap::from([(FragmentId(0), 0.25), (FragmentId(1), 1.0)]));
        let quarter = RoutePolicy::share(&p, FragmentId(1), NodeId(1));
        assert_eq!(quarter, ((s0 / 4.0 + s1).min(1.0) * SHARE_ONE as f64).round() as u16);
        // A window of requests later, all of fragment 1, fragment 0 no longer counts.
        for _ in 0..4 {
            p.pick(&view(&n, 1), &[NodeId(1), NodeId(2)]);
        }
        assert_eq!(RoutePolicy::share(&p, FragmentId(1), NodeId(1)), alone);
    }

    #[test]
    fn a_holder_never_heard_from_counts_at_the_median_and_is_not_asked_to_learn_it() {
        let mut p = policy(4);
        let mut n = rates(&[1e6; 4]);
        let unknown = n.get_mut(&NodeId(3)).unwrap();
        (unknown.replies, unknown.reports) = (0, crate::route::policy::RecentReports::default());
        // Every disk counts as equally fast: primaries only, nothing sent to node 3 to learn
        // its speed (that cost a block from a backup per consumer and a seek, often at a
        // slow disk); the probes tell it.
        for _ in 0..4 {
            assert_eq!(p.pick(&view(&n, 2), &[NodeId(2), NodeId(3)]), Pick::To(NodeId(2)));
        }
        assert_eq!(RoutePolicy::share(&p, FragmentId(2), NodeId(3)), 1, "the plan gives it nothing");
    }

    /// Reader 0's planned share of its backup (disk 1, disk 0 slow) with no progress known,
    /// and again once every other reader is 30% through and it is `own` through; it reads
    /// `part` of fragment 0.
    fn backup_share_on_track_then_at(part: f64, own: f64) -> (f64, f64) {
        let mut p = policy(4);
        p.on_range(&BTreeMap::from([(FragmentId(0), part)]));
        let mut n = rates(SLOW_FIRST);
        p.pick(&view(&n, 0), &[NodeId(0), NodeId(1)]);
        let on_track = p.disk_share(FragmentId(0), NodeId(1)).unwrap();
        for i in 0..4 {
            let s = ServerState { primary_progress: Some(0.3), ..ServerState::default() };
            n.get_mut(&NodeId(i)).unwrap().last_state = Some(s);
        }
        p.pick(&RouteView { own_fraction: own, ..view(&n, 0) }, &[NodeId(0), NodeId(1)]);
        (on_track, p.disk_share(FragmentId(0), NodeId(1)).unwrap())
    }

    #[test]
    fn a_reader_that_fell_behind_is_planned_more_of_its_backup() {
        let (on_track, more) = backup_share_on_track_then_at(1.0, 0.1);
        assert!(more > on_track + 0.1, "{on_track} then {more}");
    }

    #[test]
    fn a_small_lag_moves_the_plan_only_for_a_reader_of_parts_of_fragments() {
        // A block and a half behind (a block is 1% in the test view): inside
        // ON_TRACK_BLOCKS, outside PARTIAL_ON_TRACK_BLOCKS.
        let (before, after) = backup_share_on_track_then_at(1.0, 0.285);
        assert!((after - before).abs() < 1e-9, "a whole fragment's reader keeps its plan: {before} then {after}");
        let (before, after) = backup_share_on_track_then_at(0.5, 0.285);
        assert!(after > before, "a partition's reader is planned more: {before} then {after}");
    }

    #[test]
    fn a_slow_disk_is_planned_short_by_a_time_not_by_a_part_of_the_scan() {
        let n = rates(&[0.5e6, 1e6, 1e6, 1e6]);
        let v = view(&n, 0);
        // Four disks move 3.5 MB/s: a second left, the reserve would be 12%, so SLOW_MARGIN
        // holds; a hundred seconds left, it is 0.12% and the slow disk is planned at nearly
        // its speed (a fixed 6% would have given its reader a lead all scan long).
        let slow = [true, false, false, false];
        let figures = Planned::figures(&v, 4);
        let (short, _) = Planned::rates(&figures, 3.5e6, &slow);
        assert_eq!(short, vec![0.5e6 * (1.0 - SLOW_MARGIN), 1e6, 1e6, 1e6]);
        let (long, _) = Planned::rates(&figures, 350e6, &slow);
        assert!((long[0] - 0.5e6 * (1.0 - SLOW_RESERVE_SECS / 100.0)).abs() < 1.0, "{long:?}");
        assert_eq!(long[1..], [1e6; 3]);
    }

    /// The part of fragment 0 planned for its backup, node 1.
    fn backup(p: &Planned) -> f64 {
        p.fraction(FragmentId(0), NodeId(1)).unwrap_or(0.0)
    }

    /// The readers of fragments 1 to 3 have read `done` of them, as their servers report.
    fn others_done(n: &mut BTreeMap<NodeId, NodeView>, done: f64) {
        for i in 1..4 {
            let state = ServerState { primary_progress: Some(done), ..ServerState::default() };
            n.get_mut(&NodeId(i)).unwrap().last_state = Some(state);
        }
    }

    #[test]
    fn a_disk_measured_a_little_slow_is_slow_once_its_reader_falls_behind_until_it_measures_well() {
        let mut p = policy(4);
        let mut n = rates(&[0.7e6, 1e6, 1e6, 1e6]);
        let holders = [NodeId(0), NodeId(1)];
        p.pick(&view(&n, 0), &holders);
        assert_eq!(backup(&p), 0.0, "its reader is on track: the figure swung, the disk is not slow");
        // The other readers 10 blocks ahead (a block is 1% in the test view).
        others_done(&mut n, 0.1);
        p.pick(&view(&n, 0), &holders);
        let helped = backup(&p);
        assert!(helped > 0.05, "{helped}");
        // Caught up, it is still slow while it measures slow.
        p.pick(&RouteView { own_fraction: 0.1, ..view(&n, 0) }, &holders);
        assert!(backup(&p) > 0.05, "{}", backup(&p));
        // Measured within EQUAL_WITHIN of the others, it is well.
        let reports = |n: &mut BTreeMap<NodeId, NodeView>, r: f64| {
            n.get_mut(&NodeId(0)).unwrap().reports = crate::route::policy::RecentReports::of(r);
        };
        reports(&mut n, 0.9e6);
        p.pick(&RouteView { own_fraction: 0.1, ..view(&n, 0) }, &holders);
        assert_eq!(backup(&p), 0.0);
        // Slow again, and behind; then its reader got 10 blocks ahead: its slowness was
        // overrated.
        reports(&mut n, 0.7e6);
        p.pick(&view(&n, 0), &holders);
        assert!(backup(&p) > 0.05, "{}", backup(&p));
        p.pick(&RouteView { own_fraction: 0.2, ..view(&n, 0) }, &holders);
        assert_eq!(backup(&p), 0.0);
    }

    /// One server's figure far above the rest is a spike, not the speed healthy disks should
    /// read at (figures measured on 8 real servers each capped at 83 MB/s).
    #[test]
    fn one_figure_far_above_the_others_makes_no_disk_slow() {
        let mb = [97.0, 132.0, 83.0, 96.0, 90.0, 88.0, 74.0, 85.0];
        let mut p = policy(8);
        let n = rates(&mb.map(|r| r * 1e6));
        p.pick(&view(&n, 6), &[NodeId(6), NodeId(7)]);
        assert_eq!(p.slow, vec![false; 8]);
        assert_eq!(p.fraction(FragmentId(6), NodeId(7)).unwrap_or(0.0), 0.0);
        let some = |r: &[f64]| r.iter().map(|x| Some(*x)).collect::<Vec<_>>();
        assert_eq!(healthy_speed(&some(&mb)), Some(97.0));
        // Two disks, one slow: the faster is believed.
        assert_eq!(healthy_speed(&some(&[100.0, 50.0])), Some(100.0));
        assert_eq!(healthy_speed(&[None, Some(40.0)]), Some(40.0));
        assert_eq!(healthy_speed(&[None, None]), None);
    }

    /// On fast disks a few blocks are a moment's jitter: the lag that makes a disk slow is at
    /// least `SLOW_LAG_SECS` of reading at the fastest disk's speed.
    #[test]
    fn on_fast_disks_the_lag_that_makes_a_disk_slow_is_a_time() {
        let mut p = policy(4);
        let mut n = rates(&[0.7e9, 1e9, 1e9, 1e9]);
        let holders = [NodeId(0), NodeId(1)];
        // 1 GiB fragments at 1 GB/s: 0.125 s is 11.6% of one. Reader 0 is 7.5% behind the
        // mean, far more than 4 blocks (a block is 1% in the test view), but only 80 ms.
        others_done(&mut n, 0.1);
        p.pick(&view(&n, 0), &holders);
        assert_eq!(backup(&p), 0.0, "80 ms behind: the figure swung");
        others_done(&mut n, 0.2);
        p.pick(&view(&n, 0), &holders);
        assert!(backup(&p) > 0.05, "160 ms behind: slow, {}", backup(&p));
    }

    /// On a fragment of 24 blocks, 4 blocks are a sixth of the scan: a mild fault's readers
    /// get that far behind only near its end. The lag is at most `SLOW_LAG_SHARE` of a fragment.
    #[test]
    fn on_short_fragments_the_lag_that_makes_a_disk_slow_is_a_share_of_one() {
        let mut p = policy(4);
        let mut n = rates(&[0.75e6, 1e6, 1e6, 1e6]);
        let holders = [NodeId(0), NodeId(1)];
        fn short(n: &BTreeMap<NodeId, NodeView>) -> RouteView<'_> {
            RouteView { block_fraction: 1.0 / 24.0, ..view(n, 0) }
        }
        // The others a block ahead: reader 0 is 3% behind the mean, on track.
        others_done(&mut n, 0.04);
        p.pick(&short(&n), &holders);
        assert_eq!(backup(&p), 0.0, "a block behind: the figure swung");
        // Two blocks ahead: 6% behind the mean, under 4 blocks but over 4% of the fragment.
        others_done(&mut n, 0.08);
        p.pick(&short(&n), &holders);
        assert!(backup(&p) > 0.05, "two blocks of 24 behind: slow, {}", backup(&p));
    }

    #[test]
    fn it_plans_again_only_when_a_rate_moves() {
        let mut p = policy(4);
        p.pick(&view(&rates(&[1e6; 4]), 1), &[NodeId(1), NodeId(2)]);
        let before = p.shares.clone();
        p.pick(&view(&rates(&[1.02e6, 1e6, 1e6, 1e6]), 1), &[NodeId(1), NodeId(2)]);
        assert_eq!(p.shares, before, "2% is noise");
        p.pick(&view(&rates(&[0.5e6, 1e6, 1e6, 1e6]), 1), &[NodeId(1), NodeId(2)]);
        assert_ne!(p.shares, before);
    }

    #[test]
    fn every_server_is_probed_once_per_interval() {
        let mut p = policy(4);
        p.s.probe_interval = std::time::Duration::from_millis(100);
        let n = rates(&[]);
        let mut v = view(&n, 0);
        let mut asked = vec![];
        for ms in 0..200 {
            v.now = Time::ZERO + std::time::Duration::from_millis(ms);
            while let Some(node) = p.poll_probe(&v) {
                asked.push(node.0);
            }
        }
        // The first round at once, then 100 ms / 4 nodes: one every 25 ms, round the ring.
        assert_eq!(asked, vec![0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]);
        // A driver that asks late gets what fell due, at most a round.
        v.now = Time::ZERO + std::time::Duration::from_secs(5);
        let mut late = 0;
        while p.poll_probe(&v).is_some() {
            late += 1;
        }
        assert!((1..=5).contains(&late), "{late}");
    }
}
