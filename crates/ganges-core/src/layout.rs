//! Where the copies of each fragment live.
//!
//! - LAY-1 chained declustering (river §2.4, gd-enhancements §2.3.2, after Hsiao and DeWitt):
//!   copy j of fragment i is on node (i + j) mod N. Copy 0 is the *primary* copy.
//! - LAY-3 no replication is the same layout with one copy.
//! - LAY-2 mirrored groups (CEFT-PVFS, RAID-10 style): the nodes split into two groups of
//!   N/2; fragment i is on node i mod N/2 of group A and on the same position of group B.
//!
//! - Placed: one copy of each fragment on a node of its own, named in a list. A DQ write
//!   that went on without servers that died is made of the survivors' logs, one fragment
//!   each, so it keeps the nodes that hold them rather than a rule.
//!
//! LAY-4 (unequal fragments) is a property of the dataset's [`Shape`](crate::shape::Shape),
//! not of placement, and works with every layout here.

use crate::ids::{FragmentId, NodeId};
use serde::{Deserialize, Serialize};

/// The most copies a dataset may have. Chained declustering with more copies than this buys
/// little robustness (river §5.2: R - 1 worst-case faults) for a lot of space.
pub const REPLICAS_MAX: u32 = 4;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Layout {
    /// LAY-1 (R >= 2) and LAY-3 (R = 1): copy j of fragment i on node (i + j) mod `nodes`.
    Chained { nodes: u32, replicas: u32 },
    /// LAY-2: group A is nodes 0..N/2, group B nodes N/2..N; two copies.
    Mirrored { nodes: u32 },
    /// One copy of fragment i on node `on[i]`; the nodes are distinct (module docs).
    Placed { nodes: u32, on: Vec<u32> },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("a layout needs at least one node")]
    NoNodes,
    #[error("replicas must be between 1 and {REPLICAS_MAX}, got {0}")]
    Replicas(u32),
    #[error("{replicas} replicas need at least {replicas} nodes, the cluster has {nodes}")]
    TooFewNodes { replicas: u32, nodes: u32 },
    #[error("mirrored groups need an even number of nodes, at least 2; the cluster has {0}")]
    MirroredNodes(u32),
    #[error("a placed layout names each of its fragments' nodes once, each below {nodes}; got {on:?}")]
    Placed { nodes: u32, on: Vec<u32> },
    #[error("the layout places {placed} fragments, the dataset has {fragments}")]
    Fragments { placed: u32, fragments: u32 },
}

impl Layout {
    /// A chained-declustering layout, checked.
    pub fn chained(nodes: u32, replicas: u32) -> Result<Layout, LayoutError> {
        let layout = Layout::Chained { nodes, replicas };
        layout.validate()?;
        Ok(layout)
    }

    /// A mirrored-groups layout, checked.
    pub fn mirrored(nodes: u32) -> Result<Layout, LayoutError> {
        let layout = Layout::Mirrored { nodes };
        layout.validate()?;
        Ok(layout)
    }

    /// One copy of fragment i on node `on[i]`, checked.
    pub fn placed(nodes: u32, on: Vec<u32>) -> Result<Layout, LayoutError> {
        let layout = Layout::Placed { nodes, on };
        layout.validate()?;
        Ok(layout)
    }

    pub fn validate(&self) -> Result<(), LayoutError> {
        match *self {
            Layout::Placed { nodes, ref on } => {
                let mut seen = on.clone();
                seen.sort_unstable();
                seen.dedup();
                if nodes == 0 {
                    return Err(LayoutError::NoNodes);
                }
                if on.is_empty() || seen.len() != on.len() || on.iter().any(|&n| n >= nodes) {
                    return Err(LayoutError::Placed { nodes, on: on.clone() });
                }
                Ok(())
            }
            Layout::Mirrored { nodes } => {
                if nodes < 2 || nodes % 2 != 0 {
                    return Err(LayoutError::MirroredNodes(nodes));
                }
                Ok(())
            }
            Layout::Chained { nodes, replicas } => {
                if nodes == 0 {
                    return Err(LayoutError::NoNodes);
                }
                if replicas == 0 || replicas > REPLICAS_MAX {
                    return Err(LayoutError::Replicas(replicas));
                }
                if replicas > nodes {
                    return Err(LayoutError::TooFewNodes { replicas, nodes });
                }
                Ok(())
            }
        }
    }

