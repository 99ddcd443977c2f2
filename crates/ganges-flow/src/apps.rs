//! River's six query primitives (river §7, Figure 15; FL-3) on datasets of records, each in
//! a static and a robust version. The two differ in their points of flexibility only:
//!
//! | | static | robust |
//! |---|---|---|
//! | read | each worker its own partition from the primary copies (`static`) | graduated declustering (`gd`) |
//! | worker to worker | a channel, or a partition the primitive needs | a distributed queue where the primitive allows one |
//! | write | each worker's output to its own server (`static`) | a distributed queue of the disks (`dq`) |
//!
//! - **scan**: read every record, count them and sum their checksums.
//! - **generate**: make records (the sort benchmark's) and write them.
//! - **filter**: keep the records a predicate takes, write them.
//! - **top-N**: sort each batch read into a run, write the runs (through a distributed queue
//!   in front of the sorters, when robust), then merge the runs' heads; continuing the merge
//!   gives the next N ([`topn_next`]).
//! - **join**: hash both datasets on a key prefix across the workers, build a table of the
//!   left side, probe it with the right, write each pair.
//! - **sort**: one pass (river Figure 17): range-partition on the key's top bits, sort, write
//!   the sorted runs, range after range, so the output in written order is the sorted data;
//!   robust, through a distributed queue a whole run at a time, merged as it is written.

use crate::flow::{Edge, Flow, FlowError, FlowReport, Module, Out, Source, StageReport};
use crate::mesh::Mesh;
use crate::records::{Batch, Merge, RecordLayout, Summary};
use crate::storage::{self, OUTPUT_BLOCK_BYTES, ReadReports, Sink, Streaming};
use bytes::{Bytes, BytesMut};
use ganges_client::scan::{ReadOptions, open_scan};
use ganges_client::write::WriteSource;
use ganges_client::{Client, ClientError};
use ganges_core::datagen::Generator;
use ganges_core::route::ReadPolicyKind;
use ganges_proto::manifest::{DatasetName, Manifest};
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Bytes of a sorted run a sorter hands the distributed queue whole (river §7.2.2: k runs
/// per sorter). Two output blocks: coarse enough to keep a run together on one disk, fine
/// enough that the queue can still even out the disks.
const SORT_RUN_BYTES: usize = 2 << 20;
/// A sort worker sorts what it took each time it holds this much (`SortAll`).
const SORT_CHUNK_BYTES: usize = 8 << 20;

/// How the robust primitives read: graduated declustering with the servers' runs (GD-2 with
/// GD-5, `gd-batch`). With the disks shared by the reads and the output's writes, runs save
/// more seeks than in a plain scan: in `ganges bench apps` (16 servers, 0 to 16 slow disks)
/// the robust filter read 92-95% of the ideal with runs and 89-94% without (`gd`), and
/// the others gained up to 3 points or lost 1 at most.
pub const ROBUST_READS: ReadPolicyKind = ReadPolicyKind::GdBatch;

/// A primitive failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Flow(#[from] FlowError),
    #[error("{0}")]
    Invalid(String),
}

/// Where and how a primitive runs.
#[derive(Clone, Debug)]
pub struct Setup {
    pub client: Arc<Client>,
    /// Worker instances of each stage.
    pub workers: usize,
    /// The robust version (GD reads with runs, distributed queues) or the static one.
    pub robust: bool,
    /// Seeds the distributed queues' choices.
    pub seed: u64,
    /// Workers as processes: this one's place among them (it runs instance `rank` of each
    /// stage; worker 0 writes the output and reports). `None`: every instance a task here.
    pub mesh: Option<Arc<Mesh>>,
}

/// What a primitive did.
#[derive(Debug, Default)]
pub struct AppReport {
    /// From the first read to the output committed.
    pub seconds: f64,
    /// Of which writing the output.
    pub write_seconds: f64,
    pub bytes_read: u64,
    /// Read from a copy other than the primary (GD moving work off slow disks).
    pub backup_bytes: u64,
    pub bytes_written: u64,
    /// The output dataset, when the primitive writes one.
    pub output: Option<Manifest>,
    /// The records read (scan) or written (the others).
    pub summary: Summary,
    /// Sort: the records it took (their count and checksum are the output's when it is right).
    pub input: Summary,
    /// Top-N: the records found.
    pub top: Vec<Bytes>,
    pub stages: Vec<StageReport>,
}

