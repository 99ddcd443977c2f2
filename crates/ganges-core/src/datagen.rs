//! Deterministic data generators.
//!
//! Every byte is a pure function of (seed, dataset offset), so each server holding a copy of
//! a fragment generates identical bytes locally, any range can be generated on its own, and
//! a test can regenerate what it expects. Two formats:
//! - `Random`: pseudo-random bytes (SplitMix64 over 8-byte words).
//! - `Records`: the sort-benchmark format, 100-byte records with a 10-byte random key and a
//!   90-byte payload naming the record (`  ` + 32 hex digits of its number + filler + CRLF).

use serde::{Deserialize, Serialize};

/// Size of one record of the `Records` format.
pub const RECORD_BYTES: u64 = 100;
/// Size of the key at the start of each record.
pub const KEY_BYTES: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Generator {
    Random { seed: u64 },
    Records { seed: u64 },
}

impl Generator {
    /// The unit fragment sizes must be a multiple of, so no record straddles two fragments.
    pub fn align(&self) -> u64 {
        match self {
            Generator::Random { .. } => 1,
            Generator::Records { .. } => RECORD_BYTES,
        }
    }

    /// Fill `buf` with the bytes at dataset offset `offset`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        match *self {
            Generator::Random { seed } => fill_random(seed, offset, buf),
            Generator::Records { seed } => fill_records(seed, offset, buf),
        }
    }
}

/// SplitMix64's finaliser: a fast, well-mixed 64-bit hash.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn word(seed: u64, index: u64) -> [u8; 8] {
    mix64(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03)).to_le_bytes()
}

fn fill_random(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut at = 0usize;
    // Unaligned head: part of one word.
    let skew = (offset % 8) as usize;
    if skew != 0 {
        let w = word(seed, offset / 8);
        let n = (8 - skew).min(buf.len());
        buf[..n].copy_from_slice(&w[skew..skew + n]);
        at = n;
    }
    let mut index = (offset + at as u64) / 8;
    let mut chunks = buf[at..].chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&word(seed, index));
        index += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let n = rest.len();
        rest.copy_from_slice(&word(seed, index)[..n]);
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Write record number `r` into `rec` (exactly 100 bytes).
pub fn record(seed: u64, r: u64, rec: &mut [u8; RECORD_BYTES as usize]) {
    let k1 = mix64(seed ^ mix64(r));
    let k2 = mix64(k1);
    rec[..8].copy_from_slice(&k1.to_le_bytes());
    rec[8..10].copy_from_slice(&k2.to_le_bytes()[..2]);
    rec[10] = b' ';
    rec[11] = b' ';
    let n = r as u128;
    for i in 0..32 {
        rec[12 + i] = HEX[((n >> (4 * (31 - i))) & 0xF) as usize];
    }
    let filler = HEX[(k2 >> 60) as usize];
    for (i, b) in rec[44..98].iter_mut().enumerate() {
        *b = if i % 8 == 7 { b' ' } else { filler };
    }
    rec[98] = b'\r';
    rec[99] = b'\n';
}

fn fill_records(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut rec = [0u8; RECORD_BYTES as usize];
    let mut at = 0usize;
    while at < buf.len() {
        let pos = offset + at as u64;
        let r = pos / RECORD_BYTES;
        let within = (pos % RECORD_BYTES) as usize;
        let n = (RECORD_BYTES as usize - within).min(buf.len() - at);
        if within == 0 && n == RECORD_BYTES as usize {
            let dst: &mut [u8; RECORD_BYTES as usize] = (&mut buf[at..at + n]).try_into().expect("n is one record");
            record(seed, r, dst);
        } else {
            record(seed, r, &mut rec);
            buf[at..at + n].copy_from_slice(&rec[within..within + n]);
        }
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any range, generated alone, equals the same range cut from a larger generation.
    #[test]
    fn ranges_are_independent_of_how_they_are_cut() {
        for g in [Generator::Random { seed: 7 }, Generator::Records { seed: 7 }] {
            let mut whole = vec![0u8; 1000];
            g.fill(13, &mut whole);
            for (lo, hi) in [(0, 1), (3, 17), (100, 101), (199, 400), (987, 1000)] {
                let mut part = vec![0u8; hi - lo];
                g.fill(13 + lo as u64, &mut part);
                assert_eq!(part, whole[lo..hi], "{g:?} {lo}..{hi}");
            }
        }
    }

    #[test]
    fn records_have_the_sort_benchmark_shape() {
        let mut buf = vec![0u8; 300];
        Generator::Records { seed: 1 }.fill(0, &mut buf);
        for rec in buf.chunks(100) {
            assert_eq!(&rec[10..12], b"  ");
            assert_eq!(&rec[98..100], b"\r\n");
        }
        assert_eq!(&buf[112..144], b"00000000000000000000000000000001");
        assert_ne!(buf[..10], buf[100..110], "keys differ");
    }

    #[test]
    fn seeds_change_the_data() {
        let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 64]);
        Generator::Random { seed: 1 }.fill(0, &mut a);
        Generator::Random { seed: 2 }.fill(0, &mut b);
        assert_ne!(a, b);
    }
}