    /// Whether a dataset of `fragments` fragments can have this layout: a valid one, and a
    /// placed layout names every fragment's node (the rules fit any count).
    pub fn fits(&self, fragments: u32) -> Result<(), LayoutError> {
        self.validate()?;
        match self {
            Layout::Placed { on, .. } if on.len() != fragments as usize => {
                Err(LayoutError::Fragments { placed: on.len() as u32, fragments })
            }
            _ => Ok(()),
        }
    }

    pub fn nodes(&self) -> u32 {
        match *self {
            Layout::Chained { nodes, .. } | Layout::Mirrored { nodes } | Layout::Placed { nodes, .. } => nodes,
        }
    }

    pub fn replicas(&self) -> u32 {
        match *self {
            Layout::Chained { replicas, .. } => replicas,
            Layout::Mirrored { .. } => 2,
            Layout::Placed { .. } => 1,
        }
    }

    /// The fragments' placement repeats with this period (a placed layout's does not).
    pub fn period(&self) -> u32 {
        match *self {
            Layout::Chained { nodes, .. } => nodes,
            Layout::Mirrored { nodes } => nodes / 2,
            Layout::Placed { ref on, .. } => on.len() as u32,
        }
    }

    /// A short description for people.
    pub fn describe(&self) -> String {
        match *self {
            Layout::Chained { nodes, replicas } => format!("chained declustering, {replicas} copies on {nodes} nodes"),
            Layout::Mirrored { nodes } => {
                let half = nodes / 2;
                format!("mirrored groups, 2 copies: two groups of {half} node{}", if half == 1 { "" } else { "s" })
            }
            Layout::Placed { nodes, ref on } => {
                let missing = nodes as usize - on.len();
                format!("one copy on {} of {nodes} nodes (written without {missing})", on.len())
            }
        }
    }

    /// The node holding copy `copy` of `fragment`.
    pub fn node_of(&self, fragment: FragmentId, copy: u32) -> NodeId {
        match *self {
            Layout::Chained { nodes, replicas } => {
                assert!(copy < replicas, "copy {copy} of a {replicas}-copy layout");
                NodeId(((fragment.0 as u64 + copy as u64) % nodes as u64) as u32)
            }
            Layout::Mirrored { nodes } => {
                assert!(copy < 2, "copy {copy} of mirrored groups");
                let half = nodes / 2;
                NodeId(fragment.0 % half + copy * half)
            }
            Layout::Placed { ref on, .. } => {
                assert!(copy == 0, "copy {copy} of a placed layout");
                NodeId(on[fragment.index()])
            }
        }
    }

    /// The nodes holding `fragment`, primary copy first.
    pub fn holders(&self, fragment: FragmentId) -> Vec<NodeId> {
        (0..self.replicas()).map(|c| self.node_of(fragment, c)).collect()
    }

    /// Which copy of `fragment` lives on `node`, if any.
    pub fn copy_on(&self, fragment: FragmentId, node: NodeId) -> Option<u32> {
        (0..self.replicas()).find(|&c| self.node_of(fragment, c) == node)
    }

