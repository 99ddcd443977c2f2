//! Frames from the client of the process the server is embedded in ([`crate::Embedded`]):
//! handled as a connection handles them, with no socket, no encoding and no copy (Panda's
//! part-time I/O nodes: a piece of the process's own chunk goes to its own server in memory).
//! The process is the server's own, so there is no handshake to make.

use crate::Shared;
use ganges_net::local::{Answer, LocalServer};
use ganges_proto::msg::{ErrorCode, Message, WireError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug)]
pub struct InProcess {
    shared: Arc<Shared>,
    frames: AtomicU64,
    bytes: AtomicU64,
    stopped: AtomicBool,
}

impl InProcess {
    pub(crate) fn new(shared: Arc<Shared>) -> InProcess {
        InProcess { shared, frames: AtomicU64::new(0), bytes: AtomicU64::new(0), stopped: AtomicBool::new(false) }
    }

    /// The server has stopped: its clients in this process find it down from now on.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Frames, and pieces' payload bytes, handed over in memory so far.
    pub fn traffic(&self) -> (u64, u64) {
        (self.frames.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }
}

impl LocalServer for InProcess {
    fn node(&self) -> u32 {
        self.shared.config.node.0
    }

    fn is_up(&self) -> bool {
        !self.stopped.load(Ordering::Relaxed)
    }

    fn call(&self, msg: Message) -> Answer {
        self.frames.fetch_add(1, Ordering::Relaxed);
        let shared = self.shared.clone();
        match msg {
            Message::Control(c) => Box::pin(async move { crate::conn::control(&shared, c).await }),
            Message::Piece(p) => {
                self.bytes.fetch_add(p.data.len() as u64, Ordering::Relaxed);
                Box::pin(std::future::ready(crate::conn::piece(&shared, p)))
            }
            other => {
                let why = format!("frame kind {:#04x} does not go to a server in the same process", other.kind());
                Box::pin(std::future::ready(Message::Error(WireError::new(ErrorCode::BadRequest, why), None)))
            }
        }
    }
}
