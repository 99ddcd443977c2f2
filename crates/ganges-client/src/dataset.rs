//! Dataset operations: create (generated on the servers), put (import a file), get (export
//! in order), list, info, verify, remove.
//!
//! Creating follows the commit rule (docs/design.md, "Data on disk"): stage on every node, write the data, compute the
//! digest from the servers' stored checksums (checking that every copy agrees), prepare on
//! every node (data and manifest durable), then commit on every node. Any failure before the
//! commit aborts the staging everywhere; nothing of a failed create is ever visible.

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::scan::{ReadOptions, ReadReport, open_scan};
use bytes::Bytes;
use futures_util::future::join_all;
use ganges_core::datagen::Generator;
use ganges_core::digest::Digest;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::layout::Layout;
use ganges_core::route::ReadStats;
use ganges_core::sched::{Progress, ProgressMetric, Service};
use ganges_core::shape::Shape;
use ganges_proto::control::{BadBlock, ControlReply, ControlRequest};
use ganges_proto::manifest::{Content, DatasetName, DatasetState, MANIFEST_FORMAT, Manifest, RecordFormat};
use ganges_proto::msg::{Message, WriteReq};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::task::JoinSet;

/// Called with each increment of bytes done, for progress bars.
pub type ProgressFn = Arc<dyn Fn(u64) + Send + Sync>;

/// Blocks per `Generate` request: large enough to amortise a round trip, small enough for a
/// progress bar to move and a cancelled create to stop soon.
const GENERATE_CHUNK_BYTES: u64 = 16 << 20;
/// Writes in flight while importing a file: keeps every server busy without buffering much.
const PUT_WRITES_INFLIGHT: usize = 32;
/// Bytes per `Verify` request: a few seconds of work at most, even on a slow disk.
const VERIFY_CHUNK_BYTES: u64 = 256 << 20;
/// Blocks read and waiting for the file writer while exporting: enough to ride out a slow
/// write, a bound on memory.
const GET_QUEUE_BLOCKS: usize = 32;

/// How big a new dataset's fragments are.
#[derive(Clone, Debug)]
pub enum Sizing {
    /// This many bytes in all (rounded down to whole records), split evenly among the
    /// fragments.
    Total(u64),
    /// This many bytes in each fragment.
    PerFragment(u64),
    /// One size per fragment (LAY-4: they may differ).
    List(Vec<u64>),
}

impl Sizing {
    /// Each fragment's size, for `fragments` fragments of whole `align`-byte units (a record
    /// never straddles two fragments).
    pub fn fragment_bytes(self, fragments: u32, block_bytes: u32, align: u64) -> Result<Vec<u64>> {
        if fragments == 0 {
            return Err(ClientError::Invalid("a dataset has at least one fragment".into()));
        }
        Ok(match self {
            Sizing::List(v) => v,
            Sizing::PerFragment(b) => vec![b / align * align; fragments as usize],
            // Whole units in all, so every fragment holds whole units.
            Sizing::Total(t) => {
                Shape::split(t / align * align, fragments, block_bytes, align)?.fragment_sizes().to_vec()
            }
        })
    }
}

#[derive(Clone, Debug)]
pub struct CreateSpec {
    pub name: DatasetName,
    /// Size of each fragment (LAY-4: they may differ).
    pub fragment_bytes: Vec<u64>,
    pub block_bytes: u32,
    pub replicas: u32,
    pub generator: Generator,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub(crate) fn draft(
    layout: Layout,
    name: DatasetName,
    shape: Shape,
    records: RecordFormat,
    content: Content,
) -> Result<Manifest> {
    Ok(Manifest {
        format: MANIFEST_FORMAT,
        name,
        id: rand::random(),
        layout,
        shape,
        records,
        content,
        state: DatasetState::Complete,
        placement: None,
        origin: None,
        checksum: "crc32c".into(),
        digest: Digest::default(),
        array: None,
        created_unix_secs: unix_now(),
    })
}

fn expect_done(node: NodeId, r: Result<ControlReply>) -> Result<()> {
    match r? {
        ControlReply::Done => Ok(()),
        other => Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") }),
    }
}

/// A dataset being written on every node, until it is committed or aborted.
#[derive(Debug)]
pub(crate) struct Staging<'c> {
    client: &'c Client,
    name: DatasetName,
    pub(crate) txid: u64,
    nodes: Vec<NodeId>,
}

