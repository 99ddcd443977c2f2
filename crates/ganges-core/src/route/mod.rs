//! Client-side read routing: which server each request of a consumer goes to.
//!
//! A [`ReadEngine`] drives one consumer's read. It owns what every policy shares: the pieces
//! still to request, a bounded window of requests in flight, what it has seen of each server
//! (replies, latency, delivered rate, reported state), failover when a server dies, stalls or
//! returns a corrupt block, duplicate suppression, and the end-of-scan steal. The choice of
//! server is a [`RoutePolicy`] (modules [`policy`], [`primary`], [`rate`]):
//!
//! | name | spec | consumer side | server side |
//! | --- | --- | --- | --- |
//! | `static` | GD-8 | primary copy only | furthest behind |
//! | `gd` | GD-1 | round-robin start, replies pull requests | furthest behind, progress in bytes, levelled |
//! | `gd-rel` | GD-2 | same | furthest behind, progress as a fraction, levelled |
//! | `gd-batch` | GD-2 + GD-5 runs | same, in 512 KiB pieces (`RUN_PIECE_BYTES`) | same, with runs |
//! | `gd-share` | GD-2 + ours | same, in 512 KiB pieces | same, levelled: shares learnt per consumer |
//! | `gd-pc` | GD-3 + ours | primary, backups between watermarks or while the primary helps another | furthest behind, fraction, levelled |
//! | `gd-pc-shrink` | GD-3 + ours | watermark shrinking near the end | same |
//! | `gd-rr` | GD-4 + GD-5 | more requests where answers come faster, primary preferred | longest queue, runs |
//! | `gd-rr-handoff` | + GD-6 | same | same, and idle servers take queued requests |
//! | `gd-plan` | ours | holders the plan uses, replies pull requests | planned shares, runs |
//! | `mirror` | GD-9 | blocks alternate over the copies | furthest behind |
//! | `ceft` (writes) | CW-1 | CEFT-PVFS's rule on the pair's reported loads | furthest behind |
//! | `ceft-adaptive` (writes) | CW-1, ours | the copy that would finish first by measured rates | furthest behind |
//!
//! **End-of-scan steal and hedge.** When every piece has been requested, a server that
//! replies and has nothing more of this consumer's takes on one piece still queued at another
//! server that also holds it (river §6.2's end-of-run effect): the last piece sent to the
//! server with the most of ours. If that server has two or more of ours, the piece is moved:
//! sent here and cancelled there. If it is our last piece there, the engine can only guess
//! when that server will serve it, so it hedges instead: it sends the piece here too, keeps
//! the request there, takes whichever answer comes first and cancels the other. It hedges
//! when the piece is expected back (sent plus that server's smoothed latency) later than this
//! server would answer one more request (a block of another consumer's and ours, at its
//! disk's measured speed), or when it is late: outstanding for longer than that server's
//! usual reply time and this server's answer, so queued behind other consumers rather than
//! on the disk (a backup whose planned share is small serves a reader about once a period).
//! A wrong guess then costs this consumer nothing and the other disk at most one block, where
//! a wrong move cost the consumer the whole wait at the new server.
//!
//! **Slow lines.** GD's pull rule (gd, gd-rel, gd-batch, gd-share) keeps as many requests at
//! a slow copy as at a fast one, so at the end of a scan the slow disk's line is the last to
//! be served; so does gd-pc's window at a slow primary and at the backup it catches up on,
//! and gd-rr's `min_outstanding` at every holder in trouble. For these policies a server
//! that replies with some of ours still queued also takes the piece requested last at
//! another server, by a move, when that server's disk reads `TROUBLE` slower and the piece
//! would come sooner from here: its place in the line there, in that disk's time, is more
//! than our line here plus one, in this disk's. On 10 disks at
//! 20 MiB/s with one at 0.35, a 1.9 s scan waited for the slow disk's last blocks, moved one
//! at a time once the other copy had nothing of ours left: gd read 91.7% of the layout-aware
//! ideal, 92.6% with slow lines; on 8 disks at 32 MiB/s, one at half, 91.2% and 93.8%
//! (`ganges sim generality`).
//!
//! **A fine tail.** gd and gd-rel have no runs, so they request whole blocks to the end, and
//! the last block a slow disk has of ours, a block long in that disk's time, decides when
//! the read finishes: a move to the other copy has to wait for it to come up in the line.
//! When a range ends the read (`new`, or `expect_bytes` reached), the last `window` blocks of
//! each fragment are read in 512 KiB pieces (`tail_piece_bytes`), so the finish evens out
//! in half blocks for a few more seeks. Over `ganges sim generality` the least cell of gd
//! went from 92.9% of the layout-aware ideal to 93.3%, of gd-rel from 92.9% to 93.7%, and
//! their mean up 0.3 and 0.5 points, no cell down by more than 0.3; the default
//! `bench-scan` moved within its seed-to-seed noise. gd-pc and gd-rr, whose tails already
//! shift to backups, lost 1 to 3 points with it and keep whole blocks.
//!
//! **An idle copy takes the end of a read.** In the second half of a read, a holder that
//! reported, within `IDLE_FRESH`, that it is idle (nothing queued there but ours, and nobody
//! reading its primary copies: its own reader has finished) takes the next request, up to
//! `IDLE_TAKE` at a time, whatever the policy would pick: its disk would otherwise stand
//! still while our last blocks wait elsewhere. Not in the first half, where a server may not
//! yet have heard from its own reader; only for policies that move requests at the end of a
//! scan (`steals_at_end`: not `static` or `mirror`, whose copies are fixed); never a holder
//! the policy dropped. The primary-preferring policies pass a slow disk's work
//! down the chain of copies a hop at a time, and the far end of the chain finished last while
//! the slow disk, its own reader long done, stood idle: gd-rr on 16 disks at 32 MiB/s with
//! one at half speed (a 10.5 s scan) read 92.5% of the layout-aware ideal, 93.8% with this;
//! on 24 disks with one at 0.75, 91.8% and 94.4% (`ganges sim generality`, least of seeds
//! 1-6; no other policy or configuration moved).
//!
//! Once everything is requested, an idle copy that answers a probe takes a piece queued
//! elsewhere (the end-of-scan steal, below, as if it had just replied), when its disk reads
//! within `EQUAL_WITHIN` of the fastest holding our requests: a slow disk whose reader is done
//! looks idle too, and a piece moved there came back last. Steals otherwise followed replies
//! only, and a backup the policy sent nothing to never replied: on 8 disks at 20 MiB/s with
//! 6 ms seeks, 24 MiB fragments and one disk at 0.75 of its speed, gd-pc's consumer before the
//! slow disk waited 0.19 s at its primary while its backup, its own reader done, stood idle:
//! 89.0% of the layout-aware ideal, 92.3% with this (gd-rr on 16 disks at 20 MiB/s, 64 MiB
//! fragments, one at 0.75: 92.8% -> 93.9%). No cell of `ganges sim generality`, of 40 other
//! configurations, or of the default `bench-scan` over five seeds moved down.
//!
//! A request a server handed to another (GD-6) is never stolen, hedged or moved: its id
//! belongs to the first server, so it could not be cancelled. A cancel that arrives too late
//! yields a duplicate, which the engine drops and counts: every piece is delivered exactly
//! once.
//!
//! **Progress notices.** GD policies tell every server holding this consumer's queued
//! requests whenever its progress changes (`poll_notify`), unless a request sent there since
//! carried it, so every server's furthest-behind choice uses fresh figures (river §6.3).
//! A sealed engine (`seal`: no more pieces will come), whatever its policy, tells every
//! server it read from when its last piece arrives, so none reports it to the next scan as a
//! reader not quite done.
//!
//! **Stalls.** A server holding our requests that answers nothing for `stall_timeout` is
//! treated as down for this read; its requests go to the other copies.
//!
//! **Request order.** Pieces are first requested in order, except that a policy may read a
//! range that spans fragments in step, its part of each at the same pace (gd-plan does;
//! `add_pieces`). An ordered reader bounds its buffer by what it adds (the client's
//! `OrderedReader` adds a piece at a time).
//!
//! **Open-ended reads.** An engine made with `open_ended` starts with no pieces; the async
//! interface adds pieces as the caller submits reads, and the in-order reader a few blocks
//! at a time. A caller that knows what the whole read comes to says so (`expect_bytes`), so
//! its progress, and the end of its read, are a scan's.
//!
//! **Moved requests.** When a server hands a queued request to another (GD-6), the engine is
//! told (`on_moved`), so the reply from the new server is expected and a failure there is
//! retried.
//!
//! Driving order (the quinn style): feed events with `on_data`, `on_failure`,
//! `on_node_down`, `on_state`, `on_probe_answer`, `on_moved`, then drain `poll_send`,
//! `poll_cancel`, `poll_notify` and `poll_probe` until all return `None`.

