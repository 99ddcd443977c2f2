//! The dataset digest: proof that a scan delivered every byte exactly once.
//!
//! A digest is the wrapping sum, over the blocks (or pieces) of a dataset, of a hash of
//! (dataset offset, length, CRC32C of the bytes). A sum does not depend on the order pieces
//! arrive in, so an unordered scan can fold pieces as they come with O(1) memory; a missing
//! piece, a duplicated one or a corrupted one changes it. The dataset's own digest is computed
//! from the stored per-block checksums, so comparing the two checks a whole scan end to end.

use crate::datagen::mix64;
use serde::{Deserialize, Serialize};

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
}
