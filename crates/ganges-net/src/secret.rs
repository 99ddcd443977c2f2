//! The cluster secret: the key every connection proves it holds (see [`crate::auth`]).
//!
//! A secret file holds the key as text; its bytes (surrounding whitespace trimmed) are the
//! HMAC key, at least [`SECRET_BYTES_MIN`] of them. `ganges cluster init` writes 32 random
//! bytes as 64 hex digits, mode 0600. A secret file that users other than its owner can
//! read is refused: the secret is the whole cluster's key.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The shortest secret accepted: 128 bits.
pub const SECRET_BYTES_MIN: usize = 16;
/// Random bytes in a generated secret.
pub const SECRET_BYTES_GENERATED: usize = 32;
/// The longest secret file read (a secret is a key, not a document).
const SECRET_FILE_MAX: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("reading the secret file {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error(
        "the secret file {path} can be read by other users (mode {mode:04o}); make it private with `chmod 600 {path}`"
    )]
    Readable { path: PathBuf, mode: u32 },
    #[error("the secret file {path} holds {len} bytes; a secret needs at least {SECRET_BYTES_MIN}")]
    TooShort { path: PathBuf, len: usize },
    #[error("the secret file {path} is over {SECRET_FILE_MAX} bytes; is it the right file?")]
    TooLong { path: PathBuf },
    #[error("writing the secret file {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
}

/// A cluster secret. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// A secret from its bytes (at least [`SECRET_BYTES_MIN`]).
    pub fn from_bytes(bytes: &[u8]) -> Option<Secret> {
        (bytes.len() >= SECRET_BYTES_MIN).then(|| Secret(bytes.to_vec()))
    }

    /// Read a secret file, refusing one that other users can read.
    pub fn load(path: &Path) -> Result<Secret, SecretError> {
        let read = |err| SecretError::Read { path: path.to_path_buf(), err };
        let meta = std::fs::metadata(path).map_err(read)?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Readable { path: path.to_path_buf(), mode });
        }
        if meta.len() > SECRET_FILE_MAX {
            return Err(SecretError::TooLong { path: path.to_path_buf() });
        }
        let raw = std::fs::read(path).map_err(read)?;
        let key = raw.trim_ascii();
        Secret::from_bytes(key).ok_or(SecretError::TooShort { path: path.to_path_buf(), len: key.len() })
    }

    /// A new secret of [`SECRET_BYTES_GENERATED`] random bytes from the operating system,
    /// written to `path` as hex, mode 0600. Refuses to replace an existing file.
    pub fn generate(path: &Path) -> Result<Secret, SecretError> {
        let write = |err| SecretError::Write { path: path.to_path_buf(), err };
        let mut raw = [0u8; SECRET_BYTES_GENERATED];
        rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut raw)
            .map_err(|e| write(std::io::Error::other(e)))?;
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(write)?;
        f.write_all(format!("{hex}\n").as_bytes()).map_err(write)?;
        f.sync_all().map_err(write)?;
        Ok(Secret(hex.into_bytes()))
    }

    /// The key's bytes (for the HMAC).
    pub fn key(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_generated_secret_loads_back_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let s = Secret::generate(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(Secret::load(&path).unwrap(), s);
        assert_eq!(s.key().len(), 2 * SECRET_BYTES_GENERATED);
        assert!(Secret::generate(&path).is_err(), "an existing secret is never replaced");
        assert!(!format!("{s:?}").contains(std::str::from_utf8(s.key()).unwrap()), "Debug hides the key");
    }

    #[test]
    fn a_readable_short_or_missing_secret_is_refused_with_its_own_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secret::load(&path).unwrap_err();
        assert!(matches!(e, SecretError::Readable { mode: 0o644, .. }), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Secret::load(&path).unwrap().key(), b"0123456789abcdef0123");
        std::fs::write(&path, "short\n").unwrap();
        assert!(matches!(Secret::load(&path), Err(SecretError::TooShort { len: 5, .. })));
        assert!(matches!(Secret::load(&dir.path().join("none")), Err(SecretError::Read { .. })));
    }
}
