//! DQ-1, the distributed queue's producer side (river §2.3, §3.1, §6.1).
//!
//! A producer puts blocks; each goes to exactly one consumer. Two ideas make it adapt with
//! no performance assumption: *randomness* when choosing among consumers, and *feedback*
//! through flow control. A producer may have at most `total_credits` blocks unanswered, and
//! at most `per_consumer` at any one consumer; it sends the next block to a consumer chosen
//! at random among those with a credit left, and a consumer's reply returns the credit. A
//! slow consumer answers slowly, keeps its credits, and so receives less: when consumers are
//! the bottleneck each reply "pulls" the next block to the consumer that sent it, and when
//! producers are, the choice degenerates to a random push (river §3.2).
//!
//! River §6.1 (Figure 11) shows why a producer needs at least one credit per consumer: with
//! fewer, it cannot keep a block outstanding at every slow consumer, forgets which ones are
//! slow, and keeps sending to them. The default gives one per consumer; fewer is allowed,
//! for exactly that experiment.
//!
//! The consumer side, DQ-2 (river §6.3), serves the producer furthest behind first: that is
//! the furthest-behind scheduler of [`crate::sched`] with each producer as a stream and its
//! blocks put so far as its progress. Point-to-point order holds because each producer's
//! blocks to a consumer travel one connection and wait in one per-stream FIFO.

use crate::time::Time;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// A producer's flow-control credits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DqSettings {
    /// Blocks a producer may have unanswered in all.
    pub total_credits: u32,
    /// Blocks a producer may have unanswered at one consumer.
    pub per_consumer: u32,
    /// Slow start (ours): blocks a producer may have unanswered before its first reply,
    /// one more with each reply up to `total_credits`; `None` starts with all of them, as
    /// River does.
    #[serde(default)]
    pub start_credits: Option<u32>,
}

/// The slow start ganges' DQ writers use: two blocks each, the pinned one and one more.
/// With River's whole window at once, 16 writers put 256 blocks on the wire together, and
/// a transport that shares its bandwidth fairly delivers them all together, so every disk
/// waits for the whole burst before it has one block to write (2 to 3 points of the DQ
/// write bench). Each reply then opens one more credit, so
/// the window doubles every block time.
pub const START_CREDITS: u32 = 2;

impl DqSettings {
    /// One credit per consumer, at most one at each (river §6.1's minimum). A consumer still
    /// has a pipeline, one block from every producer; and at the end of a transfer a slow
    /// consumer holds at most one block per producer, which sets how long the others wait
    /// for it (river §6.2's end effect).
    pub fn for_consumers(consumers: u32) -> DqSettings {
        DqSettings { total_credits: consumers.max(1), per_consumer: 1, start_credits: None }
    }

    /// `total` credits spread over `consumers`: as many per consumer as it takes for all of
    /// them to be usable (river's Figure 11 varies only the total).
    pub fn with_total(consumers: u32, total: u32) -> DqSettings {
        DqSettings { total_credits: total, per_consumer: total.div_ceil(consumers.max(1)).max(1), start_credits: None }
    }

    /// The same credits, reached by slow start from `start`.
    pub fn with_slow_start(self, start: u32) -> DqSettings {
        DqSettings { start_credits: Some(start), ..self }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DqError {
    #[error("a distributed queue needs at least one consumer")]
    NoConsumers,
    #[error(
        "dq credits must be at least 1 in total, at each consumer and at the start (got {total}, {per_consumer} and {start})"
    )]
    Credits { total: u32, per_consumer: u32, start: u32 },
    #[error(
        "a dq write puts at least one unit on each of the {consumers} servers, so producer {producer} \
         needs {need} units and has {have}; write more data, smaller blocks or with fewer writers"
    )]
    TooFewUnits { consumers: u32, producer: u32, need: usize, have: usize },
}

/// Whether a producer's unit may be given back by its consumer for another (GD-6 for
/// writes): not a pinned unit (`pinned` units come first), which must land where it was
/// sent, and not a run of DQ-3, which goes whole to one consumer.
pub fn movable(unit: usize, pinned: usize, run_blocks: usize) -> bool {
    run_blocks <= 1 && unit >= pinned
}

