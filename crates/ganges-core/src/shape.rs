//! The byte space of a dataset: fragments (LAY-4: any sizes), blocks, partitions, pieces.
//!
//! A dataset is a logical byte space cut into fragments in order; fragment i starts where
//! fragment i - 1 ends. Each fragment is cut into blocks of `block_bytes` (the last one may be
//! short); a block is the unit of transfer. Each block is checksummed in units of
//! [`CHECK_BYTES`] (the whole block, if smaller), so a read of part of a block reads and
//! checks only the units it touches. A consumer reads a [`Partition`], an (offset, length) of
//! the dataset, which maps onto [`Piece`]s: the part of one block that falls inside the
//! partition.

use crate::ids::FragmentId;
use serde::{Deserialize, Serialize};

/// Smallest block: below this the per-request cost swamps the transfer (gd-enhancements
/// Figure 1 shows 4 KB transfers failing to amortise request overhead).
pub const BLOCK_BYTES_MIN: u32 = 4 << 10;
/// Largest block: bounds every buffer and frame; larger blocks also hurt GD's ability to
/// balance near the end of a scan (river §6.2).
pub const BLOCK_BYTES_MAX: u32 = 16 << 20;
/// Bytes each stored checksum covers (the block, if it is smaller). A server reads and checks
/// whole units, so a request for part of a block costs the disk about its own length: gd-plan
/// reads 1 MiB blocks in pieces of 256 KiB (`route::PlanSettings::piece_bytes`), and a 4 KiB record
/// costs a 64 KiB read, not a whole block. One CRC32C per 64 KiB is 0.006% of the data.
pub const CHECK_BYTES: u32 = 64 << 10;
/// Most fragments in one dataset: bounds manifests and per-dataset state on servers.
pub const FRAGMENTS_MAX: usize = 1 << 16;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ShapeSpec", into = "ShapeSpec")]
pub struct Shape {
    fragment_bytes: Vec<u64>,
    block_bytes: u32,
    /// `starts[i]` is the dataset offset of fragment i; `starts[n]` is the total size.
    starts: Vec<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ShapeSpec {
    fragment_bytes: Vec<u64>,
    block_bytes: u32,
}

impl TryFrom<ShapeSpec> for Shape {
    type Error = ShapeError;
    fn try_from(s: ShapeSpec) -> Result<Shape, ShapeError> {
        Shape::new(s.fragment_bytes, s.block_bytes)
    }
}

impl From<Shape> for ShapeSpec {
    fn from(s: Shape) -> ShapeSpec {
        ShapeSpec { fragment_bytes: s.fragment_bytes, block_bytes: s.block_bytes }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("block size {0} is out of range: use 4KiB to 16MiB (for example --block-size 1MiB)")]
    BlockSize(u64),
    #[error("a dataset needs between 1 and {FRAGMENTS_MAX} fragments, got {0}")]
    Fragments(usize),
    #[error("fragment {0} is empty; every fragment holds at least one byte")]
    EmptyFragment(u32),
    #[error("a fragment holds at most {max} blocks of this size; use a larger block size")]
    TooManyBlocks { max: u64 },
    #[error(
        "partition [{offset}, {end}) runs past the end of the dataset ({total} bytes)",
        end = offset.saturating_add(*len)
    )]
    PartitionOutOfRange { offset: u64, len: u64, total: u64 },
}

/// An (offset, length) of the dataset read by one consumer (GD-7's logical partition; the
/// default partitioning gives consumer i exactly fragment i).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub offset: u64,
    pub len: u64,
}

/// The part of one block that a partition covers: the unit a consumer requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub fragment: FragmentId,
    pub block: u32,
    /// Where the piece starts inside its block.
    pub start_in_block: u32,
    pub len: u32,
    /// Where the piece starts in the dataset's byte space.
    pub dataset_offset: u64,
}

impl Piece {
    /// Whether the piece is a whole block (writers write whole blocks).
    pub fn is_whole_block(&self, shape: &Shape) -> bool {
        self.start_in_block == 0 && self.len == shape.block_len(self.fragment, self.block)
    }

    /// The piece cut where its block's multiples of `most` bytes fall: pieces of at most
    /// `most` bytes that tile it, in order (the piece itself when it fits).
    pub fn split(self, most: u32) -> impl Iterator<Item = Piece> {
        let most = most.max(1);
        let end = self.start_in_block + self.len;
        let mut at = self.start_in_block;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let to = ((at / most + 1).saturating_mul(most)).min(end);
                let p = Piece {
                    start_in_block: at,
                    len: to - at,
                    dataset_offset: self.dataset_offset + (at - self.start_in_block) as u64,
                    ..self
                };
                at = to;
                p
            })
        })
    }
}

