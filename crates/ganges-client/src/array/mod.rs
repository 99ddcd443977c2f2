//! N-dimensional arrays: collective writes and reads (the Panda paper, "Parallel Input/Output
//! with Heterogeneous Disks").
//!
//! **Writing.** `P` processes (or tasks) each hold chunk `rank` of the memory layout and call
//! [`write_rank`] with the same [`ArraySpec`] and the same [`CallId`]; the process of rank 0
//! also runs the call ([`Coordinator`]): it measures the servers when it has no rates yet
//! (panda's empirical test), stages the array's dataset, opens the write on every server,
//! and at the end commits it. The servers direct the rest (server-directed I/O): each works out
//! which subchunks are its to write (round-robin, static or dynamic allocation) and asks the
//! processes for their pieces of them, which [`write_rank`] answers. Every process's call
//! returns once the array is committed, or with the reason it was not.
//!
//! **Reading** ([`read`]). [`read_chunk`] reads one process's chunk of any memory layout,
//! whatever layout and allocation wrote the array: the subchunks it overlaps, from wherever
//! the manifest says they are, scattered into place. [`export_zarr`] writes the array as a
//! Zarr v3 array that Zarr readers open.

mod read;
mod zarr;

pub use ganges_core::array::ARRAY_READ_POLICY;
pub use ganges_proto::array::{ArraySpec, SUBCHUNK_BYTES};
pub use read::{read_chunk, read_chunk_with, read_region, region_reads};
pub use zarr::{ZarrExport, export_zarr};

use crate::client::Client;
use crate::dataset::{Staging, digest_from_checksums, draft};
use crate::error::{ClientError, Result};
use bytes::Bytes;
use futures_util::future::join_all;
use ganges_core::array::{AllocKind, Region, Subchunks, contiguous, gather};
use ganges_core::ids::NodeId;
use ganges_core::layout::Layout;
use ganges_core::shape::Shape;
use ganges_proto::DatasetName;
use ganges_proto::array::{ArrayMeta, ArrayOutcome, ArrayPlan, ArrayWritten, Place};
use ganges_proto::control::{ControlReply, ControlRequest, Peer};
use ganges_proto::manifest::{Content, Manifest, RecordFormat};
use ganges_proto::msg::{Message, PieceReq};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The empirical test: three writes of 1 MiB on every server.
pub const PROBE_WRITES: u32 = 3;
/// Pieces a process sends to one server at once.
const PIECES_AT_ONCE: usize = 4;
/// How long a process waits for a server to open the write before giving up.
const OPEN_WAIT: Duration = Duration::from_secs(120);

/// The manifest content of an array whose elements are generated (each holds its index).
pub const GENERATED_SOURCE: &str = "generated: each element holds its row-major index";

/// Whether the array in `manifest` holds generated elements, which any read can check.
pub fn is_generated(manifest: &Manifest) -> bool {
    matches!(&manifest.content, Content::Imported { source } if source == GENERATED_SOURCE)
}

/// The spec's subchunks, once it is checked (a bad spec is the caller's error).
fn check(spec: &ArraySpec) -> Result<Subchunks> {
    spec.check().map_err(|e| ClientError::Invalid(e.to_string()))
}

/// What names one collective call on every process: a number they agree on (rank 0 may draw
/// it and broadcast it, or every process derives it from the array and the call's sequence
/// number with [`CallId::derive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId(pub u64);

impl CallId {
    pub fn random() -> CallId {
        CallId(rand::random::<u64>() | 1)
    }

    /// The same on every process that gives the same name and sequence number.
    pub fn derive(name: &DatasetName, seq: u64) -> CallId {
        // FNV-1a: stable across builds and machines, unlike std's hasher.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.as_str().bytes().chain(seq.to_le_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        CallId(h | 1)
    }
}

