//! The failed-handshake limiter: an address that fails the handshake too often is refused
//! for a while, before any work is done for it. Pure: time is passed in.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failed handshakes from one address, within [`FAILURE_WINDOW`], after which it is refused.
/// Enough for a user who mistypes a secret path a few times; a guesser gets a handful of
/// tries per window instead of thousands a second.
pub const FAILURES_MAX: usize = 8;
/// The window failures are counted over, and how long a refused address stays refused.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(10);
/// Addresses remembered at most; past it the one seen longest ago is forgotten, so a flood
/// of addresses cannot grow the server's memory.
pub const ADDRESSES_MAX: usize = 4096;

#[derive(Debug, Default)]
pub struct Limiter {
    /// Recent failures per address, oldest first (at most `FAILURES_MAX` kept).
    failures: BTreeMap<IpAddr, Vec<Instant>>,
}

impl Limiter {
    /// Whether `ip` may try a handshake at `now`; if not, how long until it may.
    pub fn check(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let Some(times) = self.failures.get_mut(&ip) else { return Ok(()) };
        times.retain(|t| now.saturating_duration_since(*t) < FAILURE_WINDOW);
        if times.len() >= FAILURES_MAX {
            return Err(FAILURE_WINDOW.saturating_sub(now.saturating_duration_since(times[0])));
        }
        if times.is_empty() {
            self.failures.remove(&ip);
        }
        Ok(())
    }

    /// `ip` failed a handshake at `now`.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) {
        if !self.failures.contains_key(&ip) && self.failures.len() >= ADDRESSES_MAX {
            let oldest = self.failures.iter().min_by_key(|(_, t)| t.last().copied()).map(|(ip, _)| *ip);
            if let Some(old) = oldest {
                self.failures.remove(&old);
            }
        }
        let times = self.failures.entry(ip).or_default();
        times.push(now);
        if times.len() > FAILURES_MAX {
            times.remove(0);
        }
    }

    /// Addresses with failures remembered.
    pub fn len(&self) -> usize {
        self.failures.len()
    }

    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_failures_until_the_window_passes() {
        let (mut l, t0) = (Limiter::default(), Instant::now());
        let (bad, good): (IpAddr, IpAddr) = ("10.0.0.9".parse().unwrap(), "10.0.0.1".parse().unwrap());
        for i in 0..FAILURES_MAX {
            assert!(l.check(bad, t0).is_ok(), "try {i}");
            l.failed(bad, t0 + Duration::from_millis(i as u64));
        }
        let wait = l.check(bad, t0 + Duration::from_secs(1)).unwrap_err();
        assert!(wait <= FAILURE_WINDOW && wait > Duration::from_secs(8), "{wait:?}");
        assert!(l.check(good, t0).is_ok(), "others are not refused");
        assert!(l.check(bad, t0 + FAILURE_WINDOW + Duration::from_millis(10)).is_ok());
        assert!(l.is_empty(), "an address whose failures expired is forgotten");
    }

    #[test]
    fn memory_stays_bounded_under_a_flood_of_addresses() {
        let (mut l, t0) = (Limiter::default(), Instant::now());
        for i in 0..(ADDRESSES_MAX as u32 + 100) {
            l.failed(IpAddr::from(i.to_be_bytes()), t0 + Duration::from_micros(i as u64));
        }
        assert_eq!(l.len(), ADDRESSES_MAX);
    }
}
