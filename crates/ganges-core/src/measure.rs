//! Figures computed from a run's samples, shared by the bench
//! on a real cluster and the simulator, so both measure the same way.

/// Consumers' delivered bytes are sampled this often.
pub const SAMPLE_SECS: f64 = 0.1;
/// A consumer's rate is measured over this many samples (500 ms).
pub const RATE_WINDOW_SAMPLES: usize = 5;
/// Adapted: the slowest consumer's rate is within this fraction of its new ideal rate.
pub const ADAPTED_WITHIN: f64 = 0.10;

/// A change of the faults in force: at `.0` seconds, faults on (`true`) or off.
pub type Change = (f64, bool);

/// The ideal time of a run whose faults come and go: each phase moves data at that phase's
/// ideal throughput (`total / t_free` without the faults, `total / t_fault` with them).
pub fn scheduled_ideal(total: f64, t_free: f64, t_fault: f64, changes: &[Change]) -> f64 {
    let (x_free, x_fault) = (total / t_free, total / t_fault);
    let mut left = total;
    let mut t = 0.0;
    let mut on = false;
    for &(at, faults_on) in changes {
        let x = if on { x_fault } else { x_free };
        if left <= x * (at - t) {
            return t + left / x;
        }
        left -= x * (at - t);
        t = at;
        on = faults_on;
    }
    t + left / if on { x_fault } else { x_free }
}

/// A run's consumers sampled over time, with what the adaptation measure compares them with.
#[derive(Clone, Copy, Debug)]
pub struct Sampled<'a> {
    /// When the faults came and went.
    pub changes: &'a [Change],
    /// `delivered[i][k]`: consumer i's bytes at `k * sample_secs`.
    pub delivered: &'a [Vec<u64>],
    pub sample_secs: f64,
    /// Each consumer's ideal rate (bytes/s) with the faults on, and with them off.
    pub ideal_faulty: &'a [f64],
    pub ideal_free: &'a [f64],
    /// Each consumer's finish time in seconds.
    pub finished: &'a [f64],
}

