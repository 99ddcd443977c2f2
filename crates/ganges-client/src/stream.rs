//! In-order and random-access reading (virtual-streams §3.6), both on top of `ReadStream`.
//!
//! - [`OrderedReader`]: the bytes of a partition in order, in reads of any size (so records
//!   of any length). Blocks that arrive early wait in a reorder buffer; no block more than
//!   `buffer_blocks` past the first one not yet handed out is asked for, so the buffer, and
//!   memory, stay within that bound whatever the servers do. Each fragment the buffer reaches
//!   is read at once, by a stream of its own.
//! - [`AsyncReader`]: submit any number of (offset, length) reads, reap them as they
//!   complete, in any order: for random access, and for callers who fill their own pipeline.
//!   `read(offset, len)` is the simple call on top: submit, then wait for that one.
//! - [`WrittenOrderReader`]: a dataset written through a distributed queue, in the order its
//!   writers wrote it, within a buffer bound like the ordered reader's.
//! - [`blocking`]: the same simple call for programs without an async runtime.

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::scan::{ReadOptions, ReadReport, ReadStream, span_secs};
use bytes::{Bytes, BytesMut};
use futures_util::future::select_all;
use ganges_core::ids::FragmentId;
use ganges_core::shape::Partition;
use ganges_proto::manifest::Manifest;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Blocks an ordered reader may hold out of order unless told otherwise: two windows' worth,
/// so a slow server holding the next block does not stop the others from working ahead.
pub const REORDER_BLOCKS_DEFAULT: u32 = 8;

/// An in-order reader's buffer bound must let it hold the block it waits for.
fn check_buffer(buffer_blocks: u32) -> Result<()> {
    if buffer_blocks == 0 {
        return Err(ClientError::Invalid("an ordered reader needs a buffer of at least one block".into()));
    }
    Ok(())
}

/// The bytes of a partition, in order.
///
/// Each fragment the partition covers is read by a [`ReadStream`] of its own (with the
/// policy's window, between that fragment's copies), and blocks are asked for in the
/// partition's order, at most `buffer_blocks` past the first one not yet handed out. A buffer
/// larger than what is left of the fragment being handed out lets the next fragments' servers
/// read ahead at the same time, so an in-order read is not held to one fragment's disks.
#[derive(Debug)]
pub struct OrderedReader {
    client: Arc<Client>,
    manifest: Arc<Manifest>,
    opts: ReadOptions,
    /// The fragments being read, each with its stream and its blocks asked for and not yet
    /// arrived.
    reading: BTreeMap<FragmentId, Reading>,
    /// What the streams of the fragments done with did.
    closed: Vec<ReadReport>,
    /// Blocks that arrived ahead of their turn, by dataset offset.
    early: BTreeMap<u64, Bytes>,
    /// The rest of the block being handed out.
    current: Bytes,
    /// Dataset offsets: the next block to ask for, the next byte to hand out, the end.
    ask_at: u64,
    next: u64,
    end: u64,
    buffer_blocks: usize,
    /// The most fragments read at once so far.
    most_reading: usize,
    /// From the first read to the last byte.
    started: Option<Instant>,
    finished: Option<Instant>,
}

#[derive(Debug)]
struct Reading {
    stream: ReadStream,
    /// Requests asked for and not yet arrived: a block's pieces, when the policy reads
    /// blocks in pieces (gd-plan).
    pending: usize,
}

