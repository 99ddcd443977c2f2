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
use ganges_core::dq::{DqRouter, DqSettings};
use ganges_core::sched::{Job, JobId, Progress, ProgressMetric, Scheduler, SchedulerKind, Service, StreamKey};
use ganges_core::time::Time;
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
}

#[derive(Clone, Debug, PartialEq)]
pub struct DqOutcome {
    /// Until the last consumer took the last block.
    pub seconds: f64,
    /// When each producer's last block was taken by a consumer.
    pub producer_seconds: Vec<f64>,
    /// Bytes each consumer took.
    pub consumer_bytes: Vec<u64>,
    pub events: u64,
}

#[derive(Debug)]
enum Ev {
    /// Producer p finished generating a block.
    Generated(usize),
    /// A block from producer p reached consumer c.
    Arrive { c: usize, p: usize, progress: Progress },
    /// Consumer c finished taking its current block.
    Taken(usize),
    /// Consumer c's reply reached producer p.
    Reply { p: usize, c: usize },
}

#[derive(Debug)]
struct Producer {
    router: Option<DqRouter>,
    /// Static mode: blocks unanswered at the one consumer.
    outstanding: u32,
    generated: u64,
    sent: u64,
    taken: u64,
    /// A generated block waiting for a credit.
    waiting: bool,
    generating: bool,
    last_taken: Option<Time>,
}

#[derive(Debug)]
struct Consumer {
    sched: Box<dyn Scheduler>,
    /// The producer of each queued job.
    from: std::collections::BTreeMap<JobId, usize>,
    busy: Option<usize>,
    next_job: JobId,
    bytes: u64,
    rate: f64,
}

struct Sim<'a> {
    spec: &'a DqSpec,
    ev: Events<Ev>,
    net: Network,
    producers: Vec<Producer>,
    consumers: Vec<Consumer>,
    left: u64,
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
            generated: 0,
            sent: 0,
            taken: 0,
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
        })
        .collect();
    let endpoints = (spec.producers + spec.consumers) as usize;
    let mut sim = Sim {
        spec,
        ev: Events::default(),
        net: Network::new(endpoints, spec.net),
        producers,
        consumers,
        left: spec.blocks_per_producer * spec.producers as u64,
    };
    for p in 0..sim.producers.len() {
        sim.generate(p);
    }
    let limit = Time::ZERO + spec.time_limit;
    while sim.left > 0 {
        let Some((now, e)) = sim.ev.pop() else {
            return Err(SimError::Stalled(format!("{} blocks never reached a consumer", sim.left)));
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
                sim.try_send(p);
            }
            Ev::Arrive { c, p, progress } => sim.arrive(c, p, progress),
            Ev::Taken(c) => sim.taken(c),
            Ev::Reply { p, c } => {
                let pr = &mut sim.producers[p];
                match pr.router.as_mut() {
                    Some(r) => r.on_reply(c),
                    None => pr.outstanding -= 1,
                }
                sim.try_send(p);
            }
        }
    }
    let producer_seconds: Vec<f64> =
        sim.producers.iter().map(|p| p.last_taken.map_or(0.0, |t| t.as_secs_f64())).collect();
    Ok(DqOutcome {
        seconds: sim.ev.now().as_secs_f64(),
        producer_seconds,
        consumer_bytes: sim.consumers.iter().map(|c| c.bytes).collect(),
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

    /// Send the waiting block if a credit allows, then start on the next one.
    fn try_send(&mut self, p: usize) {
        // The static transfer may use all its credits on its one consumer.
        let static_credits = self.spec.credits.total_credits;
        let pr = &mut self.producers[p];
        if !pr.waiting {
            return;
        }
        let c = match pr.router.as_mut() {
            Some(r) => match r.pick() {
                Some(c) => c,
                None => return,
            },
            None if pr.outstanding < static_credits => {
                pr.outstanding += 1;
                p % self.spec.consumers as usize
            }
            None => return,
        };
        pr.waiting = false;
        pr.sent += 1;
        let progress = Progress {
            done_bytes: pr.sent * self.spec.block_bytes,
            total_bytes: self.spec.blocks_per_producer * self.spec.block_bytes,
            metric: ProgressMetric::Bytes,
        };
        let now = self.ev.now();
        let to = self.spec.producers as usize + c;
        let at = self.net.send(now, p, to, self.spec.block_bytes + HEADER_BYTES);
        self.ev.at(at, Ev::Arrive { c, p, progress });
        self.generate(p);
    }

    fn arrive(&mut self, c: usize, p: usize, progress: Progress) {
        let now = self.ev.now();
        let co = &mut self.consumers[c];
        let id = co.next_job;
        co.next_job += 1;
        co.from.insert(id, p);
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
        if co.busy.is_some() {
            return;
        }
        let Some(job) = co.sched.pop(now, None) else { return };
        let p = co.from.remove(&job.id).expect("every queued job has a producer");
        co.busy = Some(p);
        let took = Duration::from_secs_f64(job.bytes as f64 / co.rate);
        self.ev.after(took, Ev::Taken(c));
    }

    fn taken(&mut self, c: usize) {
        let now = self.ev.now();
        let co = &mut self.consumers[c];
        let p = co.busy.take().expect("a consumer finishes what it took");
        co.bytes += self.spec.block_bytes;
        self.left -= 1;
        let pr = &mut self.producers[p];
        pr.taken += 1;
        if pr.taken == self.spec.blocks_per_producer {
            pr.last_taken = Some(now);
        }
        let from = self.spec.producers as usize + c;
        let at = self.net.send(now, from, p, HEADER_BYTES);
        self.ev.at(at, Ev::Reply { p, c });
        self.start(c);
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