impl Sampled<'_> {
    /// The adaptation time after each change: from the change to the first sample after
    /// which the slowest consumer's rate over `RATE_WINDOW_SAMPLES` stays within
    /// `ADAPTED_WITHIN` of its ideal rate for the new phase, until the next change or the
    /// first consumer finishes. `None`: it never did.
    pub fn adaptation_times(&self) -> Vec<Option<f64>> {
        let (ticks, w, dt) = (self.ticks(), RATE_WINDOW_SAMPLES, self.sample_secs);
        let first_finish = self.finished.iter().copied().fold(f64::INFINITY, f64::min);
        self.changes
            .iter()
            .enumerate()
            .map(|(ci, &(at, faults_on))| {
                let horizon = self.changes.get(ci + 1).map_or(first_finish, |c| c.0).min(first_finish);
                // Windows wholly after the change, ending before the horizon.
                let first = ((at / dt).ceil() as usize + w).min(ticks);
                let last = ((horizon / dt).floor() as usize).min(ticks.saturating_sub(1));
                if first > last {
                    return None;
                }
                let ok = |k: usize| (self.slowest_ratio(k, faults_on) - 1.0).abs() <= ADAPTED_WITHIN;
                (first..=last).find(|&k| (k..=last).all(ok)).map(|k| k as f64 * dt - at)
            })
            .collect()
    }

    /// The measure over the whole run, for plots: at the end of every window that lies
    /// within one phase (windows straddling a change are left out), the slowest running
    /// consumer's rate as a fraction of its ideal rate in that phase. With no `changes`, the
    /// faults hold throughout. As (seconds, fraction) points.
    pub fn slowest_over_time(&self) -> Vec<(f64, f64)> {
        let (w, dt) = (RATE_WINDOW_SAMPLES, self.sample_secs);
        let on_at =
            |t: f64| self.changes.is_empty() || self.changes.iter().rev().find(|c| c.0 <= t).is_some_and(|c| c.1);
        (w..self.ticks())
            .filter_map(|k| {
                let t = k as f64 * dt;
                let on = on_at(t);
                if on != on_at(t - w as f64 * dt) {
                    return None;
                }
                let slowest = self.slowest_ratio(k, on);
                slowest.is_finite().then_some((t, slowest))
            })
            .collect()
    }

    fn ticks(&self) -> usize {
        self.delivered.iter().map(Vec::len).min().unwrap_or(0)
    }

    /// The slowest consumer still reading at sample `k` (not finished before it): its rate
    /// over the `RATE_WINDOW_SAMPLES` window that ends there, as a fraction of its ideal rate
    /// with the faults on or off. Infinite when every consumer has finished.
    fn slowest_ratio(&self, k: usize, faults_on: bool) -> f64 {
        let (w, dt) = (RATE_WINDOW_SAMPLES, self.sample_secs);
        let ideal = if faults_on { self.ideal_faulty } else { self.ideal_free };
        (0..self.delivered.len())
            .filter(|&i| self.finished[i] >= k as f64 * dt)
            .map(|i| {
                let d = &self.delivered[i];
                d[k].saturating_sub(d[k - w]) as f64 / (w as f64 * dt) / ideal[i]
            })
            .fold(f64::INFINITY, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ideal_integrates_phases() {
        // 100 bytes; 10 B/s free, 5 B/s faulty; faulty from 2 s to 6 s: 20 by 2 s, 20 more
        // by 6 s, the last 60 in 6 s.
        assert!((scheduled_ideal(100.0, 10.0, 20.0, &[(2.0, true), (6.0, false)]) - 12.0).abs() < 1e-9);
        assert!((scheduled_ideal(100.0, 10.0, 20.0, &[]) - 10.0).abs() < 1e-9);
        assert!((scheduled_ideal(100.0, 10.0, 20.0, &[(0.0, true)]) - 20.0).abs() < 1e-9);
    }

    /// A consumer at `before` B/s until `switch` s, then `after`, sampled every 0.1 s.
    fn series(before: f64, after: f64, switch: f64, secs: f64) -> Vec<u64> {
        (0..=(secs * 10.0) as usize)
            .map(|k| {
                let t = k as f64 / 10.0;
                (before * t.min(switch) + after * (t - switch).max(0.0)).round() as u64
            })
            .collect()
    }

    /// Consumers sampled every 100 ms whose ideal rate is 100 B/s, 50 with the faults on.
    fn sampled<'a>(changes: &'a [Change], delivered: &'a [Vec<u64>], finished: &'a [f64]) -> Sampled<'a> {
        const FAULTY: [f64; 2] = [50.0; 2];
        const FREE: [f64; 2] = [100.0; 2];
        let n = delivered.len();
        Sampled { changes, delivered, sample_secs: 0.1, ideal_faulty: &FAULTY[..n], ideal_free: &FREE[..n], finished }
    }

    #[test]
    fn adaptation_is_the_time_until_the_slowest_stays_near_its_share() {
        // Two consumers, ideal 100 B/s each free and 50 with the fault from 1 s. One drops to
        // 50 at once; the other drops to 20 and only recovers to 50 at 2 s.
        let a = series(100.0, 50.0, 1.0, 5.0);
        let mut b = series(100.0, 20.0, 1.0, 5.0);
        let at2 = b[20];
        for (k, v) in b.iter_mut().enumerate().skip(21) {
            *v = at2 + (50.0 * (k - 20) as f64 / 10.0) as u64;
        }
        let times = sampled(&[(1.0, true)], &[a, b], &[9.0, 9.0]).adaptation_times();
        let t = times[0].expect("it adapted");
        assert!((t - 1.5).abs() < 1e-9, "a full window after 2 s: {t}");
    }

    #[test]
    fn the_slowest_over_time_skips_windows_across_a_change_and_finished_consumers() {
        // Two consumers at 100 B/s, ideal 100 free and 50 with the fault from 1 s to 2 s;
        // the second finishes at 2.5 s.
        let a = series(100.0, 100.0, 1.0, 4.0);
        let mut b = series(100.0, 100.0, 1.0, 4.0);
        for v in b.iter_mut().skip(25) {
            *v = 250;
        }
        let points = sampled(&[(1.0, true), (2.0, false)], &[a, b], &[9.0, 2.5]).slowest_over_time();
        let at = |t: f64| points.iter().find(|p| (p.0 - t).abs() < 1e-9).map(|p| p.1);
        assert_eq!(at(0.5), Some(1.0));
        assert_eq!(at(1.2), None, "the window 0.7 to 1.2 s straddles the fault's start");
        assert_eq!(at(1.5), Some(2.0), "100 B/s against 50");
        assert_eq!(at(3.0), Some(1.0), "the finished consumer's 0 B/s does not count");
    }

    #[test]
    fn never_adapting_is_none() {
        let a = series(100.0, 10.0, 1.0, 5.0);
        let times = sampled(&[(1.0, true)], &[a], &[9.0]).adaptation_times();
        assert_eq!(times, [None]);
    }
}
