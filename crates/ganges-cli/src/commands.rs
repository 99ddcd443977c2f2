//! What each subcommand does, apart from parsing (in main.rs).

use crate::error::{CliError, CliResult, fail};
use bytes::Bytes;
use ganges_bench::scan::LayoutChoice;
use ganges_bench::util::{Table, bytes_bar, progress_fn};
use ganges_client::client::Client;
use ganges_client::cluster::{ClusterFile, ServerEntry};
use ganges_client::dataset::{self, CopyState, CreateSpec, Sizing};
use ganges_client::fault;
use ganges_client::scan::{ReadOptions, ReadReport, open_scan};
use ganges_client::stream::{OrderedReader, WrittenOrderReader};
use ganges_client::write::{self, WriteSource, WriteSpec};
use ganges_core::datagen::Generator;
use ganges_core::digest::Digest;
use ganges_core::disk::Fault;
use ganges_core::fault::{FaultLayout, place};
use ganges_core::ideal::{Spectrum, layout_ideal, river_ideal_seconds, scan_demands};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::layout::Layout;
use ganges_core::route::ceft::CeftSettings;
use ganges_core::shape::{Partition, Shape};
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_core::write::WritePolicyKind;
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::manifest::{Content, DatasetName, DatasetState, RecordFormat};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub async fn connect(cluster: &Path) -> CliResult<Arc<Client>> {
    Ok(Client::connect(ClusterFile::load(cluster)?).await?)
}

#[derive(Debug)]
pub struct CreateArgs {
    pub name: DatasetName,
    pub size: Sizing,
    pub fragments: Option<u32>,
    pub replicas: u32,
    pub layout: LayoutChoice,
    pub block_bytes: u32,
    pub generator: Generator,
}

pub async fn dataset_create(cluster: &Path, a: CreateArgs) -> CliResult<()> {
    let client = connect(cluster).await?;
    let fragments = a.fragments.unwrap_or(client.nodes());
    if fragments == 0 {
        return fail("--fragments must be at least 1");
    }
    let sizes = a.size.fragment_bytes(fragments, a.block_bytes, a.generator.align())?;
    let total: u64 = sizes.iter().sum();
    let bar = bytes_bar(total * a.replicas as u64, "create");
    let started = Instant::now();
    let spec = CreateSpec {
        name: a.name,
        fragment_bytes: sizes,
        block_bytes: a.block_bytes,
        replicas: a.replicas,
        generator: a.generator,
    };
    let layout = match a.layout {
        LayoutChoice::Chained => Layout::chained(client.nodes(), a.replicas)?,
        LayoutChoice::Mirrored if a.replicas != 2 => {
            return fail("--layout mirrored keeps two copies, one in each group; leave --replicas at 2");
        }
        LayoutChoice::Mirrored => Layout::mirrored(client.nodes())?,
    };
    let m = dataset::create_with_layout(&client, spec, layout, Some(progress_fn(&bar))).await?;
    bar.finish_and_clear();
    println!(
        "created `{}`: {} in {} fragments, {} copies, {} blocks, digest {} ({:.1}s)",
        m.name,
        ByteSize(m.total_bytes()),
        m.shape.fragment_count(),
        m.layout.replicas(),
        ByteSize(m.shape.block_bytes() as u64),
        m.digest,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub async fn dataset_put(
    cluster: &Path,
    name: DatasetName,
    file: &Path,
    fragments: Option<u32>,
    replicas: u32,
    block_bytes: u32,
) -> CliResult<()> {
    let client = connect(cluster).await?;
    let size = std::fs::metadata(file).map_err(|e| CliError::Failed(format!("{}: {e}", file.display())))?.len();
    let bar = bytes_bar(size, "put");
    let started = Instant::now();
    let fragments = fragments.unwrap_or(client.nodes());
    let m = dataset::put(&client, name, file, fragments, block_bytes, replicas, Some(progress_fn(&bar))).await?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "imported {} as `{}`: {} in {} fragments, {} copies, digest {} ({:.1}s, {:.1} MB/s)",
        file.display(),
        m.name,
        ByteSize(m.total_bytes()),
        m.shape.fragment_count(),
        m.layout.replicas(),
        m.digest,
        secs,
        mb_per_sec(m.total_bytes(), secs)
    );
    Ok(())
}

pub async fn dataset_get(cluster: &Path, name: DatasetName, file: &Path, opts: ReadOptions) -> CliResult<()> {
    let client = connect(cluster).await?;
    let m = client.manifest(&name).await?;
    let bar = bytes_bar(m.total_bytes(), "get");
    let started = Instant::now();
    let (m, file, report) = dataset::get(&client, &name, file, opts, Some(progress_fn(&bar))).await?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "exported `{}` to {} with {}: {} ({:.1}s, {:.1} MB/s), digest {} verified{}",
        m.name,
        file.display(),
        opts.policy,
        ByteSize(m.total_bytes()),
        secs,
        mb_per_sec(m.total_bytes(), secs),
        m.digest,
        if report.stats.corrupt.is_empty() {
            String::new()
        } else {
            format!("; {} corrupt blocks were read from other copies", report.stats.corrupt.len())
        }
    );
    Ok(())
}

/// The two in-order readers `dataset read` uses (boxed: each is a kilobyte or more).
enum InOrder {
    Stored(Box<OrderedReader>),
    Written(Box<WrittenOrderReader>),
}

impl InOrder {
    async fn read(&mut self, max: usize) -> Result<Bytes, ganges_client::ClientError> {
        match self {
            InOrder::Stored(r) => r.read(max).await,
            InOrder::Written(r) => r.read(max).await,
        }
    }

