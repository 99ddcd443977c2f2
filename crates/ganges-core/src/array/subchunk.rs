//! AR-2, automatic subchunking (panda §3.1, `FIND_submesh`): the disk layout the user asked for
//! cuts the array into chunks, typically far too large to balance (an eighth of the array);
//! each chunk is cut again, by halving, until a subchunk is at most a threshold (1 MiB by
//! default, the size the paper found gives the file system its peak).

use super::{ArrayError, ArrayLayout, Dist, Region, Schema};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// The largest subchunk: a piece of one travels in one frame, and a server holds a few in
/// memory while it gathers them.
pub const SUBCHUNK_MAX: u64 = 16 << 20;
/// The most subchunks an array may have: each has a place in the manifest.
pub const SUBCHUNKS_MAX: usize = 1 << 16;

/// How a chunk is cut into subchunks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubchunkStyle {
    /// The chunk's own distribution again: halve along each distributed dimension in turn.
    #[default]
    SameDist,
    /// `(BLOCK, *, …, *)`: halve along the first dimension only, so the subchunks of a chunk
    /// concatenate to the chunk.
    FirstDim,
}

/// `FIND_submesh`: how many subchunks along each dimension each chunk is cut into, given the
/// size of the first (largest) chunk. Halves the chunk along the dimensions `style` allows, in
/// turn, until it is at most `threshold` bytes or no dimension can be halved again. A layout
/// that distributes nothing (`*` everywhere) is left whole, as the paper respects that choice.
pub fn find_submesh(chunk_extents: &[u64], elem: u32, dist: &[Dist], style: SubchunkStyle, threshold: u64) -> Vec<u64> {
    let n = chunk_extents.len();
    let mut submesh = vec![1u64; n];
    if dist.iter().all(|d| *d == Dist::Star) {
        return submesh;
    }
    let allowed: Vec<bool> = match style {
        SubchunkStyle::SameDist => dist.iter().map(|d| *d != Dist::Star).collect(),
        SubchunkStyle::FirstDim => (0..n).map(|d| d == 0).collect(),
    };
    let size = |sub: &[u64]| -> u64 {
        chunk_extents.iter().zip(sub).map(|(&e, &s)| e.div_ceil(s)).product::<u64>() * u64::from(elem)
    };
    let mut i = 0;
    let mut stuck = 0;
    while size(&submesh) > threshold && stuck < n {
        if allowed[i] && submesh[i] * 2 <= chunk_extents[i] {
            submesh[i] *= 2;
            stuck = 0;
        } else {
            stuck += 1;
        }
        i = (i + 1) % n;
    }
    submesh
}

/// Every subchunk of an array under a disk layout, numbered chunk by chunk (row-major over the
/// disk mesh), then row-major over the submesh within the chunk. Each is a box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subchunks {
    pub submesh: Vec<u64>,
    pub boxes: Vec<Region>,
    /// The disk chunk each subchunk belongs to.
    pub chunk: Vec<u32>,
    elem: u32,
}

impl Subchunks {
    pub fn new(
        schema: &Schema,
        disk: &ArrayLayout,
        style: SubchunkStyle,
        threshold: u64,
    ) -> Result<Subchunks, ArrayError> {
        disk.check(schema)?;
        if disk.dist.iter().any(|d| matches!(d, Dist::Cyclic(_))) {
            return Err(ArrayError::BadLayout(
                "a disk layout takes BLOCK or * per dimension (CYCLIC is for memory layouts)".into(),
            ));
        }
        let first = disk.chunk(schema, 0);
        let extents: Vec<u64> = (0..schema.rank()).map(|d| first.extent(d)).collect();
        let submesh = find_submesh(&extents, schema.dtype.size(), &disk.dist, style, threshold);
        let (mut boxes, mut chunk) = (vec![], vec![]);
        for p in 0..disk.positions() {
            let c = disk.chunk(schema, p);
            if c.is_empty() {
                continue;
            }
            let ranges: Vec<Range<u64>> = c.dims.iter().map(|r| r[0].clone()).collect();
            let count: u64 = submesh.iter().product();
            for s in 0..count {
                let mut rest = s;
                let mut sub = vec![0..0; ranges.len()];
                for d in (0..ranges.len()).rev() {
                    let k = rest % submesh[d];
                    rest /= submesh[d];
                    let (lo, n) = (ranges[d].start, ranges[d].end - ranges[d].start);
                    let b = n.div_ceil(submesh[d]);
                    sub[d] = (lo + (k * b).min(n))..(lo + ((k + 1) * b).min(n));
                }
                let r = Region::boxed(sub);
                if !r.is_empty() {
                    boxes.push(r);
                    chunk.push(p);
                }
            }
        }
        let s = Subchunks { submesh, boxes, chunk, elem: schema.dtype.size() };
        let largest = (0..s.len()).map(|i| s.bytes(i)).max().unwrap_or(0);
        if largest > SUBCHUNK_MAX {
            return Err(ArrayError::BadLayout(format!(
                "this disk layout leaves subchunks of {largest} bytes, and at most {SUBCHUNK_MAX} fit: distribute \
                 more dimensions on disk, or give a smaller subchunk size"
            )));
        }
        if s.len() > SUBCHUNKS_MAX {
            return Err(ArrayError::BadLayout(format!(
                "{} subchunks, and an array may have at most {SUBCHUNKS_MAX}: give a larger subchunk size",
                s.len()
            )));
        }
        Ok(s)
    }

    pub fn len(&self) -> usize {
        self.boxes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.boxes.is_empty()
    }

    pub fn bytes(&self, i: usize) -> u64 {
        self.boxes[i].elements() * u64::from(self.elem)
    }

    pub fn sizes(&self) -> Vec<u64> {
        (0..self.len()).map(|i| self.bytes(i)).collect()
    }
}
