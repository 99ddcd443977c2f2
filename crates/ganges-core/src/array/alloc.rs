//! Which I/O node writes each subchunk (panda §3.2): round-robin (AR-5, the baseline), static
//! allocation by measured speed (AR-3) and dynamic allocation by a manager (AR-4).

use super::Region;
use crate::parse::ParseError;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// The allocations ganges offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocKind {
    /// Subchunk `i` to server `i mod S`: as fast as the slowest server.
    RoundRobin,
    /// Planned at the start of each call from the servers' measured write rates.
    Static,
    /// Handed out in rounds by a manager as servers ask for work.
    Dynamic,
    /// Ours: planned as `Static`, then a server that runs out takes a share of the unstarted
    /// subchunks of another (server-to-server stealing): dynamic, with no manager.
    Steal,
}

impl AllocKind {
    pub const ALL: [AllocKind; 4] = [AllocKind::RoundRobin, AllocKind::Static, AllocKind::Dynamic, AllocKind::Steal];

    pub fn name(self) -> &'static str {
        match self {
            AllocKind::RoundRobin => "round-robin",
            AllocKind::Static => "static",
            AllocKind::Dynamic => "dynamic",
            AllocKind::Steal => "steal",
        }
    }
}

impl FromStr for AllocKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<AllocKind, ParseError> {
        AllocKind::ALL
            .into_iter()
            .find(|a| a.name() == s || (s == "rr" && *a == AllocKind::RoundRobin))
            .ok_or_else(|| ParseError::unknown("allocation", s, AllocKind::ALL.map(AllocKind::name)))
    }
}

impl fmt::Display for AllocKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// AR-5: subchunk `i` to server `i mod servers`.
pub fn round_robin(subchunks: usize, servers: u32) -> Vec<u32> {
    (0..subchunks).map(|i| (i % servers as usize) as u32).collect()
}

/// AR-3: each subchunk, in order, to the server that would finish writing it earliest at
/// its rate (bytes per second; a rate that is not positive counts as the slowest given).
/// Ties go to the lower server, so the plan is the same wherever it is computed.
///
/// Ours, for part-time I/O nodes: `homes[i]`, where given, is the server running in the
/// process that holds subchunk `i` (see [`subchunk_homes`]). Before anything else, each
/// server takes the subchunks homed on it, in order, while that leaves it under its share of
/// the bytes by rate or over by less than half the subchunk; the rest then go by earliest
/// finish, as above. The makespan stays within one subchunk of the best, as the paper's
/// rule's does, and what can stay in its process does. With no homes this is the paper's
/// allocation exactly.
pub fn static_alloc(sizes: &[u64], rates: &[f64], homes: &[Option<u32>]) -> Vec<u32> {
    let rates = usable(rates);
    let total: u64 = sizes.iter().sum();
    let sum: f64 = rates.iter().sum();
    let quota: Vec<f64> = rates.iter().map(|r| total as f64 * r / sum).collect();
    let mut held = vec![0u64; rates.len()];
    let mut plan: Vec<Option<u32>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &bytes)| {
            let h = homes.get(i).copied().flatten().filter(|&h| (h as usize) < rates.len())? as usize;
            ((held[h] as f64 + bytes as f64 / 2.0) <= quota[h]).then(|| {
                held[h] += bytes;
                h as u32
            })
        })
        .collect();
    let mut busy_until: Vec<f64> = held.iter().zip(&rates).map(|(&b, r)| b as f64 / r).collect();
    for (slot, &bytes) in plan.iter_mut().zip(sizes).filter(|(slot, _)| slot.is_none()) {
        let finish = |s: usize| busy_until[s] + bytes as f64 / rates[s];
        let best = (0..rates.len()).min_by(|&a, &b| finish(a).total_cmp(&finish(b))).expect("at least one server");
        busy_until[best] = finish(best);
        *slot = Some(best as u32);
    }
    plan.into_iter().map(|s| s.expect("every subchunk placed")).collect()
}