pub mod ceft;
pub mod plan;
pub mod policy;
pub mod primary;
pub mod rate;

pub use policy::{
    NodeView, Pick, PlanSettings, PolicySettings, PrimarySettings, RateSettings, ReadPolicyKind, RoutePolicy,
    RouteView, ServerState, SettingError,
};

use crate::ids::{FragmentId, NodeId};
use crate::layout::{Layout, REPLICAS_MAX};
use crate::sched::{COPY_MAX, Progress, Service};
use crate::shape::{Piece, Shape};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::time::Duration;

/// Requests in flight per consumer unless told otherwise (`ReadPolicyKind::default_window`):
/// what gd-pc and gd-rr keep at their primary while nothing is wrong. Enough to keep a
/// server's queue non-empty while a reply crosses the network (river §6.1: a producer needs a
/// few outstanding messages to pipeline), few enough that the servers' scheduler, not the
/// queue order, decides who is served.
pub const WINDOW_DEFAULT: u32 = 4;
/// Requests an idle copy takes at a time (see "An idle copy takes the end of a read"): two,
/// so one is read while the other's reply crosses the network.
pub const IDLE_TAKE: u32 = 2;
/// How old a server's report of being idle may be and still count: a little over gd-rr's
/// probe interval (100 ms), the slowest of the policies that probe backups they do not read.
pub const IDLE_FRESH: Duration = Duration::from_millis(150);
/// The window of the GD policies whose replies pull requests to every copy (gd, gd-rel,
/// gd-batch, gd-share): three per copy at R = 2. A server serves the consumer furthest
/// behind only while that consumer has a request queued there, and with two per copy one is
/// read while the other's reply crosses to the consumer and pulls the next one back. On real
/// servers sharing CPUs with their consumers that crossing outlasts a 1 MiB read now and
/// then, the server serves a neighbour meanwhile, and the slow disk's work never passed down
/// the chain: on 8 servers with one disk at a quarter, gd read 87% of the ideal, the slow
/// disk's two consumers finishing 1.4 s after the rest; with three per copy, 100%. In the
/// simulator, where a consumer answers at once, the two are within a point or two.
pub const WINDOW_GD: u32 = 6;
/// gd-plan's window: three per copy, of 1 MiB blocks (as many bytes of smaller ones:
/// `ReadPolicyKind::default_window`). Its disks anticipate the running stream's next
/// request, which crosses to the consumer and back first; a request more in flight per
/// server keeps it queued instead (worth a point or two at one and two slow disks on the
/// default bench; it costs about one with four adjacent slow disks).
pub const WINDOW_PLAN: u32 = 6;
/// Reads in flight for random access (`ReadOptions::with_window` of an `AsyncReader`; the
/// bench's `--access random` unless told otherwise). A scan's window of 4 keeps its two
/// servers busy; random reads spread over every server, and 4 per reader left disks idle now
/// and then (16 each gained about 5 points of the ideal on 16 servers, with and without
/// slow disks).
pub const WINDOW_RANDOM: u32 = 16;
/// The largest window a consumer may ask for: bounds client buffers and server queues.
pub const WINDOW_MAX: u32 = 256;
/// How long a server may hold this consumer's requests without answering any before the
/// consumer treats it as down for this read. A slow server still answers; one that says
/// nothing for this long is hung (a stopped process, a dead disk), and waiting on it would
/// hang the scan. Thirty seconds is far above any sane block time: a 16 MiB block queued
/// behind two others on a 2 MiB/s disk takes 24 s.
pub const STALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Weight of the newest sample in the smoothed latency of a server: about the last five
/// replies count, so a change shows within a few blocks.
const EWMA_NEW: f64 = 0.2;
/// How much time the smoothed rates of a server remember (`RateAverage`): the servers' own
/// meter's window (`handoff::RateMeter::WINDOW_SECS`), so a consumer's figure for a disk and
/// the disk's own agree, and a disk that lets reads through in bursts reads at its rate.
const RATE_MEMORY_SECS: f64 = crate::handoff::RateMeter::WINDOW_SECS;

/// What a policy may see of an engine, borrowed field by field so the policy itself can be
/// borrowed mutably beside it.
macro_rules! view {
    ($e:expr, $now:expr) => {
        RouteView {
            now: $now,
            nodes: &$e.nodes,
            own_fraction: $e.done_bytes as f64 / $e.read_bytes().max(1) as f64,
            block_fraction: $e.block_bytes as f64 / $e.read_bytes().max(1) as f64,
            total_bytes: $e.read_bytes(),
            window: $e.window(),
            fragment: None,
            phased: $e.phased(),
        }
    };
}

/// Settings of one consumer's read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadConfig {
    /// Requests in flight, 1 to `WINDOW_MAX`.
    pub window: u32,
    /// See `STALL_TIMEOUT_DEFAULT`.
    pub stall_timeout: Duration,
    /// `window` bounds what is in flight (a reader whose buffer holds only that many), so a
    /// policy may not ask for more (`RoutePolicy::window`).
    #[serde(default)]
    pub fixed_window: bool,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig { window: WINDOW_DEFAULT, stall_timeout: STALL_TIMEOUT_DEFAULT, fixed_window: false }
    }
}

