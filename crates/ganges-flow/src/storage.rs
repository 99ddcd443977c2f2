//! Flows to and from the storage cluster: a dataset read as record batches (GD or static,
//! FL-2's read source) and a flow's output written as a dataset (static, DQ or GD: FL-2's
//! sink).
//!
//! A read delivers blocks in whatever order its policy gets them, and a block's edges cut
//! records in two. The [`Stitcher`] hands on each block's whole records as they are (a
//! slice of the received bytes: no copy) and joins the cut ones when both halves are in.
//!
//! The sink writes the last stage's batches with ganges's own writes: through a distributed
//! queue as they are made ([`Streaming`]), or once the flow has ended ([`write_output`]).
//! Either is all or nothing, so a flow that fails leaves no output dataset. Its blocks are
//! whole records, so a dataset a distributed queue wrote (blocks in each server's log in the
//! order its disk took them) still reads as whole records.

use crate::flow::Source;
use crate::records::{Batch, RecordLayout, Summary};
use bytes::{Bytes, BytesMut};
use ganges_client::scan::{ReadOptions, ReadReport, ReadStream};
use ganges_client::write::{DqStream, WriteOutcome, WriteSource, WriteSpec};
use ganges_client::{Client, ClientError};
use ganges_core::route::ceft::CeftSettings;
use ganges_core::shape::{BLOCK_BYTES_MIN, Partition};
use ganges_core::write::WritePolicyKind;
use ganges_proto::manifest::{DatasetName, Manifest, RecordFormat};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// Cut records collected for this many bytes are handed on as one batch.
const STITCHED_BATCH_BYTES: usize = 256 << 10;

/// Blocks of a written flow output: about 1 MiB, in whole records.
pub const OUTPUT_BLOCK_BYTES: u32 = 1 << 20;

/// The whole records of `layout` that fill about `bytes` (at least one record).
pub fn whole_records(bytes: u32, layout: RecordLayout) -> u64 {
    let r = u64::from(layout.record_bytes);
    (u64::from(bytes) / r).max(1) * r
}

/// The record layout a dataset's manifest gives.
pub fn layout_of(manifest: &Manifest) -> Result<RecordLayout, ClientError> {
    match manifest.records {
        RecordFormat::Fixed { record_bytes, key_bytes } if record_bytes > 0 && key_bytes <= record_bytes => {
            Ok(RecordLayout { record_bytes, key_bytes })
        }
        _ => Err(ClientError::Invalid(format!(
            "`{}` is not a dataset of records (make one with `ganges dataset create NAME --format records`)",
            manifest.name
        ))),
    }
}

/// A partition's bytes as whole records, whatever order its blocks come in.
#[derive(Debug)]
pub struct Stitcher {
    layout: RecordLayout,
    /// Records cut by a block edge: the pieces in so far, by the record's offset.
    cut: BTreeMap<u64, Vec<(u32, Bytes)>>,
    /// Cut records made whole, not yet handed on.
    joined: BytesMut,
}

impl Stitcher {
    pub fn new(layout: RecordLayout) -> Stitcher {
        Stitcher { layout, cut: BTreeMap::new(), joined: BytesMut::new() }
    }

    /// The bytes at `offset` (records start at multiples of the record size): their whole
    /// records, and any cut record this block completes.
    pub fn add(&mut self, offset: u64, data: Bytes, out: &mut Vec<Batch>) {
        let r = u64::from(self.layout.record_bytes);
        let end = offset + data.len() as u64;
        let first_whole = offset.div_ceil(r) * r;
        let head_end = first_whole.min(end);
        if offset < head_end {
            self.piece(offset - offset % r, offset % r, data.slice(..(head_end - offset) as usize));
        }
        if first_whole < end {
            let whole_end = end / r * r;
            if first_whole < whole_end {
                let whole = data.slice((first_whole - offset) as usize..(whole_end - offset) as usize);
                out.push(Batch::new(whole, self.layout).expect("cut at record edges"));
            }
            if whole_end < end {
                self.piece(whole_end, 0, data.slice((whole_end - offset) as usize..));
            }
        }
        if self.joined.len() >= STITCHED_BATCH_BYTES {
            out.push(self.take_joined());
        }
    }

