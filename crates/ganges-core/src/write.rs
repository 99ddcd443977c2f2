//! Write policies: where each block a writer puts goes.
//!
//! | name | spec | where a block goes | layout |
//! | --- | --- | --- | --- |
//! | `static` | the baseline | the primary copy of the writer's fragment | chained, R copies |
//! | `gd` | GW-1 | primary or backup copy, progress-balanced like GD reads | chained, R copies |
//! | `dq` | DQ-1, DQ-2 | any server with a credit left, at random ([`crate::dq`]) | one copy (LAY-3), fragment n = server n's log |
//! | `ceft` | CW-1 | the node of the mirror pair CEFT-PVFS's rule picks from the nodes' reported load | R copies |
//! | `ceft-adaptive` | CW-1, ours | the node of the pair that would finish the block first, by measured rates | R copies |
//!
//! A writer is driven by the same engine as a reader ([`crate::route::ReadEngine`]): its
//! pieces are the blocks of its partition, and the policy picks the copy. With a choice of
//! copy the dataset is committed incomplete, with each block's placement recorded
//! ([`crate::placement`]), and replica completion (GW-2) fills the other copies.
//!
//! A DQ write has no fixed home for a block: each server appends what it receives to its
//! own fragment, so the dataset is the servers' logs in node order, one copy each, and a
//! block's place in it is where it landed (the writers learn it from the replies).

use crate::ids::{FragmentId, NodeId};
use crate::layout::Layout;
use crate::placement::Placement;
use crate::route::ReadPolicyKind;
use crate::shape::Shape;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicyKind {
    Static,
    Gd,
    Dq,
    Ceft,
    CeftAdaptive,
}

impl WritePolicyKind {
    pub const ALL: [WritePolicyKind; 5] = [
        WritePolicyKind::Static,
        WritePolicyKind::Gd,
        WritePolicyKind::Dq,
        WritePolicyKind::Ceft,
        WritePolicyKind::CeftAdaptive,
    ];

    /// The routing policy that places a writer's blocks among its fragment's copies, for the
    /// policies that write into a layout (not DQ). GD writes use GD-1's routing: the
    /// primary-preferring read policies write a few points faster with no slow disk and up to
    /// fifteen slower with one; writes want the robust one.
    pub fn route(self) -> Option<ReadPolicyKind> {
        match self {
            WritePolicyKind::Static => Some(ReadPolicyKind::Static),
            WritePolicyKind::Gd => Some(ReadPolicyKind::Gd),
            WritePolicyKind::Dq => None,
            WritePolicyKind::Ceft => Some(ReadPolicyKind::Ceft),
            WritePolicyKind::CeftAdaptive => Some(ReadPolicyKind::CeftAdaptive),
        }
    }

    /// Whether a dataset written this way is laid out in mirrored groups (LAY-2) unless told
    /// otherwise: CW-1's policies choose within CEFT-PVFS's mirror pairs.
    pub fn default_mirrored(self) -> bool {
        matches!(self, WritePolicyKind::Ceft | WritePolicyKind::CeftAdaptive)
    }

    /// Copies a dataset written this way has unless told otherwise.
    pub fn default_replicas(self) -> u32 {
        match self {
            WritePolicyKind::Dq => 1,
            _ => 2,
        }
    }

    /// Blocks in flight per writer unless told otherwise (a dq writer keeps one per server
    /// whatever this says): `WRITE_WINDOW_GD` for gd, `route::WINDOW_DEFAULT` for the others.
    pub fn default_window(self) -> u32 {
        match self {
            WritePolicyKind::Gd => WRITE_WINDOW_GD,
            _ => crate::route::WINDOW_DEFAULT,
        }
    }
}

/// A gd writer's blocks in flight: four per copy at R = 2. Like a GD reader's
/// (`route::WINDOW_GD`), a slow disk's work passes down the chain only while every writer has a
/// block queued at each server; a write request also carries its block there, so it takes
/// longer to cross than a read request. On 8 real servers with one disk at a quarter, GD
/// writes reached 83-85% of the ideal with two per copy, 87-90% with three, 93-100% with
/// four (99% on 4 servers).
pub const WRITE_WINDOW_GD: u32 = 8;

impl FromStr for WritePolicyKind {
    type Err = crate::parse::ParseError;
    fn from_str(s: &str) -> Result<Self, crate::parse::ParseError> {
        WritePolicyKind::ALL
            .into_iter()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| crate::parse::ParseError::unknown("write policy", s, WritePolicyKind::ALL))
    }
}

