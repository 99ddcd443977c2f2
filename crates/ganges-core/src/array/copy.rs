//! The copy of the overlap of two regions, each kept row-major over its own indices: the
//! scatter and gather of a reorganization between layouts (panda §2). Runs along the last
//! dimension are copied whole, so a `BLOCK` overlap costs one `memcpy` per row.

use super::{ArrayError, Region};

/// Copy the elements of `part` (which both regions contain) from `src`, laid out over
/// `src_region`, into `dst`, laid out over `dst_region`. `elem` is the element size.
pub fn copy_overlap(
    elem: u32,
    src_region: &Region,
    src: &[u8],
    dst_region: &Region,
    dst: &mut [u8],
    part: &Region,
) -> Result<(), ArrayError> {
    let elem = elem as u64;
    for (region, len) in [(src_region, src.len()), (dst_region, dst.len())] {
        let want = region.elements() * elem;
        if want != len as u64 {
            return Err(ArrayError::BufferSize { want, got: len as u64 });
        }
    }
    if part.is_empty() {
        return Ok(());
    }
    let strides = |r: &Region| -> Vec<u64> {
        let mut s = vec![elem; r.dims.len()];
        for d in (0..r.dims.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * r.extent(d + 1);
        }
        s
    };
    let walk =
        Walk { part, src_region, dst_region, src_strides: strides(src_region), dst_strides: strides(dst_region), elem };
    walk.dim(0, 0, 0, src, dst);
    Ok(())
}

/// The elements of `part` taken out of `src` (laid out over `src_region`), row-major over
/// `part`: the piece of a chunk that one subchunk needs.
pub fn gather(elem: u32, src_region: &Region, src: &[u8], part: &Region) -> Result<Vec<u8>, ArrayError> {
    let mut out = vec![0; (part.elements() * elem as u64) as usize];
    copy_overlap(elem, src_region, src, part, &mut out, part)?;
    Ok(out)
}

struct Walk<'a> {
    part: &'a Region,
    src_region: &'a Region,
    dst_region: &'a Region,
    src_strides: Vec<u64>,
    dst_strides: Vec<u64>,
    elem: u64,
}

impl Walk<'_> {
    fn dim(&self, d: usize, src_off: u64, dst_off: u64, src: &[u8], dst: &mut [u8]) {
        let last = d + 1 == self.part.dims.len();
        for r in &self.part.dims[d] {
            let (s0, d0) = (self.src_region.local(d, r.start), self.dst_region.local(d, r.start));
            if last {
                let (s, t) = ((src_off + s0 * self.elem) as usize, (dst_off + d0 * self.elem) as usize);
                let n = ((r.end - r.start) * self.elem) as usize;
                dst[t..t + n].copy_from_slice(&src[s..s + n]);
                continue;
            }
            for i in 0..r.end - r.start {
                let s = src_off + (s0 + i) * self.src_strides[d];
                let t = dst_off + (d0 + i) * self.dst_strides[d];
                self.dim(d + 1, s, t, src, dst);
            }
        }
    }
}

/// Where `part` lies in `src_region`'s bytes, when it is one contiguous run of them (a block
/// of whole rows, say): then a piece is a slice of the chunk, and nothing need be copied.
pub fn contiguous(elem: u32, src_region: &Region, part: &Region) -> Option<std::ops::Range<usize>> {
    if part.is_empty() || part.dims.iter().any(|d| d.len() != 1) {
        return None;
    }
    let rank = part.dims.len();
    // The first dimension where the part is more than one index wide; after it, every
    // dimension must be whole.
    let k = (0..rank).find(|&d| part.extent(d) > 1).unwrap_or(rank - 1);
    if (k + 1..rank).any(|d| part.extent(d) != src_region.extent(d)) {
        return None;
    }
    let mut start = 0u64;
    for d in 0..rank {
        start = start * src_region.extent(d) + src_region.local(d, part.dims[d][0].start);
    }
    let (start, len) = (start * u64::from(elem), part.elements() * u64::from(elem));
    Some(start as usize..(start + len) as usize)
}
