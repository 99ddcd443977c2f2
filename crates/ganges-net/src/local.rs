//! A server in the caller's own process, reached without a socket.
//!
//! Panda's part-time I/O nodes ("Parallel Input/Output with Heterogeneous Disks", §2): a
//! compute process also serves its own disk, and when that server needs data from the
//! process's own chunk, "data are copied locally from the client buffer to the server
//! buffer" instead of crossing the network. A server embedded in a process offers itself as
//! a [`LocalServer`]; the process's client hands such a server its frames directly: no
//! encoding, no copy through the kernel, the payload's bytes shared.

use ganges_proto::msg::Message;
use std::future::Future;
use std::pin::Pin;

/// A frame's answer, from a server in this process.
pub type Answer = Pin<Box<dyn Future<Output = Message> + Send>>;

/// A server running in this process.
pub trait LocalServer: Send + Sync + std::fmt::Debug {
    /// The node it is in its cluster.
    fn node(&self) -> u32;
    /// Whether it still serves; once stopped, its clients find it down, as over a socket.
    fn is_up(&self) -> bool;
    /// Handle one request frame as the server handles it from a connection, and answer it.
    /// Only a client's control requests and array pieces come this way; anything else is
    /// answered with an error frame.
    fn call(&self, msg: Message) -> Answer;
}
