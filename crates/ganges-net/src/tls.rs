//! TLS for networks a cluster does not trust (rustls, with the ring provider).
//!
//! A cluster with TLS has its own certificate authority: every server presents a
//! certificate for its host signed by it, and clients (and servers, connecting to each
//! other) trust that CA alone. Clients are not asked for certificates: the cluster secret's
//! handshake, which runs inside TLS, is what proves a client belongs. [`generate`] makes the
//! CA and the servers' certificates (`ganges cluster init --tls`).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {what} from {path}: {why}")]
    Read { what: &'static str, path: PathBuf, why: String },
    #[error("{path} holds no {what}")]
    Empty { what: &'static str, path: PathBuf },
    #[error("the TLS configuration is not usable: {0}")]
    Config(String),
    #[error("making certificates: {0}")]
    Generate(String),
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("`{0}` is not a host name or IP address a certificate can name")]
    BadHost(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |why: String| TlsError::Read { what, path: path.to_path_buf(), why };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| read(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Empty { what, path: path.to_path_buf() });
    }
    Ok(certs)
}

/// What a client needs: the cluster's CA certificate.
pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca, "a CA certificate")? {
        roots.add(c).map_err(|e| TlsError::Config(format!("the CA certificate in {}: {e}", ca.display())))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What a server needs: its certificate (chain) and private key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs(cert, "a certificate")?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Read {
        what: "a private key",
        path: key.to_path_buf(),
        why: e.to_string(),
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(format!("{} and its key: {e}", cert.display())))?;
    Ok(Arc::new(config))
}

/// The name a client checks a server's certificate against: the host part of `host:port`.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = host_of(addr);
    ServerName::try_from(host.to_string()).map_err(|_| TlsError::BadHost(host.to_string()))
}

/// The host of `host:port` (brackets of an IPv6 literal removed).
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The files [`generate`] writes, by convention, in one folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCerts {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    /// Per node, in node order: (certificate, key).
    pub nodes: Vec<(PathBuf, PathBuf)>,
}

/// The certificate and key file names of node `k` in a folder of cluster certificates.
pub fn node_files(dir: &Path, node: u32) -> (PathBuf, PathBuf) {
    (dir.join(format!("node-{node}.pem")), dir.join(format!("node-{node}.key")))
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), TlsError> {
    let err = |err| TlsError::Write { path: path.to_path_buf(), err };
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

/// Make a cluster CA in `dir` and a certificate for each host (`host:port` or a bare host;
/// node k is `hosts[k]`), naming the host (as a DNS name or an IP address). Keys are written
/// mode 0600; no file is replaced.
pub fn generate(dir: &Path, hosts: &[String]) -> Result<ClusterCerts, TlsError> {
    let gen_err = |e: rcgen::Error| TlsError::Generate(e.to_string());
    std::fs::create_dir_all(dir).map_err(|err| TlsError::Write { path: dir.to_path_buf(), err })?;
    let ca_key = KeyPair::generate().map_err(gen_err)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "ganges cluster CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).map_err(gen_err)?;
    let out = ClusterCerts {
        ca_cert: dir.join("ca.pem"),
        ca_key: dir.join("ca.key"),
        nodes: (0..hosts.len() as u32).map(|k| node_files(dir, k)).collect(),
    };
    write_file(&out.ca_cert, &ca_cert.pem(), 0o644)?;
    write_file(&out.ca_key, &ca_key.serialize_pem(), 0o600)?;
    let issuer = Issuer::new(ca, ca_key);
    for (host, (cert_path, key_path)) in hosts.iter().zip(&out.nodes) {
        let host = host_of(host);
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut p = CertificateParams::new(vec![host.to_string()]).map_err(|_| TlsError::BadHost(host.to_string()))?;
        p.distinguished_name.push(DnType::CommonName, format!("ganges server {host}"));
        let cert = p.signed_by(&key, &issuer).map_err(gen_err)?;
        write_file(cert_path, &cert.pem(), 0o644)?;
        write_file(key_path, &key.serialize_pem(), 0o600)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_load_as_client_and_server_configurations() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec!["10.1.0.2:7070".to_string(), "node1.example:7070".into()];
        let c = generate(dir.path(), &hosts).unwrap();
        client_config(&c.ca_cert).unwrap();
        for (cert, key) in &c.nodes {
            server_config(cert, key).unwrap();
        }
        assert!(generate(dir.path(), &hosts).is_err(), "no file is replaced");
        assert_eq!(host_of("[::1]:7070"), "::1");
        assert!(server_name("10.1.0.2:7070").is_ok() && server_name("node1.example:1").is_ok());
        let e = client_config(&dir.path().join("none.pem")).unwrap_err();
        assert!(e.to_string().contains("none.pem"), "{e}");
    }
}