/// This process's rank and the number of processes, as the MPI launcher (Open MPI, MPICH and
/// other PMI launchers, Slurm's `srun`) tells them in its environment; `None` outside one.
pub fn launcher_rank() -> Option<(u32, u32)> {
    let get = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u32>().ok());
    [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
    ]
    .into_iter()
    .find_map(|(r, s)| Some((get(r)?, get(s)?)))
    .filter(|(r, s)| r < s)
}

/// The servers' write rates, bytes per second, kept between collective calls: static
/// allocation plans each call with those its predecessor measured (panda §3.2).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rates(pub Option<Vec<f64>>);

/// What a committed collective write did.
#[derive(Clone, Debug)]
pub struct ArrayWriteReport {
    pub manifest: Manifest,
    /// From the open to the commit, the empirical test excluded (as the paper times a call).
    pub seconds: f64,
    /// The empirical test, when this call ran it.
    pub probe_seconds: Option<f64>,
    /// Bytes each server wrote.
    pub server_bytes: Vec<u64>,
    /// Each server's disk rate in this call (its rate before, where it wrote nothing).
    pub rates: Vec<f64>,
}

/// Rank 0's part: run the call around the servers.
#[derive(Debug)]
pub struct Coordinator<'c> {
    client: &'c Arc<Client>,
    spec: ArraySpec,
    subs: Subchunks,
    staging: Staging<'c>,
    /// The manifest staged; the final one adds the sizes and the array's part.
    staged: Manifest,
    rates: Vec<f64>,
    began: Instant,
    probe_seconds: Option<f64>,
}

/// Time panda's empirical test on every server: `PROBE_WRITES` writes of 1 MiB.
pub async fn probe_rates(client: &Client) -> Result<Vec<f64>> {
    client.require_all()?;
    let nodes: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let req = ControlRequest::WriteProbe { bytes: 1 << 20, count: PROBE_WRITES };
    let mut rates = vec![];
    for (node, r) in client.control_all(&nodes, &req).await {
        match r? {
            ControlReply::Rate { bytes_per_sec } => rates.push(bytes_per_sec),
            other => return Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") }),
        }
    }
    Ok(rates)
}

