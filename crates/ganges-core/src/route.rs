//! Client-side read routing: which server each request of a consumer goes to.
//!
//! A [`ReadEngine`] drives one consumer's read of its partition. It owns what every policy
//! shares: the pieces still to request, a bounded window of requests in flight, failover when
//! a server dies or returns a corrupt block, duplicate suppression, and the end-of-scan steal
//! (below). The choice of server is a [`RoutePolicy`]:
//! - [`Static`] (GD-8): the primary copy only; the non-robust baseline every bench shows.
//! - [`Graduated`] (GD-1, and GD-2 with the fraction metric): the first requests go
//!   round-robin over the copies; after that each reply pulls the next request to the server
//!   that sent it (river §3.3), so a faster server gets more requests. The progress the engine
//!   reports rides on every request and drives the servers' furthest-behind scheduler.
//!
//! **End-of-scan steal.** When every piece has been requested, a server that replies and has
//! nothing more of this consumer's takes over one piece still queued at another server that
//! also holds it; the engine sends it there and cancels it at the old server. Without this,
//! the last few blocks of a consumer sit in a slow server's queue while its fast copy idles,
//! which costs a whole queue's worth of slow service at the end of every scan (river §6.2's
//! end-of-run effect). A cancel that arrives too late yields a duplicate, which the engine
//! drops and counts: every piece is delivered exactly once.
//!
//! **Progress notices.** GD policies also tell the other servers holding this consumer's
//! queued requests whenever its progress changes (`poll_notify`), so every server's
//! furthest-behind choice uses fresh figures (river §6.3: local decisions guided by global
//! knowledge of progress).
//!
//! Driving order (the quinn style): feed events with `on_data` / `on_failure` /
//! `on_node_down`, then drain `poll_send`, `poll_cancel` and `poll_notify` until all return
//! `None`.

use crate::ids::{FragmentId, NodeId};
use crate::layout::{Layout, REPLICAS_MAX};
use crate::sched::{Progress, ProgressMetric};
use crate::shape::Piece;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Requests in flight per consumer unless told otherwise: two per copy at R = 2. Enough to
/// keep each server's queue non-empty while a reply crosses the network (river §6.1: a
/// producer needs a few outstanding messages to pipeline), few enough that the servers'
/// scheduler, not the queue order, decides who is served.
pub const WINDOW_DEFAULT: u32 = 4;
/// The largest window a consumer may ask for: bounds client buffers and server queues.
pub const WINDOW_MAX: u32 = 256;
/// How long a server may hold this consumer's requests without answering any before the
/// consumer treats it as down for this read. A slow server still answers; one that says
/// nothing for this long is hung (a stopped process, a dead disk), and waiting on it would
/// hang the scan. Thirty seconds is far above any sane block time: a 16 MiB block queued
/// behind two others on a 2 MiB/s disk takes 24 s.
pub const STALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Settings of one consumer's read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadConfig {
    /// Requests in flight, 1 to `WINDOW_MAX`.
    pub window: u32,
    /// See `STALL_TIMEOUT_DEFAULT`.
    pub stall_timeout: Duration,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            window: WINDOW_DEFAULT,
            stall_timeout: STALL_TIMEOUT_DEFAULT,
        }
    }
}

/// The read policies of this release, selectable by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadPolicyKind {
    /// GD-8: each consumer reads from the primary copy only.
    Static,
    /// GD-1: basic graduated declustering, progress in bytes.
    Gd,
    /// GD-2: graduated declustering with progress relative to the partition.
    GdRel,
}

impl ReadPolicyKind {
    pub const ALL: [ReadPolicyKind; 3] = [
        ReadPolicyKind::Static,
        ReadPolicyKind::Gd,
        ReadPolicyKind::GdRel,
    ];

    pub fn build(self) -> Box<dyn RoutePolicy> {
        match self {
            ReadPolicyKind::Static => Box::new(Static),
            ReadPolicyKind::Gd => Box::new(Graduated::new(ProgressMetric::Bytes)),
            ReadPolicyKind::GdRel => Box::new(Graduated::new(ProgressMetric::Fraction)),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ReadPolicyKind::Static => "GD-8 static: primary copy only (non-robust baseline)",
            ReadPolicyKind::Gd => "GD-1 basic graduated declustering (progress in bytes)",
            ReadPolicyKind::GdRel => "GD-2 graduated declustering, progress relative to partition",
        }
    }
}