    fn buffered_blocks(&self) -> usize {
        match self {
            InOrder::Stored(r) => r.buffered_blocks(),
            InOrder::Written(r) => r.buffered_blocks(),
        }
    }

    /// How many fragments were read at once, at most (the dataset's own order).
    fn fragments_at_once(&self) -> Option<usize> {
        match self {
            InOrder::Stored(r) => Some(r.fragments_at_once()),
            InOrder::Written(_) => None,
        }
    }

    fn close(self) -> ReadReport {
        match self {
            InOrder::Stored(r) => r.close(),
            InOrder::Written(r) => r.close(),
        }
    }
}

/// `dataset read`'s reorder buffer unless told otherwise. An in-order read reads the
/// fragments its buffer reaches at once; under chained declustering neighbouring fragments
/// share a server, so each further fragment adds one disk: on 8 servers with fragments of 32
/// MiB, 64 blocks read about half as fast again as 8.
const READ_BUFFER_BYTES: u64 = 64 << 20;

/// `ganges dataset read`: bytes `offset .. offset + len` of a dataset (to its end without a
/// length) in order, through the ordered stream, to `out` or stdout. A reader that stops
/// taking bytes (`| head`) ends the read quietly; a file left unfinished by an error is
/// removed. What happened goes to stderr when the data goes to stdout.
pub async fn dataset_read(
    cluster: &Path,
    name: DatasetName,
    (offset, len): (u64, Option<u64>),
    opts: ReadOptions,
    buffer_blocks: Option<u32>,
    out: Option<&Path>,
) -> CliResult<()> {
    let client = connect(cluster).await?;
    let manifest = Arc::new(client.manifest(&name).await?);
    let buffer_blocks =
        buffer_blocks.unwrap_or_else(|| (READ_BUFFER_BYTES / manifest.shape.block_bytes() as u64).max(1) as u32);
    let total = manifest.total_bytes();
    let len = len.unwrap_or(total.saturating_sub(offset));
    let end = offset.saturating_add(len);
    if end > total {
        return fail(format!("bytes {offset}..{end} are past the end of `{name}` ({total} bytes)"));
    }
    let policy = opts.policy;
    // A dataset written through a distributed queue reads in its writers' order, as
    // `dataset get` exports it; any other in the dataset's own.
    let (mut reader, order) = if manifest.origin.is_some() {
        let r = WrittenOrderReader::open(client, manifest, Partition { offset, len }, opts, buffer_blocks)?;
        (InOrder::Written(Box::new(r)), "in the writers' order")
    } else {
        let r = OrderedReader::open(client, manifest, Partition { offset, len }, opts, buffer_blocks)?;
        (InOrder::Stored(Box::new(r)), "in order")
    };
    // Each read hands out a whole block (or what is left of one), so writes go straight to
    // the file or to stdout's descriptor: no buffer to copy through, and not stdout's line
    // buffering, which would split every block at its last newline byte into two writes.
    let mut sink = match out {
        Some(path) => {
            std::fs::File::create(path).map_err(|e| CliError::Failed(format!("creating {}: {e}", path.display())))?
        }
        None => std::fs::File::from(
            std::io::stdout().as_fd().try_clone_to_owned().map_err(|e| CliError::Failed(format!("stdout: {e}")))?,
        ),
    };
    let to = out.map_or("stdout".to_string(), |p| p.display().to_string());
    let t0 = Instant::now();
    let (mut done, mut held, mut closed) = (0u64, 0usize, false);
    let copied: CliResult<()> = async {
        loop {
            let data = reader.read(usize::MAX).await?;
            if data.is_empty() {
                return Ok(());
            }
            held = held.max(reader.buffered_blocks());
            match sink.write_all(&data) {
                Ok(()) => done += data.len() as u64,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    closed = true;
                    return Ok(());
                }
                Err(e) => return fail(format!("writing to {to}: {e}")),
            }
        }
    }
    .await;
    let at_once = reader.fragments_at_once().map_or(String::new(), |n| format!(", {n} fragments read at once at most"));
    let report = reader.close();
    if let Err(e) = copied {
        if let Some(path) = out {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    let secs = t0.elapsed().as_secs_f64();
    let moved = if closed {
        format!("stopped when {to} was closed by its reader")
    } else {
        format!("{} to {to} in {secs:.2}s ({:.1} MB/s)", ByteSize(done), mb_per_sec(done, secs))
    };
    let corrupt = match report.stats.corrupt.len() {
        0 => String::new(),
        n => format!("; {n} corrupt blocks were read from other copies"),
    };
    let summary = format!(
        "read `{name}` bytes {offset}..{end} {order} with {policy}: {moved}, \
         at most {held} of {buffer_blocks} blocks buffered{at_once}{corrupt}"
    );
    if out.is_some() {
        println!("{summary}")
    } else {
        eprintln!("{summary}")
    }
    Ok(())
}

pub async fn dataset_ls(cluster: &Path, staging: bool) -> CliResult<()> {
    let client = connect(cluster).await?;
    let (entries, unreachable) = dataset::list(&client, staging).await?;
    let mut t = Table::new(&["name", "size", "state", "nodes"]);
    for e in &entries {
        t.row(vec![
            e.name.to_string(),
            ByteSize(e.total_bytes).to_string(),
            match e.staging_txid {
                None => "committed".into(),
                Some(tx) => format!("staging {tx:016x}"),
            },
            e.nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
        ]);
    }
    if entries.is_empty() {
        println!("no datasets{}", if staging { " or staging folders" } else { "" });
    } else {
        print!("{}", t.render());
    }
    if !unreachable.is_empty() {
        println!("unreachable: {}", nodes_list(&unreachable));
    }
    if staging && entries.iter().any(|e| e.staging_txid.is_some()) {
        println!("staging folders are unfinished writes; `ganges dataset rm NAME` removes them");
    }
    Ok(())
}

fn nodes_list(nodes: &[NodeId]) -> String {
    nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
}

pub async fn dataset_info(cluster: &Path, name: DatasetName, json: bool) -> CliResult<()> {
    let client = connect(cluster).await?;
    let info = dataset::info(&client, &name).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    let m = &info.manifest;
    println!("dataset    {}", m.name);
    println!("size       {} ({} bytes)", ByteSize(m.total_bytes()), m.total_bytes());
    println!("state      {:?}", m.state);
    println!("layout     {}", m.layout.describe());
    println!(
        "blocks     {} of {} ({} blocks)",
        m.shape.total_blocks(),
        ByteSize(m.shape.block_bytes() as u64),
        m.shape.total_blocks()
    );
    println!("records    {:?}", m.records);
    println!(
        "content    {}",
        match &m.content {
            Content::Generated { generator } => format!("generated, {generator:?}"),
            Content::Imported { source } => format!("imported from {source}"),
        }
    );
    println!("checksum   {} per {}; digest {}", m.checksum, ByteSize(u64::from(m.shape.check_bytes())), m.digest);
    let mut t = Table::new(&["fragment", "bytes", "copy", "node", "state", "blocks"]);
    for c in &info.copies {
        t.row(vec![
            c.fragment.0.to_string(),
            ByteSize(m.shape.fragment_bytes(c.fragment)).to_string(),
            if c.copy == 0 { "primary".into() } else { format!("backup {}", c.copy) },
            c.node.0.to_string(),
            match c.state {
                CopyState::Present => "present",
                CopyState::Missing => "MISSING",
                CopyState::NodeDown => "node down",
            }
            .into(),
            if c.blocks_present == c.blocks {
                format!("{} (whole)", c.blocks)
            } else {
                format!("{} of {}", c.blocks_present, c.blocks)
            },
        ]);
    }
    print!("{}", t.render());
    if !info.repaired.is_empty() {
        let each: Vec<String> = info.repaired.iter().map(|(n, b)| format!("{b} on {n}")).collect();
        println!("repaired   blocks rewritten from a good copy (scrub, heal on read): {}", each.join(", "));
    }
    let lost: Vec<NodeId> = info
        .copies
        .iter()
        .filter(|c| c.state != CopyState::Present && c.blocks_present == 0)
        .map(|c| c.node)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if m.state == DatasetState::Incomplete && !lost.is_empty() {
        println!(
            "DEGRADED: no copies on {} (down when it was written); `ganges dataset repair {}` restores them",
            nodes_list(&lost),
            m.name
        );
    } else if m.state == DatasetState::Incomplete {
        println!(
            "copies are incomplete: reads take each block from the copy holding it, with no choice of \
             server; `ganges dataset complete {}` fills them",
            m.name
        );
    }
    Ok(())
}

pub async fn dataset_verify(cluster: &Path, name: DatasetName) -> CliResult<()> {
    let client = connect(cluster).await?;
    let m = client.manifest(&name).await?;
    let bar = bytes_bar(m.total_bytes() * m.layout.replicas() as u64, "verify");
    let s = dataset::verify(&client, &name, Some(progress_fn(&bar))).await?;
    bar.finish_and_clear();
    println!("checked {} blocks ({}) on every copy", s.blocks, ByteSize(s.bytes));
    for (node, b) in &s.bad {
        println!("BAD  {node}: fragment {} copy {} block {}: {}", b.fragment.0, b.copy, b.block, b.why);
    }
    for d in &s.disagreements {
        println!("BAD  copies disagree: {d}");
    }
    if !s.digest_ok {
        println!("BAD  the stored checksums do not add up to the dataset's digest {}", m.digest);
    }
    if !s.unreachable.is_empty() {
        println!("not checked (unreachable): {}", nodes_list(&s.unreachable));
    }
    if s.is_clean() {
        println!("`{name}` is intact: every block of every copy matches its checksum and the digest {}", m.digest);
        Ok(())
    } else {
        fail(format!(
            "`{name}` has problems (above); reads avoid bad copies; `ganges dataset scrub {name}` repairs bad blocks from good copies"
        ))
    }
}

/// `ganges dataset scrub`: check every copy of each dataset, repair bad blocks from good copies.
pub async fn dataset_scrub(cluster: &Path, names: Vec<DatasetName>, all: bool) -> CliResult<()> {
    let client = connect(cluster).await?;
    let names = if all {
        dataset::list(&client, false).await?.0.into_iter().map(|e| e.name).collect()
    } else if names.is_empty() {
        return fail("name the datasets to scrub, or give --all");
    } else {
        names
    };
    let mut unclean = vec![];
    for name in names {
        let m = client.manifest(&name).await?;
        let bar = bytes_bar(m.total_bytes() * m.layout.replicas() as u64, "scrub");
        let r = ganges_client::repair::scrub(&client, &name, Some(progress_fn(&bar))).await?;
        bar.finish_and_clear();
        let c = &r.checked;
        println!("`{name}`: checked {} blocks ({}) on every copy", c.blocks, ByteSize(c.bytes));
        for (node, b) in &r.repaired {
            println!("  repaired  {node}: fragment {} copy {} block {} ({})", b.fragment.0, b.copy, b.block, b.why);
        }
        for (node, b, why) in &r.unrepaired {
            println!(
                "  BAD       {node}: fragment {} copy {} block {}: {} (not repaired: {why})",
                b.fragment.0, b.copy, b.block, b.why
            );
        }
        if !c.unreachable.is_empty() {
            println!("  not checked (unreachable): {}", nodes_list(&c.unreachable));
        }
        if r.is_clean() {
            println!("  every block of every copy is good now");
        } else {
            unclean.push(name.to_string());
        }
    }
    if unclean.is_empty() {
        Ok(())
    } else {
        fail(format!("not every copy could be checked or repaired: {}", unclean.join(", ")))
    }
}

pub async fn dataset_complete(cluster: &Path, name: DatasetName) -> CliResult<()> {
    let client = connect(cluster).await?;
    let c = write::complete(&client, &name).await.map_err(|e| match e {
        ganges_client::ClientError::NodeDown { node } => CliError::Failed(format!(
            "{node} is down; its copies of `{name}` are restored once it is back (`ganges local restart --node {}` \
             on a local cluster), by running this again",
            node.0
        )),
        e => e.into(),
    })?;
    if !c.restored.is_empty() {
        println!("{} had no copies of `{name}` (down when it was written): given them", nodes_list(&c.restored));
    }
    if c.blocks == 0 {
        println!("`{name}` is complete: every copy holds every block");
    } else {
        println!(
            "completed `{name}`: {} blocks ({}) copied between servers in {:.1}s ({:.1} MB/s)",
            c.blocks,
            ByteSize(c.bytes),
            c.seconds,
            mb_per_sec(c.bytes, c.seconds)
        );
    }
    Ok(())
}

#[derive(Debug)]
pub struct WriteArgs {
    pub name: DatasetName,
    pub writers: Option<u32>,
    pub policy: WritePolicyKind,
    pub total_bytes: u64,
    pub block_bytes: u32,
    pub replicas: u32,
    pub window: Option<u32>,
    pub source: WriteSource,
    pub complete: bool,
    pub run_blocks: u32,
    pub ceft: CeftSettings,
    pub mirrored: bool,
}

pub async fn write(cluster: &Path, a: WriteArgs) -> CliResult<()> {
    let client = connect(cluster).await?;
    let writers = a.writers.unwrap_or(client.nodes());
    if writers == 0 {
        return fail("--writers must be at least 1");
    }
    let total = match &a.source {
        WriteSource::File(p) => {
            std::fs::metadata(p).map_err(|e| CliError::Failed(format!("{}: {e}", p.display())))?.len()
        }
        WriteSource::Generated(_) => a.total_bytes,
        WriteSource::Buffers(b) => b.iter().map(|b| b.len() as u64).sum(),
    };
    let bar = bytes_bar(total, "write");
    let spec = WriteSpec {
        name: a.name,
        writers,
        total_bytes: a.total_bytes,
        block_bytes: a.block_bytes,
        replicas: a.replicas,
        policy: a.policy,
        window: a.window,
        source: a.source,
        complete: a.complete,
        run_blocks: a.run_blocks,
        ceft: a.ceft,
        mirrored: a.mirrored,
        records: RecordFormat::Bytes,
    };
    let name = spec.name.clone();
    let mut stops = ganges_harness::sys::StopSignals::new()?;
    let out = tokio::select! {
        r = write::write(&client, spec, Some(progress_fn(&bar))) => r?,
        () = stops.recv() => {
            // Abandon the write whole: its staging (or a commit half done) goes everywhere.
            bar.finish_and_clear();
            if let Err(e) = dataset::remove(&client, &name).await {
                return fail(format!("interrupted; removing the write's staging failed ({e}): run `ganges dataset rm {name}`"));
            }
            return Err(CliError::WriteInterrupted);
        }
    };
    bar.finish_and_clear();
    let m = &out.manifest;
    let placed = if a.policy == WritePolicyKind::Dq {
        let per: Vec<String> =
            (0..m.shape.fragment_count()).map(|f| m.shape.blocks_in(FragmentId(f)).to_string()).collect();
        format!("blocks per server {}", per.join("/"))
    } else {
        let backup: u64 = out.writers.iter().map(|r| r.stats.backup_bytes()).sum();
        format!("{:.0}% of blocks on backup copies", 100.0 * backup as f64 / m.total_bytes().max(1) as f64)
    };
    println!(
        "wrote `{}` with {} writers ({}): {} in {:.1}s ({:.1} MB/s), {placed}, digest {}",
        m.name,
        writers,
        a.policy,
        ByteSize(m.total_bytes()),
        out.seconds,
        mb_per_sec(m.total_bytes(), out.seconds),
        m.digest
    );
    if a.policy == WritePolicyKind::Dq && m.origin.is_none() {
        println!(
            "note: too many blocks to record where each came from: scans and `dataset get` see the \
             servers' logs in turn, not the writers' order"
        );
    }
    if !out.without.is_empty() {
        println!(
            "note: {} went down during the write; `{}` is whole on the other {} servers, which took its share",
            nodes_list(&out.without),
            m.name,
            m.shape.fragment_count()
        );
    }
    if !out.missing.is_empty() {
        println!(
            "DEGRADED: {} was down during the write; `{}` is committed without {} copies on it \
             (every block has a live copy); `ganges dataset repair {}` restores them once it is back",
            nodes_list(&out.missing),
            m.name,
            if out.missing.len() == 1 { "the" } else { "their" },
            m.name
        );
        return Ok(());
    }
    match (&out.completion, m.state) {
        (Some(c), _) => println!(
            "completed every copy: {} blocks ({}) copied between servers in {:.1}s ({:.1} MB/s)",
            c.blocks,
            ByteSize(c.bytes),
            c.seconds,
            mb_per_sec(c.bytes, c.seconds)
        ),
        (None, DatasetState::Incomplete) => println!(
            "copies are incomplete (readable, each block from the copy holding it); `ganges dataset complete {}` fills them",
            m.name
        ),
        (None, DatasetState::Complete) => {}
    }
    Ok(())
}

pub async fn dataset_rm(cluster: &Path, name: DatasetName) -> CliResult<()> {
    let client = connect(cluster).await?;
    let s = dataset::remove(&client, &name).await?;
    println!(
        "removed `{name}` from {} nodes{}",
        s.committed_on.len(),
        if s.staging_folders > 0 { format!(" and {} staging folders", s.staging_folders) } else { String::new() }
    );
    if !s.unreachable.is_empty() {
        println!("unreachable, not removed there: {} (run rm again when they are up)", nodes_list(&s.unreachable));
    }
    Ok(())
}

/// Read every fragment with its own consumer; with `plot`, draw each consumer's progress
/// over time against the ideal, with every fault change on the way marked.
/// Serve this process's client metrics at `addr` (if given) while the command runs.
pub async fn serve_client_metrics(addr: Option<&str>) -> CliResult<()> {
    let Some(addr) = addr else { return Ok(()) };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Failed(format!("cannot serve metrics on {addr}: {e}")))?;
    eprintln!("client metrics: http://{}/metrics", listener.local_addr()?);
    tokio::spawn(ganges_client::metrics::serve(listener));
    Ok(())
}