impl fmt::Display for WritePolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WritePolicyKind::Static => "static",
            WritePolicyKind::Gd => "gd",
            WritePolicyKind::Dq => "dq",
            WritePolicyKind::Ceft => "ceft",
            WritePolicyKind::CeftAdaptive => "ceft-adaptive",
        })
    }
}

/// Where a block goes when every copy it was written to went down with its server (a
/// degraded write): the first copy of its fragment on a server not in `down`, as
/// (copy, node); `None` when all its holders are down.
pub fn rewrite_target(layout: &Layout, fragment: FragmentId, down: &[NodeId]) -> Option<(u32, NodeId)> {
    (0..layout.replicas()).map(|c| (c, layout.node_of(fragment, c))).find(|(_, n)| !down.contains(n))
}

/// A block to write again: its fragment and block, and the copy and server it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite {
    pub fragment: FragmentId,
    pub block: u32,
    pub copy: u32,
    pub node: NodeId,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LandingError {
    #[error("every copy of {fragment} is on a server that went down ({holders})")]
    NoLiveCopy { fragment: FragmentId, holders: String },
    #[error("{fragment} block {block} is held by no live server")]
    Unheld { fragment: FragmentId, block: u32 },
}

/// Where the blocks of a write into a replicated layout (`static`, `gd`, `ceft`) have landed,
/// as servers acknowledge them and die: the rule that keeps such a write going through a
/// server's death. The client's writers feed it every acknowledgement; the simulator's hunts
/// drive the same rule and check it after every event.
///
/// A server that dies takes the blocks it staged with it (a restarted server has dropped its
/// staging), so it stays down for the rest of the write. A block whose every acknowledging
/// server is down is written again to the first copy of its fragment on a live server
/// ([`rewrite_target`]); the write fails only when no copy of the fragment is live. The
/// commit records the live copies that hold each block ([`Landing::placement`]), and the
/// dataset is degraded when any server is down: replica completion restores its copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Landing {
    layout: Layout,
    /// Every copy that acknowledged each block, on live servers or not.
    acked: Placement,
    down: Vec<NodeId>,
    /// Rewrites handed out and not yet acknowledged, by (fragment, block).
    pending: BTreeMap<(FragmentId, u32), Rewrite>,
}

impl Landing {
    pub fn new(layout: &Layout, shape: &Shape) -> Landing {
        Landing {
            layout: layout.clone(),
            acked: Placement::empty(shape, layout.replicas()),
            down: vec![],
            pending: BTreeMap::new(),
        }
    }

    /// `node` says it staged `block` of `fragment` (a writer's block or a rewrite). An
    /// acknowledgement from a server already down is too late to count.
    pub fn on_acked(&mut self, fragment: FragmentId, block: u32, node: NodeId) {
        if self.down.contains(&node) {
            return;
        }
        let Some(copy) = self.layout.copy_on(fragment, node) else {
            debug_assert!(false, "{node} holds no copy of {fragment}");
            return;
        };
        self.acked.add(fragment, block, copy);
        self.pending.remove(&(fragment, block));
    }

    /// `node` went down: what it staged is lost.
    pub fn on_down(&mut self, node: NodeId) {
        if !self.down.contains(&node) {
            self.down.push(node);
            self.down.sort();
        }
    }

    /// A rewrite handed out by [`Landing::rewrites`] failed: hand it out again next time.
    pub fn on_rewrite_failed(&mut self, r: Rewrite) {
        if self.pending.get(&(r.fragment, r.block)) == Some(&r) {
            self.pending.remove(&(r.fragment, r.block));
        }
    }

