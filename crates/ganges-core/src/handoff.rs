//! GD-6, server request handoff (virtual-streams §3.4): the decisions.
//!
//! A server that has run out of work asks a server holding copies of the same fragments for
//! part of its queue, and serves those requests itself, answering the consumers directly.
//! The busy server decides how many: the paper writes `N = N0 * B_fast / B_slow`, with N0
//! the busy server's queued requests and B the two servers' bandwidths. Taken literally
//! that asks for more than the busy server holds whenever the idle one is faster (and all
//! of them when they are equal), which only moves the queue. We take the share that makes
//! both finish together: the idle server serves x at B_fast while the busy one serves
//! N0 - x at B_slow, so `x = N0 * B_fast / (B_fast + B_slow)`, the diffusive split of the
//! paper's reference [13]. Nothing is handed off below `HANDOFF_MIN` requests: a handoff
//! costs a round trip and a seek on the helper.
//!
//! The requests handed off are the ones the busy server would serve last (the newest), so
//! the handoff does not reorder what it keeps.

use crate::ids::NodeId;
use crate::sched::JobId;
use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// The fewest requests worth handing off (the paper's "minimum number of requests
/// transferred at a time to offset the cost of transfer").
pub const HANDOFF_MIN: usize = 2;
/// After an ask that brought nothing, wait this long before asking the same server again:
/// an idle server must not flood busy ones with asks.
pub const ASK_BACKOFF: Duration = Duration::from_millis(20);

/// The fewest DQ appends worth giving back (GD-6 for writes, ours): one. An append costs
/// the helper no seek (it goes to the end of the helper's own log) and its data comes from
/// the writer, so a redirect costs only the writer's round trip.
pub const APPEND_HANDOFF_MIN: usize = 1;
/// How long a server that took redirected appends waits for them before it asks for work
/// again: the writers resend within a round trip; a writer that is gone must not keep the
/// server from asking forever.
pub const REDIRECT_WAIT: Duration = Duration::from_millis(50);

/// How many of the busy server's `queued` eligible requests the idle one takes.
pub fn share(queued: usize, rate_idle: f64, rate_busy: f64) -> usize {
    share_at_least(HANDOFF_MIN, queued, rate_idle, rate_busy)
}

/// [`share`], with `min` the fewest worth moving.
pub fn share_at_least(min: usize, queued: usize, rate_idle: f64, rate_busy: f64) -> usize {
    let min = min.max(1);
    if queued == 0 || rate_idle <= 0.0 {
        return 0;
    }
    let rate_busy = rate_busy.max(1e-9);
    let x = (queued as f64 * rate_idle / (rate_idle + rate_busy)).floor() as usize;
    // Keep at least one: the busy server is serving, and its queue is its pipeline.
    let x = x.min(queued - 1);
    if x >= min { x } else { 0 }
}

/// Which requests to hand off: the `n` newest among the eligible `(id, arrival)` pairs.
pub fn select(mut eligible: Vec<(JobId, Time)>, n: usize) -> Vec<JobId> {
    eligible.sort_by_key(|&(id, arrival)| (std::cmp::Reverse(arrival), std::cmp::Reverse(id)));
    eligible.into_iter().take(n).map(|(id, _)| id).collect()
}

/// An idle server's asking: round-robin over the peers holding copies of its fragments,
/// one ask at a time, backing off from a peer that had nothing to give.
#[derive(Debug, Default)]
pub struct Asker {
    next: usize,
    asking: Option<NodeId>,
    /// Per peer: not before this time.
    backoff: Vec<(NodeId, Time)>,
}

impl Asker {
    /// The server has nothing queued at `now`; whom to ask, if anyone.
    pub fn on_idle(&mut self, now: Time, peers: &[NodeId]) -> Option<NodeId> {
        if self.asking.is_some() || peers.is_empty() {
            return None;
        }
        for i in 0..peers.len() {
            let p = peers[(self.next + i) % peers.len()];
            let waiting = self.backoff.iter().any(|(n, until)| *n == p && now < *until);
            if !waiting {
                self.next = (self.next + i + 1) % peers.len();
                self.asking = Some(p);
                return Some(p);
            }
        }
        None
    }

    /// The answer from `peer`: it handed over `given` requests (0 if it had none to spare,
    /// or if the ask failed).
    pub fn on_answer(&mut self, now: Time, peer: NodeId, given: usize) {
        if self.asking == Some(peer) {
            self.asking = None;
        }
        self.backoff.retain(|(n, _)| *n != peer);
        if given == 0 {
            self.backoff.push((peer, now + ASK_BACKOFF));
        }
    }

    /// The earliest time after `now` a backed-off peer may be asked again (`None` if no
    /// peer is waiting: expired back-offs are no reason to wake up).
    pub fn next_retry(&self, now: Time) -> Option<Time> {
        self.backoff.iter().map(|(_, t)| *t).filter(|t| *t > now).min()
    }
}

