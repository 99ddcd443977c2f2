//! Where each block of a dataset written with a choice of copy landed (GW-1, GW-2).
//!
//! A GD write (gd-enhancements §3.1) puts each block of a writer's fragment on the primary
//! or a backup copy, whichever the policy chooses, at the block's final offset in that copy.
//! Until the servers have exchanged the missing blocks (replica completion, virtual-streams
//! §3.5), each copy is incomplete, and a reader must know which copy holds which block: that
//! is the [`Placement`], recorded in the dataset's manifest. For every block it keeps a mask
//! of the copies holding it (bit `c` for copy `c`), so a copy's *presence map* is the set of
//! blocks whose mask has its bit.
//!
//! A DQ write has no copies to choose from but loses the writers' order; its [`Origin`] map
//! says where each block came from.
//!
//! On the wire and in manifests the masks of a fragment are one hex digit per block (the
//! masks fit in four bits: at most four copies), so a million-block dataset costs a megabyte
//! of manifest, not a JSON array.

use crate::ids::FragmentId;
use crate::layout::REPLICAS_MAX;
use crate::shape::Shape;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PlacementSpec", into = "PlacementSpec")]
pub struct Placement {
    replicas: u32,
    /// Per fragment, per block: the copies holding it.
    masks: Vec<Vec<u8>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct PlacementSpec {
    replicas: u32,
    /// Per fragment, one hex digit per block.
    fragments: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("a placement needs 1 to {REPLICAS_MAX} copies, got {0}")]
    Replicas(u32),
    #[error(
        "fragment {fragment} has a bad presence digit {digit:?}: masks are hex digits naming copies below {replicas}"
    )]
    Digit { fragment: u32, digit: char, replicas: u32 },
    #[error("the placement describes {got} fragments, the dataset has {want}")]
    Fragments { got: usize, want: u32 },
    #[error("{fragment} has {got} blocks in the placement, the dataset has {want}")]
    Blocks { fragment: FragmentId, got: usize, want: u32 },
    #[error("{fragment} block {block} is held by no copy")]
    Lost { fragment: FragmentId, block: u32 },
}

impl TryFrom<PlacementSpec> for Placement {
    type Error = PlacementError;
    fn try_from(s: PlacementSpec) -> Result<Placement, PlacementError> {
        if s.replicas == 0 || s.replicas > REPLICAS_MAX {
            return Err(PlacementError::Replicas(s.replicas));
        }
        let all = (1u8 << s.replicas) - 1;
        let masks = s
            .fragments
            .iter()
            .enumerate()
            .map(|(f, text)| {
                text.chars()
                    .map(|c| match c.to_digit(16) {
                        Some(m) if m as u8 & !all == 0 => Ok(m as u8),
                        _ => Err(PlacementError::Digit { fragment: f as u32, digit: c, replicas: s.replicas }),
                    })
                    .collect()
            })
            .collect::<Result<_, _>>()?;
        Ok(Placement { replicas: s.replicas, masks })
    }
}

impl From<Placement> for PlacementSpec {
    fn from(p: Placement) -> PlacementSpec {
        let digit = |m: &u8| char::from_digit(*m as u32, 16).expect("masks are below 16");
        PlacementSpec {
            replicas: p.replicas,
            fragments: p.masks.iter().map(|f| f.iter().map(digit).collect()).collect(),
        }
    }
}

impl Placement {
    /// Nothing placed yet, for a dataset of `shape` with `replicas` copies.
    pub fn empty(shape: &Shape, replicas: u32) -> Placement {
        assert!((1..=REPLICAS_MAX).contains(&replicas), "replicas out of range");
        let masks = (0..shape.fragment_count()).map(|f| vec![0; shape.blocks_in(FragmentId(f)) as usize]).collect();
        Placement { replicas, masks }
    }

    /// Nothing placed yet, for the same dataset as `other`.
    pub fn empty_like(other: &Placement) -> Placement {
        let masks = other.masks.iter().map(|f| vec![0; f.len()]).collect();
        Placement { replicas: other.replicas, masks }
    }

    pub fn fragments(&self) -> u32 {
        self.masks.len() as u32
    }

    pub fn blocks_in(&self, fragment: FragmentId) -> u32 {
        self.masks[fragment.index()].len() as u32
    }

    /// Copy `copy` of `fragment` holds `block`.
    pub fn add(&mut self, fragment: FragmentId, block: u32, copy: u32) {
        assert!(copy < self.replicas, "copy {copy} of a {}-copy placement", self.replicas);
        self.masks[fragment.index()][block as usize] |= 1 << copy;
    }