/// One of the primitives, on what (what `ganges run` and Python's `Cluster.run` run).
#[derive(Clone, Debug)]
pub enum Primitive {
    Scan {
        input: DatasetName,
    },
    /// `records` 100-byte records from the record generator seeded `seed`.
    Generate {
        output: DatasetName,
        records: u64,
        seed: u64,
    },
    /// The records whose key is in the lowest `keep` share of the key space.
    Filter {
        input: DatasetName,
        output: DatasetName,
        keep: f64,
    },
    /// `after`: records already seen, to continue the merge from the runs alone.
    TopN {
        input: DatasetName,
        runs: DatasetName,
        n: usize,
        after: Option<usize>,
    },
    Join {
        left: DatasetName,
        right: DatasetName,
        output: DatasetName,
        key_bytes: u32,
    },
    /// `check`: read the output back in written order and check it as valsort does.
    Sort {
        input: DatasetName,
        output: DatasetName,
        check: bool,
    },
    Check {
        name: DatasetName,
    },
}

/// What running a primitive gave.
#[derive(Debug)]
pub enum Ran {
    /// What it did; for a sort asked to check, its output read back (on the leader).
    Report(Box<AppReport>, Option<Summary>),
    /// A top-N continued from its runs.
    Top(Vec<Bytes>),
    Check(Summary),
}

impl Primitive {
    pub async fn run(&self, setup: &Setup) -> Result<Ran, AppError> {
        let report = match self {
            Primitive::Scan { input } => scan(setup, input).await?,
            Primitive::Generate { output, records, seed } => generate(setup, output, *records, *seed).await?,
            Primitive::Filter { input, output, keep } => filter(setup, input, output, key_below(*keep)).await?,
            Primitive::TopN { runs, n, after: Some(after), .. } => {
                return Ok(Ran::Top(topn_next(&setup.client, runs, *after, *n).await?));
            }
            Primitive::TopN { input, runs, n, after: None } => topn(setup, input, runs, *n).await?,
            Primitive::Join { left, right, output, key_bytes } => join(setup, left, right, output, *key_bytes).await?,
            Primitive::Sort { input, output, check: wanted } => {
                let r = sort(setup, input, output).await?;
                let read_back = match *wanted && setup.leads() {
                    true => Some(check(&setup.client, output).await?),
                    false => None,
                };
                return Ok(Ran::Report(Box::new(r), read_back));
            }
            Primitive::Check { name } => return Ok(Ran::Check(check(&setup.client, name).await?)),
        };
        Ok(Ran::Report(Box::new(report), None))
    }
}

impl Setup {
    /// Every instance a task of this process.
    pub fn in_process(client: Arc<Client>, workers: usize, robust: bool, seed: u64) -> Setup {
        Setup { client, workers, robust, seed, mesh: None }
    }

    /// Whether this process writes the output and holds the whole report.
    pub fn leads(&self) -> bool {
        self.mesh.as_ref().is_none_or(|m| m.rank() == 0)
    }

    fn here(&self, instance: usize) -> bool {
        self.mesh.as_ref().is_none_or(|m| m.rank() as usize == instance)
    }

    async fn run(&self, flow: Flow) -> Result<FlowReport, AppError> {
        Ok(match &self.mesh {
            Some(m) => flow.run_on(m).await?,
            None => flow.run().await?,
        })
    }

    fn read_options(&self) -> ReadOptions {
        ReadOptions::new(if self.robust { ROBUST_READS } else { ReadPolicyKind::Static })
    }

    fn sink(&self) -> Sink {
        if self.robust { Sink::Dq } else { Sink::Static }
    }

    fn check(&self) -> Result<(), AppError> {
        if self.workers == 0 {
            return Err(AppError::Invalid("a flow needs at least one worker".into()));
        }
        if let Some(m) = &self.mesh
            && m.size() as usize != self.workers
        {
            return Err(AppError::Invalid(format!("{} workers on a mesh of {}", self.workers, m.size())));
        }
        Ok(())
    }

    /// The dataset `name`, and the sources of the workers here reading it (one partition of
    /// it per worker; `None` for the workers elsewhere).
    async fn sources(
        &self,
        name: &DatasetName,
        reports: &ReadReports,
    ) -> Result<(RecordLayout, u64, Vec<Option<Source>>), AppError> {
        let manifest = Arc::new(self.client.manifest(name).await?);
        let layout = storage::layout_of(&manifest)?;
        let records = manifest.total_bytes() / u64::from(layout.record_bytes);
        let parts = manifest.shape.unit_partitions(self.workers, u64::from(layout.record_bytes));
        let mut sources = vec![];
        for (i, p) in parts.into_iter().enumerate() {
            sources.push(match self.here(i) {
                true => Some(storage::read_source(&self.client, &manifest, layout, self.read_options(), p, reports)?),
                false => None,
            });
        }
        Ok((layout, records, sources))
    }