/// A server's bandwidth as it serves: bytes over disk-busy time of its last
/// `WINDOW_SECS` of busy time. Servers note it down as they go ("servers periodically note
/// down its available bandwidth") and trade it in handoffs, and gd-plan and gd-rr plan on it.
///
/// A window, not an exponential average: a disk that turns slow is measured at its new speed
/// once a window of reads has run at it; an average of the last reads' rates followed a fault
/// far more slowly, and every plan made meanwhile gave the slow disk more than it could serve.
/// A window of busy time, not of bytes or reads, so that it means the same for any request
/// size (one seek moves a few reads' rate by much) and any disk speed: on a disk ten times
/// the model's, a window of bytes spans a tenth of the time, and there a kernel throttle,
/// which lets reads through in bursts, swung the measured speed of healthy disks by half.
#[derive(Debug, Clone)]
pub struct RateMeter {
    /// The last reads' bytes and busy seconds, newest last, holding at least `WINDOW_SECS`
    /// of busy time once the disk was busy that long.
    reads: VecDeque<(u64, f64)>,
    /// Their sums.
    bytes: u64,
    secs: f64,
    /// Bytes noted since the meter was made: a window of a slow disk's busy time can hold
    /// less than `FIRST_BYTES`, and the first MiB is what must have been read.
    total: u64,
    /// Whether it measures a real disk (`note_real`): a rate then needs a whole window.
    real: bool,
}

impl Default for RateMeter {
    fn default() -> Self {
        RateMeter { reads: VecDeque::new(), bytes: 0, secs: 0.0, total: 0, real: false }
    }
}

impl RateMeter {
    /// Busy time in the window: 8 MiB at the model's default 32 MiB/s, so that a seek moves
    /// the rate by under 2% (4 ms against 250 ms) and a fault is followed within half a second.
    pub const WINDOW_SECS: f64 = 0.25;
    /// No rate before this much was read: one read, seek included, is not a disk's speed.
    pub const FIRST_BYTES: u64 = 1 << 20;

    pub fn note(&mut self, bytes: u64, busy: Duration) {
        let secs = busy.as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        self.reads.push_back((bytes, secs));
        (self.bytes, self.secs, self.total) = (self.bytes + bytes, self.secs + secs, self.total + bytes);
        while let Some(&(b, s)) = self.reads.front()
            && self.secs - s >= Self::WINDOW_SECS
        {
            self.reads.pop_front();
            (self.bytes, self.secs) = (self.bytes - b, (self.secs - s).max(0.0));
        }
    }

    /// A read of a real disk: no rate until the meter holds a whole window. Under a kernel
    /// throttle one read is let through at once and the next waits a slice, so a figure over
    /// a few reads swings far above the disk's rate: on 8 real disks capped at 80-90 MB/s,
    /// servers reported 104-179 MB/s over their first reads, and gd-rr's consumers,
    /// delivered 90, found their primaries contended and read 4-15% of their bytes from
    /// backups with no fault, in most runs. A modelled disk's figure is exact from its first
    /// read, and the simulator's short scans need it early: with a whole window there too,
    /// gd-plan's least in `ganges sim generality` fell from 94.1% to 91.1%.
    pub fn note_real(&mut self, bytes: u64, busy: Duration) {
        self.real = true;
        self.note(bytes, busy);
    }

