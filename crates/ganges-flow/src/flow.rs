//! Flows: stages of module instances, the edges between them, and running them.

use crate::mesh::{Mesh, Wire};
use crate::records::{Batch, RecordLayout, Summary};
use bytes::BytesMut;
use ganges_core::dq::{DqRouter, DqSettings};
use ganges_core::sched::{FurthestBehind, Job, Progress, ProgressMetric, Scheduler, Service, StreamKey};
use ganges_core::time::Time;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinError;
use tokio::task::{JoinSet, block_in_place};

/// How the batches of one stage reach the next (a point of flexibility, river §7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// Instance i to instance i (the stages have as many instances).
    Channel,
    /// Each record to the instance its key hashes to.
    Hash,
    /// Each record to the instance whose key range holds it ([`RecordLayout::range_of`]).
    Range,
    /// A distributed queue (river §3): each batch to any instance, by credits and chance.
    Dq,
}

/// Batches a producer may have untaken at one consumer of a static edge, and the credits
/// per consumer of a distributed queue: two, so a consumer always has the next batch.
const CREDITS: u32 = 2;

/// Records a partition gathers for one consumer before sending them as a batch.
const PARTITION_RECORDS: usize = 2048;

/// A flow failed.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("{stage} instance {instance}: {why}")]
    Module { stage: String, instance: usize, why: String },
    #[error("the flow is malformed: {0}")]
    Invalid(String),
    #[error("{stage} instance {instance} panicked")]
    Panicked { stage: String, instance: usize },
    /// Another worker process of the run failed or died.
    #[error("worker {rank} {why}")]
    Worker { rank: u32, why: String },
}

/// What a module puts downstream while it handles a batch.
#[derive(Debug, Default)]
pub struct Out {
    batches: Vec<Batch>,
}

impl Out {
    pub fn put(&mut self, batch: Batch) {
        if !batch.is_empty() {
            self.batches.push(batch);
        }
    }
}

/// One instance of a stage: it gets batches from upstream (in the order its consumer side
/// picks: furthest-behind producer first) and puts batches downstream.
pub trait Module: Send {
    fn on_batch(&mut self, batch: Batch, out: &mut Out) -> Result<(), String>;
    /// Every upstream producer has finished.
    fn on_end(&mut self, _out: &mut Out) -> Result<(), String> {
        Ok(())
    }

    /// What the module makes of the records it took, if it keeps a summary (asked once it
    /// has ended; it travels with the instance's report, to worker 0 over a mesh).
    fn summary(&self) -> Option<Summary> {
        None
    }
}

/// A source instance: the batches it produces, in order.
pub type Source = Box<dyn Iterator<Item = Result<Batch, String>> + Send>;

type MakeModule = Box<dyn Fn(usize) -> Box<dyn Module>>;
type MakeSource = Box<dyn Fn(usize) -> Source>;

struct Stage {
    name: String,
    instances: usize,
    kind: StageKind,
    /// The edge from the stage before.
    edge: Option<Edge>,
}

enum StageKind {
    Source(MakeSource),
    Module(MakeModule),
}

/// A program of stages (FL-1). The first is a source; each next one is connected to the one
/// before by an [`Edge`]; the last one's output is the flow's.
pub struct Flow {
    layout: RecordLayout,
    stages: Vec<Stage>,
    seed: u64,
    /// The last stage's output goes to a sink as it is made (`Flow::streamed`): here, or
    /// (`None`, on a worker other than 0) to worker 0's.
    sink: Option<Option<mpsc::Sender<Batch>>>,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stages: Vec<String> =
            self.stages.iter().map(|s| format!("{:?} -> {} x{}", s.edge, s.name, s.instances)).collect();
        f.debug_struct("Flow").field("stages", &stages).finish()
    }
}

/// What one instance did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceReport {
    pub batches_in: u64,
    pub records_in: u64,
    pub records_out: u64,
    /// Time in the module's own code.
    pub busy: Duration,
    /// From the start of the flow to this instance's end.
    pub finished: Duration,
    /// The module's summary of what it took ([`Module::summary`]).
    pub summary: Option<Summary>,
}

