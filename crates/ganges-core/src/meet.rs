//! Where the workers of a flow find each other (FL-3's workers as processes): each worker
//! tells one storage server its rank and the address it listens on, and hears back every
//! address known so far for its run. No coordinator of its own: the servers are already
//! there and every worker already reaches them.
//!
//! A server keeps a table of runs; a run is forgotten [`KEEP`] after its last word, so a
//! run whose workers died leaves nothing behind for long.

use crate::time::Time;
use std::collections::HashMap;
use std::time::Duration;

/// How long a run is remembered after its last worker spoke.
pub const KEEP: Duration = Duration::from_secs(600);
/// Workers of one run, at most.
pub const MAX_WORKERS: u32 = 4096;
/// Runs remembered at once, at most (a bound on what a peer can make a server hold).
pub const MAX_RUNS: usize = 1024;
/// Bytes of an address, at most.
pub const MAX_ADDR: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeetError {
    #[error("worker {rank} of {size}: ranks run from 0 to size - 1, and a run has 1 to {MAX_WORKERS} workers")]
    Rank { rank: u32, size: u32 },
    #[error("run {run:x} has {had} workers, and a worker says {got}: are two runs sharing an id?")]
    Size { run: u64, had: u32, got: u32 },
    #[error("run {run:x}: worker {rank} is at {had} already, and a second one says it is at {got}")]
    Taken { run: u64, rank: u32, had: String, got: String },
    #[error("an address of {0} bytes (at most {MAX_ADDR})")]
    Addr(usize),
    #[error("this server holds {MAX_RUNS} runs already; try again later")]
    Full,
}

#[derive(Debug)]
struct Meeting {
    addrs: Vec<Option<String>>,
    last: Time,
}

/// The runs a server has heard of, and their workers' addresses.
#[derive(Debug, Default)]
pub struct Meetings {
    runs: HashMap<u64, Meeting>,
}

impl Meetings {
    /// Worker `rank` of `size` of `run` listens at `addr`: every address of the run known
    /// now (all `Some` once every worker has spoken).
    pub fn meet(
        &mut self,
        run: u64,
        rank: u32,
        size: u32,
        addr: &str,
        now: Time,
    ) -> Result<Vec<Option<String>>, MeetError> {
        if size == 0 || size > MAX_WORKERS || rank >= size {
            return Err(MeetError::Rank { rank, size });
        }
        if addr.len() > MAX_ADDR {
            return Err(MeetError::Addr(addr.len()));
        }
        self.runs.retain(|_, m| now.0.saturating_sub(m.last.0) < KEEP.as_nanos() as u64);
        if !self.runs.contains_key(&run) && self.runs.len() >= MAX_RUNS {
            return Err(MeetError::Full);
        }
        let m = self.runs.entry(run).or_insert_with(|| Meeting { addrs: vec![None; size as usize], last: now });
        if m.addrs.len() != size as usize {
            return Err(MeetError::Size { run, had: m.addrs.len() as u32, got: size });
        }
        match &m.addrs[rank as usize] {
            Some(had) if had != addr => {
                return Err(MeetError::Taken { run, rank, had: had.clone(), got: addr.to_string() });
            }
            _ => m.addrs[rank as usize] = Some(addr.to_string()),
        }
        m.last = now;
        Ok(m.addrs.clone())
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn workers_hear_every_address_once_all_have_spoken() {
        let mut m = Meetings::default();
        assert_eq!(m.meet(7, 1, 3, "a:1", Time(0)).unwrap(), [None, Some("a:1".into()), None]);
        assert_eq!(m.meet(7, 0, 3, "a:0", Time(S)).unwrap(), [Some("a:0".into()), Some("a:1".into()), None]);
        let all = m.meet(7, 2, 3, "a:2", Time(2 * S)).unwrap();
        assert!(all.iter().all(Option::is_some));
        // Asking again is harmless; another run is its own.
        assert_eq!(m.meet(7, 1, 3, "a:1", Time(3 * S)).unwrap(), all);
        assert_eq!(m.meet(8, 0, 1, "b:0", Time(3 * S)).unwrap(), [Some("b:0".into())]);
    }

    #[test]
    fn a_confused_worker_is_refused_and_an_old_run_forgotten() {
        let mut m = Meetings::default();
        assert!(matches!(m.meet(1, 3, 3, "x", Time(0)), Err(MeetError::Rank { .. })));
        assert!(matches!(m.meet(1, 0, 0, "x", Time(0)), Err(MeetError::Rank { .. })));
        m.meet(1, 0, 2, "x:0", Time(0)).unwrap();
        assert!(matches!(m.meet(1, 1, 3, "x:1", Time(0)), Err(MeetError::Size { had: 2, got: 3, .. })));
        assert!(matches!(m.meet(1, 0, 2, "y:0", Time(0)), Err(MeetError::Taken { .. })));
        assert!(matches!(m.meet(1, 1, 2, &"x".repeat(300), Time(0)), Err(MeetError::Addr(300))));
        let later = Time(KEEP.as_nanos() as u64 + 1);
        assert_eq!(m.meet(2, 0, 1, "z", later).unwrap().len(), 1);
        assert_eq!(m.len(), 1, "run 1 forgotten");
        for run in 10..10 + MAX_RUNS as u64 {
            let _ = m.meet(run, 0, 2, "w", later);
        }
        assert_eq!(m.meet(99_999, 0, 2, "w", later), Err(MeetError::Full));
    }
}
