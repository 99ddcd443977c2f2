//! Fixed-size records in batches of bytes.

use bytes::{Bytes, BytesMut};
use std::fmt;

/// The shape of a record: `record_bytes` each, the first `key_bytes` of which are its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLayout {
    pub record_bytes: u32,
    pub key_bytes: u32,
}

impl RecordLayout {
    /// The sort benchmark's: 100-byte records with a 10-byte key.
    pub const SORT_BENCHMARK: RecordLayout = RecordLayout { record_bytes: 100, key_bytes: 10 };

    /// The consumer of `n` whose key range holds `key`: the key's first 8 bytes (as a
    /// big-endian number, zero-padded) scaled to `0..n`. Uniform keys make equal ranges.
    pub fn range_of(&self, key: &[u8], n: usize) -> usize {
        let mut top = [0u8; 8];
        let k = key.len().min(8);
        top[..k].copy_from_slice(&key[..k]);
        ((u64::from_be_bytes(top) as u128 * n as u128) >> 64) as usize
    }

    /// The consumer of `n` a hash partition sends `key` to. A key of 8 bytes or fewer is
    /// mixed as one number (a partition hashes every record: no per-record checksum call).
    pub fn hash_of(&self, key: &[u8], n: usize) -> usize {
        let h = if key.len() <= 8 {
            let mut word = [0u8; 8];
            word[..key.len()].copy_from_slice(key);
            u64::from_le_bytes(word) ^ key.len() as u64
        } else {
            u64::from(crc32c::crc32c(key))
        };
        (ganges_core::datagen::mix64(h) % n as u64) as usize
    }
}

/// Whole records, back to back, as bytes (a slice of what was received or read: no copy).
#[derive(Clone, PartialEq, Eq)]
pub struct Batch {
    data: Bytes,
    layout: RecordLayout,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Batch({} records of {} B)", self.len(), self.layout.record_bytes)
    }
}

/// The records of a batch could not be told apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{bytes} bytes are not whole records of {record_bytes} bytes")]
pub struct NotWholeRecords {
    pub bytes: usize,
    pub record_bytes: u32,
}

impl Batch {
    /// `data` as records of `layout`; an error unless it holds whole records.
    pub fn new(data: Bytes, layout: RecordLayout) -> Result<Batch, NotWholeRecords> {
        if layout.record_bytes == 0 || !data.len().is_multiple_of(layout.record_bytes as usize) {
            return Err(NotWholeRecords { bytes: data.len(), record_bytes: layout.record_bytes });
        }
        Ok(Batch { data, layout })
    }

