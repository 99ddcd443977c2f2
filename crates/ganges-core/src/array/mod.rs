//! N-dimensional arrays (the Panda paper, "Parallel Input/Output with Heterogeneous Disks"):
//! a schema, memory and disk layouts, the chunks a layout cuts an array into, subchunks, and
//! the copy of the overlap of two chunks, for the reorganization between a memory layout and a
//! disk layout during transfer (AR-1).
//!
//! A **layout** is a mesh (how many processes, or logical I/O nodes, along each dimension) and
//! a distribution per dimension: `BLOCK` (contiguous, the HPF block size `ceil(n / m)`),
//! `CYCLIC(k)` (runs of `k` dealt round-robin) or `*` (not distributed). Each mesh position
//! owns one **chunk**: per dimension, a sorted set of index ranges ([`Region`]). A chunk's
//! bytes are kept row-major over its own indices, so a `BLOCK` chunk is an ordinary sub-array
//! and a `CYCLIC` one is its owned rows packed together, as HPF compilers keep them.
//!
//! Everything here is arithmetic on indices; nothing allocates per element.

// A region's dimension is a list of ranges; a list of one range is the common case.
#![allow(clippy::single_range_in_vec_init)]

mod alloc;
mod copy;
mod generate;
mod order;
mod subchunk;
#[cfg(test)]
mod tests;

pub use alloc::{AllocKind, DYNAMIC_PER_ROUND, Dynamic, HELD_AHEAD, Thief, round_robin, static_alloc, subchunk_homes};
pub use copy::{contiguous, copy_overlap, gather};
pub use generate::generated;
pub use order::{ARRAY_READ_POLICY, spread_over_fragments};
pub use subchunk::{SUBCHUNK_MAX, SUBCHUNKS_MAX, SubchunkStyle, Subchunks, find_submesh};

use crate::parse::ParseError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Highest rank an array may have.
pub const MAX_RANK: usize = 8;

/// The element type of an array (its size is all the I/O needs; the name is for readers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    U64,
    I64,
    F64,
}

impl DType {
    pub const ALL: [DType; 10] = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::F32,
        DType::U64,
        DType::I64,
        DType::F64,
    ];

    pub fn size(self) -> u32 {
        match self {
            DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::F32 => "f32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F64 => "f64",
        }
    }
}

impl FromStr for DType {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<DType, ParseError> {
        let s = s.to_ascii_lowercase();
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| ParseError::unknown("element type", &s, DType::ALL.map(DType::name)))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an array is: its extent along each dimension and its element type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    pub shape: Vec<u64>,
    pub dtype: DType,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error("an array has 1 to {MAX_RANK} dimensions, each at least 1 long; got shape {0:?}")]
    BadShape(Vec<u64>),
    #[error("the layout has {got} dimensions but the array has {rank}")]
    RankMismatch { rank: usize, got: usize },
    #[error("{0}")]
    BadLayout(String),
    #[error("a buffer of {got} bytes was given for a chunk of {want} bytes")]
    BufferSize { want: u64, got: u64 },
}

impl Schema {
    pub fn new(shape: Vec<u64>, dtype: DType) -> Result<Schema, ArrayError> {
        if shape.is_empty() || shape.len() > MAX_RANK || shape.contains(&0) {
            return Err(ArrayError::BadShape(shape));
        }
        let s = Schema { shape, dtype };
        s.shape.iter().try_fold(u64::from(dtype.size()), |acc, &n| acc.checked_mul(n)).ok_or_else(|| {
            ArrayError::BadLayout(format!("an array of shape {:?} has more bytes than fit in 64 bits", s.shape))
        })?;
        Ok(s)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn bytes(&self) -> u64 {
        self.elements() * u64::from(self.dtype.size())
    }

    /// The whole array as one region (row-major order is the array's natural order).
    pub fn whole(&self) -> Region {
        Region { dims: self.shape.iter().map(|&n| vec![0..n]).collect() }
    }
}

/// How one dimension is cut among the mesh positions along it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Contiguous blocks of `ceil(n / m)`.
    Block,
    /// Runs of `k` indices dealt round-robin to the positions.
    Cyclic(u64),
    /// Not distributed: every position along it holds the whole dimension.
    Star,
}

