//! CRC32C of concatenated data from the parts' CRCs, in constant time.
//!
//! Checksums are stored per 64 KiB of a block (`shape::CHECK_BYTES`), and a reader that asks
//! for a block in pieces folds their CRCs into the block's (`digest::BlockFolder`), so the
//! servers and the clients combine CRCs for every block they move. The `crc32c` crate's
//! `crc32c_combine` squares 32×32 bit matrices once per bit of the length, about 40 µs for a
//! 64 KiB part; at 16 parts a MiB that doubled gd-plan's CPU per GB on the cluster. This is
//! the method of zlib 1.2.12 onwards: multiply `crc1` by x^(8·len2) modulo the polynomial,
//! using a table of x^(2^k): at most one 32-step product per bit set in the length.

/// The CRC32C polynomial, bit-reflected.
const POLY: u32 = 0x82F6_3B78;

/// a·b modulo the polynomial, both reflected (x^0 is the top bit).
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `X2N[k]` = x^(2^k) modulo the polynomial.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    t[0] = p;
    let mut k = 1;
    while k < 32 {
        p = mul_mod(p, p);
        t[k] = p;
        k += 1;
    }
    t
};

/// x^(n·2^k) modulo the polynomial.
fn x2n_mod(mut n: u64, mut k: usize) -> u32 {
    let mut p = 1u32 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = mul_mod(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC32C of A followed by B, from `crc1` = CRC32C(A), `crc2` = CRC32C(B) and B's length.
pub fn combine(crc1: u32, crc2: u32, len2: u64) -> u32 {
    mul_mod(x2n_mod(len2, 3), crc1) ^ crc2
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn combines_as_the_crate_does_and_as_the_whole() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for cut in [0, 1, 7, 4096, 65_536, 100_001, 200_000] {
            let (a, b) = data.split_at(cut);
            let (ca, cb) = (crc32c::crc32c(a), crc32c::crc32c(b));
            assert_eq!(combine(ca, cb, b.len() as u64), crc32c::crc32c(&data), "cut at {cut}");
            assert_eq!(combine(ca, cb, b.len() as u64), crc32c::crc32c_combine(ca, cb, b.len()));
        }
    }

    proptest! {
        #[test]
        fn any_two_parts(a in proptest::collection::vec(any::<u8>(), 0..3000), b in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
            prop_assert_eq!(combine(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len() as u64), crc32c::crc32c(&whole));
        }
    }
}
