//! ganges-core: the decisions of ganges, with no I/O.
//!
//! Every choice the papers describe (which server a read goes to, which queued request a
//! server runs next, how long a disk takes, what the best possible time was) lives here as
//! plain data and state machines. Nothing in this crate reads a clock, draws ambient
//! randomness, touches a file or knows of tokio: time (`now`) and seeds are arguments. The
//! servers and clients drive these objects over real sockets and files; the simulator
//! (`ganges-sim`) drives the very same objects in virtual time.
//!
//! Modules, in the order data flows through them:
//! - [`units`]: sizes, rates and durations in human units (`64MiB`, `32MiB/s`, `4ms`).
//! - [`ids`], [`time`]: identifier newtypes and the `Time` instant policies are given.
//! - [`layout`]: where fragment copies live (LAY-1 chained declustering, LAY-2 mirrored
//!   groups, LAY-3 no replicas).
//! - [`shape`]: fragment sizes (LAY-4), blocks, logical partitions and their pieces.
//! - [`datagen`]: deterministic data generators (random bytes, 100-byte records).
//! - [`placement`]: which copies hold each block of a dataset written with a choice of copy
//!   (GW-1), and so each copy's presence map (GW-2).
//! - [`digest`]: the order-independent dataset digest that proves exactly-once delivery.
//! - [`disk`]: the disk model of FI-1 (bandwidth, seek, faults) as a timing state machine.
//! - [`link`]: a server's network link as a timing state machine (the network's disk model).
//! - [`fault`]: fault placement (best, worst, random) as in river §5.2.
//! - [`sched`]: server-side schedulers (FIFO; furthest behind, longest queue, runs).
//! - [`route`]: client-side read routing: the engine and every read policy (GD-1 to GD-9).
//! - [`handoff`]: GD-6 server request handoff: how many requests, which ones, when to ask.
//! - [`serve`]: a server's read queue around its scheduler and disk model.
//! - [`dq`]: the distributed queue (DQ-1): where a producer's next block goes, by credits.
//! - [`write`]: write policies: where each block a writer puts goes (GW-1).
//! - [`ceft`]: CW-1's rule (CEFT-PVFS): which node of a mirror pair gets the data first, the
//!   `/proc` and cgroup texts a node's load comes from, and its arithmetic; the write
//!   routings that use it are `route::ceft`.
//! - [`array`]: N-dimensional arrays (Panda): layouts, subchunking (AR-2), allocation of
//!   subchunks to servers (AR-3 to AR-5) and the copies of a reorganization (AR-1).
//! - [`commit`]: the commit rule: when an interrupted write is finished or rolled back.
//! - [`ideal`]: the two ideals, MOD-1 (River's model) and MOD-2 (layout-aware max-flow).
//! - [`measure`]: figures from a run's samples (adaptation times, ideals over phases).

pub mod array;
pub mod ceft;
pub mod commit;
pub mod crc;
pub mod datagen;
pub mod digest;
pub mod disk;
pub mod dq;
pub mod fault;
pub mod handoff;
pub mod ideal;
pub mod ids;
pub mod layout;
pub mod link;
pub mod measure;
pub mod meet;
pub mod parse;
pub mod placement;
pub mod route;
pub mod sched;
pub mod serve;
pub mod shape;
pub mod time;
pub mod units;
pub mod write;

pub use ids::{ConsumerId, FragmentId, NodeId};
pub use time::Time;