impl Shape {
    pub fn new(fragment_bytes: Vec<u64>, block_bytes: u32) -> Result<Shape, ShapeError> {
        if !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block_bytes) {
            return Err(ShapeError::BlockSize(block_bytes as u64));
        }
        if fragment_bytes.is_empty() || fragment_bytes.len() > FRAGMENTS_MAX {
            return Err(ShapeError::Fragments(fragment_bytes.len()));
        }
        let mut starts = Vec::with_capacity(fragment_bytes.len() + 1);
        let mut at = 0u64;
        for (i, &b) in fragment_bytes.iter().enumerate() {
            if b == 0 {
                return Err(ShapeError::EmptyFragment(i as u32));
            }
            let max = u32::MAX as u64 * block_bytes as u64;
            if b > max {
                return Err(ShapeError::TooManyBlocks { max: u32::MAX as u64 });
            }
            starts.push(at);
            at = at.checked_add(b).ok_or(ShapeError::Fragments(fragment_bytes.len()))?;
        }
        starts.push(at);
        Ok(Shape { fragment_bytes, block_bytes, starts })
    }

    /// `fragments` equal fragments of `fragment_bytes` each.
    pub fn uniform(fragments: u32, fragment_bytes: u64, block_bytes: u32) -> Result<Shape, ShapeError> {
        Shape::new(vec![fragment_bytes; fragments as usize], block_bytes)
    }

    /// `total` bytes cut into `fragments` fragments as equal as possible (the first ones take
    /// the remainder), each a multiple of `align` bytes where possible (100 for records).
    pub fn split(total: u64, fragments: u32, block_bytes: u32, align: u64) -> Result<Shape, ShapeError> {
        let n = fragments.max(1) as u64;
        let units = total / align;
        let tail = total % align;
        let mut sizes: Vec<u64> = (0..n).map(|i| (units / n + u64::from(i < units % n)) * align).collect();
        if let Some(last) = sizes.last_mut() {
            *last += tail;
        }
        Shape::new(sizes, block_bytes)
    }

    pub fn block_bytes(&self) -> u32 {
        self.block_bytes
    }

    pub fn fragment_count(&self) -> u32 {
        self.fragment_bytes.len() as u32
    }

    pub fn fragment_bytes(&self, f: FragmentId) -> u64 {
        self.fragment_bytes[f.index()]
    }

    /// The dataset offset just past fragment `f`.
    pub fn fragment_end(&self, f: FragmentId) -> u64 {
        self.fragment_start(f) + self.fragment_bytes(f)
    }

    pub fn fragment_sizes(&self) -> &[u64] {
        &self.fragment_bytes
    }

    pub fn total_bytes(&self) -> u64 {
        *self.starts.last().expect("starts has n + 1 entries")
    }

    /// The dataset offset where fragment `f` starts.
    pub fn fragment_start(&self, f: FragmentId) -> u64 {
        self.starts[f.index()]
    }

    pub fn blocks_in(&self, f: FragmentId) -> u32 {
        self.fragment_bytes(f).div_ceil(self.block_bytes as u64) as u32
    }

    pub fn total_blocks(&self) -> u64 {
        (0..self.fragment_count()).map(|f| self.blocks_in(FragmentId(f)) as u64).sum()
    }

    /// Offset of block `b` inside its fragment.
    pub fn block_offset(&self, b: u32) -> u64 {
        b as u64 * self.block_bytes as u64
    }

    /// Length of block `b` of fragment `f` (the last block of a fragment may be short).
    pub fn block_len(&self, f: FragmentId, b: u32) -> u32 {
        let start = self.block_offset(b);
        let size = self.fragment_bytes(f);
        assert!(start < size, "block {b} is past the end of {f}");
        (size - start).min(self.block_bytes as u64) as u32
    }

    /// The bytes each stored checksum covers: [`CHECK_BYTES`], or the block if it is smaller.
    pub fn check_bytes(&self) -> u32 {
        self.block_bytes.min(CHECK_BYTES)
    }

    /// Checksums of a whole block; block `b`'s are the `b`th run of this many in its copy's
    /// checksum file (only a fragment's last block may have fewer).
    pub fn checks_per_block(&self) -> u32 {
        self.block_bytes.div_ceil(self.check_bytes())
    }

    /// Checksums of block `b` of fragment `f`.
    pub fn checks_in(&self, f: FragmentId, b: u32) -> u32 {
        self.block_len(f, b).div_ceil(self.check_bytes())
    }

    /// Where block `b`'s checksums are in fragment `f`'s checksum file, in checksums.
    pub fn checks_of(&self, f: FragmentId, b: u32) -> std::ops::Range<usize> {
        let first = b as usize * self.checks_per_block() as usize;
        first..first + self.checks_in(f, b) as usize
    }

    /// Checksums of the first `blocks` blocks of fragment `f`: its checksum file's length, in
    /// checksums, when they are all of it.
    pub fn checks_upto(&self, f: FragmentId, blocks: u32) -> usize {
        blocks.checked_sub(1).map_or(0, |last| self.checks_of(f, last).end)
    }

    /// The fragment holding dataset offset `offset`, and the offset inside it.
    pub fn locate(&self, offset: u64) -> Option<(FragmentId, u64)> {
        if offset >= self.total_bytes() {
            return None;
        }
        // starts is sorted; the fragment is the last start <= offset.
        let i = self.starts.partition_point(|&s| s <= offset) - 1;
        Some((FragmentId(i as u32), offset - self.starts[i]))
    }

    /// One partition per fragment: consumer i reads fragment i (the papers' default).
    pub fn fragment_partitions(&self) -> Vec<Partition> {
        (0..self.fragment_count())
            .map(|f| Partition { offset: self.starts[f as usize], len: self.fragment_bytes[f as usize] })
            .collect()
    }

    /// `n` consecutive partitions of whole `unit`-byte units (records) covering the dataset:
    /// its fragments when there are `n` of whole units, else equal shares (GD-7's logical
    /// partitioning, cut where no unit straddles two consumers).
    pub fn unit_partitions(&self, n: usize, unit: u64) -> Vec<Partition> {
        if n == self.fragment_count() as usize && self.fragment_bytes.iter().all(|b| b.is_multiple_of(unit)) {
            return self.fragment_partitions();
        }
        let units = self.total_bytes() / unit;
        let cut = |i: u64| units * i / n as u64 * unit;
        (0..n as u64).map(|i| Partition { offset: cut(i), len: cut(i + 1) - cut(i) }).collect()
    }

    /// Consecutive partitions of the whole dataset, one per weight, each proportional to its
    /// weight and cut at multiples of the block size: block boundaries when fragments are
    /// whole blocks, so no two consumers read the same block (GD-7 logical partitioning; the
    /// bench's unequal even/odd ratios). Weights must be positive.
    pub fn weighted_partitions(&self, weights: &[f64]) -> Vec<Partition> {
        let block = self.block_bytes() as u64;
        let total = self.total_bytes();
        let sum: f64 = weights.iter().sum();
        let mut bounds = vec![0u64];
        let mut acc = 0.0;
        for w in weights.iter().take(weights.len().saturating_sub(1)) {
            acc += w;
            let cut = ((total as f64 * acc / sum / block as f64).round() as u64 * block).min(total);
            bounds.push(cut.max(*bounds.last().expect("non-empty")));
        }
        bounds.push(total);
        bounds.windows(2).map(|w| Partition { offset: w[0], len: w[1] - w[0] }).collect()
    }

    /// Check that a partition lies inside the dataset.
    pub fn check_partition(&self, p: Partition) -> Result<(), ShapeError> {
        let end = p.offset.checked_add(p.len);
        if end.is_none_or(|e| e > self.total_bytes()) {
            return Err(ShapeError::PartitionOutOfRange { offset: p.offset, len: p.len, total: self.total_bytes() });
        }
        Ok(())
    }

    /// The pieces of a partition, in dataset order.
    pub fn pieces(&self, p: Partition) -> Result<Vec<Piece>, ShapeError> {
        self.check_partition(p)?;
        let mut out = Vec::new();
        let mut at = p.offset;
        let end = p.offset + p.len;
        while at < end {
            let (f, in_frag) = self.locate(at).expect("checked above");
            let block = (in_frag / self.block_bytes as u64) as u32;
            let start_in_block = (in_frag % self.block_bytes as u64) as u32;
            let block_len = self.block_len(f, block);
            let len = ((block_len - start_in_block) as u64).min(end - at) as u32;
            out.push(Piece { fragment: f, block, start_in_block, len, dataset_offset: at });
            at += len as u64;
        }
        Ok(out)
    }

    /// How many bytes of each fragment a partition covers: the demand MOD-2 routes.
    pub fn partition_demand(&self, p: Partition) -> Result<Vec<(FragmentId, u64)>, ShapeError> {
        self.check_partition(p)?;
        let mut out: Vec<(FragmentId, u64)> = Vec::new();
        let end = p.offset + p.len;
        for f in 0..self.fragment_count() {
            let (s, e) = (self.starts[f as usize], self.starts[f as usize + 1]);
            let lo = s.max(p.offset);
            let hi = e.min(end);
            if hi > lo {
                out.push((FragmentId(f), hi - lo));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unit_partitions_are_fragments_or_equal_shares_of_whole_units() {
        let s = Shape::new(vec![300_000, 500_000, 200_000], 1 << 16).unwrap();
        assert_eq!(s.unit_partitions(3, 100), s.fragment_partitions());
        for n in [1, 2, 4, 7] {
            let p = s.unit_partitions(n, 100);
            assert_eq!(p.len(), n);
            assert_eq!(p.iter().map(|p| p.len).sum::<u64>(), 1_000_000);
            assert!(p.windows(2).all(|w| w[0].offset + w[0].len == w[1].offset));
            assert!(p.iter().all(|p| p.offset.is_multiple_of(100) && p.len.is_multiple_of(100)));
            assert!(p.iter().all(|p| p.len.abs_diff(1_000_000 / n as u64) <= 100), "{p:?}");
        }
        // Fragments not of whole units: equal shares of whole units instead.
        let odd = Shape::new(vec![150_050, 249_950], 1 << 16).unwrap();
        assert!(odd.unit_partitions(2, 100).iter().all(|p| p.offset.is_multiple_of(100) && p.len.is_multiple_of(100)));
    }

    #[test]
    fn block_maths_of_an_uneven_fragment() {
        let s = Shape::new(vec![10_000, 4096], 4096).unwrap();
        assert_eq!(s.total_bytes(), 14_096);
        assert_eq!(s.blocks_in(FragmentId(0)), 3);
        assert_eq!(s.block_len(FragmentId(0), 2), 10_000 - 8192);
        assert_eq!(s.blocks_in(FragmentId(1)), 1);
        assert_eq!(s.locate(10_000), Some((FragmentId(1), 0)));
        assert_eq!(s.locate(9_999), Some((FragmentId(0), 9_999)));
        assert_eq!(s.locate(14_096), None);
        assert_eq!(s.total_blocks(), 4);
    }

    proptest! {
        #[test]
        fn split_pieces_tile_the_piece_on_multiples(start in 0u32..(1 << 20), len in 1u32..(1 << 20), most in 1u32..(300 << 10)) {
            let p = Piece { fragment: FragmentId(3), block: 7, start_in_block: start, len, dataset_offset: 1 << 40 };
            let parts: Vec<Piece> = p.split(most).collect();
            prop_assert_eq!(parts.iter().map(|q| q.len as u64).sum::<u64>(), len as u64);
            let mut at = (start, p.dataset_offset);
            for q in &parts {
                prop_assert_eq!((q.fragment, q.block), (p.fragment, p.block));
                prop_assert_eq!((q.start_in_block, q.dataset_offset), at);
                prop_assert!(q.len >= 1 && q.len <= most);
                let end = q.start_in_block + q.len;
                // Every cut but the piece's own end is at a multiple of `most`.
                prop_assert!(end == start + len || end % most == 0);
                at = (end, q.dataset_offset + q.len as u64);
            }
        }
    }

    #[test]
    fn checksums_cover_units_of_a_block() {
        // Small blocks: one checksum each.
        let s = Shape::new(vec![10_000, 4096], 4096).unwrap();
        assert_eq!((s.check_bytes(), s.checks_per_block()), (4096, 1));
        assert_eq!(s.checks_upto(FragmentId(0), 3), 3);
        assert_eq!(s.checks_upto(FragmentId(0), 0), 0);
        // 1 MiB blocks: 16 units; a last block of 100 KiB + 1 byte has 2.
        let s = Shape::new(vec![(2 << 20) + (100 << 10) + 1], 1 << 20).unwrap();
        assert_eq!((s.check_bytes(), s.checks_per_block()), (CHECK_BYTES, 16));
        assert_eq!(s.checks_in(FragmentId(0), 2), 2);
        assert_eq!(s.checks_upto(FragmentId(0), 2), 32);
        assert_eq!(s.checks_upto(FragmentId(0), 3), 34);
        assert_eq!(s.checks_of(FragmentId(0), 2), 32..34);
        // A block that is not a multiple of the unit: the last unit is short.
        let s = Shape::new(vec![96 << 10], 96 << 10).unwrap();
        assert_eq!((s.checks_per_block(), s.checks_in(FragmentId(0), 0)), (2, 2));
    }

    #[test]
    fn block_size_and_fragments_are_bounded() {
        assert_eq!(Shape::new(vec![1], 1024), Err(ShapeError::BlockSize(1024)));
        assert_eq!(Shape::new(vec![1], 32 << 20), Err(ShapeError::BlockSize(32 << 20)));
        assert_eq!(Shape::new(vec![], 4096), Err(ShapeError::Fragments(0)));
        assert_eq!(Shape::new(vec![5, 0], 4096), Err(ShapeError::EmptyFragment(1)));
    }

    #[test]
    fn a_partition_past_the_end_is_refused() {
        let s = Shape::uniform(2, 8192, 4096).unwrap();
        let err = s.pieces(Partition { offset: 8192, len: 8193 }).unwrap_err();
        assert!(matches!(err, ShapeError::PartitionOutOfRange { .. }));
        assert!(s.pieces(Partition { offset: u64::MAX, len: 2 }).is_err());
    }

    #[test]
    fn split_keeps_records_whole() {
        let s = Shape::split(100 * 1003, 4, 4096, 100).unwrap();
        assert_eq!(s.total_bytes(), 100_300);
        assert!(s.fragment_sizes().iter().all(|b| b % 100 == 0));
        let s = Shape::split(1003, 2, 4096, 1).unwrap();
        assert_eq!(s.fragment_sizes(), &[502, 501]);
    }

    #[test]
    fn serde_round_trip_recomputes_offsets() {
        let s = Shape::new(vec![5000, 7000, 1], 4096).unwrap();
        let back: Shape = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(serde_json::from_str::<Shape>(r#"{"fragment_bytes":[1],"block_bytes":3}"#).is_err());
    }

    proptest! {
        /// Weighted partitions tile the dataset, one per weight, cut at multiples of the
        /// block size, each within a block of its weight's share.
        #[test]
        fn weighted_partitions_tile_the_dataset(
            fragments in 1u32..8,
            blocks in 1u64..40,
            weights in prop::collection::vec(0.5f64..3.0, 1..12),
        ) {
            let block = 4096u64;
            let s = Shape::uniform(fragments, blocks * block, block as u32).unwrap();
            let parts = s.weighted_partitions(&weights);
            prop_assert_eq!(parts.len(), weights.len());
            let sum: f64 = weights.iter().sum();
            let mut at = 0;
            for (p, w) in parts.iter().zip(&weights) {
                prop_assert_eq!(p.offset, at);
                prop_assert_eq!(p.offset % block, 0);
                let share = s.total_bytes() as f64 * w / sum;
                prop_assert!((p.len as f64 - share).abs() <= 2.0 * block as f64, "{} for {}", p.len, share);
                at += p.len;
            }
            prop_assert_eq!(at, s.total_bytes());
        }

        /// Pieces tile the partition exactly, in order, never crossing a block boundary.
        #[test]
        fn pieces_tile_any_partition(
            sizes in prop::collection::vec(1u64..50_000, 1..6),
            block_kib in 4u32..20,
            a in 0.0f64..1.0,
            b in 0.0f64..1.0,
        ) {
            let s = Shape::new(sizes, block_kib * 1024).unwrap();
            let total = s.total_bytes();
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            let offset = (lo * total as f64) as u64;
            let len = ((hi * total as f64) as u64).saturating_sub(offset);
            let p = Partition { offset, len };
            let pieces = s.pieces(p).unwrap();
            let mut at = offset;
            for piece in &pieces {
                prop_assert_eq!(piece.dataset_offset, at);
                prop_assert!(piece.len > 0);
                prop_assert!(piece.start_in_block + piece.len <= s.block_len(piece.fragment, piece.block));
                let back = s.fragment_start(piece.fragment)
                    + s.block_offset(piece.block) + piece.start_in_block as u64;
                prop_assert_eq!(back, at);
                at += piece.len as u64;
            }
            prop_assert_eq!(at, offset + len);
            let demand: u64 = s.partition_demand(p).unwrap().iter().map(|d| d.1).sum();
            prop_assert_eq!(demand, len);
        }
    }
}