/// `ganges dashboard`: serve the live page until Ctrl-C.
pub async fn dashboard(cluster: &Path, listen: &str, interval: Duration) -> CliResult<()> {
    let client = connect(cluster).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError::Failed(format!("cannot listen on {listen}: {e}")))?;
    let live = ganges_live::Live::start(client, live_period(interval)?).await;
    let addr = listener.local_addr()?;
    println!("dashboard: http://{addr}/  (Ctrl-C stops it)");
    let mut stops = ganges_harness::sys::StopSignals::new()?;
    tokio::select! {
        () = ganges_live::web::serve(listener, live) => Ok(()),
        () = stops.recv() => Ok(()),
    }
}

/// `ganges top`: the live view in this terminal until the user quits.
pub async fn top(cluster: &Path, interval: Duration) -> CliResult<()> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return fail("ganges top draws on a terminal; for a page in the browser, run `ganges dashboard`");
    }
    let client = connect(cluster).await?;
    let live = ganges_live::Live::start(client, live_period(interval)?).await;
    tokio::task::spawn_blocking(move || ganges_live::top::run(&live))
        .await
        .map_err(|e| CliError::Failed(format!("top stopped: {e}")))??;
    Ok(())
}

fn live_period(interval: Duration) -> CliResult<Duration> {
    if interval < Duration::from_millis(50) || interval > Duration::from_secs(60) {
        return fail("--interval must be between 50ms and 60s");
    }
    Ok(interval)
}