impl FromStr for Dist {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Dist, ParseError> {
        let u = s.trim().to_ascii_uppercase();
        if u == "BLOCK" {
            return Ok(Dist::Block);
        }
        if u == "*" {
            return Ok(Dist::Star);
        }
        if u == "CYCLIC" {
            return Ok(Dist::Cyclic(1));
        }
        if let Some(k) = u.strip_prefix("CYCLIC(").and_then(|r| r.strip_suffix(')')) {
            return match k.parse::<u64>() {
                Ok(k) if k > 0 => Ok(Dist::Cyclic(k)),
                _ => Err(ParseError::malformed("a distribution", s, "CYCLIC(k) takes a whole number k ≥ 1")),
            };
        }
        Err(ParseError::unknown("distribution", s, ["BLOCK", "CYCLIC(k)", "*"]))
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Block => f.write_str("BLOCK"),
            Dist::Cyclic(k) => write!(f, "CYCLIC({k})"),
            Dist::Star => f.write_str("*"),
        }
    }
}

/// A memory or disk layout: a mesh and a distribution per dimension. The mesh has one extent
/// per dimension (1 along `*` dimensions); [`ArrayLayout::new`] also takes the HPF form, one
/// extent per distributed dimension only (`mesh 8` with `BLOCK,*,*`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayLayout {
    pub mesh: Vec<u32>,
    pub dist: Vec<Dist>,
}

impl ArrayLayout {
    pub fn new(mesh: Vec<u32>, dist: Vec<Dist>) -> Result<ArrayLayout, ArrayError> {
        let distributed = dist.iter().filter(|d| **d != Dist::Star).count();
        let mesh = if mesh.len() == dist.len() {
            mesh
        } else if mesh.len() == distributed {
            let mut m = mesh.into_iter();
            dist.iter().map(|d| if *d == Dist::Star { 1 } else { m.next().unwrap_or(1) }).collect()
        } else {
            return Err(ArrayError::BadLayout(format!(
                "a mesh of {} extents for {} distributions: give one extent per dimension, or one \
                 per distributed (non-*) dimension",
                mesh.len(),
                dist.len()
            )));
        };
        if mesh.contains(&0) {
            return Err(ArrayError::BadLayout("a mesh extent is 0".into()));
        }
        if let Some(d) = mesh.iter().zip(&dist).position(|(&m, d)| *d == Dist::Star && m != 1) {
            return Err(ArrayError::BadLayout(format!("dimension {d} is * but its mesh extent is {}", mesh[d])));
        }
        Ok(ArrayLayout { mesh, dist })
    }

    /// A layout from what a user gave for an array of `rank` dimensions: `None` when neither
    /// mesh nor distributions were given. A mesh alone distributes its first dimensions
    /// BLOCK (the rest `*`); distributions alone must all be `*` (there is nothing to cut by).
    pub fn from_options(
        rank: usize,
        mesh: Option<Vec<u32>>,
        dist: Option<Vec<Dist>>,
    ) -> Result<Option<ArrayLayout>, ArrayError> {
        let built = match (mesh, dist) {
            (None, None) => return Ok(None),
            (Some(mesh), None) if mesh.len() <= rank => {
                let dist = (0..rank).map(|d| if d < mesh.len() { Dist::Block } else { Dist::Star }).collect();
                let mesh = (0..rank).map(|d| mesh.get(d).copied().unwrap_or(1)).collect();
                ArrayLayout::new(mesh, dist)?
            }
            (Some(mesh), None) => {
                return Err(ArrayError::BadLayout(format!("a mesh of {} extents for {rank} dimensions", mesh.len())));
            }
            (None, Some(dist)) if dist.iter().any(|d| *d != Dist::Star) => {
                return Err(ArrayError::BadLayout(
                    "give a mesh too: how many processes along each distributed dimension".into(),
                ));
            }
            (None, Some(dist)) => ArrayLayout::new(vec![1; dist.len()], dist)?,
            (Some(mesh), Some(dist)) => ArrayLayout::new(mesh, dist)?,
        };
        if built.dist.len() != rank {
            return Err(ArrayError::RankMismatch { rank, got: built.dist.len() });
        }
        Ok(Some(built))
    }

    /// Row-major over `parts` processes or servers: BLOCK along the first dimension, whole
    /// along the others (the disk layout when none is given).
    pub fn row_major(rank: usize, parts: u32) -> Result<ArrayLayout, ArrayError> {
        let dist = (0..rank).map(|d| if d == 0 { Dist::Block } else { Dist::Star }).collect();
        ArrayLayout::new(vec![parts], dist)
    }