impl OrderedReader {
    /// Read `partition` in order, with at most `buffer_blocks` blocks asked for and not yet
    /// handed out.
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        partition: Partition,
        mut opts: ReadOptions,
        buffer_blocks: u32,
    ) -> Result<OrderedReader> {
        check_buffer(buffer_blocks)?;
        manifest.shape.check_partition(partition)?;
        opts.check()?;
        // No more in flight than the buffer holds: its blocks' pieces, read in pieces.
        let block = u64::from(manifest.shape.block_bytes());
        let per_block = block.div_ceil(opts.policy.request_bytes(block, &opts.settings)) as u32;
        opts.window = Some(opts.window_for(block).min(buffer_blocks.saturating_mul(per_block)));
        opts.fixed_window = true;
        Ok(OrderedReader {
            client,
            manifest,
            opts,
            reading: BTreeMap::new(),
            closed: vec![],
            early: BTreeMap::new(),
            current: Bytes::new(),
            ask_at: partition.offset,
            next: partition.offset,
            end: partition.offset + partition.len,
            buffer_blocks: buffer_blocks as usize,
            most_reading: 0,
            started: None,
            finished: None,
        })
    }

    /// Blocks asked for (or arrived) past the bytes being handed out, and not yet handed
    /// out: at most the buffer bound.
    pub fn buffered_blocks(&self) -> usize {
        let ahead = self.ask_at - self.next - self.current.len() as u64;
        ahead.div_ceil(u64::from(self.manifest.shape.block_bytes())) as usize
    }

    /// The most fragments read at once so far: how far the buffer reached.
    pub fn fragments_at_once(&self) -> usize {
        self.most_reading
    }

    /// Ask for blocks in order while the buffer has room, each from its fragment's stream.
    fn ask(&mut self) -> Result<()> {
        let block = self.manifest.shape.block_bytes() as u64;
        while self.ask_at < self.end && self.buffered_blocks() < self.buffer_blocks {
            let upto = Partition { offset: self.ask_at, len: (self.end - self.ask_at).min(block) };
            let p = self.manifest.shape.pieces(upto)?[0];
            let reading = match self.reading.entry(p.fragment) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let mut stream = ReadStream::open_ended(self.client.clone(), self.manifest.clone(), self.opts)?;
                    // What this reader will read of the fragment, from here: the stream's
                    // progress counts against it, as a scan's does.
                    stream.expect_bytes(self.manifest.shape.fragment_end(p.fragment).min(self.end) - self.ask_at);
                    e.insert(Reading { stream, pending: 0 })
                }
            };
            let asked = reading.stream.add_range(Partition { offset: p.dataset_offset, len: p.len as u64 })?;
            reading.pending += asked.len();
            self.ask_at += p.len as u64;
        }
        self.most_reading = self.most_reading.max(self.reading.len());
        Ok(())
    }

    /// Wait for the next block of any fragment being read; keep it until its turn.
    async fn receive(&mut self) -> Result<()> {
        let waiting: Vec<_> = self
            .reading
            .iter_mut()
            .filter(|(_, r)| r.pending > 0)
            .map(|(&f, r)| Box::pin(async move { (f, r.stream.next().await) }))
            .collect();
        if waiting.is_empty() {
            return Err(ClientError::Invalid(format!("read ended at byte {} before the partition did", self.next)));
        }
        let ((f, got), _, _) = select_all(waiting).await;
        let Some(b) = got? else {
            return Err(ClientError::Invalid(format!("the read of {f} ended with blocks still asked for")));
        };
        self.early.insert(b.dataset_offset, b.data);
        let r = self.reading.get_mut(&f).expect("a fragment being read");
        r.pending -= 1;
        // A fragment all asked for and arrived is done with.
        if r.pending == 0 && self.manifest.shape.fragment_end(f).min(self.end) <= self.ask_at {
            self.closed.push(self.reading.remove(&f).expect("present").stream.close());
        }
        Ok(())
    }

    /// Make `current` non-empty, unless the partition is done.
    async fn fill(&mut self) -> Result<()> {
        self.started.get_or_insert_with(Instant::now);
        while self.current.is_empty() && self.next < self.end {
            self.ask()?;
            match self.early.remove(&self.next) {
                Some(b) => self.current = b,
                None => self.receive().await?,
            }
        }
        Ok(())
    }

    /// The next bytes in order, at most `max` (never more than a block; a slice of the block
    /// that arrived, no copy). Empty at the end of the partition.
    pub async fn read(&mut self, max: usize) -> Result<Bytes> {
        self.fill().await?;
        let n = max.min(self.current.len());
        let out = self.current.split_to(n);
        self.next += n as u64;
        if self.next >= self.end {
            self.finished.get_or_insert_with(Instant::now);
        }
        Ok(out)
    }

    /// The next `n` bytes in order (fewer only at the end of the partition): a record of any
    /// size. Copies only when the record spans blocks.
    pub async fn read_exact(&mut self, n: usize) -> Result<Bytes> {
        read_exact_from(self, n).await
    }

    /// Fill `buf` from the stream; returns how many bytes were copied (0 at the end).
    pub async fn read_into(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut at = 0;
        while at < buf.len() {
            let b = self.read(buf.len() - at).await?;
            if b.is_empty() {
                break;
            }
            buf[at..at + b.len()].copy_from_slice(&b);
            at += b.len();
        }
        Ok(at)
    }

    /// Stop reading (cancelling what is still asked for); what every fragment's stream did.
    pub fn close(self) -> ReadReport {
        let seconds = span_secs(self.started, self.finished);
        let streams = self.reading.into_values().map(|r| r.stream.close());
        let report = streams.chain(self.closed).reduce(ReadReport::merged);
        ReadReport { seconds, ..report.unwrap_or_else(|| ReadReport::empty(self.opts.policy)) }
    }
}

