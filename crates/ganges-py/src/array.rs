//! Arrays (Panda): a collective write where every process calls the same function with its
//! chunk, a single-process write of a whole array, reads of any process's chunk of any
//! layout, and Zarr export.

use crate::cluster::Cluster;
use crate::convert::{SizeArg, dataset_name, parse, to_python};
use crate::errors::{self, invalid};
use crate::runtime::wait;
use bytes::Bytes;
use ganges_client::Client;
use ganges_client::array::{self as arr, ArraySpec, CallId, Coordinator, Rates};
use ganges_core::array::{AllocKind, ArrayLayout, DType, Dist, Schema};
use ganges_core::route::ReadPolicyKind;
use pyo3::prelude::*;
use pyo3_bytes::PyBytes;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

/// A layout from Python's `mesh` and `dist` (strings such as "BLOCK", "CYCLIC(2)", "*").
fn layout(what: &str, rank: usize, mesh: Option<Vec<u32>>, dist: Option<Vec<String>>) -> PyResult<Option<ArrayLayout>> {
    let dist = dist.map(|v| v.iter().map(|d| parse::<Dist>(&format!("{what}_dist"), d)).collect()).transpose()?;
    ArrayLayout::from_options(rank, mesh, dist).map_err(|e| invalid(format!("{what}_mesh/{what}_dist: {e}")))
}

/// Everything a collective write is, from Python's arguments.
#[allow(clippy::too_many_arguments)]
fn spec(
    client: &Client,
    name: &str,
    shape: Vec<u64>,
    dtype: &str,
    memory: (Option<Vec<u32>>, Option<Vec<String>>),
    disk: (Option<Vec<u32>>, Option<Vec<String>>),
    alloc: &str,
    replicas: u32,
    subchunk: Option<SizeArg>,
) -> PyResult<ArraySpec> {
    let schema = Schema::new(shape, parse::<DType>("dtype", dtype)?).map_err(|e| invalid(e.to_string()))?;
    let rank = schema.rank();
    let memory = layout("memory", rank, memory.0, memory.1)?.unwrap_or_else(|| ArrayLayout::whole(rank));
    let disk = match layout("disk", rank, disk.0, disk.1)? {
        Some(d) => d,
        None => ArrayLayout::row_major(rank, client.nodes()).map_err(|e| invalid(e.to_string()))?,
    };
    let mut spec = ArraySpec::new(dataset_name(name)?, schema, memory, disk, parse::<AllocKind>("alloc", alloc)?);
    spec.replicas = replicas;
    if let Some(s) = subchunk {
        spec.threshold = s.bytes("subchunk")?;
    }
    Ok(spec)
}

fn report<'py>(py: Python<'py>, r: &arr::ArrayWriteReport) -> PyResult<Bound<'py, PyAny>> {
    let out = json!({
        "seconds": r.seconds,
        "probe_seconds": r.probe_seconds,
        "server_bytes": r.server_bytes,
        "rates": r.rates,
        // The array's own bytes (the dataset may hold a byte of padding per empty fragment).
        "bytes": r.manifest.array.as_ref().map_or(0, |a| a.schema.bytes()),
    });
    to_python(py, &out)
}

/// (rank, size) from the MPI or Slurm launcher's environment, if any.
#[pyfunction]
pub fn launcher_rank() -> Option<(u32, u32)> {
    arr::launcher_rank()
}