/// The consumers producer `producer` of `producers` sends its first units to, one each
/// (its j-th to consumer producer + j * producers), so that every consumer gets at least one
/// unit from someone (a DQ-written log is never empty); an error if it has too few units.
pub fn pins(producer: u32, producers: u32, consumers: u32, units: usize) -> Result<Vec<usize>, DqError> {
    let pins: Vec<usize> = (producer..consumers).step_by(producers.max(1) as usize).map(|n| n as usize).collect();
    if pins.len() > units {
        return Err(DqError::TooFewUnits { consumers, producer, need: pins.len(), have: units });
    }
    Ok(pins)
}

/// One producer's routing state.
#[derive(Debug, Clone)]
pub struct DqRouter {
    s: DqSettings,
    outstanding: Vec<u32>,
    live: Vec<bool>,
    total: u32,
    rng: ChaCha8Rng,
    /// Blocks sent to each consumer.
    sent: Vec<u64>,
    /// Blocks it may have unanswered now: the slow-start window, at most `total_credits`.
    window: u32,
}

impl DqRouter {
    pub fn new(consumers: u32, s: DqSettings, seed: u64) -> Result<DqRouter, DqError> {
        if consumers == 0 {
            return Err(DqError::NoConsumers);
        }
        if s.total_credits == 0 || s.per_consumer == 0 || s.start_credits == Some(0) {
            let start = s.start_credits.unwrap_or(s.total_credits);
            return Err(DqError::Credits { total: s.total_credits, per_consumer: s.per_consumer, start });
        }
        let n = consumers as usize;
        Ok(DqRouter {
            s,
            outstanding: vec![0; n],
            live: vec![true; n],
            total: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            sent: vec![0; n],
            window: s.start_credits.unwrap_or(s.total_credits).clamp(1, s.total_credits),
        })
    }

    /// The consumer the next block goes to, or `None` if the producer must wait for a reply
    /// (no credit left in all, or at any live consumer). The choice is uniform among the
    /// live consumers with a credit left: river's "pick a random consumer; if it has too
    /// many outstanding, pick another".
    pub fn pick(&mut self) -> Option<usize> {
        if self.total >= self.window {
            return None;
        }
        let open = |i: usize, o: &[u32], l: &[bool]| l[i] && o[i] < self.s.per_consumer;
        let n = (0..self.outstanding.len()).filter(|&i| open(i, &self.outstanding, &self.live)).count();
        if n == 0 {
            return None;
        }
        let k = self.rng.random_range(0..n);
        let c = (0..self.outstanding.len()).filter(|&i| open(i, &self.outstanding, &self.live)).nth(k)?;
        self.outstanding[c] += 1;
        self.total += 1;
        self.sent[c] += 1;
        Some(c)
    }

    /// Send the next block to consumer `c`, if it is live and has a credit (and the total
    /// allows): the resend of a block withdrawn by [`steal_at_end`]. True if taken.
    pub fn take(&mut self, c: usize) -> bool {
        if self.total >= self.window || !self.live[c] || self.outstanding[c] >= self.s.per_consumer {
            return false;
        }
        self.outstanding[c] += 1;
        self.total += 1;
        self.sent[c] += 1;
        true
    }

    /// Send the next block to consumer `c` because it asked for it (a block redirected there,
    /// GD-6 for writes): past the credit limits, since the consumer has room by its own word.
    /// False if `c` is gone.
    pub fn take_invited(&mut self, c: usize) -> bool {
        if !self.live.get(c).copied().unwrap_or(false) {
            return false;
        }
        self.outstanding[c] += 1;
        self.total += 1;
        self.sent[c] += 1;
        true
    }

    /// Consumer `c` answered one block: its credit comes back, and in slow start one more.
    pub fn on_reply(&mut self, c: usize) {
        assert!(self.outstanding[c] > 0, "a reply from consumer {c} with nothing outstanding there");
        self.outstanding[c] -= 1;
        self.total -= 1;
        self.window = (self.window + 1).min(self.s.total_credits);
    }

    /// Consumer `c` is gone: no more blocks go there. Its unanswered blocks' credits come
    /// back; the driver must resend those blocks (it knows which they were).
    pub fn on_consumer_down(&mut self, c: usize) {
        self.live[c] = false;
        self.total -= self.outstanding[c];
        self.outstanding[c] = 0;
    }