    /// Whether every rewrite handed out has been acknowledged (or failed).
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }

    /// The servers down so far, in node order.
    pub fn down(&self) -> &[NodeId] {
        &self.down
    }

    fn held_live(&self, fragment: FragmentId, block: u32) -> bool {
        self.acked.copies(fragment, block).any(|c| !self.down.contains(&self.layout.node_of(fragment, c)))
    }

    fn pending_live(&self, fragment: FragmentId, block: u32) -> bool {
        self.pending.get(&(fragment, block)).is_some_and(|r| !self.down.contains(&r.node))
    }

    /// The blocks acknowledged once and now held by no live server, each with the live copy
    /// it goes to, except those already handed out to a live server. Fails when every copy
    /// of such a block's fragment is down: nothing can hold it.
    pub fn rewrites(&mut self) -> Result<Vec<Rewrite>, LandingError> {
        let mut out = vec![];
        for f in (0..self.acked.fragments()).map(FragmentId) {
            for block in 0..self.acked.blocks_in(f) {
                if self.acked.copies(f, block).next().is_none()
                    || self.held_live(f, block)
                    || self.pending_live(f, block)
                {
                    continue;
                }
                let Some((copy, node)) = rewrite_target(&self.layout, f, &self.down) else {
                    let holders = self.layout.holders(f).iter().map(|n| n.to_string()).collect::<Vec<_>>();
                    return Err(LandingError::NoLiveCopy { fragment: f, holders: holders.join(", ") });
                };
                out.push(Rewrite { fragment: f, block, copy, node });
            }
        }
        self.pending.extend(out.iter().map(|r| ((r.fragment, r.block), *r)));
        Ok(out)
    }

    /// What the commit records: each block on the live copies that acknowledged it. Fails
    /// naming a block no live server holds (never written, or lost and not written again).
    pub fn placement(&self) -> Result<Placement, LandingError> {
        let mut p = Placement::empty_like(&self.acked);
        for f in (0..self.acked.fragments()).map(FragmentId) {
            for block in 0..self.acked.blocks_in(f) {
                for c in self.acked.copies(f, block) {
                    if !self.down.contains(&self.layout.node_of(f, c)) {
                        p.add(f, block, c);
                    }
                }
                if p.copies(f, block).next().is_none() {
                    return Err(LandingError::Unheld { fragment: f, block });
                }
            }
        }
        Ok(p)
    }

    /// The rule's invariant, once [`Landing::rewrites`] has been asked after the last
    /// death: every block acknowledged once is held by a live server or is being written
    /// again to one.
    pub fn check(&self) -> Result<(), String> {
        for f in (0..self.acked.fragments()).map(FragmentId) {
            for block in 0..self.acked.blocks_in(f) {
                if self.acked.copies(f, block).next().is_some()
                    && !self.held_live(f, block)
                    && !self.pending_live(f, block)
                {
                    return Err(format!("{f} block {block} was lost with {:?} and is not written again", self.down));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_block_goes_to_the_first_live_copy_or_nowhere() {
        let layout = Layout::chained(4, 3).unwrap();
        // Fragment 2 lives on nodes 2, 3 and 0.
        assert_eq!(rewrite_target(&layout, FragmentId(2), &[]), Some((0, NodeId(2))));
        assert_eq!(rewrite_target(&layout, FragmentId(2), &[NodeId(2)]), Some((1, NodeId(3))));
        assert_eq!(rewrite_target(&layout, FragmentId(2), &[NodeId(2), NodeId(3)]), Some((2, NodeId(0))));
        assert_eq!(rewrite_target(&layout, FragmentId(2), &[NodeId(0), NodeId(2), NodeId(3)]), None);
    }

    fn shape(nodes: u32, blocks: u64) -> Shape {
        Shape::uniform(nodes, blocks * 4096, 4096).unwrap()
    }

    #[test]
    fn a_block_lost_with_its_server_is_written_again_and_the_commit_leaves_the_server_out() {
        let layout = Layout::chained(4, 2).unwrap();
        let mut l = Landing::new(&layout, &shape(4, 2));
        for f in (0..4).map(FragmentId) {
            // Block 0 on the primary, block 1 on the backup.
            l.on_acked(f, 0, layout.node_of(f, 0));
            l.on_acked(f, 1, layout.node_of(f, 1));
        }
        l.on_down(NodeId(1));
        let r = l.rewrites().unwrap();
        // Node 1 held fragment 1's block 0 (primary) and fragment 0's block 1 (backup).
        assert_eq!(
            r,
            vec![
                Rewrite { fragment: FragmentId(0), block: 1, copy: 0, node: NodeId(0) },
                Rewrite { fragment: FragmentId(1), block: 0, copy: 1, node: NodeId(2) },
            ]
        );
        // Handed out once: not again while pending.
        assert_eq!(l.rewrites().unwrap(), vec![]);
        l.check().unwrap();
        assert_eq!(l.placement(), Err(LandingError::Unheld { fragment: FragmentId(0), block: 1 }));
        for w in r {
            l.on_acked(w.fragment, w.block, w.node);
        }
        let p = l.placement().unwrap();
        assert_eq!(p.copies(FragmentId(0), 1).collect::<Vec<_>>(), vec![0]);
        assert_eq!(p.copies(FragmentId(1), 0).collect::<Vec<_>>(), vec![1]);
        // Node 1's copies hold nothing: completion brings them everything.
        assert_eq!(p.present(FragmentId(1), 0), 0);
        assert_eq!(l.down(), &[NodeId(1)]);
        // A late acknowledgement from the dead server does not count.
        l.on_acked(FragmentId(1), 1, NodeId(1));
        assert_eq!(l.placement().unwrap(), p);
    }

    #[test]
    fn a_rewrite_that_fails_or_whose_target_dies_is_handed_out_again_until_no_copy_is_left() {
        let layout = Layout::chained(4, 3).unwrap();
        let mut l = Landing::new(&layout, &shape(4, 1));
        // Fragment 2 lives on nodes 2, 3 and 0.
        l.on_acked(FragmentId(2), 0, NodeId(2));
        l.on_down(NodeId(2));
        let r = l.rewrites().unwrap();
        assert_eq!(r, vec![Rewrite { fragment: FragmentId(2), block: 0, copy: 1, node: NodeId(3) }]);
        l.on_rewrite_failed(r[0]);
        assert_eq!(l.rewrites().unwrap(), r);
        l.on_down(NodeId(3));
        assert!(l.check().is_err(), "the rewrite's target died");
        assert_eq!(
            l.rewrites().unwrap(),
            vec![Rewrite { fragment: FragmentId(2), block: 0, copy: 2, node: NodeId(0) }]
        );
        l.check().unwrap();
        l.on_down(NodeId(0));
        let e = l.rewrites().unwrap_err();
        assert_eq!(e.to_string(), "every copy of fragment2 is on a server that went down (node2, node3, node0)");
    }

    #[test]
    fn random_acknowledgements_and_deaths_keep_every_acknowledged_block_on_a_live_server() {
        use rand::{Rng, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let nodes = rng.random_range(3..=6);
            let replicas = rng.random_range(2..=3);
            let layout = Layout::chained(nodes, replicas).unwrap();
            let shape = shape(nodes, rng.random_range(1..=6));
            let mut l = Landing::new(&layout, &shape);
            let mut handed: Vec<Rewrite> = vec![];
            let mut failed = false;
            for _ in 0..60 {
                match rng.random_range(0..10) {
                    0 => l.on_down(NodeId(rng.random_range(0..nodes))),
                    1 | 2 if !handed.is_empty() => {
                        let r = handed.swap_remove(rng.random_range(0..handed.len()));
                        if rng.random_bool(0.7) {
                            l.on_acked(r.fragment, r.block, r.node);
                        } else {
                            l.on_rewrite_failed(r);
                        }
                    }
                    _ => {
                        let f = FragmentId(rng.random_range(0..nodes));
                        let block = rng.random_range(0..shape.blocks_in(f));
                        l.on_acked(f, block, layout.node_of(f, rng.random_range(0..replicas)));
                    }
                }
                match l.rewrites() {
                    Ok(r) => handed.extend(r),
                    Err(LandingError::NoLiveCopy { fragment, .. }) => {
                        assert!(layout.holders(fragment).iter().all(|n| l.down().contains(n)), "seed {seed}");
                        failed = true;
                        break;
                    }
                    Err(e) => panic!("seed {seed}: {e}"),
                }
                l.check().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            }
            if failed {
                continue;
            }
            for r in handed.drain(..) {
                l.on_acked(r.fragment, r.block, r.node);
            }
            // Every block is placed on live copies only; or the one unheld was never written.
            match l.placement() {
                Ok(p) => {
                    for f in (0..nodes).map(FragmentId) {
                        for block in 0..shape.blocks_in(f) {
                            assert!(p.copies(f, block).all(|c| !l.down().contains(&layout.node_of(f, c))));
                        }
                    }
                }
                Err(LandingError::Unheld { fragment, block }) => {
                    assert!(l.acked.copies(fragment, block).next().is_none(), "seed {seed}: a written block unheld");
                }
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }
    }

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_choices() {
        for k in WritePolicyKind::ALL {
            assert_eq!(k.to_string().parse::<WritePolicyKind>(), Ok(k));
        }
        let e = "fastest".parse::<WritePolicyKind>().unwrap_err();
        assert!(e.to_string().contains("static, gd, dq, ceft or ceft-adaptive"), "{e}");
    }
}
