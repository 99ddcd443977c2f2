//! The cluster file: the static list of servers every command, client and server uses (a
//! TOML file, as PVFS and MinIO keep theirs), and how connections to them are secured.
//! `ganges local up` writes one under its root; `ganges cluster init` writes one for
//! machines of your own.
//!
//! ```toml
//! [[server]]
//! node = 0
//! addr = "node0.example:7070"      # host:port clients and the other servers connect to
//! data_dir = "/data/ganges"        # optional: for `ganges serve --cluster FILE --node 0`
//! listen = "0.0.0.0:7070"          # optional: the address to bind [default: addr]
//!
//! [security]
//! secret_file = "secret"           # the cluster secret (relative paths: to this file)
//!
//! [tls]                            # optional: TLS on every connection
//! ca = "tls/ca.pem"                # the cluster's CA, which clients trust
//! cert_dir = "tls"                 # servers: node-K.pem and node-K.key in it
//!
//! [local]                          # only for clusters started by `ganges local up`
//! root = "/tmp/ganges-alice/local"
//! supervisor_pid = 4242
//! ```
//!
//! `GANGES_SECRET_FILE`, when set, names the secret file instead of `[security]`.

use crate::error::{ClientError, Result};
use ganges_core::ids::NodeId;
use ganges_net::{Secret, Transport};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The environment variable that names the secret file, over the cluster file's.
pub const SECRET_FILE_ENV: &str = "GANGES_SECRET_FILE";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEntry {
    pub node: NodeId,
    /// `host:port`, as clients and the other servers reach this server.
    pub addr: String,
    /// Where this server keeps its data, for `ganges serve --cluster FILE --node K`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// The address to bind, when it is not `addr` (e.g. `0.0.0.0:7070` behind a name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

impl ServerEntry {
    pub fn new(node: NodeId, addr: impl Into<String>) -> ServerEntry {
        ServerEntry { node, addr: addr.into(), data_dir: None, listen: None }
    }
}

/// What `ganges local up` records about the cluster it runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LocalInfo {
    pub root: PathBuf,
    pub supervisor_pid: u32,
    /// The disk model every server runs (`None`: the real file system).
    pub disk_rate_bytes_per_sec: Option<f64>,
    pub seek_ms: f64,
    /// Each server in a network namespace of its own (`local up --netns`).
    #[serde(default)]
    pub netns: bool,
    /// The servers read and write with direct I/O.
    #[serde(default)]
    pub direct_io: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecuritySection {
    /// The cluster secret's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsSection {
    /// The cluster CA's certificate (PEM), which clients and servers trust.
    pub ca: PathBuf,
    /// Where servers find `node-K.pem` and `node-K.key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_dir: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterFile {
    #[serde(rename = "server")]
    pub servers: Vec<ServerEntry>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub security: SecuritySection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalInfo>,
    /// Where this was read from (for error messages, and relative paths).
    #[serde(skip)]
    pub path: PathBuf,
}

fn is_default(s: &SecuritySection) -> bool {
    *s == SecuritySection::default()
}

impl ClusterFile {
    pub fn new(mut servers: Vec<ServerEntry>) -> Result<ClusterFile> {
        servers.sort_by_key(|s| s.node);
        let c = ClusterFile {
            servers,
            security: SecuritySection::default(),
            tls: None,
            local: None,
            path: PathBuf::from("<memory>"),
        };
        c.validate()?;
        Ok(c)
    }

    fn bad(&self, why: String) -> ClientError {
        ClientError::Cluster { path: self.path.display().to_string(), why }
    }

    fn validate(&self) -> Result<()> {
        if self.servers.is_empty() {
            return Err(self.bad("it lists no servers".into()));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.node.index() != i {
                return Err(self.bad(format!(
                    "servers must be nodes 0..{} once each; found {}",
                    self.servers.len(),
                    s.node
                )));
            }
            for (what, a) in [("addr", Some(&s.addr)), ("listen", s.listen.as_ref())] {
                if let Some(a) = a
                    && let Err(why) = check_host_port(a)
                {
                    return Err(self.bad(format!("{} {what} `{a}`: {why}", s.node)));
                }
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
        ClusterFile::parse(&text, path)
    }

    /// Parse a cluster file's text (`path` is where it came from: errors name it, and
    /// relative paths in it are relative to its folder).
    pub fn parse(text: &str, path: &Path) -> Result<ClusterFile> {
        let mut c: ClusterFile = toml::from_str(text)
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

    /// Every server as servers name one another (handoff, completion, repair, arrays).
    pub fn peers(&self) -> Vec<ganges_proto::control::Peer> {
        self.servers.iter().map(|s| ganges_proto::control::Peer { node: s.node, addr: s.addr.clone() }).collect()
    }

    /// The entry of `node`.
    pub fn server(&self, node: NodeId) -> Result<&ServerEntry> {
        self.servers
            .get(node.index())
            .ok_or_else(|| self.bad(format!("there is no {node}: it lists nodes 0..{}", self.servers.len())))
    }

    /// A path named in this file, relative paths taken from the file's folder.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        match self.path.parent() {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_path_buf(),
        }
    }

    /// The secret file in force: `$GANGES_SECRET_FILE`, else `[security] secret_file`.
    pub fn secret_path(&self) -> Option<PathBuf> {
        match std::env::var_os(SECRET_FILE_ENV) {
            Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => self.security.secret_file.as_ref().map(|p| self.resolve(p)),
        }
    }

    /// The cluster secret, if the cluster has one.
    pub fn secret(&self) -> Result<Option<Secret>> {
        self.secret_path().map(|p| Secret::load(&p).map_err(|e| self.bad(e.to_string()))).transpose()
    }

    /// The client side of the cluster's transport: its secret and, with `[tls]`, its CA.
    pub fn transport(&self) -> Result<Transport> {
        let mut t = Transport::plain().with_secret(self.secret()?);
        if let Some(tls) = &self.tls {
            let config = ganges_net::tls::client_config(&self.resolve(&tls.ca)).map_err(|e| self.bad(e.to_string()))?;
            t = t.with_tls_client(config);
        }
        Ok(t)
    }

    /// The server side of the cluster's transport for `node`: its secret and, with `[tls]`,
    /// its certificate (and the CA, to reach its peers).
    pub fn server_transport(&self, node: NodeId) -> Result<Transport> {
        let t = Transport::plain().with_secret(self.secret()?);
        match self.node_tls(node)? {
            Some((cert, key, ca)) => t.with_tls_node(&cert, &key, &ca).map_err(|e| self.bad(e.to_string())),
            None => Ok(t),
        }
    }

    /// With `[tls]`: the certificate and key `node` serves with, and the cluster's CA.
    pub fn node_tls(&self, node: NodeId) -> Result<Option<(PathBuf, PathBuf, PathBuf)>> {
        Ok(match (self.tls_files(node)?, &self.tls) {
            (Some((cert, key)), Some(tls)) => Some((cert, key, self.resolve(&tls.ca))),
            _ => None,
        })
    }

    /// The certificate and key `node` serves with, if the cluster has TLS.
    pub fn tls_files(&self, node: NodeId) -> Result<Option<(PathBuf, PathBuf)>> {
        let Some(tls) = &self.tls else { return Ok(None) };
        let dir = tls.cert_dir.as_ref().ok_or_else(|| {
            self.bad("[tls] has no cert_dir, so servers have no certificates; run `ganges cluster init --tls`".into())
        })?;
        Ok(Some(ganges_net::tls::node_files(&self.resolve(dir), node.0)))
    }
}

/// Whether `a` looks like `host:port` (resolving it is left to connecting).
fn check_host_port(a: &str) -> std::result::Result<(), String> {
    let Some((host, port)) = a.rsplit_once(':') else { return Err("expected host:port".into()) };
    if host.is_empty() {
        return Err("no host before the port".into());
    }
    port.parse::<u16>().map(drop).map_err(|_| format!("`{port}` is not a port"))
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
        let mut c =
            ClusterFile::new(vec![ServerEntry::new(NodeId(1), "127.0.0.1:2"), ServerEntry::new(NodeId(0), "h0:1")])
                .unwrap();
        c.local = Some(LocalInfo {
            root: "/r".into(),
            supervisor_pid: 9,
            disk_rate_bytes_per_sec: None,
            seek_ms: 4.0,
            netns: false,
            direct_io: false,
        });
        c.security.secret_file = Some("secret".into());
        c.save(&path).unwrap();
        let back = ClusterFile::load(&path).unwrap();
        assert_eq!(back.servers, c.servers);
        assert_eq!(back.local, c.local);
        assert_eq!(back.secret_path(), Some(dir.path().join("secret")), "relative to the file");
        assert!(ClusterFile::new(vec![ServerEntry::new(NodeId(2), "127.0.0.1:1")]).is_err());
        for bad in ["nohost", ":7070", "h:notaport", "h:70000"] {
            let e = ClusterFile::new(vec![ServerEntry::new(NodeId(0), bad)]).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        let err = ClusterFile::load(&dir.path().join("nope.toml")).unwrap_err().to_string();
        assert!(err.contains("ganges local up"), "{err}");
    }

    #[test]
    fn a_missing_or_readable_secret_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = "[[server]]\nnode = 0\naddr = \"10.0.0.1:7070\"\n[security]\nsecret_file = \"s\"\n";
        let c = ClusterFile::parse(text, &dir.path().join("c.toml")).unwrap();
        let e = c.transport().unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains('s'), "{e}");
        ganges_net::Secret::generate(&dir.path().join("s")).unwrap();
        assert!(c.transport().unwrap().has_secret());
    }
}