pub async fn scan(cluster: &Path, name: DatasetName, opts: ReadOptions, plot: Option<&Path>) -> CliResult<()> {
    let policy = opts.policy;
    let client = connect(cluster).await?;
    let manifest = Arc::new(client.manifest(&name).await?);
    let partitions = manifest.shape.fragment_partitions();
    let ideal = match plot {
        Some(_) => fault::scan_ideal_seconds(&client, &manifest, &partitions).await?,
        None => None,
    };
    let streams = open_scan(&client, &manifest, Some(partitions.clone()), opts)?;
    let bar = bytes_bar(manifest.total_bytes(), "scan");
    let t0 = Instant::now();
    let watcher = plot.map(|_| {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        (stop, tokio::spawn(watch_faults(client.clone(), t0, stopped)))
    });
    let mut tasks = vec![];
    for (mut s, part) in streams.into_iter().zip(&partitions) {
        let (bar, share) = (bar.clone(), part.len.max(1) as f64);
        let sampling = plot.is_some();
        tasks.push(tokio::spawn(async move {
            let (mut done, mut samples, mut last) = (0u64, vec![(0.0, 0.0)], 0.0);
            while let Some(b) = s.next().await? {
                bar.inc(b.data.len() as u64);
                done += b.data.len() as u64;
                let at = t0.elapsed().as_secs_f64();
                if sampling && at - last >= PROGRESS_SAMPLE_SECS {
                    samples.push((at, done as f64 / share));
                    last = at;
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            samples.push((secs, done as f64 / share));
            Ok::<_, ganges_client::ClientError>((s.close(), secs, samples))
        }));
    }
    let mut t = Table::new(&["consumer", "bytes", "seconds", "MB/s", "backup %", "retries"]);
    let mut digest = Digest::default();
    let mut total = 0;
    let mut corrupt = 0;
    let mut progress = vec![];
    for (i, task) in tasks.into_iter().enumerate() {
        let (r, secs, samples) = task.await.map_err(|e| CliError::Failed(e.to_string()))??;
        digest.merge(r.digest);
        total += r.bytes;
        corrupt += r.stats.corrupt.len();
        progress.push(samples);
        t.row(vec![
            i.to_string(),
            ByteSize(r.bytes).to_string(),
            format!("{secs:.3}"),
            format!("{:.1}", mb_per_sec(r.bytes, secs)),
            format!("{:.1}", r.stats.backup_bytes() as f64 / r.bytes.max(1) as f64 * 100.0),
            r.stats.retries.to_string(),
        ]);
    }
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    print!("{}", t.render());
    println!("{policy}: {} in {secs:.3}s = {:.1} MB/s", ByteSize(total), mb_per_sec(total, secs));
    if let (Some(path), Some((stop, watcher))) = (plot, watcher) {
        drop(stop);
        let changes = watcher.await.map_err(|e| CliError::Failed(format!("watching the faults: {e}")))?;
        plot_progress(path, &name, policy, &progress, ideal, &changes)?;
        println!("progress plot: {}", path.display());
    }
    if digest != manifest.digest {
        return fail(format!(
            "digest {digest} differs from the dataset's {}: data lost or duplicated",
            manifest.digest
        ));
    }
    println!("every byte delivered exactly once (digest {digest})");
    if corrupt > 0 {
        println!("{corrupt} blocks failed their checksums and were read from other copies; repairing them");
        ganges_client::repair::settle().await;
    }
    Ok(())
}

/// How often a consumer's progress is sampled for the plot.
const PROGRESS_SAMPLE_SECS: f64 = 0.02;
/// How often the servers are asked for the faults in force while a scan is plotted.
const FAULT_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// A fault that changed during a scan: when, on which server, and what is in force after.
type FaultChange = (f64, NodeId, String);

/// What is in force on a server: its model fault and real faults, in words.
fn faults_in_force(s: &ganges_proto::control::ServerStats) -> String {
    match (s.fault, s.real_faults.is_none()) {
        (None, true) => "none".into(),
        (Some(f), true) => f.to_string(),
        (None, false) => s.real_faults.to_string(),
        (Some(f), false) => format!("{f}, {}", s.real_faults),
    }
}

/// Poll every server's faults until `stop` fires (or is dropped); the changes seen.
async fn watch_faults(
    client: Arc<Client>,
    t0: Instant,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Vec<FaultChange> {
    let mut changes = vec![];
    let mut last: Vec<Option<String>> = vec![None; client.nodes() as usize];
    loop {
        for (n, s) in fault::all_stats(&client).await.iter().enumerate() {
            let Some(now) = s.as_ref().map(faults_in_force) else { continue };
            if last[n].as_ref().is_some_and(|was| *was != now) {
                changes.push((t0.elapsed().as_secs_f64(), NodeId(n as u32), now.clone()));
            }
            last[n] = Some(now);
        }
        tokio::select! {
            _ = &mut stop => return changes,
            _ = tokio::time::sleep(FAULT_POLL) => {}
        }
    }
}

fn plot_progress(
    path: &Path,
    name: &DatasetName,
    policy: ganges_core::route::ReadPolicyKind,
    progress: &[Vec<(f64, f64)>],
    ideal: Option<f64>,
    changes: &[FaultChange],
) -> CliResult<()> {
    use ganges_bench::plot::{Series, line_chart};
    let mut series: Vec<Series> = progress
        .iter()
        .enumerate()
        .map(|(i, points)| Series {
            name: format!("consumer {i}"),
            points: points.clone(),
            color: Some(1),
            unlabelled: i > 0,
            ..Series::default()
        })
        .collect();
    series[0].name = format!("consumers (1..{})", progress.len());
    if let Some(secs) = ideal {
        series.push(Series {
            name: format!("ideal, faults as at the start ({secs:.2} s)"),
            points: vec![(0.0, 0.0), (secs, 1.0)],
            dashed: true,
            ..Series::default()
        });
    }
    for (at, node, now) in changes {
        series.push(Series {
            name: format!("{at:.1} s: {node} {now}"),
            points: vec![(*at, 0.0), (*at, 1.0)],
            dashed: true,
            color: Some(0),
            ..Series::default()
        });
    }
    let title = format!("`{name}` read with {policy}: each consumer's share");
    line_chart(path, &title, "seconds", "share read", &series, 1.0)?;
    Ok(())
}

pub async fn fault_set(
    cluster: &Path,
    nodes: &[u32],
    model: Option<Fault>,
    real: ganges_proto::control::RealFaults,
) -> CliResult<()> {
    let client = connect(cluster).await?;
    let nodes: Vec<NodeId> = nodes.iter().map(|&n| NodeId(n)).collect();
    for done in fault::set(&client, &nodes, model, &real).await? {
        if let Some(w) = &done.warning {
            eprintln!("warning: {w}");
        }
        if let Some(f) = done.model {
            println!("{}: {f}", done.node);
        }
        if let Some(r) = &done.real {
            println!("{}: {r}", done.node);
        }
    }
    Ok(())
}

pub async fn fault_clear(cluster: &Path, nodes: Option<Vec<u32>>) -> CliResult<()> {
    let client = connect(cluster).await?;
    let nodes: Option<Vec<NodeId>> = nodes.map(|v| v.into_iter().map(NodeId).collect());
    fault::clear(&client, nodes.as_deref()).await?;
    println!("faults cleared");
    Ok(())
}

pub async fn fault_show(cluster: &Path) -> CliResult<()> {
    let client = connect(cluster).await?;
    let all: Vec<NodeId> = (0..client.nodes()).map(NodeId).collect();
    let mut t = Table::new(&["node", "disk", "model fault", "effective rate", "real faults"]);
    for (node, r) in client.control_all(&all, &ControlRequest::Stats).await {
        match r {
            Ok(ControlReply::Stats { stats }) => {
                let disk = stats.disk.map_or(
                    if stats.direct_io { "real, direct I/O".into() } else { "real file system".into() },
                    |d| {
                        format!("{}/s, seek {:.1}ms", ByteSize(d.rate_bytes_per_sec as u64), d.seek.as_secs_f64() * 1e3)
                    },
                );
                let eff = stats.model_rate().map_or("-".into(), |r| format!("{}/s", ByteSize(r as u64)));
                t.row(vec![
                    node.0.to_string(),
                    disk,
                    stats.fault.map_or("none".into(), |f| f.to_string()),
                    eff,
                    stats.real_faults.to_string(),
                ]);
            }
            _ => t.row(vec![node.0.to_string(), "unreachable".into(), "-".into(), "-".into(), "-".into()]),
        }
    }
    print!("{}", t.render());
    Ok(())
}

/// What `ganges cluster init` is asked to write.
#[derive(Debug)]
pub struct ClusterInit {
    pub hosts: Vec<String>,
    pub out: PathBuf,
    pub secret_file: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub listen_any: bool,
    pub tls: bool,
}

/// Write a cluster file for servers on `hosts`, with a new secret (an existing secret file
/// is kept), and with `tls` a CA and a certificate per server.
pub fn cluster_init(a: &ClusterInit) -> CliResult<()> {
    if a.out.exists() {
        return fail(format!("{} exists; remove it first, or pass --out elsewhere", a.out.display()));
    }
    let dir = a.out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    std::fs::create_dir_all(&dir)?;
    let servers: Vec<ServerEntry> = a
        .hosts
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let mut e = ServerEntry::new(NodeId(k as u32), h.clone());
            e.data_dir = a.data_dir.clone();
            if a.listen_any {
                let port = h.rsplit_once(':').map_or("7070", |(_, p)| p);
                e.listen = Some(format!("0.0.0.0:{port}"));
            }
            e
        })
        .collect();
    let mut file = ClusterFile::new(servers)?;
    file.path = a.out.clone();
    // Paths inside the cluster file are relative to it when they sit beside it.
    let relative = |p: &Path| p.strip_prefix(&dir).map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf());
    let secret_path = a.secret_file.clone().unwrap_or_else(|| dir.join("secret"));
    if secret_path.exists() {
        ganges_net::Secret::load(&secret_path).map_err(|e| CliError::Failed(e.to_string()))?;
        println!("using the existing secret {}", secret_path.display());
    } else {
        ganges_net::Secret::generate(&secret_path).map_err(|e| CliError::Failed(e.to_string()))?;
        println!("wrote a new cluster secret to {} (mode 0600)", secret_path.display());
    }
    file.security.secret_file = Some(relative(&secret_path));
    if a.tls {
        let tls_dir = dir.join("tls");
        let certs = ganges_net::tls::generate(&tls_dir, &a.hosts).map_err(|e| CliError::Failed(e.to_string()))?;
        file.tls = Some(ganges_client::cluster::TlsSection {
            ca: relative(&certs.ca_cert),
            cert_dir: Some(relative(&tls_dir)),
        });
        println!(
            "wrote a cluster CA and {} server certificates to {} (keys mode 0600; ca.key signs new ones)",
            a.hosts.len(),
            tls_dir.display()
        );
    }
    file.save(&a.out)?;
    println!("wrote {} with {} servers", a.out.display(), a.hosts.len());
    println!(
        "copy it{} to every machine, then on machine K run: ganges serve --cluster {} --node K{}",
        if a.tls { ", the secret and tls/" } else { " and the secret" },
        a.out.display(),
        if a.data_dir.is_none() { " --data-dir DIR" } else { "" }
    );
    Ok(())
}