    /// The sources as a flow's first stage (each made once, by its instance).
    fn stage(sources: Vec<Option<Source>>) -> impl Fn(usize) -> Source + 'static {
        let slots: Mutex<Vec<Option<Source>>> = Mutex::new(sources);
        move |i| slots.lock().unwrap_or_else(|e| e.into_inner())[i].take().expect("each source is made once, here")
    }

    /// Run `flow` and write its output as `name` (records of `layout`); `report` makes the
    /// primitive's report of the flow's, and the write fills it in. Robust, the output goes
    /// through a distributed queue of the disks as the flow makes it (`Streaming`); static,
    /// each worker's share to its own server once the flow has ended (`write`).
    async fn run_writing(
        &self,
        flow: Flow,
        name: &DatasetName,
        layout: RecordLayout,
        report: impl FnOnce(FlowReport) -> AppReport,
    ) -> Result<AppReport, AppError> {
        if !self.robust {
            let mut ran = self.run(flow).await?;
            let output = std::mem::take(&mut ran.output);
            let mut r = report(ran);
            self.write(name, layout, &output, &mut r).await?;
            return Ok(r);
        }
        let mut streaming = self
            .leads()
            .then(|| Streaming::start(&self.client, name.clone(), layout, self.workers as u32, OUTPUT_BLOCK_BYTES));
        let ran = match self.run(flow.streamed(streaming.as_mut().map(Streaming::sink))).await {
            Ok(ran) => ran,
            Err(e) => {
                let cause = match streaming {
                    Some(s) => s.abort().await,
                    None => None,
                };
                return Err(cause.map_or(e, AppError::from));
            }
        };
        let mut r = report(ran);
        if let Some(s) = streaming {
            let t = Instant::now();
            let (out, summary) = s.commit().await?;
            r.write_seconds = t.elapsed().as_secs_f64();
            r.summary = summary;
            r.bytes_written = out.manifest.total_bytes();
            r.output = Some(out.manifest);
        }
        Ok(r)
    }

    /// Write a flow's output as `name`, and fill in the report.
    async fn write(
        &self,
        name: &DatasetName,
        layout: RecordLayout,
        output: &[Vec<Batch>],
        report: &mut AppReport,
    ) -> Result<(), AppError> {
        if !self.leads() {
            return Ok(());
        }
        // The output's count and checksum, made beside the write rather than before it.
        let batches: Vec<Batch> = output.iter().flatten().cloned().collect();
        let summing = tokio::task::spawn_blocking(move || {
            let mut s = Summary::default();
            for b in &batches {
                s.add(b);
            }
            s
        });
        let t = Instant::now();
        let out = storage::write_output(&self.client, name, layout, output, self.sink(), self.workers as u32).await?;
        report.write_seconds = t.elapsed().as_secs_f64();
        report.summary = summing.await.map_err(|e| AppError::Invalid(format!("summing the output: {e}")))?;
        report.bytes_written = out.manifest.total_bytes();
        report.output = Some(out.manifest);
        Ok(())
    }
}

impl AppReport {
    /// A report of a one-flow primitive: its stages, and what its sources (the first
    /// stage) read.
    fn of_reads(stages: Vec<StageReport>, reports: &ReadReports, layout: RecordLayout) -> AppReport {
        let mut report = AppReport::default();
        reads_into(&mut report, reports, &stages[0], layout);
        report.stages = stages;
        report
    }
}

/// The bytes the sources (`read`) put out, and the reads' bytes from backup copies (this
/// process's reads: over a mesh, worker 0's own).
fn reads_into(report: &mut AppReport, reports: &ReadReports, read: &StageReport, layout: RecordLayout) {
    report.bytes_read += read.records_out() * u64::from(layout.record_bytes);
    let reads = std::mem::take(&mut *reports.lock().unwrap_or_else(|e| e.into_inner()));
    for r in reads {
        report.backup_bytes += r.stats.backup_bytes();
    }
}

/// Parallel scan: every record of `input` read, counted and checksummed.
pub async fn scan(setup: &Setup, input: &DatasetName) -> Result<AppReport, AppError> {
    setup.check()?;
    let reports = ReadReports::default();
    let t = Instant::now();
    let (layout, _, sources) = setup.sources(input, &reports).await?;
    struct Count(Summary);
    impl Module for Count {
        fn on_batch(&mut self, batch: Batch, _: &mut Out) -> Result<(), String> {
            self.0.add(&batch);
            Ok(())
        }
        fn summary(&self) -> Option<Summary> {
            Some(self.0)
        }
    }
    let flow = Flow::source(layout, "read", setup.workers, Setup::stage(sources))
        .then(Edge::Channel, "count", setup.workers, |_| Box::new(Count(Summary::default())))
        .with_seed(setup.seed);
    let ran = setup.run(flow).await?;
    let summary = ran.stages[1].summary();
    let mut report = AppReport { summary, ..AppReport::of_reads(ran.stages, &reports, layout) };
    report.seconds = t.elapsed().as_secs_f64();
    Ok(report)
}

