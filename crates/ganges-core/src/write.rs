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
use crate::route::ReadPolicyKind;
use serde::{Deserialize, Serialize};
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
}

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

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_choices() {
        for k in WritePolicyKind::ALL {
            assert_eq!(k.to_string().parse::<WritePolicyKind>(), Ok(k));
        }
        let e = "fastest".parse::<WritePolicyKind>().unwrap_err();
        assert!(e.to_string().contains("static, gd, dq, ceft or ceft-adaptive"), "{e}");
    }
}