/// Every server of a cluster (local or not): address, state, security, datasets, faults,
/// and its node's load.
pub async fn cluster_status(cluster: &Path) -> CliResult<()> {
    let file = ClusterFile::load(cluster)?;
    if let Some(l) = &file.local {
        let alive = ganges_harness::sys::alive(l.supervisor_pid);
        println!(
            "local cluster at {} (supervisor pid {}, {})",
            l.root.display(),
            l.supervisor_pid,
            if alive { "running" } else { "NOT running: the cluster file is stale" }
        );
    }
    let client = Client::connect(file.clone()).await;
    let mut t = Table::new(&[
        "node",
        "address",
        "metrics",
        "state",
        "security",
        "datasets",
        "fault",
        "reads",
        "read",
        "rss",
        "cpu %",
        "load",
        "free mem",
        "free net",
        "free disk",
    ]);
    let stats: Vec<Option<ganges_proto::control::ServerStats>> = match &client {
        Ok(c) => {
            let all: Vec<NodeId> = (0..c.nodes()).map(NodeId).collect();
            c.control_all(&all, &ControlRequest::Stats)
                .await
                .into_iter()
                .map(|(_, r)| match r {
                    Ok(ControlReply::Stats { stats }) => Some(*stats),
                    _ => None,
                })
                .collect()
        }
        Err(_) => vec![None; file.servers.len()],
    };
    for (s, st) in file.servers.iter().zip(stats) {
        match st {
            Some(st) => t.row(
                vec![
                    s.node.0.to_string(),
                    s.addr.to_string(),
                    st.metrics_addr.clone().unwrap_or_else(|| "-".into()),
                    "up".into(),
                    match (st.secret, st.tls) {
                        (true, true) => "secret+tls".into(),
                        (true, false) => "secret".into(),
                        (false, true) => "tls".into(),
                        (false, false) => "none".into(),
                    },
                    st.datasets.to_string(),
                    match (st.fault, st.real_faults.is_none()) {
                        (None, true) => "none".into(),
                        (Some(f), true) => f.to_string(),
                        (None, false) => st.real_faults.to_string(),
                        (Some(f), false) => format!("{f}; {}", st.real_faults),
                    },
                    st.reads.to_string(),
                    ByteSize(st.read_bytes).to_string(),
                    ByteSize(st.rss_bytes).to_string(),
                ]
                .into_iter()
                .chain(node_load_cells(st.node_load.as_ref()))
                .collect(),
            ),
            None => t.row(
                vec![
                    s.node.0.to_string(),
                    s.addr.to_string(),
                    "-".into(),
                    "DOWN".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]
                .into_iter()
                .chain(node_load_cells(None))
                .collect(),
            ),
        }
    }
    print!("{}", t.render());
    println!("cpu % is the node's least busy CPU; free net and disk are the rates the node could still take (CW-1).");
    if let Some(l) = &file.local {
        for (node, status) in ganges_harness::local::exited_servers(&l.root) {
            println!("node{node} exited ({status}); `ganges local restart --node {node}` starts it again");
        }
    }
    if let Err(e) = client {
        return fail(format!("{}: {e}", cluster.display()));
    }
    Ok(())
}