/// Parallel generate: `records` sort-benchmark records (`seed`'s), written as `output`. The
/// generator is the writers' own source: each makes its records as its blocks go out, so
/// making them overlaps writing them (through a distributed queue of the disks, when robust).
///
/// Over a mesh, worker 0's writers make and write every record (the others have no part).
pub async fn generate(setup: &Setup, output: &DatasetName, records: u64, seed: u64) -> Result<AppReport, AppError> {
    setup.check()?;
    if !setup.leads() {
        return Ok(AppReport::default());
    }
    let layout = RecordLayout::SORT_BENCHMARK;
    let t = Instant::now();
    let total = records * u64::from(layout.record_bytes);
    let source = WriteSource::Generated(Generator::Records { seed });
    let out = storage::write_records(&setup.client, output, layout, source, total, setup.sink(), setup.workers as u32)
        .await?;
    let seconds = t.elapsed().as_secs_f64();
    let mut report = AppReport {
        seconds,
        write_seconds: seconds,
        bytes_written: out.manifest.total_bytes(),
        output: Some(out.manifest),
        ..AppReport::default()
    };
    // Counted, not checksummed: the records were made by the writers.
    report.summary.records = records;
    Ok(report)
}

/// A predicate on a record.
pub type Predicate = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// The predicate keeping the records whose key falls in the lowest `share` of the key space
/// (a share of uniform keys).
pub fn key_below(share: f64) -> Predicate {
    let cut = (share.clamp(0.0, 1.0) * u64::MAX as f64) as u64;
    Arc::new(move |rec: &[u8]| {
        let mut top = [0u8; 8];
        let k = rec.len().min(8);
        top[..k].copy_from_slice(&rec[..k]);
        u64::from_be_bytes(top) < cut
    })
}

/// Parallel filter: the records of `input` that `keep` takes, written as `output`.
pub async fn filter(
    setup: &Setup,
    input: &DatasetName,
    output: &DatasetName,
    keep: Predicate,
) -> Result<AppReport, AppError> {
    setup.check()?;
    let reports = ReadReports::default();
    let t = Instant::now();
    let (layout, _, sources) = setup.sources(input, &reports).await?;
    struct Filter(Predicate, RecordLayout);
    impl Module for Filter {
        fn on_batch(&mut self, batch: Batch, out: &mut Out) -> Result<(), String> {
            let mut kept = BytesMut::new();
            for rec in batch.records().filter(|r| (self.0)(r)) {
                kept.extend_from_slice(rec);
            }
            out.put(Batch::new(kept.freeze(), self.1).map_err(|e| e.to_string())?);
            Ok(())
        }
    }
    let flow = Flow::source(layout, "read", setup.workers, Setup::stage(sources))
        .then(Edge::Channel, "filter", setup.workers, move |_| Box::new(Filter(keep.clone(), layout)))
        .with_seed(setup.seed);
    let mut report =
        setup.run_writing(flow, output, layout, |ran| AppReport::of_reads(ran.stages, &reports, layout)).await?;
    report.seconds = t.elapsed().as_secs_f64();
    Ok(report)
}

/// Sorts each batch it takes into a run.
struct SortBatches;

impl Module for SortBatches {
    fn on_batch(&mut self, batch: Batch, out: &mut Out) -> Result<(), String> {
        out.put(batch.sorted());
        Ok(())
    }
}

/// Top-N, first phase and first merge: every batch of `input` sorted into a run, the runs
/// written as `runs`, and the first `n` records in key order merged from the runs' heads.
pub async fn topn(setup: &Setup, input: &DatasetName, runs: &DatasetName, n: usize) -> Result<AppReport, AppError> {
    setup.check()?;
    let reports = ReadReports::default();
    let t = Instant::now();
    let (layout, _, sources) = setup.sources(input, &reports).await?;
    let edge = if setup.robust { Edge::Dq } else { Edge::Channel };
    let flow = Flow::source(layout, "read", setup.workers, Setup::stage(sources))
        .then(edge, "sort", setup.workers, |_| Box::new(SortBatches))
        .with_seed(setup.seed);
    let ran = setup.run(flow).await?;
    let mut report = AppReport::of_reads(ran.stages, &reports, layout);
    // A run is one block or so: runs of one block to the queue.
    setup.write(runs, layout, &ran.output, &mut report).await?;
    let heads: Vec<Batch> = ran.output.into_iter().flatten().collect();
    report.top = merge(&heads, 0, n);
    report.seconds = t.elapsed().as_secs_f64();
    Ok(report)
}

/// Records `after..after + n` in key order of sorted `runs`, by a merge of their heads.
pub fn merge(runs: &[Batch], after: usize, n: usize) -> Vec<Bytes> {
    // Min-heap of (key, run, index) by the key.
    let mut heap = BinaryHeap::new();
    for (r, b) in runs.iter().enumerate() {
        if !b.is_empty() {
            heap.push(std::cmp::Reverse((b.key(0), r, 0usize)));
        }
    }
    let mut out = vec![];
    let mut skipped = 0;
    while let Some(std::cmp::Reverse((_, r, i))) = heap.pop() {
        if skipped < after {
            skipped += 1;
        } else {
            out.push(runs[r].slice(i, i + 1).bytes().clone());
            if out.len() == n {
                break;
            }
        }
        if i + 1 < runs[r].len() {
            heap.push(std::cmp::Reverse((runs[r].key(i + 1), r, i + 1)));
        }
    }
    out
}

