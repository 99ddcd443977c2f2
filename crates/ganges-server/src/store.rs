//! The fragment store: datasets as folders of fragment-copy files in a data directory.
//!
//! ```text
//! <data_dir>/node.json                          which node this directory belongs to
//! <data_dir>/datasets/<name>/manifest.json      immutable, identical on every holder
//! <data_dir>/datasets/<name>/f00003.c1.data     copy 1 of fragment 3: the bytes
//! <data_dir>/datasets/<name>/f00003.c1.crc      its CRC32C per 64 KiB of each block
//!                                               (`Shape::checks_of`), u32 little-endian
//! <data_dir>/datasets/<name>/txn.json          the write that made it, and its coordinator
//! <data_dir>/staging/<name>.<txid>/...          a dataset being written (same files)
//! <data_dir>/trash/...                          removals in progress
//! ```
//!
//! **Commit rule** (docs/design.md): nothing half-written is ever visible. A new dataset is
//! written under `staging/`; `prepare` fsyncs its files and writes the manifest beside them;
//! `commit` renames the staging folder to `datasets/<name>`, an atomic step that fails if the
//! name exists. Readers only ever open `datasets/`. A staging folder with a manifest is
//! *prepared*; the client commits on every node only after every node prepared, the
//! coordinator it named in `prepare` first. A crash between any two steps is resolved by
//! ganges-core's `commit` rule, which the janitor (`crate::txn`) applies.
//!
//! Every byte read is checked against its stored checksum; a read reads the checksum units it
//! touches (`ganges_core::shape::CHECK_BYTES`), not the whole block, so a piece of a block
//! costs the disk about its own length. A read that fails its check is never sent (the client
//! reads it from another copy).
//!
//! All methods here block on file I/O: callers run them on tokio's blocking pool.

use bytes::Bytes;
use ganges_core::commit::Verdict;
use ganges_core::disk::FileKey;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::layout::Layout;
use ganges_core::shape::Shape;
use ganges_proto::control::{BadBlock, DatasetEntry, VerifyReport};
use ganges_proto::manifest::{Content, DatasetName, DatasetState, MANIFEST_FORMAT, Manifest};
use ganges_proto::msg::{APPEND, ErrorCode};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no dataset `{0}` on this server (list them with `ganges dataset ls`)")]
    UnknownDataset(DatasetName),
    #[error("a dataset named `{0}` already exists (remove it with `ganges dataset rm {0}`)")]
    Exists(DatasetName),
    #[error("{0}")]
    OutOfRange(String),
    #[error("{fragment} block {block} failed its checksum on this server: {why}")]
    Corrupt { fragment: FragmentId, block: u32, why: String },
    #[error("no staging transaction {txid:016x} for `{name}` on this server")]
    NoSuchTxn { name: DatasetName, txid: u64 },
    #[error("{0}")]
    Incomplete(String),
    #[error(
        "{fragment} block {block} is not on this server's copy yet: the dataset is incomplete \
         (`ganges dataset complete` fills every copy)"
    )]
    NotPresent { fragment: FragmentId, block: u32 },
    #[error("disk full on {node}: {what}")]
    DiskFull { node: NodeId, what: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
}

impl StoreError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::UnknownDataset(_) => ErrorCode::UnknownDataset,
            StoreError::Exists(_) => ErrorCode::DatasetExists,
            StoreError::OutOfRange(_) | StoreError::NotPresent { .. } => ErrorCode::OutOfRange,
            StoreError::Corrupt { .. } => ErrorCode::Corrupt,
            StoreError::NoSuchTxn { .. } => ErrorCode::NoSuchTransaction,
            StoreError::Incomplete(_) | StoreError::BadRequest(_) => ErrorCode::BadRequest,
            StoreError::DiskFull { .. } => ErrorCode::DiskFull,
            StoreError::Io { .. } => ErrorCode::Io,
        }
    }
}

type Result<T> = std::result::Result<T, StoreError>;

/// A prepared write's transaction, the server whose commit decides it and the servers it
/// commits on (empty: every server that staged it), written in its folder before the
/// manifest (which marks it prepared), and kept once it is committed.
#[derive(Serialize, Deserialize)]
struct TxnFile {
    txid: u64,
    coordinator: NodeId,
    #[serde(default)]
    members: Vec<NodeId>,
}

/// A write the janitor must look at (`Store::unresolved`).
#[derive(Clone, Debug)]
pub struct Unresolved {
    pub name: DatasetName,
    pub txid: u64,
    pub phase: ganges_core::commit::Phase,
    /// How long since it last saw activity, when this process saw it at all; `None` for a
    /// prepared folder found on disk (the caller counts from when it first saw it).
    pub idle: Option<std::time::Duration>,
}

/// The identity file of a data directory, so two servers never share one by mistake.
#[derive(Serialize, Deserialize)]
struct NodeFile {
    node: NodeId,
}

/// The two files of one fragment copy.
#[derive(Debug)]
pub struct CopyFiles {
    pub fragment: FragmentId,
    pub copy: u32,
    data: File,
    /// The data file again, opened for direct I/O, when the store uses it.
    direct: Option<File>,
    crc: File,
    /// A committed copy's checksums (each block's units in turn: `Shape::checks_of`), read
    /// once when the dataset is opened, so a read costs one syscall (empty for a copy being
    /// written: its transaction keeps them).
    crcs: Vec<u32>,
    /// Identifies this file to the disk model (a seek is charged when it changes).
    pub key: FileKey,
}

/// In a dataset's folder: one JSON line per block of a local copy rewritten from another.
const REPAIR_LOG: &str = "repairs.log";

/// A committed dataset, opened: its manifest and this node's copies.
#[derive(Debug)]
pub struct Dataset {
    pub manifest: Manifest,
    /// `None` where the manifest says this node holds a copy but its files are missing.
    copies: BTreeMap<FragmentId, Option<Arc<CopyFiles>>>,
}

impl Dataset {
    /// This node's copy of `fragment`.
    pub fn copy(&self, fragment: FragmentId) -> Result<&Arc<CopyFiles>> {
        match self.copies.get(&fragment) {
            Some(Some(c)) => Ok(c),
            Some(None) => Err(StoreError::Corrupt { fragment, block: 0, why: "the copy's files are missing".into() }),
            None => Err(StoreError::OutOfRange(format!(
                "this server holds no copy of {fragment} of `{}`",
                self.manifest.name
            ))),
        }
    }
}

/// A dataset being written.
#[derive(Debug)]
struct Txn {
    manifest: Manifest,
    dir: PathBuf,
    copies: BTreeMap<FragmentId, CopyFiles>,
    /// The checksum of each block of each local copy written so far, and of each of its
    /// units (`None`: not yet). Kept here and written to the checksum files once, at
    /// `prepare`: one syscall per block less.
    crcs: Mutex<BTreeMap<FragmentId, Vec<Option<BlockSums>>>>,
    /// Each local copy is a log of `APPEND` writes (DQ-1): its blocks, in slot order, as
    /// the disk wrote them; the staged fragment size is only a capacity.
    append: Option<Mutex<BTreeMap<FragmentId, Log>>>,
    /// When it last saw a request (milliseconds since the store opened).
    touched: AtomicU64,
    /// The coordinator the last `prepare` named, once prepared.
    prepared: Mutex<Option<NodeId>>,
}

/// A written block's CRC32C, and its units' (`Shape::check_bytes`).
type BlockSums = (u32, Vec<u32>);

/// An append-mode copy: slots handed out so far, their bytes, and the short block if any
/// (only the last block of a fragment may be short).
#[derive(Debug, Default)]
struct Log {
    slots: u32,
    bytes: u64,
    short: Option<u32>,
}

#[derive(Debug, Default)]
struct Inner {
    open: BTreeMap<DatasetName, Arc<Dataset>>,
    txns: BTreeMap<(DatasetName, u64), Arc<Txn>>,
}

#[derive(Debug)]
pub struct Store {
    node: NodeId,
    root: PathBuf,
    /// Read and write data files with direct I/O (`crate::direct`).
    direct: bool,
    inner: Mutex<Inner>,
    /// Held while a write is committed or aborted: the client's commit and the janitor's
    /// roll-forward of the same write may arrive together, and each must see the other's
    /// rename whole, not a staging folder that vanishes between its check and its rename.
    resolving: Mutex<()>,
    opened: Instant,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
    let what = what.into();
    move |err| StoreError::Io { what, err }
}

fn copy_file_name(fragment: FragmentId, copy: u32, ext: &str) -> String {
    format!("f{:05}.c{copy}.{ext}", fragment.0)
}

fn staging_dir_name(name: &DatasetName, txid: u64) -> String {
    format!("{name}.{txid:016x}")
}

fn read_txn_file(dir: &Path) -> Option<TxnFile> {
    serde_json::from_slice(&fs::read(dir.join("txn.json")).ok()?).ok()
}

