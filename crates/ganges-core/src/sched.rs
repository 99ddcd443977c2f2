//! Server-side schedulers: which queued request the disk runs next.
//!
//! A server holds requests from several consumers (under chained declustering, the consumers
//! whose primary or backup copy it stores). When its disk is free it asks its scheduler for
//! the next one. Two schedulers:
//! - [`Fifo`]: arrival order. The baseline; what a plain file server does.
//! - [`FurthestBehind`]: GD's producer side (river §3.3): serve the consumer whose progress is
//!   lowest, so a consumer slowed by its other server catches up here. Progress is reported on
//!   every request; its metric is the consumer's choice, bytes received (GD-1) or the fraction
//!   of its own partition received (GD-2, gd-enhancements §2.3.2 and §3.3), so consumers with
//!   unequal partitions finish together. Ties go to the stream whose next request is on the
//!   file under the disk head (no seek), then to the oldest request. Besides the progress on
//!   each request, consumers report progress between requests (`update_progress`), so a
//!   server compares fresh figures even for a consumer it has not served for a while.
//!
//! Schedulers are pure: the server feeds them jobs and the disk head, and carries out the
//! choice; the simulator can drive the same objects.

use crate::disk::FileKey;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;

pub type JobId = u64;

/// One consumer's stream of requests at one server: the connection it came on and the
/// stream id the client chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamKey {
    pub conn: u64,
    pub stream: u64,
}

/// How a consumer measures its progress (chosen by its read policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgressMetric {
    /// Bytes received so far (GD-1).
    Bytes,
    /// Fraction of the consumer's own partition received (GD-2).
    Fraction,
}

/// A consumer's progress as carried on each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub metric: ProgressMetric,
}

impl Progress {
    /// The value schedulers compare: lower is further behind.
    pub fn key(&self) -> f64 {
        match self.metric {
            ProgressMetric::Bytes => self.done_bytes as f64,
            ProgressMetric::Fraction => {
                if self.total_bytes == 0 {
                    1.0
                } else {
                    self.done_bytes as f64 / self.total_bytes as f64
                }
            }
        }
    }
}

/// A queued request, as much of it as scheduling needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub stream: StreamKey,
    pub file: FileKey,
    pub bytes: u64,
    pub progress: Progress,
    pub arrival: Time,
}

pub trait Scheduler: Send + fmt::Debug {
    fn name(&self) -> &'static str;
    fn push(&mut self, job: Job);
    /// Remove a queued job (cancelled, or its connection closed). False if not queued.
    fn remove(&mut self, id: JobId) -> bool;
    /// The job the disk should run next, given the file under the head.
    fn pop(&mut self, now: Time, head: Option<FileKey>) -> Option<Job>;
    /// A consumer reported progress without a request (it received data from elsewhere).
    fn update_progress(&mut self, _stream: StreamKey, _progress: Progress) {}
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    Fifo,
    FurthestBehind,
}

impl SchedulerKind {
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::Fifo => Box::<Fifo>::default(),
            SchedulerKind::FurthestBehind => Box::<FurthestBehind>::default(),
        }
    }
}

impl FromStr for SchedulerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(SchedulerKind::Fifo),
            "furthest-behind" | "progress" => Ok(SchedulerKind::FurthestBehind),
            _ => Err(format!(
                "unknown scheduler `{s}` (use fifo or furthest-behind)"
            )),
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SchedulerKind::Fifo => "fifo",
            SchedulerKind::FurthestBehind => "furthest-behind",
        })
    }
}

