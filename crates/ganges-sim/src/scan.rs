//! Reads of a replicated dataset in virtual time: the GD family (GD-1 to GD-9) and the static
//! baseline, with the very objects the real system runs.
//!
//! Each consumer is a [`ReadEngine`] with its read policy, exactly as in `ganges-client`;
//! each server is a [`ServerNode`] (scheduler, disk model, primary tracker, rate meter,
//! handoff), exactly as in `ganges-server`. What this module adds is only what the
//! real system gets from tokio and TCP: when each message arrives ([`Network`]), when the
//! modelled disk finishes (the model's own timeline), and when a consumer's application has
//! taken a block (a sink at the consumer's rate). Consumers ask for more blocks only while
//! fewer than a window of blocks wait for their application, as a program calling `next()`
//! at its own pace does.

use crate::event::Events;
use crate::net::{HEADER_BYTES, NetParams, Network};
use ganges_core::disk::{DiskModel, DiskParams, Fault, Service as DiskService};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::layout::Layout;
use ganges_core::route::{Delivery, Failure, PolicySettings, ReadConfig, ReadEngine, ReadPolicyKind, ServerState};
use ganges_core::sched::{Job, Progress, SchedulerKind, Service, StreamKey};
use ganges_core::serve::{Ask, ReadContext, ServerNode};
use ganges_core::shape::{Partition, Shape};
use ganges_core::time::Time;
use ganges_core::write::{Landing, Rewrite};
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// The only dataset of a simulated scan.
const DATASET: u64 = 0;
/// More events than this at one virtual instant: the run is spinning, not progressing (a
/// real scan has a few per consumer and server at any instant).
const MAX_EVENTS_AT_ONE_INSTANT: u64 = 100_000;

/// A fault that holds only between `start` and `end` (to the end of the run if `None`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultWindow {
    pub start: Duration,
    pub end: Option<Duration>,
}

/// A fault beyond a slow disk, at an instant of the scan (the simulator's hunts, `hunt`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Chaos {
    /// The server dies: its queue and its disk's current read are lost, every connection to
    /// it closes (each consumer hears of it a network latency later), and messages to it
    /// are dropped until it restarts.
    Crash(NodeId),
    /// The server starts again on its data, with an empty queue (consumers that saw it die
    /// keep it for dead, as a real read does).
    Restart(NodeId),
    /// One consumer's connection to one server closes: the server drops that consumer's
    /// queued reads; the consumer reads elsewhere.
    Disconnect { consumer: usize, node: NodeId },
    /// The server's copy of a block fails its checksum from now on.
    Corrupt { node: NodeId, fragment: FragmentId, block: u32 },
    /// The server's disk reads `factor` of its peak rate from now on (1: its peak), whatever
    /// fault it had: a real device's rate swinging with no fault.
    Rate { node: NodeId, factor: f64 },
}

/// Everything a simulated scan needs.
#[derive(Clone, Debug)]
pub struct ScanSpec {
    pub layout: Layout,
    pub shape: Shape,
    /// One consumer per partition.
    pub partitions: Vec<Partition>,
    /// Every server's disk (faults come on top).
    pub disk: DiskParams,
    /// Faulty servers and their faults.
    pub faults: Vec<(NodeId, Fault)>,
    /// When the faults hold; empty: the whole run.
    pub schedule: Vec<FaultWindow>,
    /// The rate each consumer's application takes data at; `None`: at once.
    pub consumer_rate: Option<f64>,
    pub net: NetParams,
    pub policy: ReadPolicyKind,
    pub settings: PolicySettings,
    pub window: u32,
    /// Consumers start at a random instant in `[0, start_jitter)`: real consumers never start
    /// in the same nanosecond, and perfect symmetry hides behaviour a real run shows.
    pub start_jitter: Duration,
    /// Where in a second of the servers' clock the scan starts ([`start_phase`]). Planned
    /// disks lay their phase slots out from whole seconds (`sched::PlannedShares`), and a
    /// real scan starts at any point of them; every time the outcome reports counts from
    /// the scan's start.
    pub start_phase: Duration,
    /// Sample every consumer's delivered bytes this often (for rates over time).
    pub sample_every: Option<Duration>,
    /// Give up if the scan has not finished by this virtual time.
    pub time_limit: Duration,
    pub seed: u64,
    /// Crashes, restarts, lost connections and corrupt blocks, at instants from the start.
    pub chaos: Vec<(Duration, Chaos)>,
    /// Check every consumer's engine and exactly-once delivery after every event (hunts):
    /// a broken invariant is an error naming the event.
    pub check: bool,
    /// The consumers are writers of a replicated write (`static`, `gd`, `ceft`), each
    /// writing its partition's blocks to the copy its policy picks, and the run keeps the
    /// write's [`Landing`] as the client does: a server that crashes loses what it staged
    /// (a restart does not bring it back into the write), and what no live server holds is
    /// written again to a live copy through that server's queue. The run ends when every
    /// block is held by a live server.
    pub write: bool,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("invalid scenario: {0}")]
    Invalid(String),
    #[error("the simulated scan did not finish within {0:?} of virtual time")]
    TimeLimit(Duration),
    #[error("the simulation ran out of events with consumers unfinished (a policy stalled): {0}")]
    Stalled(String),
    #[error("an invariant broke: {0}")]
    Invariant(String),
}