    pub fn layout(&self) -> RecordLayout {
        self.layout
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.data.len() / self.layout.record_bytes as usize
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn bytes(&self) -> &Bytes {
        &self.data
    }

    pub fn record(&self, i: usize) -> &[u8] {
        let r = self.layout.record_bytes as usize;
        &self.data[i * r..(i + 1) * r]
    }

    pub fn key(&self, i: usize) -> &[u8] {
        &self.record(i)[..self.layout.key_bytes as usize]
    }

    pub fn records(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.data.chunks_exact(self.layout.record_bytes as usize)
    }

    /// Records `from..to`, sharing the bytes.
    pub fn slice(&self, from: usize, to: usize) -> Batch {
        let r = self.layout.record_bytes as usize;
        Batch { data: self.data.slice(from * r..to * r), layout: self.layout }
    }

    /// The same records sorted by key (one copy of the batch, none per record).
    pub fn sorted(&self) -> Batch {
        sorted_records(std::slice::from_ref(self), self.layout)
    }
}

/// The records of `batches` (all of `layout`) in key order, in one new batch. Each record is
/// sorted as its key's first 12 bytes packed into an integer with its place, so the sort
/// compares integers and touches a record only to copy it out once (longer keys fall back
/// to comparing the keys).
pub fn sorted_records(batches: &[Batch], layout: RecordLayout) -> Batch {
    let k = layout.key_bytes as usize;
    let r = layout.record_bytes as usize;
    let total: usize = batches.iter().map(Batch::len).sum();
    let mut out = BytesMut::with_capacity(total * r);
    if k <= 12 && total < u32::MAX as usize && batches.len() < u16::MAX as usize {
        // Key bytes in the top 96 bits (big-endian, so integer order is byte order), then
        // the batch and the record within it.
        let mut order: Vec<(u128, u16)> = Vec::with_capacity(total);
        for (bi, b) in batches.iter().enumerate() {
            for (i, rec) in b.records().enumerate() {
                let mut key = [0u8; 16];
                key[..k].copy_from_slice(&rec[..k]);
                let packed = (u128::from_be_bytes(key) & !0xffff_ffffu128) | i as u128;
                order.push((packed, bi as u16));
            }
        }
        order.sort_unstable();
        for (packed, bi) in order {
            out.extend_from_slice(batches[bi as usize].record((packed & 0xffff_ffff) as usize));
        }
    } else {
        let mut order: Vec<&[u8]> = batches.iter().flat_map(Batch::records).collect();
        order.sort_unstable_by(|a, b| a[..k].cmp(&b[..k]));
        for rec in order {
            out.extend_from_slice(rec);
        }
    }
    Batch { data: out.freeze(), layout }
}

/// Sorted runs (each in key order) merged into key order a batch at a time, each record
/// copied once: a heap of the runs' head keys, packed into integers where the key is 16
/// bytes or shorter (longer keys sort the runs together again first). Runs that already
/// follow one another in key order (one run, or a worker's merged batches) are handed out
/// in slices, without a copy.
#[derive(Debug)]
pub struct Merge {
    layout: RecordLayout,
    runs: Vec<Batch>,
    /// Each run's next record.
    next: Vec<usize>,
    /// Empty when the runs follow one another: they are handed out in turn.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u128, usize)>>,
}

impl Merge {
    pub fn new(runs: Vec<Batch>, layout: RecordLayout) -> Merge {
        let k = layout.key_bytes as usize;
        let mut runs: Vec<Batch> = runs.into_iter().filter(|b| !b.is_empty()).collect();
        let mut chained = runs.windows(2).all(|w| w[0].record(w[0].len() - 1)[..k] <= w[1].record(0)[..k]);
        if !chained && k > 16 {
            (runs, chained) = (vec![sorted_records(&runs, layout)], true);
        }
        let heap = match chained {
            true => Default::default(),
            false => runs.iter().enumerate().map(|(r, b)| std::cmp::Reverse((packed_key(b.record(0), k), r))).collect(),
        };
        Merge { layout, next: vec![0; runs.len()], heap, runs }
    }

    /// The records still to come.
    pub fn remaining(&self) -> usize {
        self.runs.iter().zip(&self.next).map(|(b, &n)| b.len() - n).sum()
    }

    /// The next `records` records in key order (fewer at the end, and where one of runs
    /// that follow one another ends), or `None` once all are out.
    pub fn next_batch(&mut self, records: usize) -> Option<Batch> {
        let n = records.min(self.remaining());
        if n == 0 {
            return None;
        }
        if self.heap.is_empty() {
            let r = (0..self.runs.len()).find(|&r| self.next[r] < self.runs[r].len()).expect("records remain");
            let (from, n) = (self.next[r], n.min(self.runs[r].len() - self.next[r]));
            self.next[r] += n;
            return Some(self.runs[r].slice(from, from + n));
        }
        let k = self.layout.key_bytes as usize;
        let mut out = BytesMut::with_capacity(n * self.layout.record_bytes as usize);
        for _ in 0..n {
            let mut top = self.heap.peek_mut().expect("records remain");
            let r = top.0.1;
            let i = self.next[r];
            out.extend_from_slice(self.runs[r].record(i));
            self.next[r] += 1;
            if i + 1 < self.runs[r].len() {
                // The run's next head replaces it in place: one sift down a record.
                top.0.0 = packed_key(self.runs[r].record(i + 1), k);
            } else {
                std::collections::binary_heap::PeekMut::pop(top);
            }
        }
        Some(Batch { data: out.freeze(), layout: self.layout })
    }
}

/// A key of 16 bytes or fewer as an integer in the same order (big-endian, zero-padded).
fn packed_key(rec: &[u8], k: usize) -> u128 {
    let mut key = [0u8; 16];
    key[..k].copy_from_slice(&rec[..k]);
    u128::from_be_bytes(key)
}

/// What the sort benchmark's checker (valsort) reports of a record stream: how many
/// records, a checksum that does not depend on their order (the sum of each record's
/// CRC32C), whether they came in key order, and keys equal to a neighbour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub checksum: u128,
    /// Records whose key is below the one before.
    pub unordered: u64,
    pub duplicate_keys: u64,
    last_key: Option<[u8; 16]>,
}

