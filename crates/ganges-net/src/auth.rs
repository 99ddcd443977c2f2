//! The cluster-secret handshake's proofs: pure functions, no I/O.
//!
//! ```text
//! client                                   server (holds the secret)
//!   AuthInit { client nonce }        ->
//!                                    <-    AuthChallenge { server nonce, server proof }
//!   (checks the server's proof)
//!   AuthProof { client proof }       ->
//!                                    <-    AuthOk, or Error(AuthFailed) and close
//!   Hello ...
//! ```
//! Each proof is HMAC-SHA256, keyed by the secret, over a label naming the side, then both
//! nonces. Each side's nonce is fresh random bytes, so a proof recorded from one connection
//! is worthless on another (the server's nonce differs), and the two labels keep a proof of
//! one side from being reflected back as the other's. Proofs are compared in constant time.

use crate::secret::Secret;
use ganges_proto::msg::AUTH_BYTES;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Which side a proof speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Client => b"ganges/1 handshake: client proof",
            Side::Server => b"ganges/1 handshake: server proof",
        }
    }
}

fn mac(secret: &Secret, side: Side, client_nonce: &[u8; AUTH_BYTES], server_nonce: &[u8; AUTH_BYTES]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.key()).expect("HMAC takes keys of any length");
    m.update(side.label());
    m.update(client_nonce);
    m.update(server_nonce);
    m
}

/// The proof `side` sends for this pair of nonces.
pub fn proof(
    secret: &Secret,
    side: Side,
    client_nonce: &[u8; AUTH_BYTES],
    server_nonce: &[u8; AUTH_BYTES],
) -> [u8; AUTH_BYTES] {
    mac(secret, side, client_nonce, server_nonce).finalize().into_bytes().into()
}

/// Whether `got` is `side`'s proof for this pair of nonces (compared in constant time).
pub fn verify(
    secret: &Secret,
    side: Side,
    client_nonce: &[u8; AUTH_BYTES],
    server_nonce: &[u8; AUTH_BYTES],
    got: &[u8; AUTH_BYTES],
) -> bool {
    mac(secret, side, client_nonce, server_nonce).verify_slice(got).is_ok()
}

/// Fresh random bytes for a nonce, from the operating system.
pub fn nonce() -> [u8; AUTH_BYTES] {
    let mut n = [0u8; AUTH_BYTES];
    rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut n).expect("the operating system gives random bytes");
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::from_bytes(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_proof_checks_only_with_the_same_secret_side_and_nonces() {
        let (a, b) = (secret("the cluster's secret, A"), secret("the cluster's secret, B"));
        let (cn, sn) = ([1u8; AUTH_BYTES], [2u8; AUTH_BYTES]);
        let p = proof(&a, Side::Client, &cn, &sn);
        assert!(verify(&a, Side::Client, &cn, &sn, &p));
        assert!(!verify(&b, Side::Client, &cn, &sn, &p), "another secret");
        assert!(!verify(&a, Side::Server, &cn, &sn, &p), "reflected as the other side's");
        assert!(!verify(&a, Side::Client, &cn, &[3u8; AUTH_BYTES], &p), "replayed on another connection");
        assert_ne!(nonce(), nonce());
    }

    /// HMAC-SHA256 as RFC 4231 test case 2 defines it, so the proofs are the standard MAC.
    #[test]
    fn the_mac_is_standard_hmac_sha256() {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let hex: String = m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }
}
