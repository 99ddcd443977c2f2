//! Scrub and repair: find the blocks of every copy that fail their checksums, and rewrite
//! each from a good copy (`ControlRequest::Fill` with `repair`). A read that meets a bad
//! block repairs it too, once it is done (`heal`): the reader got the block from another
//! copy already, so nothing waits for it.

use crate::client::Client;
use crate::dataset::{ProgressFn, VerifySummary, verify};
use crate::error::{ClientError, Result};
use futures_util::future::join_all;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_proto::control::{BadBlock, ControlReply, ControlRequest};
use ganges_proto::manifest::{DatasetName, Manifest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// Repairs started in the background by reads that met bad blocks, not yet awaited.
static PENDING: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// What a scrub found and did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Every copy's check, before any repair.
    pub checked: VerifySummary,
    /// Bad blocks rewritten from a good copy, and checked again.
    pub repaired: Vec<(NodeId, BadBlock)>,
    /// Bad blocks that could not be repaired, and why.
    pub unrepaired: Vec<(NodeId, BadBlock, String)>,
}

impl ScrubReport {
    /// Every copy of every block is good now (and every server answered).
    pub fn is_clean(&self) -> bool {
        self.unrepaired.is_empty() && self.checked.unreachable.is_empty()
    }
}

/// Check every block of every copy of `name`, and rewrite each bad one from a good copy.
pub async fn scrub(client: &Client, name: &DatasetName, progress: Option<ProgressFn>) -> Result<ScrubReport> {
    let checked = verify(client, name, progress).await?;
    let manifest = client.manifest(name).await?;
    let mut by_copy: BTreeMap<(NodeId, FragmentId), Vec<BadBlock>> = BTreeMap::new();
    for (node, bad) in &checked.bad {
        by_copy.entry((*node, bad.fragment)).or_default().push(bad.clone());
    }
    let mut report = ScrubReport { checked, ..ScrubReport::default() };
    for ((node, fragment), bad) in by_copy {
        let blocks: Vec<u32> = bad.iter().map(|b| b.block).collect();
        match repair(client, &manifest, node, fragment, &blocks).await {
            Ok(()) => report.repaired.extend(bad.into_iter().map(|b| (node, b))),
            Err(e) => report.unrepaired.extend(bad.into_iter().map(|b| (node, b, e.to_string()))),
        }
    }
    Ok(report)
}

/// Rewrite `blocks` of `node`'s copy of `fragment` from another copy, then check them.
pub async fn repair(
    client: &Client,
    manifest: &Manifest,
    node: NodeId,
    fragment: FragmentId,
    blocks: &[u32],
) -> Result<()> {
    let peers = client.cluster().peers();
    let name = manifest.name.clone();
    let req = ControlRequest::Fill { name: name.clone(), fragment, peers, repair: blocks.to_vec() };
    match client.control(node, req).await? {
        ControlReply::Filled { .. } => {}
        other => return Err(ClientError::Protocol { node, why: format!("answered a repair with {other:?}") }),
    }
    for &b in blocks {
        let req = ControlRequest::Verify { name: name.clone(), fragment, block_from: b, block_to: b + 1 };
        match client.control(node, req).await? {
            ControlReply::Verified { report } if report.bad.is_empty() => {}
            ControlReply::Verified { report } => {
                return Err(ClientError::Invalid(format!(
                    "{node}'s copy of {fragment} block {b} still fails its checksum after a repair: {}",
                    report.bad[0].why
                )));
            }
            other => return Err(ClientError::Protocol { node, why: format!("answered a verify with {other:?}") }),
        }
    }
    Ok(())
}

/// Repair the blocks a read found bad: `corrupt` holds (dataset offset, node) as a read's
/// stats report them. Returns how many blocks were repaired.
pub async fn heal(client: &Client, manifest: &Manifest, corrupt: &[(u64, NodeId)]) -> Result<usize> {
    let shape = &manifest.shape;
    let mut by_copy: BTreeMap<(NodeId, FragmentId), Vec<u32>> = BTreeMap::new();
    for &(offset, node) in corrupt {
        let Some((fragment, within)) = shape.locate(offset) else { continue };
        let block = (within / u64::from(shape.block_bytes())) as u32;
        let blocks = by_copy.entry((node, fragment)).or_default();
        if !blocks.contains(&block) {
            blocks.push(block);
        }
    }
    let repairs = by_copy.iter().map(|((node, fragment), blocks)| repair(client, manifest, *node, *fragment, blocks));
    let mut healed = 0;
    for (r, blocks) in join_all(repairs).await.into_iter().zip(by_copy.values()) {
        r?;
        healed += blocks.len();
    }
    Ok(healed)
}

/// Repair what a read met, in the background on the current runtime (if there is one).
pub(crate) fn heal_in_background(client: Arc<Client>, manifest: Arc<Manifest>, corrupt: Vec<(u64, NodeId)>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let task = rt.spawn(async move {
        match heal(&client, &manifest, &corrupt).await {
            Ok(n) => tracing::warn!(dataset = %manifest.name, blocks = n, "repaired blocks a read found bad"),
            Err(e) => tracing::warn!(dataset = %manifest.name, %e, "could not repair blocks a read found bad"),
        }
    });
    let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    pending.retain(|t| !t.is_finished());
    pending.push(task);
}

/// Wait for every repair reads started in the background (a command does, before it exits).
pub async fn settle() {
    let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
    for t in tasks {
        let _ = t.await;
    }
}
