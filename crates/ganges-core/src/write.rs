//! Write policies: where each block a writer puts goes.
//!
//! | name | spec | where a block goes | layout |
//! | --- | --- | --- | --- |
//! | `static` | the baseline | the primary copy of the writer's fragment | chained, R copies |
//! | `gd` | GW-1 | primary or backup copy, progress-balanced like GD reads | chained, R copies |
//!
//! A writer is driven by the same engine as a reader ([`crate::route::ReadEngine`]): its
//! pieces are the blocks of its partition, and the policy picks the copy. With a choice of
//! copy the dataset is committed incomplete, with each block's placement recorded
//! ([`crate::placement`]), and replica completion (GW-2) fills the other copies.

use crate::route::ReadPolicyKind;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicyKind {
    Static,
    Gd,
}

impl WritePolicyKind {
    pub const ALL: [WritePolicyKind; 2] = [WritePolicyKind::Static, WritePolicyKind::Gd];

    /// The routing policy that places a writer's blocks among its fragment's copies.
    pub fn route(self) -> ReadPolicyKind {
        match self {
            WritePolicyKind::Static => ReadPolicyKind::Static,
            WritePolicyKind::Gd => ReadPolicyKind::Gd,
        }
    }
}

impl FromStr for WritePolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        WritePolicyKind::ALL.into_iter().find(|k| k.to_string() == s).ok_or_else(|| {
            let names: Vec<String> = WritePolicyKind::ALL.iter().map(|k| k.to_string()).collect();
            format!("unknown write policy `{s}` (use {})", names.join(", "))
        })
    }
}

impl fmt::Display for WritePolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WritePolicyKind::Static => "static",
            WritePolicyKind::Gd => "gd",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_choices() {
        for k in WritePolicyKind::ALL {
            assert_eq!(k.to_string().parse::<WritePolicyKind>(), Ok(k));
        }
        let e = "fastest".parse::<WritePolicyKind>().unwrap_err();
        assert!(e.contains("static, gd"), "{e}");
    }
}