impl<'c> Staging<'c> {
    pub(crate) async fn begin(client: &'c Client, manifest: &Manifest) -> Result<Staging<'c>> {
        Staging::begin_with(client, manifest, false).await
    }

    /// With `append`, every copy is a log of appended blocks (DQ writes).
    pub(crate) async fn begin_with(client: &'c Client, manifest: &Manifest, append: bool) -> Result<Staging<'c>> {
        Staging::begin_as(client, manifest, append, rand::random::<u64>() | 1).await
    }

    /// On `nodes` only: servers that lack a committed dataset its other holders have, or the
    /// servers up when a write starts.
    pub(crate) async fn begin_on(
        client: &'c Client,
        manifest: &Manifest,
        nodes: &[NodeId],
        append: bool,
    ) -> Result<Staging<'c>> {
        let txid = rand::random::<u64>() | 1;
        let s = Staging { client, name: manifest.name.clone(), txid, nodes: nodes.to_vec() };
        let req = ControlRequest::Stage { txid, manifest: manifest.clone(), append };
        if let Some(e) = first_error(client.control_all(&s.nodes, &req).await) {
            s.abort().await;
            return Err(e);
        }
        Ok(s)
    }

    /// Under a transaction id the caller chose (a collective array write's call id).
    pub(crate) async fn begin_as(
        client: &'c Client,
        manifest: &Manifest,
        append: bool,
        txid: u64,
    ) -> Result<Staging<'c>> {
        client.require_all()?;
        let nodes: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
        let s = Staging { client, name: manifest.name.clone(), txid, nodes };
        let req = ControlRequest::Stage { txid, manifest: manifest.clone(), append };
        let results = client.control_all(&s.nodes, &req).await;
        if let Some(e) = first_error(results) {
            s.abort().await;
            return Err(e);
        }
        ganges_net::failpoint::hit("client.write.staged");
        Ok(s)
    }

    /// Go on without `down` (servers that died during the write): prepare, commit and abort
    /// only on the others.
    pub(crate) fn without(&mut self, down: &[NodeId]) {
        self.nodes.retain(|n| !down.contains(n));
    }

    /// Go on without `nodes`, which are up but hold nothing of the write: abort there.
    pub(crate) async fn drop_nodes(&mut self, nodes: &[NodeId]) {
        self.without(nodes);
        self.abort_on(nodes).await;
    }

    pub(crate) async fn abort(&self) {
        self.abort_on(&self.nodes).await;
    }

    async fn abort_on(&self, nodes: &[NodeId]) {
        let req = ControlRequest::Abort { txid: self.txid, name: self.name.clone() };
        for (node, r) in self.client.control_all(nodes, &req).await {
            if let Err(e) = r {
                tracing::warn!(%node, %e, "could not abort staging; `ganges dataset rm` cleans it up");
            }
        }
    }

    /// After the data is written: abort if writing failed, else record the digest and
    /// commit.
    pub(crate) async fn conclude(self, mut manifest: Manifest, written: Result<Digest>) -> Result<Manifest> {
        match written {
            Ok(digest) => manifest.digest = digest,
            Err(e) => {
                self.abort().await;
                return Err(e);
            }
        }
        self.finish(&manifest).await?;
        Ok(manifest)
    }

    /// Prepare everywhere, then commit: a server that does not answer its prepare aborts
    /// the write (callers that can go on without it use [`prepare`](Staging::prepare)).
    async fn finish(self, manifest: &Manifest) -> Result<()> {
        if let Some((_, e)) = self.prepare(manifest).await?.into_iter().next() {
            self.abort().await;
            return Err(e);
        }
        self.commit().await
    }

