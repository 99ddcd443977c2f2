//! The discrete-event core: a priority queue of timestamped events and the virtual clock.
//!
//! Events at the same instant run in the order they were scheduled (a sequence number breaks
//! ties), so a run depends only on its inputs and its seed: the same seed gives the same
//! result to the event. There are no threads and no wall clock.

use ganges_core::time::Time;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

/// A pending event in the heap: when, in what order, and where its payload waits. Payloads
/// stay put in a slab, so the heap moves 24-byte entries, not events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    at: Time,
    seq: u64,
    slot: u32,
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so the max-heap pops the earliest event, and the first scheduled on ties.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Pending events and the virtual clock.
#[derive(Debug)]
pub struct Events<E> {
    heap: BinaryHeap<Entry>,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
    seq: u64,
    now: Time,
    processed: u64,
}

impl<E> Default for Events<E> {
    fn default() -> Self {
        Events { heap: BinaryHeap::new(), slots: vec![], free: vec![], seq: 0, now: Time::ZERO, processed: 0 }
    }
}

impl<E> Events<E> {
    /// An empty queue whose clock starts at `now`.
    pub fn starting_at(now: Time) -> Self {
        Events { now, ..Events::default() }
    }

    /// The virtual time of the event being processed (or of the last one).
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedule `event` at `at`, which must not be in the past.
    pub fn at(&mut self, at: Time, event: E) {
        assert!(at >= self.now, "an event scheduled in the past ({at:?} < {:?})", self.now);
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(event);
                i
            }
            None => {
                self.slots.push(Some(event));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 pending events")
            }
        };
        self.heap.push(Entry { at, seq: self.seq, slot });
    }

    /// Schedule `event` after `delay` from now.
    pub fn after(&mut self, delay: Duration, event: E) {
        self.at(self.now + delay, event);
    }

    /// The next event, advancing the clock to it.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let e = self.heap.pop()?;
        self.now = e.at;
        self.processed += 1;
        let event = self.slots[e.slot as usize].take().expect("a pending entry has its event");
        self.free.push(e.slot);
        Some((e.at, event))
    }

    pub fn pending(&self) -> usize {
        self.heap.len()
    }

    /// Events processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn events_come_out_in_time_order_and_in_schedule_order_on_ties() {
        let mut q = Events::default();
        q.after(ms(5), "c");
        q.after(ms(1), "a");
        q.after(ms(5), "d");
        q.after(ms(1), "b");
        let order: Vec<&str> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert_eq!(q.now(), Time::ZERO + ms(5));
        assert_eq!(q.processed(), 4);
    }

    #[test]
    fn the_clock_moves_with_the_events() {
        let mut q = Events::default();
        q.after(ms(3), 1);
        let (t, _) = q.pop().unwrap();
        assert_eq!(t, Time::ZERO + ms(3));
        q.after(ms(2), 2);
        assert_eq!(q.pop().unwrap().0, Time::ZERO + ms(5), "relative to the new now");
        assert!(q.pop().is_none());
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_in_the_past_is_a_bug() {
        let mut q = Events::default();
        q.after(ms(3), ());
        q.pop();
        q.at(Time::ZERO, ());
    }

    proptest! {
        #[test]
        fn any_schedule_pops_sorted_and_stable(delays in proptest::collection::vec(0u64..50, 0..200)) {
            let mut q = Events::default();
            for (i, d) in delays.iter().enumerate() {
                q.after(ms(*d), i);
            }
            let mut last = (Time::ZERO, 0usize);
            let mut n = 0;
            while let Some((t, i)) = q.pop() {
                prop_assert!(t > last.0 || (t == last.0 && (n == 0 || i > last.1)));
                prop_assert_eq!(t, Time::ZERO + ms(delays[i]));
                last = (t, i);
                n += 1;
            }
            prop_assert_eq!(n, delays.len());
        }
    }
}
