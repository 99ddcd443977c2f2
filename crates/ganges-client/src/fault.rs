//! Faults at run time: the disk model's, and real ones (the kernel's block-I/O throttle, a
//! competing reader, a shaped link), set on and cleared from chosen servers.

use crate::client::Client;
use crate::error::{ClientError, Result};
use ganges_core::disk::Fault;
use ganges_core::ids::NodeId;
use ganges_proto::control::{ControlReply, ControlRequest, RealFaults, ServerStats};

/// What `set` put in force on one server.
#[derive(Clone, Debug)]
pub struct FaultSet {
    pub node: NodeId,
    /// The model fault, as set.
    pub model: Option<Fault>,
    /// Every real fault now in force on it (those given, merged into those already set).
    pub real: Option<RealFaults>,
    /// Something the caller should know: a kernel read throttle on a server that reads
    /// through the page cache, which may answer reads the throttle never sees.
    pub warning: Option<String>,
}

/// One server's counters and configuration.
pub async fn stats(client: &Client, node: NodeId) -> Result<ServerStats> {
    match client.control(node, ControlRequest::Stats).await? {
        ControlReply::Stats { stats } => Ok(*stats),
        other => Err(ClientError::Protocol { node, why: format!("answered stats with {other:?}") }),
    }
}

/// Every server's stats, in node order; `None` where one did not answer.
pub async fn all_stats(client: &Client) -> Vec<Option<ServerStats>> {
    let mut out = Vec::with_capacity(client.nodes() as usize);
    for n in 0..client.nodes() {
        out.push(stats(client, NodeId(n)).await.ok());
    }
    out
}

/// The rate each server's modelled disk delivers now, its fault included: `None` when some
/// server reads a real disk (no model rate to reckon with) or did not answer.
pub fn model_rates(stats: &[Option<ServerStats>]) -> Option<Vec<f64>> {
    stats.iter().map(|s| s.as_ref()?.model_rate()).collect()
}

/// The least time in which the servers, at their modelled rates with the faults in force,
/// can deliver every partition from the copies that hold it (the layout-aware ideal); `None`
/// on real disks.
pub async fn scan_ideal_seconds(
    client: &Client,
    manifest: &ganges_proto::manifest::Manifest,
    partitions: &[ganges_core::shape::Partition],
) -> Result<Option<f64>> {
    let Some(rates) = model_rates(&all_stats(client).await) else { return Ok(None) };
    let demands = ganges_core::ideal::scan_demands(&manifest.shape, partitions)?;
    let best = ganges_core::ideal::layout_ideal(&demands, &manifest.layout, &rates)
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    Ok(Some(best.seconds))
}

/// Set a fault on `nodes`: a model fault, real faults (merged into the real faults in force),
/// or both. Everything is checked before any server is touched.
pub async fn set(client: &Client, nodes: &[NodeId], model: Option<Fault>, real: &RealFaults) -> Result<Vec<FaultSet>> {
    if model.is_none() && real.is_none() {
        return Err(ClientError::Invalid(
            "give a fault: a model fault (a factor or a competing share) or a real one (kernel read or write \
             rate, competing reader, link rate or delay)"
                .into(),
        ));
    }
    if let Some(f) = model {
        f.validate().map_err(|e| ClientError::Invalid(e.to_string()))?;
    }
    real.validate().map_err(ClientError::Invalid)?;
    if let Some(n) = nodes.iter().find(|n| n.0 >= client.nodes()) {
        return Err(ClientError::Invalid(format!("{n} is not in the cluster (nodes 0..{})", client.nodes())));
    }
    let mut out = Vec::with_capacity(nodes.len());
    for &node in nodes {
        let mut done = FaultSet { node, model: None, real: None, warning: None };
        if let Some(fault) = model {
            client.control(node, ControlRequest::SetFault { fault: Some(fault) }).await?;
            done.model = Some(fault);
        }
        if !real.is_none() {
            // Real faults are set whole: merge these into those in force.
            let stats = stats(client, node).await?;
            if real.kernel_read_bytes_per_sec.is_some() && !stats.direct_io {
                done.warning = Some(format!(
                    "{node} reads through the page cache (no --direct-io), which may answer reads the kernel \
                     throttle never sees"
                ));
            }
            let faults = stats.real_faults.merged(real);
            client.control(node, ControlRequest::SetRealFaults { faults: faults.clone() }).await?;
            done.real = Some(faults);
        }
        out.push(done);
    }
    Ok(out)
}

/// Remove every fault, modelled and real, from `nodes` (`None`: every live server).
pub async fn clear(client: &Client, nodes: Option<&[NodeId]>) -> Result<()> {
    let nodes = nodes.map_or_else(|| client.live_nodes(), <[NodeId]>::to_vec);
    for node in nodes {
        client.control(node, ControlRequest::SetFault { fault: None }).await?;
        client.control(node, ControlRequest::SetRealFaults { faults: RealFaults::default() }).await?;
    }
    Ok(())
}