/// A request the driver must send, or cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub piece: usize,
    pub node: NodeId,
    /// The engine's id for the request: the driver tags what it sends with it, and looks a
    /// reply's piece and server up by it ([`ReadEngine::in_flight`]), which follow a
    /// request a server hands to another. A cancel names the request it cancels.
    pub request: u64,
}

/// Why a request did not bring data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The server dropped the request because the engine cancelled it.
    Cancelled,
    /// The server's copy of this block failed its checksum; never deliver it, read elsewhere.
    Corrupt,
    /// The server cannot serve this read (it lost the dataset, refused, or errored); the
    /// engine stops using it for this read, as it does for a dead server.
    Unavailable,
}

/// What the engine made of a reply with data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The first copy of this piece: hand it to the consumer.
    New,
    /// Already delivered (a cancel arrived too late): drop it.
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("no live server holds {fragment} any more (copies on {holders:?} are down or corrupt)")]
    NoLiveCopy { fragment: FragmentId, holders: Vec<NodeId> },
    /// Every copy the servers still serve failed its checksum: nothing is delivered rather
    /// than bad bytes.
    #[error(
        "every live copy of the block at dataset offset {offset} failed its checksum (on {corrupt_on:?}); \
         `ganges dataset verify` lists the damage"
    )]
    Corrupt { offset: u64, corrupt_on: Vec<NodeId> },
    #[error("a window of {0} requests is out of range 1..={WINDOW_MAX}")]
    Window(u32),
    #[error("a stall timeout must be positive")]
    StallTimeout,
}

/// Counters of one consumer's read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadStats {
    /// Bytes delivered from each copy index (0 = primary).
    pub bytes_by_copy: [u64; REPLICAS_MAX as usize],
    pub requests: u64,
    pub duplicates: u64,
    pub steals: u64,
    /// Last pieces sent to a second server at the end of a scan (module docs).
    pub hedges: u64,
    pub retries: u64,
    pub probes: u64,
    /// Requests a server handed to another server (GD-6).
    pub moved: u64,
    /// Requests taken back from holders the policy's plan stopped reading.
    pub withdrawn: u64,
    /// (piece dataset offset, node) of every corrupt block a server reported.
    pub corrupt: Vec<(u64, NodeId)>,
}

impl ReadStats {
    pub fn backup_bytes(&self) -> u64 {
        self.bytes_by_copy[1..].iter().sum()
    }

