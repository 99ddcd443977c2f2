//! Readers: one consumer's unordered scan (blocks as buffers NumPy and Arrow take without a
//! copy), the ordered reader (in dataset order, or a dq write's written order) and the
//! random-access reader.

use crate::convert::to_python;
use crate::errors::{self, invalid};
use crate::runtime::{same_process, wait};
use bytes::Bytes;
use ganges_client::Client;
use ganges_client::scan::{ReadOptions, ReadReport, ReadStream};
use ganges_client::stream::{AsyncReader, OrderedReader, WrittenOrderReader};
use ganges_core::shape::{Partition, Shape};
use ganges_proto::manifest::Manifest;
use pyo3::prelude::*;
use pyo3_bytes::PyBytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Locks a reader for one call. Calls on one reader from two Python threads take turns.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn closed(what: &str) -> PyErr {
    invalid(format!("this {what} is closed"))
}

/// One delivered piece of a scan: `data` is a read-only buffer over the bytes as they came off
/// the network (`numpy.frombuffer(block.data)`, `pyarrow.py_buffer(block.data)`, `memoryview`).
#[pyclass(module = "ganges._ganges", frozen)]
#[derive(Debug)]
pub struct Block {
    /// Where these bytes start in the dataset.
    #[pyo3(get)]
    offset: u64,
    /// The server that delivered them.
    #[pyo3(get)]
    node: u32,
    data: Bytes,
}

#[pymethods]
impl Block {
    #[getter]
    fn data(&self) -> PyBytes {
        PyBytes::new(self.data.clone())
    }

    fn __len__(&self) -> usize {
        self.data.len()
    }

    /// The bytes as a NumPy array of `dtype`, without a copy (read-only).
    #[pyo3(signature = (dtype="uint8"))]
    fn numpy<'py>(&self, py: Python<'py>, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?.call_method1("frombuffer", (self.data(), dtype))
    }

    fn __repr__(&self) -> String {
        format!("Block(offset={}, len={}, node={})", self.offset, self.data.len(), self.node)
    }
}

/// What each of `consumers` consumers reads (default: one per fragment): a consumer per
/// fragment reads its fragment (the papers' default), otherwise equal shares cut at block
/// boundaries.
pub fn partitions(shape: &Shape, consumers: Option<u32>) -> PyResult<Vec<Partition>> {
    match consumers {
        Some(0) => Err(invalid("consumers must be at least 1")),
        None => Ok(shape.fragment_partitions()),
        Some(n) if n == shape.fragment_count() => Ok(shape.fragment_partitions()),
        Some(n) => Ok(shape.weighted_partitions(&vec![1.0; n as usize])),
    }
}

/// One consumer's unordered read of its share; iterate for `Block`s.
#[pyclass(module = "ganges._ganges", frozen)]
#[derive(Debug)]
pub struct Scan {
    owner: u32,
    stream: Mutex<Option<ReadStream>>,
    /// The report once the stream is done or closed.
    done: Mutex<Option<ReadReport>>,
    partition: Partition,
}

impl Scan {
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        consumer: u32,
        consumers: Option<u32>,
        opts: ReadOptions,
    ) -> PyResult<Scan> {
        let parts = partitions(&manifest.shape, consumers)?;
        let Some(&partition) = parts.get(consumer as usize) else {
            return Err(invalid(format!("consumer {consumer} of {}: consumers are numbered from 0", parts.len())));
        };
        let stream = ReadStream::open(client, manifest, partition, opts).map_err(errors::client)?;
        Ok(Scan { owner: std::process::id(), stream: Mutex::new(Some(stream)), done: Mutex::new(None), partition })
    }
}

#[pymethods]
impl Scan {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Block>> {
        same_process(self.owner, "scan")?;
        let mut guard = lock(&self.stream);
        let Some(stream) = guard.as_mut() else { return Ok(None) };
        match wait(py, stream.next())?.map_err(errors::client)? {
            Some(b) => Ok(Some(Block { offset: b.dataset_offset, node: b.node.0, data: b.data })),
            None => {
                let report = guard.take().map(ReadStream::close);
                *lock(&self.done) = report;
                Ok(None)
            }
        }
    }

    /// The byte range this consumer reads: (offset, length).
    #[getter]
    fn partition(&self) -> (u64, u64) {
        (self.partition.offset, self.partition.len)
    }

    /// What the read did so far: bytes, seconds, bytes by server and copy, the digest.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(r) = &*lock(&self.done) {
            return to_python(py, r);
        }
        match &*lock(&self.stream) {
            Some(s) => to_python(py, &s.report()),
            None => Err(closed("scan")),
        }
    }

    /// Stop reading: requests in flight are cancelled.
    fn close(&self) {
        if let Some(s) = lock(&self.stream).take() {
            *lock(&self.done) = Some(s.close());
        }
    }
}

#[derive(Debug)]
enum Ordered {
    Dataset(Box<OrderedReader>),
    Written(Box<WrittenOrderReader>),
}

/// Bytes in order, of any size per call; `ganges.DatasetFile` makes a file object of it.
#[pyclass(module = "ganges._ganges", frozen)]
#[derive(Debug)]
pub struct Reader {
    owner: u32,
    inner: Mutex<Option<Ordered>>,
    #[pyo3(get)]
    offset: u64,
    #[pyo3(get)]
    length: u64,
}

