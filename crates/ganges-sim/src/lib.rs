//! ganges-sim: the event-driven simulator (SIM-1 to SIM-3; river §4.3).
//!
//! It runs the *same* policy objects as the servers and clients, in virtual time: the read
//! engine and every read policy, the server schedulers, the disk model, the primary tracker,
//! the handoff decisions, and the distributed queue's routing and credits, all from
//! `ganges-core`. What it adds is only what the real system gets from the operating system:
//! a clock ([`event`]), the network ([`net`]), and the drivers that feed the policies their
//! events ([`scan`] for reads, [`dq`] for distributed-queue transfers). [`scenario`] holds the
//! figures of the papers, each set against the ideal models; [`hunt`] runs seeded random
//! schedules of crashes, lost connections, corrupt blocks and slow disks against scans and
//! checks the invariants after every event.
//!
//! A simulation uses no threads and no wall clock; its randomness is seeded. The same inputs
//! and seed give the same result, to the event.

pub mod dq;
pub mod event;
pub mod hunt;
pub mod net;
pub mod scan;
pub mod scenario;

pub use scan::SimError;