/// A node's load as `local status` shows it ("-" before its first sample).
fn node_load_cells(l: Option<&ganges_core::ceft::NodeLoad>) -> Vec<String> {
    match l {
        Some(l) => vec![
            format!("{:.0}", 100.0 * l.cpu_min_busy),
            format!("{:.2}", l.load),
            ByteSize(l.mem_free_bytes).to_string(),
            format!("{}/s", ByteSize(l.net_free_bytes_per_sec as u64)),
            format!("{}/s", ByteSize(l.disk_free_bytes_per_sec as u64)),
        ],
        None => vec!["-".into(); 5],
    }
}

#[derive(Debug)]
pub struct ModelLayoutArgs {
    pub nodes: u32,
    pub replicas: u32,
    pub fault: Fault,
    pub faults: Vec<u32>,
    pub layout: FaultLayout,
    pub seed: u64,
    pub fragment_bytes: u64,
    pub rate_bytes_per_sec: f64,
}

pub fn model_river(n: u32, u_app: f64, u_fault: f64) -> CliResult<()> {
    let valid = u_app > 0.0 && u_app <= 1.0 && (0.0..=1.0).contains(&u_fault);
    if !valid {
        return fail("--u-app must be in (0, 1] and --u-fault in [0, 1]");
    }
    let s = Spectrum { n, u_app, u_fault };
    println!("River's performance-availability spectrum (river §4.1): n = {n}, U_app = {u_app}, U_fault = {u_fault}");
    println!("x_loss = n(1 - U_app)/U_fault = {:.2}   y_n = (1 - U_fault)/U_app = {:.3}", s.x_loss(), s.y_n());
    let mut t = Table::new(&["faults", "ideal % of fault-free"]);
    for x in 0..=n {
        t.row(vec![x.to_string(), format!("{:.1}", s.y(x as f64) * 100.0)]);
    }
    print!("{}", t.render());
    Ok(())
}