/// A stable key for the disk model: different for every copy file of every dataset.
fn file_key(id: u64, fragment: FragmentId) -> FileKey {
    ganges_core::datagen::mix64(id ^ ((fragment.0 as u64) << 40))
}

fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// Where each fragment `node` staged as part of `staged` (of `fragments` fragments) ends up
/// under `layout`: the same fragment, or for a write committed on fewer servers (a `Placed`
/// layout drawn from a one-copy chained one), the fragment placed on `node`. `None` if the
/// layouts do not match.
fn final_fragments(
    staged: &Layout,
    layout: &Layout,
    fragments: u32,
    node: NodeId,
) -> Option<BTreeMap<FragmentId, FragmentId>> {
    layout.validate().ok()?;
    let mine = staged.copies_on(node, fragments).into_iter().map(|(f, _)| f);
    match (staged, layout) {
        (a, b) if a == b => Some(mine.map(|f| (f, f)).collect()),
        (Layout::Chained { nodes, replicas: 1 }, Layout::Placed { nodes: n, on }) if nodes == n => {
            let at = on.iter().position(|&k| k == node.0)?;
            Some(mine.map(|f| (f, FragmentId(at as u32))).collect())
        }
        _ => None,
    }
}

/// An incomplete dataset must say where its blocks are, and a complete one must not; an
/// origin map (DQ writes) must be a permutation of the dataset's blocks.
fn check_placement(m: &Manifest) -> Result<()> {
    m.layout.fits(m.shape.fragment_count()).map_err(|e| StoreError::BadRequest(format!("`{}`: {e}", m.name)))?;
    if let Some(o) = &m.origin {
        o.validate(&m.shape).map_err(|e| StoreError::BadRequest(format!("`{}`: {e}", m.name)))?;
    }
    match (m.state, &m.placement) {
        (DatasetState::Complete, None) => Ok(()),
        (DatasetState::Complete, Some(_)) => {
            Err(StoreError::BadRequest(format!("`{}` is complete but its manifest has a placement", m.name)))
        }
        (DatasetState::Incomplete, None) => {
            Err(StoreError::BadRequest(format!("`{}` is incomplete but its manifest has no placement", m.name)))
        }
        (DatasetState::Incomplete, Some(p)) => {
            if p.replicas() != m.layout.replicas() {
                return Err(StoreError::BadRequest(format!(
                    "`{}`: the placement has {} copies, the layout {}",
                    m.name,
                    p.replicas(),
                    m.layout.replicas()
                )));
            }
            p.validate(&m.shape).map_err(|e| StoreError::BadRequest(format!("`{}`: {e}", m.name)))
        }
    }
}

/// A write `Store::check_write` has passed: where it goes, for the disk queue and for
/// `Store::write_staged`.
#[derive(Debug)]
pub struct StagedWrite {
    txn: Arc<Txn>,
    /// The staging transaction.
    pub txid: u64,
    fragment: FragmentId,
    /// The disk model's key of the copy file.
    pub key: FileKey,
    /// Which copy of the fragment it is (0: the primary).
    pub copy: u32,
}

impl StagedWrite {
    /// The id of the dataset being written.
    pub fn dataset(&self) -> u64 {
        self.txn.manifest.id
    }

    /// Whether the block is appended wherever the log ends (DQ-1), not written at its place.
    pub fn appends(&self) -> bool {
        self.txn.append.is_some()
    }

    pub fn block_bytes(&self) -> u32 {
        self.txn.manifest.shape.block_bytes()
    }
}

/// A copy of a committed, incomplete dataset opened for replica completion.
#[derive(Debug)]
pub struct FillFiles {
    pub fragment: FragmentId,
    pub copy: u32,
    data: File,
    direct: Option<File>,
    crc: File,
    /// Checksums of the blocks filled so far (one per unit), written to the checksum file by
    /// `sync_fill`.
    filled: Mutex<Vec<(u32, Vec<u32>)>>,
    pub key: FileKey,
}

/// The CRC32C of `data`, a block, and of each of its checksum units (`Shape::check_bytes`),
/// in one pass over the bytes: the block's is its units' combined.
fn block_sums(data: &[u8], unit: u32) -> BlockSums {
    let units: Vec<u32> = data.chunks(unit as usize).map(crc32c::crc32c).collect();
    (combine_units(&units, unit, data.len() as u32), units)
}

/// The CRC32C of consecutive units whose CRCs are `crcs`: `unit` bytes each but the last,
/// `len` bytes in all.
fn combine_units(crcs: &[u32], unit: u32, len: u32) -> u32 {
    let mut left = len;
    crcs.iter().fold(0, |acc, &c| {
        let n = left.min(unit);
        left -= n;
        ganges_core::crc::combine(acc, c, u64::from(n))
    })
}

/// Every checksum of a copy's checksum file, in order.
fn read_crcs(file: &File) -> io::Result<Vec<u32>> {
    let mut raw = vec![0u8; file.metadata()?.len() as usize];
    file.read_exact_at(&mut raw, 0)?;
    Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
}

fn read_manifest(path: &Path) -> Result<Manifest> {
    let text = fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
    let m: Manifest = serde_json::from_slice(&text).map_err(|e| StoreError::Io {
        what: format!("parsing {}", path.display()),
        err: io::Error::new(io::ErrorKind::InvalidData, e),
    })?;
    if m.format != MANIFEST_FORMAT {
        return Err(StoreError::BadRequest(format!(
            "{} has manifest format {}, this build reads {MANIFEST_FORMAT}",
            path.display(),
            m.format
        )));
    }
    check_placement(&m)?;
    Ok(m)
}

