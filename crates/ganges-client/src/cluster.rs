//! The cluster file: the static list of servers every command and client uses (a TOML file,
//! as PVFS and MinIO keep theirs). `ganges local up` writes one under its root.
//!
//! ```toml
//! [[server]]
//! node = 0
//! addr = "127.0.0.1:40123"
//!
//! [local]                      # only for clusters started by `ganges local up`
//! root = "/tmp/ganges-alice/local"
//! supervisor_pid = 4242
//! ```

use crate::error::{ClientError, Result};
use ganges_core::ids::NodeId;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEntry {
    pub node: NodeId,
    pub addr: SocketAddr,
}

/// What `ganges local up` records about the cluster it runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LocalInfo {
    pub root: PathBuf,
    pub supervisor_pid: u32,
    /// The disk model every server runs (`None`: the real file system).
    pub disk_rate_bytes_per_sec: Option<f64>,
    pub seek_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterFile {
    #[serde(rename = "server")]
    pub servers: Vec<ServerEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalInfo>,
    /// Where this was read from (for error messages).
    #[serde(skip)]
    pub path: PathBuf,
}

impl ClusterFile {
    pub fn new(mut servers: Vec<ServerEntry>) -> Result<ClusterFile> {
        servers.sort_by_key(|s| s.node);
        let c = ClusterFile { servers, local: None, path: PathBuf::from("<memory>") };
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<()> {
        let bad = |why: String| ClientError::Cluster { path: self.path.display().to_string(), why };
        if self.servers.is_empty() {
            return Err(bad("it lists no servers".into()));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.node.index() != i {
                return Err(bad(format!(
                    "servers must be nodes 0..{} once each; found {}",
                    self.servers.len(),
                    s.node
                )));
            }
        }
        Ok(())
    }

    pub fn load(path: &Path) -> Result<ClusterFile> {
        let text = std::fs::read_to_string(path).map_err(|e| ClientError::Cluster {
            path: path.display().to_string(),
            why: if e.kind() == std::io::ErrorKind::NotFound {
                "not found; start a local cluster with `ganges local up`, or pass --cluster FILE".into()
            } else {
                e.to_string()
            },
        })?;
        let mut c: ClusterFile = toml::from_str(&text)
            .map_err(|e| ClientError::Cluster { path: path.display().to_string(), why: e.to_string() })?;
        c.path = path.to_path_buf();
        c.servers.sort_by_key(|s| s.node);
        c.validate()?;
        Ok(c)
    }

    /// Write atomically (temporary file, then rename), so readers never see half a file.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# ganges cluster file: one [[server]] per storage server.\n{}",
            toml::to_string(self).expect("cluster files serialise")
        );
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(ClientError::io(format!("writing {}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(ClientError::io(format!("writing {}", path.display())))
    }

    pub fn nodes(&self) -> u32 {
        self.servers.len() as u32
    }
}

/// Where `ganges local up` keeps its cluster when not told: one per user, under the temp dir.
pub fn default_local_root() -> PathBuf {
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    std::env::temp_dir().join(format!("ganges-{user}")).join("local")
}

/// The cluster file commands use when not told: `$GANGES_CLUSTER`, else the default local
/// cluster's.
pub fn default_cluster_path() -> PathBuf {
    match std::env::var_os("GANGES_CLUSTER") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => default_local_root().join("cluster.toml"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_validation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let mut c = ClusterFile::new(vec![
            ServerEntry { node: NodeId(1), addr: "127.0.0.1:2".parse().unwrap() },
            ServerEntry { node: NodeId(0), addr: "127.0.0.1:1".parse().unwrap() },
        ])
        .unwrap();
        c.local = Some(LocalInfo { root: "/r".into(), supervisor_pid: 9, disk_rate_bytes_per_sec: None, seek_ms: 4.0 });
        c.save(&path).unwrap();
        let back = ClusterFile::load(&path).unwrap();
        assert_eq!(back.servers, c.servers);
        assert_eq!(back.local, c.local);
        assert!(ClusterFile::new(vec![ServerEntry { node: NodeId(2), addr: "127.0.0.1:1".parse().unwrap() }]).is_err());
        let err = ClusterFile::load(&dir.path().join("nope.toml")).unwrap_err().to_string();
        assert!(err.contains("ganges local up"), "{err}");
    }
}
