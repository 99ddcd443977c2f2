//! The network: one full-duplex link per endpoint, with a bandwidth and a latency.
//!
//! A message of `b` bytes from A to B occupies A's outgoing link for `b / rate`, crosses the
//! wire in `latency`, and occupies B's incoming link for `b / rate` (cut-through: an
//! uncontended message arrives `latency + b / rate` after it leaves). Each link sends in
//! order, so messages between two endpoints arrive in the order sent. A link with no rate
//! limit (`rate_bytes_per_sec = None`) only adds the latency.

use ganges_core::link::LinkModel;
use ganges_core::time::Time;
use std::time::Duration;

/// The bytes a small message (a request, a notice, a cancel) takes on the wire.
pub const HEADER_BYTES: u64 = 64;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetParams {
    /// Each endpoint's link speed, each way; `None` for no limit.
    pub rate_bytes_per_sec: Option<f64>,
    pub latency: Duration,
}

impl NetParams {
    /// A fast local network: no bandwidth limit, 50 µs each way.
    pub const LOCAL: NetParams = NetParams { rate_bytes_per_sec: None, latency: Duration::from_micros(50) };
}

#[derive(Debug)]
pub struct Network {
    params: NetParams,
    /// Each endpoint's link out and in (`ganges-core`'s link model each way), or none for a
    /// network with no rate limit.
    links: Option<Vec<[LinkModel; 2]>>,
    bytes: u64,
}

impl Network {
    pub fn new(endpoints: usize, params: NetParams) -> Network {
        let links = params.rate_bytes_per_sec.map(|r| {
            assert!(r > 0.0, "a link needs a positive rate");
            vec![[LinkModel::new(r), LinkModel::new(r)]; endpoints]
        });
        Network { params, links, bytes: 0 }
    }

    /// Send `bytes` from `from` to `to` at `now`; returns when the message has arrived.
    pub fn send(&mut self, now: Time, from: usize, to: usize, bytes: u64) -> Time {
        self.send_span(now, from, to, bytes).0
    }

    /// [`Network::send`], and when the sender's link has carried the message (`now` on a
    /// network with no rate limit): a server's link meter reads it.
    pub fn send_span(&mut self, now: Time, from: usize, to: usize, bytes: u64) -> (Time, Time) {
        self.bytes += bytes;
        let latency = self.params.latency;
        let Some(links) = self.links.as_mut() else { return (now + latency, now) };
        let (left, off) = links[from][0].carry_span(now, bytes);
        (links[to][1].carry(left + latency, bytes), off)
    }

    /// Bytes sent so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn t(ms: f64) -> Time {
        Time::from_secs_f64(ms / 1000.0)
    }

    #[test]
    fn an_uncontended_message_takes_latency_plus_transfer() {
        let mut n = Network::new(2, NetParams { rate_bytes_per_sec: Some(MB), latency: Duration::from_millis(1) });
        assert_eq!(n.send(Time::ZERO, 0, 1, 1000), t(2.0));
    }

    #[test]
    fn two_senders_share_the_receivers_link() {
        let mut n = Network::new(3, NetParams { rate_bytes_per_sec: Some(MB), latency: Duration::ZERO });
        assert_eq!(n.send(Time::ZERO, 0, 2, 1000), t(1.0));
        assert_eq!(n.send(Time::ZERO, 1, 2, 1000), t(2.0), "waits for the first on 2's link");
    }

    #[test]
    fn one_sender_sends_in_order() {
        let mut n = Network::new(3, NetParams { rate_bytes_per_sec: Some(MB), latency: Duration::from_millis(1) });
        let a = n.send(Time::ZERO, 0, 1, 1000);
        let b = n.send(Time::ZERO, 0, 2, 10);
        assert!(b >= a, "the small message leaves after the big one");
        let c = n.send(Time::ZERO, 0, 1, 10);
        assert!(c >= a);
    }

    #[test]
    fn without_a_rate_only_latency_counts() {
        let mut n = Network::new(2, NetParams::LOCAL);
        assert_eq!(n.send(Time::ZERO, 0, 1, 1 << 30), Time::ZERO + Duration::from_micros(50));
        assert_eq!(n.bytes(), 1 << 30);
    }
}