    /// Whether blocks may still go to consumer `c`.
    pub fn is_live(&self, c: usize) -> bool {
        self.live[c]
    }

    /// Whether any consumer is left.
    pub fn any_live(&self) -> bool {
        self.live.contains(&true)
    }

    pub fn outstanding(&self, c: usize) -> u32 {
        self.outstanding[c]
    }

    pub fn in_flight(&self) -> u32 {
        self.total
    }

    /// Blocks sent to each consumer so far.
    pub fn sent(&self) -> &[u64] {
        &self.sent
    }

    pub fn settings(&self) -> DqSettings {
        self.s
    }
}

/// One of a producer's blocks still unanswered: at which consumer, and when it should be
/// written there (`Load::due`, estimated when it was sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unanswered {
    pub block: usize,
    pub consumer: usize,
    pub due: Time,
}

/// What a consumer last said of itself in a reply: blocks queued there, and the time its
/// disk takes per block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    pub queued: u32,
    pub block_secs: f64,
}

/// What a producer knows of each consumer's load, from the replies it got: the estimates
/// [`steal_at_end`] judges by.
#[derive(Debug, Clone, Default)]
pub struct Loads {
    per: Vec<Option<Load>>,
}

impl Loads {
    pub fn new(consumers: u32) -> Loads {
        Loads { per: vec![None; consumers as usize] }
    }

    /// Consumer `c` answered: `queued` blocks left there, `secs` on the disk for this one
    /// (smoothed, a quarter new).
    pub fn on_reply(&mut self, c: usize, queued: u32, secs: f64) {
        let block_secs = self.per[c].map_or(secs, |o| (3.0 * o.block_secs + secs) / 4.0);
        self.per[c] = Some(Load { queued, block_secs });
    }

    /// A block is sent to `c` at `now`: when it should be written there. It queues behind
    /// what was there.
    pub fn on_send(&mut self, c: usize, now: Time) -> Time {
        let due = self.per[c].map_or(now, |l| l.due(now));
        if let Some(l) = &mut self.per[c] {
            l.queued += 1;
        }
        due
    }

    /// A block was withdrawn from `c`: one less there until it says otherwise.
    pub fn on_withdraw(&mut self, c: usize) {
        if let Some(l) = &mut self.per[c] {
            l.queued = l.queued.saturating_sub(1);
        }
    }

    pub fn get(&self) -> &[Option<Load>] {
        &self.per
    }
}

impl Load {
    /// How long the consumer needs to drain what it holds.
    fn drain_secs(&self) -> f64 {
        self.queued as f64 * self.block_secs
    }

    /// When a block sent `at` should be written, behind what the consumer holds.
    pub fn due(&self, at: Time) -> Time {
        at + std::time::Duration::from_secs_f64(self.drain_secs() + self.block_secs)
    }
}

/// How much slower per block a consumer must be than an idle one for the end steal to take
/// a block from it. Between equal disks the distributed queue balances by itself (measured in
/// `ganges bench write`: 63 to 66 blocks each of 64 with no steals), and withdrawing blocks
/// there only costs cancels.
pub const SLOWER: f64 = 1.25;

/// River §6.2's end effect, and our answer to it. A producer that has put its last block
/// still waits for the ones queued at busy consumers: each holds up to one block per
/// producer (its credit), and a slow disk takes longer to drain that queue. So when consumer
/// `idle` answers a producer that has nothing new to put, the producer may withdraw one of
/// its own blocks queued at a slower consumer (`SLOWER`) and give it to `idle`: the one due
/// last, if it is due later than `idle` would write it with one block to spare. Each
/// producer judges only its own blocks, by when each was sent and what its consumer said
/// then, so producers do not all pile onto one estimate. The driver cancels the block first
/// and resends it only once the server confirms it never ran, so no block is ever written
/// twice. `loads` is indexed by consumer. Returns the block to withdraw.
pub fn steal_at_end(unanswered: &[Unanswered], idle: usize, loads: &[Option<Load>], now: Time) -> Option<Unanswered> {
    let here = loads.get(idle).copied().flatten()?;
    let spare = std::time::Duration::from_secs_f64(here.block_secs);
    let there = here.due(now) + spare;
    unanswered
        .iter()
        .filter(|u| u.consumer != idle && u.due > there)
        .filter(|u| loads.get(u.consumer).copied().flatten().is_some_and(|l| l.block_secs > SLOWER * here.block_secs))
        .max_by_key(|u| (u.due, u.block))
        .copied()
}