    /// One chunk holding the whole array (a single process reading or writing all of it).
    pub fn whole(rank: usize) -> ArrayLayout {
        ArrayLayout { mesh: vec![1; rank], dist: vec![Dist::Star; rank] }
    }

    pub fn check(&self, schema: &Schema) -> Result<(), ArrayError> {
        if self.dist.len() != schema.rank() || self.mesh.len() != schema.rank() {
            return Err(ArrayError::RankMismatch { rank: schema.rank(), got: self.dist.len() });
        }
        Ok(())
    }

    /// How many mesh positions (processes, or logical I/O nodes) there are.
    pub fn positions(&self) -> u32 {
        self.mesh.iter().product()
    }

    /// The mesh coordinates of position `p` (row-major over the mesh).
    pub fn coords(&self, mut p: u32) -> Vec<u32> {
        let mut c = vec![0; self.mesh.len()];
        for d in (0..self.mesh.len()).rev() {
            c[d] = p % self.mesh[d];
            p /= self.mesh[d];
        }
        c
    }

    /// The chunk position `p` owns. Empty along a dimension when the mesh is longer than the
    /// array there (`BLOCK` of 3 over 4 positions).
    pub fn chunk(&self, schema: &Schema, p: u32) -> Region {
        let coords = self.coords(p);
        let dims = (0..schema.rank())
            .map(|d| owned(schema.shape[d], self.mesh[d] as u64, coords[d] as u64, self.dist[d]))
            .collect();
        Region { dims }
    }

    /// Text as the command line takes it: `2,2,2 BLOCK,BLOCK,BLOCK`.
    pub fn describe(&self) -> String {
        let mesh: Vec<String> = self.mesh.iter().map(u32::to_string).collect();
        let dist: Vec<String> = self.dist.iter().map(Dist::to_string).collect();
        format!("mesh {} ({})", mesh.join("×"), dist.join(","))
    }
}

/// The indices of a dimension of length `n` that position `c` of `m` owns.
fn owned(n: u64, m: u64, c: u64, dist: Dist) -> Vec<Range<u64>> {
    match dist {
        Dist::Star => vec![0..n],
        Dist::Block => {
            let b = n.div_ceil(m);
            let (lo, hi) = ((c * b).min(n), ((c + 1) * b).min(n));
            if lo < hi { vec![lo..hi] } else { vec![] }
        }
        Dist::Cyclic(k) => {
            let mut out = vec![];
            let mut lo = c * k;
            while lo < n {
                out.push(lo..(lo + k).min(n));
                lo += m * k;
            }
            out
        }
    }
}

/// A set of array elements that is a product of index sets, one per dimension, each a sorted
/// list of disjoint ranges. Its bytes are kept row-major over its own indices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub dims: Vec<Vec<Range<u64>>>,
}

impl Region {
    /// A box: one range per dimension.
    pub fn boxed(ranges: Vec<Range<u64>>) -> Region {
        Region { dims: ranges.into_iter().map(|r| if r.is_empty() { vec![] } else { vec![r] }).collect() }
    }

    /// How many indices along dimension `d`.
    pub fn extent(&self, d: usize) -> u64 {
        self.dims[d].iter().map(|r| r.end - r.start).sum()
    }

    pub fn elements(&self) -> u64 {
        (0..self.dims.len()).map(|d| self.extent(d)).product()
    }

    pub fn is_empty(&self) -> bool {
        self.elements() == 0
    }

    /// The elements in both.
    pub fn intersect(&self, other: &Region) -> Region {
        let dims = self.dims.iter().zip(&other.dims).map(|(a, b)| intersect_ranges(a, b)).collect();
        Region { dims }
    }

    /// Where global index `g` of dimension `d` sits among this region's own indices.
    fn local(&self, d: usize, g: u64) -> u64 {
        let mut before = 0;
        for r in &self.dims[d] {
            if g < r.end {
                debug_assert!(g >= r.start, "index {g} is not in the region");
                return before + (g - r.start);
            }
            before += r.end - r.start;
        }
        unreachable!("index {g} is past the region along dimension {d}")
    }
}

fn intersect_ranges(a: &[Range<u64>], b: &[Range<u64>]) -> Vec<Range<u64>> {
    let (mut i, mut j, mut out) = (0, 0, vec![]);
    while i < a.len() && j < b.len() {
        let (lo, hi) = (a[i].start.max(b[j].start), a[i].end.min(b[j].end));
        if lo < hi {
            out.push(lo..hi);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}