    fn piece(&mut self, record: u64, at: u64, bytes: Bytes) {
        let pieces = self.cut.entry(record).or_default();
        pieces.push((at as u32, bytes));
        let have: usize = pieces.iter().map(|p| p.1.len()).sum();
        if have == self.layout.record_bytes as usize {
            let mut pieces = self.cut.remove(&record).expect("just added");
            pieces.sort_unstable_by_key(|p| p.0);
            for (_, b) in pieces {
                self.joined.extend_from_slice(&b);
            }
        }
    }

    fn take_joined(&mut self) -> Batch {
        Batch::new(self.joined.split().freeze(), self.layout).expect("whole records")
    }

    /// Every block is in: the last joined records, or an error if a record is still cut
    /// (the bytes were not whole records).
    pub fn finish(&mut self, out: &mut Vec<Batch>) -> Result<(), String> {
        if let Some((&at, _)) = self.cut.iter().next() {
            return Err(format!(
                "the record at byte {at} is cut short: the data are not whole {}-byte records",
                self.layout.record_bytes
            ));
        }
        if !self.joined.is_empty() {
            out.push(self.take_joined());
        }
        Ok(())
    }
}

/// What the reads of a flow did, one report per source instance.
pub type ReadReports = Arc<Mutex<Vec<ReadReport>>>;

/// A source reading `partition` (whole records of `layout`) of a dataset with `opts` (GD,
/// static...): one consumer of a collective scan. Its report lands in `reports` when it
/// ends. Needs a multi-thread tokio runtime (a flow does).
pub fn read_source(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    layout: RecordLayout,
    opts: ReadOptions,
    partition: Partition,
    reports: &ReadReports,
) -> Result<Source, ClientError> {
    let r = u64::from(layout.record_bytes);
    if !partition.offset.is_multiple_of(r) || !partition.len.is_multiple_of(r) {
        return Err(ClientError::Invalid(format!("partition {partition:?} is not whole records")));
    }
    Ok(Box::new(ReadSource {
        stream: ReadStream::open(client.clone(), manifest.clone(), partition, opts)?,
        stitch: Stitcher::new(layout),
        handle: tokio::runtime::Handle::current(),
        ready: vec![],
        reports: reports.clone(),
        done: false,
    }))
}

struct ReadSource {
    stream: ReadStream,
    stitch: Stitcher,
    handle: tokio::runtime::Handle,
    /// Batches made and not handed on yet, last first.
    ready: Vec<Batch>,
    reports: ReadReports,
    done: bool,
}

impl Iterator for ReadSource {
    type Item = Result<Batch, String>;

    /// The next batch: the flow calls this off the runtime's workers (`block_in_place`), so
    /// waiting for the read here blocks only this source.
    fn next(&mut self) -> Option<Result<Batch, String>> {
        loop {
            if let Some(b) = self.ready.pop() {
                return Some(Ok(b));
            }
            if self.done {
                return None;
            }
            let mut made = vec![];
            match self.handle.block_on(self.stream.next()) {
                Ok(Some(block)) => self.stitch.add(block.dataset_offset, block.data, &mut made),
                Ok(None) => {
                    self.done = true;
                    if let Err(e) = self.stitch.finish(&mut made) {
                        return Some(Err(e));
                    }
                    self.reports.lock().unwrap_or_else(|e| e.into_inner()).push(self.stream.report());
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.to_string()));
                }
            }
            made.reverse();
            self.ready = made;
        }
    }
}

/// How a flow's output is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// Output instance i's records to its own fragment, on a fixed server (river's
    /// non-robust write: a slow disk holds up the whole write).
    Static,
    /// Through a distributed queue of the servers' disks (DQ-1), a block to a unit. (A
    /// sorted run stays whole as one block of a [`Streaming`] write.)
    Dq,
    /// Two copies (one on a cluster of one server): instance i's records to fragment i, each
    /// block first to whichever of the fragment's servers graduated declustering picks (GW-1,
    /// `ganges write --policy gd`: a slow disk takes fewer), the other copy made by the
    /// servers after the commit (replica completion). The output is then read as robustly as
    /// any input.
    Gd,
}