    /// Prepare on every node of the write, naming the first its coordinator and all of them
    /// its members. The servers that do not answer come back with their errors and nothing
    /// is aborted: the caller goes on without them ([`without`](Staging::without), then
    /// prepare again; a server that prepared unanswered rolls its copy back once back, as
    /// the coordinator tells it the write committed without it) or aborts. Any other error
    /// aborts the write everywhere.
    pub(crate) async fn prepare(&self, manifest: &Manifest) -> Result<Vec<(NodeId, ClientError)>> {
        let Some(&coordinator) = self.nodes.first() else {
            return Err(ClientError::Invalid(format!("no server is left to commit `{}` on", self.name)));
        };
        let members = self.nodes.clone();
        let prepare = ControlRequest::Prepare { txid: self.txid, manifest: manifest.clone(), coordinator, members };
        let mut unanswered = vec![];
        for (node, r) in self.client.control_all(&self.nodes, &prepare).await {
            match expect_done(node, r) {
                Ok(()) => {}
                Err(e) if e.unanswered() => unanswered.push((node, e)),
                Err(e) => {
                    self.abort().await;
                    return Err(e);
                }
            }
        }
        Ok(unanswered)
    }

    /// Once every node prepared: commit the coordinator (the first node), then the rest
    /// (the commit rule, ganges-core's `commit`).
    pub(crate) async fn commit(self) -> Result<()> {
        let coordinator = self.nodes[0];
        ganges_net::failpoint::hit("client.write.prepared");
        // The coordinator alone: if the name was taken meanwhile, it fails there and nothing
        // is visible anywhere. If it does not answer, it alone knows the outcome.
        let commit = ControlRequest::Commit { txid: self.txid, name: self.name.clone() };
        if let Err(e) = expect_done(coordinator, self.client.control(coordinator, commit.clone()).await) {
            if e.unanswered() {
                return Err(ClientError::CommitInDoubt {
                    name: self.name.clone(),
                    node: coordinator,
                    why: e.to_string(),
                });
            }
            self.abort().await;
            return Err(e);
        }
        ganges_net::failpoint::hit("client.write.committed-first");
        // Committed. A server that does not answer finishes by itself (it asks the
        // coordinator); one that answers with an error holds something else by that name.
        let rest = &self.nodes[1..];
        for (node, r) in self.client.control_all(rest, &commit).await {
            match expect_done(node, r) {
                Ok(()) => {}
                Err(e) if e.unanswered() => tracing::warn!(
                    %node, %e, dataset = %self.name,
                    "committed; this server did not answer its commit and finishes it by itself once it is back"
                ),
                Err(e) => {
                    return Err(ClientError::Invalid(format!(
                        "`{}` is committed, but {node} refused its commit ({e}); remove it with \
                         `ganges dataset rm {}` and write it again",
                        self.name, self.name
                    )));
                }
            }
        }
        Ok(())
    }
}

pub(crate) fn first_error(results: Vec<(NodeId, Result<ControlReply>)>) -> Option<ClientError> {
    results.into_iter().find_map(|(node, r)| expect_done(node, r).err())
}

/// The dataset digest from the servers' stored checksums, checking that every copy agrees.
pub(crate) async fn digest_from_checksums(
    client: &Client,
    manifest: &Manifest,
    txid: Option<u64>,
) -> Result<(Digest, Vec<String>)> {
    let mut asks = vec![];
    for f in 0..manifest.shape.fragment_count() {
        for node in manifest.layout.holders(FragmentId(f)) {
            if client.conn(node).is_ok() {
                asks.push((FragmentId(f), node));
            }
        }
    }
    let futs = asks.iter().map(|&(fragment, node)| async move {
        let req = ControlRequest::Checksums { name: manifest.name.clone(), fragment, txid };
        (fragment, node, client.control(node, req).await)
    });
    let mut by_fragment: BTreeMap<FragmentId, Vec<(NodeId, Vec<u32>)>> = BTreeMap::new();
    for (fragment, node, r) in join_all(futs).await {
        match r? {
            ControlReply::Checksums { crcs } => by_fragment.entry(fragment).or_default().push((node, crcs)),
            other => {
                return Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") });
            }
        }
    }
    let mut digest = Digest::default();
    let mut disagreements = vec![];
    let shape = &manifest.shape;
    for f in 0..shape.fragment_count() {
        let f = FragmentId(f);
        let Some(copies) = by_fragment.get(&f) else {
            return Err(ClientError::Invalid(format!("no live server holds {f} of `{}`", manifest.name)));
        };
        if let Some((node, crcs)) = copies.iter().find(|(_, c)| c.len() != shape.blocks_in(f) as usize) {
            return Err(ClientError::Invalid(format!("{node} has {} checksums for {f}", crcs.len())));
        }
        for b in 0..shape.blocks_in(f) {
            // Only the copies holding the block (all of them, once the dataset is complete).
            let mut holding = copies
                .iter()
                .filter(|(node, _)| manifest.layout.copy_on(f, *node).is_some_and(|c| manifest.holds(f, b, c)));
            let Some((first_node, crcs)) = holding.next() else {
                return Err(ClientError::Invalid(format!("no live server holds {f} block {b} of `{}`", manifest.name)));
            };
            let crc = crcs[b as usize];
            for (node, other) in holding {
                if other[b as usize] != crc && disagreements.len() < 100 {
                    disagreements.push(format!("{f} block {b}: {first_node} and {node} hold different bytes"));
                }
            }
            digest.add(shape.fragment_start(f) + shape.block_offset(b), shape.block_len(f, b), crc);
        }
    }
    Ok((digest, disagreements))
}