/// One process's part of a collective array write: every process of the memory layout
/// calls this with its chunk (row-major over the chunk); process 0 also runs the call
/// with the servers. Returns process 0's report (None elsewhere) once the array is
/// committed. `call` numbers successive writes of one name (every process the same).
#[pyfunction]
#[pyo3(signature = (cluster, name, chunk, rank, shape, dtype, memory_mesh=None, memory_dist=None, disk_mesh=None, disk_dist=None, alloc="dynamic", replicas=1, subchunk=None, call=0))]
pub fn array_write_part<'py>(
    py: Python<'py>,
    cluster: &Cluster,
    name: &str,
    chunk: PyBytes,
    rank: u32,
    shape: Vec<u64>,
    dtype: &str,
    memory_mesh: Option<Vec<u32>>,
    memory_dist: Option<Vec<String>>,
    disk_mesh: Option<Vec<u32>>,
    disk_dist: Option<Vec<String>>,
    alloc: &str,
    replicas: u32,
    subchunk: Option<SizeArg>,
    call: u64,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let client = cluster.client(py)?;
    let mut spec = spec(
        &client,
        name,
        shape,
        dtype,
        (memory_mesh, memory_dist),
        (disk_mesh, disk_dist),
        alloc,
        replicas,
        subchunk,
    )?;
    // Part-time I/O nodes started the default way serve the node of their rank: rank 0's own
    // server being node 0 says so, and static allocation then keeps each process's subchunks
    // on its own server where balance allows.
    if rank == 0 && client.local_node() == Some(ganges_core::ids::NodeId(0)) {
        spec.homes = (0..spec.ranks()).map(|r| (r < client.nodes()).then_some(r)).collect();
    }
    let chunk: Bytes = chunk.into_inner();
    let call = CallId::derive(&spec.name, call);
    if rank != 0 {
        wait(py, arr::write_rank(&client, &spec, call, rank, chunk))?.map_err(errors::client)?;
        return Ok(None);
    }
    let done = wait(py, async {
        let coordinator = Coordinator::begin(&client, spec.clone(), call, &Rates(None)).await?;
        let (mine, report) = tokio::join!(arr::write_rank(&client, &spec, call, 0, chunk), coordinator.finish());
        let report = report?;
        mine.map(|()| report)
    })?
    .map_err(errors::client)?;
    report(py, &done).map(Some)
}

/// A whole array written by this one process (`data`: row-major, C order).
#[pyfunction]
#[pyo3(signature = (cluster, name, data, shape, dtype, disk_mesh=None, disk_dist=None, alloc="dynamic", replicas=1, subchunk=None))]
pub fn array_write<'py>(
    py: Python<'py>,
    cluster: &Cluster,
    name: &str,
    data: PyBytes,
    shape: Vec<u64>,
    dtype: &str,
    disk_mesh: Option<Vec<u32>>,
    disk_dist: Option<Vec<String>>,
    alloc: &str,
    replicas: u32,
    subchunk: Option<SizeArg>,
) -> PyResult<Bound<'py, PyAny>> {
    let client = cluster.client(py)?;
    let spec = spec(&client, name, shape, dtype, (None, None), (disk_mesh, disk_dist), alloc, replicas, subchunk)?;
    let done =
        wait(py, arr::write_all(&client, &spec, &Rates(None), vec![data.into_inner()]))?.map_err(errors::client)?;
    report(py, &done)
}

/// Process `rank`'s chunk of the array in a memory layout (default: the whole array):
/// (its bytes, row-major, and its shape).
#[pyfunction]
#[pyo3(signature = (cluster, name, memory_mesh=None, memory_dist=None, rank=0, policy="gd-plan"))]
pub fn array_read(
    py: Python<'_>,
    cluster: &Cluster,
    name: &str,
    memory_mesh: Option<Vec<u32>>,
    memory_dist: Option<Vec<String>>,
    rank: u32,
    policy: &str,
) -> PyResult<(PyBytes, Vec<u64>, String)> {
    let client = cluster.client(py)?;
    let policy: ReadPolicyKind = parse("policy", policy)?;
    let manifest = Arc::new(wait(py, client.manifest(&dataset_name(name)?))?.map_err(errors::client)?);
    let schema = arr::meta(&manifest).map_err(errors::client)?.schema.clone();
    let memory =
        layout("memory", schema.rank(), memory_mesh, memory_dist)?.unwrap_or_else(|| ArrayLayout::whole(schema.rank()));
    let data = wait(py, arr::read_chunk_with(&client, &manifest, &memory, rank, policy))?.map_err(errors::client)?;
    let region = memory.chunk(&schema, rank);
    let shape = (0..schema.rank()).map(|d| region.extent(d)).collect();
    Ok((PyBytes::new(Bytes::from(data)), shape, schema.dtype.to_string()))
}

/// Write the array as a Zarr v3 array in folder `dir`.
#[pyfunction]
pub fn array_export_zarr<'py>(
    py: Python<'py>,
    cluster: &Cluster,
    name: &str,
    dir: PathBuf,
) -> PyResult<Bound<'py, PyAny>> {
    let client = cluster.client(py)?;
    let manifest = Arc::new(wait(py, client.manifest(&dataset_name(name)?))?.map_err(errors::client)?);
    let out = wait(py, arr::export_zarr(&client, &manifest, &dir))?.map_err(errors::client)?;
    to_python(py, &json!({ "dir": out.dir, "chunk_shape": out.chunk_shape, "chunks": out.chunks, "bytes": out.bytes }))
}