/// What one stage did: its instances, and the records they took and put.
#[derive(Clone, Debug, PartialEq)]
pub struct StageReport {
    pub name: String,
    pub instances: Vec<InstanceReport>,
}

impl StageReport {
    pub fn records_in(&self) -> u64 {
        self.instances.iter().map(|i| i.records_in).sum()
    }

    pub fn records_out(&self) -> u64 {
        self.instances.iter().map(|i| i.records_out).sum()
    }

    /// The instances' summaries together (their counts and checksums; order within each).
    pub fn summary(&self) -> Summary {
        self.instances.iter().filter_map(|i| i.summary).fold(Summary::default(), |all, s| all.then(&s, None))
    }
}

/// What a flow did, and the last stage's output, per instance.
#[derive(Debug)]
pub struct FlowReport {
    pub stages: Vec<StageReport>,
    pub output: Vec<Vec<Batch>>,
    pub seconds: f64,
}

impl Flow {
    /// A flow of records of `layout` starting with `instances` sources; `seed` makes the
    /// distributed queues' choices repeatable.
    pub fn source(
        layout: RecordLayout,
        name: &str,
        instances: usize,
        make: impl Fn(usize) -> Source + 'static,
    ) -> Flow {
        let kind = StageKind::Source(Box::new(make));
        Flow { layout, stages: vec![Stage { name: name.into(), instances, kind, edge: None }], seed: 1, sink: None }
    }

    /// Then `instances` of a module, fed from the stage before through `edge`.
    pub fn then(
        mut self,
        edge: Edge,
        name: &str,
        instances: usize,
        make: impl Fn(usize) -> Box<dyn Module> + 'static,
    ) -> Flow {
        let kind = StageKind::Module(Box::new(make));
        self.stages.push(Stage { name: name.into(), instances, kind, edge: Some(edge) });
        self
    }

    pub fn with_seed(mut self, seed: u64) -> Flow {
        self.seed = seed;
        self
    }

    /// The last stage's output goes to `sink` as it is made (waiting while the sink is
    /// full), not into the report: in one process, or on worker 0 of a mesh, `sink` is
    /// where; on the other workers `None`, and their output travels to worker 0's sink.
    pub fn streamed(mut self, sink: Option<mpsc::Sender<Batch>>) -> Flow {
        self.sink = Some(sink);
        self
    }

    fn validate(&self) -> Result<(), FlowError> {
        for (i, s) in self.stages.iter().enumerate() {
            if s.instances == 0 {
                return Err(FlowError::Invalid(format!("stage {} has no instances", s.name)));
            }
            if s.edge == Some(Edge::Channel) && self.stages[i - 1].instances != s.instances {
                return Err(FlowError::Invalid(format!(
                    "a channel joins instance i to instance i: {} has {}, {} has {}",
                    self.stages[i - 1].name,
                    self.stages[i - 1].instances,
                    s.name,
                    s.instances
                )));
            }
        }
        Ok(())
    }

    /// Run every instance to completion (each a task), with back-pressure on every edge.
    /// The first instance to fail fails the flow, and the others are stopped.
    ///
    /// Module and source code runs in `block_in_place`, so a module that computes for long
    /// (a sort) hands its worker's other tasks to the rest of the runtime rather than
    /// holding them: a flow needs tokio's multi-thread runtime.
    pub async fn run(self) -> Result<FlowReport, FlowError> {
        self.run_placed(None).await
    }

    /// How an instance's task ended badly, if it did: it panicked (or never finished), or its
    /// module returned an error.
    fn failure(
        &self,
        joined: &Result<(usize, usize, Ran), JoinError>,
        ids: &HashMap<tokio::task::Id, (usize, usize)>,
    ) -> Option<FlowError> {
        let name = |s: usize| self.stages[s].name.clone();
        match joined {
            Err(e) => {
                let (s, i) = ids[&e.id()];
                Some(FlowError::Panicked { stage: name(s), instance: i })
            }
            Ok((s, i, Err(why))) => Some(FlowError::Module { stage: name(*s), instance: *i, why: why.clone() }),
            Ok(_) => None,
        }
    }