impl Reader {
    pub fn open(
        client: Arc<Client>,
        manifest: Arc<Manifest>,
        offset: u64,
        length: Option<u64>,
        opts: ReadOptions,
        buffer_blocks: u32,
        written_order: bool,
    ) -> PyResult<Reader> {
        let total = manifest.total_bytes();
        if offset > total {
            return Err(invalid(format!("offset {offset} is past the end of the dataset ({total} bytes)")));
        }
        let length = length.unwrap_or(total - offset);
        let part = Partition { offset, len: length };
        let inner = if written_order {
            Ordered::Written(Box::new(
                WrittenOrderReader::open(client, manifest, part, opts, buffer_blocks).map_err(errors::client)?,
            ))
        } else {
            Ordered::Dataset(Box::new(
                OrderedReader::open(client, manifest, part, opts, buffer_blocks).map_err(errors::client)?,
            ))
        };
        Ok(Reader { owner: std::process::id(), inner: Mutex::new(Some(inner)), offset, length })
    }
}

#[pymethods]
impl Reader {
    /// Up to `max` bytes, fewer only at the end; empty at the end.
    fn read(&self, py: Python<'_>, max: usize) -> PyResult<PyBytes> {
        same_process(self.owner, "reader")?;
        let mut guard = lock(&self.inner);
        let r = guard.as_mut().ok_or_else(|| closed("reader"))?;
        Ok(PyBytes::new(wait(py, r.read_full(max))?.map_err(errors::client)?))
    }

    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let report = match lock(&self.inner).take() {
            Some(Ordered::Dataset(r)) => r.close(),
            Some(Ordered::Written(r)) => r.close(),
            None => return Ok(None),
        };
        to_python(py, &report).map(Some)
    }
}

impl Ordered {
    /// `max` bytes (fewer only at the end) in one buffer, as each reader's `read_exact` gives.
    async fn read_full(&mut self, max: usize) -> ganges_client::Result<Bytes> {
        match self {
            Ordered::Dataset(r) => r.read_exact(max).await,
            Ordered::Written(r) => r.read_exact(max).await,
        }
    }
}

/// Random access: any ranges, many at once, each from the copy the policy picks.
#[pyclass(module = "ganges._ganges", frozen)]
#[derive(Debug)]
pub struct RandomReader {
    owner: u32,
    inner: Mutex<Option<AsyncReader>>,
    #[pyo3(get)]
    size: u64,
}

impl RandomReader {
    pub fn open(client: Arc<Client>, manifest: Arc<Manifest>, opts: ReadOptions) -> PyResult<RandomReader> {
        let size = manifest.total_bytes();
        let r = AsyncReader::open(client, manifest, opts).map_err(errors::client)?;
        Ok(RandomReader { owner: std::process::id(), inner: Mutex::new(Some(r)), size })
    }
}

/// Bytes submitted and not yet reaped, at most: a bound on memory for `read_many`.
const MANY_BYTES_IN_FLIGHT: u64 = 256 << 20;

async fn read_ranges(r: &mut AsyncReader, ranges: &[(u64, u64)]) -> ganges_client::Result<Vec<Bytes>> {
    let mut out = vec![Bytes::new(); ranges.len()];
    let mut slot = HashMap::new();
    let mut in_flight = 0u64;
    let mut next = 0;
    while next < ranges.len() || !slot.is_empty() {
        while next < ranges.len() && (slot.is_empty() || in_flight + ranges[next].1 <= MANY_BYTES_IN_FLIGHT) {
            let (offset, len) = ranges[next];
            if len > 0 {
                slot.insert(r.submit(offset, len)?, (next, len));
                in_flight += len;
            }
            next += 1;
        }
        if slot.is_empty() {
            break;
        }
        let Some((ticket, data)) = r.reap().await? else { break };
        if let Some((i, len)) = slot.remove(&ticket) {
            out[i] = data;
            in_flight -= len;
        }
    }
    Ok(out)
}

#[pymethods]
impl RandomReader {
    /// `length` bytes at `offset`.
    fn read(&self, py: Python<'_>, offset: u64, length: u64) -> PyResult<PyBytes> {
        let mut many = self.read_many(py, vec![(offset, length)])?;
        Ok(many.pop().unwrap_or_default())
    }

    /// Many ranges `(offset, length)` read at once; the buffers in the order asked.
    fn read_many(&self, py: Python<'_>, ranges: Vec<(u64, u64)>) -> PyResult<Vec<PyBytes>> {
        same_process(self.owner, "reader")?;
        for &(offset, len) in &ranges {
            if offset.checked_add(len).is_none_or(|end| end > self.size) {
                return Err(invalid(format!(
                    "range ({offset}, {len}) is past the end of the dataset ({} bytes)",
                    self.size
                )));
            }
        }
        let mut guard = lock(&self.inner);
        let r = guard.as_mut().ok_or_else(|| closed("reader"))?;
        let data = wait(py, read_ranges(r, &ranges))?.map_err(errors::client)?;
        Ok(data.into_iter().map(PyBytes::new).collect())
    }

    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match lock(&self.inner).take() {
            Some(r) => to_python(py, &r.close()).map(Some),
            None => Ok(None),
        }
    }
}
