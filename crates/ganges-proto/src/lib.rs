//! ganges-proto: what travels between clients and storage servers, and what a dataset's
//! manifest says.
//!
//! Modules:
//! - [`frame`]: the frame header (length, version, kind, request id) and its limits.
//! - [`msg`]: every message, its binary layout, `encode` and `decode` (pure, no I/O).
//! - [`control`]: control requests and replies (JSON bodies): datasets, faults, stats.
//! - [`manifest`]: the immutable dataset manifest and dataset names.
//! - [`array`]: a collective array write's plan, and what an array adds to a manifest.
//! - [`io`]: reading and writing frames on async streams (tokio), kept apart from parsing
//!   (mini-redis's `read_frame` / `parse_frame` split) so the codec can be fuzzed alone.
//!
//! The wire, in one paragraph: one TCP connection per client-server pair; the client sends
//! `Hello` first; after that any number of requests may be in flight, each with a request id
//! the client chose, and replies come back in whatever order the server finishes them. Read
//! requests carry the consumer's progress (GD-1); read replies carry the server's queue length
//! and service time. Anything malformed, oversized or out of order gets an `Error` frame and
//! the connection is closed.

pub mod array;
pub mod control;
pub mod frame;
pub mod io;
pub mod manifest;
pub mod msg;
pub mod service;

pub use frame::{FrameHeader, ProtoError};
pub use manifest::{DatasetName, Manifest};
pub use msg::{ErrorCode, Message, WireError};