impl FromStr for ReadPolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "static" => Ok(ReadPolicyKind::Static),
            "gd" => Ok(ReadPolicyKind::Gd),
            "gd-rel" => Ok(ReadPolicyKind::GdRel),
            _ => Err(format!(
                "unknown read policy `{s}` (use static, gd or gd-rel)"
            )),
        }
    }
}

impl fmt::Display for ReadPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadPolicyKind::Static => "static",
            ReadPolicyKind::Gd => "gd",
            ReadPolicyKind::GdRel => "gd-rel",
        })
    }
}

/// What a policy may look at when it picks a server.
#[derive(Debug)]
pub struct RouteView<'a> {
    pub now: Time,
    /// This consumer's requests in flight at each server.
    pub outstanding: &'a BTreeMap<NodeId, u32>,
}

impl RouteView<'_> {
    pub fn outstanding_at(&self, node: NodeId) -> u32 {
        self.outstanding.get(&node).copied().unwrap_or(0)
    }
}

/// The part of a read policy that differs between policies: where a request goes.
pub trait RoutePolicy: Send + fmt::Debug {
    fn name(&self) -> &'static str;
    /// The progress metric sent with requests (and so used by the servers' scheduler).
    fn metric(&self) -> ProgressMetric;
    /// Whether this policy may move queued requests between copies at the end of a scan.
    fn steals_at_end(&self) -> bool;
    /// Whether servers should hear of this consumer's progress between requests.
    fn notifies_progress(&self) -> bool;
    /// Pick a server for a request. `holders` are the live servers holding the piece, the
    /// primary copy first; never empty.
    fn pick(&mut self, view: &RouteView<'_>, holders: &[NodeId]) -> NodeId;
    /// A reply with data came back from `node`.
    fn on_reply(&mut self, _now: Time, _node: NodeId) {}
}

/// GD-8: always the primary copy (the first live holder, so a dead primary still fails over).
#[derive(Debug, Default)]
pub struct Static;

impl RoutePolicy for Static {
    fn name(&self) -> &'static str {
        "static"
    }
    fn metric(&self) -> ProgressMetric {
        ProgressMetric::Bytes
    }
    fn steals_at_end(&self) -> bool {
        false
    }
    fn notifies_progress(&self) -> bool {
        false
    }
    fn pick(&mut self, _view: &RouteView<'_>, holders: &[NodeId]) -> NodeId {
        holders[0]
    }
}

/// GD-1 / GD-2 consumer side: round-robin to start, then each reply pulls the next request.
#[derive(Debug)]
pub struct Graduated {
    metric: ProgressMetric,
    /// Servers whose reply has not yet pulled a request, oldest first.
    pulls: VecDeque<NodeId>,
    round_robin: usize,
}

impl Graduated {
    pub fn new(metric: ProgressMetric) -> Graduated {
        Graduated {
            metric,
            pulls: VecDeque::new(),
            round_robin: 0,
        }
    }
}

impl RoutePolicy for Graduated {
    fn name(&self) -> &'static str {
        match self.metric {
            ProgressMetric::Bytes => "gd",
            ProgressMetric::Fraction => "gd-rel",
        }
    }
    fn metric(&self) -> ProgressMetric {
        self.metric
    }
    fn steals_at_end(&self) -> bool {
        true
    }
    fn notifies_progress(&self) -> bool {
        true
    }
    fn pick(&mut self, _view: &RouteView<'_>, holders: &[NodeId]) -> NodeId {
        while let Some(n) = self.pulls.pop_front() {
            if holders.contains(&n) {
                return n;
            }
        }
        let n = holders[self.round_robin % holders.len()];
        self.round_robin += 1;
        n
    }
    fn on_reply(&mut self, _now: Time, node: NodeId) {
        // Bounded: one entry per reply, consumed by the request that reply frees.
        self.pulls.push_back(node);
    }
}

/// A request the driver must send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub piece: usize,
    pub node: NodeId,
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
    NoLiveCopy {
        fragment: FragmentId,
        holders: Vec<NodeId>,
    },
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
    pub retries: u64,
    /// (piece dataset offset, node) of every corrupt block a server reported.
    pub corrupt: Vec<(u64, NodeId)>,
}