    /// Add another consumer's counters to these.
    pub fn merge(&mut self, other: ReadStats) {
        // Destructured, so that a new counter cannot be left out.
        let ReadStats {
            bytes_by_copy,
            requests,
            duplicates,
            steals,
            hedges,
            retries,
            probes,
            moved,
            withdrawn,
            corrupt,
        } = other;
        for (a, b) in self.bytes_by_copy.iter_mut().zip(bytes_by_copy) {
            *a += b;
        }
        self.requests += requests;
        self.duplicates += duplicates;
        self.steals += steals;
        self.hedges += hedges;
        self.retries += retries;
        self.probes += probes;
        self.moved += moved;
        self.withdrawn += withdrawn;
        self.corrupt.extend(corrupt);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PieceState {
    Waiting,
    /// Outstanding at these servers, each since when (two only while a steal's cancel is in
    /// flight).
    InFlight(Vec<(NodeId, Time)>),
    Done,
}

/// One consumer's read. See the module docs.
#[derive(Debug)]
pub struct ReadEngine {
    policy: Box<dyn RoutePolicy>,
    layout: Layout,
    pieces: Vec<Piece>,
    /// Holders of each fragment the read touches, primary first.
    holders: BTreeMap<FragmentId, Vec<NodeId>>,
    /// Pieces only some holders have (a dataset still incomplete after a GD write, GW-2).
    only: BTreeMap<usize, Vec<NodeId>>,
    state: Vec<PieceState>,
    /// The order pieces are first requested in (see `add_pieces`).
    order: Vec<usize>,
    /// The first position of `order` never requested.
    cursor: usize,
    retry: VecDeque<usize>,
    /// Pieces whose request a server handed to another (GD-6): the request id belongs to
    /// the first server, so it cannot be cancelled, and the end-of-scan steal leaves it be.
    moved: BTreeSet<usize>,
    /// Steals and hedges to send, whatever the window: a steal replaces a request whose cancel
    /// is on its way, and a hedge is a last piece's second copy, sent when nothing else is.
    steals: VecDeque<(usize, NodeId)>,
    /// Pieces hedged at the end of the scan: in flight at two servers until one answers.
    hedged: BTreeSet<usize>,
    /// The policy's drop epoch requests were last checked against, and the requests being
    /// taken back from holders it dropped (cancel sent; the piece is sent again when the
    /// server confirms).
    checked_epoch: u64,
    withdrawing: BTreeSet<(usize, NodeId)>,
    cancels: VecDeque<(usize, NodeId)>,
    notify: BTreeSet<NodeId>,
    /// Every request in flight, by its id: its piece, and the server that owes the answer.
    requests: BTreeMap<u64, (usize, NodeId)>,
    /// Requests at servers given up for a stall, whose connections stay open: a late answer
    /// still names its piece, and is dropped as a duplicate.
    written_off: BTreeMap<u64, (usize, NodeId)>,
    /// Requests whose answer the driver took ([`ReadEngine::take`]) and has yet to report.
    taken: Vec<(usize, NodeId)>,
    next_request: u64,
    nodes: BTreeMap<NodeId, NodeView>,
    /// When each server holding our requests last answered (or was first sent one).
    heard: BTreeMap<NodeId, Time>,
    down: BTreeSet<NodeId>,
    /// (piece, node) pairs whose block failed its checksum on that node.
    bad: BTreeSet<(usize, NodeId)>,
    config: ReadConfig,
    inflight: u32,
    done_pieces: usize,
    done_bytes: u64,
    total_bytes: u64,
    /// The partition's block size, for the progress granularity policies see.
    block_bytes: u64,
    /// Whether no more pieces will be added (`seal`): done is then done for good, not only
    /// until the caller's next read.
    sealed: bool,
    /// What the whole read will come to, when an open-ended engine is told (`expect_bytes`).
    expected_bytes: u64,
    stats: ReadStats,
}

impl ReadEngine {
    pub fn new(
        policy: Box<dyn RoutePolicy>,
        layout: &Layout,
        shape: &Shape,
        pieces: Vec<Piece>,
        config: ReadConfig,
    ) -> Result<ReadEngine, RouteError> {
        let mut e = ReadEngine::open_ended(policy, layout, config)?;
        e.expect_bytes(pieces.iter().map(|p| p.len as u64).sum());
        e.add_pieces(shape, pieces.into_iter().map(|p| (p, None)));
        e.seal();
        Ok(e)
    }

    /// An engine with no pieces yet; `add_piece` feeds it (the async interface).
    pub fn open_ended(
        policy: Box<dyn RoutePolicy>,
        layout: &Layout,
        config: ReadConfig,
    ) -> Result<ReadEngine, RouteError> {
        if config.window == 0 || config.window > WINDOW_MAX {
            return Err(RouteError::Window(config.window));
        }
        if config.stall_timeout.is_zero() {
            return Err(RouteError::StallTimeout);
        }
        let mut policy = policy;
        policy.on_layout(layout);
        Ok(ReadEngine {
            policy,
            layout: layout.clone(),
            pieces: vec![],
            holders: BTreeMap::new(),
            only: BTreeMap::new(),
            state: vec![],
            order: vec![],
            cursor: 0,
            retry: VecDeque::new(),
            moved: BTreeSet::new(),
            steals: VecDeque::new(),
            hedged: BTreeSet::new(),
            checked_epoch: 0,
            withdrawing: BTreeSet::new(),
            cancels: VecDeque::new(),
            notify: BTreeSet::new(),
            requests: BTreeMap::new(),
            written_off: BTreeMap::new(),
            taken: vec![],
            next_request: 1,
            nodes: BTreeMap::new(),
            heard: BTreeMap::new(),
            down: BTreeSet::new(),
            bad: BTreeSet::new(),
            config,
            inflight: 0,
            done_pieces: 0,
            done_bytes: 0,
            total_bytes: 0,
            block_bytes: 0,
            sealed: false,
            expected_bytes: 0,
            stats: ReadStats::default(),
        })
    }

    /// No more pieces will be added: when the last one is delivered, every server read from
    /// is told this consumer's progress is whole (`poll_notify`). `new` seals its engine.
    pub fn seal(&mut self) {
        self.sealed = true;
    }

    /// An open-ended engine whose caller knows what the whole read comes to (an in-order
    /// reader adds a few blocks at a time to a fragment it reads through): its progress counts
    /// against `bytes`, and once pieces of that many bytes are added it seals itself. Without
    /// it, progress counts against what has been added so far, which stays near 1 while a
    /// caller adds as it goes: the servers' furthest-behind rule then served such a reader
    /// after everyone else, and told the readers of its backup copies that it was all but
    /// done.
    pub fn expect_bytes(&mut self, bytes: u64) {
        self.expected_bytes = bytes;
        self.seal_if_expected();
    }

    fn seal_if_expected(&mut self) {
        if self.expected_bytes > 0 && self.total_bytes >= self.expected_bytes {
            self.seal();
        }
    }

    /// What progress counts against: the read's expected size if told, else what has been
    /// added.
    fn read_bytes(&self) -> u64 {
        self.total_bytes.max(self.expected_bytes)
    }

    /// Add one piece, to be read from `only` these holders if given (a dataset still
    /// incomplete after a GD write, GW-2), else from any; returns its index.
    fn push_piece(&mut self, p: Piece, only: Option<Vec<NodeId>>) -> usize {
        debug_assert!(!self.sealed, "a piece added to a sealed engine");
        let layout = &self.layout;
        let holders = self.holders.entry(p.fragment).or_insert_with(|| layout.holders(p.fragment));
        let i = self.pieces.len();
        if let Some(only) = only {
            debug_assert!(only.iter().all(|n| holders.contains(n)), "holders of the fragment");
            self.only.insert(i, only);
        }
        self.total_bytes += p.len as u64;
        self.block_bytes = self.block_bytes.max(p.len as u64);
        self.pieces.push(p);
        self.state.push(PieceState::Waiting);
        self.order.push(i);
        i
    }

    /// Add a range of `shape`'s dataset, as its pieces (each with the holders that have it,
    /// if only some do), each cut to the policy's longest request (`piece_bytes`); returns
    /// their indices. When the range ends the read (`expect_bytes`; `new` always), the last
    /// window of whole blocks of each fragment is cut finer where the policy asks
    /// (`tail_piece_bytes`; see "A fine tail"). The policy is told what part of each fragment
    /// the range is. The pieces are first requested in order, unless the policy reads in
    /// step: then a range that spans fragments (a logical partition, GD-7) reads its part of
    /// each at the same pace, so that its fraction done, which servers balance and plans
    /// count on, is each part's too.
    pub fn add_pieces(
        &mut self,
        shape: &Shape,
        pieces: impl IntoIterator<Item = (Piece, Option<Vec<NodeId>>)>,
    ) -> Range<usize> {
        let first = self.pieces.len();
        let most = self.policy.piece_bytes().unwrap_or(u32::MAX);
        let pieces: Vec<_> = pieces.into_iter().collect();
        // A fine tail: its request size, if this range ends the read and the policy has one.
        let fine = self.policy.tail_piece_bytes().filter(|_| {
            let added: u64 = pieces.iter().map(|(p, _)| p.len as u64).sum();
            self.expected_bytes > 0 && self.total_bytes + added >= self.expected_bytes
        });
        let tail_bytes = u64::from(self.config.window) * u64::from(shape.block_bytes());
        // With a tail: the bytes of each fragment this range still adds after the piece at hand.
        let mut after: BTreeMap<FragmentId, u64> = BTreeMap::new();
        if fine.is_some() {
            for (p, _) in &pieces {
                *after.entry(p.fragment).or_default() += p.len as u64;
            }
        }
        for (p, only) in pieces {
            let cut = match (fine, after.get_mut(&p.fragment)) {
                (Some(fine), Some(rest)) => {
                    *rest -= p.len as u64;
                    if *rest < tail_bytes { most.min(fine) } else { most }
                }
                _ => most,
            };
            for part in p.split(cut) {
                self.push_piece(part, only.clone());
            }
        }
        self.policy.on_range(&fragment_parts(shape, &self.pieces[first..]));
        self.seal_if_expected();
        if self.policy.reads_in_step() {
            // Each piece's place in its fragment's run of the range, as a fraction.
            let mut runs: BTreeMap<FragmentId, (usize, usize)> = BTreeMap::new();
            for (i, p) in self.pieces.iter().enumerate().skip(first) {
                runs.entry(p.fragment).or_insert((i, 0)).1 += 1;
            }
            let pieces = &self.pieces;
            let at = |i: usize| {
                let (start, n) = runs[&pieces[i].fragment];
                ((i - start) as f64 + 0.5) / n as f64
            };
            self.order[first..].sort_by(|a, b| at(*a).total_cmp(&at(*b)).then(a.cmp(b)));
        }
        first..self.pieces.len()
    }

    fn holds(&self, piece: usize, node: NodeId) -> bool {
        match self.only.get(&piece) {
            Some(only) => only.contains(&node),
            None => self.holders[&self.pieces[piece].fragment].contains(&node),
        }
    }

    pub fn policy_kind(&self) -> ReadPolicyKind {
        self.policy.kind()
    }

    /// Whether this consumer's requests ask its servers for phase slots: it reads one
    /// fragment, so its two disks are a pair that can take turns (`Service::phased`).
    fn phased(&self) -> bool {
        self.holders.len() == 1
    }

    /// What the servers should do with this consumer's request for `piece` at `node`.
    pub fn service(&self, piece: usize, node: NodeId) -> Service {
        let fragment = self.pieces[piece].fragment;
        Service {
            share: self.policy.share(fragment, node),
            copy: self.copy_of(fragment, node).min(COPY_MAX as usize) as u8,
            phased: self.phased(),
            ..self.policy.service()
        }
    }

    /// Which copy of `fragment` `node` holds: 0 the primary.
    fn copy_of(&self, fragment: FragmentId, node: NodeId) -> usize {
        self.holders[&fragment].iter().position(|n| *n == node).expect("requests go to holders")
    }

    pub fn piece(&self, i: usize) -> &Piece {
        &self.pieces[i]
    }

    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    pub fn is_done(&self) -> bool {
        self.done_pieces == self.pieces.len()
    }

    pub fn is_delivered(&self, piece: usize) -> bool {
        self.state[piece] == PieceState::Done
    }

    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    pub fn done_bytes(&self) -> u64 {
        self.done_bytes
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The progress to send with the next request.
    pub fn progress(&self) -> Progress {
        Progress { done_bytes: self.done_bytes, total_bytes: self.read_bytes(), metric: self.policy.metric() }
    }

    fn live_holders(&self, piece: usize) -> Vec<NodeId> {
        let f = self.pieces[piece].fragment;
        self.holders[&f]
            .iter()
            .copied()
            .filter(|n| self.holds(piece, *n) && !self.down.contains(n) && !self.bad.contains(&(piece, *n)))
            .collect()
    }

    fn outstanding(&self, node: NodeId) -> u32 {
        self.nodes.get(&node).map_or(0, |v| v.outstanding)
    }

    /// What request `request` asks for now, as (piece, server): `None` once it is answered,
    /// failed or written off (a late reply is then ignored).
    pub fn in_flight(&self, request: u64) -> Option<(usize, NodeId)> {
        self.requests.get(&request).or_else(|| self.written_off.get(&request)).copied()
    }

    /// The answer to `request` came (data, an error or a cancel's confirmation): its piece
    /// and server, for the driver to report it with ([`ReadEngine::on_data`],
    /// [`ReadEngine::on_failure`]); `None` once answered (a late copy to ignore).
    pub fn take(&mut self, request: u64) -> Option<(usize, NodeId)> {
        if let Some(r) = self.requests.remove(&request) {
            self.taken.push(r);
            return Some(r);
        }
        self.written_off.remove(&request)
    }

    /// The id of a request in flight for `piece` at `node`.
    fn request_at(&self, piece: usize, node: NodeId) -> Option<u64> {
        self.requests.iter().find(|(_, r)| **r == (piece, node)).map(|(id, _)| *id)
    }

    /// Mark `piece` sent to `node`; returns the request's id.
    fn mark_sent(&mut self, now: Time, piece: usize, node: NodeId) -> u64 {
        let request = self.next_request;
        self.next_request += 1;
        self.requests.insert(request, (piece, node));
        if self.outstanding(node) == 0 {
            self.heard.insert(node, now);
        }
        match &mut self.state[piece] {
            PieceState::InFlight(nodes) => nodes.push((node, now)),
            s @ PieceState::Waiting => *s = PieceState::InFlight(vec![(node, now)]),
            PieceState::Done => unreachable!("a delivered piece is never sent again"),
        }
        self.nodes.entry(node).or_default().outstanding += 1;
        // The request carries our progress.
        self.notify.remove(&node);
        self.inflight += 1;
        self.stats.requests += 1;
        request
    }

    /// Forget one outstanding request of `piece` at `node`; returns when it was sent, or
    /// `None` if there was none (a late reply to something already released).
    fn release(&mut self, piece: usize, node: NodeId) -> Option<Option<Time>> {
        self.moved.remove(&piece);
        self.withdrawing.remove(&(piece, node));
        // A request the driver took an answer for by its id was counted, whatever else holds.
        let taken = self.taken.iter().position(|r| *r == (piece, node)).map(|i| self.taken.swap_remove(i)).is_some();
        let mut sent = None;
        let mut was_there = taken;
        if let PieceState::InFlight(nodes) = &mut self.state[piece] {
            if let Some(i) = nodes.iter().position(|(n, _)| *n == node) {
                sent = Some(nodes.swap_remove(i).1);
                was_there = true;
                if nodes.is_empty() {
                    self.state[piece] = PieceState::Waiting;
                }
            }
        } else if self.state[piece] == PieceState::Done {
            // A late duplicate, or a late cancel of a delivered piece: it was counted, unless
            // the server was given up since (`on_node_down` wrote its late copies off).
            was_there |= !self.down.contains(&node);
        }
        if !was_there {
            return None;
        }
        // Not taken by its id: the first request for the piece there (a piece is at a server
        // twice only when a request handed over met its hedge).
        if !taken && let Some(id) = self.request_at(piece, node) {
            self.requests.remove(&id);
        }
        let v = self.nodes.get_mut(&node).expect("counted when sent");
        v.outstanding -= 1;
        self.inflight -= 1;
        Some(sent)
    }

    /// Requests in flight allowed now: the configured window, or what the policy asks for
    /// instead (gd-rr in trouble: one per holder) unless the window is fixed, up to
    /// `WINDOW_MAX`.
    pub fn window(&self) -> u32 {
        if self.config.fixed_window {
            self.config.window
        } else {
            self.policy.window(self.config.window).min(WINDOW_MAX)
        }
    }

    /// The next request to send, if the window has room and the policy wants one sent.
    pub fn poll_send(&mut self, now: Time) -> Result<Option<Dispatch>, RouteError> {
        self.withdraw_dropped();
        if let Some((piece, node)) = self.steals.pop_front() {
            let request = self.mark_sent(now, piece, node);
            return Ok(Some(Dispatch { piece, node, request }));
        }
        if self.inflight >= self.window() {
            return Ok(None);
        }
        // The next piece: a retry first, else the next never-requested one.
        while let Some(&p) = self.retry.front() {
            if self.state[p] == PieceState::Waiting {
                break;
            }
            self.retry.pop_front();
        }
        let (piece, from_retry) = match self.retry.front() {
            Some(&p) => (p, true),
            None if self.cursor < self.order.len() => (self.order[self.cursor], false),
            None => return Ok(None),
        };
        let live = self.live_holders(piece);
        if live.is_empty() {
            let fragment = self.pieces[piece].fragment;
            let corrupt_on: Vec<NodeId> =
                self.holders[&fragment].iter().copied().filter(|n| self.bad.contains(&(piece, *n))).collect();
            if !corrupt_on.is_empty() {
                return Err(RouteError::Corrupt { offset: self.pieces[piece].dataset_offset, corrupt_on });
            }
            return Err(RouteError::NoLiveCopy { fragment, holders: self.holders[&fragment].clone() });
        }
        let view = RouteView { fragment: Some(self.pieces[piece].fragment), ..view!(self, now) };
        let pick = self.policy.pick(&view, &live);
        let picked = match pick {
            Pick::To(n) => {
                assert!(live.contains(&n), "policy {} picked a non-holder", self.policy.kind());
                Some(n)
            }
            Pick::Hold => None,
        };
        let node = match (picked, self.idle_holder(now, piece, &live)) {
            (Some(n), _) if self.is_idle(now, n) => n,
            (_, Some(idle)) => idle,
            (Some(n), None) => n,
            // A hold with nothing in flight would stall the read: the primary gets it.
            (None, None) if self.inflight == 0 => live[0],
            (None, None) => return Ok(None),
        };
        if from_retry {
            self.retry.pop_front();
        } else {
            self.cursor += 1;
        }
        let request = self.mark_sent(now, piece, node);
        Ok(Some(Dispatch { piece, node, request }))
    }

    /// Whether `n` said, recently, that it has nothing to do but our requests: nothing queued
    /// beyond what we had there, and no reader of its primary copies still reading.
    fn is_idle(&self, now: Time, n: NodeId) -> bool {
        let Some(v) = self.nodes.get(&n) else { return false };
        let (Some(state), Some(at)) = (v.last_state, v.state_at) else { return false };
        now.since(at) <= IDLE_FRESH && state.queue_len <= v.outstanding_at_state && state.primary_progress.is_none()
    }

    /// A holder of `piece` that is idle and takes more of ours, in the second half of the
    /// read (see "An idle copy takes the end of a read").
    fn idle_holder(&self, now: Time, piece: usize, live: &[NodeId]) -> Option<NodeId> {
        let second_half = self.done_bytes.saturating_mul(2) >= self.read_bytes();
        if !self.policy.steals_at_end() || !second_half {
            return None;
        }
        let fragment = self.pieces[piece].fragment;
        live.iter().copied().find(|&n| {
            self.is_idle(now, n)
                && !self.policy.drops(fragment, n)
                && self.nodes.get(&n).is_some_and(|v| v.outstanding < IDLE_TAKE)
        })
    }

    /// The policy dropped holders: take back every request queued at a holder the plan now
    /// reads nothing of its fragment from, when another live holder is read. A request at a
    /// holder that gives this reader no share waits behind the holder's own readers (1.1 s
    /// after a fault ended, on the cluster, taking a block from that holder's own reader
    /// then). Cancelled, the piece is sent again through the policy; a cancel that comes too
    /// late yields the data, as for a steal.
    fn withdraw_dropped(&mut self) {
        let epoch = self.policy.drop_epoch();
        if epoch == self.checked_epoch {
            return;
        }
        self.checked_epoch = epoch;
        for i in 0..self.pieces.len() {
            let PieceState::InFlight(nodes) = &self.state[i] else { continue };
            let [(node, _)] = nodes[..] else { continue };
            let fragment = self.pieces[i].fragment;
            if self.moved.contains(&i) || self.withdrawing.contains(&(i, node)) || !self.policy.drops(fragment, node) {
                continue;
            }
            let elsewhere = self.live_holders(i).into_iter().any(|n| n != node && !self.policy.drops(fragment, n));
            if elsewhere {
                self.withdrawing.insert((i, node));
                self.stats.withdrawn += 1;
                self.cancels.push_back((i, node));
            }
        }
    }

    /// The next cancel to send (a stolen request's old copy).
    pub fn poll_cancel(&mut self) -> Option<Dispatch> {
        while let Some((piece, node)) = self.cancels.pop_front() {
            // One answered meanwhile needs no cancel.
            if let Some(request) = self.request_at(piece, node) {
                return Some(Dispatch { piece, node, request });
            }
        }
        None
    }

    /// The next server to send this consumer's current progress to. Servers learn progress
    /// from each request; a server that has not been sent one for a while would otherwise
    /// compare stale figures, and GD's balance around a ring of servers builds up a
    /// progress gradient of about a block per hop (measured in `ganges bench scan`). Drain it
    /// after `poll_send`: a request sent to a server carries the figure and takes the server
    /// off the list, so a reply that pulls its next request back costs no notice.
    pub fn poll_notify(&mut self) -> Option<NodeId> {
        self.notify.pop_first()
    }

    /// A server to ask for its state now (the driver sends a probe; its answer comes back
    /// through `on_state`).
    pub fn poll_probe(&mut self, now: Time) -> Option<NodeId> {
        if self.is_done() {
            return None;
        }
        let view = view!(self, now);
        // A server down for this read is passed over (it counts as probed), not the end of
        // the round.
        loop {
            let n = self.policy.poll_probe(&view)?;
            if !self.down.contains(&n) {
                self.stats.probes += 1;
                return Some(n);
            }
        }
    }

    /// When the driver should call `poll_probe` again though nothing arrives: the policy's
    /// next probe, or `None`.
    pub fn probe_at(&self, now: Time) -> Option<Time> {
        if self.is_done() {
            return None;
        }
        self.policy.probe_at(&view!(self, now))
    }

    /// A server reported its state (in a reply, or answering a probe).
    pub fn on_state(&mut self, now: Time, node: NodeId, state: ServerState) {
        let v = self.nodes.entry(node).or_default();
        (v.last_state, v.outstanding_at_state, v.state_at) = (Some(state), v.outstanding, Some(now));
        self.policy.on_state(now, node, &state);
    }

    /// A server answered a probe: its state, and its disk speed if it said (`on_disk_rate`).
    pub fn on_probe_answer(&mut self, now: Time, node: NodeId, state: ServerState, rate: Option<(f64, bool)>) {
        self.on_state(now, node, state);
        if let Some((bytes_per_sec, measured)) = rate {
            self.on_disk_rate(node, bytes_per_sec, measured);
        }
        let view = view!(self, now);
        self.policy.on_answer(&view, node);
        if self.is_idle(now, node) && self.among_the_fastest(node) {
            self.maybe_steal(now, node);
        }
    }

    /// Whether `node`'s disk reads within `EQUAL_WITHIN` of the fastest disk that holds our
    /// requests (see "An idle copy takes the end of a read").
    fn among_the_fastest(&self, node: NodeId) -> bool {
        let speed = |v: &NodeView| v.disk_speed().unwrap_or(0.0);
        let fastest = self.nodes.values().filter(|v| v.outstanding > 0).map(speed).fold(0.0, f64::max);
        self.nodes.get(&node).is_some_and(|v| speed(v) >= fastest * (1.0 - policy::EQUAL_WITHIN))
    }

    /// A reply of `bytes` spent `service_us` on the server's disk: its disk speed.
    pub fn on_service(&mut self, node: NodeId, bytes: u64, service_us: u32) {
        if service_us > 0 {
            let secs = service_us as f64 * 1e-6;
            let v = self.nodes.entry(node).or_default();
            v.replied.note(bytes, secs, RATE_MEMORY_SECS);
            v.replied_disk_bytes_per_sec = v.replied.rate();
            if let Some(r) = v.replied_disk_bytes_per_sec {
                self.smooth_disk_rate(node, r);
            }
        }
    }

    /// A server's disk speed as it reported it (in a probe's answer): `measured`, or the
    /// configured one before it served anything.
    pub fn on_disk_rate(&mut self, node: NodeId, bytes_per_sec: f64, measured: bool) {
        if measured {
            self.nodes.entry(node).or_default().reports.push(bytes_per_sec);
        }
        self.smooth_disk_rate(node, bytes_per_sec);
    }

    fn smooth_disk_rate(&mut self, node: NodeId, bytes_per_sec: f64) {
        let v = self.nodes.entry(node).or_default();
        v.disk_bytes_per_sec = Some(v.disk_bytes_per_sec.map_or(bytes_per_sec, |o| o + EWMA_NEW * (bytes_per_sec - o)));
    }

    /// Data for `piece` came back from `node` (its checksum already verified).
    pub fn on_data(&mut self, now: Time, piece: usize, node: NodeId) -> Delivery {
        self.heard.insert(node, now);
        let sent = self.release(piece, node);
        if sent.is_none() && self.down.contains(&node) {
            // A server given up for a stall answered after all: its pieces were asked of
            // other copies, which deliver them.
            self.stats.duplicates += 1;
            return Delivery::Duplicate;
        }
        assert!(sent.is_some(), "data for piece {piece} from {node}, which was never asked for it");
        let len = self.pieces[piece].len as u64;
        self.note_reply(now, node, sent.flatten(), len);
        if self.state[piece] == PieceState::Done {
            self.stats.duplicates += 1;
            return Delivery::Duplicate;
        }
        // A piece in flight at two servers was stolen, and the steal already cancelled the
        // old copy, or it was hedged, and the other copy is cancelled now; if a cancel loses
        // the race, the late reply finds the piece Done.
        if self.hedged.remove(&piece)
            && let PieceState::InFlight(others) = &self.state[piece]
        {
            self.cancels.extend(others.iter().map(|&(n, _)| (piece, n)));
        }
        self.state[piece] = PieceState::Done;
        let p = self.pieces[piece];
        self.done_pieces += 1;
        self.done_bytes += p.len as u64;
        let copy = self.copy_of(p.fragment, node);
        self.stats.bytes_by_copy[copy] += p.len as u64;
        let view = view!(self, now);
        self.policy.on_reply(&view, node);
        let finished = self.sealed && self.is_done();
        if self.policy.notifies_progress() || finished {
            // Every server holding our requests, the replying one too: a request sent to it
            // carries the progress and takes it off the list (`mark_sent`), but the request
            // this reply pulls may go elsewhere (gd-pc's least loaded copy, gd-plan's shares),
            // and a server left with our old figure served us ahead of a neighbour we had
            // passed, starving it (gd-pc read 85.6% of the layout-aware ideal on 10 disks with
            // one at 0.35, its slow consumer finishing a fifth after the rest).
            //
            // The last piece tells every server we read from that we are done, whatever the
            // policy (static's requests carry progress too). A server
            // reports the least progress of its primary readers heard from in the last
            // `PRIMARY_STALE_AFTER`, and our last request there carried a figure short of 1: a
            // scan of the same dataset started within that second (a bench's next run, a
            // job's next epoch) was told its backup's reader was all but done, and read its
            // backup from the first request: on 8 real disks with no fault, three to six of
            // gd-pc's 8 consumers did so at the start of every run but the first. And a
            // server that still counts us as reading never looks idle to the reader of its
            // backup copy (see "An idle copy takes the end of a read").
            let holding = self.nodes.iter().filter(|(_, v)| finished || v.outstanding > 0).map(|(n, _)| *n);
            self.notify.extend(holding);
        }
        self.maybe_steal(now, node);
        Delivery::New
    }

    /// Smoothed latency and delivered rate of `node`, from a reply of `bytes`.
    fn note_reply(&mut self, now: Time, node: NodeId, sent: Option<Time>, bytes: u64) {
        let v = self.nodes.entry(node).or_default();
        v.replies += 1;
        let smooth = |old: Option<f64>, new: f64| Some(old.map_or(new, |o| o + EWMA_NEW * (new - o)));
        if let Some(sent) = sent {
            v.latency_secs = smooth(v.latency_secs, now.since(sent).as_secs_f64());
        }
        // The rate while we had requests there: since the later of the last reply and the
        // moment this request was sent.
        let since = match (v.last_reply, sent) {
            (Some(r), Some(s)) => r.max(s),
            (Some(r), None) => r,
            (None, Some(s)) => s,
            (None, None) => now,
        };
        v.delivered.note(bytes, now.since(since).as_secs_f64(), RATE_MEMORY_SECS);
        v.rate_bytes_per_sec = v.delivered.rate();
        v.last_reply = Some(now);
    }

    /// A request failed without data.
    pub fn on_failure(&mut self, now: Time, piece: usize, node: NodeId, why: Failure) {
        if why != Failure::Unavailable {
            self.heard.insert(node, now);
        }
        let withdrawn = self.withdrawing.contains(&(piece, node));
        if self.release(piece, node).is_none() {
            return;
        }
        match why {
            Failure::Cancelled => {}
            Failure::Corrupt => {
                self.stats.corrupt.push((self.pieces[piece].dataset_offset, node));
                self.bad.insert((piece, node));
            }
            Failure::Unavailable => {
                self.down.insert(node);
            }
        }
        if self.state[piece] == PieceState::Waiting {
            if !withdrawn {
                self.stats.retries += 1;
            }
            self.retry.push_back(piece);
        }
    }

    /// A server handed our request for `piece` to another server (GD-6): expect the reply
    /// from `to` now. False if the engine no longer waits for that piece at `from`.
    pub fn on_moved(&mut self, now: Time, piece: usize, from: NodeId, to: NodeId) -> bool {
        let PieceState::InFlight(nodes) = &mut self.state[piece] else { return false };
        let Some(entry) = nodes.iter_mut().find(|(n, _)| *n == from) else { return false };
        entry.0 = to;
        if let Some(id) = self.request_at(piece, from) {
            self.requests.insert(id, (piece, to));
        }
        self.nodes.get_mut(&from).expect("counted when sent").outstanding -= 1;
        if self.outstanding(to) == 0 {
            self.heard.insert(to, now);
        }
        self.nodes.entry(to).or_default().outstanding += 1;
        self.stats.moved += 1;
        self.moved.insert(piece);
        if self.down.contains(&to) {
            // Moved to a server already known dead: take it back at once.
            self.on_failure(now, piece, to, Failure::Unavailable);
        }
        true
    }

    /// A server is gone: every request outstanding there goes back to be retried elsewhere.
    pub fn on_node_down(&mut self, now: Time, node: NodeId) {
        self.down.insert(node);
        let stuck: Vec<usize> = (0..self.pieces.len())
            .filter(|&i| matches!(&self.state[i], PieceState::InFlight(ns) if ns.iter().any(|(n, _)| *n == node)))
            .collect();
        for piece in stuck {
            self.on_failure(now, piece, node, Failure::Unavailable);
        }
        // What is left counted there are late copies of delivered pieces (a steal's or a
        // hedge's other request, its cancel unanswered): they will never be answered now.
        if let Some(v) = self.nodes.get_mut(&node) {
            self.inflight -= v.outstanding;
            v.outstanding = 0;
        }
        self.steals.retain(|s| s.1 != node);
        self.cancels.retain(|s| s.1 != node);
        self.requests.retain(|_, r| r.1 != node);
        self.taken.retain(|r| r.1 != node);
        self.notify.remove(&node);
    }

    /// When the next stall check is due, if any server holds our requests.
    pub fn stall_deadline(&self) -> Option<Time> {
        self.nodes
            .iter()
            .filter(|(n, v)| v.outstanding > 0 && !self.down.contains(n))
            .filter_map(|(n, _)| self.heard.get(n))
            .min()
            .map(|&t| t + self.config.stall_timeout)
    }

    /// Servers that held our requests without answering for the stall timeout: they are
    /// treated as down for this read (their requests go to other copies). Returns them.
    pub fn check_stalls(&mut self, now: Time) -> Vec<NodeId> {
        let stalled: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(n, v)| v.outstanding > 0 && !self.down.contains(n))
            .filter(|(n, _)| self.heard.get(n).is_some_and(|&t| now.since(t) >= self.config.stall_timeout))
            .map(|(n, _)| *n)
            .collect();
        for &n in &stalled {
            let there: Vec<(u64, (usize, NodeId))> =
                self.requests.iter().filter(|(_, r)| r.1 == n).map(|(i, r)| (*i, *r)).collect();
            self.on_node_down(now, n);
            self.written_off.extend(there);
        }
        stalled
    }

    /// End-of-scan steal and hedge (module docs): `node` just replied and everything has been
    /// requested; if it has nothing more of ours, move one piece queued elsewhere to it, or
    /// send it there too; if it has some, move one only when it would answer it sooner.
    fn maybe_steal(&mut self, now: Time, node: NodeId) {
        let here = self.outstanding(node);
        if !self.policy.steals_at_end()
            || self.cursor < self.pieces.len()
            || !self.retry.is_empty()
            || (here > 0 && !self.policy.steals_from_slow_lines())
            || self.down.contains(&node)
        {
            return;
        }
        // The piece requested last at the most loaded other server: it will be served last.
        let mut best: Option<(u32, usize, NodeId, Time)> = None;
        for i in (0..self.pieces.len()).rev() {
            let PieceState::InFlight(nodes) = &self.state[i] else { continue };
            // Not one being taken back (`withdraw_dropped`): it is on its way out already. Not
            // one in flight at two servers: stolen or hedged already.
            if nodes.len() != 1
                || nodes[0].0 == node
                || self.bad.contains(&(i, node))
                || self.moved.contains(&i)
                || self.withdrawing.contains(&(i, nodes[0].0))
            {
                continue;
            }
            if !self.holds(i, node) {
                continue;
            }
            let load = self.outstanding(nodes[0].0);
            if best.is_none_or(|(l, ..)| load > l) {
                best = Some((load, i, nodes[0].0, nodes[0].1));
            }
        }
        let Some((load, piece, from, sent)) = best else { return };
        if here > 0 && !self.sooner_here(node, here, from, load) {
            return;
        }
        if load >= 2 {
            // The other server still has a queue of ours behind this piece: move it.
            self.stats.steals += 1;
            self.cancels.push_back((piece, from));
            self.steals.push_back((piece, node));
            return;
        }
        // Our last piece there: hedge when it is expected back later than this server, which
        // has nothing of ours, would take to answer (a piece already on the other's disk is
        // expected soon, and a second copy would only read it twice), or when it is late
        // there: queued behind other consumers, not on the disk.
        let waited = now.since(sent).as_secs_f64();
        let latency = self.nodes.get(&from).and_then(|v| v.latency_secs);
        let worth = match (latency, self.one_more(node, piece)) {
            (Some(there), Some(here)) => there - waited > here || waited > there.max(here),
            (None, Some(here)) => waited > here,
            (_, None) => false,
        };
        if worth {
            self.stats.hedges += 1;
            self.hedged.insert(piece);
            self.steals.push_back((piece, node));
        }
    }

    /// Slow lines (module docs): whether `node`, with `here` of ours still queued, would answer
    /// the piece `load`th in our line at `from` sooner, by the disks' measured speeds. Never
    /// the last piece there (that is for a hedge, from a server with nothing of ours), never
    /// between disks of about one speed, and nothing while either speed is unknown.
    fn sooner_here(&self, node: NodeId, here: u32, from: NodeId, load: u32) -> bool {
        let speed = |n: NodeId| self.nodes.get(&n).and_then(NodeView::disk_speed);
        let (Some(fast), Some(slow)) = (speed(node), speed(from)) else { return false };
        load >= 2 && slow < (1.0 - rate::TROUBLE) * fast && f64::from(load) / slow > f64::from(here + 1) / fast
    }

    /// How long `node`, which holds nothing of ours, would take to answer one more request
    /// for `piece`: a block of another consumer's ahead of it, then ours, at its disk's
    /// measured speed; its smoothed reply time if that speed is not known. Its reply time is
    /// not the measure: that counted our queue there.
    fn one_more(&self, node: NodeId, piece: usize) -> Option<f64> {
        let v = self.nodes.get(&node)?;
        let len = self.pieces[piece].len as f64;
        v.disk_speed().map(|rate| 2.0 * len / rate).or(v.latency_secs)
    }

    pub fn assert_invariants(&self) {
        let counted: u32 = self.nodes.values().map(|v| v.outstanding).sum();
        assert_eq!(counted, self.inflight);
        assert!(self.taken.is_empty(), "every answer taken is reported");
        assert_eq!(self.requests.len() as u32, self.inflight, "every request in flight has its id");
        let listed: usize = self.state.iter().map(|s| if let PieceState::InFlight(n) = s { n.len() } else { 0 }).sum();
        assert!(listed as u32 <= self.inflight);
        let done = self.state.iter().filter(|s| **s == PieceState::Done).count();
        assert_eq!(done, self.done_pieces);
        assert!(self.done_bytes <= self.total_bytes);
    }
}

/// The part of each fragment `pieces` cover, as a fraction, summed in bytes so that a whole
/// fragment is exactly 1 however many pieces it was cut into (gd-plan tells whole
/// fragments from parts by it).
fn fragment_parts(shape: &Shape, pieces: &[Piece]) -> BTreeMap<FragmentId, f64> {
    let mut bytes: BTreeMap<FragmentId, u64> = BTreeMap::new();
    for p in pieces {
        *bytes.entry(p.fragment).or_default() += p.len as u64;
    }
    bytes.into_iter().map(|(f, b)| (f, b as f64 / shape.fragment_bytes(f).max(1) as f64)).collect()
}

#[cfg(test)]
mod tests;
