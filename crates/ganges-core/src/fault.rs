//! Where F faults go among N nodes (river §5.2).
//!
//! With limited replication the placement matters: adjacent faults under chained
//! declustering hit both copies of a fragment at once.

use crate::ids::NodeId;
use rand::SeedableRng;
use rand::seq::index::sample;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultLayout {
    /// Spread as evenly as possible: nodes floor(k * N / F) for k = 0..F-1.
    Best,
    /// Adjacent: nodes 0..F-1.
    Worst,
    /// A seeded sample without repetition.
    Random,
}

impl FromStr for FaultLayout {
    type Err = crate::parse::ParseError;
    fn from_str(s: &str) -> Result<Self, crate::parse::ParseError> {
        match s {
            "best" => Ok(FaultLayout::Best),
            "worst" => Ok(FaultLayout::Worst),
            "random" => Ok(FaultLayout::Random),
            _ => Err(crate::parse::ParseError::unknown("fault layout", s, ["best", "worst", "random"])),
        }
    }
}

impl fmt::Display for FaultLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultLayout::Best => "best",
            FaultLayout::Worst => "worst",
            FaultLayout::Random => "random",
        })
    }
}

/// The nodes that get a fault when `count` of `nodes` are faulty. `seed` is used by
/// `Random` only. Panics if `count > nodes` (callers check their input).
pub fn place(layout: FaultLayout, nodes: u32, count: u32, seed: u64) -> Vec<NodeId> {
    assert!(count <= nodes, "{count} faults on {nodes} nodes");
    let mut out: Vec<NodeId> = match layout {
        FaultLayout::Best => (0..count).map(|k| NodeId((k as u64 * nodes as u64 / count as u64) as u32)).collect(),
        FaultLayout::Worst => (0..count).map(NodeId).collect(),
        FaultLayout::Random => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            sample(&mut rng, nodes as usize, count as usize).into_iter().map(|i| NodeId(i as u32)).collect()
        }
    };
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> Vec<NodeId> {
        v.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn best_spreads_worst_packs() {
        assert_eq!(place(FaultLayout::Best, 16, 4, 0), ids(&[0, 4, 8, 12]));
        assert_eq!(place(FaultLayout::Best, 16, 8, 0), ids(&[0, 2, 4, 6, 8, 10, 12, 14]));
        assert_eq!(place(FaultLayout::Best, 16, 12, 0), ids(&[0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14]));
        assert_eq!(place(FaultLayout::Worst, 16, 3, 0), ids(&[0, 1, 2]));
        assert_eq!(place(FaultLayout::Best, 16, 0, 0), ids(&[]));
        assert_eq!(place(FaultLayout::Best, 16, 16, 0).len(), 16);
    }

    #[test]
    fn random_is_seeded_and_distinct() {
        let a = place(FaultLayout::Random, 16, 5, 42);
        assert_eq!(a, place(FaultLayout::Random, 16, 5, 42));
        let mut d = a.clone();
        d.dedup();
        assert_eq!(d.len(), 5);
        assert!(a.iter().all(|n| n.0 < 16));
    }
}
