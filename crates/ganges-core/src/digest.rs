//! The dataset digest: proof that a scan delivered every byte exactly once.
//!
//! A digest is the wrapping sum, over the blocks (or pieces) of a dataset, of a hash of
//! (dataset offset, length, CRC32C of the bytes). A sum does not depend on the order pieces
//! arrive in, so an unordered scan can fold pieces as they come with O(1) memory; a missing
//! piece, a duplicated one or a corrupted one changes it. The dataset's own digest is computed
//! from the blocks' stored checksums, so comparing the two checks a whole scan end to end.
//! A reader that requests a block in parts folds them as the block ([`BlockFolder`]), so its
//! digest does not depend on how its policy cut its requests.

use crate::datagen::mix64;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Digest(pub u64);

impl Digest {
    /// Fold in one piece: `len` bytes at `dataset_offset` whose CRC32C is `crc`.
    pub fn add(&mut self, dataset_offset: u64, len: u32, crc: u32) {
        let term = mix64(dataset_offset ^ mix64(((len as u64) << 32) | crc as u64));
        self.0 = self.0.wrapping_add(term);
    }

    /// Fold in a whole other digest (a consumer's share into the scan's).
    pub fn merge(&mut self, other: Digest) {
        self.0 = self.0.wrapping_add(other.0);
    }
}

/// A digest folded by block: the parts of a block read in several requests count as one
/// term for the block once they tile it (their CRCs combined in order), as the dataset's own
/// digest counts it. Parts of a block that never tile it (a partition that cuts the block)
/// count at [`finish`](Self::finish) as their contiguous runs. Holds only blocks with parts
/// outstanding: at most a reader's window of them.
#[derive(Debug, Default)]
pub struct BlockFolder {
    digest: Digest,
    /// By the block's dataset offset: the parts come so far.
    open: HashMap<u64, Parts>,
}

/// Parts of a block: (length, CRC32C) by where each starts in it.
type Parts = BTreeMap<u32, (u32, u32)>;

impl BlockFolder {
    /// Fold in `len` bytes at `start` of the block of `block_len` bytes at dataset offset
    /// `block_offset`, whose CRC32C is `crc`.
    pub fn add(&mut self, block_offset: u64, block_len: u32, start: u32, len: u32, crc: u32) {
        if start == 0 && len == block_len {
            self.digest.add(block_offset, len, crc);
            return;
        }
        let parts = self.open.entry(block_offset).or_default();
        if parts.contains_key(&start) {
            // Delivered twice: a term of its own, so the digest shows it.
            self.digest.add(block_offset + start as u64, len, crc);
            return;
        }
        parts.insert(start, (len, crc));
        let runs = Self::runs(parts);
        if let [(0, len, crc)] = runs[..]
            && len == block_len
        {
            self.open.remove(&block_offset);
            self.digest.add(block_offset, len, crc);
        }
    }

    /// Contiguous runs of `parts` (start, len, CRC), in order.
    fn runs(parts: &Parts) -> Vec<(u32, u32, u32)> {
        let mut runs: Vec<(u32, u32, u32)> = vec![];
        for (&start, &(len, crc)) in parts {
            match runs.last_mut() {
                Some(r) if r.0 + r.1 == start => {
                    *r = (r.0, r.1 + len, crate::crc::combine(r.2, crc, u64::from(len)));
                }
                _ => runs.push((start, len, crc)),
            }
        }
        runs
    }

    /// The digest, with what is left of partly read blocks folded in as runs.
    pub fn finish(&self) -> Digest {
        let mut d = self.digest;
        for (&offset, parts) in &self.open {
            for (start, len, crc) in Self::runs(parts) {
                d.add(offset + start as u64, len, crc);
            }
        }
        d
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_does_not_matter_but_duplicates_and_gaps_do() {
        let pieces = [(0u64, 10u32, 1u32), (10, 10, 2), (20, 5, 3)];
        let mut a = Digest::default();
        for &(o, l, c) in &pieces {
            a.add(o, l, c);
        }
        let mut b = Digest::default();
        for &(o, l, c) in pieces.iter().rev() {
            b.add(o, l, c);
        }
        assert_eq!(a, b);
        let mut dup = b;
        dup.add(10, 10, 2);
        assert_ne!(a, dup);
        let mut gap = Digest::default();
        gap.add(0, 10, 1);
        gap.add(20, 5, 3);
        assert_ne!(a, gap);
        let mut corrupt = Digest::default();
        corrupt.add(0, 10, 1);
        corrupt.add(10, 10, 9);
        corrupt.add(20, 5, 3);
        assert_ne!(a, corrupt);
    }

    #[test]
    fn a_block_read_in_parts_folds_as_the_block() {
        let block: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        let crc = |r: std::ops::Range<usize>| crc32c::crc32c(&block[r]);
        let mut whole = Digest::default();
        whole.add(1 << 30, 10_000, crc(0..10_000));
        // Parts in any order, of any sizes.
        let mut f = BlockFolder::default();
        for r in [4000..10_000, 0..1000, 1000..4000] {
            f.add(1 << 30, 10_000, r.start as u32, r.len() as u32, crc(r.clone()));
        }
        assert!(f.open.is_empty(), "a tiled block is done with");
        assert_eq!(f.finish(), whole);
        // A block cut by the partition: its parts count as the run they make.
        let mut f = BlockFolder::default();
        f.add(1 << 30, 10_000, 2000, 1000, crc(2000..3000));
        f.add(1 << 30, 10_000, 3000, 7000, crc(3000..10_000));
        let mut cut = Digest::default();
        cut.add((1 << 30) + 2000, 8000, crc(2000..10_000));
        assert_eq!(f.finish(), cut);
        // A part missing or twice is not the block.
        let mut f = BlockFolder::default();
        f.add(1 << 30, 10_000, 0, 5000, crc(0..5000));
        let half = f.finish();
        assert_ne!(half, whole);
        f.add(1 << 30, 10_000, 0, 5000, crc(0..5000));
        assert_ne!(f.finish(), half);
    }
}