/// Identifies a submitted read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

#[derive(Debug)]
struct Assembly {
    offset: u64,
    /// Pieces still missing.
    missing: usize,
    parts: BTreeMap<u64, Bytes>,
}

/// The most bytes submitted and not yet reaped: bounds what completed reads can pin in
/// memory while the caller is not reaping.
pub const SUBMITTED_BYTES_MAX: u64 = 1 << 30;

/// Random-access reads: submit many, reap as they complete.
#[derive(Debug)]
pub struct AsyncReader {
    stream: ReadStream,
    next_ticket: u64,
    open: BTreeMap<Ticket, Assembly>,
    piece_ticket: HashMap<usize, Ticket>,
    done: Vec<(Ticket, Bytes)>,
    submitted_bytes: u64,
}

impl AsyncReader {
    pub fn open(client: Arc<Client>, manifest: Arc<Manifest>, opts: ReadOptions) -> Result<AsyncReader> {
        Ok(AsyncReader {
            stream: ReadStream::open_ended(client, manifest, opts)?,
            next_ticket: 1,
            open: BTreeMap::new(),
            piece_ticket: HashMap::new(),
            done: vec![],
            submitted_bytes: 0,
        })
    }

    /// What this reader's reads will come to in all, when the caller knows: its progress,
    /// which servers rank readers by, counts against it (`ReadStream::expect_bytes`).
    pub fn expect_bytes(&mut self, bytes: u64) {
        self.stream.expect_bytes(bytes);
    }

    /// Start reading `len` bytes at dataset offset `offset`.
    pub fn submit(&mut self, offset: u64, len: u64) -> Result<Ticket> {
        if len == 0 {
            return Err(ClientError::Invalid("a read of 0 bytes".into()));
        }
        if self.submitted_bytes + len > SUBMITTED_BYTES_MAX {
            return Err(ClientError::Invalid(format!(
                "more than {} bytes submitted and not reaped; reap some first",
                SUBMITTED_BYTES_MAX
            )));
        }
        let pieces = self.stream.add_range(Partition { offset, len })?;
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        for p in pieces.clone() {
            self.piece_ticket.insert(p, ticket);
        }
        self.open.insert(ticket, Assembly { offset, missing: pieces.len(), parts: BTreeMap::new() });
        self.submitted_bytes += len;
        Ok(ticket)
    }

    /// Reads submitted and not yet reaped.
    pub fn pending(&self) -> usize {
        self.open.len() + self.done.len()
    }