/// Create a dataset whose bytes the servers generate (each holder generates its copies).
pub async fn create(client: &Arc<Client>, spec: CreateSpec, progress: Option<ProgressFn>) -> Result<Manifest> {
    let layout = Layout::chained(client.nodes(), spec.replicas)?;
    create_with_layout(client, spec, layout, progress).await
}

/// `create` with a layout of the caller's choosing (LAY-2 mirrored groups, for one); the
/// layout must span the cluster's nodes.
pub async fn create_with_layout(
    client: &Arc<Client>,
    spec: CreateSpec,
    layout: Layout,
    progress: Option<ProgressFn>,
) -> Result<Manifest> {
    if layout.nodes() != client.nodes() {
        return Err(ClientError::Invalid(format!(
            "the layout spans {} nodes, the cluster has {}",
            layout.nodes(),
            client.nodes()
        )));
    }
    let shape = Shape::new(spec.fragment_bytes, spec.block_bytes)?;
    let align = spec.generator.align();
    if let Some(f) = shape.fragment_sizes().iter().position(|b| b % align != 0) {
        return Err(ClientError::Invalid(format!(
            "fragment {f} is {} bytes, not a whole number of {align}-byte records",
            shape.fragment_sizes()[f]
        )));
    }
    let records = match spec.generator {
        Generator::Random { .. } => RecordFormat::Bytes,
        Generator::Records { .. } => RecordFormat::Fixed {
            record_bytes: ganges_core::datagen::RECORD_BYTES as u32,
            key_bytes: ganges_core::datagen::KEY_BYTES as u32,
        },
    };
    let manifest = draft(layout, spec.name, shape, records, Content::Generated { generator: spec.generator })?;
    let staging = Staging::begin(client, &manifest).await?;
    let work = async {
        let per_node = staging.nodes.iter().map(|&node| {
            let manifest = &manifest;
            let progress = progress.clone();
            let txid = staging.txid;
            async move {
                let shape = &manifest.shape;
                let chunk = (GENERATE_CHUNK_BYTES / shape.block_bytes() as u64).max(1) as u32;
                for (fragment, _) in manifest.layout.copies_on(node, shape.fragment_count()) {
                    let blocks = shape.blocks_in(fragment);
                    let mut from = 0;
                    while from < blocks {
                        let to = (from + chunk).min(blocks);
                        let req = ControlRequest::Generate {
                            txid,
                            name: manifest.name.clone(),
                            fragment,
                            block_from: from,
                            block_to: to,
                        };
                        expect_done(node, client.control(node, req).await)?;
                        if let Some(p) = &progress {
                            let end = (shape.block_offset(to)).min(shape.fragment_bytes(fragment));
                            p(end - shape.block_offset(from));
                        }
                        from = to;
                    }
                }
                Ok::<(), ClientError>(())
            }
        });
        for r in join_all(per_node).await {
            r?;
        }
        let (digest, disagreements) = digest_from_checksums(client, &manifest, Some(staging.txid)).await?;
        if let Some(d) = disagreements.first() {
            return Err(ClientError::Invalid(format!("generated copies disagree: {d}")));
        }
        Ok(digest)
    };
    let digest = work.await;
    staging.conclude(manifest, digest).await
}

