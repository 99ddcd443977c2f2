//! The disk model of FI-1 as a timing state machine.
//!
//! A server runs every read through its disk. With the model on, the server really reads the
//! bytes (through the page cache) and then holds the reply until the time this model says the
//! transfer ends: the model is a throttle in the I/O path, not a formula applied afterwards.
//!
//! The model serves one request at a time on a timeline: a request starts when it has arrived
//! and the previous one has finished, pays a seek when it is for a different file than the
//! one before (the head moves; gd-enhancements §3.2 and virtual-streams §3.3 measure exactly
//! this cost of serving two fragment copies at once), and then transfers at the effective
//! rate. Because the timeline is absolute, a driver that wakes a little late does not slow the
//! modelled disk down: the next queued request still starts when the last one ended.
//!
//! Faults change the effective rate at run time:
//! - `Factor { factor }`: the disk delivers `factor` of its peak (river's "performance fault";
//!   the papers' perturbations take about half, so benchmarks default to 0.5);
//! - `Competing { share }`: another stream repeatedly reads the disk (gd-enhancements §4.1) and
//!   takes `share` of its time. Our requests then transfer at `(1 - share)` of the peak *and*
//!   pay a seek every time, because the competitor moved the head in between.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Identifies a file on the disk (one fragment copy), to tell when the head must move.
pub type FileKey = u64;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskParams {
    /// Peak sequential transfer rate.
    pub rate_bytes_per_sec: f64,
    /// Cost of moving the head to another file.
    pub seek: Duration,
    /// How many requests the server hands to the disk at once. One (the default) leaves every
    /// choice to the server's scheduler until the moment the disk is free.
    pub queue_depth: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// The disk delivers `factor` (0 < factor <= 1) of its peak rate.
    Factor { factor: f64 },
    /// A competing reader takes `share` (0 <= share < 1) of the disk's time.
    Competing { share: f64 },
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultError {
    #[error("fault factor must be in (0, 1], got {0} (0.5 halves the disk)")]
    Factor(f64),
    #[error("competing share must be in [0, 1), got {0} (0.5 takes half the disk)")]
    Share(f64),
}

impl Fault {
    pub fn validate(&self) -> Result<(), FaultError> {
        match *self {
            Fault::Factor { factor } if !(factor > 0.0 && factor <= 1.0) => Err(FaultError::Factor(factor)),
            Fault::Competing { share } if !(0.0..1.0).contains(&share) => Err(FaultError::Share(share)),
            _ => Ok(()),
        }
    }

    /// The fraction of the peak rate the disk still delivers (what the ideals assume).
    pub fn rate_fraction(&self) -> f64 {
        match *self {
            Fault::Factor { factor } => factor,
            Fault::Competing { share } => 1.0 - share,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Factor { factor } => write!(f, "rate x{factor}"),
            Fault::Competing { share } => write!(f, "competing stream takes {:.0}%", share * 100.0),
        }
    }
}

/// When a request ran on the modelled disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Service {
    pub start: Time,
    pub done: Time,
    pub seeked: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskStats {
    pub requests: u64,
    pub bytes: u64,
    pub seeks: u64,
    /// Time the modelled disk spent seeking or transferring.
    pub busy_secs: f64,
}

#[derive(Clone, Debug)]
pub struct DiskModel {
    params: DiskParams,
    fault: Option<Fault>,
    busy_until: Time,
    head: Option<FileKey>,
    stats: DiskStats,
}

impl DiskModel {
    pub fn new(params: DiskParams) -> DiskModel {
        assert!(params.rate_bytes_per_sec > 0.0, "a disk model needs a positive rate");
        assert!(params.queue_depth >= 1, "queue depth is at least one");
        DiskModel { params, fault: None, busy_until: Time::ZERO, head: None, stats: DiskStats::default() }
    }

    pub fn params(&self) -> DiskParams {
        self.params
    }

    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    pub fn set_fault(&mut self, fault: Option<Fault>) -> Result<(), FaultError> {
        if let Some(f) = &fault {
            f.validate()?;
        }
        self.fault = fault;
        Ok(())
    }

    /// The rate requests transfer at now, after the fault.
    pub fn effective_rate(&self) -> f64 {
        self.params.rate_bytes_per_sec * self.fault.map_or(1.0, |f| f.rate_fraction())
    }

    /// The file the head was last on.
    pub fn head(&self) -> Option<FileKey> {
        self.head
    }

    pub fn stats(&self) -> DiskStats {
        self.stats
    }

    /// Run a request of `bytes` on `file` that arrived at `arrival`; returns when it ran.
    pub fn serve(&mut self, arrival: Time, file: FileKey, bytes: u64) -> Service {
        let start = arrival.max(self.busy_until);
        let competing = matches!(self.fault, Some(Fault::Competing { .. }));
        let seeked = competing || self.head.is_some_and(|h| h != file);
        let transfer = Duration::from_secs_f64(bytes as f64 / self.effective_rate());
        let cost = transfer + if seeked { self.params.seek } else { Duration::ZERO };
        let done = start + cost;
        self.busy_until = done;
        self.head = Some(file);
        self.stats.requests += 1;
        self.stats.bytes += bytes;
        self.stats.seeks += u64::from(seeked);
        self.stats.busy_secs += cost.as_secs_f64();
        Service { start, done, seeked }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk() -> DiskModel {
        DiskModel::new(DiskParams { rate_bytes_per_sec: 1_000_000.0, seek: Duration::from_millis(4), queue_depth: 1 })
    }

    #[test]
    fn back_to_back_requests_on_one_file_pay_no_seek() {
        let mut d = disk();
        let a = d.serve(Time::ZERO, 1, 10_000);
        assert_eq!(a.done, Time::from_secs_f64(0.01));
        // Queued before the first finished: starts exactly when it ends, even if the driver
        // asks late.
        let b = d.serve(Time::from_secs_f64(0.001), 1, 10_000);
        assert_eq!((b.start, b.done, b.seeked), (a.done, Time::from_secs_f64(0.02), false));
    }

    #[test]
    fn switching_files_costs_a_seek() {
        let mut d = disk();
        d.serve(Time::ZERO, 1, 10_000);
        let b = d.serve(Time::ZERO, 2, 10_000);
        assert!(b.seeked);
        assert_eq!(b.done, Time::from_secs_f64(0.024));
        assert_eq!(d.stats().seeks, 1);
    }

    #[test]
    fn an_idle_disk_starts_on_arrival() {
        let mut d = disk();
        d.serve(Time::ZERO, 1, 10_000);
        let b = d.serve(Time::from_secs_f64(1.0), 1, 10_000);
        assert_eq!(b.start, Time::from_secs_f64(1.0));
    }

    #[test]
    fn a_factor_fault_slows_transfers() {
        let mut d = disk();
        d.set_fault(Some(Fault::Factor { factor: 0.5 })).unwrap();
        assert_eq!(d.serve(Time::ZERO, 1, 10_000).done, Time::from_secs_f64(0.02));
        d.set_fault(None).unwrap();
        assert_eq!(d.effective_rate(), 1_000_000.0);
    }

    #[test]
    fn a_competing_stream_takes_its_share_and_moves_the_head() {
        let mut d = disk();
        d.set_fault(Some(Fault::Competing { share: 0.5 })).unwrap();
        let a = d.serve(Time::ZERO, 1, 10_000);
        assert!(a.seeked);
        assert_eq!(a.done, Time::from_secs_f64(0.024));
    }

    #[test]
    fn invalid_faults_are_refused() {
        let mut d = disk();
        assert_eq!(d.set_fault(Some(Fault::Factor { factor: 0.0 })), Err(FaultError::Factor(0.0)));
        assert_eq!(d.set_fault(Some(Fault::Factor { factor: 1.5 })), Err(FaultError::Factor(1.5)));
        assert!(d.set_fault(Some(Fault::Factor { factor: f64::NAN })).is_err());
        assert_eq!(d.set_fault(Some(Fault::Competing { share: 1.0 })), Err(FaultError::Share(1.0)));
        assert!(d.fault().is_none());
    }
}
