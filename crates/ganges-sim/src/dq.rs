//! Distributed-queue transfers in virtual time (river §2.3, §3.1, §5.1, §6.1, §6.3).
//!
//! Producers generate blocks at their rate and put each one into the queue: `ganges-core`'s
//! [`DqRouter`] picks the consumer by credits and chance (DQ-1), or, for the static transfer,
//! producer i always sends to consumer i. Each consumer holds what arrived in a scheduler:
//! furthest behind by the producer's progress (DQ-2, river §6.3) or arrival order; it takes
//! one block at a time at its own rate, and its reply returns the producer's credit. A
//! producer generates its next block while it has none waiting, so a producer short of
//! credits stops producing, as River's `Put` blocks.

use crate::event::Events;
use crate::net::{HEADER_BYTES, NetParams, Network};
use crate::scan::SimError;
use ganges_core::dq::{DqRouter, DqSettings, Ledger, UnitAt};
use ganges_core::sched::{Job, JobId, Progress, ProgressMetric, Scheduler, SchedulerKind, Service, StreamKey};
use ganges_core::time::Time;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

/// How producers choose consumers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DqMode {
    /// DQ-1: any consumer with a credit left, at random.
    Dq,
    /// The static transfer: producer i sends to consumer i mod C only.
    Static,
}

#[derive(Clone, Debug)]
pub struct DqSpec {
    pub producers: u32,
    pub consumers: u32,
    /// Bytes per second each producer generates.
    pub producer_rate: f64,
    /// Bytes per second each consumer takes (faults already applied).
    pub consumer_rates: Vec<f64>,
    pub blocks_per_producer: u64,
    pub block_bytes: u64,
    pub credits: DqSettings,
    pub mode: DqMode,
    /// DQ-2 (furthest behind, the default) or arrival order at the consumers.
    pub consumer_scheduler: SchedulerKind,
    pub net: NetParams,
    pub time_limit: Duration,
    pub seed: u64,
    /// Consumers that die, and when (DQ only): each takes the blocks it held with it (one
    /// copy), and the producers put them again to the others, as ganges' DQ writes do.
    pub crashes: Vec<(Duration, usize)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DqOutcome {
    /// Until the last consumer took the last block.
    pub seconds: f64,
    /// When each producer's last block was taken by a consumer.
    pub producer_seconds: Vec<f64>,
    /// Bytes each consumer holds at the end (none for those that died).
    pub consumer_bytes: Vec<u64>,
    /// Blocks put again because the consumer holding them died.
    pub resent: u64,
    pub events: u64,
}

#[derive(Debug)]
enum Ev {
    /// Producer p finished generating a block.
    Generated(usize),
    /// Block `block` of producer p reached consumer c.
    Arrive { c: usize, p: usize, block: usize, progress: Progress },
    /// Consumer c finished taking its current block.
    Taken(usize),
    /// Consumer c's reply for `block` reached producer p.
    Reply { p: usize, c: usize, block: usize },
    /// Consumer c dies.
    Crash(usize),
    /// Producer p finds consumer c gone (its connection closed).
    Lost { p: usize, c: usize },
}

#[derive(Debug)]
struct Producer {
    router: Option<DqRouter>,
    /// Static mode: blocks unanswered at the one consumer.
    outstanding: u32,
    /// Where each block is (the unit of the queue here is a block).
    ledger: Ledger,
    generated: u64,
    /// Blocks a dead consumer held, to put again (generated already).
    resend: VecDeque<usize>,
    /// A generated block waiting for a credit.
    waiting: bool,
    generating: bool,
    last_taken: Option<Time>,
}

#[derive(Debug)]
struct Consumer {
    sched: Box<dyn Scheduler>,
    /// The producer and block of each queued job.
    from: BTreeMap<JobId, (usize, usize)>,
    busy: Option<(usize, usize)>,
    next_job: JobId,
    bytes: u64,
    rate: f64,
    dead: bool,
}

struct Sim<'a> {
    spec: &'a DqSpec,
    ev: Events<Ev>,
    net: Network,
    producers: Vec<Producer>,
    consumers: Vec<Consumer>,
    /// Which live consumer holds each (producer, block) taken: checked after every event
    /// that no block is held twice, nor sent while held.
    held: HashMap<(usize, usize), usize>,
    resent: u64,
    /// When a live consumer last took a block.
    last_taken: Time,
}