/// Where one of a producer's units is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitAt {
    /// Not sent yet, or to be sent again.
    Waiting,
    /// Sent to a consumer, unanswered.
    Sent(usize),
    /// Taken by a consumer (it answered).
    Landed(usize),
}

/// Where each of a producer's units is. A distributed queue keeps one copy of each unit, so
/// a consumer that dies takes what landed there with it: [`Ledger::lose`] puts those units
/// back to be sent again, with those still unanswered there. A late answer from a lost
/// consumer changes nothing ([`Ledger::landed`] is false). The client's DQ writers and the
/// simulator's producers keep theirs in one of these.
#[derive(Clone, Debug)]
pub struct Ledger {
    at: Vec<UnitAt>,
    landed: usize,
}

impl Ledger {
    pub fn new(units: usize) -> Ledger {
        Ledger { at: vec![UnitAt::Waiting; units], landed: 0 }
    }

    pub fn at(&self, unit: usize) -> UnitAt {
        self.at[unit]
    }

    /// One more unit, waiting (a stream's producer learns its units as they are made).
    pub fn push(&mut self) -> usize {
        self.at.push(UnitAt::Waiting);
        self.at.len() - 1
    }

    /// `unit` went to consumer `c`.
    pub fn sent(&mut self, unit: usize, c: usize) {
        assert_eq!(self.at[unit], UnitAt::Waiting, "unit {unit} sent twice");
        self.at[unit] = UnitAt::Sent(c);
    }

    /// Consumer `c` answered for `unit`: true if that settles it, false for an answer from a
    /// consumer the unit is no longer at (lost meanwhile).
    pub fn landed(&mut self, unit: usize, c: usize) -> bool {
        if self.at[unit] != UnitAt::Sent(c) {
            return false;
        }
        self.at[unit] = UnitAt::Landed(c);
        self.landed += 1;
        true
    }

    /// `unit` came back unwritten from `c` (withdrawn or given back): to send again. False
    /// if it was no longer there.
    pub fn returned(&mut self, unit: usize, c: usize) -> bool {
        if self.at[unit] != UnitAt::Sent(c) {
            return false;
        }
        self.at[unit] = UnitAt::Waiting;
        true
    }

    /// Consumer `c` is gone with all it held: the units that were there, sent or landed,
    /// are waiting again. Returns them, in order.
    pub fn lose(&mut self, c: usize) -> Vec<usize> {
        let mut back = vec![];
        for (u, at) in self.at.iter_mut().enumerate() {
            match *at {
                UnitAt::Landed(x) if x == c => self.landed -= 1,
                UnitAt::Sent(x) if x == c => {}
                _ => continue,
            }
            *at = UnitAt::Waiting;
            back.push(u);
        }
        back
    }

    /// Every unit landed.
    pub fn is_done(&self) -> bool {
        self.landed == self.at.len()
    }