/// A dataset's records in the order they were written: one collective scan (a consumer per
/// fragment), each block put where its writers put it (a DQ-written dataset's origin map,
/// as `dataset get` exports it; any other's own offset).
pub async fn read_written(client: &Arc<Client>, name: &DatasetName) -> Result<(RecordLayout, Vec<Batch>), AppError> {
    let manifest = Arc::new(client.manifest(name).await?);
    let layout = storage::layout_of(&manifest)?;
    if let Some(o) = &manifest.origin {
        o.validate(&manifest.shape).map_err(|e| AppError::Invalid(format!("`{name}`: {e}")))?;
    }
    let streams = open_scan(client, &manifest, None, ReadOptions::new(ROBUST_READS))?;
    let read = futures_util::future::try_join_all(streams.into_iter().map(|mut s| async move {
        let mut blocks = vec![];
        while let Some(b) = s.next().await? {
            blocks.push(b);
        }
        Ok::<_, ClientError>(blocks)
    }))
    .await?;
    let mut data = vec![0u8; manifest.total_bytes() as usize];
    for b in read.into_iter().flatten() {
        let at = match &manifest.origin {
            Some(o) => o.source_offset(&manifest.shape, b.dataset_offset).expect("validated"),
            None => b.dataset_offset,
        } as usize;
        data[at..at + b.data.len()].copy_from_slice(&b.data);
    }
    let all = Batch::new(Bytes::from(data), layout).map_err(|e| AppError::Invalid(format!("`{name}`: {e}")))?;
    Ok((layout, vec![all]))
}

/// Top-N continued: records `after..after + n` in key order, merged from the runs a
/// [`topn`] wrote (each stretch of ascending keys in written order is a sorted run).
pub async fn topn_next(
    client: &Arc<Client>,
    runs: &DatasetName,
    after: usize,
    n: usize,
) -> Result<Vec<Bytes>, AppError> {
    let (_, all) = read_written(client, runs).await?;
    let mut sorted = vec![];
    for b in all {
        let mut start = 0;
        for i in 1..b.len() {
            if b.key(i) < b.key(i - 1) {
                sorted.push(b.slice(start, i));
                start = i;
            }
        }
        sorted.push(b.slice(start, b.len()));
    }
    Ok(merge(&sorted, after, n))
}

/// A join key: the first `bytes` (1..=8) of the record, as a number.
fn join_key(rec: &[u8], bytes: usize) -> u64 {
    // A record of 8 bytes or more (every record but the smallest): one load and a shift,
    // where a copy of `bytes` bytes was a call to memcpy per key.
    if let Some(top) = rec.first_chunk::<8>() {
        return u64::from_be_bytes(*top) >> (8 * (8 - bytes));
    }
    let mut top = [0u8; 8];
    top[..bytes].copy_from_slice(&rec[..bytes]);
    u64::from_be_bytes(top) >> (8 * (8 - bytes))
}

/// One worker's share of the left side: its records end to end, and an open-addressed table
/// of their join keys' hashes, filled as the records come (so the build ends with the
/// reads). A probe reads one slot (and its neighbours, under a third full) and, where the
/// hash matches, the record itself: a cache miss or two a key, where a chained table of
/// record locations took three.
struct Table {
    key_bytes: usize,
    record_bytes: usize,
    /// The records taken, end to end.
    data: Vec<u8>,
    records: usize,
    /// The records it makes room for when the first come.
    expected: usize,
    /// (the hash's top 32 bits, record index); `EMPTY` where no record is. A power of two,
    /// at most a third full.
    slots: Vec<(u32, u32)>,
}

const EMPTY: u32 = u32::MAX;

/// Mixed into a join key before it is hashed for a table: a worker's keys all went to it by
/// the hash partition's hash (`RecordLayout::hash_of`), so a table's hash must not follow it.
const TABLE_SALT: u64 = 0x6a09_e667_f3bc_c908;

impl Table {
    /// A table that makes room for about `expected` records (and grows past them). Its
    /// slots are made by the first `add`, on the worker's own thread.
    fn new(expected: u64, layout: RecordLayout, key_bytes: usize) -> Table {
        let expected = expected as usize;
        Table {
            key_bytes,
            record_bytes: layout.record_bytes as usize,
            data: Vec::with_capacity((expected + expected / 16) * layout.record_bytes as usize),
            records: 0,
            expected: expected + expected / 16,
            slots: vec![],
        }
    }

