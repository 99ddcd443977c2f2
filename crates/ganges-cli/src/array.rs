//! `ganges array`: write an array from many processes (tasks here), read it into any layout,
//! show where its subchunks are, remove it.

use crate::commands::{connect, dataset_rm};
use crate::error::{CliError, CliResult, fail};
use bytes::Bytes;
use ganges_bench::util::Table;
use ganges_client::array::{self, ArraySpec, Rates};
use ganges_core::array::{ArrayLayout, Dist, Schema, copy_overlap, gather, generated};
use ganges_core::route::ReadPolicyKind;
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_proto::manifest::DatasetName;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A layout from the command line. `mesh` may list every dimension or only the distributed
/// ones; without `dist`, the first `mesh.len()` dimensions are BLOCK and the rest `*`. With
/// neither, `default` (or, without one, one process holding the whole array).
pub fn layout(
    what: &str,
    rank: usize,
    mesh: Option<Vec<u32>>,
    dist: Option<Vec<Dist>>,
    default: Option<ArrayLayout>,
) -> CliResult<ArrayLayout> {
    match ArrayLayout::from_options(rank, mesh, dist) {
        Ok(Some(l)) => Ok(l),
        Ok(None) => Ok(default.unwrap_or_else(|| ArrayLayout::whole(rank))),
        Err(e) => fail(format!("--{what}-mesh/--{what}-dist: {e}")),
    }
}

/// The chunk of each process of `spec`'s memory layout: generated, or cut from `from`.
fn chunks(spec: &ArraySpec, from: Option<&Path>) -> CliResult<Vec<Bytes>> {
    let schema = &spec.schema;
    let Some(path) = from else {
        return Ok((0..spec.ranks()).map(|r| Bytes::from(generated(schema, &spec.memory.chunk(schema, r)))).collect());
    };
    let whole = std::fs::read(path).map_err(|e| CliError::Failed(format!("reading {}: {e}", path.display())))?;
    if whole.len() as u64 != schema.bytes() {
        return fail(format!(
            "{} holds {} bytes; an array of shape {:?} of {} holds {}",
            path.display(),
            whole.len(),
            schema.shape,
            schema.dtype,
            schema.bytes()
        ));
    }
    let region = schema.whole();
    (0..spec.ranks())
        .map(|r| {
            let part = spec.memory.chunk(schema, r);
            gather(schema.dtype.size(), &region, &whole, &part)
                .map(Bytes::from)
                .map_err(|e| CliError::Failed(e.to_string()))
        })
        .collect()
}

pub async fn write(cluster: &Path, spec: ArraySpec, from: Option<&Path>) -> CliResult<()> {
    let client = connect(cluster).await?;
    let mut spec = spec;
    spec.generated = from.is_none();
    let chunks = chunks(&spec, from)?;
    let report = array::write_all(&client, &spec, &Rates::default(), chunks).await?;
    let bytes = spec.schema.bytes();
    let meta = array::meta(&report.manifest)?;
    println!(
        "wrote `{}`: {} in {:.2} s ({:.1} MB/s) from {} processes, {} subchunks, {} allocation over {} servers{}",
        spec.name,
        ByteSize(bytes),
        report.seconds,
        mb_per_sec(bytes, report.seconds),
        spec.ranks(),
        meta.places.len(),
        spec.alloc,
        client.nodes(),
        report.probe_seconds.map_or(String::new(), |s| format!(" (after a {s:.2} s empirical test)"))
    );
    let mut t = Table::new(&["server", "subchunks", "bytes", "disk MB/s"]);
    for (k, (b, r)) in report.server_bytes.iter().zip(&report.rates).enumerate() {
        let n = meta.places.iter().filter(|p| p.fragment == k as u32).count();
        t.row(vec![format!("node{k}"), n.to_string(), ByteSize(*b).to_string(), format!("{:.1}", r / 1e6)]);
    }
    print!("{}", t.render());
    Ok(())
}