/// Import a local file as a dataset of `fragments` fragments.
pub async fn put(
    client: &Arc<Client>,
    name: DatasetName,
    path: &Path,
    fragments: u32,
    block_bytes: u32,
    replicas: u32,
    progress: Option<ProgressFn>,
) -> Result<Manifest> {
    let file = std::fs::File::open(path).map_err(ClientError::io(format!("opening {}", path.display())))?;
    let meta = file.metadata().map_err(ClientError::io(format!("reading {}", path.display())))?;
    if !meta.is_file() {
        return Err(ClientError::Invalid(format!("{} is not a regular file", path.display())));
    }
    let total = meta.len();
    if total == 0 {
        return Err(ClientError::Invalid(format!("{} is empty; a dataset holds at least one byte", path.display())));
    }
    let fragments = fragments.max(1).min(total.min(u32::MAX as u64) as u32);
    let shape = Shape::split(total, fragments, block_bytes, 1)?;
    let source = path.display().to_string();
    let layout = Layout::chained(client.nodes(), replicas)?;
    let manifest = draft(layout, name, shape, RecordFormat::Bytes, Content::Imported { source })?;
    let staging = Staging::begin(client, &manifest).await?;
    let digest = send_file(client, &manifest, staging.txid, file, progress).await;
    staging.conclude(manifest, digest).await
}

async fn send_file(
    client: &Arc<Client>,
    manifest: &Manifest,
    txid: u64,
    file: std::fs::File,
    progress: Option<ProgressFn>,
) -> Result<Digest> {
    let shape = manifest.shape.clone();
    // A reader thread feeds blocks through a small bounded channel: the file is read once,
    // and memory holds only a few blocks. It takes the fragments' blocks in turn (block 0 of
    // every fragment, then block 1, ...), so the writes in flight keep every server's disk
    // busy: fragment by fragment, they all went to one fragment's holders while the other
    // disks idled.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<(FragmentId, u32, Bytes)>>(8);
    let reader_shape = shape.clone();
    std::thread::spawn(move || {
        let rounds = (0..reader_shape.fragment_count()).map(|f| reader_shape.blocks_in(FragmentId(f))).max();
        for b in 0..rounds.unwrap_or(0) {
            for f in (0..reader_shape.fragment_count()).map(FragmentId).filter(|&f| b < reader_shape.blocks_in(f)) {
                let mut buf = vec![0u8; reader_shape.block_len(f, b) as usize];
                let at = reader_shape.fragment_start(f) + reader_shape.block_offset(b);
                let r = file.read_exact_at(&mut buf, at).map(|()| (f, b, Bytes::from(buf)));
                let stop = r.is_err();
                if tx.blocking_send(r).is_err() || stop {
                    return;
                }
            }
        }
    });
    let mut digest = Digest::default();
    let mut writes: JoinSet<Result<()>> = JoinSet::new();
    let (stream, mut done) = (rand::random::<u64>(), 0u64);
    while let Some(item) = rx.recv().await {
        let (fragment, block, data) = item.map_err(ClientError::io("reading the input file"))?;
        let crc = crc32c::crc32c(&data);
        digest.add(shape.fragment_start(fragment) + shape.block_offset(block), data.len() as u32, crc);
        for node in manifest.layout.holders(fragment) {
            let conn = client.conn(node)?.clone();
            let msg = Message::Write(WriteReq {
                stream,
                progress: Progress {
                    done_bytes: done,
                    total_bytes: shape.total_bytes(),
                    metric: ProgressMetric::Bytes,
                },
                service: Service::FURTHEST_BEHIND,
                txid,
                dataset: manifest.name.clone(),
                fragment,
                block,
                crc,
                data: data.clone(),
            });
            writes.spawn(async move {
                match conn.call(&msg).await? {
                    Message::WriteOk(_) => Ok(()),
                    Message::Error(err, _) => Err(ClientError::Server { node, err }),
                    other => {
                        Err(ClientError::Protocol { node, why: format!("unexpected reply kind {:#04x}", other.kind()) })
                    }
                }
            });
            while writes.len() >= PUT_WRITES_INFLIGHT {
                writes.join_next().await.expect("non-empty").expect("write tasks do not panic")?;
            }
        }
        done += data.len() as u64;
        if let Some(p) = &progress {
            p(data.len() as u64);
        }
    }
    while let Some(r) = writes.join_next().await {
        r.expect("write tasks do not panic")?;
    }
    Ok(digest)
}

