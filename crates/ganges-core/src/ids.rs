//! Identifier newtypes, so a node index is never mistaken for a fragment index.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id!(
    /// A storage server: one node's disk (the papers' producer for reads).
    NodeId,
    "node"
);
id!(
    /// A fragment of a dataset (at most one per node in the papers; any number here).
    FragmentId,
    "fragment"
);
id!(
    /// A consumer of a scan: the process reading one logical partition.
    ConsumerId,
    "consumer"
);