    /// Whether some unit landed at or was sent to `c`.
    pub fn holds_at(&self, c: usize) -> bool {
        self.at.iter().any(|a| matches!(*a, UnitAt::Sent(x) | UnitAt::Landed(x) if x == c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_consumer_gives_back_what_landed_and_what_was_in_flight_there() {
        let mut l = Ledger::new(5);
        for (u, c) in [(0, 1), (1, 2), (2, 1), (3, 0)] {
            l.sent(u, c);
        }
        assert!(l.landed(0, 1) && l.landed(1, 2));
        assert!(l.returned(3, 0));
        assert!(!l.returned(3, 0), "already back");
        assert_eq!(l.lose(1), vec![0, 2]);
        assert!(!l.landed(2, 1), "a late answer from a lost consumer is ignored");
        assert_eq!((l.at(0), l.at(1), l.at(2)), (UnitAt::Waiting, UnitAt::Landed(2), UnitAt::Waiting));
        assert!(!l.holds_at(1) && l.holds_at(2) && !l.is_done());
        for (u, c) in [(0, 0), (2, 2), (3, 2), (4, 0)] {
            l.sent(u, c);
            assert!(l.landed(u, c));
        }
        assert!(l.is_done());
    }

    #[test]
    fn credits_bound_what_is_in_flight_in_all_and_per_consumer() {
        let mut r = DqRouter::new(4, DqSettings { total_credits: 6, per_consumer: 2, start_credits: None }, 1).unwrap();
        let picks: Vec<usize> = (0..6).map(|_| r.pick().unwrap()).collect();
        assert_eq!(r.pick(), None, "the total is spent");
        for c in 0..4 {
            assert!(r.outstanding(c) <= 2);
        }
        assert_eq!(r.in_flight(), 6);
        r.on_reply(picks[0]);
        assert_eq!(r.in_flight(), 5);
        assert!(r.pick().is_some(), "a reply frees a credit");
        assert_eq!(r.pick(), None, "exactly one");
    }

    #[test]
    fn slow_start_opens_one_credit_per_reply_up_to_the_total() {
        let mut r = DqRouter::new(8, DqSettings::for_consumers(8).with_slow_start(2), 1).unwrap();
        let first: Vec<usize> = (0..2).map(|_| r.pick().unwrap()).collect();
        assert_eq!(r.pick(), None, "two before any reply");
        assert!(!r.take((0..8).find(|c| !first.contains(c)).unwrap()), "take keeps to the window too");
        r.on_reply(first[0]);
        assert_eq!(r.in_flight(), 1);
        assert!(r.pick().is_some() && r.pick().is_some(), "a reply frees its credit and opens one more");
        assert_eq!(r.pick(), None);
        let mut in_flight = 3;
        for _ in 0..20 {
            let c = (0..8).find(|&c| r.outstanding(c) > 0).unwrap();
            r.on_reply(c);
            in_flight -= 1;
            while r.pick().is_some() {
                in_flight += 1;
            }
        }
        assert_eq!(in_flight, 8, "the window grows to the total and no further");
        assert_eq!(r.in_flight(), 8);
        assert!(DqRouter::new(8, DqSettings::for_consumers(8).with_slow_start(0), 1).is_err());
        let big = DqRouter::new(4, DqSettings::for_consumers(4).with_slow_start(99), 1).unwrap();
        assert_eq!(big.window, 4, "a start above the total is the total");
    }

    #[test]
    fn a_consumer_that_never_answers_gets_no_more_than_its_credits() {
        let mut r = DqRouter::new(4, DqSettings::for_consumers(4), 7).unwrap();
        // Consumers 1..3 answer at once; consumer 0 never does.
        for _ in 0..1000 {
            let c = r.pick().expect("three consumers always have room");
            if c != 0 {
                r.on_reply(c);
            }
        }
        assert_eq!(r.sent()[0], 1, "only its one credit's worth");
        assert!(r.sent()[1..].iter().all(|&s| s > 300), "the rest is spread evenly: {:?}", r.sent());
    }

    #[test]
    fn the_choice_is_random_but_seeded() {
        let run = |seed| {
            let mut r = DqRouter::new(8, DqSettings::for_consumers(8), seed).unwrap();
            (0..100)
                .map(|_| {
                    let c = r.pick().unwrap();
                    r.on_reply(c);
                    c
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        let counts = run(3).iter().fold([0u32; 8], |mut a, &c| {
            a[c] += 1;
            a
        });
        assert!(counts.iter().all(|&n| n > 3), "every consumer gets some: {counts:?}");
    }

    #[test]
    fn a_dead_consumer_returns_its_credits_and_gets_nothing_more() {
        let mut r = DqRouter::new(2, DqSettings::with_total(2, 4), 1).unwrap();
        while r.pick().is_some() {}
        assert_eq!(r.in_flight(), 4);
        r.on_consumer_down(0);
        assert_eq!(r.in_flight(), 2);
        assert_eq!(r.pick(), None, "consumer 1 is full and 0 is gone");
        r.on_reply(1);
        assert_eq!(r.pick(), Some(1));
    }

    #[test]
    fn take_respects_credits_and_dead_consumers() {
        let mut r = DqRouter::new(3, DqSettings::for_consumers(3), 1).unwrap();
        assert!(r.take(2));
        assert!(!r.take(2), "one credit at consumer 2");
        r.on_consumer_down(1);
        assert!(!r.take(1), "a dead consumer takes nothing");
        assert!(r.take(0));
        assert_eq!(r.in_flight(), 2);
        assert_eq!(r.sent(), &[1, 0, 1]);
        assert!(r.take_invited(2), "an invited block goes past the credit");
        assert_eq!(r.outstanding(2), 2);
        assert!(!r.take_invited(1), "a dead consumer is never invited");
        assert!(!r.take_invited(9), "nor an unknown one");
        r.on_reply(2);
        r.on_reply(2);
        assert!(r.take(2), "the credits came back");
    }

    #[test]
    fn the_end_steal_moves_a_block_due_late_at_a_slower_consumer_to_an_idle_one() {
        let t = |ms: u64| Time(ms * 1_000_000);
        let u = |block, consumer, due| Unanswered { block, consumer, due: t(due) };
        let load = |queued, block_secs| Some(Load { queued, block_secs });
        // Consumer 0 is a slow disk (60 ms a block), 1 and 2 fast (30 ms).
        let loads = [load(6, 0.06), load(3, 0.03), load(0, 0.03)];
        let waiting = [u(7, 0, 300), u(8, 0, 420), u(3, 1, 200), u(9, 2, 130)];
        // At 100 ms, idle 2 would write one more block by 130 ms (+30 spare): block 8 at 0,
        // due at 420, goes; block 3 is due late too, but at a disk as fast as 2's.
        assert_eq!(steal_at_end(&waiting, 2, &loads, t(100)), Some(waiting[1]));
        // A block due soon enough stays.
        assert_eq!(steal_at_end(&waiting[..1], 2, &loads, t(260)), None);
        // An idle consumer with a long queue of its own takes nothing.
        let busy = [load(6, 0.06), load(3, 0.03), load(12, 0.03)];
        assert_eq!(steal_at_end(&waiting, 2, &busy, t(100)), None);
        // Consumers never heard from are not guessed at.
        assert_eq!(steal_at_end(&waiting, 2, &[None, None, load(0, 0.03)], t(100)), None);
        assert_eq!(steal_at_end(&[], 0, &[load(0, 0.01)], t(0)), None);
    }

    #[test]
    fn pins_cover_every_consumer_once_between_the_producers() {
        let all: Vec<usize> = (0..3).flat_map(|p| pins(p, 3, 8, 5).unwrap()).collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
        assert_eq!(pins(1, 3, 8, 5).unwrap(), vec![1, 4, 7]);
        assert_eq!(pins(5, 8, 4, 0).unwrap(), Vec::<usize>::new(), "more producers than consumers");
        assert!(matches!(pins(0, 2, 8, 3), Err(DqError::TooFewUnits { need: 4, have: 3, .. })));
        assert!(!movable(2, 3, 1), "a pinned unit stays");
        assert!(movable(3, 3, 1));
        assert!(!movable(3, 3, 4), "a run stays");
    }

    #[test]
    fn loads_learn_from_replies_and_count_what_was_sent() {
        let mut l = Loads::new(2);
        assert_eq!(l.on_send(0, Time(5)), Time(5), "never heard from: due now");
        l.on_reply(0, 2, 0.04);
        l.on_reply(0, 2, 0.08);
        let got = l.get()[0].unwrap();
        assert!((got.block_secs - 0.05).abs() < 1e-12, "{got:?}");
        // Two queued and this one: due after three blocks.
        assert_eq!(l.on_send(0, Time::ZERO), Time::from_secs_f64(0.15));
        assert_eq!(l.get()[0].unwrap().queued, 3);
        l.on_withdraw(0);
        l.on_withdraw(1);
        assert_eq!(l.get()[0].unwrap().queued, 2);
        assert_eq!(l.get()[1], None);
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(DqRouter::new(0, DqSettings::for_consumers(1), 1).unwrap_err(), DqError::NoConsumers);
        assert!(DqRouter::new(2, DqSettings { total_credits: 0, per_consumer: 1, start_credits: None }, 1).is_err());
        assert_eq!(
            DqSettings::with_total(16, 4),
            DqSettings { total_credits: 4, per_consumer: 1, start_credits: None }
        );
        assert_eq!(
            DqSettings::with_total(16, 32),
            DqSettings { total_credits: 32, per_consumer: 2, start_credits: None }
        );
    }
}