pub async fn read(
    cluster: &Path,
    name: DatasetName,
    memory: Option<ArrayLayout>,
    policy: ReadPolicyKind,
    to: Option<&Path>,
) -> CliResult<()> {
    let client = connect(cluster).await?;
    let manifest = Arc::new(client.manifest(&name).await?);
    let meta = array::meta(&manifest)?.clone();
    let schema: Schema = meta.schema.clone();
    let memory = memory.unwrap_or_else(|| ArrayLayout::whole(schema.rank()));
    memory.check(&schema).map_err(|e| CliError::Failed(e.to_string()))?;
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..memory.positions())
        .map(|r| {
            let (client, manifest, memory) = (client.clone(), manifest.clone(), memory.clone());
            tokio::spawn(async move { array::read_chunk_with(&client, &manifest, &memory, r, policy).await })
        })
        .collect();
    let mut parts = vec![];
    for t in tasks {
        parts.push(t.await.map_err(|e| CliError::Failed(format!("a reading task failed: {e}")))??);
    }
    let secs = t0.elapsed().as_secs_f64();
    let checked = array::is_generated(&manifest);
    if checked {
        for (r, got) in parts.iter().enumerate() {
            if *got != generated(&schema, &memory.chunk(&schema, r as u32)) {
                return fail(format!("process {r}'s chunk of `{name}` does not hold the elements written"));
            }
        }
    }
    println!(
        "read `{name}`: {} in {:.2} s ({:.1} MB/s) into {} processes, {}{}",
        ByteSize(schema.bytes()),
        secs,
        mb_per_sec(schema.bytes(), secs),
        memory.positions(),
        memory.describe(),
        if checked { "; every element checked" } else { "" }
    );
    if let Some(path) = to {
        let whole = schema.whole();
        let mut out = vec![0u8; schema.bytes() as usize];
        for (r, got) in parts.iter().enumerate() {
            let chunk = memory.chunk(&schema, r as u32);
            copy_overlap(schema.dtype.size(), &chunk, got, &whole, &mut out, &chunk)
                .map_err(|e| CliError::Failed(e.to_string()))?;
        }
        let tmp = path.with_extension("ganges-partial");
        std::fs::write(&tmp, &out).map_err(|e| CliError::Failed(format!("writing {}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(|e| CliError::Failed(format!("renaming to {}: {e}", path.display())))?;
        println!("wrote {} ({} bytes, row-major)", path.display(), out.len());
    }
    Ok(())
}

pub async fn info(cluster: &Path, name: DatasetName, json: bool) -> CliResult<()> {
    let client = connect(cluster).await?;
    let manifest = client.manifest(&name).await?;
    let meta = array::meta(&manifest)?;
    if json {
        println!("{}", serde_json::to_string_pretty(meta)?);
        return Ok(());
    }
    let subs = meta.subchunks().map_err(|e| CliError::Failed(e.to_string()))?;
    println!("array      {name}");
    println!("shape      {:?} of {} ({})", meta.schema.shape, meta.schema.dtype, ByteSize(meta.schema.bytes()));
    println!("disk       {}", meta.disk.describe());
    println!(
        "subchunks  {} of at most {} (each chunk cut {:?}, {:?})",
        subs.len(),
        ByteSize(meta.threshold),
        subs.submesh,
        meta.style
    );
    println!("allocation {}", meta.alloc);
    println!("copies     {} ({})", manifest.layout.replicas(), manifest.layout.describe());
    println!("content    {}", if array::is_generated(&manifest) { array::GENERATED_SOURCE } else { "imported" });
    let mut t = Table::new(&["server", "subchunks", "bytes", "first subchunks"]);
    for k in 0..manifest.shape.fragment_count() {
        let mine: Vec<usize> = (0..subs.len()).filter(|&i| meta.places[i].fragment == k).collect();
        let bytes: u64 = mine.iter().map(|&i| subs.bytes(i)).sum();
        let first: Vec<String> = mine.iter().take(8).map(usize::to_string).collect();
        let more = if mine.len() > 8 { ", …" } else { "" };
        t.row(vec![
            format!("node{k}"),
            mine.len().to_string(),
            ByteSize(bytes).to_string(),
            format!("{}{more}", first.join(", ")),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

pub async fn export(cluster: &Path, name: DatasetName, dir: &Path) -> CliResult<()> {
    let client = connect(cluster).await?;
    let manifest = Arc::new(client.manifest(&name).await?);
    let t0 = Instant::now();
    let e = array::export_zarr(&client, &manifest, dir).await?;
    println!(
        "exported `{name}` to {} as a Zarr v3 array: {} chunks of {:?}, {} in {:.2} s",
        e.dir.display(),
        e.chunks,
        e.chunk_shape,
        ByteSize(e.bytes),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

pub async fn rm(cluster: &Path, name: DatasetName) -> CliResult<()> {
    dataset_rm(cluster, name).await
}