/// Ours, for part-time I/O nodes: the home of each subchunk, the server running in the
/// process that holds most of its elements, given each process's chunk and the server in
/// its process (`rank_home[r]`, `None` for a process that serves nothing).
pub fn subchunk_homes(boxes: &[Region], chunks: &[Region], rank_home: &[Option<u32>]) -> Vec<Option<u32>> {
    if rank_home.iter().all(Option::is_none) {
        return vec![None; boxes.len()];
    }
    boxes
        .iter()
        .map(|b| {
            let mut held: Vec<(u32, u64)> = vec![];
            for (c, &home) in chunks.iter().zip(rank_home) {
                let Some(h) = home else { continue };
                let n = c.intersect(b).elements();
                match held.iter_mut().find(|(k, _)| *k == h) {
                    Some((_, m)) => *m += n,
                    None => held.push((h, n)),
                }
            }
            // Most elements wins; a tie goes to the lower server, the same everywhere.
            held.into_iter().filter(|&(_, n)| n > 0).max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))).map(|(h, _)| h)
        })
        .collect()
}

/// Rates with every unusable one (not positive, not finite) replaced by the slowest usable
/// one, or all 1 when none is usable.
fn usable(rates: &[f64]) -> Vec<f64> {
    let ok = |r: f64| r.is_finite() && r > 0.0;
    let floor = rates.iter().copied().filter(|&r| ok(r)).fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 1.0 };
    rates.iter().map(|&r| if ok(r) { r } else { floor }).collect()
}

/// AR-4, the manager of dynamic allocation. Servers ask for work when they run out; each
/// answer is a run of the next unassigned subchunks. While more than half of the bytes are
/// unassigned, a round hands out up to `per_round` subchunks per server; when between `1/m`
/// and `1/(m+1)` remain, `max(1, per_round / m)` per server. A server's `k`-th ask is its part
/// of round `k`, whose size is fixed by what was unassigned when the first server asked for
/// round `k`. A round's subchunks are shared in proportion to the servers' latest rates, so a
/// slow server asks as often as a fast one but takes less each time. (Ours: no grant exceeds
/// the asker's proportional share of what is unassigned, so that on an array of few
/// subchunks the first server to ask does not take them all; and no round hands out more
/// than half of the subchunks left, so that on many servers a server turned slow since the
/// last call's rates does not get a twentieth of the array at once. In the paper's worked
/// example neither binds.)
///
/// Ours, for part-time I/O nodes ([`Dynamic::with_homes`]): a server's batch comes first from
/// the subchunks homed on it, then from those with no home, then from the end of the longest
/// queue of another server's own. How many it gets is the paper's rule either way. With no
/// homes every batch is the next run of subchunks, as in the paper.
#[derive(Clone, Debug)]
pub struct Dynamic {
    sizes: Vec<u64>,
    /// Unassigned subchunks homed on each server, in order.
    homed: Vec<VecDeque<u32>>,
    /// Unassigned subchunks with no home, in order.
    rest: VecDeque<u32>,
    total: u64,
    unassigned: u64,
    per_round: u32,
    rates: Vec<f64>,
    /// Subchunks granted to each server so far.
    granted: Vec<u64>,
    /// How many times each server has asked: the round its next ask belongs to.
    asks: Vec<usize>,
    /// Subchunks per server of each round begun so far.
    rounds: Vec<u32>,
}

/// The paper's `N`: subchunks per server per round while more than half remains.
pub const DYNAMIC_PER_ROUND: u32 = 20;

/// Ours, under dynamic allocation and stealing: the subchunks a server holds taken and not yet
/// written; it takes more only below this. Work taken early is work a faster server cannot
/// take at the end; two keep the disk busy while the next is gathered.
pub const HELD_AHEAD: u64 = 2;

impl Dynamic {
    pub fn new(sizes: Vec<u64>, rates: &[f64], per_round: u32) -> Dynamic {
        Dynamic::with_homes(sizes, rates, per_round, &[])
    }

    /// As [`Dynamic::new`], `homes[i]` being the server in the process that holds subchunk
    /// `i`, where there is one ([`subchunk_homes`]).
    pub fn with_homes(sizes: Vec<u64>, rates: &[f64], per_round: u32, homes: &[Option<u32>]) -> Dynamic {
        let total = sizes.iter().sum();
        let mut homed = vec![VecDeque::new(); rates.len()];
        let mut rest = VecDeque::new();
        for i in 0..sizes.len() {
            match homes.get(i).copied().flatten().filter(|&h| (h as usize) < rates.len()) {
                Some(h) => homed[h as usize].push_back(i as u32),
                None => rest.push_back(i as u32),
            }
        }
        Dynamic {
            sizes,
            homed,
            rest,
            total,
            unassigned: total,
            per_round: per_round.max(1),
            rates: usable(rates),
            granted: vec![0; rates.len()],
            asks: vec![0; rates.len()],
            rounds: vec![],
        }
    }