    /// The copies holding `block` of `fragment`, lowest first.
    pub fn copies(&self, fragment: FragmentId, block: u32) -> impl Iterator<Item = u32> + '_ {
        let m = self.masks[fragment.index()][block as usize];
        (0..self.replicas).filter(move |c| m & (1 << c) != 0)
    }

    pub fn has(&self, fragment: FragmentId, block: u32, copy: u32) -> bool {
        self.masks.get(fragment.index()).and_then(|f| f.get(block as usize)).is_some_and(|m| m & (1 << copy) != 0)
    }

    /// Blocks of `fragment` on no copy at all (a degraded write: they were only on servers
    /// that went down).
    pub fn unplaced(&self, fragment: FragmentId) -> Vec<u32> {
        (0..self.masks[fragment.index()].len() as u32)
            .filter(|&b| self.masks[fragment.index()][b as usize] == 0)
            .collect()
    }

    /// Blocks copy `copy` of `fragment` lacks: what replica completion must bring it.
    pub fn missing(&self, fragment: FragmentId, copy: u32) -> Vec<u32> {
        let bit = 1 << copy;
        (0..self.masks[fragment.index()].len() as u32)
            .filter(|&b| self.masks[fragment.index()][b as usize] & bit == 0)
            .collect()
    }

    /// What replica completion brings copy `copy` of `fragment`: each block it lacks, with
    /// the copy to read it from (the lowest that holds it).
    pub fn fills(&self, fragment: FragmentId, copy: u32) -> Vec<(u32, u32)> {
        self.missing(fragment, copy)
            .into_iter()
            .filter_map(|b| self.copies(fragment, b).next().map(|source| (b, source)))
            .collect()
    }

    /// Blocks copy `copy` of `fragment` holds.
    pub fn present(&self, fragment: FragmentId, copy: u32) -> u32 {
        self.masks[fragment.index()].iter().filter(|m| *m & (1 << copy) != 0).count() as u32
    }

    /// Whether every copy holds every block.
    pub fn is_complete(&self) -> bool {
        let all = (1u8 << self.replicas) - 1;
        self.masks.iter().flatten().all(|m| *m == all)
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Check the placement fits `shape` and that every block is held somewhere.
    pub fn validate(&self, shape: &Shape) -> Result<(), PlacementError> {
        if self.masks.len() != shape.fragment_count() as usize {
            return Err(PlacementError::Fragments { got: self.masks.len(), want: shape.fragment_count() });
        }
        for (f, blocks) in self.masks.iter().enumerate() {
            let fragment = FragmentId(f as u32);
            let want = shape.blocks_in(fragment);
            if blocks.len() != want as usize {
                return Err(PlacementError::Blocks { fragment, got: blocks.len(), want });
            }
            if let Some(b) = blocks.iter().position(|m| *m == 0) {
                return Err(PlacementError::Lost { fragment, block: b as u32 });
            }
        }
        Ok(())
    }
}

/// Where each block of a DQ-written dataset came from (DQ-1). A DQ write keeps every block
/// exactly once, in the servers' logs in the order their disks took them; `Origin` records,
/// for each fragment (a server's log) and each of its blocks, the block's index in the data
/// as it was written (block k started at k × block size), so the data can be exported in the
/// writers' order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub blocks: Vec<Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("the origin map describes {got} fragments, the dataset has {want}")]
    Fragments { got: usize, want: u32 },
    #[error("{fragment} has {got} blocks in the origin map, the dataset has {want}")]
    Blocks { fragment: FragmentId, got: usize, want: u32 },
    #[error("the origin map names block {0} twice or past the end")]
    Index(u64),
    #[error("the origin map puts a short block at {0}, which is not the end of the data")]
    Short(u64),
}

impl Origin {
    /// Check that the map is a permutation of the dataset's blocks, with the one short block
    /// (if any) last in the written data.
    pub fn validate(&self, shape: &Shape) -> Result<(), OriginError> {
        if self.blocks.len() != shape.fragment_count() as usize {
            return Err(OriginError::Fragments { got: self.blocks.len(), want: shape.fragment_count() });
        }
        let total = shape.total_blocks();
        let mut seen = vec![false; total as usize];
        for (f, blocks) in self.blocks.iter().enumerate() {
            let fragment = FragmentId(f as u32);
            let want = shape.blocks_in(fragment);
            if blocks.len() != want as usize {
                return Err(OriginError::Blocks { fragment, got: blocks.len(), want });
            }
            for (b, &k) in blocks.iter().enumerate() {
                if k >= total || std::mem::replace(&mut seen[k as usize], true) {
                    return Err(OriginError::Index(k));
                }
                if shape.block_len(fragment, b as u32) < shape.block_bytes() && k + 1 != total {
                    return Err(OriginError::Short(k));
                }
            }
        }
        Ok(())
    }

    /// Where the bytes at `dataset_offset` were in the data as written (the map validated).
    pub fn source_offset(&self, shape: &Shape, dataset_offset: u64) -> Option<u64> {
        let (f, within) = shape.locate(dataset_offset)?;
        let bb = shape.block_bytes() as u64;
        let k = *self.blocks.get(f.index())?.get((within / bb) as usize)?;
        Some(k * bb + within % bb)
    }

