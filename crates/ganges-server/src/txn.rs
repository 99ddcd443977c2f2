//! The janitor: finishes or rolls back writes a crash interrupted, by the commit rule of
//! ganges-core's `commit` module.
//!
//! Every tick it lists the writes this server holds uncommitted (`Store::unresolved`),
//! asks the rule what to do with each, asks a write's coordinator for its verdict when the
//! rule says so (`TxnStatus`, over a peer connection), and commits or aborts. It is the
//! only code that acts on a write without its client, and it acts only as the rule says.

use crate::Shared;
use crate::handoff::PeerConn;
use ganges_core::commit::{Action, Verdict, decide};
use ganges_core::ids::NodeId;
use ganges_proto::control::{ControlReply, ControlRequest};
use ganges_proto::manifest::DatasetName;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs until the server stops (aborted).
pub async fn run_janitor(shared: Arc<Shared>) {
    let (me, timeout) = (shared.config.node, shared.config.txn_timeout);
    let tick = (timeout / 8).clamp(Duration::from_millis(100), Duration::from_secs(1));
    // When each prepared folder found on disk was first seen: its idle time counts from
    // then (this process never saw it active).
    let mut first_seen: HashMap<(DatasetName, u64), Instant> = HashMap::new();
    loop {
        tokio::time::sleep(tick).await;
        let store = shared.store.clone();
        let Ok(writes) = tokio::task::spawn_blocking(move || store.unresolved()).await else { continue };
        first_seen.retain(|k, _| writes.iter().any(|w| (&w.name, w.txid) == (&k.0, k.1)));
        for w in writes {
            let key = (w.name.clone(), w.txid);
            let idle = w.idle.unwrap_or_else(|| first_seen.entry(key).or_insert_with(Instant::now).elapsed());
            let mut action = decide(me, w.phase, idle, timeout, None);
            if let Action::Ask(coordinator) = action {
                let verdict = ask(&shared, coordinator, &w.name, w.txid).await;
                tracing::debug!(dataset = %w.name, txid = w.txid, ?verdict, "asked the coordinator");
                action = decide(me, w.phase, idle, timeout, Some(verdict));
            }
            let (store, name, txid) = (shared.store.clone(), w.name.clone(), w.txid);
            let done = match action {
                Action::RollForward => tokio::task::spawn_blocking(move || store.commit(txid, &name)).await,
                Action::RollBack => tokio::task::spawn_blocking(move || store.abort(txid, &name)).await,
                Action::Wait | Action::Ask(_) => continue,
            };
            match done {
                Ok(Ok(())) => tracing::warn!(
                    node = %me, dataset = %w.name, txid = format_args!("{:016x}", w.txid), ?action, phase = ?w.phase,
                    idle_ms = idle.as_millis() as u64, "resolved a write its client left unfinished"
                ),
                Ok(Err(e)) => tracing::warn!(node = %me, dataset = %w.name, %e, ?action, "could not resolve a write"),
                Err(e) => tracing::warn!(node = %me, %e, "janitor task failed"),
            }
        }
    }
}

/// The coordinator's verdict on a write.
async fn ask(shared: &Shared, coordinator: NodeId, name: &DatasetName, txid: u64) -> Verdict {
    let addr = shared.peers.lock().iter().find(|p| p.node == coordinator).map(|p| p.addr.clone());
    let Some(addr) = addr else { return Verdict::Unreachable };
    let asked = async {
        let mut conn = PeerConn::connect(shared, &addr).await?;
        let asker = Some(shared.config.node);
        conn.control(ControlRequest::TxnStatus { txid, name: name.clone(), asker }).await
    };
    match tokio::time::timeout(Duration::from_secs(5), asked).await {
        Ok(Ok(ControlReply::TxnStatus { status })) => status,
        _ => Verdict::Unreachable,
    }
}
