//! The dataset manifest: what a dataset is, written once, identical on every node holding a
//! copy (docs/design.md, "Data on disk"). There is no metadata server: any node with a copy can
//! describe the whole dataset.

use ganges_core::datagen::Generator;
use ganges_core::digest::Digest;
use ganges_core::layout::Layout;
use ganges_core::placement::{Origin, Placement};
use ganges_core::shape::Shape;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The manifest format this build writes and reads. 2: the checksum files hold a CRC32C per
/// 64 KiB of each block (`ganges_core::shape::CHECK_BYTES`); 1 held one per block.
pub const MANIFEST_FORMAT: u32 = 2;
/// Longest dataset name: keeps paths and request frames short.
pub const NAME_MAX: usize = 128;

/// A dataset name: 1 to 128 of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-`. Parsed
/// once at the edge, so every path built from it is safe.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DatasetName(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a valid dataset name: use 1 to {NAME_MAX} letters, digits, `.`, `_` or `-`, \
     not starting with `.` or `-`"
)]
pub struct BadName(pub String);

impl DatasetName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for DatasetName {
    type Err = BadName;
    fn from_str(s: &str) -> Result<Self, BadName> {
        let ok = !s.is_empty()
            && s.len() <= NAME_MAX
            && !s.starts_with(['.', '-'])
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok { Ok(DatasetName(s.to_string())) } else { Err(BadName(s.to_string())) }
    }
}

impl TryFrom<String> for DatasetName {
    type Error = BadName;
    fn try_from(s: String) -> Result<Self, BadName> {
        s.parse()
    }
}

impl From<DatasetName> for String {
    fn from(n: DatasetName) -> String {
        n.0
    }
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the bytes came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Content {
    /// Generated on the servers by a deterministic generator.
    Generated { generator: Generator },
    /// Imported from a file by `dataset put`.
    Imported { source: String },
}

/// The format of the bytes, for readers that care about records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RecordFormat {
    Bytes,
    /// Fixed-size records with a key at the front (the sort-benchmark format: 100 and 10).
    Fixed {
        record_bytes: u32,
        key_bytes: u32,
    },
}

/// The life of a dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetState {
    /// Every copy holds every block: any read policy may read it.
    Complete,
    /// Written with a choice of copy (GW-1): each block is on the copies the manifest's
    /// `placement` names. Readable by placement only, until `ganges dataset complete` has the
    /// servers fill every copy (GW-2).
    Incomplete,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub name: DatasetName,
    /// Random, chosen at creation: tells a re-created dataset from the old one.
    pub id: u64,
    pub layout: Layout,
    pub shape: Shape,
    pub records: RecordFormat,
    pub content: Content,
    pub state: DatasetState,
    /// Which copies hold each block, for an `Incomplete` dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// For a DQ-written dataset: where each block was in the data as written, so it can be
    /// exported in that order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// For an array (`ganges array`): its schema and where each subchunk is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<Box<crate::array::ArrayMeta>>,
    /// Always "crc32c": one CRC32C per checksum unit of each block (`Shape::check_bytes`),
    /// checked on every read.
    pub checksum: String,
    /// The dataset digest (see `ganges_core::digest`), from the blocks' checksums.
    pub digest: Digest,
    pub created_unix_secs: u64,
}

impl Manifest {
    pub fn total_bytes(&self) -> u64 {
        self.shape.total_bytes()
    }

    /// Whether copy `copy` of `fragment` holds `block`: always, for a complete dataset.
    pub fn holds(&self, fragment: ganges_core::ids::FragmentId, block: u32, copy: u32) -> bool {
        match (&self.state, &self.placement) {
            (DatasetState::Incomplete, Some(p)) => p.has(fragment, block, copy),
            _ => true,
        }
    }
}