/// What a simulated scan measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanOutcome {
    /// Until the last consumer's application took its last byte.
    pub seconds: f64,
    pub consumer_seconds: Vec<f64>,
    pub bytes: u64,
    pub backup_bytes: u64,
    pub seeks: u64,
    pub disk_busy_secs: Vec<f64>,
    pub handed_off: u64,
    /// Bytes each server's disk read for each consumer (`[server][consumer]`), duplicates
    /// included: where the reads went, and so how far help flowed down a chain of copies.
    pub served: Vec<Vec<u64>>,
    pub steals: u64,
    pub hedges: u64,
    pub duplicates: u64,
    /// Requests sent by all consumers.
    pub requests: u64,
    pub events: u64,
    /// Per consumer, bytes its application had taken at each sample (`sample_every`).
    pub delivered: Vec<Vec<u64>>,
    /// A write's landing at the end (`ScanSpec::write`): what its commit records.
    pub landing: Option<Landing>,
}

/// A read's context at a server.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ctx {
    consumer: usize,
    piece: usize,
    request: u64,
    fragment: FragmentId,
    /// The server a handed-over read came from.
    origin: Option<usize>,
    /// A block a write sends again (`ScanSpec::write`), not a consumer's piece.
    rewrite: Option<Rewrite>,
}

/// The connection a write's rewrites come on, apart from every consumer's.
const REWRITER: u64 = u64::MAX;

impl ReadContext for Ctx {
    fn conn(&self) -> u64 {
        if self.rewrite.is_some() { REWRITER } else { self.consumer as u64 }
    }
    fn request_id(&self) -> Option<u64> {
        (self.origin.is_none() && self.rewrite.is_none()).then_some(self.request)
    }
    fn client(&self) -> Option<u64> {
        (self.origin.is_none() && self.rewrite.is_none()).then_some(self.consumer as u64)
    }
}

#[derive(Debug)]
enum ToServer {
    Read {
        c: usize,
        piece: usize,
        request: u64,
        progress: Progress,
        service: Service,
    },
    Cancel {
        c: usize,
        request: u64,
    },
    Progress {
        c: usize,
        progress: Progress,
    },
    Probe {
        c: usize,
    },
    /// An idle server asks for work; `clients`: the consumers connected to it.
    HandoffAsk {
        from: usize,
        rate: f64,
        clients: Vec<u64>,
    },
    /// A write sends a block again (`ScanSpec::write`).
    Rewrite(Rewrite),
    Handed {
        from: usize,
        jobs: Vec<(Job, Ctx)>,
    },
}

#[derive(Debug)]
enum ToConsumer {
    ReadOk {
        request: u64,
        state: ServerState,
        bytes: u64,
    },
    Cancelled {
        request: u64,
    },
    /// A probe's answer; the disk rate, and whether it was measured.
    State {
        node: NodeId,
        state: ServerState,
        rate: Option<(f64, bool)>,
    },
    Moved {
        request: u64,
        to: NodeId,
    },
    /// The read's block failed its checksum at the server.
    Corrupt {
        request: u64,
    },
    /// The connection to `node` closed.
    Down {
        node: NodeId,
    },
}

#[derive(Debug)]
enum Ev {
    Start(usize),
    Server(usize, ToServer),
    /// Server `s`'s disk finished, in its life `generation` (a crash ends a life).
    DiskDone(usize, u32),
    Chaos(Chaos),
    Consumer(usize, ToConsumer),
    SinkDone(usize),
    Fault(usize, Option<Fault>),
    Sample,
    AskRetry(usize),
    /// A disk that waited for a stream's next request decides again.
    Wake(usize),
    /// Consumer `c`'s policy has a probe due (`ReadEngine::probe_at`).
    Probe(usize),
    /// The writing client notices that servers died (`ScanSpec::write`).
    Watch,
    /// A rewritten block's acknowledgement reaches the writing client.
    Rewritten(Rewrite),
}

#[derive(Debug)]
struct Server {
    q: ServerNode<Ctx>,
    busy: Option<(Job, Ctx, DiskService)>,
    /// An ask for work is on its way (one at a time, as the server's asker task).
    asking: bool,
    /// The consumers connected to it: all at the start, none after a crash (they keep it
    /// for dead), less those whose connection was lost.
    clients: std::collections::BTreeSet<u64>,
    retry_at: Option<Time>,
    peers: Vec<NodeId>,
    handed_off: u64,
    /// Bytes its disk read for each consumer.
    served: Vec<u64>,
    down: bool,
    generation: u32,
}

#[derive(Debug)]
struct Consumer {
    engine: ReadEngine,
    started: bool,
    /// Blocks delivered that the application has not taken yet, and their bytes in order.
    sink: std::collections::VecDeque<u64>,
    sink_busy: bool,
    taken: u64,
    finished: Option<Time>,
    /// When an `Ev::Probe` is due for this consumer, if one is.
    probe_at: Option<Time>,
    /// Pieces delivered (checked with `ScanSpec::check`).
    got: Vec<bool>,
}

struct Sim<'a> {
    spec: &'a ScanSpec,
    ev: Events<Ev>,
    net: Network,
    servers: Vec<Server>,
    consumers: Vec<Consumer>,
    unfinished: usize,
    delivered: Vec<Vec<u64>>,
    corrupt: std::collections::BTreeSet<(usize, FragmentId, u32)>,
    landing: Option<Landing>,
}

/// A start phase drawn from `seed`: a point of a second, the same for the same seed. Started
/// at a whole second, as the simulator did before it had this, a scan met every planned
/// disk at the start of a period, which a real one seldom does: at one slow disk the default
/// bench (`ganges sim bench-scan`) then read the same at every seed, with its consumers done
/// closer together than the cluster's ever are; from seeded phases it varies as they do.
pub fn start_phase(seed: u64) -> Duration {
    start_phases(seed).next().expect("the phases never end")
}

/// The start phases of a series of scans drawn from `seed`, [`start_phase`] first: the
/// cluster bench starts its runs at them, so that they sample the servers' periods evenly.
pub fn start_phases(seed: u64) -> impl Iterator<Item = Duration> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    std::iter::repeat_with(move || Duration::from_nanos(rng.random_range(0..1_000_000_000)))
}