    fn slots_for(records: usize) -> usize {
        (3 * records).next_power_of_two().max(2)
    }

    fn key(&self, rec: &[u8]) -> u64 {
        join_key(rec, self.key_bytes)
    }

    fn hash(key: u64) -> u64 {
        ganges_core::datagen::mix64(key ^ TABLE_SALT)
    }

    /// Record `i`, with key hash `h`, in the first free slot from the hash's own.
    fn place(slots: &mut [(u32, u32)], h: u64, i: usize) {
        let mask = slots.len() - 1;
        let mut s = h as usize & mask;
        while slots[s].1 != EMPTY {
            s = (s + 1) & mask;
        }
        slots[s] = ((h >> 32) as u32, i as u32);
    }

    fn add(&mut self, batch: &Batch) -> Result<(), String> {
        let records = self.records + batch.len();
        if records >= EMPTY as usize {
            return Err(format!("more than {EMPTY} records on one worker's side of a join: use more workers"));
        }
        if 3 * records > self.slots.len() {
            self.grow(if self.slots.is_empty() { records.max(self.expected) } else { 2 * records });
        }
        for rec in batch.records() {
            let h = Table::hash(self.key(rec));
            Table::place(&mut self.slots, h, self.records);
            self.records += 1;
        }
        self.data.extend_from_slice(batch.bytes());
        Ok(())
    }

    /// Room for `records` (the first records, or more than the share expected: skewed
    /// keys): every record placed again.
    fn grow(&mut self, records: usize) {
        self.slots = vec![(0, EMPTY); Table::slots_for(records)];
        for i in 0..self.records {
            let h = Table::hash(self.key(&self.data[i * self.record_bytes..]));
            Table::place(&mut self.slots, h, i);
        }
    }

    /// The records whose join key is the key of `rec`.
    fn matching<'a>(&'a self, rec: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let key = self.key(rec);
        let h = Table::hash(key);
        // No slots: nothing was added.
        let mask = self.slots.len().saturating_sub(1);
        let mut s = h as usize & mask;
        std::iter::from_fn(move || {
            loop {
                let (top, i) = *self.slots.get(s)?;
                if i == EMPTY {
                    return None;
                }
                s = (s + 1) & mask;
                let left = &self.data[i as usize * self.record_bytes..][..self.record_bytes];
                if top == (h >> 32) as u32 && self.key(left) == key {
                    return Some(left);
                }
            }
        })
    }
}

/// Parallel hash join: every pair of a record of `left` and one of `right` whose first
/// `key_bytes` bytes are equal, written as `output` (the left record, then the right one).
pub async fn join(
    setup: &Setup,
    left: &DatasetName,
    right: &DatasetName,
    output: &DatasetName,
    key_bytes: u32,
) -> Result<AppReport, AppError> {
    setup.check()?;
    if !(1..=8).contains(&key_bytes) {
        return Err(AppError::Invalid(format!("a join key is 1 to 8 bytes, not {key_bytes}")));
    }
    let reports = ReadReports::default();
    let t = Instant::now();
    // Build: the left side hashed to the workers, each keeping its share in its table as it
    // comes (room made for an even share).
    let (l_layout, l_records, sources) = setup.sources(left, &reports).await?;
    let share = l_records.div_ceil(setup.workers as u64);
    let k = key_bytes as usize;
    let table = |i| Table::new(if setup.here(i) { share } else { 0 }, l_layout, k);
    let tables: Arc<Vec<Mutex<Table>>> = Arc::new((0..setup.workers).map(|i| Mutex::new(table(i))).collect());
    let hashed = RecordLayout { key_bytes, ..l_layout };
    struct Build(Arc<Vec<Mutex<Table>>>, usize);
    impl Module for Build {
        fn on_batch(&mut self, batch: Batch, _: &mut Out) -> Result<(), String> {
            self.0[self.1].lock().unwrap_or_else(|e| e.into_inner()).add(&batch)
        }
    }
    let tb = tables.clone();
    let built = Flow::source(hashed, "read left", setup.workers, Setup::stage(sources))
        .then(Edge::Hash, "build", setup.workers, move |i| Box::new(Build(tb.clone(), i)))
        .with_seed(setup.seed);
    let built = setup.run(built).await?;
    // Probe: the right side hashed the same way, each record met with its worker's table.
    let (r_layout, _, sources) = setup.sources(right, &reports).await?;
    if r_layout.record_bytes != l_layout.record_bytes {
        return Err(AppError::Invalid(format!(
            "`{left}` has {}-byte records and `{right}` {}-byte ones",
            l_layout.record_bytes, r_layout.record_bytes
        )));
    }
    let joined = RecordLayout { record_bytes: 2 * l_layout.record_bytes, key_bytes };
    /// Also the output's bytes per input byte so far, to size the next batch's output.
    struct Probe(Arc<Vec<Mutex<Table>>>, usize, RecordLayout, f64);
    impl Module for Probe {
        fn on_batch(&mut self, batch: Batch, out: &mut Out) -> Result<(), String> {
            let t = self.0[self.1].lock().unwrap_or_else(|e| e.into_inner());
            let taken = batch.bytes().len();
            let mut pairs = BytesMut::with_capacity((taken as f64 * self.3 * 1.25) as usize);
            for rec in batch.records() {
                for left in t.matching(rec) {
                    pairs.extend_from_slice(left);
                    pairs.extend_from_slice(rec);
                }
            }
            self.3 = pairs.len() as f64 / taken.max(1) as f64;
            out.put(Batch::new(pairs.freeze(), self.2).map_err(|e| e.to_string())?);
            Ok(())
        }
    }
    // The tables go when the probe's last instance does, before the output is written.
    let tp = tables;
    let probed = Flow::source(hashed, "read right", setup.workers, Setup::stage(sources))
        .then(Edge::Hash, "probe", setup.workers, move |i| Box::new(Probe(tp.clone(), i, joined, 0.0)))
        .with_seed(setup.seed);
    let mut report = setup
        .run_writing(probed, output, joined, |probed| {
            let mut report = AppReport::default();
            reads_into(&mut report, &reports, &built.stages[0], l_layout);
            reads_into(&mut report, &reports, &probed.stages[0], r_layout);
            report.stages = built.stages;
            report.stages.extend(probed.stages);
            report
        })
        .await?;
    report.seconds = t.elapsed().as_secs_f64();
    Ok(report)
}

