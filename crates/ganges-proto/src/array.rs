//! What an array write says to the servers, and what an array's manifest adds to a dataset's.
//!
//! An array is stored as a dataset with one fragment per server: each server's fragment is the
//! subchunks it wrote, one after another, in the order it wrote them. The manifest's
//! [`ArrayMeta`] says which array it is (schema, disk layout, how it was cut) and where each
//! subchunk lives, so the array reads back into any memory layout whatever allocation wrote it
//! (AR-6); the dataset's commit makes the whole array visible at once, or none of it.

use crate::control::Peer;
use crate::manifest::DatasetName;
use ganges_core::array::{AllocKind, ArrayError, ArrayLayout, DYNAMIC_PER_ROUND, Schema, SubchunkStyle, Subchunks};
use serde::{Deserialize, Serialize};

/// Where one subchunk is: the fragment (= the server that wrote it) and its byte offset there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub fragment: u32,
    pub offset: u64,
}

/// The array part of a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayMeta {
    pub schema: Schema,
    /// The disk layout the writer asked for; subchunks cut its chunks.
    pub disk: ArrayLayout,
    pub style: SubchunkStyle,
    /// The largest subchunk, in bytes.
    pub threshold: u64,
    /// The allocation that placed the subchunks.
    pub alloc: AllocKind,
    /// Where each subchunk is, in the order [`Subchunks`] numbers them.
    pub places: Vec<Place>,
}

impl ArrayMeta {
    /// The subchunks, recomputed from the schema and layout (they are not stored).
    pub fn subchunks(&self) -> Result<Subchunks, ArrayError> {
        let s = Subchunks::new(&self.schema, &self.disk, self.style, self.threshold)?;
        if s.len() != self.places.len() {
            return Err(ArrayError::BadLayout(format!(
                "the manifest places {} subchunks but the layout cuts {}",
                self.places.len(),
                s.len()
            )));
        }
        Ok(s)
    }
}

/// The largest subchunk by default (panda §3.1: 1 MB gives the file system its peak).
pub const SUBCHUNK_BYTES: u64 = 1 << 20;

/// One collective write, as every process of it describes it (the same on all of them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArraySpec {
    pub name: DatasetName,
    pub schema: Schema,
    /// How the writing processes hold the array: process `r` holds chunk `r` of this layout.
    pub memory: ArrayLayout,
    pub disk: ArrayLayout,
    pub style: SubchunkStyle,
    /// The largest subchunk, in bytes.
    pub threshold: u64,
    pub alloc: AllocKind,
    /// Dynamic allocation's `N`.
    pub per_round: u32,
    /// Copies of every subchunk: 1, or more on the next servers round the ring (chained
    /// declustering), so that reads can take graduated declustering's way round a slow one.
    pub replicas: u32,
    /// The elements are `ganges_core::array::generated`'s (each its own index), so a reader
    /// can check every one; the manifest's content says so.
    pub generated: bool,
    /// Ours, for part-time I/O nodes: the server running in each process (`homes[r]` for
    /// process `r`; `None` where it serves nothing), or empty when none is known. Static and
    /// steal allocation keep a process's subchunks on its own server where balance allows;
    /// dynamic allocation hands a server its own first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub homes: Vec<Option<u32>>,
}

impl ArraySpec {
    /// A write with the paper's defaults: 1 MiB subchunks cut like their chunks, `N` = 20.
    pub fn new(
        name: DatasetName,
        schema: Schema,
        memory: ArrayLayout,
        disk: ArrayLayout,
        alloc: AllocKind,
    ) -> ArraySpec {
        ArraySpec {
            name,
            schema,
            memory,
            disk,
            style: SubchunkStyle::SameDist,
            threshold: SUBCHUNK_BYTES,
            alloc,
            per_round: DYNAMIC_PER_ROUND,
            replicas: 1,
            generated: false,
            homes: vec![],
        }
    }

    /// How many processes write: one per memory chunk.
    pub fn ranks(&self) -> u32 {
        self.memory.positions()
    }

    /// The bytes of process `rank`'s chunk.
    pub fn chunk_bytes(&self, rank: u32) -> u64 {
        self.memory.chunk(&self.schema, rank).elements() * u64::from(self.schema.dtype.size())
    }

    /// Check the layouts against the schema, and cut the subchunks.
    pub fn check(&self) -> Result<Subchunks, ArrayError> {
        self.memory.check(&self.schema)?;
        if self.threshold == 0 {
            return Err(ArrayError::BadLayout("the subchunk size must be at least 1 byte".into()));
        }
        if !self.homes.is_empty() && self.homes.len() != self.ranks() as usize {
            return Err(ArrayError::BadLayout(format!(
                "{} homes for a write by {} processes: give one per process, or none",
                self.homes.len(),
                self.ranks()
            )));
        }
        Subchunks::new(&self.schema, &self.disk, self.style, self.threshold)
    }
}

/// One collective write, as every server of the cluster gets it (`ArrayOpen`): enough for each
/// to work out, independently and identically, what it must gather from which process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayPlan {
    pub spec: ArraySpec,
    /// The staging transaction the array's fragments are appended to.
    pub txid: u64,
    /// Each server's write rate, bytes per second, measured by its empirical test or during
    /// the previous collective call (static and dynamic allocation start from them).
    pub rates: Vec<f64>,
    /// The server that runs dynamic allocation's manager.
    pub manager: Peer,
    /// Every server of the cluster (a server sends the other copies of its blocks to theirs).
    pub peers: Vec<Peer>,
}

impl ArrayPlan {
    /// How many processes take part.
    pub fn ranks(&self) -> u32 {
        self.spec.ranks()
    }
}

/// How a collective write ended, as the servers tell every process of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayOutcome {
    pub committed: bool,
    /// Why not, when it was not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
}

/// What one server wrote in a collective call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayWritten {
    /// (subchunk, offset in this server's fragment), in the order written.
    pub placed: Vec<(u32, u64)>,
    /// The size of this server's fragment (one byte of padding when it got no subchunk).
    pub fragment_bytes: u64,
    pub bytes: u64,
    /// Time the disk spent on those bytes: the server's write rate for the next call.
    pub disk_secs: f64,
}