    /// The next completed read, in completion order; `None` when nothing is pending.
    pub async fn reap(&mut self) -> Result<Option<(Ticket, Bytes)>> {
        loop {
            if let Some(d) = self.done.pop() {
                self.submitted_bytes -= d.1.len() as u64;
                return Ok(Some(d));
            }
            if self.open.is_empty() {
                return Ok(None);
            }
            let Some(block) = self.stream.next().await? else {
                return Err(ClientError::Invalid("the read engine finished with reads still open".into()));
            };
            let ticket = self.piece_ticket.remove(&block.piece).expect("every piece belongs to a read");
            let a = self.open.get_mut(&ticket).expect("open reads have assemblies");
            a.parts.insert(block.dataset_offset, block.data);
            a.missing -= 1;
            if a.missing == 0 {
                let a = self.open.remove(&ticket).expect("present");
                let bytes = if a.parts.len() == 1 {
                    a.parts.into_values().next().expect("one part")
                } else {
                    let mut out = BytesMut::new();
                    let mut at = a.offset;
                    for (off, part) in a.parts {
                        debug_assert_eq!(off, at, "pieces tile the read");
                        at += part.len() as u64;
                        out.extend_from_slice(&part);
                    }
                    out.freeze()
                };
                self.done.push((ticket, bytes));
            }
        }
    }

    pub fn close(self) -> crate::scan::ReadReport {
        self.stream.close()
    }

    /// Read `len` bytes at `offset` and wait for them. Reads completed meanwhile for other
    /// tickets stay to be reaped.
    pub async fn read(&mut self, offset: u64, len: u64) -> Result<Bytes> {
        let want = self.submit(offset, len)?;
        let mut others = vec![];
        let result = loop {
            match self.reap().await? {
                Some((t, b)) if t == want => break b,
                Some(other) => others.push(other),
                None => unreachable!("the submitted read is pending"),
            }
        };
        for (t, b) in others {
            self.submitted_bytes += b.len() as u64;
            self.done.push((t, b));
        }
        Ok(result)
    }
}

/// A byte range of a dataset written through a distributed queue, in the order its writers
/// wrote it (DQ-1). The servers' logs hold the blocks in the order their disks took them, and
/// the manifest's origin map says where each written block went: each block of the range is
/// looked up there and read at random (an [`AsyncReader`]), at most `buffer_blocks` at once,
/// so the next blocks are read from every server holding them; they are handed out in order.
#[derive(Debug)]
pub struct WrittenOrderReader {
    reader: AsyncReader,
    /// Where each written block is stored (dataset offset), in written order.
    starts: Vec<u64>,
    block: u64,
    buffer_blocks: usize,
    /// Reads in flight, by the written offset they start at, and those done ahead of their
    /// turn.
    in_flight: HashMap<Ticket, u64>,
    early: BTreeMap<u64, Bytes>,
    current: Bytes,
    /// Written offsets: the next read to submit, the next byte to hand out, the end.
    submit_at: u64,
    next: u64,
    end: u64,
}

/// A reader of bytes in some order, a piece at a time.
trait InOrder: Send {
    fn read_piece(&mut self, max: usize) -> impl std::future::Future<Output = Result<Bytes>> + Send;
}

impl InOrder for OrderedReader {
    fn read_piece(&mut self, max: usize) -> impl std::future::Future<Output = Result<Bytes>> + Send {
        self.read(max)
    }
}

impl InOrder for WrittenOrderReader {
    fn read_piece(&mut self, max: usize) -> impl std::future::Future<Output = Result<Bytes>> + Send {
        self.read(max)
    }
}

/// The next `n` bytes from `r` (fewer only at its end), in one buffer: the first piece as it
/// came when it holds them all, else the pieces joined (a record spanning blocks).
async fn read_exact_from(r: &mut impl InOrder, n: usize) -> Result<Bytes> {
    let first = r.read_piece(n).await?;
    if first.len() == n || first.is_empty() {
        return Ok(first);
    }
    let mut out = BytesMut::with_capacity(n);
    out.extend_from_slice(&first);
    while out.len() < n {
        let more = r.read_piece(n - out.len()).await?;
        if more.is_empty() {
            break;
        }
        out.extend_from_slice(&more);
    }
    Ok(out.freeze())
}

