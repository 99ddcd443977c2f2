//! What a server knows of its primary consumers' progress (GD-3).

use super::*;

/// What a server knows of its *primary* consumers (those reading the copies it holds as
/// primary): their progress, which it reports to consumers reading its backup copies
/// (GD-3, gd-enhancements §3.2: "the backup-copy server keeps consumer i informed of
/// P(i+1)").
#[derive(Debug, Default)]
pub struct PrimaryTracker {
    /// Per dataset id: each primary stream's latest fraction and when it was heard.
    datasets: BTreeMap<u64, BTreeMap<StreamKey, (f64, Time)>>,
}

impl PrimaryTracker {
    /// A primary stream of `dataset` reported progress at `now`.
    pub fn note(&mut self, dataset: u64, stream: StreamKey, progress: Progress, now: Time) {
        let streams = self.datasets.entry(dataset).or_default();
        let entry = streams.entry(stream).or_insert((0.0, now));
        *entry = (entry.0.max(progress.fraction()), now);
    }

    /// The least progress among the dataset's primary streams heard from recently; `None`
    /// when nobody reads this server's primary copies (so it has capacity to spare).
    pub fn progress(&mut self, dataset: u64, now: Time) -> Option<f64> {
        let streams = self.datasets.get_mut(&dataset)?;
        streams.retain(|_, (_, seen)| now.since(*seen) < PRIMARY_STALE_AFTER);
        let least = streams
            .values()
            .map(|(f, _)| *f)
            .filter(|f| *f < 1.0)
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.min(f))));
        if streams.is_empty() {
            self.datasets.remove(&dataset);
        }
        least
    }

    /// Forget a closed connection's streams.
    pub fn forget_conn(&mut self, conn: u64) {
        for streams in self.datasets.values_mut() {
            streams.retain(|k, _| k.conn != conn);
        }
        self.datasets.retain(|_, s| !s.is_empty());
    }
}