impl ReadStats {
    pub fn backup_bytes(&self) -> u64 {
        self.bytes_by_copy[1..].iter().sum()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PieceState {
    Waiting,
    /// Outstanding at these servers (two only while a steal's cancel is in flight).
    InFlight(Vec<NodeId>),
    Done,
}

/// One consumer's read of its partition. See the module docs.
#[derive(Debug)]
pub struct ReadEngine {
    policy: Box<dyn RoutePolicy>,
    pieces: Vec<Piece>,
    /// Holders of each fragment the partition touches, primary first.
    holders: BTreeMap<FragmentId, Vec<NodeId>>,
    state: Vec<PieceState>,
    /// The first piece never requested; pieces are first requested in order.
    cursor: usize,
    /// Pieces to request again (failure), and pieces to steal, each with its target.
    retry: VecDeque<usize>,
    steals: VecDeque<Dispatch>,
    cancels: VecDeque<Dispatch>,
    /// Servers to tell this consumer's new progress (they hold its queued requests).
    notify: BTreeSet<NodeId>,
    outstanding: BTreeMap<NodeId, u32>,
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
    stats: ReadStats,
}

impl ReadEngine {
    pub fn new(
        policy: Box<dyn RoutePolicy>,
        layout: &Layout,
        pieces: Vec<Piece>,
        config: ReadConfig,
    ) -> Result<ReadEngine, RouteError> {
        if config.window == 0 || config.window > WINDOW_MAX {
            return Err(RouteError::Window(config.window));
        }
        if config.stall_timeout.is_zero() {
            return Err(RouteError::StallTimeout);
        }
        let mut holders = BTreeMap::new();
        for p in &pieces {
            holders
                .entry(p.fragment)
                .or_insert_with(|| layout.holders(p.fragment));
        }
        let total_bytes = pieces.iter().map(|p| p.len as u64).sum();
        Ok(ReadEngine {
            policy,
            state: vec![PieceState::Waiting; pieces.len()],
            pieces,
            holders,
            cursor: 0,
            retry: VecDeque::new(),
            steals: VecDeque::new(),
            cancels: VecDeque::new(),
            notify: BTreeSet::new(),
            outstanding: BTreeMap::new(),
            heard: BTreeMap::new(),
            down: BTreeSet::new(),
            bad: BTreeSet::new(),
            config,
            inflight: 0,
            done_pieces: 0,
            done_bytes: 0,
            total_bytes,
            stats: ReadStats::default(),
        })
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
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
        Progress {
            done_bytes: self.done_bytes,
            total_bytes: self.total_bytes,
            metric: self.policy.metric(),
        }
    }

    fn live_holders(&self, piece: usize) -> Vec<NodeId> {
        let f = self.pieces[piece].fragment;
        self.holders[&f]
            .iter()
            .copied()
            .filter(|n| !self.down.contains(n) && !self.bad.contains(&(piece, *n)))
            .collect()
    }

    fn mark_sent(&mut self, now: Time, piece: usize, node: NodeId) {
        if self.outstanding.get(&node).copied().unwrap_or(0) == 0 {
            self.heard.insert(node, now);
        }
        match &mut self.state[piece] {
            PieceState::InFlight(nodes) => nodes.push(node),
            s @ PieceState::Waiting => *s = PieceState::InFlight(vec![node]),
            PieceState::Done => unreachable!("a delivered piece is never sent again"),
        }
        *self.outstanding.entry(node).or_insert(0) += 1;
        self.inflight += 1;
        self.stats.requests += 1;
    }

    fn release(&mut self, piece: usize, node: NodeId) -> bool {
        let mut was_there = false;
        if let PieceState::InFlight(nodes) = &mut self.state[piece] {
            if let Some(i) = nodes.iter().position(|n| *n == node) {
                nodes.swap_remove(i);
                was_there = true;
                if nodes.is_empty() {
                    self.state[piece] = PieceState::Waiting;
                }
            }
        } else if self.state[piece] == PieceState::Done {
            // A late duplicate or a late cancel of a delivered piece: it was counted.
            was_there = true;
        }
        if was_there {
            let c = self.outstanding.get_mut(&node).expect("counted when sent");
            *c -= 1;
            self.inflight -= 1;
        }
        was_there
    }

    /// The next request to send, if the window has room.
    pub fn poll_send(&mut self, now: Time) -> Result<Option<Dispatch>, RouteError> {
        if let Some(s) = self.steals.pop_front() {
            // Steals replace a request already counted against the window.
            self.mark_sent(now, s.piece, s.node);
            return Ok(Some(s));
        }
        if self.inflight >= self.config.window {
            return Ok(None);
        }
        let piece = loop {
            if let Some(p) = self.retry.pop_front() {
                if self.state[p] == PieceState::Waiting {
                    break p;
                }
                continue;
            }
            if self.cursor < self.pieces.len() {
                self.cursor += 1;
                break self.cursor - 1;
            }
            return Ok(None);
        };
        let live = self.live_holders(piece);
        if live.is_empty() {
            let fragment = self.pieces[piece].fragment;
            return Err(RouteError::NoLiveCopy {
                fragment,
                holders: self.holders[&fragment].clone(),
            });
        }
        let view = RouteView {
            now,
            outstanding: &self.outstanding,
        };
        let node = self.policy.pick(&view, &live);
        assert!(
            live.contains(&node),
            "policy {} picked a non-holder",
            self.policy.name()
        );
        self.mark_sent(now, piece, node);
        Ok(Some(Dispatch { piece, node }))
    }

    /// The next cancel to send (a stolen request's old copy).
    pub fn poll_cancel(&mut self) -> Option<Dispatch> {
        self.cancels.pop_front()
    }

    /// The next server to send this consumer's current progress to. Servers learn progress
    /// from each request; a server that has not been sent one for a while would otherwise
    /// compare stale figures, and GD's balance around a ring of servers builds up a
    /// progress gradient of about a block per hop (measured in `ganges bench scan`).
    pub fn poll_notify(&mut self) -> Option<NodeId> {
        self.notify.pop_first()
    }

    /// Data for `piece` came back from `node` (its checksum already verified).
    pub fn on_data(&mut self, now: Time, piece: usize, node: NodeId) -> Delivery {
        self.heard.insert(node, now);
        let known = self.release(piece, node);
        assert!(
            known,
            "data for piece {piece} from {node}, which was never asked for it"
        );
        if self.state[piece] == PieceState::Done {
            self.stats.duplicates += 1;
            return Delivery::Duplicate;
        }
        // A piece in flight at two servers was stolen, and the steal already cancelled the
        // old copy; if that cancel loses the race, the late reply finds the piece Done.
        self.state[piece] = PieceState::Done;
        let p = self.pieces[piece];
        self.done_pieces += 1;
        self.done_bytes += p.len as u64;
        let copy = self.holders[&p.fragment]
            .iter()
            .position(|n| *n == node)
            .expect("holder");
        self.stats.bytes_by_copy[copy] += p.len as u64;
        self.policy.on_reply(now, node);
        if self.policy.notifies_progress() {
            // The replying server gets fresh progress with the request this reply pulls.
            let others = self
                .outstanding
                .iter()
                .filter(|(n, c)| **c > 0 && **n != node)
                .map(|(n, _)| *n);
            self.notify.extend(others);
        }
        self.maybe_steal(node);
        Delivery::New
    }

    /// A request failed without data.
    pub fn on_failure(&mut self, now: Time, piece: usize, node: NodeId, why: Failure) {
        if why != Failure::Unavailable {
            self.heard.insert(node, now);
        }
        if !self.release(piece, node) {
            return;
        }
        match why {
            Failure::Cancelled => {}
            Failure::Corrupt => {
                self.stats
                    .corrupt
                    .push((self.pieces[piece].dataset_offset, node));
                self.bad.insert((piece, node));
            }
            Failure::Unavailable => {
                self.down.insert(node);
            }
        }
        if self.state[piece] == PieceState::Waiting {
            self.stats.retries += 1;
            self.retry.push_back(piece);
        }
    }

    /// A server is gone: every request outstanding there goes back to be retried elsewhere.
    pub fn on_node_down(&mut self, now: Time, node: NodeId) {
        self.down.insert(node);
        let stuck: Vec<usize> = (0..self.pieces.len())
            .filter(|&i| matches!(&self.state[i], PieceState::InFlight(ns) if ns.contains(&node)))
            .collect();
        for piece in stuck {
            self.on_failure(now, piece, node, Failure::Unavailable);
        }
        self.steals.retain(|s| s.node != node);
        self.cancels.retain(|s| s.node != node);
        self.notify.remove(&node);
    }

    /// When the next stall check is due, if any server holds our requests.
    pub fn stall_deadline(&self) -> Option<Time> {
        self.outstanding
            .iter()
            .filter(|(n, c)| **c > 0 && !self.down.contains(n))
            .filter_map(|(n, _)| self.heard.get(n))
            .min()
            .map(|&t| t + self.config.stall_timeout)
    }

    /// Servers that held our requests without answering for the stall timeout: they are
    /// treated as down for this read (their requests go to other copies). Returns them.
    pub fn check_stalls(&mut self, now: Time) -> Vec<NodeId> {
        let stalled: Vec<NodeId> = self
            .outstanding
            .iter()
            .filter(|(n, c)| **c > 0 && !self.down.contains(n))
            .filter(|(n, _)| {
                self.heard
                    .get(n)
                    .is_some_and(|&t| now.since(t) >= self.config.stall_timeout)
            })
            .map(|(n, _)| *n)
            .collect();
        for &n in &stalled {
            self.on_node_down(now, n);
        }
        stalled
    }

    /// End-of-scan steal (module docs): `node` just replied; if it has nothing more of ours
    /// and everything has been requested, move one piece queued elsewhere to it.
    fn maybe_steal(&mut self, node: NodeId) {
        if !self.policy.steals_at_end()
            || self.cursor < self.pieces.len()
            || !self.retry.is_empty()
            || self.outstanding.get(&node).copied().unwrap_or(0) > 0
            || self.down.contains(&node)
        {
            return;
        }
        // The piece requested last at the most loaded other server: it will be served last.
        let mut best: Option<(u32, usize, NodeId)> = None;
        for i in (0..self.pieces.len()).rev() {
            let PieceState::InFlight(nodes) = &self.state[i] else {
                continue;
            };
            if nodes.len() != 1 || nodes[0] == node || self.bad.contains(&(i, node)) {
                continue;
            }
            if !self.holders[&self.pieces[i].fragment].contains(&node) {
                continue;
            }
            let load = self.outstanding.get(&nodes[0]).copied().unwrap_or(0);
            if best.is_none_or(|(l, _, _)| load > l) {
                best = Some((load, i, nodes[0]));
            }
        }
        // Only worth it when the other server still has a queue of ours behind this piece.
        if let Some((load, piece, from)) = best
            && load >= 2
        {
            self.stats.steals += 1;
            self.cancels.push_back(Dispatch { piece, node: from });
            self.steals.push_back(Dispatch { piece, node });
        }
    }

    pub fn assert_invariants(&self) {
        let counted: u32 = self.outstanding.values().sum();
        assert_eq!(counted, self.inflight);
        let listed: usize = self
            .state
            .iter()
            .map(|s| {
                if let PieceState::InFlight(n) = s {
                    n.len()
                } else {
                    0
                }
            })
            .sum();
        assert!(listed as u32 <= self.inflight);
        let done = self
            .state
            .iter()
            .filter(|s| **s == PieceState::Done)
            .count();
        assert_eq!(done, self.done_pieces);
        assert!(self.done_bytes <= self.total_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::{Partition, Shape};

    fn engine(
        kind: ReadPolicyKind,
        nodes: u32,
        replicas: u32,
        fragment: u32,
        blocks: u64,
    ) -> ReadEngine {
        let shape = Shape::uniform(nodes, blocks * 4096, 4096).unwrap();
        let layout = Layout::chained(nodes, replicas).unwrap();
        let part = shape.fragment_partitions()[fragment as usize];
        let pieces = shape.pieces(part).unwrap();
        ReadEngine::new(kind.build(), &layout, pieces, ReadConfig::default()).unwrap()
    }

    fn drain(e: &mut ReadEngine) -> Vec<Dispatch> {
        let mut out = vec![];
        while let Some(s) = e.poll_send(Time::ZERO).unwrap() {
            out.push(s);
        }
        out
    }

    #[test]
    fn static_reads_only_the_primary() {
        let mut e = engine(ReadPolicyKind::Static, 4, 2, 1, 10);
        let sends = drain(&mut e);
        assert_eq!(sends.len(), WINDOW_DEFAULT as usize);
        assert!(sends.iter().all(|s| s.node == NodeId(1)));
        while !e.is_done() {
            let s = sends_pending(&mut e);
            assert_eq!(e.on_data(Time::ZERO, s.piece, s.node), Delivery::New);
            drain(&mut e)
                .iter()
                .for_each(|s| assert_eq!(s.node, NodeId(1)));
            e.assert_invariants();
        }
        assert_eq!(e.stats().backup_bytes(), 0);
    }

    /// Test helper: the oldest piece in flight and its server.
    fn sends_pending(e: &mut ReadEngine) -> Dispatch {
        let i = (0..e.pieces.len())
            .find(|&i| matches!(e.state[i], PieceState::InFlight(_)))
            .expect("something in flight");
        let PieceState::InFlight(n) = &e.state[i] else {
            unreachable!()
        };
        Dispatch {
            piece: i,
            node: n[0],
        }
    }

    #[test]
    fn gd_starts_round_robin_and_replies_pull_requests() {
        let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 100);
        let sends = drain(&mut e);
        let nodes: Vec<u32> = sends.iter().map(|s| s.node.0).collect();
        assert_eq!(nodes, vec![0, 1, 0, 1]);
        // Node 1 replies three times in a row: each reply pulls the next request to node 1.
        for s in sends.iter().filter(|s| s.node == NodeId(1)) {
            e.on_data(Time::ZERO, s.piece, s.node);
            let next = drain(&mut e);
            assert_eq!(next.len(), 1);
            assert_eq!(next[0].node, NodeId(1));
        }
        assert_eq!(e.progress().done_bytes, 2 * 4096);
        e.assert_invariants();
    }

    #[test]
    fn gd_tells_the_other_servers_of_new_progress_and_static_does_not() {
        let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 100);
        let sends = drain(&mut e);
        e.on_data(Time::ZERO, sends[1].piece, NodeId(1));
        assert_eq!(
            e.poll_notify(),
            Some(NodeId(0)),
            "node 0 holds our requests"
        );
        assert_eq!(
            e.poll_notify(),
            None,
            "node 1 learns it from the next request"
        );
        let mut s = engine(ReadPolicyKind::Static, 4, 2, 0, 100);
        let sends = drain(&mut s);
        s.on_data(Time::ZERO, sends[0].piece, NodeId(0));
        assert_eq!(s.poll_notify(), None);
    }

    #[test]
    fn gd_rel_reports_fractional_progress_metric() {
        let e = engine(ReadPolicyKind::GdRel, 4, 2, 0, 10);
        assert_eq!(e.progress().metric, ProgressMetric::Fraction);
        assert_eq!(e.progress().total_bytes, 10 * 4096);
    }

    #[test]
    fn a_dead_server_s_requests_fail_over_and_nothing_is_lost() {
        let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 20);
        drain(&mut e);
        e.on_node_down(Time::ZERO, NodeId(1));
        let mut delivered = 0;
        loop {
            for s in drain(&mut e) {
                assert_eq!(s.node, NodeId(0), "only the live copy is asked");
            }
            if e.is_done() {
                break;
            }
            let s = sends_pending(&mut e);
            if e.on_data(Time::ZERO, s.piece, s.node) == Delivery::New {
                delivered += 1;
            }
            e.assert_invariants();
        }
        assert_eq!(delivered, 20);
        assert!(e.stats().retries >= 2);
    }

    #[test]
    fn static_fails_over_to_the_backup_when_the_primary_dies() {
        let mut e = engine(ReadPolicyKind::Static, 4, 2, 2, 3);
        drain(&mut e);
        e.on_node_down(Time::ZERO, NodeId(2));
        let sends = drain(&mut e);
        assert!(sends.iter().all(|s| s.node == NodeId(3)));
    }

    #[test]
    fn losing_every_copy_is_an_error_not_a_hang() {
        let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 3);
        drain(&mut e);
        e.on_node_down(Time::ZERO, NodeId(0));
        e.on_node_down(Time::ZERO, NodeId(1));
        let err = e.poll_send(Time::ZERO).unwrap_err();
        assert!(matches!(
            err,
            RouteError::NoLiveCopy {
                fragment: FragmentId(0),
                ..
            }
        ));
    }