impl WrittenOrderReader {
    /// Read `range` (offsets in the data as written) in that order, with at most
    /// `buffer_blocks` blocks read and not yet handed out.
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        range: Partition,
        mut opts: ReadOptions,
        buffer_blocks: u32,
    ) -> Result<WrittenOrderReader> {
        check_buffer(buffer_blocks)?;
        // Every block it may hold can be in flight: the next blocks are on different servers.
        (opts.window, opts.fixed_window) = (Some(buffer_blocks), true);
        let Some(origin) = &manifest.origin else {
            return Err(ClientError::Invalid(format!(
                "`{}` was not written through a distributed queue: its order is the dataset's own",
                manifest.name
            )));
        };
        origin.validate(&manifest.shape).map_err(|e| ClientError::Invalid(format!("`{}`: {e}", manifest.name)))?;
        manifest.shape.check_partition(range)?;
        let starts = origin.block_starts(&manifest.shape);
        let block = manifest.shape.block_bytes() as u64;
        let mut reader = AsyncReader::open(client, manifest, opts)?;
        reader.expect_bytes(range.len);
        Ok(WrittenOrderReader {
            starts,
            block,
            reader,
            buffer_blocks: buffer_blocks as usize,
            in_flight: HashMap::new(),
            early: BTreeMap::new(),
            current: Bytes::new(),
            submit_at: range.offset,
            next: range.offset,
            end: range.offset + range.len,
        })
    }

    /// Blocks read (or being read) and not yet handed out: at most the buffer bound.
    pub fn buffered_blocks(&self) -> usize {
        self.in_flight.len() + self.early.len()
    }

    /// The next bytes in written order, at most `max` (never more than a block). Empty at
    /// the end of the range.
    /// The next `n` bytes in written order (fewer only at the end), as `OrderedReader::read_exact`.
    pub async fn read_exact(&mut self, n: usize) -> Result<Bytes> {
        read_exact_from(self, n).await
    }

    pub async fn read(&mut self, max: usize) -> Result<Bytes> {
        while self.current.is_empty() && self.next < self.end {
            while self.buffered_blocks() < self.buffer_blocks && self.submit_at < self.end {
                let (k, within) = (self.submit_at / self.block, self.submit_at % self.block);
                let piece_end = ((k + 1) * self.block).min(self.end);
                let ticket = self.reader.submit(self.starts[k as usize] + within, piece_end - self.submit_at)?;
                self.in_flight.insert(ticket, self.submit_at);
                self.submit_at = piece_end;
            }
            if let Some(b) = self.early.remove(&self.next) {
                self.current = b;
                continue;
            }
            let Some((ticket, data)) = self.reader.reap().await? else {
                return Err(ClientError::Invalid(format!(
                    "read ended at written byte {} before the range did",
                    self.next
                )));
            };
            let at = self.in_flight.remove(&ticket).expect("every reaped read was submitted");
            self.early.insert(at, data);
        }
        let out = self.current.split_to(max.min(self.current.len()));
        self.next += out.len() as u64;
        Ok(out)
    }

    pub fn close(self) -> crate::scan::ReadReport {
        self.reader.close()
    }
}

/// Blocking reads for programs without an async runtime: a private runtime runs the client.
pub mod blocking {
    use super::*;
    use crate::cluster::ClusterFile;
    use ganges_proto::manifest::DatasetName;

    #[derive(Debug)]
    pub struct Reader {
        rt: tokio::runtime::Runtime,
        inner: AsyncReader,
        manifest: Arc<Manifest>,
    }

    impl Reader {
        /// Open `dataset` of the cluster in `cluster`.
        pub fn open(cluster: ClusterFile, dataset: &DatasetName, opts: ReadOptions) -> Result<Reader> {
            // One worker thread: connections keep being served between calls.
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(ClientError::io("starting the client runtime"))?;
            let (inner, manifest) = rt.block_on(async {
                let client = Client::connect(cluster).await?;
                let manifest = Arc::new(client.manifest(dataset).await?);
                Ok::<_, ClientError>((AsyncReader::open(client, manifest.clone(), opts)?, manifest))
            })?;
            Ok(Reader { rt, inner, manifest })
        }

        pub fn manifest(&self) -> &Manifest {
            &self.manifest
        }

        /// `len` bytes at dataset offset `offset`.
        pub fn read(&mut self, offset: u64, len: u64) -> Result<Bytes> {
            self.rt.block_on(self.inner.read(offset, len))
        }
    }
}