    pub fn rate(&self) -> Option<f64> {
        let enough = self.total >= Self::FIRST_BYTES && (!self.real || self.secs >= Self::WINDOW_SECS);
        (enough && self.secs > 0.0).then(|| self.bytes as f64 / self.secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_makes_both_servers_finish_together() {
        // Equal servers split the queue.
        assert_eq!(share(10, 1.0, 1.0), 5);
        // An idle server twice as fast takes two thirds.
        assert_eq!(share(9, 2.0, 1.0), 6);
        // The busy server keeps at least one; tiny queues are not worth a handoff.
        assert_eq!(share(3, 100.0, 1.0), 2);
        assert_eq!(share(2, 1.0, 1.0), 0);
        assert_eq!(share(1, 1.0, 1.0), 0);
        assert_eq!(share(10, 0.0, 1.0), 0);
        // A much slower helper takes nothing worth the trip.
        assert_eq!(share(10, 0.1, 1.0), 0);
        // Appends move one at a time, and the busy server still keeps one.
        assert_eq!(share_at_least(APPEND_HANDOFF_MIN, 2, 1.0, 1.0), 1);
        assert_eq!(share_at_least(APPEND_HANDOFF_MIN, 3, 1.0, 1.0), 1);
        assert_eq!(share_at_least(APPEND_HANDOFF_MIN, 4, 1.0, 1.0), 2);
        assert_eq!(share_at_least(APPEND_HANDOFF_MIN, 1, 100.0, 1.0), 0);
        // A slow disk's queue goes mostly to a fast helper.
        assert_eq!(share_at_least(APPEND_HANDOFF_MIN, 6, 2.0, 1.0), 4);
        assert_eq!(share_at_least(0, 2, 1.0, 1.0), 1, "a minimum of nothing is one");
    }

    #[test]
    fn the_newest_requests_are_handed_off() {
        let eligible = vec![(1, Time(10)), (2, Time(30)), (3, Time(20)), (4, Time(40))];
        assert_eq!(select(eligible, 2), vec![4, 2]);
        assert!(select(vec![], 3).is_empty());
    }

    #[test]
    fn an_idle_server_asks_one_peer_at_a_time_and_backs_off() {
        let mut a = Asker::default();
        let peers = [NodeId(1), NodeId(3)];
        assert_eq!(a.on_idle(Time::ZERO, &peers), Some(NodeId(1)));
        assert_eq!(a.on_idle(Time::ZERO, &peers), None, "one ask at a time");
        a.on_answer(Time::ZERO, NodeId(1), 0);
        assert_eq!(a.on_idle(Time::ZERO, &peers), Some(NodeId(3)));
        a.on_answer(Time::ZERO, NodeId(3), 0);
        assert_eq!(a.on_idle(Time::ZERO, &peers), None, "both backed off");
        assert_eq!(a.next_retry(Time::ZERO), Some(Time::ZERO + ASK_BACKOFF));
        let later = Time::ZERO + ASK_BACKOFF;
        assert_eq!(a.next_retry(later), None, "an expired back-off wakes nobody");
        assert!(a.on_idle(later, &peers).is_some());
    }

    #[test]
    fn a_real_disk_s_meter_gives_a_rate_only_over_a_whole_window() {
        const MIB: u64 = 1 << 20;
        let mut m = RateMeter::default();
        // A throttle lets a read through at once, then holds the next for a slice.
        m.note_real(MIB, Duration::from_millis(1));
        m.note_real(MIB, Duration::from_millis(100));
        assert_eq!(m.rate(), None, "2 MiB in 0.101 s is not yet a window");
        m.note_real(MIB, Duration::from_millis(1));
        m.note_real(MIB, Duration::from_millis(150));
        // A whole window (the first read left it as the last came in): 3 MiB in 0.251 s.
        assert!((m.rate().unwrap() - 3.0 * MIB as f64 / 0.251).abs() < 1e-3);
    }

    #[test]
    fn the_rate_meter_is_bytes_over_busy_time_of_the_last_window_of_busy_time() {
        const MIB: u64 = 1 << 20;
        let mut m = RateMeter::default();
        assert_eq!(m.rate(), None);
        m.note(MIB, Duration::ZERO);
        assert_eq!(m.rate(), None, "a read that took no time says nothing");
        // Not before a MiB: a 256 KiB read with a seek is not the disk's speed.
        m.note(MIB / 4, Duration::from_millis(12));
        assert_eq!(m.rate(), None);
        // Bytes over time, not a mean of rates.
        m.note(MIB / 4, Duration::from_millis(8));
        m.note(MIB / 2, Duration::from_millis(20));
        assert!((m.rate().unwrap() - MIB as f64 / 0.040).abs() < 1e-3);
        // A disk that turns half as fast is measured at its new speed after a window of busy
        // time, exactly, and not before, whatever the reads' size and the disk's speed.
        for (read, fast) in [(MIB, 32e6), (MIB / 4, 32e6), (64 << 10, 32e6), (MIB, 400e6)] {
            let mut m = RateMeter::default();
            for _ in 0..2000 {
                m.note(read, Duration::from_secs_f64(read as f64 / fast));
            }
            let slow = Duration::from_secs_f64(read as f64 / (fast / 2.0));
            let reads = (RateMeter::WINDOW_SECS / slow.as_secs_f64()).ceil() as u64;
            for i in 1..=reads {
                m.note(read, slow);
                let r = m.rate().unwrap();
                if i < reads {
                    assert!(r > fast / 2.0 * 1.0001, "{i} reads of {read} in: {r}");
                } else {
                    assert!((r / (fast / 2.0) - 1.0).abs() < 1e-6, "{r}");
                }
            }
        }
    }

    #[test]
    fn a_disk_slower_than_a_mib_per_window_is_measured_too() {
        // 64 KiB reads at 3.2 MiB/s: a window of 250 ms busy time holds 0.8 MiB.
        let mut m = RateMeter::default();
        let rate = 3.2 * 1024.0 * 1024.0;
        for _ in 0..15 {
            m.note(64 << 10, Duration::from_secs_f64(65536.0 / rate));
        }
        assert_eq!(m.rate(), None, "under a MiB read in all");
        m.note(64 << 10, Duration::from_secs_f64(65536.0 / rate));
        assert!((m.rate().expect("a MiB read") / rate - 1.0).abs() < 1e-6);
        for _ in 0..100 {
            m.note(64 << 10, Duration::from_secs_f64(65536.0 / rate));
        }
        assert!((m.rate().expect("still measured") / rate - 1.0).abs() < 1e-6);
    }
}