    /// What a failure of this worker's instances reports, `first` the first to come: the
    /// others are stopped and drained, and a panic, or else an instance's own error, wins
    /// over an error that only says its neighbour had ended (which may come first).
    async fn cause(
        &self,
        first: FlowError,
        tasks: &mut JoinSet<(usize, usize, Ran)>,
        ids: &HashMap<tokio::task::Id, (usize, usize)>,
    ) -> FlowError {
        let weight = |e: &FlowError| match e {
            FlowError::Panicked { .. } => 2,
            FlowError::Module { why, .. } if why == CONSUMER_GONE || why == PRODUCERS_GONE => 0,
            _ => 1,
        };
        let mut cause = first;
        tasks.abort_all();
        while let Some(joined) = tasks.join_next().await {
            if matches!(&joined, Err(e) if e.is_cancelled()) {
                continue;
            }
            if let Some(e) = self.failure(&joined, ids).filter(|e| weight(e) > weight(&cause)) {
                cause = e;
            }
        }
        cause
    }

    /// Run this worker's part of the flow: instance `mesh.rank()` of every stage (each
    /// stage has one instance per worker), the others running theirs in their processes.
    /// Every worker of the mesh runs the same flows in the same order. Worker 0's report
    /// holds every instance's report and output; another worker's, its own.
    pub async fn run_on(self, mesh: &Arc<Mesh>) -> Result<FlowReport, FlowError> {
        self.run_placed(Some(mesh.clone())).await
    }