/// Export a dataset to a local file, in order. Every fragment has its own consumer, all
/// reading at once with `opts` (the scan's parallelism: one sequential reader would wait on
/// one fragment's disks at a time), and each block is written at its place in the file, so
/// no block waits for the ones before it. The file appears only once complete and checked
/// against the dataset's digest. A `path` that is a folder gets a file of the dataset's name
/// in it, as `cp` does. Returns the manifest, the file written and the consumers' reports
/// summed.
pub async fn get(
    client: &Arc<Client>,
    name: &DatasetName,
    path: &Path,
    opts: ReadOptions,
    progress: Option<ProgressFn>,
) -> Result<(Manifest, PathBuf, ReadReport)> {
    let manifest = Arc::new(client.manifest(name).await?);
    let path = if path.is_dir() { path.join(name.as_str()) } else { path.to_path_buf() };
    if path.is_dir() {
        return Err(ClientError::Invalid(format!("{} is a folder", path.display())));
    }
    let partial = path.with_file_name(format!(
        ".{}.ganges-partial",
        path.file_name().map_or("out".into(), |n| n.to_string_lossy().to_string())
    ));
    // A DQ-written dataset is exported in the order its writers wrote it.
    if let Some(o) = &manifest.origin {
        o.validate(&manifest.shape).map_err(|e| ClientError::Invalid(format!("`{name}`: {e}")))?;
    }
    let streams = open_scan(client, &manifest, None, opts)?;
    // Errors name the file asked for; the partial one beside it is never left behind.
    let file = std::fs::File::create(&partial).map_err(ClientError::io(format!("creating {}", path.display())))?;
    if let Err(e) = file.set_len(manifest.total_bytes()) {
        let _ = std::fs::remove_file(&partial);
        return Err(ClientError::io(format!("sizing {}", path.display()))(e));
    }
    // Writes go to a thread, so disk writes overlap network reads.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, Bytes)>(GET_QUEUE_BLOCKS);
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        while let Some((offset, data)) = rx.blocking_recv() {
            file.write_all_at(&data, offset)?;
        }
        file.sync_all()
    });
    let mut consumers = JoinSet::new();
    for mut stream in streams {
        let (tx, manifest, progress) = (tx.clone(), manifest.clone(), progress.clone());
        consumers.spawn(async move {
            while let Some(block) = stream.next().await? {
                let n = block.data.len() as u64;
                let at = match &manifest.origin {
                    Some(o) => o.source_offset(&manifest.shape, block.dataset_offset).expect("validated"),
                    None => block.dataset_offset,
                };
                tx.send((at, block.data)).await.map_err(|_| ClientError::Invalid("the file writer stopped".into()))?;
                if let Some(p) = &progress {
                    p(n);
                }
            }
            Ok::<_, ClientError>(stream.close())
        });
    }
    drop(tx);
    let none = ReadReport {
        policy: opts.policy.to_string(),
        bytes: 0,
        seconds: 0.0,
        stats: ReadStats::default(),
        digest: Digest::default(),
    };
    let mut read: Result<ReadReport> = Ok(none);
    while let Some(joined) = consumers.join_next().await {
        let one = match joined {
            Ok(one) => one,
            Err(e) if e.is_cancelled() => continue,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        read = read.and_then(|total| one.map(|one| total.merged(one)));
        if read.is_err() {
            // The first failure ends the export: the other consumers stop (and with them
            // the writer, once it has what they sent).
            consumers.abort_all();
        }
    }
    let written = tokio::task::spawn_blocking(move || writer.join().expect("writer thread does not panic"))
        .await
        .expect("joining the writer does not panic");
    // A failed write (a full disk) is the cause when both failed: the readers only saw the
    // writer stop.
    let outcome =
        written.map_err(ClientError::io(format!("writing {}", path.display()))).and(read).and_then(|report| {
            if report.digest != manifest.digest {
                return Err(ClientError::DigestMismatch {
                    name: name.clone(),
                    expected: manifest.digest,
                    got: report.digest,
                });
            }
            std::fs::rename(&partial, &path).map_err(ClientError::io(format!("renaming to {}", path.display())))?;
            Ok(report)
        });
    match outcome {
        Ok(report) => Ok(((*manifest).clone(), path, report)),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// One dataset as seen across the cluster.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ListEntry {
    pub name: DatasetName,
    pub total_bytes: u64,
    /// `None` for committed datasets; the staging transaction otherwise.
    pub staging_txid: Option<u64>,
    /// Nodes that hold it (committed) or a staging folder of it.
    pub nodes: Vec<NodeId>,
}

/// Datasets in the cluster (and with `staging`, unfinished writes), with unreachable nodes.
pub async fn list(client: &Client, staging: bool) -> Result<(Vec<ListEntry>, Vec<NodeId>)> {
    let all: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let mut by: BTreeMap<(DatasetName, Option<u64>), ListEntry> = BTreeMap::new();
    let mut unreachable = vec![];
    for (node, r) in client.control_all(&all, &ControlRequest::ListDatasets { staging }).await {
        match r {
            Ok(ControlReply::Datasets { datasets }) => {
                for d in datasets {
                    let e = by.entry((d.name.clone(), d.staging_txid)).or_insert_with(|| ListEntry {
                        name: d.name.clone(),
                        total_bytes: d.total_bytes,
                        staging_txid: d.staging_txid,
                        nodes: vec![],
                    });
                    e.nodes.push(node);
                }
            }
            Ok(other) => {
                return Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") });
            }
            Err(_) => unreachable.push(node),
        }
    }
    Ok((by.into_values().collect(), unreachable))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyState {
    Present,
    /// The node is up but does not have the dataset.
    Missing,
    /// The node is unreachable.
    NodeDown,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CopyInfo {
    pub fragment: FragmentId,
    pub copy: u32,
    pub node: NodeId,
    pub state: CopyState,
    /// Blocks this copy holds, of `blocks` (fewer while the dataset is incomplete, GW-2).
    pub blocks_present: u32,
    pub blocks: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub manifest: Manifest,
    pub copies: Vec<CopyInfo>,
    /// Blocks each server rewrote from another copy (scrub, heal on read), where any.
    pub repaired: Vec<(NodeId, u64)>,
}

pub async fn info(client: &Client, name: &DatasetName) -> Result<DatasetInfo> {
    let manifest = client.manifest(name).await?;
    let all: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let mut state_of = BTreeMap::new();
    let mut repaired = vec![];
    for (node, r) in client.control_all(&all, &ControlRequest::ListDatasets { staging: false }).await {
        let s = match r {
            Ok(ControlReply::Datasets { datasets })
                if datasets.iter().any(|d| d.name == *name && d.id == manifest.id) =>
            {
                let entry = datasets.iter().find(|d| d.name == *name && d.id == manifest.id).expect("found");
                if entry.repaired_blocks > 0 {
                    repaired.push((node, entry.repaired_blocks));
                }
                CopyState::Present
            }
            Ok(_) => CopyState::Missing,
            Err(_) => CopyState::NodeDown,
        };
        state_of.insert(node, s);
    }
    let mut copies = vec![];
    for f in 0..manifest.shape.fragment_count() {
        for (copy, node) in manifest.layout.holders(FragmentId(f)).into_iter().enumerate() {
            let state = state_of.get(&node).copied().unwrap_or(CopyState::NodeDown);
            let (fragment, copy) = (FragmentId(f), copy as u32);
            let blocks = manifest.shape.blocks_in(fragment);
            let blocks_present = match (&manifest.state, &manifest.placement) {
                (DatasetState::Incomplete, Some(p)) => p.present(fragment, copy),
                _ => blocks,
            };
            copies.push(CopyInfo { fragment, copy, node, state, blocks_present, blocks });
        }
    }
    Ok(DatasetInfo { manifest, copies, repaired })
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VerifySummary {
    pub blocks: u64,
    pub bytes: u64,
    pub bad: Vec<(NodeId, BadBlock)>,
    /// Blocks whose stored checksums differ between copies.
    pub disagreements: Vec<String>,
    /// Whether the digest of the stored checksums equals the manifest's.
    pub digest_ok: bool,
    pub unreachable: Vec<NodeId>,
}

impl VerifySummary {
    pub fn is_clean(&self) -> bool {
        self.bad.is_empty() && self.disagreements.is_empty() && self.digest_ok && self.unreachable.is_empty()
    }
}

/// Check every block of every copy against its checksum, every copy against the others, and
/// the checksums against the manifest's digest.
pub async fn verify(client: &Client, name: &DatasetName, progress: Option<ProgressFn>) -> Result<VerifySummary> {
    let manifest = client.manifest(name).await?;
    let mut summary = VerifySummary::default();
    let holders: Vec<NodeId> = (0..client.nodes())
        .map(NodeId)
        .filter(|&n| !manifest.layout.copies_on(n, manifest.shape.fragment_count()).is_empty())
        .collect();
    // Each node checks its copies in chunks (bounded requests, a moving progress bar);
    // nodes work in parallel.
    let manifest_ref = &manifest;
    let futs = holders.iter().map(|&node| {
        let progress = progress.clone();
        async move {
            let shape = &manifest_ref.shape;
            let chunk = (VERIFY_CHUNK_BYTES / shape.block_bytes() as u64).max(1) as u32;
            let mut report = ganges_proto::control::VerifyReport::default();
            for (fragment, _) in manifest_ref.layout.copies_on(node, shape.fragment_count()) {
                let blocks = shape.blocks_in(fragment);
                let mut from = 0;
                while from < blocks {
                    let to = (from + chunk).min(blocks);
                    let req = ControlRequest::Verify { name: name.clone(), fragment, block_from: from, block_to: to };
                    match client.control(node, req).await? {
                        ControlReply::Verified { report: r } => {
                            if let Some(p) = &progress {
                                p(r.bytes);
                            }
                            report.blocks += r.blocks;
                            report.bytes += r.bytes;
                            report.bad.extend(r.bad);
                        }
                        other => {
                            return Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") });
                        }
                    }
                    from = to;
                }
            }
            Ok(report)
        }
    });
    for (node, r) in holders.iter().copied().zip(join_all(futs).await) {
        match r {
            Ok(report) => {
                summary.blocks += report.blocks;
                summary.bytes += report.bytes;
                summary.bad.extend(report.bad.into_iter().map(|b| (node, b)));
            }
            Err(ClientError::NodeDown { .. } | ClientError::Timeout { .. }) => summary.unreachable.push(node),
            Err(e) => return Err(e),
        }
    }
    let (digest, disagreements) = digest_from_checksums(client, &manifest, None).await?;
    summary.digest_ok = digest == manifest.digest;
    summary.disagreements = disagreements;
    Ok(summary)
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RemoveSummary {
    pub committed_on: Vec<NodeId>,
    pub staging_folders: u32,
    pub unreachable: Vec<NodeId>,
}

/// Remove a dataset (and any staging of that name) from every reachable node.
pub async fn remove(client: &Client, name: &DatasetName) -> Result<RemoveSummary> {
    let all: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let mut s = RemoveSummary::default();
    for (node, r) in client.control_all(&all, &ControlRequest::Remove { name: name.clone() }).await {
        match r {
            Ok(ControlReply::Removed { committed, staging }) => {
                if committed {
                    s.committed_on.push(node);
                }
                s.staging_folders += staging;
            }
            Ok(other) => {
                return Err(ClientError::Protocol { node, why: format!("unexpected reply {other:?}") });
            }
            Err(ClientError::NodeDown { .. }) => s.unreachable.push(node),
            Err(e) => return Err(e),
        }
    }
    if s.committed_on.is_empty() && s.staging_folders == 0 && s.unreachable.is_empty() {
        return Err(ClientError::UnknownDataset(name.clone()));
    }
    Ok(s)
}