impl Store {
    /// Open (creating if needed) the data directory of `node`; with `direct`, data files are
    /// read and written with direct I/O (refused where the file system does not take it).
    pub fn open(root: &Path, node: NodeId, direct: bool) -> Result<Store> {
        for sub in ["datasets", "staging", "trash"] {
            fs::create_dir_all(root.join(sub)).map_err(io_err(format!("creating {}", root.join(sub).display())))?;
        }
        if direct && let Err(e) = crate::direct::probe(root) {
            return Err(StoreError::BadRequest(format!(
                "{}'s file system does not take direct I/O (O_DIRECT: {e}); put the data directory on a disk, \
                 or run without --direct-io",
                root.display()
            )));
        }
        let id_path = root.join("node.json");
        match fs::read(&id_path) {
            Ok(text) => {
                let f: NodeFile = serde_json::from_slice(&text)
                    .map_err(|e| StoreError::BadRequest(format!("{}: {e}", id_path.display())))?;
                if f.node != node {
                    return Err(StoreError::BadRequest(format!(
                        "{} belongs to {}, not {node}; give each server its own data directory",
                        root.display(),
                        f.node
                    )));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let text = serde_json::to_vec(&NodeFile { node }).expect("serialises");
                fs::write(&id_path, text).map_err(io_err(format!("writing {}", id_path.display())))?;
            }
            Err(e) => return Err(io_err(format!("reading {}", id_path.display()))(e)),
        }
        // Finish removals a crash interrupted.
        if let Ok(entries) = fs::read_dir(root.join("trash")) {
            for e in entries.flatten() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let store = Store {
            node,
            root: root.to_path_buf(),
            direct,
            inner: Mutex::new(Inner::default()),
            resolving: Mutex::new(()),
            opened: Instant::now(),
        };
        store.clean_staging();
        Ok(store)
    }

    /// At start: drop the staging folders of writes that never reached `prepare` (their
    /// transactions died with the process before it; no commit can name them). A prepared
    /// one is kept: a write may still commit it (`commit` works from what is on disk).
    fn clean_staging(&self) {
        let Ok(entries) = fs::read_dir(self.root.join("staging")) else { return };
        for e in entries.flatten() {
            let dir = e.path();
            if dir.join("manifest.json").exists() {
                tracing::warn!(node = %self.node, staging = %dir.display(), "a prepared write was not committed; kept for its commit");
                continue;
            }
            match self.discard(&dir) {
                Ok(()) => {
                    tracing::info!(node = %self.node, staging = %dir.display(), "removed an unfinished write's leftovers")
                }
                Err(e) => tracing::warn!(node = %self.node, %e, "could not remove an unfinished write's leftovers"),
            }
        }
    }

    /// A data file's second handle, for direct I/O, when the store uses it.
    fn open_direct(&self, path: &Path, write: bool) -> Result<Option<File>> {
        if !self.direct {
            return Ok(None);
        }
        crate::direct::open(path, write).map(Some).map_err(io_err(format!("opening {} for direct I/O", path.display())))
    }

    /// Write `data` at `offset` of a data file: direct where the store uses direct I/O and the
    /// range is aligned, else through the page cache.
    fn write_data(&self, buffered: &File, direct: Option<&File>, data: &[u8], offset: u64) -> io::Result<()> {
        match direct {
            Some(d) if crate::direct::aligned(offset, data.len()) => crate::direct::write_at(d, data, offset),
            _ => buffered.write_all_at(data, offset),
        }
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    fn map_write_err(&self, what: String) -> impl FnOnce(io::Error) -> StoreError {
        let node = self.node;
        move |err| {
            let full = [rustix::io::Errno::NOSPC, rustix::io::Errno::DQUOT].map(|e| e.raw_os_error());
            if err.raw_os_error().is_some_and(|code| full.contains(&code)) {
                StoreError::DiskFull { node, what }
            } else {
                StoreError::Io { what, err }
            }
        }
    }

    fn local_copies(&self, layout: &Layout, shape: &Shape) -> Vec<(FragmentId, u32)> {
        if self.node.0 >= layout.nodes() {
            return vec![];
        }
        layout.copies_on(self.node, shape.fragment_count())
    }

    /// The staging transactions this server appends to (DQ writes being written).
    pub fn append_txids(&self) -> Vec<u64> {
        let inner = self.inner.lock();
        inner.txns.iter().filter(|(_, t)| t.append.is_some()).map(|((_, txid), _)| *txid).collect()
    }

    /// The datasets opened so far (those being read).
    pub fn open_datasets(&self) -> Vec<Arc<Dataset>> {
        self.inner.lock().open.values().cloned().collect()
    }

    /// A committed dataset, opened once and cached (opened again after a repair).
    pub fn dataset(&self, name: &DatasetName) -> Result<Arc<Dataset>> {
        if let Some(d) = self.inner.lock().open.get(name) {
            return Ok(d.clone());
        }
        let dir = self.root.join("datasets").join(name.as_str());
        let manifest_path = dir.join("manifest.json");
        if !manifest_path.exists() {
            return Err(StoreError::UnknownDataset(name.clone()));
        }
        let manifest = read_manifest(&manifest_path)?;
        let mut copies = BTreeMap::new();
        for (fragment, copy) in self.local_copies(&manifest.layout, &manifest.shape) {
            let data_path = dir.join(copy_file_name(fragment, copy, "data"));
            let data = File::open(&data_path);
            let crc = File::open(dir.join(copy_file_name(fragment, copy, "crc")));
            let files = match (data, crc) {
                (Ok(data), Ok(crc)) => {
                    let crcs = read_crcs(&crc).map_err(io_err(format!("reading the checksums of {fragment}")))?;
                    let key = file_key(manifest.id, fragment);
                    let direct = self.open_direct(&data_path, false)?;
                    Some(Arc::new(CopyFiles { fragment, copy, data, direct, crc, crcs, key }))
                }
                _ => {
                    tracing::warn!(dataset = %name, %fragment, copy, "copy files missing");
                    None
                }
            };
            copies.insert(fragment, files);
        }
        let d = Arc::new(Dataset { manifest, copies });
        self.inner.lock().open.insert(name.clone(), d.clone());
        Ok(d)
    }

    /// Read `len` bytes at `start` of block `block` of this node's copy of `fragment`,
    /// after checking the checksum units they fall in. Returns the bytes and their CRC32C.
    pub fn read(&self, ds: &Dataset, fragment: FragmentId, block: u32, start: u32, len: u32) -> Result<(Bytes, u32)> {
        let copy = ds.copy(fragment)?;
        let Some(stored) = copy.crcs.get(ds.manifest.shape.checks_of(fragment, block)) else {
            return Err(StoreError::Corrupt { fragment, block, why: "its checksum is missing".into() });
        };
        self.read_checked(ds, copy, block, start, len, stored)
    }

    /// Read the checksum units of a block of `copy` that hold `[start, start + len)` and check
    /// them against `stored` (the block's); returns the bytes asked for and their CRC32C.
    fn read_checked(
        &self,
        ds: &Dataset,
        copy: &CopyFiles,
        block: u32,
        start: u32,
        len: u32,
        stored: &[u32],
    ) -> Result<(Bytes, u32)> {
        let (fragment, shape) = (copy.fragment, &ds.manifest.shape);
        let (unit, block_len) = (shape.check_bytes(), shape.block_len(fragment, block));
        let corrupt = |why: String| StoreError::Corrupt { fragment, block, why };
        let (first, last) = (start / unit, (start + len).div_ceil(unit));
        let (from, to) = (first * unit, (last * unit).min(block_len));
        let at = shape.block_offset(block) + from as u64;
        let buf = match &copy.direct {
            Some(d) => crate::direct::read_at(d, at, (to - from) as usize),
            None => crate::sys::read_exact_at(&copy.data, (to - from) as usize, at).map(Bytes::from),
        }
        .map_err(|e| corrupt(format!("reading the block: {e}")))?;
        let stored = &stored[first as usize..last as usize];
        for (i, (chunk, &want)) in buf.chunks(unit as usize).zip(stored).enumerate() {
            let actual = crc32c::crc32c(chunk);
            if actual != want {
                let at = from + i as u32 * unit;
                return Err(corrupt(format!(
                    "bytes [{at}, {}): stored {want:08x}, computed {actual:08x}",
                    at + chunk.len() as u32
                )));
            }
        }
        let bytes = buf.slice((start - from) as usize..(start - from + len) as usize);
        // Whole units: their stored CRCs make the reply's without another pass over the bytes.
        let crc =
            if (start, start + len) == (from, to) { combine_units(stored, unit, len) } else { crc32c::crc32c(&bytes) };
        Ok((bytes, crc))
    }

    /// Check a read request's range against the dataset, before it is queued.
    pub fn check_read(&self, ds: &Dataset, fragment: FragmentId, block: u32, start: u32, len: u32) -> Result<()> {
        let shape = &ds.manifest.shape;
        if fragment.0 >= shape.fragment_count() {
            return Err(StoreError::OutOfRange(format!(
                "`{}` has {} fragments; there is no {fragment}",
                ds.manifest.name,
                shape.fragment_count()
            )));
        }
        let copy = ds.copy(fragment)?;
        if block >= shape.blocks_in(fragment) {
            return Err(StoreError::OutOfRange(format!(
                "{fragment} of `{}` has {} blocks; there is no block {block}",
                ds.manifest.name,
                shape.blocks_in(fragment)
            )));
        }
        if !ds.manifest.holds(fragment, block, copy.copy) {
            return Err(StoreError::NotPresent { fragment, block });
        }
        let block_len = shape.block_len(fragment, block);
        if len == 0 || start.checked_add(len).is_none_or(|end| end > block_len) {
            return Err(StoreError::OutOfRange(format!(
                "bytes [{start}, {start}+{len}) are outside block {block} ({block_len} bytes)"
            )));
        }
        Ok(())
    }

    /// Committed datasets (and with `staging`, staging folders) this node holds.
    pub fn list(&self, staging: bool) -> Result<Vec<DatasetEntry>> {
        let mut out = vec![];
        let datasets = self.root.join("datasets");
        let rd = fs::read_dir(&datasets).map_err(io_err(format!("listing {}", datasets.display())))?;
        for e in rd.flatten() {
            let Ok(name) = e.file_name().to_string_lossy().parse::<DatasetName>() else {
                continue;
            };
            match self.dataset(&name) {
                Ok(d) => out.push(self.entry(&d.manifest, None)),
                Err(err) => tracing::warn!(dataset = %name, %err, "unreadable dataset"),
            }
        }
        if staging {
            let dir = self.root.join("staging");
            let rd = fs::read_dir(&dir).map_err(io_err(format!("listing {}", dir.display())))?;
            for e in rd.flatten() {
                let file_name = e.file_name().to_string_lossy().to_string();
                let Some((name, txid)) = file_name.rsplit_once('.') else {
                    continue;
                };
                let (Ok(name), Ok(txid)) = (name.parse::<DatasetName>(), u64::from_str_radix(txid, 16)) else {
                    continue;
                };
                let txn = self.inner.lock().txns.get(&(name.clone(), txid)).cloned();
                if let Some(logs) = txn.as_ref().and_then(|t| t.append.as_ref()) {
                    // A log being appended to: its size is what it holds so far.
                    let held: u64 = logs.lock().values().map(|l| l.bytes).sum();
                    let t = txn.as_ref().expect("checked");
                    out.push(DatasetEntry {
                        local_bytes: held,
                        total_bytes: held,
                        ..self.entry(&t.manifest, Some(txid))
                    });
                    continue;
                }
                let manifest = match txn {
                    Some(t) => Some(t.manifest.clone()),
                    None => read_manifest(&e.path().join("manifest.json")).ok(),
                };
                match manifest {
                    Some(m) => out.push(self.entry(&m, Some(txid))),
                    None => out.push(DatasetEntry {
                        name,
                        staging_txid: Some(txid),
                        total_bytes: 0,
                        local_copies: 0,
                        local_bytes: 0,
                        id: 0,
                        repaired_blocks: 0,
                    }),
                }
            }
        }
        out.sort_by(|a, b| (&a.name, a.staging_txid).cmp(&(&b.name, b.staging_txid)));
        Ok(out)
    }

    fn entry(&self, m: &Manifest, staging_txid: Option<u64>) -> DatasetEntry {
        let local = self.local_copies(&m.layout, &m.shape);
        DatasetEntry {
            name: m.name.clone(),
            staging_txid,
            total_bytes: m.total_bytes(),
            local_copies: local.len() as u32,
            local_bytes: local.iter().map(|(f, _)| m.shape.fragment_bytes(*f)).sum(),
            id: m.id,
            repaired_blocks: if staging_txid.is_none() { self.repairs(&m.name) } else { 0 },
        }
    }

    /// Blocks of `name`'s local copies rewritten from another copy so far: the lines of its
    /// repair log.
    pub fn repairs(&self, name: &DatasetName) -> u64 {
        let log = self.root.join("datasets").join(name.as_str()).join(REPAIR_LOG);
        fs::read_to_string(log).map_or(0, |t| t.lines().filter(|l| !l.trim().is_empty()).count() as u64)
    }

    /// After `blocks` of `fragment` were rewritten from `source`'s copy: note each in the
    /// dataset's repair log (one JSON line each, synced), and reopen the dataset on its next
    /// use, so reads check the new checksums.
    pub fn record_repair(&self, ds: &Dataset, fragment: FragmentId, blocks: &[u32], source: NodeId) -> Result<()> {
        let dir = self.root.join("datasets").join(ds.manifest.name.as_str());
        let copy = ds.copy(fragment)?.copy;
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut lines = String::new();
        for b in blocks {
            let line =
                serde_json::json!({ "fragment": fragment.0, "copy": copy, "block": b, "from": source.0, "at": at });
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        let path = dir.join(REPAIR_LOG);
        let what = format!("writing {}", path.display());
        let mut f =
            OpenOptions::new().create(true).append(true).open(&path).map_err(self.map_write_err(what.clone()))?;
        f.write_all(lines.as_bytes()).map_err(self.map_write_err(what.clone()))?;
        f.sync_all().map_err(self.map_write_err(what))?;
        self.inner.lock().open.remove(&ds.manifest.name);
        Ok(())
    }

    /// Open a staging folder for this node's copies of `manifest`'s dataset; with `append`,
    /// each copy is a log of `APPEND` writes (see `ControlRequest::Stage`).
    pub fn stage(&self, txid: u64, manifest: Manifest, append: bool) -> Result<()> {
        manifest.layout.fits(manifest.shape.fragment_count()).map_err(|e| StoreError::BadRequest(e.to_string()))?;
        let name = manifest.name.clone();
        if self.root.join("datasets").join(name.as_str()).exists() {
            return Err(StoreError::Exists(name));
        }
        let dir = self.root.join("staging").join(staging_dir_name(&name, txid));
        if dir.exists() {
            return Err(StoreError::BadRequest(format!("transaction {txid:016x} is already staged")));
        }
        fs::create_dir_all(&dir).map_err(self.map_write_err(format!("creating {}", dir.display())))?;
        let mut copies = BTreeMap::new();
        let mut crcs = BTreeMap::new();
        for (fragment, copy) in self.local_copies(&manifest.layout, &manifest.shape) {
            let open = |ext: &str, len: u64| -> Result<File> {
                let path = dir.join(copy_file_name(fragment, copy, ext));
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(self.map_write_err(format!("creating {}", path.display())))?;
                f.set_len(len).map_err(self.map_write_err(format!("sizing {}", path.display())))?;
                Ok(f)
            };
            let blocks = manifest.shape.blocks_in(fragment);
            let data = open("data", manifest.shape.fragment_bytes(fragment))?;
            let direct = self.open_direct(&dir.join(copy_file_name(fragment, copy, "data")), true)?;
            let crc = open("crc", manifest.shape.checks_upto(fragment, blocks) as u64 * 4)?;
            let key = file_key(manifest.id, fragment);
            copies.insert(fragment, CopyFiles { fragment, copy, data, direct, crc, crcs: vec![], key });
            crcs.insert(fragment, vec![None; blocks as usize]);
        }
        let append = append.then(|| Mutex::new(copies.keys().map(|&f| (f, Log::default())).collect()));
        let touched = AtomicU64::new(self.millis());
        let prepared = Mutex::new(None);
        let txn = Txn { manifest, dir, copies, crcs: Mutex::new(crcs), append, touched, prepared };
        self.inner.lock().txns.insert((name, txid), Arc::new(txn));
        Ok(())
    }

    /// A staged write, marked as active now.
    fn txn(&self, name: &DatasetName, txid: u64) -> Result<Arc<Txn>> {
        let txn = self
            .inner
            .lock()
            .txns
            .get(&(name.clone(), txid))
            .cloned()
            .ok_or_else(|| StoreError::NoSuchTxn { name: name.clone(), txid })?;
        txn.touched.store(self.millis(), Ordering::Relaxed);
        Ok(txn)
    }

    fn millis(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn txn_copy<'t>(&self, txn: &'t Txn, fragment: FragmentId) -> Result<&'t CopyFiles> {
        txn.copies.get(&fragment).ok_or_else(|| {
            StoreError::OutOfRange(format!("this server holds no copy of {fragment} of `{}`", txn.manifest.name))
        })
    }

    /// Write a block whose checksums (`block_sums`) are `sums`, and keep them.
    fn put_block(&self, txn: &Txn, copy: &CopyFiles, block: u32, data: &[u8], sums: BlockSums) -> Result<()> {
        let shape = &txn.manifest.shape;
        let what = || format!("writing {} block {block}", copy.fragment);
        self.write_data(&copy.data, copy.direct.as_ref(), data, shape.block_offset(block))
            .map_err(self.map_write_err(what()))?;
        txn.crcs.lock().get_mut(&copy.fragment).expect("local copy")[block as usize] = Some(sums);
        Ok(())
    }

    /// Write the checksums of each local copy's first `blocks` blocks of `shape`, where
    /// staged fragment f is fragment `to(f)` (a block never written gets 0s, which no read
    /// accepts) and make the copy durable.
    fn persist(
        &self,
        txn: &Txn,
        shape: &Shape,
        to: impl Fn(&FragmentId) -> FragmentId,
        blocks: impl Fn(FragmentId) -> u32,
    ) -> Result<()> {
        let crcs = txn.crcs.lock();
        for (f, c) in &txn.copies {
            let mut raw: Vec<u8> = Vec::with_capacity(shape.checks_upto(to(f), blocks(*f)) * 4);
            for (b, sums) in crcs[f][..blocks(*f) as usize].iter().enumerate() {
                match sums {
                    Some((_, units)) => raw.extend(units.iter().flat_map(|c| c.to_le_bytes())),
                    None => raw.resize(raw.len() + shape.checks_in(to(f), b as u32) as usize * 4, 0),
                }
            }
            let what = format!("writing the checksums of {f}");
            c.crc.write_all_at(&raw, 0).map_err(self.map_write_err(what.clone()))?;
            c.crc.set_len(raw.len() as u64).map_err(self.map_write_err(what))?;
            let what = format!("syncing {f}");
            c.data.sync_all().map_err(self.map_write_err(what.clone()))?;
            c.crc.sync_all().map_err(self.map_write_err(what))?;
        }
        Ok(())
    }

    /// Generate blocks `[from, to)` of this node's staged copy of `fragment`.
    pub fn generate(&self, txid: u64, name: &DatasetName, fragment: FragmentId, from: u32, to: u32) -> Result<()> {
        let txn = self.txn(name, txid)?;
        let Content::Generated { generator } = txn.manifest.content else {
            return Err(StoreError::BadRequest(format!("`{name}` is not a generated dataset")));
        };
        let copy = self.txn_copy(&txn, fragment)?;
        let shape = &txn.manifest.shape;
        if from > to || to > shape.blocks_in(fragment) {
            return Err(StoreError::OutOfRange(format!("blocks [{from}, {to}) of {fragment}")));
        }
        let mut buf = vec![0u8; shape.block_bytes() as usize];
        for block in from..to {
            let len = shape.block_len(fragment, block) as usize;
            let offset = shape.fragment_start(fragment) + shape.block_offset(block);
            generator.fill(offset, &mut buf[..len]);
            self.put_block(&txn, copy, block, &buf[..len], block_sums(&buf[..len], shape.check_bytes()))?;
        }
        Ok(())
    }

    /// Write one block into the staged copy of `fragment`: `check_write`, then
    /// `write_staged`.
    pub fn write_block(
        &self,
        txid: u64,
        name: &DatasetName,
        fragment: FragmentId,
        block: u32,
        crc: u32,
        data: &[u8],
    ) -> Result<u32> {
        let w = self.check_write(txid, name, fragment, block, data.len())?;
        self.write_staged(&w, block, crc, data)
    }

    /// Write a block `check_write` has passed, after checking it against its checksum.
    /// Returns where it went: `block`, or for an append, the slot it was given.
    pub fn write_staged(&self, w: &StagedWrite, block: u32, crc: u32, data: &[u8]) -> Result<u32> {
        let (txn, fragment) = (&w.txn, w.fragment);
        let copy = &txn.copies[&fragment];
        let shape = &txn.manifest.shape;
        let sums = block_sums(data, shape.check_bytes());
        if sums.0 != crc {
            return Err(StoreError::BadRequest(format!(
                "{fragment} block {block} arrived with a bad checksum; send it again"
            )));
        }
        if let Some(logs) = &txn.append {
            let slot = {
                let mut logs = logs.lock();
                let log = logs.get_mut(&fragment).expect("a local copy");
                if log.short.is_some() {
                    return Err(StoreError::BadRequest(format!(
                        "{fragment} already ends with a short block; only the last block may be short"
                    )));
                }
                if log.slots >= shape.blocks_in(fragment) {
                    return Err(StoreError::OutOfRange(format!("{fragment} is full ({} blocks staged)", log.slots)));
                }
                let slot = log.slots;
                log.slots += 1;
                log.bytes += data.len() as u64;
                if data.len() < shape.block_bytes() as usize {
                    log.short = Some(slot);
                }
                slot
            };
            self.put_block(txn, copy, slot, data, sums)?;
            return Ok(slot);
        }
        self.put_block(txn, copy, block, data, sums)?;
        Ok(block)
    }

    /// The id of a dataset by name: committed, else being written (so a writer can probe the
    /// servers of a dataset it is writing).
    pub fn dataset_id(&self, name: &DatasetName) -> Result<u64> {
        match self.dataset(name) {
            Ok(d) => Ok(d.manifest.id),
            Err(StoreError::UnknownDataset(_)) => {
                let inner = self.inner.lock();
                inner
                    .txns
                    .iter()
                    .find(|((n, _), _)| n == name)
                    .map(|(_, t)| t.manifest.id)
                    .ok_or_else(|| StoreError::UnknownDataset(name.clone()))
            }
            Err(e) => Err(e),
        }
    }

    /// Check a write before it is queued: the transaction, the block and its size, once.
    /// The handle it returns is what `write_staged` writes with.
    pub fn check_write(
        &self,
        txid: u64,
        name: &DatasetName,
        fragment: FragmentId,
        block: u32,
        len: usize,
    ) -> Result<StagedWrite> {
        let txn = self.txn(name, txid)?;
        let copy = self.txn_copy(&txn, fragment)?;
        let shape = &txn.manifest.shape;
        if txn.append.is_some() {
            if block != APPEND {
                return Err(StoreError::BadRequest(format!(
                    "`{name}` is written by appending; block {block} was named"
                )));
            }
            if len == 0 || len > shape.block_bytes() as usize {
                return Err(StoreError::BadRequest(format!("an appended block of {len} bytes")));
            }
        } else {
            if block >= shape.blocks_in(fragment) {
                return Err(StoreError::OutOfRange(format!("{fragment} has no block {block}")));
            }
            let want = shape.block_len(fragment, block) as usize;
            if len != want {
                return Err(StoreError::BadRequest(format!("{fragment} block {block} is {want} bytes, got {len}")));
            }
        }
        let (key, copy) = (copy.key, copy.copy);
        Ok(StagedWrite { txn, txid, fragment, key, copy })
    }

    /// Open this node's copy of `fragment` of a committed, incomplete dataset for replica
    /// completion. Blocks are written at their final offsets; readers do not read them until
    /// the manifest says the copy holds them (`mark_complete`).
    pub fn open_fill(&self, ds: &Dataset, fragment: FragmentId) -> Result<FillFiles> {
        let copy = ds.copy(fragment)?.copy;
        let dir = self.root.join("datasets").join(ds.manifest.name.as_str());
        let open = |ext: &str| {
            let path = dir.join(copy_file_name(fragment, copy, ext));
            OpenOptions::new().read(true).write(true).open(&path).map_err(io_err(format!("opening {}", path.display())))
        };
        let data_path = dir.join(copy_file_name(fragment, copy, "data"));
        Ok(FillFiles {
            fragment,
            copy,
            data: open("data")?,
            direct: self.open_direct(&data_path, true)?,
            crc: open("crc")?,
            filled: Mutex::new(vec![]),
            key: file_key(ds.manifest.id, fragment),
        })
    }

    /// Write one block brought by replica completion, checked against its checksum.
    pub fn fill_block(&self, ds: &Dataset, files: &FillFiles, block: u32, crc: u32, data: &[u8]) -> Result<()> {
        let shape = &ds.manifest.shape;
        let fragment = files.fragment;
        if block >= shape.blocks_in(fragment) || data.len() != shape.block_len(fragment, block) as usize {
            return Err(StoreError::BadRequest(format!("{fragment} block {block}: wrong block or size")));
        }
        let (actual, units) = block_sums(data, shape.check_bytes());
        if actual != crc {
            return Err(StoreError::Corrupt {
                fragment,
                block,
                why: "arrived from its peer with a bad checksum".into(),
            });
        }
        let what = format!("filling {fragment} block {block}");
        self.write_data(&files.data, files.direct.as_ref(), data, shape.block_offset(block))
            .map_err(self.map_write_err(what))?;
        files.filled.lock().push((block, units));
        Ok(())
    }

    /// Write the filled blocks' checksums into the copy's checksum file (read, patched and
    /// written whole: one write, not one per block) and make the copy durable.
    pub fn sync_fill(&self, ds: &Dataset, files: &FillFiles) -> Result<()> {
        let f = files.fragment;
        let mut crcs = read_crcs(&files.crc).map_err(io_err(format!("reading the checksums of {f}")))?;
        for (b, sums) in files.filled.lock().iter() {
            let Some(slots) = crcs.get_mut(ds.manifest.shape.checks_of(f, *b)) else {
                return Err(StoreError::Corrupt { fragment: f, block: *b, why: "the checksum file is short".into() });
            };
            slots.copy_from_slice(sums);
        }
        let raw: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
        let what = format!("writing the checksums of {f}");
        files.crc.write_all_at(&raw, 0).map_err(self.map_write_err(what))?;
        let what = format!("syncing {f}");
        files.data.sync_all().map_err(self.map_write_err(what.clone()))?;
        files.crc.sync_all().map_err(self.map_write_err(what))
    }

    /// After a completion failed: give back the space of the blocks it wrote into the copy
    /// (holes punched where they were; no manifest counts them).
    pub fn abandon_fill(&self, ds: &Dataset, files: &FillFiles) {
        use rustix::fs::{FallocateFlags, fallocate};
        let shape = &ds.manifest.shape;
        for (b, _) in files.filled.lock().iter() {
            let (at, len) = (shape.block_offset(*b), u64::from(shape.block_len(files.fragment, *b)));
            if let Err(e) = fallocate(&files.data, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, at, len) {
                tracing::warn!(fragment = %files.fragment, block = b, %e, "could not give back a failed fill's block");
            }
        }
    }

    /// Replace an incomplete dataset's manifest by the complete one, atomically (write
    /// beside, fsync, rename). Readers that opened the old one keep it; new ones see the new.
    pub fn mark_complete(&self, manifest: &Manifest) -> Result<()> {
        check_placement(manifest)?;
        let ds = self.dataset(&manifest.name)?;
        let old = &ds.manifest;
        if (old.id, &old.layout, &old.shape) != (manifest.id, &manifest.layout, &manifest.shape)
            || manifest.state != DatasetState::Complete
        {
            return Err(StoreError::BadRequest(format!(
                "mark-complete: the manifest does not describe `{}` as complete",
                manifest.name
            )));
        }
        if old.state == DatasetState::Complete {
            return Ok(());
        }
        let dir = self.root.join("datasets").join(manifest.name.as_str());
        self.write_manifest(&dir, manifest)?;
        self.inner.lock().open.remove(&manifest.name);
        Ok(())
    }

    fn write_manifest(&self, dir: &Path, manifest: &Manifest) -> Result<()> {
        let tmp = dir.join("manifest.json.tmp");
        self.write_synced(&tmp, &serde_json::to_vec_pretty(manifest).expect("manifests serialise"))?;
        fs::rename(&tmp, dir.join("manifest.json")).map_err(io_err("renaming the manifest"))?;
        sync_dir(dir).map_err(io_err("syncing the dataset folder"))
    }

    /// Write `path` whole and sync it.
    fn write_synced(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let what = || format!("writing {}", path.display());
        let mut f = File::create(path).map_err(self.map_write_err(what()))?;
        f.write_all(bytes).map_err(self.map_write_err(what()))?;
        f.sync_all().map_err(self.map_write_err(what()))
    }

    /// The CRC32C of each block of this node's copy of `fragment` (staged, or committed),
    /// from its stored checksums.
    pub fn checksums(&self, name: &DatasetName, fragment: FragmentId, txid: Option<u64>) -> Result<Vec<u32>> {
        match txid {
            Some(txid) => {
                let txn = self.txn(name, txid)?;
                self.txn_copy(&txn, fragment)?;
                // An append-mode copy: the slots handed out so far.
                let slots = txn.append.as_ref().map(|l| l.lock()[&fragment].slots as usize);
                let crcs = txn.crcs.lock();
                let crcs = &crcs[&fragment];
                crcs[..slots.unwrap_or(crcs.len()).min(crcs.len())]
                    .iter()
                    .enumerate()
                    .map(|(b, sums)| match sums {
                        Some((crc, _)) => Ok(*crc),
                        None => Err(StoreError::Incomplete(format!("{fragment} block {b} has not been written"))),
                    })
                    .collect()
            }
            None => {
                let ds = self.dataset(name)?;
                let copy = ds.copy(fragment)?;
                let shape = &ds.manifest.shape;
                // The file as it is on disk now (verify compares it across copies).
                let crcs = read_crcs(&copy.crc).map_err(io_err(format!("reading checksums of {fragment}")))?;
                (0..shape.blocks_in(fragment))
                    .map(|block| match crcs.get(shape.checks_of(fragment, block)) {
                        Some(sums) => Ok(combine_units(sums, shape.check_bytes(), shape.block_len(fragment, block))),
                        None => Err(StoreError::Corrupt { fragment, block, why: "its checksum is missing".into() }),
                    })
                    .collect()
            }
        }
    }

    /// Make the staged copies durable and write the final manifest beside them, with the
    /// transaction's coordinator (`ganges_core::commit`).
    ///
    /// Preparing again replaces the manifest, the coordinator and the members: a client
    /// whose prepare went unanswered on one server prepares the others again without it.
    pub fn prepare(&self, txid: u64, manifest: &Manifest, coordinator: NodeId, members: &[NodeId]) -> Result<()> {
        let txn = self.txn(&manifest.name, txid)?;
        let prepared = match &txn.append {
            Some(logs) => self.prepare_logs(&txn, &logs.lock(), manifest),
            None => self.prepare_blocks(&txn, manifest),
        };
        prepared?;
        ganges_net::failpoint::hit("server.prepare.synced");
        let text = serde_json::to_vec(&TxnFile { txid, coordinator, members: members.to_vec() }).expect("serialises");
        // Whole or not at all: a second prepare replaces the first.
        let tmp = txn.dir.join("txn.json.tmp");
        self.write_synced(&tmp, &text)?;
        fs::rename(&tmp, txn.dir.join("txn.json")).map_err(io_err("renaming the transaction file"))?;
        self.write_manifest(&txn.dir, manifest)?;
        *txn.prepared.lock() = Some(coordinator);
        txn.touched.store(self.millis(), Ordering::Relaxed);
        ganges_net::failpoint::hit("server.prepare.done");
        Ok(())
    }

    fn prepare_blocks(&self, txn: &Txn, manifest: &Manifest) -> Result<()> {
        let staged = &txn.manifest;
        if (staged.id, &staged.layout, &staged.shape) != (manifest.id, &manifest.layout, &manifest.shape) {
            return Err(StoreError::BadRequest("the prepared manifest differs from the staged one".into()));
        }
        check_placement(manifest)?;
        {
            let crcs = txn.crcs.lock();
            for (f, blocks) in crcs.iter() {
                let copy = txn.copies[f].copy;
                let unwritten =
                    (0..blocks.len() as u32).find(|&b| manifest.holds(*f, b, copy) && blocks[b as usize].is_none());
                if let Some(b) = unwritten {
                    return Err(StoreError::Incomplete(format!(
                        "cannot prepare `{}`: {f} block {b} was never written",
                        manifest.name
                    )));
                }
            }
        }
        self.persist(txn, &manifest.shape, |f| *f, |f| manifest.shape.blocks_in(f))
    }

    /// Prepare append-mode copies: the final manifest gives each fragment the size its log
    /// reached here; every slot must have been written; the files are cut to that size.
    ///
    /// A write that went on without servers that died is made of the survivors' logs only:
    /// its final layout is `Placed` on them, and this server's log (staged as the fragment
    /// of its own number) becomes the fragment at its place in that list.
    fn prepare_logs(&self, txn: &Txn, logs: &BTreeMap<FragmentId, Log>, manifest: &Manifest) -> Result<()> {
        let staged = &txn.manifest;
        let same = staged.id == manifest.id && staged.shape.block_bytes() == manifest.shape.block_bytes();
        let renumber = final_fragments(&staged.layout, &manifest.layout, staged.shape.fragment_count(), self.node);
        let Some(renumber) = renumber.filter(|_| same) else {
            return Err(StoreError::BadRequest("the prepared manifest differs from the staged one".into()));
        };
        check_placement(manifest)?;
        let to = |f: &FragmentId| renumber[f];
        {
            let crcs = txn.crcs.lock();
            for (f, log) in logs {
                let want = manifest.shape.fragment_bytes(to(f));
                if log.bytes != want || log.slots != manifest.shape.blocks_in(to(f)) {
                    return Err(StoreError::Incomplete(format!(
                        "cannot prepare `{}`: {f} holds {} bytes in {} blocks here, the manifest says {want}",
                        manifest.name, log.bytes, log.slots
                    )));
                }
                if log.short.is_some_and(|s| s + 1 != log.slots) {
                    return Err(StoreError::Incomplete(format!("{f}: a short block is not the last one")));
                }
                if let Some(b) = crcs[f][..log.slots as usize].iter().position(Option::is_none) {
                    return Err(StoreError::Incomplete(format!("{f} slot {b} was handed out but never written")));
                }
                let what = format!("cutting {f} to its size");
                txn.copies[f].data.set_len(want).map_err(self.map_write_err(what))?;
            }
        }
        self.persist(txn, &manifest.shape, to, |f| logs[&f].slots)?;
        for (f, c) in &txn.copies {
            if to(f) != *f {
                for ext in ["data", "crc"] {
                    let (from, into) = (copy_file_name(*f, c.copy, ext), copy_file_name(to(f), c.copy, ext));
                    fs::rename(txn.dir.join(&from), txn.dir.join(&into))
                        .map_err(self.map_write_err(format!("renaming {from} to {into}")))?;
                }
            }
        }
        Ok(())
    }

    /// Rename a prepared staging folder to the dataset's name. Committing a write this
    /// server already committed (the janitor rolled it forward first) is done.
    pub fn commit(&self, txid: u64, name: &DatasetName) -> Result<()> {
        let _resolving = self.resolving.lock();
        let dir = self.root.join("staging").join(staging_dir_name(name, txid));
        if !dir.exists() && self.committed_txn(name).is_some_and(|t| t.txid == txid) {
            return Ok(());
        }
        if !dir.join("manifest.json").exists() {
            return Err(if dir.exists() {
                StoreError::Incomplete(format!("`{name}` transaction {txid:016x} is not prepared"))
            } else {
                StoreError::NoSuchTxn { name: name.clone(), txid }
            });
        }
        let target = self.root.join("datasets").join(name.as_str());
        // rename(2) onto an existing non-empty directory fails: the name check is atomic.
        match fs::rename(&dir, &target) {
            Ok(()) => {}
            Err(e) if target.exists() => {
                tracing::debug!(%e, "commit lost the race for the name");
                return Err(StoreError::Exists(name.clone()));
            }
            Err(e) => return Err(io_err(format!("committing `{name}`"))(e)),
        }
        ganges_net::failpoint::hit("server.commit.renamed");
        sync_dir(&self.root.join("datasets")).map_err(io_err("syncing datasets/"))?;
        self.inner.lock().txns.remove(&(name.clone(), txid));
        Ok(())
    }

    /// The write that made this server's copy of `name`, if it is committed here (and was
    /// written by a build that records it).
    fn committed_txn(&self, name: &DatasetName) -> Option<TxnFile> {
        read_txn_file(&self.root.join("datasets").join(name.as_str()))
    }

    /// This server's side of a write, as its coordinator tells it (`TxnStatus`) to `asker`.
    pub fn txn_status(&self, txid: u64, name: &DatasetName, asker: Option<NodeId>) -> Verdict {
        if self.root.join("staging").join(staging_dir_name(name, txid)).exists() {
            return Verdict::Pending;
        }
        match self.committed_txn(name) {
            Some(t) if t.txid == txid => ganges_core::commit::committed_verdict(&t.members, asker),
            _ => Verdict::Unknown,
        }
    }

    /// The writes not yet committed or aborted here: staged in this process, or found
    /// prepared on disk (a restart's leftovers). The janitor applies the commit rule to each.
    pub fn unresolved(&self) -> Vec<Unresolved> {
        use ganges_core::commit::Phase;
        let now = self.millis();
        let mut out = vec![];
        let mut seen = std::collections::BTreeSet::new();
        let txns: Vec<_> = self.inner.lock().txns.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
        for ((name, txid), txn) in txns {
            let idle = Duration::from_millis(now.saturating_sub(txn.touched.load(Ordering::Relaxed)));
            let phase = txn.prepared.lock().map_or(Phase::Staged, |coordinator| Phase::Prepared { coordinator });
            seen.insert(txn.dir.clone());
            out.push(Unresolved { name, txid, phase, idle: Some(idle) });
        }
        let Ok(entries) = fs::read_dir(self.root.join("staging")) else { return out };
        for e in entries.flatten() {
            let dir = e.path();
            if seen.contains(&dir) || !dir.join("manifest.json").exists() {
                continue;
            }
            let file_name = e.file_name().to_string_lossy().to_string();
            let Some((name, txid)) = file_name.rsplit_once('.') else { continue };
            let (Ok(name), Ok(txid)) = (name.parse::<DatasetName>(), u64::from_str_radix(txid, 16)) else {
                continue;
            };
            match read_txn_file(&dir) {
                Some(f) => out.push(Unresolved {
                    name,
                    txid,
                    phase: Phase::Prepared { coordinator: f.coordinator },
                    idle: None,
                }),
                None => {
                    tracing::warn!(staging = %dir.display(), "a prepared write names no coordinator; `ganges dataset rm` removes it")
                }
            }
        }
        out
    }

    /// Drop a staging folder.
    pub fn abort(&self, txid: u64, name: &DatasetName) -> Result<()> {
        let _resolving = self.resolving.lock();
        self.inner.lock().txns.remove(&(name.clone(), txid));
        let dir = self.root.join("staging").join(staging_dir_name(name, txid));
        if dir.exists() {
            self.discard(&dir)?;
        }
        Ok(())
    }

    /// Move a folder to the trash (atomic disappearance), then delete it.
    fn discard(&self, dir: &Path) -> Result<()> {
        let stamp = std::process::id() as u128
            ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let trash = self
            .root
            .join("trash")
            .join(format!("{}.{stamp:x}", dir.file_name().map_or("x".into(), |n| n.to_string_lossy().to_string())));
        fs::rename(dir, &trash).map_err(io_err(format!("removing {}", dir.display())))?;
        fs::remove_dir_all(&trash).map_err(io_err(format!("deleting {}", trash.display())))
    }

    /// Remove a dataset and every staging folder of that name. Returns whether a committed
    /// dataset was removed and how many staging folders were.
    pub fn remove(&self, name: &DatasetName) -> Result<(bool, u32)> {
        {
            let mut inner = self.inner.lock();
            inner.open.remove(name);
            inner.txns.retain(|(n, _), _| n != name);
        }
        let dir = self.root.join("datasets").join(name.as_str());
        let committed = dir.exists();
        if committed {
            self.discard(&dir)?;
        }
        let mut staging = 0;
        let prefix = format!("{name}.");
        let sdir = self.root.join("staging");
        for e in fs::read_dir(&sdir).map_err(io_err("listing staging/"))?.flatten() {
            let file_name = e.file_name().to_string_lossy().to_string();
            if let Some(rest) = file_name.strip_prefix(&prefix)
                && rest.len() == 16
                && u64::from_str_radix(rest, 16).is_ok()
            {
                self.discard(&e.path())?;
                staging += 1;
            }
        }
        Ok((committed, staging))
    }

    /// Check blocks `[from, to)` of this node's copy of `fragment` against their checksums.
    pub fn verify(&self, name: &DatasetName, fragment: FragmentId, from: u32, to: u32) -> Result<VerifyReport> {
        let ds = self.dataset(name)?;
        let shape = &ds.manifest.shape;
        let mut report = VerifyReport::default();
        let Some(files) = ds.copies.get(&fragment) else {
            return Err(StoreError::OutOfRange(format!("this server holds no copy of {fragment} of `{name}`")));
        };
        if from > to || to > shape.blocks_in(fragment) {
            return Err(StoreError::OutOfRange(format!("blocks [{from}, {to}) of {fragment}")));
        }
        let copy = ds.manifest.layout.copy_on(fragment, self.node).expect("local copy");
        let Some(files) = files else {
            report.bad.push(BadBlock { fragment, copy, block: from, why: "copy files missing".into() });
            return Ok(report);
        };
        // The checksum file as it is on disk now, not as it was when the dataset was opened.
        let stored = read_crcs(&files.crc).map_err(io_err(format!("reading the checksums of {fragment}")))?;
        for block in from..to {
            if !ds.manifest.holds(fragment, block, copy) {
                continue;
            }
            let len = shape.block_len(fragment, block);
            report.blocks += 1;
            let checked = match stored.get(shape.checks_of(fragment, block)) {
                Some(sums) => self.read_checked(&ds, files, block, 0, len, sums),
                None => Err(StoreError::Corrupt { fragment, block, why: "its checksum is missing".into() }),
            };
            match checked {
                Ok(_) => report.bytes += len as u64,
                Err(StoreError::Corrupt { why, .. }) => report.bad.push(BadBlock { fragment, copy, block, why }),
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }

    /// Check every block of every local copy (tests and tools).
    pub fn verify_all(&self, name: &DatasetName) -> Result<VerifyReport> {
        let ds = self.dataset(name)?;
        let mut all = VerifyReport::default();
        for &fragment in ds.copies.keys() {
            let r = self.verify(name, fragment, 0, ds.manifest.shape.blocks_in(fragment))?;
            all.blocks += r.blocks;
            all.bytes += r.bytes;
            all.bad.extend(r.bad);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ganges_core::datagen::Generator;
    use ganges_core::digest::Digest;
    use ganges_proto::manifest::RecordFormat;

    fn manifest(name: &str, nodes: u32) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            name: name.parse().unwrap(),
            id: 99,
            layout: Layout::chained(nodes, 2).unwrap(),
            shape: Shape::uniform(nodes, 10_000, 4096).unwrap(),
            records: RecordFormat::Bytes,
            content: Content::Generated { generator: Generator::Random { seed: 1 } },
            state: DatasetState::Complete,
            placement: None,
            origin: None,
            checksum: "crc32c".into(),
            digest: Digest(0),
            array: None,
            created_unix_secs: 0,
        }
    }

    fn staged(store: &Store, m: &Manifest, txid: u64) {
        store.stage(txid, m.clone(), false).unwrap();
        for (f, _) in m.layout.copies_on(store.node(), m.shape.fragment_count()) {
            store.generate(txid, &m.name, f, 0, m.shape.blocks_in(f)).unwrap();
        }
    }

    #[test]
    fn nothing_is_visible_until_commit_and_reads_check_checksums() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(1), false).unwrap();
        let m = manifest("d", 4);
        staged(&store, &m, 7);
        assert!(matches!(store.dataset(&m.name), Err(StoreError::UnknownDataset(_))));
        assert_eq!(store.dataset_id(&m.name).unwrap(), m.id, "a dataset being written answers probes");
        assert!(matches!(store.dataset_id(&"other".parse().unwrap()), Err(StoreError::UnknownDataset(_))));
        assert_eq!(store.list(false).unwrap().len(), 0);
        assert_eq!(store.list(true).unwrap()[0].staging_txid, Some(7));
        assert!(matches!(store.commit(7, &m.name), Err(StoreError::Incomplete(_))));
        store.prepare(7, &m, NodeId(0), &[]).unwrap();
        store.commit(7, &m.name).unwrap();
        let ds = store.dataset(&m.name).unwrap();
        // Node 1 holds fragment 1 (primary) and fragment 0 (backup).
        let (bytes, crc) = store.read(&ds, FragmentId(0), 2, 0, 10_000 - 8192).unwrap();
        let mut want = vec![0u8; bytes.len()];
        Generator::Random { seed: 1 }.fill(8192, &mut want);
        assert_eq!(&bytes[..], &want[..]);
        assert_eq!(crc, crc32c::crc32c(&want));
        assert!(matches!(store.check_read(&ds, FragmentId(2), 0, 0, 1), Err(StoreError::OutOfRange(_))));
        assert!(matches!(store.check_read(&ds, FragmentId(0), 3, 0, 1), Err(StoreError::OutOfRange(_))));
        assert!(matches!(store.check_read(&ds, FragmentId(0), 0, 4000, 100), Err(StoreError::OutOfRange(_))));
        assert_eq!(store.verify_all(&m.name).unwrap().bad, vec![]);
    }

    #[test]
    fn a_write_s_status_and_unresolved_state_follow_it_through_a_restart() {
        use ganges_core::commit::Phase;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(1), false).unwrap();
        let m = manifest("d", 4);
        assert_eq!(store.txn_status(7, &m.name, None), Verdict::Unknown);
        staged(&store, &m, 7);
        assert_eq!(store.txn_status(7, &m.name, None), Verdict::Pending);
        let u = store.unresolved();
        assert_eq!((u.len(), u[0].phase, u[0].idle.is_some()), (1, Phase::Staged, true));
        store.prepare(7, &m, NodeId(0), &[]).unwrap();
        assert_eq!(store.unresolved()[0].phase, Phase::Prepared { coordinator: NodeId(0) });
        // Node 0 did not answer its prepare: the client prepares again without it.
        let members = [NodeId(1), NodeId(2), NodeId(3)];
        store.prepare(7, &m, NodeId(1), &members).unwrap();
        assert_eq!(store.unresolved()[0].phase, Phase::Prepared { coordinator: NodeId(1) });
        // A crash: the prepared folder is found on disk, with its last coordinator, and no
        // idle time this process could know.
        drop(store);
        let store = Store::open(dir.path(), NodeId(1), false).unwrap();
        let u = store.unresolved();
        assert_eq!(
            (u.len(), u[0].txid, u[0].phase, u[0].idle),
            (1, 7, Phase::Prepared { coordinator: NodeId(1) }, None)
        );
        store.commit(7, &m.name).unwrap();
        assert_eq!(store.txn_status(7, &m.name, None), Verdict::Committed);
        assert_eq!(store.txn_status(7, &m.name, Some(NodeId(2))), Verdict::Committed);
        assert_eq!(store.txn_status(7, &m.name, Some(NodeId(0))), Verdict::Excluded, "committed without node 0");
        assert_eq!(store.txn_status(8, &m.name, None), Verdict::Unknown, "another write of that name");
        store.commit(7, &m.name).expect("committing twice is done");
        assert!(matches!(store.commit(8, &m.name), Err(StoreError::NoSuchTxn { .. })));
        assert!(store.unresolved().is_empty());
    }

    /// The janitor rolling a write forward and the client's own commit can arrive at once;
    /// both must hear that it is committed (the loser once answered "no such transaction").
    #[test]
    fn two_commits_of_one_write_at_once_are_both_done() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(1), false).unwrap();
        for txid in 1..=40 {
            let m = manifest(&format!("d{txid}"), 4);
            staged(&store, &m, txid);
            store.prepare(txid, &m, NodeId(0), &[]).unwrap();
            let go = std::sync::Barrier::new(2);
            let results: Vec<_> = std::thread::scope(|s| {
                let racers: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            go.wait();
                            store.commit(txid, &m.name)
                        })
                    })
                    .collect();
                racers.into_iter().map(|r| r.join().unwrap()).collect()
            });
            for r in results {
                assert!(r.is_ok(), "write {txid}: {r:?}");
            }
            assert_eq!(store.txn_status(txid, &m.name, None), Verdict::Committed);
        }
    }

    #[test]
    fn a_flipped_byte_is_caught_on_read_and_by_verify() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(0), false).unwrap();
        let m = manifest("d", 2);
        staged(&store, &m, 1);
        store.prepare(1, &m, NodeId(0), &[]).unwrap();
        store.commit(1, &m.name).unwrap();
        let path = dir.path().join("datasets/d").join(copy_file_name(FragmentId(0), 0, "data"));
        let mut bytes = fs::read(&path).unwrap();
        bytes[5000] ^= 1;
        fs::write(&path, bytes).unwrap();
        let store = Store::open(dir.path(), NodeId(0), false).unwrap();
        let ds = store.dataset(&m.name).unwrap();
        assert!(matches!(store.read(&ds, FragmentId(0), 1, 0, 4096), Err(StoreError::Corrupt { block: 1, .. })));
        let report = store.verify_all(&m.name).unwrap();
        assert_eq!(report.bad.len(), 1);
        assert_eq!((report.bad[0].fragment, report.bad[0].block), (FragmentId(0), 1));
    }

    #[test]
    fn a_read_of_part_of_a_block_checks_only_the_units_it_touches() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(0), false).unwrap();
        let mut m = manifest("units", 2);
        // Blocks of 256 KiB, four units each; the last block of 75,712 bytes has two.
        m.shape = Shape::uniform(2, 600_000, 256 << 10).unwrap();
        staged(&store, &m, 1);
        store.prepare(1, &m, NodeId(0), &[]).unwrap();
        store.commit(1, &m.name).unwrap();
        let f = FragmentId(0);
        let data = fs::read(dir.path().join("datasets/units").join(copy_file_name(f, 0, "data"))).unwrap();
        let crcs = store.checksums(&m.name, f, None).unwrap();
        assert_eq!(crcs.len(), 3);
        for (b, crc) in crcs.iter().enumerate() {
            let at = b * (256 << 10);
            let len = m.shape.block_len(f, b as u32) as usize;
            assert_eq!(*crc, crc32c::crc32c(&data[at..at + len]), "block {b}: its units combine to its CRC");
        }
        // A byte flipped in the third unit of block 1.
        let path = dir.path().join("datasets/units").join(copy_file_name(f, 0, "data"));
        let mut bytes = data.clone();
        bytes[(256 << 10) + (130 << 10) + 7] ^= 1;
        fs::write(&path, bytes).unwrap();
        let store = Store::open(dir.path(), NodeId(0), false).unwrap();
        let ds = store.dataset(&m.name).unwrap();
        let at = 256 << 10;
        for (start, len) in [(0u32, 128u32 << 10), (3 << 16, 1 << 16), (100, 5000), ((3 << 16) + 1, (1 << 16) - 1)] {
            let (got, crc) = store.read(&ds, f, 1, start, len).unwrap();
            let want = &data[at + start as usize..at + (start + len) as usize];
            assert_eq!(&got[..], want, "[{start}, +{len})");
            assert_eq!(crc, crc32c::crc32c(want), "[{start}, +{len})");
        }
        for (start, len) in [(0u32, 256u32 << 10), (128 << 10, 1), ((128 << 10) - 1, 2)] {
            let err = store.read(&ds, f, 1, start, len).unwrap_err();
            assert!(
                matches!(&err, StoreError::Corrupt { block: 1, why, .. } if why.contains("[131072, 196608)")),
                "[{start}, +{len}): {err}"
            );
        }
        let (got, crc) = store.read(&ds, f, 2, 60_000, 15_712).unwrap();
        assert_eq!((&got[..], crc), (&data[(512 << 10) + 60_000..], crc32c::crc32c(&data[(512 << 10) + 60_000..])));
        let report = store.verify_all(&m.name).unwrap();
        assert_eq!(report.bad.iter().map(|b| (b.fragment, b.block)).collect::<Vec<_>>(), vec![(f, 1)]);
    }

    #[test]
    fn a_second_commit_of_the_same_name_fails_and_remove_cleans_everything() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(0), false).unwrap();
        let m = manifest("d", 2);
        for txid in [1, 2] {
            staged(&store, &m, txid);
            store.prepare(txid, &m, NodeId(0), &[]).unwrap();
        }
        store.commit(1, &m.name).unwrap();
        assert!(matches!(store.commit(2, &m.name), Err(StoreError::Exists(_))));
        assert!(matches!(store.stage(3, m.clone(), false), Err(StoreError::Exists(_))));
        assert_eq!(store.remove(&m.name).unwrap(), (true, 1));
        assert!(store.list(true).unwrap().is_empty());
        assert!(fs::read_dir(dir.path().join("trash")).unwrap().next().is_none());
    }

    #[test]
    fn writes_are_checked_and_incomplete_copies_cannot_be_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), NodeId(0), false).unwrap();
        let mut m = manifest("imp", 2);
        m.content = Content::Imported { source: "x".into() };
        store.stage(5, m.clone(), false).unwrap();
        let data = vec![3u8; 4096];
        let crc = crc32c::crc32c(&data);
        assert!(matches!(
            store.write_block(5, &m.name, FragmentId(0), 0, crc ^ 1, &data),
            Err(StoreError::BadRequest(_))
        ));
        assert!(matches!(
            store.write_block(5, &m.name, FragmentId(0), 0, crc, &data[1..]),
            Err(StoreError::BadRequest(_))
        ));
        store.write_block(5, &m.name, FragmentId(0), 0, crc, &data).unwrap();
        assert!(matches!(store.prepare(5, &m, NodeId(0), &[]), Err(StoreError::Incomplete(_))));
        assert!(matches!(store.generate(5, &m.name, FragmentId(0), 0, 1), Err(StoreError::BadRequest(_))));
        store.abort(5, &m.name).unwrap();
        assert!(store.list(true).unwrap().is_empty());
    }

    #[test]
    fn a_data_directory_belongs_to_one_node() {
        let dir = tempfile::tempdir().unwrap();
        Store::open(dir.path(), NodeId(3), false).unwrap();
        assert!(matches!(Store::open(dir.path(), NodeId(4), false), Err(StoreError::BadRequest(_))));
    }
}