impl Summary {
    /// Add a batch's records, after those added so far.
    pub fn add(&mut self, batch: &Batch) {
        let k = (batch.layout.key_bytes as usize).min(16);
        for r in batch.records() {
            self.records += 1;
            self.checksum += u128::from(crc32c::crc32c(r));
            let mut key = [0u8; 16];
            key[..k].copy_from_slice(&r[..k]);
            match self.last_key {
                Some(last) if key < last => self.unordered += 1,
                Some(last) if key == last => self.duplicate_keys += 1,
                _ => {}
            }
            self.last_key = Some(key);
        }
    }

    /// Its counts as numbers (records, checksum's halves, unordered, duplicates), for a
    /// report crossing between workers; [`Summary::from_parts`] makes it again (without the
    /// last key: a summary made again is combined with `then(.., None)`).
    pub fn parts(&self) -> [u64; 5] {
        [self.records, (self.checksum >> 64) as u64, self.checksum as u64, self.unordered, self.duplicate_keys]
    }

    pub fn from_parts(p: [u64; 5]) -> Summary {
        Summary {
            records: p[0],
            checksum: (u128::from(p[1]) << 64) | u128::from(p[2]),
            unordered: p[3],
            duplicate_keys: p[4],
            last_key: None,
        }
    }

    /// The same records whatever their order (count and checksum).
    pub fn same_records(&self, other: &Summary) -> bool {
        (self.records, self.checksum) == (other.records, other.checksum)
    }

    /// `self`, then `next` after it: `next`'s first key is compared with `self`'s last.
    pub fn then(&self, next: &Summary, next_first_key: Option<&[u8]>) -> Summary {
        let mut out = *self;
        out.records += next.records;
        out.checksum += next.checksum;
        out.unordered += next.unordered;
        out.duplicate_keys += next.duplicate_keys;
        if let (Some(last), Some(first)) = (self.last_key, next_first_key) {
            let mut key = [0u8; 16];
            let k = first.len().min(16);
            key[..k].copy_from_slice(&first[..k]);
            if key < last {
                out.unordered += 1;
            }
        }
        if next.last_key.is_some() {
            out.last_key = next.last_key;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ganges_core::datagen::Generator;

    pub(crate) fn records(seed: u64, n: usize) -> Batch {
        let mut buf = vec![0u8; n * 100];
        Generator::Records { seed }.fill(0, &mut buf);
        Batch::new(Bytes::from(buf), RecordLayout::SORT_BENCHMARK).unwrap()
    }

    #[test]
    fn a_batch_is_records_viewed_in_place() {
        let b = records(1, 50);
        assert_eq!(b.len(), 50);
        assert_eq!(b.key(3), &b.bytes()[300..310]);
        let s = b.slice(10, 20);
        assert_eq!(s.len(), 10);
        assert_eq!(s.record(0).as_ptr(), b.record(10).as_ptr(), "a slice shares the bytes");
        assert!(Batch::new(Bytes::from_static(&[0; 150]), RecordLayout::SORT_BENCHMARK).is_err());
    }

    /// Batches of `sizes` records whose keys share their first two bytes, so that ties past
    /// the packed bytes are met.
    fn prefixed(sizes: &[usize], layout: RecordLayout, seed: u64) -> Vec<Batch> {
        let r = layout.record_bytes as usize;
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let mut b = records(seed + i as u64, n).bytes().to_vec();
                for rec in b.chunks_mut(r) {
                    rec[..2].copy_from_slice(&[7, 7]);
                }
                Batch::new(Bytes::from(b), layout).unwrap()
            })
            .collect()
    }