/// Arrival order.
#[derive(Debug, Default)]
pub struct Fifo {
    queue: VecDeque<Job>,
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn push(&mut self, job: Job) {
        self.queue.push_back(job);
    }
    fn remove(&mut self, id: JobId) -> bool {
        match self.queue.iter().position(|j| j.id == id) {
            Some(i) => {
                self.queue.remove(i);
                true
            }
            None => false,
        }
    }
    fn pop(&mut self, _now: Time, _head: Option<FileKey>) -> Option<Job> {
        self.queue.pop_front()
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

#[derive(Debug)]
struct StreamQueue {
    jobs: VecDeque<Job>,
    /// The highest progress this stream has reported: requests can be reordered in flight
    /// only across streams, but a misbehaving client must not make progress go backwards.
    progress_key: f64,
}

/// GD's producer-side scheduler: the consumer furthest behind first.
#[derive(Debug, Default)]
pub struct FurthestBehind {
    streams: BTreeMap<StreamKey, StreamQueue>,
    where_is: BTreeMap<JobId, StreamKey>,
}

impl FurthestBehind {
    pub fn assert_invariants(&self) {
        let queued: usize = self.streams.values().map(|s| s.jobs.len()).sum();
        assert_eq!(queued, self.where_is.len());
        assert!(
            self.streams.values().all(|s| !s.jobs.is_empty()),
            "no empty stream kept"
        );
    }
}

impl Scheduler for FurthestBehind {
    fn name(&self) -> &'static str {
        "furthest-behind"
    }

    fn push(&mut self, job: Job) {
        let key = job.progress.key();
        let q = self
            .streams
            .entry(job.stream)
            .or_insert_with(|| StreamQueue {
                jobs: VecDeque::new(),
                progress_key: key,
            });
        q.progress_key = q.progress_key.max(key);
        q.jobs.push_back(job);
        self.where_is.insert(job.id, job.stream);
    }

    fn remove(&mut self, id: JobId) -> bool {
        let Some(stream) = self.where_is.remove(&id) else {
            return false;
        };
        let q = self
            .streams
            .get_mut(&stream)
            .expect("where_is names a live stream");
        q.jobs.retain(|j| j.id != id);
        if q.jobs.is_empty() {
            self.streams.remove(&stream);
        }
        true
    }

    fn pop(&mut self, _now: Time, head: Option<FileKey>) -> Option<Job> {
        // Lowest progress; then no seek; then oldest. A linear pass: a server has a handful of
        // consumers per scan (R under chained declustering).
        let mut best: Option<(&StreamKey, &StreamQueue)> = None;
        for (key, q) in &self.streams {
            let better = match best {
                None => true,
                Some((_, b)) => {
                    let (qk, bk) = (q.progress_key, b.progress_key);
                    if qk != bk {
                        qk < bk
                    } else {
                        let q_on_head = Some(q.jobs[0].file) == head;
                        let b_on_head = Some(b.jobs[0].file) == head;
                        if q_on_head != b_on_head {
                            q_on_head
                        } else {
                            q.jobs[0].arrival < b.jobs[0].arrival
                        }
                    }
                }
            };
            if better {
                best = Some((key, q));
            }
        }
        let key = *best?.0;
        let q = self.streams.get_mut(&key).expect("chosen above");
        let job = q.jobs.pop_front().expect("streams kept non-empty");
        if q.jobs.is_empty() {
            self.streams.remove(&key);
        }
        self.where_is.remove(&job.id);
        Some(job)
    }

    fn update_progress(&mut self, stream: StreamKey, progress: Progress) {
        if let Some(q) = self.streams.get_mut(&stream) {
            q.progress_key = q.progress_key.max(progress.key());
        }
    }

    fn len(&self) -> usize {
        self.where_is.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(
        id: JobId,
        stream: u64,
        file: FileKey,
        done: u64,
        total: u64,
        metric: ProgressMetric,
    ) -> Job {
        Job {
            id,
            stream: StreamKey { conn: 1, stream },
            file,
            bytes: 10,
            progress: Progress {
                done_bytes: done,
                total_bytes: total,
                metric,
            },
            arrival: Time(id),
        }
    }

    fn bytes_job(id: JobId, stream: u64, done: u64) -> Job {
        job(id, stream, stream, done, 1000, ProgressMetric::Bytes)
    }

    #[test]
    fn fifo_keeps_arrival_order() {
        let mut s = Fifo::default();
        for id in 0..3 {
            s.push(bytes_job(id, id % 2, 1000 - id));
        }
        assert!(s.remove(1));
        assert!(!s.remove(1));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 0);
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
        assert!(s.pop(Time::ZERO, None).is_none());
    }

    /// River §3.3: C1 has 100 blocks, C2 200; C2 gets nothing until C1 catches up.
    #[test]
    fn the_consumer_furthest_behind_is_served_until_it_catches_up() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 2, 200));
        s.push(bytes_job(2, 2, 200));
        s.push(bytes_job(3, 1, 100));
        s.push(bytes_job(4, 1, 100));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 3);
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 4);
        // Consumer 1 now reports it caught up past consumer 2.
        s.push(bytes_job(5, 1, 250));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 1);
        s.assert_invariants();
    }

    /// GD-2: a consumer with twice the partition is judged by its fraction.
    #[test]
    fn relative_progress_compares_fractions() {
        let mut s = FurthestBehind::default();
        s.push(job(1, 1, 1, 300, 1000, ProgressMetric::Fraction)); // 30%
        s.push(job(2, 2, 2, 500, 2000, ProgressMetric::Fraction)); // 25%
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
        // The same numbers in bytes favour the other consumer (GD-1).
        let mut s = FurthestBehind::default();
        s.push(job(1, 1, 1, 300, 1000, ProgressMetric::Bytes));
        s.push(job(2, 2, 2, 500, 2000, ProgressMetric::Bytes));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 1);
    }

    #[test]
    fn ties_prefer_the_file_under_the_head() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 1, 100));
        s.push(bytes_job(2, 2, 100));
        assert_eq!(s.pop(Time::ZERO, Some(2)).unwrap().id, 2);
    }

    #[test]
    fn stale_progress_never_moves_a_stream_back() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 1, 500));
        s.push(bytes_job(2, 1, 100)); // stale or hostile
        s.push(bytes_job(3, 2, 300));
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 3);
    }

    #[test]
    fn progress_reported_between_requests_changes_the_order() {
        let mut s = FurthestBehind::default();
        s.push(bytes_job(1, 1, 100));
        s.push(bytes_job(2, 2, 200));
        // Stream 1 received data from its other server and is now ahead.
        let p = Progress {
            done_bytes: 300,
            total_bytes: 1000,
            metric: ProgressMetric::Bytes,
        };
        s.update_progress(StreamKey { conn: 1, stream: 1 }, p);
        assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
        // Progress for a stream with nothing queued is ignored (no state kept for it).
        s.update_progress(StreamKey { conn: 1, stream: 9 }, p);
        s.assert_invariants();
    }

    #[test]
    fn removal_keeps_the_index_consistent() {
        let mut s = FurthestBehind::default();
        for id in 0..6 {
            s.push(bytes_job(id, id % 3, id * 10));
        }
        assert!(s.remove(4));
        assert!(s.remove(1));
        assert!(!s.remove(1));
        s.assert_invariants();
        let mut seen = vec![];
        while let Some(j) = s.pop(Time::ZERO, None) {
            seen.push(j.id);
            s.assert_invariants();
        }
        seen.sort();
        assert_eq!(seen, vec![0, 2, 3, 5]);
    }
}