/// A flow's output written as it is made: the batches put to [`Streaming::sink`] are
/// gathered into blocks of whole records, each put to a DQ write (DQ-1, one copy) as it
/// fills, so the write overlaps the flow. [`commit`](Streaming::commit) once the flow has
/// succeeded; dropped, the write is aborted and no dataset is left. The dataset in written
/// order is the batches in the order they reached the sink.
#[derive(Debug)]
pub struct Streaming {
    /// Its block's bytes: batches that end on a multiple of it are sent without a copy.
    block: usize,
    sink: Option<mpsc::Sender<Batch>>,
    commit: oneshot::Sender<()>,
    /// The dataset and its records' summary; `None` when the flow failed (no commit).
    task: tokio::task::JoinHandle<Result<Option<(WriteOutcome, Summary)>, ClientError>>,
}

impl Streaming {
    /// Start writing `name`, of records of `layout`, with `writers` DQ writers, in blocks
    /// of the whole records that fill about `block_bytes` (each a unit of the queue; at
    /// least the smallest block a dataset may have).
    pub fn start(
        client: &Arc<Client>,
        name: DatasetName,
        layout: RecordLayout,
        writers: u32,
        block_bytes: u32,
    ) -> Streaming {
        let smallest = u64::from(BLOCK_BYTES_MIN).next_multiple_of(u64::from(layout.record_bytes));
        let block = whole_records(block_bytes, layout).max(smallest) as usize;
        let records = RecordFormat::Fixed { record_bytes: layout.record_bytes, key_bytes: layout.key_bytes };
        let mut stream = DqStream::start(client, name.clone(), block as u32, writers, records);
        let (sink, mut batches) = mpsc::channel::<Batch>(2 * writers.max(1) as usize);
        let (commit, committed) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut summary = Summary::default();
            let mut buf = BytesMut::with_capacity(block);
            while let Some(b) = batches.recv().await {
                summary.add(&b);
                let (bytes, mut at) = (b.bytes(), 0);
                while at < bytes.len() {
                    // Whole blocks of a batch, when none is half gathered, go as they are.
                    if buf.is_empty() && bytes.len() - at >= block {
                        stream.put(bytes.slice(at..at + block)).await?;
                        at += block;
                        continue;
                    }
                    let n = (block - buf.len()).min(bytes.len() - at);
                    buf.extend_from_slice(&bytes[at..at + n]);
                    at += n;
                    if buf.len() == block {
                        stream.put(buf.split().freeze()).await?;
                        buf.reserve(block);
                    }
                }
            }
            // No word: the flow failed.
            let committed = committed.await.is_ok();
            if !committed || summary.records == 0 {
                stream.abort().await;
                return match committed {
                    true => Err(ClientError::Invalid(format!("the flow put out no records: `{name}` is not written"))),
                    false => Ok(None),
                };
            }
            let out = stream.finish((!buf.is_empty()).then(|| buf.freeze())).await?;
            Ok(Some((out, summary)))
        });
        Streaming { block, sink: Some(sink), commit, task }
    }

    /// The bytes of its blocks (whole records).
    pub fn block_bytes(&self) -> usize {
        self.block
    }

    /// Where the flow puts its output (taken once).
    pub fn sink(&mut self) -> mpsc::Sender<Batch> {
        self.sink.take().expect("a stream has one sink")
    }

    /// The flow succeeded: commit what it put, once it has all been written. The dataset,
    /// and the count and checksum of its records.
    pub async fn commit(mut self) -> Result<(WriteOutcome, Summary), ClientError> {
        self.sink = None;
        let _ = self.commit.send(());
        match self.task.await {
            Ok(Ok(Some(x))) => Ok(x),
            Ok(Err(e)) => Err(e),
            Ok(Ok(None)) => Err(ClientError::Invalid("the flow's output was not committed".into())),
            Err(e) => Err(ClientError::Invalid(format!("writing the flow's output: {e}"))),
        }
    }

    /// The flow failed: abort the write. Its error, if the write failing was the cause.
    pub async fn abort(self) -> Option<ClientError> {
        drop(self.sink);
        drop(self.commit);
        self.task.await.ok().and_then(Result::err)
    }
}