/// Run one simulated transfer.
pub fn run_dq(spec: &DqSpec) -> Result<DqOutcome, SimError> {
    let invalid = |s: String| SimError::Invalid(s);
    if spec.producers == 0 || spec.consumers == 0 {
        return Err(invalid("a transfer needs producers and consumers".into()));
    }
    if spec.consumer_rates.len() != spec.consumers as usize {
        return Err(invalid(format!("{} consumer rates for {} consumers", spec.consumer_rates.len(), spec.consumers)));
    }
    if spec.producer_rate <= 0.0 || spec.consumer_rates.iter().any(|r| *r <= 0.0) || spec.block_bytes == 0 {
        return Err(invalid("rates and the block size must be positive".into()));
    }
    if !spec.crashes.is_empty() && spec.mode == DqMode::Static {
        return Err(invalid("a static transfer cannot go on without a consumer".into()));
    }
    if spec.crashes.iter().any(|(_, c)| *c >= spec.consumers as usize) {
        return Err(invalid("a crash names a consumer that does not exist".into()));
    }
    let mut producers = Vec::with_capacity(spec.producers as usize);
    for p in 0..spec.producers {
        let router = match spec.mode {
            DqMode::Dq => Some(
                DqRouter::new(spec.consumers, spec.credits, spec.seed ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                    .map_err(|e| invalid(e.to_string()))?,
            ),
            DqMode::Static => None,
        };
        producers.push(Producer {
            router,
            outstanding: 0,
            ledger: Ledger::new(spec.blocks_per_producer as usize),
            generated: 0,
            resend: VecDeque::new(),
            waiting: false,
            generating: false,
            last_taken: None,
        });
    }
    let consumers = spec
        .consumer_rates
        .iter()
        .map(|&rate| Consumer {
            sched: spec.consumer_scheduler.build(),
            from: Default::default(),
            busy: None,
            next_job: 1,
            bytes: 0,
            rate,
            dead: false,
        })
        .collect();
    let endpoints = (spec.producers + spec.consumers) as usize;
    let mut sim = Sim {
        spec,
        ev: Events::default(),
        net: Network::new(endpoints, spec.net),
        producers,
        consumers,
        held: HashMap::new(),
        resent: 0,
        last_taken: Time::ZERO,
    };
    for &(at, c) in &spec.crashes {
        sim.ev.at(Time::ZERO + at, Ev::Crash(c));
    }
    for p in 0..sim.producers.len() {
        sim.generate(p);
    }
    let limit = Time::ZERO + spec.time_limit;
    loop {
        if sim.producers.iter().all(|p| p.ledger.is_done()) && !sim.end_check()? {
            break;
        }
        let Some((now, e)) = sim.ev.pop() else {
            let left = sim.producers.iter().filter(|p| !p.ledger.is_done()).count();
            return Err(SimError::Stalled(format!("{left} producers never had every block taken")));
        };
        if now > limit {
            return Err(SimError::TimeLimit(spec.time_limit));
        }
        match e {
            Ev::Generated(p) => {
                let pr = &mut sim.producers[p];
                pr.generating = false;
                pr.generated += 1;
                pr.waiting = true;
                sim.try_send(p)?;
            }
            Ev::Arrive { c, p, block, progress } => sim.arrive(c, p, block, progress),
            Ev::Taken(c) => sim.taken(c)?,
            Ev::Reply { p, c, block } => {
                let pr = &mut sim.producers[p];
                if pr.ledger.landed(block, c) {
                    match pr.router.as_mut() {
                        Some(r) => r.on_reply(c),
                        None => pr.outstanding -= 1,
                    }
                } else if !sim.consumers[c].dead {
                    return Err(SimError::Invariant(format!(
                        "producer {p} ignored consumer {c}'s answer for block {block}, and c is alive"
                    )));
                }
                sim.try_send(p)?;
            }
            Ev::Crash(c) => sim.crash(c),
            Ev::Lost { p, c } => {
                if sim.lose(p, c) {
                    sim.try_send(p)?;
                }
            }
        }
    }
    let producer_seconds: Vec<f64> =
        sim.producers.iter().map(|p| p.last_taken.map_or(0.0, |t| t.as_secs_f64())).collect();
    Ok(DqOutcome {
        seconds: sim.last_taken.as_secs_f64(),
        producer_seconds,
        consumer_bytes: sim.consumers.iter().map(|c| if c.dead { 0 } else { c.bytes }).collect(),
        resent: sim.resent,
        events: sim.ev.processed(),
    })
}

impl Sim<'_> {
    fn generate(&mut self, p: usize) {
        let pr = &mut self.producers[p];
        if pr.generating || pr.waiting || pr.generated >= self.spec.blocks_per_producer {
            return;
        }
        pr.generating = true;
        let took = Duration::from_secs_f64(self.spec.block_bytes as f64 / self.spec.producer_rate);
        self.ev.after(took, Ev::Generated(p));
    }

    /// Send blocks to put again, then the waiting block, while credits allow; then start on
    /// the next one.
    fn try_send(&mut self, p: usize) -> Result<(), SimError> {
        // The static transfer may use all its credits on its one consumer.
        let static_credits = self.spec.credits.total_credits;
        loop {
            let pr = &mut self.producers[p];
            let block = match pr.resend.front() {
                Some(&b) => b,
                None if pr.waiting => pr.generated as usize - 1,
                None => break,
            };
            let c = match pr.router.as_mut() {
                Some(r) => match r.pick() {
                    Some(c) => c,
                    None => break,
                },
                None if pr.outstanding < static_credits => {
                    pr.outstanding += 1;
                    p % self.spec.consumers as usize
                }
                None => break,
            };
            if self.consumers[c].dead {
                // Its connection is closed: the send fails at once.
                let _ = self.lose(p, c);
                continue;
            }
            if let Some(at) = self.held.get(&(p, block)) {
                return Err(SimError::Invariant(format!(
                    "producer {p} sends block {block} again while consumer {at} holds it"
                )));
            }
            let pr = &mut self.producers[p];
            if pr.resend.front() == Some(&block) {
                pr.resend.pop_front();
            } else {
                pr.waiting = false;
            }
            pr.ledger.sent(block, c);
            let progress = Progress {
                done_bytes: (block as u64 + 1) * self.spec.block_bytes,
                total_bytes: self.spec.blocks_per_producer * self.spec.block_bytes,
                metric: ProgressMetric::Bytes,
            };
            let now = self.ev.now();
            let to = self.spec.producers as usize + c;
            let at = self.net.send(now, p, to, self.spec.block_bytes + HEADER_BYTES);
            self.ev.at(at, Ev::Arrive { c, p, block, progress });
        }
        self.generate(p);
        Ok(())
    }

    fn arrive(&mut self, c: usize, p: usize, block: usize, progress: Progress) {
        let now = self.ev.now();
        let co = &mut self.consumers[c];
        if co.dead {
            return;
        }
        let id = co.next_job;
        co.next_job += 1;
        co.from.insert(id, (p, block));
        co.sched.push(Job {
            id,
            stream: StreamKey { conn: p as u64, stream: 0 },
            file: 0,
            bytes: self.spec.block_bytes,
            progress,
            service: Service::FURTHEST_BEHIND,
            arrival: now,
        });
        self.start(c);
    }

    fn start(&mut self, c: usize) {
        let now = self.ev.now();
        let co = &mut self.consumers[c];
        if co.busy.is_some() || co.dead {
            return;
        }
        let Some(job) = co.sched.pop(now, None) else { return };
        co.busy = Some(co.from.remove(&job.id).expect("every queued job has a producer"));
        let took = Duration::from_secs_f64(job.bytes as f64 / co.rate);
        self.ev.after(took, Ev::Taken(c));
    }

    fn taken(&mut self, c: usize) -> Result<(), SimError> {
        let now = self.ev.now();
        let co = &mut self.consumers[c];
        if co.dead {
            return Ok(());
        }
        let (p, block) = co.busy.take().expect("a consumer finishes what it took");
        co.bytes += self.spec.block_bytes;
        if let Some(other) = self.held.insert((p, block), c) {
            return Err(SimError::Invariant(format!("block {block} of producer {p} taken by {other} and by {c}")));
        }
        if self.producers[p].ledger.at(block) != UnitAt::Sent(c) {
            return Err(SimError::Invariant(format!(
                "consumer {c} took block {block} of producer {p}, which has it {:?}",
                self.producers[p].ledger.at(block)
            )));
        }
        let pr = &mut self.producers[p];
        if pr.generated == self.spec.blocks_per_producer {
            pr.last_taken = Some(now);
        }
        self.last_taken = now;
        let from = self.spec.producers as usize + c;
        let at = self.net.send(now, from, p, HEADER_BYTES);
        self.ev.at(at, Ev::Reply { p, c, block });
        self.start(c);
        Ok(())
    }

    /// Consumer `c` dies with what it holds; producers waiting on it hear of it once its
    /// connection's close reaches them.
    fn crash(&mut self, c: usize) {
        let co = &mut self.consumers[c];
        co.dead = true;
        co.busy = None;
        co.from.clear();
        self.held.retain(|_, at| *at != c);
        let now = self.ev.now();
        for p in 0..self.producers.len() {
            if self.producers[p].ledger.holds_at(c) {
                let at = self.net.send(now, self.spec.producers as usize + c, p, HEADER_BYTES);
                self.ev.at(at, Ev::Lost { p, c });
            }
        }
    }

    /// Producer `p` loses consumer `c` (the client's `DqWriter::lose`); true if blocks
    /// are to be put again.
    fn lose(&mut self, p: usize, c: usize) -> bool {
        let pr = &mut self.producers[p];
        let Some(r) = pr.router.as_mut() else { return false };
        if !r.is_live(c) {
            return false;
        }
        r.on_consumer_down(c);
        let back = pr.ledger.lose(c);
        self.resent += back.len() as u64;
        let again = !back.is_empty();
        pr.resend.extend(back);
        again
    }

    /// Every producer is done: the write's last look for consumers that died holding
    /// blocks (`write_dq`'s). True if some producer has blocks to put again.
    fn end_check(&mut self) -> Result<bool, SimError> {
        let dead: Vec<usize> = (0..self.consumers.len()).filter(|&c| self.consumers[c].dead).collect();
        let mut again = false;
        for p in 0..self.producers.len() {
            for &c in &dead {
                if self.producers[p].ledger.holds_at(c) {
                    again |= self.lose(p, c);
                }
            }
            self.try_send(p)?;
        }
        let total = self.spec.producers as u64 * self.spec.blocks_per_producer;
        if !again && self.held.len() as u64 != total {
            return Err(SimError::Invariant(format!(
                "the live servers hold {} blocks at the end, of {total}",
                self.held.len()
            )));
        }
        Ok(again)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn spec(mode: DqMode, slow: usize) -> DqSpec {
        let mut rates = vec![5.0 * MB; 8];
        for r in rates.iter_mut().take(slow) {
            *r = 1.0 * MB;
        }
        DqSpec {
            producers: 8,
            consumers: 8,
            producer_rate: 40.0 * MB,
            consumer_rates: rates,
            blocks_per_producer: 2000,
            block_bytes: 8192,
            credits: DqSettings::for_consumers(8),
            mode,
            consumer_scheduler: SchedulerKind::Auto,
            net: NetParams::LOCAL,
            time_limit: Duration::from_secs(3600),
            seed: 1,
            crashes: vec![],
        }
    }

    #[test]
    fn every_block_is_taken_once_and_runs_repeat_exactly() {
        let s = spec(DqMode::Dq, 2);
        let o = run_dq(&s).unwrap();
        assert_eq!(o.consumer_bytes.iter().sum::<u64>(), 8 * 2000 * 8192);
        assert_eq!(o, run_dq(&s).unwrap());
    }

    #[test]
    fn dq_sends_slow_consumers_less_and_static_waits_for_them() {
        let total = (8 * 2000 * 8192) as f64;
        let ideal = total / (6.0 * 5.0 * MB + 2.0 * MB);
        let dq = run_dq(&spec(DqMode::Dq, 2)).unwrap();
        assert!(dq.seconds < 1.05 * ideal, "dq {} vs ideal {ideal}", dq.seconds);
        assert!(dq.consumer_bytes[0] * 3 < dq.consumer_bytes[7], "{:?}", dq.consumer_bytes);
        let st = run_dq(&spec(DqMode::Static, 2)).unwrap();
        assert!(st.seconds > 1.5 * dq.seconds, "static {} vs dq {}", st.seconds, dq.seconds);
    }

    #[test]
    fn blocks_a_dead_consumer_held_are_put_again_once() {
        let mut s = spec(DqMode::Dq, 0);
        let alone = run_dq(&s).unwrap();
        s.crashes = vec![(Duration::from_secs_f64(alone.seconds / 2.0), 3)];
        let o = run_dq(&s).unwrap();
        assert_eq!(o.consumer_bytes[3], 0);
        assert_eq!(o.consumer_bytes.iter().sum::<u64>(), 8 * 2000 * 8192, "every block held once");
        assert!(o.resent > 800, "about half of node 3's eighth: {}", o.resent);
        assert!(o.seconds < alone.seconds * 1.3, "{} vs {}", o.seconds, alone.seconds);
    }

    #[test]
    fn too_few_credits_cannot_avoid_slow_consumers() {
        // River §6.1: with fewer credits than slow consumers, a producer forgets them.
        let mut few = spec(DqMode::Dq, 6);
        few.credits = DqSettings::with_total(8, 2);
        let mut many = spec(DqMode::Dq, 6);
        many.credits = DqSettings::with_total(8, 16);
        let (few, many) = (run_dq(&few).unwrap(), run_dq(&many).unwrap());
        assert!(few.seconds > 1.2 * many.seconds, "{} vs {}", few.seconds, many.seconds);
    }
}
