//! A server's network link as a timing state machine, the network's counterpart of the disk
//! model ([`crate::disk`]): bytes the server receives or sends take their turn on one timeline
//! at the link's rate, received plus sent (a node's network stack shared by every flow, as
//! CEFT-PVFS measured: "Netperf and data server almost evenly share the TCP/IP bandwidth").
//!
//! A server with a modelled link holds each frame it reads until the link would have carried
//! it, and each frame it sends until the link is free for it: a throttle in the I/O path, and
//! through TCP's flow control a real one for the peer. Flows share it in the order their
//! frames come, so two busy connections get about half each.
//!
//! The simulator's network is built of the same model: one each way per endpoint (a full
//! duplex link), with the wire's latency between them (`ganges-sim/src/net.rs`).

use crate::time::Time;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct LinkModel {
    rate_bytes_per_sec: f64,
    busy_until: Time,
    bytes: u64,
}

impl LinkModel {
    pub fn new(rate_bytes_per_sec: f64) -> LinkModel {
        assert!(rate_bytes_per_sec > 0.0, "a link model needs a positive rate");
        LinkModel { rate_bytes_per_sec, busy_until: Time::ZERO, bytes: 0 }
    }

    /// Bytes carried so far, both ways.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Carry `bytes` that are ready at `now`; returns when the link has carried them.
    pub fn carry(&mut self, now: Time, bytes: u64) -> Time {
        self.carry_span(now, bytes).1
    }

    /// Carry `bytes` that are ready at `now`; returns when the link starts and finishes
    /// carrying them (the simulator's network starts a message across the wire when it
    /// starts on the sender's link).
    pub fn carry_span(&mut self, now: Time, bytes: u64) -> (Time, Time) {
        let start = now.max(self.busy_until);
        let took = Duration::from_secs_f64(bytes as f64 / self.rate_bytes_per_sec);
        self.busy_until = start + took;
        self.bytes += bytes;
        (start, self.busy_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    #[test]
    fn frames_take_turns_at_the_links_rate() {
        let mut l = LinkModel::new(100.0 * MB);
        // 1 MB at 100 MB/s: 10 ms; a second one ready at once waits for the first.
        assert_eq!(l.carry(Time::ZERO, 1_000_000), Time::from_secs_f64(0.010));
        assert_eq!(l.carry(Time::ZERO, 1_000_000), Time::from_secs_f64(0.020));
        // An idle link starts a frame when it is ready.
        assert_eq!(l.carry(Time::from_secs_f64(1.0), 500_000), Time::from_secs_f64(1.005));
        assert_eq!(l.bytes(), 2_500_000);
    }

    #[test]
    fn two_busy_flows_share_the_link() {
        let mut l = LinkModel::new(10.0 * MB);
        // Two flows each sending its next frame when the last is carried: alternate turns.
        let (mut a, mut b, mut a_bytes, mut b_bytes) = (Time::ZERO, Time::ZERO, 0u64, 0u64);
        while a.max(b) < Time::from_secs_f64(1.0) {
            if a <= b {
                a = l.carry(a, 100_000);
                a_bytes += 100_000;
            } else {
                b = l.carry(b, 100_000);
                b_bytes += 100_000;
            }
        }
        assert!(a_bytes.abs_diff(b_bytes) <= 100_000, "{a_bytes} {b_bytes}");
        assert!((a_bytes + b_bytes) as f64 <= 10.0 * MB + 200_000.0);
    }
}