    async fn run_placed(mut self, mesh: Option<Arc<Mesh>>) -> Result<FlowReport, FlowError> {
        self.validate()?;
        if let Some(m) = &mesh
            && let Some(s) = self.stages.iter().find(|s| s.instances != m.size() as usize)
        {
            return Err(FlowError::Invalid(format!(
                "over {} workers every stage has one instance per worker; {} has {}",
                m.size(),
                s.name,
                s.instances
            )));
        }
        let started = Instant::now();
        let layout = self.layout;
        let here = |i: usize| mesh.as_ref().is_none_or(|m| m.rank() as usize == i);
        let (flow, frames) = match &mesh {
            Some(m) => {
                let (flow, rx) = m.open_flow();
                (flow, Some(rx))
            }
            None => (0, None),
        };
        // Each instance's ends: its outlet to the next stage (none for the last stage, whose
        // output is kept) and its inbox from the stage before (none for a source).
        let mut outlets: Vec<Vec<Option<Outlet>>> = self.stages.iter().map(|s| none(s.instances)).collect();
        let mut inboxes: Vec<Vec<Option<Inbox>>> = self.stages.iter().map(|s| none(s.instances)).collect();
        // Over a mesh: where frames from the others go, by edge (this worker's consumer's
        // inbox, its producer's credits).
        let mut ports: HashMap<u16, Ports> = HashMap::new();
        for s in 1..self.stages.len() {
            let (producers, consumers) = (self.stages[s - 1].instances, self.stages[s].instances);
            let edge = self.stages[s].edge.expect("every stage but the first has an edge");
            let (to_consumers, rx) = ends::<Msg>(consumers, mesh.as_ref(), flow, s as u16);
            let (credit_to, credits) = ends::<usize>(producers, mesh.as_ref(), flow, s as u16);
            if let Some(m) = &mesh {
                let me = m.rank() as usize;
                ports.insert(s as u16, (to_consumers[me].here(), credit_to[me].here()));
            }
            for (p, credits) in credits.into_iter().enumerate() {
                let Some(credits) = credits else { continue };
                let seed = self.seed ^ ((s as u64) << 32 | p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                outlets[s - 1][p] = Some(Outlet::new(edge, layout, p, to_consumers.clone(), credits, seed)?);
            }
            for (c, rx) in rx.into_iter().enumerate() {
                let Some(rx) = rx else { continue };
                inboxes[s][c] = Some(Inbox { rx, producers, me: c, credit_to: credit_to.clone() });
            }
        }
        let last = self.stages.len() - 1;
        // A streamed flow's sink here, and (on a worker other than 0) the task carrying what
        // is put to it to worker 0.
        let (sink, carrier) = match (self.sink.take(), &mesh) {
            (None, _) => (None, None),
            (Some(Some(tx)), m) if m.as_ref().is_none_or(|m| m.rank() == 0) => (Some(tx), None),
            (Some(None), Some(m)) if m.rank() != 0 => {
                let (tx, mut rx) = mpsc::channel::<Batch>(CREDITS as usize);
                let (m, from) = (m.clone(), m.rank());
                let carrier = tokio::spawn(async move {
                    while let Some(b) = rx.recv().await {
                        m.send(0, Wire::Output { flow, from, layout: b.layout(), data: b.bytes().clone() });
                    }
                });
                (Some(tx), Some(carrier))
            }
            _ => return Err(FlowError::Invalid("a streamed flow's sink is on worker 0 (or in one process)".into())),
        };
        let mut tasks: JoinSet<(usize, usize, Ran)> = JoinSet::new();
        let mut ids = HashMap::new();
        for (s, stage) in self.stages.iter().enumerate() {
            for i in (0..stage.instances).filter(|&i| here(i)) {
                let out = outlets[s][i].take();
                let kept = match (&sink, s == last) {
                    (Some(tx), true) => Last::Sink(tx.clone()),
                    _ => Last::Keep(vec![]),
                };
                let task = match &stage.kind {
                    StageKind::Source(make) => {
                        let source = make(i);
                        tasks.spawn(async move { (s, i, run_source(source, out, kept, started).await) })
                    }
                    StageKind::Module(make) => {
                        let module = make(i);
                        let inbox = inboxes[s][i].take().expect("a module stage has inboxes");
                        tasks.spawn(async move { (s, i, run_module(module, inbox, out, kept, started).await) })
                    }
                };
                ids.insert(task.id(), (s, i));
            }
        }
        // The sink's senders are the last stage's here; a carrier ends when they have.
        let sink = sink.filter(|_| carrier.is_none());
        let mut reports: Vec<StageReport> = self
            .stages
            .iter()
            .map(|s| StageReport { name: s.name.clone(), instances: vec![InstanceReport::default(); s.instances] })
            .collect();
        let mut output = vec![vec![]; self.stages[last].instances];
        // Frames from the other workers: routed to this worker's instances as they come;
        // the end of theirs (and their failures) to this loop.
        let (ended_tx, mut ended) = mpsc::unbounded_channel::<Wire>();
        if let Some(frames) = frames {
            tokio::spawn(route(frames, ports, layout, ended_tx));
        } else {
            drop(ended_tx);
        }
        let fail = |e: FlowError| {
            if let Some(m) = &mesh {
                let why = format!("failed: {e}");
                m.broadcast(|| Wire::Failed { from: m.rank(), why: why.clone() });
            }
            e
        };
        let mut others_done = 0;
        while !tasks.is_empty() {
            tokio::select! {
                joined = tasks.join_next() => {
                    let Some(joined) = joined else { break };
                    if let Some(e) = self.failure(&joined, &ids) {
                        return Err(fail(self.cause(e, &mut tasks, &ids).await));
                    }
                    if let Ok((s, i, Ok((report, kept)))) = joined {
                        reports[s].instances[i] = report;
                        if s == last {
                            output[i] = kept;
                        }
                    }
                }
                Some(w) = ended.recv() => {
                    if let Wire::Failed { from, why } = w {
                        tasks.abort_all();
                        return Err(FlowError::Worker { rank: from, why });
                    }
                    // Another worker's end came before ours.
                    others_done += usize::from(matches!(w, Wire::Done { .. }));
                    early_end(w, &mut reports, &mut output, sink.as_ref()).await?;
                }
            }
        }
        if let Some(m) = &mesh {
            let me = m.rank() as usize;
            if me != 0 {
                // What was put to the sink travels before the reports and `Done`.
                if let Some(c) = carrier {
                    let _ = c.await;
                }
                for b in std::mem::take(&mut output[me]) {
                    m.send(0, Wire::Output { flow, from: me as u32, layout: b.layout(), data: b.bytes().clone() });
                }
                for (s, r) in reports.iter().enumerate() {
                    m.send(0, Wire::Report { flow, edge: s as u16, from: me as u32, report: r.instances[me].clone() });
                }
                m.send(0, Wire::Done { flow, from: me as u32 });
            } else {
                // Everyone else's output and reports, until each is done (a worker's come
                // before its `Done`: one ordered connection).
                while others_done + 1 < m.size() as usize {
                    let w = ended.recv().await.ok_or_else(|| FlowError::Worker {
                        rank: 0,
                        why: "lost its mesh before the others were done".into(),
                    })?;
                    if let Wire::Failed { from, why } = w {
                        return Err(FlowError::Worker { rank: from, why });
                    }
                    others_done += usize::from(matches!(w, Wire::Done { .. }));
                    early_end(w, &mut reports, &mut output, sink.as_ref()).await?;
                }
            }
        }
        Ok(FlowReport { stages: reports, output, seconds: started.elapsed().as_secs_f64() })
    }
}

/// Another worker's output batch (put to the sink of a streamed flow) or report, kept in
/// this worker's (worker 0's) report.
async fn early_end(
    w: Wire,
    reports: &mut [StageReport],
    output: &mut [Vec<Batch>],
    sink: Option<&mpsc::Sender<Batch>>,
) -> Result<(), FlowError> {
    let bad = |rank: u32, why: String| FlowError::Worker { rank, why: format!("sent {why}") };
    match w {
        Wire::Output { from, data, layout, .. } => {
            let b = Batch::new(data, layout).map_err(|e| bad(from, e.to_string()))?;
            let slot =
                output.get_mut(from as usize).ok_or_else(|| bad(from, "output as an unknown instance".into()))?;
            match sink {
                Some(tx) => tx.send(b).await.map_err(|_| FlowError::Invalid("the flow's sink went away".into()))?,
                None => slot.push(b),
            }
        }
        Wire::Report { edge, from, report, .. } => {
            let slot = reports
                .get_mut(edge as usize)
                .and_then(|s| s.instances.get_mut(from as usize))
                .ok_or_else(|| bad(from, format!("a report of an unknown stage {edge} or instance")))?;
            *slot = report;
        }
        _ => {}
    }
    Ok(())
}

/// Where a producer's batches or a consumer's credits go: an instance here, or one on
/// another worker, reached as a frame put straight on the mesh (in order with every other
/// frame this worker sends: a producer's `End` is never overtaken by its `Done`).
#[derive(Debug)]
enum Port<T> {
    Here(mpsc::UnboundedSender<T>),
    There { mesh: Arc<Mesh>, flow: u16, edge: u16, to: u32 },
}

impl<T> Port<T> {
    fn here(&self) -> Option<mpsc::UnboundedSender<T>> {
        match self {
            Port::Here(tx) => Some(tx.clone()),
            Port::There { .. } => None,
        }
    }
}

/// One side of an edge, `n` instances: a channel to each instance here (with its receiver),
/// a port on the mesh to each on another worker.
type Ends<T> = (Vec<Port<T>>, Vec<Option<mpsc::UnboundedReceiver<T>>>);

fn ends<T>(n: usize, mesh: Option<&Arc<Mesh>>, flow: u16, edge: u16) -> Ends<T> {
    let mut ports = Vec::with_capacity(n);
    let mut rx = none(n);
    for (i, slot) in rx.iter_mut().enumerate() {
        match mesh {
            Some(m) if m.rank() as usize != i => ports.push(Port::There { mesh: m.clone(), flow, edge, to: i as u32 }),
            _ => {
                let (tx, r) = mpsc::unbounded_channel();
                ports.push(Port::Here(tx));
                *slot = Some(r);
            }
        }
    }
    (ports, rx)
}

impl<T> Clone for Port<T> {
    fn clone(&self) -> Port<T> {
        match self {
            Port::Here(tx) => Port::Here(tx.clone()),
            Port::There { mesh, flow, edge, to } => {
                Port::There { mesh: mesh.clone(), flow: *flow, edge: *edge, to: *to }
            }
        }
    }
}

impl Port<Msg> {
    fn send(&self, m: Msg) -> Result<(), ()> {
        match self {
            Port::Here(tx) => tx.send(m).map_err(|_| ()),
            Port::There { mesh, flow, edge, to } => {
                let (flow, edge, to) = (*flow, *edge, *to);
                mesh.send(
                    to,
                    match m {
                        Msg::Batch { from, batch, progress } => {
                            Wire::Batch { flow, edge, from: from as u32, to, progress, data: batch.bytes().clone() }
                        }
                        Msg::End => Wire::End { flow, edge, from: mesh.rank(), to },
                    },
                );
                Ok(())
            }
        }
    }
}

impl Port<usize> {
    fn send(&self, consumer: usize) -> Result<(), ()> {
        match self {
            Port::Here(tx) => tx.send(consumer).map_err(|_| ()),
            Port::There { mesh, flow, edge, to } => {
                mesh.send(*to, Wire::Credit { flow: *flow, edge: *edge, from: consumer as u32, to: *to });
                Ok(())
            }
        }
    }
}

/// Frames of one flow from the other workers, to this worker's instances; the end of the
/// others' parts (output, reports, done) and failures to the flow's loop.
async fn route(
    mut frames: mpsc::UnboundedReceiver<Wire>,
    ports: HashMap<u16, Ports>,
    layout: RecordLayout,
    ended: mpsc::UnboundedSender<Wire>,
) {
    let inbox = |edge: u16| ports.get(&edge).and_then(|p| p.0.as_ref());
    let credits = |edge: u16| ports.get(&edge).and_then(|p| p.1.as_ref());
    while let Some(w) = frames.recv().await {
        match w {
            Wire::Batch { edge, from, progress, data, .. } => match Batch::new(data, layout) {
                Ok(batch) => {
                    if let Some(tx) = inbox(edge) {
                        let _ = tx.send(Msg::Batch { from: from as usize, batch, progress });
                    }
                }
                Err(e) => {
                    let _ = ended.send(Wire::Failed { from, why: format!("sent a batch that is not records: {e}") });
                }
            },
            Wire::End { edge, .. } => {
                if let Some(tx) = inbox(edge) {
                    let _ = tx.send(Msg::End);
                }
            }
            Wire::Credit { edge, from, .. } => {
                if let Some(tx) = credits(edge) {
                    let _ = tx.send(from as usize);
                }
            }
            other => {
                let _ = ended.send(other);
            }
        }
    }
}

/// Where frames of one edge go on this worker: its consumer's inbox, its producer's credits.
type Ports = (Option<mpsc::UnboundedSender<Msg>>, Option<mpsc::UnboundedSender<usize>>);

fn none<T>(n: usize) -> Vec<Option<T>> {
    (0..n).map(|_| None).collect()
}

/// How an instance ended: its report and (for the last stage) its output.
type Ran = Result<(InstanceReport, Vec<Batch>), String>;

/// Why an instance fails when one it sends to ended before it: a knock-on of that one's end,
/// never the cause of a flow's failure (`Flow::cause`).
const CONSUMER_GONE: &str = "a consumer went away";
/// Why an instance fails when every one it takes from ended without saying so: likewise.
const PRODUCERS_GONE: &str = "every producer went away";

#[derive(Debug)]
enum Msg {
    Batch { from: usize, batch: Batch, progress: u64 },
    End,
}

/// A producer's end of an edge.
#[derive(Debug)]
struct Outlet {
    edge: Edge,
    layout: RecordLayout,
    me: usize,
    consumers: Vec<Port<Msg>>,
    credits: mpsc::UnboundedReceiver<usize>,
    /// Static edges: batches untaken at each consumer.
    untaken: Vec<u32>,
    router: Option<DqRouter>,
    /// Partitions: records gathered for each consumer (none for other edges).
    gathered: Vec<BytesMut>,
    /// Bytes put so far (the producer's progress, DQ-2).
    put: u64,
}

impl Outlet {
    fn new(
        edge: Edge,
        layout: RecordLayout,
        me: usize,
        consumers: Vec<Port<Msg>>,
        credits: mpsc::UnboundedReceiver<usize>,
        seed: u64,
    ) -> Result<Outlet, FlowError> {
        let n = consumers.len();
        let router = match edge {
            Edge::Dq => Some(
                DqRouter::new(n as u32, DqSettings::with_total(n as u32, CREDITS * n as u32), seed)
                    .map_err(|e| FlowError::Invalid(e.to_string()))?,
            ),
            _ => None,
        };
        Ok(Outlet {
            edge,
            layout,
            me,
            consumers,
            credits,
            untaken: vec![0; n],
            router,
            gathered: match edge {
                Edge::Hash | Edge::Range => (0..n).map(|_| Self::gather_buffer(layout)).collect(),
                _ => vec![],
            },
            put: 0,
        })
    }