/// Sorts what it takes as it comes, a run of [`SORT_CHUNK_BYTES`] at a time (so most of
/// the sort's work is done while the disks still read). At the end it puts out its runs:
/// merged into key order in batches of [`SORT_RUN_BYTES`] (`merge`), or as they are, for
/// the writer to merge as it writes. Each record is copied twice, into its run and into
/// the merge, where sorting everything at the end copied it once but left the disks idle
/// while all of it sorted.
struct SortAll {
    layout: RecordLayout,
    merge: bool,
    taken: Vec<Batch>,
    runs: Vec<Batch>,
    /// What it took (the sort's input: the output must be the same records).
    seen: Summary,
}

impl SortAll {
    fn new(layout: RecordLayout, merge: bool) -> SortAll {
        SortAll { layout, merge, taken: vec![], runs: vec![], seen: Summary::default() }
    }

    fn sort_taken(&mut self) {
        if !self.taken.is_empty() {
            self.runs.push(crate::records::sorted_records(&std::mem::take(&mut self.taken), self.layout));
        }
    }
}

impl Module for SortAll {
    fn on_batch(&mut self, batch: Batch, _: &mut Out) -> Result<(), String> {
        self.seen.add(&batch);
        self.taken.push(batch);
        if self.taken.iter().map(|b| b.bytes().len()).sum::<usize>() >= SORT_CHUNK_BYTES {
            self.sort_taken();
        }
        Ok(())
    }

    fn summary(&self) -> Option<Summary> {
        Some(self.seen)
    }

    fn on_end(&mut self, out: &mut Out) -> Result<(), String> {
        self.sort_taken();
        let runs = std::mem::take(&mut self.runs);
        if !self.merge {
            runs.into_iter().for_each(|r| out.put(r));
            return Ok(());
        }
        let mut merge = Merge::new(runs, self.layout);
        let per = (SORT_RUN_BYTES / self.layout.record_bytes as usize).max(1);
        while let Some(b) = merge.next_batch(per) {
            out.put(b);
        }
        Ok(())
    }
}

/// One-pass external sort of `input` into `output` (river Figure 17): range partition on
/// the key's top bits, each worker sorts its range, and `output` read in written order is
/// sorted. Static, each worker merges its runs and writes its range to its own server.
/// Robust, the leader writes each worker's range in turn through a distributed queue, a
/// sorted run of [`SORT_RUN_BYTES`] to a block (a unit of the queue, so a run lands whole on
/// one disk); in one process it merges each range's runs as the queue takes them, so the
/// merge overlaps the write rather than holding up its start.
pub async fn sort(setup: &Setup, input: &DatasetName, output: &DatasetName) -> Result<AppReport, AppError> {
    setup.check()?;
    let reports = ReadReports::default();
    let t = Instant::now();
    let (layout, _, sources) = setup.sources(input, &reports).await?;
    // Robust in one process, worker 0 merges as it writes; over a mesh each worker merges
    // its own range on its own cores, and worker 0 writes the merged batches as they are.
    let merge = !setup.robust || setup.mesh.is_some();
    let flow = Flow::source(layout, "read", setup.workers, Setup::stage(sources))
        .then(Edge::Range, "sort", setup.workers, move |_| Box::new(SortAll::new(layout, merge)))
        .with_seed(setup.seed);
    let mut ran = setup.run(flow).await?;
    let input = ran.stages[1].summary();
    let output_runs = std::mem::take(&mut ran.output);
    let mut report = AppReport { input, ..AppReport::of_reads(ran.stages, &reports, layout) };
    match setup.robust {
        true => setup.write_merging(output, layout, output_runs, &mut report).await?,
        false => setup.write(output, layout, &output_runs, &mut report).await?,
    }
    report.seconds = t.elapsed().as_secs_f64();
    Ok(report)
}

