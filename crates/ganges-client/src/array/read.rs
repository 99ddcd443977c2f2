//! Reading an array: any set of regions, each filled from the subchunks it overlaps, with
//! many subchunk reads in flight from one reader.

use super::meta;
use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::scan::ReadOptions;
use crate::stream::{AsyncReader, SUBMITTED_BYTES_MAX};
use ganges_core::array::{ARRAY_READ_POLICY, ArrayError, ArrayLayout, Region, copy_overlap, spread_over_fragments};
use ganges_core::ids::FragmentId;
use ganges_core::route::ReadPolicyKind;
use ganges_proto::manifest::Manifest;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

fn invalid(e: ArrayError) -> ClientError {
    ClientError::Invalid(e.to_string())
}

/// Read process `rank`'s chunk of `memory` (any layout) of the array in `manifest`, row-major
/// over the chunk, with graduated declustering over the subchunks' copies
/// ([`ARRAY_READ_POLICY`]).
pub async fn read_chunk(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    memory: &ArrayLayout,
    rank: u32,
) -> Result<Vec<u8>> {
    read_chunk_with(client, manifest, memory, rank, ARRAY_READ_POLICY).await
}

/// As [`read_chunk`], with a read policy of your choice.
pub async fn read_chunk_with(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    memory: &ArrayLayout,
    rank: u32,
    policy: ReadPolicyKind,
) -> Result<Vec<u8>> {
    let meta = meta(manifest)?;
    memory.check(&meta.schema).map_err(invalid)?;
    if rank >= memory.positions() {
        return Err(ClientError::Invalid(format!("rank {rank} of a layout of {} processes", memory.positions())));
    }
    read_region(client, manifest, &memory.chunk(&meta.schema, rank), policy).await
}

/// The dataset byte ranges process `region` reads: the subchunks it overlaps, whole (what
/// the layout-aware ideal of a collective read is computed from).
pub fn region_reads(manifest: &Manifest, region: &Region) -> Result<Vec<ganges_core::shape::Partition>> {
    let meta = meta(manifest)?;
    let subs = meta.subchunks().map_err(invalid)?;
    Ok((0..subs.len())
        .filter(|&i| !region.intersect(&subs.boxes[i]).is_empty())
        .map(|i| {
            let p = meta.places[i];
            ganges_core::shape::Partition {
                offset: manifest.shape.fragment_start(FragmentId(p.fragment)) + p.offset,
                len: subs.bytes(i),
            }
        })
        .collect())
}

/// The elements of `region` of the array, row-major over it.
pub async fn read_region(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    region: &Region,
    policy: ReadPolicyKind,
) -> Result<Vec<u8>> {
    let mut out = None;
    read_regions(client, manifest, std::slice::from_ref(region), policy, |_, bytes| {
        out = Some(bytes);
        Ok(())
    })
    .await?;
    Ok(out.unwrap_or_default())
}

/// Fill every region of `targets` (row-major over each) and hand each to `done` as soon as it
/// is whole, in whatever order they complete. Subchunks are read in the targets' order (each
/// target's spread over the servers), as many at once as the reader allows, and each only
/// once; a target's buffer exists only while it is being filled.
pub(crate) async fn read_regions(
    client: &Arc<Client>,
    manifest: &Arc<Manifest>,
    targets: &[Region],
    policy: ReadPolicyKind,
    mut done: impl FnMut(usize, Vec<u8>) -> Result<()>,
) -> Result<()> {
    let meta = meta(manifest)?;
    let subs = meta.subchunks().map_err(invalid)?;
    let elem = meta.schema.dtype.size();
    // Which subchunks each target needs, and which targets each subchunk feeds.
    let mut needs: Vec<usize> = vec![0; targets.len()];
    let mut feeds: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut order: Vec<usize> = vec![];
    for (t, region) in targets.iter().enumerate() {
        if region.is_empty() {
            done(t, vec![])?;
            continue;
        }
        let mut new = vec![];
        for (i, sub) in subs.boxes.iter().enumerate() {
            if !region.intersect(sub).is_empty() {
                needs[t] += 1;
                let fed = feeds.entry(i).or_default();
                if fed.is_empty() {
                    new.push(i);
                }
                fed.push(t);
            }
        }
        // A target's subchunks spread over the servers that hold them, not in the runs the
        // allocation left.
        let fragments: Vec<u32> = new.iter().map(|&i| meta.places[i].fragment).collect();
        order.extend(spread_over_fragments(&fragments).into_iter().map(|k| new[k]));
    }
    // Enough in flight to keep every server's disk busy from one reader.
    let opts = ReadOptions::new(policy).with_window(4 * manifest.shape.fragment_count());
    let mut reader = AsyncReader::open(client.clone(), manifest.clone(), opts)?;
    reader.expect_bytes(order.iter().map(|&i| subs.bytes(i)).sum());
    let mut buffers: HashMap<usize, Vec<u8>> = HashMap::new();
    let mut tickets = HashMap::new();
    let mut budget = 0u64;
    let mut next = order.into_iter().peekable();
    loop {
        while let Some(&i) = next.peek() {
            let len = subs.bytes(i);
            if budget + len > SUBMITTED_BYTES_MAX / 4 && !tickets.is_empty() {
                break;
            }
            let p = meta.places[i];
            let offset = manifest.shape.fragment_start(FragmentId(p.fragment)) + p.offset;
            tickets.insert(reader.submit(offset, len)?, i);
            budget += len;
            next.next();
        }
        let Some((ticket, data)) = reader.reap().await? else { break };
        let i = tickets.remove(&ticket).expect("every ticket is a subchunk");
        budget -= data.len() as u64;
        let sub = &subs.boxes[i];
        for &t in &feeds[&i] {
            let region = &targets[t];
            let buf = buffers.entry(t).or_insert_with(|| vec![0u8; (region.elements() * u64::from(elem)) as usize]);
            copy_overlap(elem, sub, &data, region, buf, &region.intersect(sub)).map_err(invalid)?;
            needs[t] -= 1;
            if needs[t] == 0 {
                done(t, buffers.remove(&t).expect("filled"))?;
            }
        }
    }
    reader.close();
    Ok(())
}
