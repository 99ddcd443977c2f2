//! Python values to ganges's and back: sizes and rates as numbers or strings ("1GiB",
//! "50MiB/s"), policy names, progress callbacks, and reports as plain dicts.

use crate::errors::invalid;
use ganges_client::dataset::ProgressFn;
use ganges_core::units::{ByteSize, Dur, Rate};
use pyo3::prelude::*;
use serde::Serialize;
use std::str::FromStr;
use std::sync::Arc;

/// A size: an int of bytes, or a string with a unit ("64MiB", "1GiB", "4096").
#[derive(Debug, FromPyObject)]
pub enum SizeArg {
    Bytes(u64),
    Text(String),
}

impl SizeArg {
    pub fn bytes(&self, what: &str) -> PyResult<u64> {
        match self {
            SizeArg::Bytes(b) => Ok(*b),
            SizeArg::Text(s) => ByteSize::from_str(s).map(|b| b.0).map_err(|e| invalid(format!("{what} {s:?}: {e}"))),
        }
    }

    /// A block size: 4 KiB to 16 MiB, as every dataset's.
    pub fn block_bytes(&self) -> PyResult<u32> {
        let b = self.bytes("block_size")?;
        u32::try_from(b).map_err(|_| invalid(format!("block_size {b} is out of range: use 4KiB to 16MiB")))
    }
}

/// A rate: a number of bytes per second, or a string ("50MiB/s").
#[derive(Debug, FromPyObject)]
pub enum RateArg {
    PerSec(f64),
    Text(String),
}

impl RateArg {
    pub fn bytes_per_sec(&self, what: &str) -> PyResult<f64> {
        match self {
            RateArg::PerSec(r) => Ok(*r),
            RateArg::Text(s) => Rate::from_str(s).map(|r| r.0).map_err(|e| invalid(format!("{what} {s:?}: {e}"))),
        }
    }
}

/// A duration: seconds as a number, or a string ("5ms").
#[derive(Debug, FromPyObject)]
pub enum DurArg {
    Secs(f64),
    Text(String),
}

impl DurArg {
    pub fn duration(&self, what: &str) -> PyResult<std::time::Duration> {
        match self {
            DurArg::Secs(s) if s.is_finite() && *s >= 0.0 => Ok(std::time::Duration::from_secs_f64(*s)),
            DurArg::Secs(s) => Err(invalid(format!("{what} {s}: a duration is a number of seconds, 0 or more"))),
            DurArg::Text(s) => Dur::from_str(s).map(|d| d.0).map_err(|e| invalid(format!("{what} {s:?}: {e}"))),
        }
    }
}

/// Parse a name the Rust side knows (a policy, a layout), or say what it may be.
pub fn parse<T: FromStr>(what: &str, s: &str) -> PyResult<T>
where
    T::Err: std::fmt::Display,
{
    T::from_str(s).map_err(|e| invalid(format!("{what} {s:?}: {e}")))
}

pub fn dataset_name(s: &str) -> PyResult<ganges_proto::manifest::DatasetName> {
    parse("dataset name", s)
}

/// A Python callable called with each increment of bytes done (tqdm's `update` works). An
/// exception it raises is reported as unraisable and does not stop the transfer.
pub fn progress(cb: Option<Py<PyAny>>) -> Option<ProgressFn> {
    let cb = cb?;
    Some(Arc::new(move |n: u64| {
        Python::attach(|py| {
            if let Err(e) = cb.call1(py, (n,)) {
                e.write_unraisable(py, Some(cb.bind(py)));
            }
        })
    }))
}

/// Any serializable report as plain Python values (dicts, lists, numbers, strings).
pub fn to_python<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| crate::errors::GangesError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}