    /// Server `server` asks for work, reporting the rate it measured on its last batch (if
    /// any). Returns the subchunks it is to write; empty when none are left.
    pub fn grant(&mut self, server: u32, rate: Option<f64>) -> Vec<u32> {
        let s = server as usize;
        if let Some(r) = rate.filter(|r| r.is_finite() && *r > 0.0) {
            self.rates[s] = r;
        }
        let left = self.left();
        if left == 0 {
            return vec![];
        }
        let round = self.asks[s];
        self.asks[s] += 1;
        if round == self.rounds.len() {
            let per_server = if 2 * self.unassigned > self.total {
                self.per_round
            } else {
                let m = (self.total / self.unassigned.max(1)).max(1);
                ((self.per_round as u64 / m).max(1)) as u32
            };
            // Ours: a round hands out at most half of what is left, so that on many servers
            // the first round is not most of the array, given out on the last call's rates.
            let half = (left / (2 * self.rates.len())).max(1) as u32;
            self.rounds.push(per_server.min(half));
        }
        let round = self.rounds[round] as f64 * self.rates.len() as f64;
        let sum: f64 = self.rates.iter().sum();
        let share = (round * self.rates[s] / sum).floor();
        let fair = (left as f64 * self.rates[s] / sum).ceil();
        let share = share.min(fair).max(1.0) as usize;
        let n = share.min(left);
        let batch: Vec<u32> = (0..n).map(|_| self.take(s)).collect();
        self.unassigned -= batch.iter().map(|&i| self.sizes[i as usize]).sum::<u64>();
        self.granted[s] += n as u64;
        batch
    }

    /// The next subchunk for server `s`: its own, else a homeless one, else the last of the
    /// longest queue of another's own (the lower server on ties).
    fn take(&mut self, s: usize) -> u32 {
        if let Some(i) = self.homed[s].pop_front().or_else(|| self.rest.pop_front()) {
            return i;
        }
        let longest = (0..self.homed.len()).rev().max_by_key(|&k| self.homed[k].len()).expect("at least one server");
        self.homed[longest].pop_back().expect("a subchunk is left")
    }

    /// Subchunks not handed out yet.
    fn left(&self) -> usize {
        self.rest.len() + self.homed.iter().map(VecDeque::len).sum::<usize>()
    }

    /// Whether every subchunk has been handed out.
    pub fn is_done(&self) -> bool {
        self.left() == 0
    }

    pub fn granted(&self) -> &[u64] {
        &self.granted
    }
}

/// Ours, the thief's side of [`AllocKind::Steal`]: whom a server that ran out of subchunks
/// asks next. It goes round the other servers from the one after it, asks again the last one
/// that gave, and is done once every other server in a row had nothing to give (a server's
/// unstarted subchunks only shrink, except by stealing, so a full round of nothing means none
/// are left anywhere).
#[derive(Clone, Debug)]
pub struct Thief {
    me: u32,
    servers: u32,
    next: u32,
    dry: u32,
}

impl Thief {
    pub fn new(me: u32, servers: u32) -> Thief {
        Thief { me, servers: servers.max(1), next: (me + 1) % servers.max(1), dry: 0 }
    }

    /// The server to ask next; `None` once none has anything left.
    pub fn victim(&self) -> Option<u32> {
        (self.servers > 1 && self.dry < self.servers - 1).then_some(self.next)
    }

    /// The victim's answer: `got` subchunks.
    pub fn on_reply(&mut self, got: usize) {
        if got > 0 {
            self.dry = 0;
            return;
        }
        self.dry += 1;
        self.next = (self.next + 1) % self.servers;
        if self.next == self.me {
            self.next = (self.next + 1) % self.servers;
        }
    }

    /// How many of its `queued` unstarted subchunks a victim writing at `rate_victim` gives a
    /// thief writing at `rate_thief`: the share that makes both finish together (GD-6's
    /// handoff rule), the victim keeping at least one.
    pub fn share(queued: usize, rate_thief: f64, rate_victim: f64) -> usize {
        crate::handoff::share_at_least(1, queued, rate_thief, rate_victim)
    }
}