    /// The (fragment, copy) pairs a node stores, for a dataset of `fragments` fragments, in
    /// fragment order. Computed from the placement rule, in time proportional to the answer
    /// (the simulator asks this of thousands of nodes).
    pub fn copies_on(&self, node: NodeId, fragments: u32) -> Vec<(FragmentId, u32)> {
        let mut out = vec![];
        match *self {
            Layout::Chained { nodes, replicas } => {
                // Copy j of fragment f is on (f + j) mod N: f = node - j (mod N), + k N.
                for j in 0..replicas {
                    let first = (node.0 as u64 + nodes as u64 - j as u64 % nodes as u64) % nodes as u64;
                    out.extend((first..fragments as u64).step_by(nodes as usize).map(|f| (FragmentId(f as u32), j)));
                }
            }
            Layout::Mirrored { nodes } => {
                let half = nodes / 2;
                let copy = node.0 / half;
                out.extend((node.0 % half..fragments).step_by(half as usize).map(|f| (FragmentId(f), copy)));
            }
            Layout::Placed { ref on, .. } => {
                out.extend(
                    on.iter()
                        .position(|&n| n == node.0)
                        .filter(|&f| f < fragments as usize)
                        .map(|f| (FragmentId(f as u32), 0)),
                );
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_on_agrees_with_the_placement_rule() {
        for layout in [
            Layout::chained(1, 1).unwrap(),
            Layout::chained(5, 1).unwrap(),
            Layout::chained(5, 2).unwrap(),
            Layout::chained(7, 3).unwrap(),
            Layout::chained(4, 4).unwrap(),
            Layout::mirrored(2).unwrap(),
            Layout::mirrored(8).unwrap(),
            Layout::placed(5, vec![0, 2, 3]).unwrap(),
        ] {
            for fragments in [0, 1, 3, 7, 16, 23] {
                if layout.fits(fragments).is_err() {
                    continue;
                }
                for n in 0..layout.nodes() {
                    let node = NodeId(n);
                    let brute: Vec<(FragmentId, u32)> = (0..fragments)
                        .map(FragmentId)
                        .filter_map(|f| layout.copy_on(f, node).map(|c| (f, c)))
                        .collect();
                    assert_eq!(layout.copies_on(node, fragments), brute, "{layout:?}, {fragments} fragments, {node}");
                }
            }
        }
    }

    #[test]
    fn chained_declustering_places_copy_j_on_node_i_plus_j() {
        let l = Layout::chained(4, 2).unwrap();
        assert_eq!(l.holders(FragmentId(0)), vec![NodeId(0), NodeId(1)]);
        assert_eq!(l.holders(FragmentId(3)), vec![NodeId(3), NodeId(0)]);
        // Each node stores its own primary and its left neighbour's backup.
        assert_eq!(l.copies_on(NodeId(0), 4), vec![(FragmentId(0), 0), (FragmentId(3), 1)]);
    }

    #[test]
    fn every_copy_is_stored_exactly_once_for_every_r() {
        for nodes in 1..=9u32 {
            for replicas in 1..=REPLICAS_MAX.min(nodes) {
                let l = Layout::chained(nodes, replicas).unwrap();
                for fragments in [1, nodes, 2 * nodes + 1] {
                    let mut count = vec![0u32; fragments as usize];
                    for n in 0..nodes {
                        for (f, _) in l.copies_on(NodeId(n), fragments) {
                            count[f.index()] += 1;
                        }
                    }
                    assert!(count.iter().all(|&c| c == replicas), "{nodes} {replicas}");
                    for f in 0..fragments {
                        let h = l.holders(FragmentId(f));
                        let mut d = h.clone();
                        d.dedup();
                        assert_eq!(d.len(), h.len(), "copies of a fragment on distinct nodes");
                    }
                }
            }
        }
    }

    #[test]
    fn mirrored_groups_put_the_second_copy_in_the_other_group() {
        let l = Layout::mirrored(8).unwrap();
        assert_eq!(l.holders(FragmentId(0)), vec![NodeId(0), NodeId(4)]);
        assert_eq!(l.holders(FragmentId(5)), vec![NodeId(1), NodeId(5)]);
        assert_eq!(l.copies_on(NodeId(6), 4), vec![(FragmentId(2), 1)]);
        assert_eq!(Layout::mirrored(3), Err(LayoutError::MirroredNodes(3)));
        assert_eq!(Layout::mirrored(0), Err(LayoutError::MirroredNodes(0)));
        assert_eq!(l.replicas(), 2);
    }

    #[test]
    fn a_placed_layout_names_each_fragments_node() {
        let l = Layout::placed(4, vec![0, 1, 3]).unwrap();
        assert_eq!(l.holders(FragmentId(2)), vec![NodeId(3)]);
        assert_eq!(l.copies_on(NodeId(2), 3), vec![]);
        assert_eq!(l.copies_on(NodeId(3), 3), vec![(FragmentId(2), 0)]);
        assert_eq!((l.replicas(), l.nodes(), l.period()), (1, 4, 3));
        assert!(l.fits(3).is_ok());
        assert_eq!(l.fits(4), Err(LayoutError::Fragments { placed: 3, fragments: 4 }));
        for on in [vec![], vec![1, 1], vec![0, 4]] {
            assert_eq!(Layout::placed(4, on.clone()), Err(LayoutError::Placed { nodes: 4, on }));
        }
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(json, r#"{"kind":"placed","nodes":4,"on":[0,1,3]}"#);
        assert_eq!(serde_json::from_str::<Layout>(&json).unwrap(), l);
    }

    #[test]
    fn invalid_layouts_are_refused() {
        assert_eq!(Layout::chained(0, 1), Err(LayoutError::NoNodes));
        assert_eq!(Layout::chained(4, 5), Err(LayoutError::Replicas(5)));
        assert_eq!(Layout::chained(2, 3), Err(LayoutError::TooFewNodes { replicas: 3, nodes: 2 }));
        assert_eq!(Layout::chained(4, 0), Err(LayoutError::Replicas(0)));
    }
}
