//! ganges-net: how a ganges connection starts, for clients and servers alike.
//!
//! Every connection, client to server and server to server, goes through [`Transport`]:
//! TCP, then TLS when the cluster has certificates, then the cluster-secret handshake when
//! it has a secret, and only then the protocol's `Hello`. The server side limits the rate of
//! failed handshakes per address and drops handshakes that take too long.
//!
//! Modules:
//! - [`secret`]: the cluster secret: loading (refusing a file others can read), generating.
//! - [`auth`]: the handshake's proofs, pure functions of the secret and two nonces.
//! - [`tls`]: rustls configurations from PEM files, and a cluster CA with per-node
//!   certificates (`ganges cluster init --tls`).
//! - [`limit`]: the failed-handshake limiter.
//! - [`transport`]: connect and accept, carrying out all of the above.
//! - [`local`]: a server in the caller's own process, reached without a socket (part-time
//!   I/O nodes).
//! - [`failpoint`]: tests' named crash and stop points (`GANGES_FAIL_AT`).
//! - [`http`]: the little HTTP the metrics endpoints and the dashboard speak, and
//!   [`prom`], the Prometheus text format they serve.

pub mod auth;
pub mod failpoint;
pub mod http;
pub mod limit;
pub mod local;
pub mod prom;
pub mod secret;
pub mod tls;
pub mod transport;

pub use secret::Secret;
pub use transport::{HandshakeError, Stream, Transport};