    /// The other way: for each block of the data as written, in that order, the dataset
    /// offset it is stored at (the map validated). Written bytes at `s` are at
    /// `starts[s / block_bytes] + s % block_bytes`.
    pub fn block_starts(&self, shape: &Shape) -> Vec<u64> {
        let bb = shape.block_bytes() as u64;
        let mut starts = vec![0; shape.total_blocks() as usize];
        for (f, blocks) in self.blocks.iter().enumerate() {
            let at = shape.fragment_start(FragmentId(f as u32));
            for (b, &k) in blocks.iter().enumerate() {
                starts[k as usize] = at + b as u64 * bb;
            }
        }
        starts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape() -> Shape {
        Shape::new(vec![3 * 4096, 4096 + 1], 4096).unwrap()
    }

    #[test]
    fn presence_maps_follow_what_was_added() {
        let mut p = Placement::empty(&shape(), 2);
        assert!(matches!(p.validate(&shape()), Err(PlacementError::Lost { block: 0, .. })));
        p.add(FragmentId(0), 0, 0);
        p.add(FragmentId(0), 1, 1);
        p.add(FragmentId(0), 2, 0);
        p.add(FragmentId(0), 2, 1);
        p.add(FragmentId(1), 0, 1);
        p.add(FragmentId(1), 1, 0);
        p.validate(&shape()).unwrap();
        assert_eq!(p.missing(FragmentId(0), 0), vec![1]);
        assert_eq!(p.missing(FragmentId(0), 1), vec![0]);
        assert_eq!(p.copies(FragmentId(0), 2).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(p.present(FragmentId(1), 1), 1);
        // Completion brings copy 0 block 1 from copy 1, and copy 1 block 0 from copy 0.
        assert_eq!(p.fills(FragmentId(0), 0), vec![(1, 1)]);
        assert_eq!(p.fills(FragmentId(0), 1), vec![(0, 0)]);
        assert!(!p.is_complete());
        for b in [0, 1] {
            p.add(FragmentId(0), b, 0);
            p.add(FragmentId(0), b, 1);
            p.add(FragmentId(1), b, 0);
            p.add(FragmentId(1), b, 1);
        }
        assert!(p.is_complete());
        let wrong = Shape::new(vec![3 * 4096], 4096).unwrap();
        assert!(matches!(p.validate(&wrong), Err(PlacementError::Fragments { got: 2, want: 1 })));
    }

    #[test]
    fn bad_manifests_are_refused_by_name() {
        let bad = r#"{"replicas":2,"fragments":["14"]}"#;
        let e = serde_json::from_str::<Placement>(bad).unwrap_err().to_string();
        assert!(e.contains("bad presence digit '4'"), "{e}");
        let e = serde_json::from_str::<Placement>(r#"{"replicas":5,"fragments":[]}"#).unwrap_err().to_string();
        assert!(e.contains("1 to 4 copies"), "{e}");
    }

    #[test]
    fn an_origin_map_is_a_permutation_and_maps_offsets_back() {
        // Two logs: blocks 2, 0 and the short 3 in one, block 1 in the other.
        let shape = Shape::new(vec![2 * 4096 + 100, 4096], 4096).unwrap();
        let o = Origin { blocks: vec![vec![2, 0, 3], vec![1]] };
        o.validate(&shape).unwrap();
        assert_eq!(o.source_offset(&shape, 0), Some(2 * 4096));
        assert_eq!(o.source_offset(&shape, 4096 + 7), Some(7));
        assert_eq!(o.source_offset(&shape, 2 * 4096 + 99), Some(3 * 4096 + 99));
        assert_eq!(o.source_offset(&shape, 2 * 4096 + 100), Some(4096));
        assert_eq!(o.source_offset(&shape, 3 * 4096 + 100), None);
        let starts = o.block_starts(&shape);
        assert_eq!(starts, vec![4096, 2 * 4096 + 100, 0, 2 * 4096]);
        for s in (0..3 * 4096 + 100).step_by(37) {
            let stored = starts[s as usize / 4096] + s % 4096;
            assert_eq!(o.source_offset(&shape, stored), Some(s), "written byte {s}");
        }
        let twice = Origin { blocks: vec![vec![2, 0, 3], vec![0]] };
        assert_eq!(twice.validate(&shape), Err(OriginError::Index(0)));
        let short_early = Origin { blocks: vec![vec![2, 0, 1], vec![3]] };
        assert_eq!(short_early.validate(&shape), Err(OriginError::Short(1)));
        let few = Origin { blocks: vec![vec![2, 0, 3]] };
        assert!(matches!(few.validate(&shape), Err(OriginError::Fragments { got: 1, want: 2 })));
    }

    proptest! {
        #[test]
        fn the_manifest_form_round_trips(replicas in 1u32..=4, masks in proptest::collection::vec(proptest::collection::vec(0u8..16, 0..40), 0..6)) {
            let all = (1u8 << replicas) - 1;
            let masks: Vec<Vec<u8>> = masks.into_iter().map(|f| f.into_iter().map(|m| m & all).collect()).collect();
            let p = Placement { replicas, masks };
            let text = serde_json::to_string(&p).unwrap();
            prop_assert_eq!(serde_json::from_str::<Placement>(&text).unwrap(), p);
        }
    }
}