pub fn model_layout(a: &ModelLayoutArgs) -> CliResult<()> {
    a.fault.validate()?;
    let layout = Layout::chained(a.nodes, a.replicas)?;
    let shape = Shape::uniform(a.nodes, a.fragment_bytes, ganges_core::shape::BLOCK_BYTES_MIN)?;
    let demands = scan_demands(&shape, &shape.fragment_partitions())?;
    let t_free = river_ideal_seconds(shape.total_bytes(), &vec![a.rate_bytes_per_sec; a.nodes as usize]);
    println!(
        "scan of {} fragments of {} on {} nodes at {}/s, {} copies, fault: {}, {} layout",
        a.nodes,
        ByteSize(a.fragment_bytes),
        a.nodes,
        ByteSize(a.rate_bytes_per_sec as u64),
        a.replicas,
        a.fault,
        a.layout
    );
    let mut t = Table::new(&["faults", "nodes", "river s", "layout s", "river %", "layout %", "bottleneck"]);
    for &f in &a.faults {
        if f > a.nodes {
            return fail(format!("{f} faults on {} nodes", a.nodes));
        }
        let faulty = place(a.layout, a.nodes, f, a.seed);
        let rates: Vec<f64> = (0..a.nodes)
            .map(|n| a.rate_bytes_per_sec * if faulty.contains(&NodeId(n)) { a.fault.rate_fraction() } else { 1.0 })
            .collect();
        let river = river_ideal_seconds(shape.total_bytes(), &rates);
        let li = layout_ideal(&demands, &layout, &rates)?;
        let bottleneck = if (li.seconds - river).abs() <= 1e-9 * river {
            "aggregate".to_string()
        } else {
            format!("nodes {}", li.bottleneck_nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","))
        };
        t.row(vec![
            f.to_string(),
            faulty.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
            format!("{river:.3}"),
            format!("{:.3}", li.seconds),
            format!("{:.1}", t_free / river * 100.0),
            format!("{:.1}", t_free / li.seconds * 100.0),
            bottleneck,
        ]);
    }
    print!("{}", t.render());
    println!("(% columns: fault-free ideal time / ideal time with the faults)");
    Ok(())
}
