//! The benches: how close ganges comes to the best the hardware, with its faults, could have
//! done, on the disk model, on real disks, and in the simulator.
//!
//! - [`scan`]: `ganges bench scan` and the demo: read policies against the two ideals.
//! - [`write`]: `ganges bench write`: write policies against the same ideals, and replica
//!   completion.
//! - [`apps`]: `ganges bench apps`: River's query primitives, static and robust, against the
//!   ideal.
//! - [`transport`]: `ganges bench transport`: what the secret and TLS cost on the data path.
//! - [`live`]: `ganges bench dashboard`: what the live dashboard costs.
//! - [`real`]: real disks and real faults for the benches (`--real`): calibration and caps.
//! - [`sim`]: `ganges sim`, the papers' scenarios in virtual time.
//! - [`plot`]: SVG and PNG line charts.
//! - [`util`]: the benches' error type, progress bars, tables.

pub mod apps;
pub mod array;
pub mod live;
pub mod plot;
pub mod real;
pub mod scan;
pub mod sim;
pub mod transport;
pub mod util;
pub mod write;

pub use util::{BenchError, BenchResult};