impl<'c> Coordinator<'c> {
    /// Measure the servers if `rates` has none (and the allocation needs them), stage the
    /// array's dataset and open the write on every server.
    pub async fn begin(
        client: &'c Arc<Client>,
        spec: ArraySpec,
        call: CallId,
        rates: &Rates,
    ) -> Result<Coordinator<'c>> {
        let subs = check(&spec)?;
        client.require_all()?;
        let servers = client.nodes();
        let (rates, probe_seconds) = match &rates.0 {
            Some(r) if r.len() == servers as usize => (r.clone(), None),
            _ if spec.alloc == AllocKind::RoundRobin => (vec![1.0; servers as usize], None),
            _ => {
                let t = Instant::now();
                let r = probe_rates(client).await?;
                (r, Some(t.elapsed().as_secs_f64()))
            }
        };
        let began = Instant::now();
        // Every fragment may take the whole array (dynamic allocation decides as it goes);
        // the staged files are sparse, and `Prepare` cuts them to what was written.
        let block = (spec.threshold.clamp(64 << 10, 4 << 20) as u32).next_power_of_two().min(4 << 20);
        let most = spec.schema.bytes().div_ceil(u64::from(block)).max(1) * u64::from(block);
        let shape = Shape::uniform(servers, most, block)?;
        if spec.replicas == 0 || spec.replicas > servers.min(4) {
            return Err(ClientError::Invalid(format!(
                "{} copies on {servers} servers: give 1 to {}",
                spec.replicas,
                servers.min(4)
            )));
        }
        let layout = Layout::chained(servers, spec.replicas)?;
        let source = if spec.generated {
            GENERATED_SOURCE.to_string()
        } else {
            format!("a collective write of {} processes", spec.ranks())
        };
        let content = Content::Imported { source };
        let manifest = draft(layout, spec.name.clone(), shape, RecordFormat::Bytes, content)?;
        let staging = Staging::begin_as(client, &manifest, true, call.0).await?;
        let manager = client.cluster().server(NodeId(0))?;
        let plan = ArrayPlan {
            spec: spec.clone(),
            txid: call.0,
            rates: rates.clone(),
            manager: Peer { node: NodeId(0), addr: manager.addr.clone() },
            peers: client.cluster().peers(),
        };
        let mut c = Coordinator { client, spec, subs, staging, staged: manifest, rates, began, probe_seconds };
        // The manager first, so that no server asks it for work before it knows the write.
        let open = ControlRequest::ArrayOpen { plan: Box::new(plan) };
        let nodes: Vec<NodeId> = (0..servers).map(NodeId).collect();
        let mut failed = crate::dataset::first_error(c.client.control_all(&nodes[..1], &open).await);
        if failed.is_none() {
            failed = crate::dataset::first_error(c.client.control_all(&nodes[1..], &open).await);
        }
        if let Some(e) = failed {
            c.staging.abort().await;
            return Err(e);
        }
        c.began = began;
        Ok(c)
    }

    /// Wait for every server's part, then commit the array. On any failure the staging is
    /// aborted: nothing is visible, and every process hears why.
    pub async fn finish(self) -> Result<ArrayWriteReport> {
        let c = self.client;
        let nodes: Vec<NodeId> = (0..c.nodes()).map(NodeId).collect();
        let req = ControlRequest::ArrayFinish { name: self.spec.name.clone(), txid: self.staging.txid };
        let mut parts: Vec<ArrayWritten> = vec![];
        let mut failure = None;
        for (node, r) in c.control_all(&nodes, &req).await {
            match r {
                Ok(ControlReply::ArrayWritten { written }) => parts.push(written),
                Ok(other) => {
                    failure.get_or_insert(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") });
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let built = match failure {
            Some(e) => Err(e),
            None => self.manifest(&parts),
        };
        let mut manifest = match built {
            Ok(m) => m,
            Err(e) => {
                self.staging.abort().await;
                return Err(e);
            }
        };
        // Every copy must hold the same bytes (a server forwards its blocks to the others).
        let digest = digest_from_checksums(c, &manifest, Some(self.staging.txid)).await.and_then(|(d, differ)| {
            match differ.first() {
                None => Ok(d),
                Some(first) => Err(ClientError::Invalid(format!("the copies of `{}` differ: {first}", manifest.name))),
            }
        });
        manifest = self.staging.conclude(manifest, digest).await?;
        let rates = parts
            .iter()
            .zip(&self.rates)
            .map(
                |(p, &before)| {
                    if p.placed.is_empty() || p.disk_secs <= 0.0 { before } else { p.bytes as f64 / p.disk_secs }
                },
            )
            .collect();
        Ok(ArrayWriteReport {
            manifest,
            seconds: self.began.elapsed().as_secs_f64(),
            probe_seconds: self.probe_seconds,
            server_bytes: parts.iter().map(|p| p.bytes).collect(),
            rates,
        })
    }

    /// The final manifest: each server's fragment as written, and where every subchunk is.
    fn manifest(&self, parts: &[ArrayWritten]) -> Result<Manifest> {
        let mut places: Vec<Option<Place>> = vec![None; self.subs.len()];
        for (k, p) in parts.iter().enumerate() {
            for &(i, offset) in &p.placed {
                let slot = places.get_mut(i as usize).ok_or_else(|| {
                    ClientError::Invalid(format!("server {k} placed subchunk {i}, which does not exist"))
                })?;
                if slot.replace(Place { fragment: k as u32, offset }).is_some() {
                    return Err(ClientError::Invalid(format!("subchunk {i} was written twice")));
                }
            }
        }
        let places = places
            .into_iter()
            .enumerate()
            .map(|(i, p)| p.ok_or_else(|| ClientError::Invalid(format!("no server wrote subchunk {i}"))))
            .collect::<Result<Vec<Place>>>()?;
        let mut m = self.staged.clone();
        m.shape = Shape::new(parts.iter().map(|p| p.fragment_bytes).collect(), m.shape.block_bytes())?;
        m.array = Some(Box::new(ArrayMeta {
            schema: self.spec.schema.clone(),
            disk: self.spec.disk.clone(),
            style: self.spec.style,
            threshold: self.spec.threshold,
            alloc: self.spec.alloc,
            places,
        }));
        Ok(m)
    }
}

/// Process `rank`'s part of a collective write: answer every server's requests for pieces of
/// `chunk` (this process's chunk of the memory layout, row-major over it) until the write
/// ends. Returns once the array is committed; an error says why it was not.
pub async fn write_rank(client: &Arc<Client>, spec: &ArraySpec, call: CallId, rank: u32, chunk: Bytes) -> Result<()> {
    let subs = check(spec)?;
    if rank >= spec.ranks() {
        return Err(ClientError::Invalid(format!("rank {rank} of a write by {} processes", spec.ranks())));
    }
    let want = spec.chunk_bytes(rank);
    if chunk.len() as u64 != want {
        return Err(ClientError::Invalid(format!(
            "process {rank}'s chunk is {want} bytes in this layout, but {} were given",
            chunk.len()
        )));
    }
    let region = spec.memory.chunk(&spec.schema, rank);
    let outcomes =
        join_all((0..client.nodes()).map(|k| serve(client, spec, &subs, call, rank, &region, &chunk, NodeId(k)))).await;
    let mut outcome: Option<ArrayOutcome> = None;
    let mut served = 0;
    for o in outcomes {
        let (o, n) = o?;
        if !o.committed {
            return Err(ClientError::Invalid(format!("the write of `{}` was not committed: {}", spec.name, o.why)));
        }
        served += n;
        outcome = Some(o);
    }
    // A process holding data that no server asked for joined a call that had ended: an earlier
    // write under the same call id (the servers remember its outcome), not this one.
    if served == 0 && !chunk.is_empty() {
        return Err(ClientError::Invalid(format!(
            "call {:#x} of `{}` had ended before process {rank} took part: give each collective write \
             of a name its own call number (the same in every process; CallId::derive(name, step) in Rust)",
            call.0, spec.name
        )));
    }
    outcome.map(drop).ok_or_else(|| ClientError::Invalid("a cluster with no servers".into()))
}

/// Answer one server until it reports the write's outcome; with it, how many subchunks
/// this process gave that server.
#[allow(clippy::too_many_arguments)]
async fn serve(
    client: &Arc<Client>,
    spec: &ArraySpec,
    subs: &Subchunks,
    call: CallId,
    rank: u32,
    region: &Region,
    chunk: &Bytes,
    node: NodeId,
) -> Result<(ArrayOutcome, usize)> {
    // This process's own server (a part-time I/O node) takes its pieces in memory.
    let conn = client.route(node)?;
    let elem = spec.schema.dtype.size();
    let mut last_heard = Instant::now();
    let mut served = 0;
    loop {
        let req = ControlRequest::ArrayWants { name: spec.name.clone(), txid: call.0, rank };
        let (subchunks, outcome) = match conn.control(req).await? {
            ControlReply::ArrayWants { subchunks, outcome } => (subchunks, outcome),
            other => return Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") }),
        };
        if let Some(o) = outcome {
            return Ok((o, served));
        }
        if subchunks.is_empty() {
            if last_heard.elapsed() > OPEN_WAIT {
                return Err(ClientError::Invalid(format!(
                    "{node} has asked nothing of process {rank} for {}s: is the write of `{}` open (rank 0 \
                     running, the same call id everywhere)?",
                    OPEN_WAIT.as_secs(),
                    spec.name
                )));
            }
            continue;
        }
        last_heard = Instant::now();
        served += subchunks.len();
        let mut sends = vec![];
        for i in subchunks {
            let Some(sub) = subs.boxes.get(i as usize) else {
                return Err(ClientError::Protocol {
                    node,
                    why: format!("asked for subchunk {i}, which does not exist"),
                });
            };
            let part = region.intersect(sub);
            // A run of the chunk's bytes goes as a slice of it; anything else is gathered.
            let data = match contiguous(elem, region, &part) {
                Some(run) => chunk.slice(run),
                None => {
                    Bytes::from(gather(elem, region, chunk, &part).map_err(|e| ClientError::Invalid(e.to_string()))?)
                }
            };
            let msg = Message::Piece(PieceReq { txid: call.0, subchunk: i, rank, data });
            sends.push(async move {
                match conn.call(msg).await? {
                    Message::ControlOk(_) => Ok(()),
                    Message::Error(err, _) => Err(ClientError::Server { node, err }),
                    other => {
                        Err(ClientError::Protocol { node, why: format!("unexpected reply kind {:#04x}", other.kind()) })
                    }
                }
            });
            if sends.len() == PIECES_AT_ONCE {
                for r in join_all(sends.drain(..)).await {
                    r?;
                }
            }
        }
        for r in join_all(sends).await {
            r?;
        }
    }
}

/// A whole collective call run in this process: rank 0's coordination and every rank's part,
/// with `chunks[r]` process `r`'s chunk. What `ganges array write` and the bench run.
pub async fn write_all(
    client: &Arc<Client>,
    spec: &ArraySpec,
    rates: &Rates,
    chunks: Vec<Bytes>,
) -> Result<ArrayWriteReport> {
    write_ranks(std::slice::from_ref(client), spec, rates, chunks).await
}

/// As [`write_all`], with process `r` writing through `clients[r % clients.len()]`: each
/// process its own client, as when part-time I/O nodes each reach their own server in memory.
/// The first client coordinates. Unless `spec` says otherwise, a process's home is its
/// client's own server.
pub async fn write_ranks(
    clients: &[Arc<Client>],
    spec: &ArraySpec,
    rates: &Rates,
    chunks: Vec<Bytes>,
) -> Result<ArrayWriteReport> {
    if chunks.len() as u32 != spec.ranks() {
        return Err(ClientError::Invalid(format!("{} chunks for {} processes", chunks.len(), spec.ranks())));
    }
    let Some(client) = clients.first() else {
        return Err(ClientError::Invalid("a collective write with no client".into()));
    };
    let mut spec = spec.clone();
    if spec.homes.is_empty() && clients.iter().any(|c| c.local_node().is_some()) {
        spec.homes = (0..spec.ranks() as usize).map(|r| clients[r % clients.len()].local_node().map(|n| n.0)).collect();
    }
    let spec = &spec;
    let call = CallId::random();
    let coordinator = Coordinator::begin(client, spec.clone(), call, rates).await?;
    let ranks = chunks.into_iter().enumerate().map(|(r, c)| {
        let client = clients[r % clients.len()].clone();
        let spec = spec.clone();
        tokio::spawn(async move { write_rank(&client, &spec, call, r as u32, c).await })
    });
    let ranks: Vec<_> = ranks.collect();
    let report = coordinator.finish().await;
    let mut rank_error = None;
    for r in ranks {
        match r.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                rank_error.get_or_insert(e);
            }
            Err(e) => {
                rank_error.get_or_insert(ClientError::Invalid(format!("a writing task failed: {e}")));
            }
        }
    }
    let report = report?;
    match rank_error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// The array part of a dataset's manifest, or an error saying it is not an array.
pub fn meta(manifest: &Manifest) -> Result<&ArrayMeta> {
    manifest
        .array
        .as_deref()
        .ok_or_else(|| ClientError::Invalid(format!("`{}` is a dataset, not an array", manifest.name)))
}