    #[test]
    fn a_corrupt_block_is_read_from_another_copy() {
        let mut e = engine(ReadPolicyKind::Static, 4, 2, 0, 2);
        let sends = drain(&mut e);
        e.on_failure(Time::ZERO, sends[0].piece, NodeId(0), Failure::Corrupt);
        let again = drain(&mut e);
        assert_eq!(
            again,
            vec![Dispatch {
                piece: sends[0].piece,
                node: NodeId(1)
            }]
        );
        assert_eq!(e.stats().corrupt.len(), 1);
    }

    #[test]
    fn the_end_of_a_scan_steals_from_a_loaded_server_and_drops_the_duplicate() {
        let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 4);
        let sends = drain(&mut e); // pieces 0..4 on nodes 0,1,0,1
        assert_eq!(e.cursor, 4);
        // Node 1 delivers both of its pieces; node 0 is slow and still holds pieces 0 and 2.
        e.on_data(Time::ZERO, sends[1].piece, NodeId(1));
        e.on_data(Time::ZERO, sends[3].piece, NodeId(1));
        let steal = drain(&mut e);
        assert_eq!(
            steal,
            vec![Dispatch {
                piece: 2,
                node: NodeId(1)
            }]
        );
        assert_eq!(
            e.poll_cancel(),
            Some(Dispatch {
                piece: 2,
                node: NodeId(0)
            })
        );
        // The cancel lost the race: node 0 sends piece 2 anyway, then node 1 does too.
        assert_eq!(e.on_data(Time::ZERO, 2, NodeId(0)), Delivery::New);
        assert_eq!(e.on_data(Time::ZERO, 2, NodeId(1)), Delivery::Duplicate);
        e.on_data(Time::ZERO, 0, NodeId(0));
        assert!(e.is_done());
        assert_eq!(e.stats().duplicates, 1);
        assert_eq!(e.inflight(), 0);
        e.assert_invariants();
    }

    /// A server that holds our requests and says nothing is hung, not slow: after the stall
    /// timeout its requests go to the other copy, even for the static policy.
    #[test]
    fn a_hung_server_is_given_up_after_the_stall_timeout() {
        let mut e = engine(ReadPolicyKind::Static, 4, 2, 0, 3);
        let t0 = Time::from_secs_f64(1.0);
        while e.poll_send(t0).unwrap().is_some() {}
        let deadline = e.stall_deadline().unwrap();
        assert_eq!(deadline, t0 + STALL_TIMEOUT_DEFAULT);
        // An answer moves the deadline on.
        let t1 = Time::from_secs_f64(20.0);
        e.on_data(t1, 0, NodeId(0));
        assert_eq!(e.stall_deadline(), Some(t1 + STALL_TIMEOUT_DEFAULT));
        assert!(e.check_stalls(t1 + Duration::from_secs(29)).is_empty());
        assert_eq!(e.check_stalls(t1 + STALL_TIMEOUT_DEFAULT), vec![NodeId(0)]);
        let again: Vec<Dispatch> = std::iter::from_fn(|| e.poll_send(t1).unwrap()).collect();
        assert_eq!(
            again,
            vec![
                Dispatch {
                    piece: 1,
                    node: NodeId(1)
                },
                Dispatch {
                    piece: 2,
                    node: NodeId(1)
                }
            ]
        );
        assert_eq!(e.stall_deadline(), Some(t1 + STALL_TIMEOUT_DEFAULT));
        e.assert_invariants();
    }

    #[test]
    fn windows_are_bounded() {
        let shape = Shape::uniform(2, 4096, 4096).unwrap();
        let layout = Layout::chained(2, 2).unwrap();
        let pieces = shape
            .pieces(Partition {
                offset: 0,
                len: 4096,
            })
            .unwrap();
        let config = ReadConfig {
            window: 0,
            ..ReadConfig::default()
        };
        let err = ReadEngine::new(ReadPolicyKind::Gd.build(), &layout, pieces.clone(), config);
        assert_eq!(err.unwrap_err(), RouteError::Window(0));
        let config = ReadConfig {
            stall_timeout: Duration::ZERO,
            ..ReadConfig::default()
        };
        let err = ReadEngine::new(ReadPolicyKind::Gd.build(), &layout, pieces, config);
        assert_eq!(err.unwrap_err(), RouteError::StallTimeout);
    }
}