fn n_servers(spec: &ScanSpec) -> usize {
    spec.layout.nodes() as usize
}

/// Run one simulated scan.
pub fn run_scan(spec: &ScanSpec) -> Result<ScanOutcome, SimError> {
    let mut sim = Sim::new(spec)?;
    sim.run()?;
    Ok(sim.outcome())
}

impl<'a> Sim<'a> {
    fn new(spec: &'a ScanSpec) -> Result<Sim<'a>, SimError> {
        let invalid = |e: &dyn std::fmt::Display| SimError::Invalid(e.to_string());
        spec.layout.validate().map_err(|e| invalid(&e))?;
        spec.settings.validate().map_err(|e| invalid(&e))?;
        if spec.disk.queue_depth != 1 {
            return Err(SimError::Invalid("the simulator models disks with a queue depth of 1".into()));
        }
        if spec.partitions.is_empty() {
            return Err(SimError::Invalid("no consumers".into()));
        }
        let n = spec.layout.nodes() as usize;
        let fragments = spec.shape.fragment_count();
        let servers = (0..n)
            .map(|s| {
                let me = NodeId(s as u32);
                let mut peers: Vec<NodeId> = spec
                    .layout
                    .copies_on(me, fragments)
                    .into_iter()
                    .flat_map(|(f, _)| spec.layout.holders(f))
                    .filter(|p| *p != me)
                    .collect();
                peers.sort();
                peers.dedup();
                Server {
                    q: ServerNode::new(SchedulerKind::Auto.build(), Some(DiskModel::new(spec.disk))),
                    busy: None,
                    asking: false,
                    clients: (0..spec.partitions.len() as u64).collect(),
                    retry_at: None,
                    peers,
                    handed_off: 0,
                    served: vec![0; spec.partitions.len()],
                    down: false,
                    generation: 0,
                }
            })
            .collect();
        let config = ReadConfig { window: spec.window, ..ReadConfig::default() };
        let mut consumers = Vec::with_capacity(spec.partitions.len());
        for p in &spec.partitions {
            let pieces = spec.shape.pieces(*p).map_err(|e| invalid(&e))?;
            let engine = ReadEngine::new(spec.policy.build(&spec.settings), &spec.layout, &spec.shape, pieces, config)
                .map_err(|e| invalid(&e))?;
            let got = vec![false; engine.pieces().len()];
            consumers.push(Consumer {
                engine,
                started: false,
                sink: Default::default(),
                sink_busy: false,
                taken: 0,
                finished: None,
                probe_at: None,
                got,
            });
        }
        let endpoints = n + consumers.len();
        let mut sim = Sim {
            spec,
            ev: Events::starting_at(Time::ZERO + spec.start_phase),
            net: Network::new(endpoints, spec.net),
            servers,
            unfinished: consumers.len(),
            delivered: vec![vec![]; consumers.len()],
            consumers,
            corrupt: Default::default(),
            landing: spec.write.then(|| Landing::new(&spec.layout, &spec.shape)),
        };
        sim.schedule_faults()?;
        for &(at, chaos) in &spec.chaos {
            let bad_node = |n: NodeId| n.0 as usize >= n_servers(spec);
            let bad = match chaos {
                Chaos::Crash(n) | Chaos::Restart(n) | Chaos::Corrupt { node: n, .. } => bad_node(n),
                Chaos::Rate { node, factor } => bad_node(node) || Fault::Factor { factor }.validate().is_err(),
                Chaos::Disconnect { consumer, node } => bad_node(node) || consumer >= sim.consumers.len(),
            };
            if bad {
                return Err(SimError::Invalid(format!("{chaos:?} names a server or consumer beyond the scan")));
            }
            sim.ev.at(sim.epoch() + at, Ev::Chaos(chaos));
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(spec.seed);
        for c in 0..sim.consumers.len() {
            let jitter = if spec.start_jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_nanos(rng.random_range(0..spec.start_jitter.as_nanos() as u64))
            };
            sim.ev.after(jitter, Ev::Start(c));
        }
        if spec.sample_every.is_some() {
            sim.ev.at(sim.epoch(), Ev::Sample);
        }
        Ok(sim)
    }

    /// The instant the scan starts: `ScanSpec::start_phase` into the servers' clock.
    fn epoch(&self) -> Time {
        Time::ZERO + self.spec.start_phase
    }

    fn schedule_faults(&mut self) -> Result<(), SimError> {
        for (node, fault) in &self.spec.faults {
            let s = node.0 as usize;
            if s >= self.servers.len() {
                return Err(SimError::Invalid(format!("a fault on {node}, beyond the cluster")));
            }
            fault.validate().map_err(|e| SimError::Invalid(e.to_string()))?;
            if self.spec.schedule.is_empty() {
                self.ev.at(self.epoch(), Ev::Fault(s, Some(*fault)));
            }
            for w in &self.spec.schedule {
                self.ev.at(self.epoch() + w.start, Ev::Fault(s, Some(*fault)));
                if let Some(end) = w.end {
                    self.ev.at(self.epoch() + end, Ev::Fault(s, None));
                }
            }
        }
        Ok(())
    }

    fn server_endpoint(&self, s: usize) -> usize {
        s
    }

    fn consumer_endpoint(&self, c: usize) -> usize {
        self.servers.len() + c
    }

    fn send_server(&mut self, from: usize, s: usize, bytes: u64, msg: ToServer) {
        let now = self.ev.now();
        let at = self.net.send(now, from, self.server_endpoint(s), bytes);
        self.ev.at(at, Ev::Server(s, msg));
    }

    fn send_consumer(&mut self, s: usize, c: usize, bytes: u64, msg: ToConsumer) {
        let now = self.ev.now();
        let (at, off) = self.net.send_span(now, self.server_endpoint(s), self.consumer_endpoint(c), bytes);
        self.servers[s].q.sent(bytes, now, off);
        self.ev.at(at, Ev::Consumer(c, msg));
    }

    fn run(&mut self) -> Result<(), SimError> {
        let limit = self.epoch() + self.spec.time_limit;
        let mut instant = (self.epoch(), 0u64);
        while self.unfinished > 0 || !self.landed()? {
            let Some((now, e)) = self.ev.pop() else {
                let left: Vec<usize> =
                    (0..self.consumers.len()).filter(|&c| self.consumers[c].finished.is_none()).collect();
                return Err(SimError::Stalled(format!("consumers {left:?} unfinished, or rewrites unanswered")));
            };
            if now > limit {
                return Err(SimError::TimeLimit(self.spec.time_limit));
            }
            // Virtual time that stops moving is a policy spinning: the time limit alone would
            // never be reached.
            instant = if now == instant.0 { (now, instant.1 + 1) } else { (now, 1) };
            if instant.1 > MAX_EVENTS_AT_ONE_INSTANT {
                return Err(SimError::Stalled(format!("{} events at {now:?}, the last {e:?}", instant.1)));
            }
            match e {
                Ev::Start(c) => {
                    let cons = &mut self.consumers[c];
                    cons.started = true;
                    if cons.engine.is_done() {
                        // An empty partition: nothing to read.
                        cons.finished = Some(now);
                        self.unfinished -= 1;
                    }
                    self.pump(c)?;
                }
                Ev::Server(s, m) => {
                    // A dead server hears nothing.
                    if !self.servers[s].down {
                        self.on_server(s, m);
                    }
                }
                Ev::DiskDone(s, generation) => {
                    if self.servers[s].generation == generation {
                        self.on_disk_done(s);
                    }
                }
                Ev::Chaos(chaos) => self.on_chaos(chaos)?,
                Ev::Consumer(c, m) => self.on_consumer(c, m)?,
                Ev::SinkDone(c) => self.on_sink_done(c)?,
                Ev::Fault(s, f) => self.set_fault(s, f)?,
                Ev::Sample => {
                    for (c, d) in self.delivered.iter_mut().enumerate() {
                        d.push(self.consumers[c].taken);
                    }
                    let every = self.spec.sample_every.expect("sampling was asked for");
                    self.ev.after(every, Ev::Sample);
                }
                Ev::Wake(s) => self.kick(s),
                Ev::Probe(c) => {
                    // An earlier wake took this one's place, and the consumer has decided
                    // anew when it is due.
                    if self.consumers[c].probe_at == Some(now) {
                        self.consumers[c].probe_at = None;
                        self.pump(c)?;
                    }
                }
                Ev::AskRetry(s) => {
                    self.servers[s].retry_at = None;
                    self.kick(s);
                }
                Ev::Watch => self.watch()?,
                Ev::Rewritten(r) => {
                    self.landing.as_mut().expect("a write").on_acked(r.fragment, r.block, r.node);
                }
            }
            if self.spec.check {
                self.check(now)?;
            }
        }
        if self.spec.check {
            for (c, cons) in self.consumers.iter().enumerate() {
                // `got` grows as the engine cuts pieces finer: one it never reached is missing.
                if let Some(p) = (0..cons.engine.pieces().len()).find(|&p| !cons.got.get(p).copied().unwrap_or(false)) {
                    return Err(SimError::Invariant(format!("consumer {c} finished without piece {p}")));
                }
            }
        }
        if self.spec.sample_every.is_some() {
            for (c, d) in self.delivered.iter_mut().enumerate() {
                d.push(self.consumers[c].taken);
            }
        }
        Ok(())
    }

    // ---- consumers: the driver of `ganges-client`'s ReadStream, in virtual time ----

    /// Send what the engine wants sent: reads (while the application keeps up), progress
    /// notices, probes and cancels.
    fn pump(&mut self, c: usize) -> Result<(), SimError> {
        let now = self.ev.now();
        let me = self.consumer_endpoint(c);
        let window = self.spec.window as usize;
        if !self.consumers[c].started {
            return Ok(());
        }
        while self.consumers[c].sink.len() < window {
            let cons = &mut self.consumers[c];
            let d = match cons.engine.poll_send(now) {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(e) => return Err(SimError::Stalled(e.to_string())),
            };
            let msg = ToServer::Read {
                c,
                piece: d.piece,
                request: d.request,
                progress: cons.engine.progress(),
                service: cons.engine.service(d.piece, d.node),
            };
            self.send_server(me, d.node.0 as usize, HEADER_BYTES, msg);
        }
        while let Some(node) = self.consumers[c].engine.poll_notify() {
            let progress = self.consumers[c].engine.progress();
            self.send_server(me, node.0 as usize, HEADER_BYTES, ToServer::Progress { c, progress });
        }
        while let Some(node) = self.consumers[c].engine.poll_probe(now) {
            self.send_server(me, node.0 as usize, HEADER_BYTES, ToServer::Probe { c });
        }
        while let Some(d) = self.consumers[c].engine.poll_cancel() {
            self.send_server(me, d.node.0 as usize, HEADER_BYTES, ToServer::Cancel { c, request: d.request });
        }
        // The live client's timer: wake for the next probe though no reply comes.
        let cons = &mut self.consumers[c];
        if let Some(t) = cons.engine.probe_at(now).filter(|&t| t > now)
            && cons.probe_at.is_none_or(|pending| t < pending)
        {
            cons.probe_at = Some(t);
            self.ev.at(t, Ev::Probe(c));
        }
        Ok(())
    }

    fn on_consumer(&mut self, c: usize, m: ToConsumer) -> Result<(), SimError> {
        let now = self.ev.now();
        let cons = &mut self.consumers[c];
        match m {
            ToConsumer::State { node, state, rate } => cons.engine.on_probe_answer(now, node, state, rate),
            ToConsumer::Moved { request, to } => {
                if let Some((piece, node)) = cons.engine.in_flight(request) {
                    cons.engine.on_moved(now, piece, node, to);
                }
            }
            ToConsumer::Cancelled { request } => {
                if let Some((piece, node)) = cons.engine.take(request) {
                    cons.engine.on_failure(now, piece, node, Failure::Cancelled);
                }
            }
            ToConsumer::ReadOk { request, state, bytes } => {
                let Some((piece, node)) = cons.engine.take(request) else { return Ok(()) };
                if let Some(l) = self.landing.as_mut() {
                    let p = cons.engine.piece(piece);
                    l.on_acked(p.fragment, p.block, node);
                }
                cons.engine.on_state(now, node, state);
                cons.engine.on_service(node, bytes, state.service_us);
                if cons.engine.on_data(now, piece, node) == Delivery::New {
                    // The engine may cut pieces finer as it goes (planned request sizes).
                    if cons.got.len() <= piece {
                        cons.got.resize(cons.engine.pieces().len(), false);
                    }
                    if std::mem::replace(&mut cons.got[piece], true) {
                        return Err(SimError::Invariant(format!("consumer {c} was given piece {piece} twice")));
                    }
                    cons.sink.push_back(bytes);
                    self.feed_sink(c);
                }
            }
            ToConsumer::Corrupt { request } => {
                if let Some((piece, node)) = cons.engine.take(request) {
                    cons.engine.on_failure(now, piece, node, Failure::Corrupt);
                }
            }
            ToConsumer::Down { node } => {
                // Replies still on their way from it are lost with the connection (the
                // engine forgets its requests there).
                cons.engine.on_node_down(now, node);
            }
        }
        self.pump(c)
    }

    /// Start the application on the next delivered block, if it is free.
    fn feed_sink(&mut self, c: usize) {
        let cons = &mut self.consumers[c];
        if cons.sink_busy {
            return;
        }
        let Some(&bytes) = cons.sink.front() else { return };
        cons.sink_busy = true;
        let took = match self.spec.consumer_rate {
            Some(r) => Duration::from_secs_f64(bytes as f64 / r),
            None => Duration::ZERO,
        };
        self.ev.after(took, Ev::SinkDone(c));
    }

    fn on_sink_done(&mut self, c: usize) -> Result<(), SimError> {
        let now = self.ev.now();
        let cons = &mut self.consumers[c];
        let bytes = cons.sink.pop_front().expect("the application was taking a block");
        cons.sink_busy = false;
        cons.taken += bytes;
        if cons.sink.is_empty() && cons.engine.is_done() && cons.finished.is_none() {
            cons.finished = Some(now);
            self.unfinished -= 1;
        }
        self.feed_sink(c);
        self.pump(c)
    }

    // ---- servers: the disk driver and handoff of `ganges-server`, in virtual time ----

    fn on_server(&mut self, s: usize, m: ToServer) {
        let now = self.ev.now();
        match m {
            ToServer::Read { c, piece, request, progress, service } => {
                let p = *self.consumers[c].engine.piece(piece);
                let Some(copy) = self.spec.layout.copy_on(p.fragment, NodeId(s as u32)) else {
                    unreachable!("consumers only ask holders");
                };
                let stream = StreamKey { conn: c as u64, stream: 0 };
                let job = Job {
                    id: 0,
                    stream,
                    file: p.fragment.0 as u64,
                    bytes: p.len as u64,
                    progress,
                    service,
                    arrival: now,
                };
                let ctx = Ctx { consumer: c, piece, request, fragment: p.fragment, origin: None, rewrite: None };
                self.servers[s].q.enqueue_request(job, ctx, (copy == 0).then_some(DATASET), now);
                self.kick(s);
            }
            ToServer::Rewrite(r) => {
                let job = Job {
                    id: 0,
                    stream: StreamKey { conn: REWRITER, stream: 0 },
                    file: r.fragment.0 as u64,
                    bytes: self.spec.shape.block_len(r.fragment, r.block) as u64,
                    progress: Progress {
                        done_bytes: 0,
                        total_bytes: 1,
                        metric: ganges_core::sched::ProgressMetric::Bytes,
                    },
                    service: Service::FURTHEST_BEHIND,
                    arrival: now,
                };
                let ctx =
                    Ctx { consumer: 0, piece: 0, request: 0, fragment: r.fragment, origin: None, rewrite: Some(r) };
                self.servers[s].q.enqueue(job, ctx);
                self.kick(s);
            }
            ToServer::Cancel { c, request } => {
                if self.servers[s].q.cancel(c as u64, request).is_some() {
                    self.send_consumer(s, c, HEADER_BYTES, ToConsumer::Cancelled { request });
                }
            }
            ToServer::Progress { c, progress } => {
                self.servers[s].q.note_progress(StreamKey { conn: c as u64, stream: 0 }, progress, now);
            }
            ToServer::Probe { c } => {
                let r = self.servers[s].q.report(DATASET, now);
                let state = ServerState {
                    queue_len: r.queue_len,
                    primary_progress: r.primary_progress,
                    backup_depth: r.backup_depth,
                    ..ServerState::default()
                };
                let rate = r.disk_bytes_per_sec.map(|b| (b, r.disk_measured));
                let msg = ToConsumer::State { node: NodeId(s as u32), state, rate };
                self.send_consumer(s, c, HEADER_BYTES, msg);
            }
            ToServer::HandoffAsk { from, rate, clients } => self.give(s, from, rate, &clients),
            ToServer::Handed { from, jobs } => {
                let given = jobs.len();
                for (mut job, mut ctx) in jobs {
                    job.arrival = now;
                    ctx.origin = Some(from);
                    self.servers[s].q.enqueue(job, ctx);
                }
                let srv = &mut self.servers[s];
                srv.asking = false;
                srv.q.on_ask_answer(now, NodeId(from as u32), given);
                self.kick(s);
            }
        }
    }

    /// Run the next read if the disk is free; ask a peer for work if there is none.
    fn kick(&mut self, s: usize) {
        let now = self.ev.now();
        if self.servers[s].busy.is_some() {
            return;
        }
        if let Some(p) = self.servers[s].q.pop(now) {
            let svc = p.modelled.expect("simulated servers model their disks");
            self.servers[s].busy = Some((p.job, p.ctx, svc));
            // The model runs a read from its arrival (`ServerNode::pop`), so a read the
            // scheduler held while the disk waited for another can be done already, as on a
            // live server, whose disk then answers at once.
            self.ev.at(svc.done.max(now), Ev::DiskDone(s, self.servers[s].generation));
            return;
        }
        if let Some(t) = self.servers[s].q.sched.wake_at() {
            self.ev.at(t, Ev::Wake(s));
            return;
        }
        let srv = &mut self.servers[s];
        if srv.asking {
            return;
        }
        match srv.q.poll_ask(now, &srv.peers) {
            Ask::Peer(peer) => {
                srv.asking = true;
                let clients = srv.clients.iter().copied().collect();
                let rate = self.rate_of(s, now);
                let msg = ToServer::HandoffAsk { from: s, rate, clients };
                self.send_server(self.server_endpoint(s), peer.0 as usize, HEADER_BYTES, msg);
            }
            Ask::At(t) if srv.retry_at.is_none() => {
                srv.retry_at = Some(t);
                self.ev.at(t, Ev::AskRetry(s));
            }
            Ask::At(_) | Ask::Idle => {}
        }
    }

    fn rate_of(&mut self, s: usize, now: Time) -> f64 {
        self.servers[s].q.report(DATASET, now).disk_bytes_per_sec.unwrap_or(self.spec.disk.rate_bytes_per_sec)
    }

    /// The busy side of a handoff: the node's decision.
    fn give(&mut self, s: usize, from: usize, rate_idle: f64, clients: &[u64]) {
        let now = self.ev.now();
        let layout = &self.spec.layout;
        let asker = NodeId(from as u32);
        let mine = self.rate_of(s, now);
        let holds = |c: &Ctx| layout.copy_on(c.fragment, asker).is_some();
        let taken = self.servers[s].q.give(|c| clients.contains(&c), holds, rate_idle, mine);
        self.servers[s].handed_off += taken.len() as u64;
        for (_, ctx) in &taken {
            self.send_consumer(s, ctx.consumer, HEADER_BYTES, ToConsumer::Moved { request: ctx.request, to: asker });
        }
        let bytes = HEADER_BYTES * (1 + taken.len() as u64);
        self.send_server(self.server_endpoint(s), from, bytes, ToServer::Handed { from: s, jobs: taken });
    }

    fn on_disk_done(&mut self, s: usize) {
        let now = self.ev.now();
        let (job, ctx, svc) = self.servers[s].busy.take().expect("a disk finishes what it runs");
        let busy = svc.done.since(svc.start);
        let q = &mut self.servers[s].q;
        q.finished(job.bytes, busy);
        let r = q.report(DATASET, now);
        let state = ServerState {
            queue_len: r.queue_len,
            service_us: busy.as_micros().min(u32::MAX as u128) as u32,
            primary_progress: r.primary_progress,
            node_load: None,
            backup_depth: r.backup_depth,
        };
        if let Some(r) = ctx.rewrite {
            // Acknowledged to the writing client (consumer 0's host).
            let at = self.net.send(now, self.server_endpoint(s), self.consumer_endpoint(0), HEADER_BYTES);
            self.ev.at(at, Ev::Rewritten(r));
            self.kick(s);
            return;
        }
        self.servers[s].served[ctx.consumer] += job.bytes;
        let p = *self.consumers[ctx.consumer].engine.piece(ctx.piece);
        if self.corrupt.contains(&(s, p.fragment, p.block)) {
            // Checked before it is sent, as the server does: an error, no data.
            self.send_consumer(s, ctx.consumer, HEADER_BYTES, ToConsumer::Corrupt { request: ctx.request });
        } else {
            let msg = ToConsumer::ReadOk { request: ctx.request, state, bytes: job.bytes };
            self.send_consumer(s, ctx.consumer, job.bytes + HEADER_BYTES, msg);
        }
        self.kick(s);
    }

    // ---- the hunts' faults ----

    fn set_fault(&mut self, s: usize, fault: Option<Fault>) -> Result<(), SimError> {
        let model = self.servers[s].q.model.as_mut().expect("simulated servers model their disks");
        model.set_fault(fault).map_err(|e| SimError::Invalid(e.to_string()))
    }

    fn on_chaos(&mut self, chaos: Chaos) -> Result<(), SimError> {
        match chaos {
            Chaos::Crash(node) => {
                let s = node.0 as usize;
                if self.servers[s].down {
                    return Ok(());
                }
                let srv = &mut self.servers[s];
                srv.down = true;
                srv.generation += 1;
                srv.busy = None;
                srv.asking = false;
                srv.clients.clear();
                let model = srv.q.model.take();
                srv.q = ServerNode::new(SchedulerKind::Auto.build(), model);
                for c in 0..self.consumers.len() {
                    self.close(s, c);
                }
                if self.landing.is_some() {
                    let latency = self.spec.net.latency;
                    self.ev.after(latency, Ev::Watch);
                }
            }
            Chaos::Restart(node) => {
                self.servers[node.0 as usize].down = false;
            }
            Chaos::Disconnect { consumer, node } => {
                let s = node.0 as usize;
                self.servers[s].q.drop_connection(consumer as u64);
                self.servers[s].clients.remove(&(consumer as u64));
                self.close(s, consumer);
            }
            Chaos::Corrupt { node, fragment, block } => {
                self.corrupt.insert((node.0 as usize, fragment, block));
            }
            Chaos::Rate { node, factor } => {
                self.set_fault(node.0 as usize, (factor < 1.0).then_some(Fault::Factor { factor }))?;
            }
        }
        Ok(())
    }

    /// Consumer `c`'s connection to server `s` closes; it hears of it a latency later.
    fn close(&mut self, s: usize, c: usize) {
        let latency = self.spec.net.latency;
        self.ev.after(latency, Ev::Consumer(c, ToConsumer::Down { node: NodeId(s as u32) }));
    }

    // ---- a write's landing: the client's watcher and last pass, in virtual time ----

    /// The writing client marks every dead server down and sends again what no live
    /// server holds (`ganges-client`'s watcher; at the end, its last pass).
    fn watch(&mut self) -> Result<(), SimError> {
        let Some(l) = self.landing.as_mut() else { return Ok(()) };
        // A server that ever crashed lost its staging, restarted or not.
        for (s, _) in self.servers.iter().enumerate().filter(|(_, srv)| srv.generation > 0) {
            l.on_down(NodeId(s as u32));
        }
        let todo = l.rewrites().map_err(|e| SimError::Invariant(format!("the write failed: {e}")))?;
        let me = self.consumer_endpoint(0);
        for r in todo {
            let bytes = self.spec.shape.block_len(r.fragment, r.block) as u64 + HEADER_BYTES;
            self.send_server(me, r.node.0 as usize, bytes, ToServer::Rewrite(r));
        }
        Ok(())
    }

    /// Whether a write (if this is one) has every block on a live server, once its writers
    /// are done: the last pass sends what is still missing, and the run goes on for it.
    fn landed(&mut self) -> Result<bool, SimError> {
        if self.landing.as_ref().is_none_or(|l| !l.is_settled()) {
            return Ok(self.landing.is_none());
        }
        self.watch()?;
        Ok(self.landing.as_ref().is_some_and(|l| l.is_settled()))
    }

    /// The invariants of every consumer's engine and of delivery (hunts), and a write's
    /// landing.
    fn check(&self, now: Time) -> Result<(), SimError> {
        for (c, cons) in self.consumers.iter().enumerate() {
            let engine = &cons.engine;
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.assert_invariants()))
                .map_err(|_| SimError::Invariant(format!("consumer {c}'s read engine at {now:?}")))?;
        }
        for (s, srv) in self.servers.iter().enumerate().filter(|(_, srv)| !srv.down) {
            srv.q.check().map_err(|e| SimError::Invariant(format!("node{s} at {now:?}: {e}")))?;
        }
        if let Some(l) = &self.landing {
            l.check().map_err(|e| SimError::Invariant(format!("the write's landing at {now:?}: {e}")))?;
        }
        Ok(())
    }

    fn outcome(&self) -> ScanOutcome {
        let consumer_seconds: Vec<f64> = self
            .consumers
            .iter()
            .map(|c| c.finished.map_or(f64::INFINITY, |t| t.since(self.epoch()).as_secs_f64()))
            .collect();
        let stats = |f: fn(&ganges_core::route::ReadStats) -> u64| -> u64 {
            self.consumers.iter().map(|c| f(c.engine.stats())).sum()
        };
        let disks: Vec<_> = self.servers.iter().map(|s| s.q.model.as_ref().expect("modelled disks").stats()).collect();
        ScanOutcome {
            seconds: consumer_seconds.iter().copied().fold(0.0, f64::max),
            consumer_seconds,
            bytes: self.consumers.iter().map(|c| c.taken).sum(),
            backup_bytes: stats(|s| s.backup_bytes()),
            seeks: disks.iter().map(|d| d.seeks).sum(),
            disk_busy_secs: disks.iter().map(|d| d.busy_secs).collect(),
            handed_off: self.servers.iter().map(|s| s.handed_off).sum(),
            served: self.servers.iter().map(|s| s.served.clone()).collect(),
            steals: stats(|s| s.steals),
            hedges: stats(|s| s.hedges),
            duplicates: stats(|s| s.duplicates),
            requests: stats(|s| s.requests),
            events: self.ev.processed(),
            delivered: self.delivered.clone(),
            landing: self.landing.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ganges_core::route::ReadPolicyKind as P;

    const MB: f64 = 1e6;

    fn spec(policy: ReadPolicyKind, faults: &[u32]) -> ScanSpec {
        let nodes = 8;
        let shape = Shape::uniform(nodes, 8 << 20, 256 << 10).unwrap();
        ScanSpec {
            layout: Layout::chained(nodes, 2).unwrap(),
            partitions: shape.fragment_partitions(),
            shape,
            disk: DiskParams { rate_bytes_per_sec: 10.0 * MB, seek: Duration::from_millis(2), queue_depth: 1 },
            faults: faults.iter().map(|&n| (NodeId(n), Fault::Factor { factor: 0.5 })).collect(),
            schedule: vec![],
            consumer_rate: None,
            net: NetParams::LOCAL,
            policy,
            settings: PolicySettings::default(),
            window: 4,
            start_jitter: Duration::from_micros(200),
            start_phase: Duration::ZERO,
            sample_every: None,
            time_limit: Duration::from_secs(600),
            seed: 1,
            chaos: vec![],
            check: true,
            write: false,
        }
    }

    #[test]
    fn every_policy_delivers_every_byte_and_the_same_seed_gives_the_same_run() {
        for policy in ReadPolicyKind::ALL {
            let s = spec(policy, &[0]);
            let a = run_scan(&s).unwrap();
            assert_eq!(a.bytes, s.shape.total_bytes(), "{policy}");
            assert_eq!(a, run_scan(&s).unwrap(), "{policy}: deterministic to the event");
        }
    }

    #[test]
    fn static_waits_for_the_slow_disk_and_gd_does_not() {
        let slow = run_scan(&spec(P::Static, &[0])).unwrap();
        let fast = run_scan(&spec(P::Static, &[])).unwrap();
        assert!(slow.seconds > 1.9 * fast.seconds, "static: {} vs {}", slow.seconds, fast.seconds);
        let gd = run_scan(&spec(P::Gd, &[0])).unwrap();
        assert!(gd.seconds < 1.25 * fast.seconds, "gd: {} vs {}", gd.seconds, fast.seconds);
        assert!(gd.backup_bytes > 0);
    }

    /// The served matrix accounts for every byte delivered, on the holders of each consumer's
    /// fragment, and shows the slow disk's consumer helped by its backup.
    #[test]
    fn each_server_counts_the_bytes_it_read_for_each_consumer() {
        let s = spec(P::GdPc, &[0]);
        let o = run_scan(&s).unwrap();
        assert_eq!(o.served.len(), 8);
        let total: u64 = o.served.iter().flatten().sum();
        assert!(total >= o.bytes, "{total} read, {} delivered", o.bytes);
        for c in 0..8 {
            let column: u64 = o.served.iter().map(|row| row[c]).sum();
            let holders = o.served[c][c] + o.served[(c + 1) % 8][c];
            assert_eq!(column, holders, "consumer {c}: read only where its fragment is");
            assert!(column >= 8 << 20, "consumer {c}: {column}");
        }
        assert!(o.served[1][0] > 0, "the slow disk's backup helped its consumer: {:?}", o.served);
    }

    #[test]
    fn primary_policies_read_no_backup_without_a_fault() {
        for policy in [P::GdPc, P::GdRr] {
            let o = run_scan(&spec(policy, &[])).unwrap();
            assert!(o.backup_bytes * 100 <= o.bytes, "{policy}: {} of {}", o.backup_bytes, o.bytes);
        }
    }

    #[test]
    fn handoff_moves_reads_between_servers() {
        let mut s = spec(P::GdRrHandoff, &[0, 1]);
        s.window = 16;
        s.faults = vec![(NodeId(0), Fault::Factor { factor: 0.25 }), (NodeId(1), Fault::Factor { factor: 0.25 })];
        let o = run_scan(&s).unwrap();
        assert!(o.handed_off > 0, "{o:?}");
        assert_eq!(o.bytes, 64 << 20);
    }

    #[test]
    fn a_fault_window_is_sampled_over_time() {
        let mut s = spec(P::Gd, &[0]);
        s.schedule = vec![FaultWindow { start: Duration::from_millis(500), end: Some(Duration::from_secs(1)) }];
        s.sample_every = Some(Duration::from_millis(100));
        let o = run_scan(&s).unwrap();
        for d in &o.delivered {
            assert!(d.windows(2).all(|w| w[0] <= w[1]));
            assert_eq!(*d.last().unwrap(), 8 << 20);
        }
        assert!(o.delivered[0].len() >= o.seconds as usize * 10);
    }

    /// Only planned disks phase their slots on whole seconds: every other policy runs the
    /// same scan whatever the start phase, and reports its times from the scan's start.
    #[test]
    fn the_start_phase_moves_only_planned_disks() {
        let at = |policy, phase: Duration| {
            let mut s = spec(policy, &[0]);
            s.start_phase = phase;
            run_scan(&s).unwrap()
        };
        let phase = Duration::from_millis(300);
        for policy in [P::Static, P::Gd, P::GdRr] {
            let (a, b) = (at(policy, Duration::ZERO), at(policy, phase));
            assert_eq!(a.consumer_seconds, b.consumer_seconds, "{policy}");
            assert_eq!((a.seeks, a.backup_bytes), (b.seeks, b.backup_bytes), "{policy}");
        }
        let plan: Vec<_> = [0, 150, 300].map(|ms| at(P::GdPlan, Duration::from_millis(ms)).consumer_seconds).into();
        assert!(plan.iter().any(|s| *s != plan[0]), "gd-plan's slots fall elsewhere: {plan:?}");
        assert!(plan.iter().flatten().all(|s| *s < 10.0), "times from the start: {plan:?}");
        assert_eq!(start_phase(7), start_phase(7));
        assert_ne!(start_phase(7), start_phase(8));
        assert!(start_phase(7) < Duration::from_secs(1));
        let series: Vec<Duration> = start_phases(7).take(8).collect();
        assert_eq!(series[0], start_phase(7), "a series starts where the seed's scan does");
        assert!(series.iter().all(|p| *p < Duration::from_secs(1)));
        assert_eq!(series.iter().collect::<std::collections::BTreeSet<_>>().len(), 8, "{series:?}");
    }

    #[test]
    fn bad_specs_are_errors() {
        let mut s = spec(P::Gd, &[]);
        s.window = 0;
        assert!(matches!(run_scan(&s), Err(SimError::Invalid(_))));
        let mut s = spec(P::Gd, &[9]);
        s.faults = vec![(NodeId(9), Fault::Factor { factor: 0.5 })];
        assert!(matches!(run_scan(&s), Err(SimError::Invalid(_))));
    }
}