    /// Whether `out` is in key order and holds the records of `input`.
    fn sorted_and_same(input: &[Batch], out: &Batch) -> bool {
        let k = out.layout().key_bytes as usize;
        let (mut want, mut got) = (Summary::default(), Summary::default());
        input.iter().for_each(|b| want.add(b));
        got.add(out);
        out.records().zip(out.records().skip(1)).all(|(a, b)| a[..k] <= b[..k]) && want.same_records(&got)
    }

    proptest::proptest! {
        /// Sorting batches together, packed or by comparing keys, gives the keys in order
        /// and the same records; so does merging the batches sorted one by one.
        #[test]
        fn sorted_and_merged_records_are_in_key_order(
            sizes in proptest::collection::vec(0usize..40, 1..6),
            key_bytes in 1u32..20,
            seed in 0u64..1000,
            step in 1usize..50,
        ) {
            let layout = RecordLayout { record_bytes: 100, key_bytes };
            let batches = prefixed(&sizes, layout, seed);
            proptest::prop_assert!(sorted_and_same(&batches, &sorted_records(&batches, layout)));
            let runs: Vec<Batch> = batches.iter().map(Batch::sorted).collect();
            // Merged in pieces of `step` records: each piece, and all of them, in order.
            let mut merge = Merge::new(runs.clone(), layout);
            let mut pieces = vec![];
            while let Some(b) = merge.next_batch(step) {
                proptest::prop_assert!(b.len() <= step);
                pieces.push(b);
            }
            let k = key_bytes as usize;
            let keys: Vec<&[u8]> = pieces.iter().flat_map(Batch::records).map(|r| &r[..k]).collect();
            proptest::prop_assert!(keys.windows(2).all(|w| w[0] <= w[1]));
            let (mut want, mut got) = (Summary::default(), Summary::default());
            runs.iter().for_each(|b| want.add(b));
            pieces.iter().for_each(|b| got.add(b));
            proptest::prop_assert!(want.same_records(&got), "{want:?} {got:?}");
            // Runs that follow one another (a sorted batch cut in pieces) come as slices of
            // them, in order.
            let all = sorted_records(&batches, layout);
            let cut: Vec<Batch> =
                (0..all.len()).step_by(step).map(|f| all.slice(f, (f + step).min(all.len()))).collect();
            let mut chained = Merge::new(cut, layout);
            let mut at = 0;
            while let Some(b) = chained.next_batch(step + 3) {
                proptest::prop_assert_eq!(b.bytes().as_ptr(), all.bytes()[at * 100..].as_ptr());
                at += b.len();
            }
            proptest::prop_assert_eq!(at, all.len());
        }
    }

    #[test]
    fn sorting_keeps_the_records_and_orders_the_keys() {
        let b = records(2, 500);
        let s = b.sorted();
        let (mut before, mut after) = (Summary::default(), Summary::default());
        before.add(&b);
        after.add(&s);
        assert!(before.same_records(&after));
        assert!(before.unordered > 100 && after.unordered == 0, "{before:?} {after:?}");
    }

    #[test]
    fn summaries_join_across_batches() {
        let s = records(3, 100).sorted();
        let (a, b) = (s.slice(0, 40), s.slice(40, 100));
        let (mut sa, mut sb, mut whole) = (Summary::default(), Summary::default(), Summary::default());
        sa.add(&a);
        sb.add(&b);
        whole.add(&s);
        assert_eq!(sa.then(&sb, Some(b.key(0))), whole);
        assert_eq!(sb.then(&sa, Some(a.key(0))).unordered, 1, "out of order at the seam");
    }

    #[test]
    fn ranges_split_uniform_keys_evenly_and_in_order() {
        let l = RecordLayout::SORT_BENCHMARK;
        let b = records(4, 8000);
        let mut counts = [0usize; 4];
        for k in (0..b.len()).map(|i| b.key(i)) {
            counts[l.range_of(k, 4)] += 1;
        }
        assert!(counts.iter().all(|&c| (1700..2300).contains(&c)), "{counts:?}");
        assert_eq!(l.range_of(&[0; 10], 4), 0);
        assert_eq!(l.range_of(&[0xff; 10], 4), 3);
        assert!(l.range_of(&[0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0], 4) == 1);
    }
}