/// Write `output` (each instance's batches, in order; the instances one after another) as
/// dataset `name` of one copy (two for [`Sink::Gd`]), with `writers` writers. The dataset in
/// written order is the output in this order. All or nothing: on an error no dataset is left.
pub async fn write_output(
    client: &Arc<Client>,
    name: &DatasetName,
    layout: RecordLayout,
    output: &[Vec<Batch>],
    sink: Sink,
    writers: u32,
) -> Result<WriteOutcome, ClientError> {
    let buffers: Arc<[Bytes]> = output.iter().flatten().map(|b| b.bytes().clone()).collect();
    let total: u64 = buffers.iter().map(|b| b.len() as u64).sum();
    if total == 0 {
        return Err(ClientError::Invalid(format!("the flow put out no records: `{name}` is not written")));
    }
    write_records(client, name, layout, WriteSource::Buffers(buffers), total, sink, writers).await
}

/// Write `total` bytes of records from `source` as dataset `name` (a generator's records
/// are made by the writers as they go: generate's producer feeding the sink directly).
pub async fn write_records(
    client: &Arc<Client>,
    name: &DatasetName,
    layout: RecordLayout,
    source: WriteSource,
    total: u64,
    sink: Sink,
    writers: u32,
) -> Result<WriteOutcome, ClientError> {
    let r = u64::from(layout.record_bytes);
    if total == 0 || !total.is_multiple_of(r) {
        return Err(ClientError::Invalid(format!("{total} bytes are not whole {r}-byte records")));
    }
    // Whole records to a block, and every server at least one block (a DQ log is never empty).
    let per_server = (total / r / u64::from(client.nodes())).max(1) * r;
    let block = whole_records(OUTPUT_BLOCK_BYTES, layout).min(per_server);
    let blocks = total.div_ceil(block);
    let (policy, replicas) = match sink {
        Sink::Static => (WritePolicyKind::Static, 1),
        Sink::Dq => (WritePolicyKind::Dq, 1),
        Sink::Gd if client.nodes() > 1 => (WritePolicyKind::Gd, 2),
        // One server holds one copy, and has no other to choose.
        Sink::Gd => (WritePolicyKind::Static, 1),
    };
    let spec = WriteSpec {
        name: name.clone(),
        writers: writers.clamp(1, blocks as u32),
        total_bytes: total,
        block_bytes: block as u32,
        replicas,
        policy,
        window: None,
        source,
        complete: replicas > 1,
        run_blocks: 1,
        ceft: CeftSettings::default(),
        mirrored: false,
        records: RecordFormat::Fixed { record_bytes: layout.record_bytes, key_bytes: layout.key_bytes },
    };
    ganges_client::write::write(client, spec, None).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Summary;
    use ganges_core::datagen::Generator;
    use proptest::prelude::*;

    proptest! {
        /// Blocks cut anywhere and delivered in any order make the same records.
        #[test]
        fn stitched_blocks_are_the_records(
            records in 1usize..60,
            block in 1usize..450,
            order_seed in any::<u64>(),
        ) {
            let layout = RecordLayout::SORT_BENCHMARK;
            let mut data = vec![0u8; records * 100];
            Generator::Records { seed: 3 }.fill(0, &mut data);
            let data = Bytes::from(data);
            let mut blocks: Vec<(u64, Bytes)> = (0..data.len())
                .step_by(block)
                .map(|o| (o as u64, data.slice(o..(o + block).min(data.len()))))
                .collect();
            let mut s = order_seed;
            for i in (1..blocks.len()).rev() {
                s = ganges_core::datagen::mix64(s);
                blocks.swap(i, (s % (i as u64 + 1)) as usize);
            }
            let mut st = Stitcher::new(layout);
            let mut out = vec![];
            for (o, b) in blocks {
                st.add(o, b, &mut out);
            }
            st.finish(&mut out).unwrap();
            let (mut want, mut got) = (Summary::default(), Summary::default());
            want.add(&Batch::new(data, layout).unwrap());
            for b in &out {
                got.add(b);
            }
            prop_assert!(want.same_records(&got), "{want:?} {got:?}");
        }
    }

    #[test]
    fn whole_records_inside_a_block_are_not_copied() {
        let data = Bytes::from(vec![7u8; 1000]);
        let mut st = Stitcher::new(RecordLayout::SORT_BENCHMARK);
        let mut out = vec![];
        st.add(50, data.slice(50..1000), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].bytes().as_ptr(), data[100..].as_ptr());
        assert!(st.finish(&mut out).is_err(), "the first record is still cut");
    }
}