impl Setup {
    /// Write each worker's sorted runs (`runs[i]`, worker i's key range), merged range
    /// after range, as `name` through a distributed queue, a [`SORT_RUN_BYTES`] block to a
    /// unit; and fill in the report. The merge (none for runs already merged) runs beside the
    /// write, on a thread of its own.
    async fn write_merging(
        &self,
        name: &DatasetName,
        layout: RecordLayout,
        runs: Vec<Vec<Batch>>,
        report: &mut AppReport,
    ) -> Result<(), AppError> {
        if !self.leads() {
            return Ok(());
        }
        let t = Instant::now();
        let mut streaming =
            Streaming::start(&self.client, name.clone(), layout, self.workers as u32, SORT_RUN_BYTES as u32);
        let sink = streaming.sink();
        let (block, r) = (streaming.block_bytes(), layout.record_bytes as usize);
        let merging = tokio::task::spawn_blocking(move || {
            let mut put = 0;
            for worker in runs {
                let mut merge = Merge::new(worker, layout);
                // Each batch ends on a block edge of the output, so the writer sends it as it
                // is; only a block across two ranges is gathered.
                while let Some(b) = merge.next_batch((block - put % block) / r) {
                    put += b.bytes().len();
                    if sink.blocking_send(b).is_err() {
                        return false;
                    }
                }
            }
            true
        });
        let merged = merging.await.unwrap_or(false);
        if !merged {
            let cause = streaming.abort().await;
            return Err(
                cause.map_or_else(|| AppError::Invalid("merging the sorted runs failed".into()), AppError::from)
            );
        }
        let (out, summary) = streaming.commit().await?;
        report.write_seconds = t.elapsed().as_secs_f64();
        report.summary = summary;
        report.bytes_written = out.manifest.total_bytes();
        report.output = Some(out.manifest);
        Ok(())
    }
}

/// The sort benchmark's check of a dataset in written order: its records, whether they are
/// in key order, and their checksum.
pub async fn check(client: &Arc<Client>, name: &DatasetName) -> Result<Summary, AppError> {
    let (_, batches) = read_written(client, name).await?;
    let mut s = Summary::default();
    for b in &batches {
        s.add(b);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::{Table, join_key};
    use crate::records::{Batch, RecordLayout};
    use ganges_core::datagen::Generator;

    #[test]
    fn a_table_finds_every_record_of_a_key_whether_it_had_room_or_grew() {
        let layout = RecordLayout::SORT_BENCHMARK;
        let mut data = vec![0u8; 2_000 * 100];
        Generator::Records { seed: 4 }.fill(0, &mut data);
        let all = Batch::new(data.into(), layout).unwrap();
        let empty = Table::new(10, layout, 1);
        assert_eq!(empty.matching(all.record(0)).count(), 0, "a worker given no records");
        for expected in [0, 2_000] {
            let mut t = Table::new(expected, layout, 1);
            for from in (0..all.len()).step_by(300) {
                t.add(&all.slice(from, (from + 300).min(all.len()))).unwrap();
            }
            assert!(3 * t.records <= t.slots.len(), "{} records in {} slots", t.records, t.slots.len());
            for rec in all.records().step_by(7) {
                let mut want: Vec<&[u8]> = all.records().filter(|r| r[0] == rec[0]).collect();
                let mut got: Vec<&[u8]> = t.matching(rec).collect();
                want.sort();
                got.sort();
                assert_eq!(got, want, "room for {expected}");
            }
        }
    }

    #[test]
    fn a_join_key_is_its_first_bytes_whatever_follows_and_whatever_the_record_length() {
        let rec = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x11, 0x22];
        assert_eq!(join_key(&rec, 1), 0x12);
        assert_eq!(join_key(&rec, 2), 0x1234);
        assert_eq!(join_key(&rec, 8), 0x1234_5678_9abc_def0);
        // Records shorter than 8 bytes take the copying path, to the same numbers.
        for k in 1..=3 {
            assert_eq!(join_key(&rec[..3], k), join_key(&rec, k), "{k} bytes");
        }
        let mut other = rec;
        other[2] ^= 0xff;
        assert_eq!(join_key(&other, 2), join_key(&rec, 2), "bytes after the key do not count");
        assert_ne!(join_key(&other, 3), join_key(&rec, 3));
    }
}