    /// A partition's gather buffer, room for a whole batch from the start (grown by halves,
    /// it copied what it held at every step).
    fn gather_buffer(layout: RecordLayout) -> BytesMut {
        BytesMut::with_capacity(PARTITION_RECORDS * layout.record_bytes as usize)
    }

    fn on_credit(&mut self, c: usize) {
        match self.router.as_mut() {
            Some(r) => r.on_reply(c),
            None => self.untaken[c] -= 1,
        }
    }

    /// Wait for a credit to come back.
    async fn wait_credit(&mut self) -> Result<(), String> {
        let c = self.credits.recv().await.ok_or(CONSUMER_GONE)?;
        self.on_credit(c);
        while let Ok(c) = self.credits.try_recv() {
            self.on_credit(c);
        }
        Ok(())
    }

    async fn send_to(&mut self, c: usize, batch: Batch) -> Result<(), String> {
        if self.router.is_none() {
            while self.untaken[c] >= CREDITS {
                self.wait_credit().await?;
            }
            self.untaken[c] += 1;
        }
        self.put += batch.bytes().len() as u64;
        let msg = Msg::Batch { from: self.me, batch, progress: self.put };
        self.consumers[c].send(msg).map_err(|_| CONSUMER_GONE.to_string())
    }

    /// Put a batch downstream, waiting for credits (back-pressure).
    async fn put(&mut self, batch: Batch) -> Result<(), String> {
        match self.edge {
            Edge::Channel => self.send_to(self.me, batch).await,
            Edge::Dq => {
                let c = loop {
                    if let Some(c) = self.router.as_mut().expect("a dq edge routes").pick() {
                        break c;
                    }
                    self.wait_credit().await?;
                };
                self.send_to(c, batch).await
            }
            Edge::Hash | Edge::Range => {
                let n = self.consumers.len();
                let r = self.layout.record_bytes as usize;
                for rec in batch.records() {
                    let key = &rec[..self.layout.key_bytes as usize];
                    let c = if self.edge == Edge::Hash {
                        self.layout.hash_of(key, n)
                    } else {
                        self.layout.range_of(key, n)
                    };
                    self.gathered[c].extend_from_slice(rec);
                    if self.gathered[c].len() >= PARTITION_RECORDS * r {
                        self.flush(c).await?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Send what consumer `c`'s partition gathered, with a fresh buffer in its place.
    async fn flush(&mut self, c: usize) -> Result<(), String> {
        let data = std::mem::replace(&mut self.gathered[c], Self::gather_buffer(self.layout));
        self.send_gathered(c, data).await
    }

    async fn send_gathered(&mut self, c: usize, data: BytesMut) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        let batch = Batch::new(data.freeze(), self.layout).map_err(|e| e.to_string())?;
        self.send_to(c, batch).await
    }

    /// No more batches: send what partitions gathered (no buffers in their place), then tell
    /// every consumer.
    async fn finish(mut self) -> Result<(), String> {
        for (c, data) in std::mem::take(&mut self.gathered).into_iter().enumerate() {
            self.send_gathered(c, data).await?;
        }
        for c in &self.consumers {
            let _ = c.send(Msg::End);
        }
        Ok(())
    }
}

/// Where the last stage's batches go: kept for the report, or put to the flow's sink.
enum Last {
    Keep(Vec<Batch>),
    Sink(mpsc::Sender<Batch>),
}

impl Last {
    fn kept(self) -> Vec<Batch> {
        match self {
            Last::Keep(v) => v,
            Last::Sink(_) => vec![],
        }
    }
}

/// Put `batches` downstream, or (the last stage: no outlet) keep them or put them to the
/// sink. Returns the records put.
async fn forward(
    out: &mut Option<Outlet>,
    kept: &mut Last,
    batches: impl IntoIterator<Item = Batch>,
) -> Result<u64, String> {
    let mut records = 0;
    for b in batches {
        records += b.len() as u64;
        match (out.as_mut(), &mut *kept) {
            (Some(o), _) => o.put(b).await?,
            (None, Last::Keep(v)) => v.push(b),
            (None, Last::Sink(tx)) => tx.send(b).await.map_err(|_| "the flow's sink went away")?,
        }
    }
    Ok(records)
}

async fn run_source(mut source: Source, mut out: Option<Outlet>, mut kept: Last, started: Instant) -> Ran {
    let mut report = InstanceReport::default();
    loop {
        let t = Instant::now();
        let Some(batch) = block_in_place(|| source.next()) else { break };
        let batch = batch?;
        report.busy += t.elapsed();
        report.records_out += forward(&mut out, &mut kept, [batch]).await?;
    }
    if let Some(o) = out {
        o.finish().await?;
    }
    report.finished = started.elapsed();
    Ok((report, kept.kept()))
}

/// Batches a consumer holds, furthest-behind producer first: ganges-core's scheduler with
/// each producer a stream and its bytes put so far its progress.
#[derive(Debug)]
struct Waiting {
    sched: FurthestBehind,
    held: std::collections::HashMap<u64, (usize, Batch)>,
    next_id: u64,
    ended: usize,
    epoch: Instant,
}

impl Default for Waiting {
    fn default() -> Waiting {
        Waiting {
            sched: FurthestBehind::default(),
            held: Default::default(),
            next_id: 0,
            ended: 0,
            epoch: Instant::now(),
        }
    }
}

impl Waiting {
    fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    fn take(&mut self, m: Msg) {
        let Msg::Batch { from, batch, progress } = m else {
            self.ended += 1;
            return;
        };
        self.next_id += 1;
        self.sched.push(Job {
            id: self.next_id,
            stream: StreamKey { conn: from as u64, stream: 0 },
            file: Default::default(),
            bytes: batch.bytes().len() as u64,
            progress: Progress { done_bytes: progress, total_bytes: 0, metric: ProgressMetric::Bytes },
            service: Service::FURTHEST_BEHIND,
            arrival: self.now(),
        });
        self.held.insert(self.next_id, (from, batch));
    }

    fn pop(&mut self) -> Option<(usize, Batch)> {
        let job = self.sched.pop(self.now(), None)?;
        Some(self.held.remove(&job.id).expect("a queued batch is held"))
    }
}

/// A consumer's end of an edge: batches in, credits back to their producers.
#[derive(Debug)]
struct Inbox {
    rx: mpsc::UnboundedReceiver<Msg>,
    producers: usize,
    /// This consumer's index, which its credits carry.
    me: usize,
    credit_to: Vec<Port<usize>>,
}

/// A module instance: take batches from the inbox, furthest-behind producer first (DQ-2),
/// each credit going back once the module has taken its batch.
async fn run_module(
    mut module: Box<dyn Module>,
    mut inbox: Inbox,
    mut out: Option<Outlet>,
    mut kept: Last,
    started: Instant,
) -> Ran {
    let mut report = InstanceReport::default();
    let mut queue = Waiting::default();
    loop {
        while let Ok(m) = inbox.rx.try_recv() {
            queue.take(m);
        }
        let Some((from, batch)) = queue.pop() else {
            if queue.ended == inbox.producers {
                break;
            }
            let m = inbox.rx.recv().await.ok_or(PRODUCERS_GONE)?;
            queue.take(m);
            continue;
        };
        report.batches_in += 1;
        report.records_in += batch.len() as u64;
        let mut o = Out::default();
        let t = Instant::now();
        block_in_place(|| module.on_batch(batch, &mut o))?;
        report.busy += t.elapsed();
        // Taken: its producer may send the next (a producer gone has no use for it).
        let _ = inbox.credit_to[from].send(inbox.me);
        report.records_out += forward(&mut out, &mut kept, o.batches).await?;
    }
    let mut o = Out::default();
    let t = Instant::now();
    block_in_place(|| module.on_end(&mut o))?;
    report.busy += t.elapsed();
    report.summary = module.summary();
    report.records_out += forward(&mut out, &mut kept, o.batches).await?;
    if let Some(o) = out {
        o.finish().await?;
    }
    report.finished = started.elapsed();
    Ok((report, kept.kept()))
}
