use super::*;

const FB: Service = Service::FURTHEST_BEHIND;
const FB_RUNS: Service = Service { runs: true, ..Service::FURTHEST_BEHIND };
const LQ: Service = Service { discipline: Discipline::LongestQueue, ..Service::FURTHEST_BEHIND };

fn job(id: JobId, stream: u64, file: FileKey, done: u64, total: u64, metric: ProgressMetric, service: Service) -> Job {
    Job {
        id,
        stream: StreamKey { conn: 1, stream },
        file,
        bytes: 10,
        progress: Progress { done_bytes: done, total_bytes: total, metric },
        service,
        arrival: Time(id),
    }
}

fn bytes_job(id: JobId, stream: u64, done: u64) -> Job {
    job(id, stream, stream, done, 1000, ProgressMetric::Bytes, FB)
}

fn pops(s: &mut dyn Scheduler, head: Option<FileKey>) -> Vec<JobId> {
    std::iter::from_fn(|| s.pop(Time::ZERO, head)).map(|j| j.id).collect()
}

#[test]
fn fifo_keeps_arrival_order() {
    let mut s = Fifo::default();
    for id in 0..3 {
        s.push(bytes_job(id, id % 2, 1000 - id));
    }
    assert!(s.remove(1));
    assert!(!s.remove(1));
    assert_eq!(pops(&mut s, None), vec![0, 2]);
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
    s.push(job(1, 1, 1, 300, 1000, ProgressMetric::Fraction, FB)); // 30%
    s.push(job(2, 2, 2, 500, 2000, ProgressMetric::Fraction, FB)); // 25%
    assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
    // The same numbers in bytes favour the other consumer (GD-1).
    let mut s = FurthestBehind::default();
    s.push(job(1, 1, 1, 300, 1000, ProgressMetric::Bytes, FB));
    s.push(job(2, 2, 2, 500, 2000, ProgressMetric::Bytes, FB));
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
    let p = Progress { done_bytes: 300, total_bytes: 1000, metric: ProgressMetric::Bytes };
    s.update_progress(StreamKey { conn: 1, stream: 1 }, p);
    assert_eq!(s.pop(Time::ZERO, None).unwrap().id, 2);
    // Progress for a stream with nothing queued is ignored (no state kept for it).
    s.update_progress(StreamKey { conn: 1, stream: 9 }, p);
    s.assert_invariants();
}

/// GD-5: a run continues on the head's file while the consumer is not too far ahead.
/// Serves stream 1 (8 jobs on file 1, at `at`) and stream 2 (3 jobs on file 2, 15 units
/// ahead) with file 1 under the head, stream 1's progress climbing with each job as the
/// client's notices report it; the order of the first seven jobs. A job is 10 units, one
/// `PLAN_UNIT_BYTES` (runs and their slack count in those, whatever the request size).
fn a_run_from(at: u64, total: u64) -> Vec<JobId> {
    const UNIT: u64 = PLAN_UNIT_BYTES / 10;
    let (at, total) = (at * UNIT, total * UNIT);
    let sized = |mut j: Job| {
        j.bytes = 10 * UNIT;
        j
    };
    let mut s = FurthestBehind::default();
    for id in 0..8 {
        s.push(sized(job(id, 1, 1, at, total, ProgressMetric::Bytes, FB_RUNS)));
    }
    for id in 10..13 {
        s.push(sized(job(id, 2, 2, at + 15 * UNIT, total, ProgressMetric::Bytes, FB_RUNS)));
    }
    let mut order = vec![];
    let mut done = at;
    for _ in 0..7 {
        let j = s.pop(Time::ZERO, Some(1)).unwrap();
        order.push(j.id);
        if j.stream.stream == 1 {
            done += 10 * UNIT;
            s.update_progress(
                j.stream,
                Progress { done_bytes: done, total_bytes: total, metric: ProgressMetric::Bytes },
            );
        }
    }
    order
}

#[test]
fn runs_save_seeks_without_breaking_the_progress_goal() {
    // Early in a long scan the slack is 40 units of progress (four jobs): stream 1 is behind
    // and starts, and the run goes on while it is at most 40 ahead of stream 2 (up to 155),
    // so six run; at 160 stream 2 gets the disk back.
    assert_eq!(a_run_from(100, 1 << 40), vec![0, 1, 2, 3, 4, 5, 10]);
    // Near the end of its scan (90% read), under a tenth of the slack: the run stops once
    // stream 1 is 5 ahead, and stream 2, reporting no progress here, keeps the disk.
    assert_eq!(a_run_from(900, 1000), vec![0, 1, 10, 11, 12, 2, 3]);
    // Without runs, the same progress flips the order at once.
    let mut s = FurthestBehind::default();
    s.push(job(1, 1, 1, 100, 1000, ProgressMetric::Bytes, FB));
    s.push(job(2, 1, 1, 100, 1000, ProgressMetric::Bytes, FB));
    s.push(job(3, 2, 2, 105, 1000, ProgressMetric::Bytes, FB));
    assert_eq!(s.pop(Time::ZERO, Some(1)).unwrap().id, 1);
    s.update_progress(
        StreamKey { conn: 1, stream: 1 },
        Progress { done_bytes: 110, total_bytes: 1000, metric: ProgressMetric::Bytes },
    );
    assert_eq!(s.pop(Time::ZERO, Some(1)).unwrap().id, 3);
}

/// One disk shared by two readers of 1 MiB blocks, for `picks` picks: reader 0's other copy
/// delivers it a block every `a_every` picks, reader 1's every `b_every`; each block this
/// disk serves reaches its reader and is reported one pick later (it is on its way while the
/// disk picks again). The mean of reader 0's lag behind reader 1 as the disk sees it, in
/// blocks.
fn mean_lag(level: bool, a_every: u64, b_every: u64, picks: u64) -> f64 {
    const MIB: u64 = 1 << 20;
    let total = 1 << 40;
    let service = Service { level, ..FB };
    let mut s = FurthestBehind::default();
    let mut done = [0u64; 2];
    let mut id = 0;
    let mut push = |s: &mut FurthestBehind, r: u64, done: u64| {
        id += 1;
        s.push(Job { bytes: MIB, ..job(id, r, r, done, total, ProgressMetric::Bytes, service) });
    };
    for r in 0..2 {
        for _ in 0..3 {
            push(&mut s, r, 0);
        }
    }
    let (mut in_flight, mut head, mut lag) = (None, None, 0.0);
    for pick in 1..=picks {
        let j = s.pop(Time(pick), head).expect("both readers keep three queued");
        head = Some(j.file);
        // The block served last arrives now; the one just picked is on its way.
        if let Some(r) = in_flight.replace(j.stream.stream) {
            done[r as usize] += MIB;
            push(&mut s, r, done[r as usize]);
        }
        for (r, every) in [(0usize, a_every), (1, b_every)] {
            if pick % every == 0 {
                done[r] += MIB;
                let stream = StreamKey { conn: 1, stream: r as u64 };
                s.update_progress(
                    stream,
                    Progress { done_bytes: done[r], total_bytes: total, metric: ProgressMetric::Bytes },
                );
            }
        }
        lag += (done[1] as f64 - done[0] as f64) / MIB as f64;
    }
    lag / picks as f64
}

/// Levelling (ours): a reader that needs the disk more (its other copy is slower) stands
/// behind the other by a steady part of a block under furthest behind alone; levelled, the
/// mean lag goes to zero. And it changes nothing where both need the disk alike.
#[test]
fn levelling_takes_away_the_standing_lag_of_whole_block_steps() {
    for (a_every, b_every) in [(7, 2), (5, 2), (2, 7)] {
        let plain = mean_lag(false, a_every, b_every, 2000);
        let levelled = mean_lag(true, a_every, b_every, 2000);
        assert!(plain.abs() > 0.35, "furthest behind alone leaves the needier reader behind: {plain}");
        assert!(levelled.abs() < 0.05, "levelled: {levelled} (plain {plain})");
    }
    for level in [false, true] {
        let even = mean_lag(level, 3, 3, 2000);
        assert!(even.abs() < 0.1, "level {level}: {even}");
    }
}

/// A reader that comes and goes (gd-pc's reads of a backup, a window at a time) keeps the
/// bias it learnt across a gap of a few picks, and loses it once gone `LEVEL_KEEP_PICKS`.
#[test]
fn a_levelled_bias_outlives_a_short_gap_but_not_a_stream_gone() {
    const MIB: u64 = 1 << 20;
    let service = Service { level: true, ..FB };
    // Reader 0, 8 blocks behind reader 1, is served 10 blocks (the biases grow to the
    // largest, for reader 0 and against reader 1), then is gone for `gap` picks; it comes
    // back 6 blocks ahead of reader 1. Who is served first?
    let served_on_return = |gap: u64| {
        let mut s = FurthestBehind::default();
        let mut id = 0;
        let mut push = |s: &mut FurthestBehind, r: u64, done: u64| {
            id += 1;
            s.push(Job { bytes: MIB, ..job(id, r, r, done, 1 << 40, ProgressMetric::Bytes, service) });
        };
        for _ in 0..10 {
            push(&mut s, 0, 0);
        }
        for _ in 0..=gap {
            push(&mut s, 1, 8 * MIB);
        }
        for pick in 0..10 + gap {
            let j = s.pop(Time(pick), None).unwrap();
            assert_eq!(j.stream.stream, u64::from(pick >= 10), "pick {pick}: reader 0 first, then reader 1 alone");
        }
        push(&mut s, 0, 14 * MIB);
        s.pop(Time(10 + gap), None).unwrap().stream.stream
    };
    assert_eq!(served_on_return(0), 0, "its bias kept, reader 0 is still owed the disk");
    assert_eq!(served_on_return(LEVEL_KEEP_PICKS - 2), 0);
    assert_eq!(served_on_return(LEVEL_KEEP_PICKS), 1, "gone too long: no bias, furthest behind alone");
}

/// A stream reading two files here (a logical partition read in step) finishes what it
/// has on the head's file before the head moves, if it allows runs; else in order.
#[test]
fn a_stream_on_two_files_serves_the_head_s_file_first_when_it_allows_runs() {
    let order = |service: Service| {
        let mut s = FurthestBehind::default();
        for (id, file) in [(0, 1), (1, 2), (2, 1), (3, 2)] {
            s.push(job(id, 1, file, 100, 1000, ProgressMetric::Bytes, service));
        }
        s.push(job(10, 2, 3, 500, 1000, ProgressMetric::Bytes, service));
        let order: Vec<JobId> = (0..5).map(|_| s.pop(Time::ZERO, Some(2)).unwrap().id).collect();
        s.assert_invariants();
        order
    };
    assert_eq!(order(FB_RUNS), vec![1, 3, 0, 2, 10]);
    assert_eq!(order(FB), vec![0, 1, 2, 3, 10]);
}

/// GD-4: the longer queue first; with a guard every eighth pick, the eighth goes to the
/// stream furthest behind (here all are equal, so to whoever waited longest).
#[test]
fn longest_queue_first_with_a_starvation_guard() {
    let mut s = LongestQueue::default();
    let every_8 = Service { guard_every: 8, ..LQ };
    for id in 0..20 {
        s.push(job(100 + id, 1, 1, 0, 1, ProgressMetric::Bytes, every_8));
    }
    s.push(job(1, 2, 2, 0, 1, ProgressMetric::Bytes, every_8)); // oldest, short queue
    let order: Vec<JobId> = (0..8).map(|_| s.pop(Time::ZERO, None).unwrap().id).collect();
    assert_eq!(&order[..7], &[100, 101, 102, 103, 104, 105, 106]);
    assert_eq!(order[7], 1, "the guard serves the starved stream");
    s.assert_invariants();
}

/// The guard serves the consumer with the largest share of its scan left, not the one that
/// waited longest: around a slow disk, that grades each disk's shares along the chain.
#[test]
fn the_guard_serves_the_consumer_furthest_behind() {
    let mut s = LongestQueue::default();
    let every_2 = Service { guard_every: 2, ..LQ };
    s.push(job(1, 2, 2, 90, 100, ProgressMetric::Bytes, every_2)); // the longest wait, 90% read
    for id in 0..4 {
        s.push(job(100 + id, 1, 1, 80, 100, ProgressMetric::Bytes, every_2)); // the longest queue
    }
    s.push(job(200, 3, 3, 10, 100, ProgressMetric::Bytes, every_2)); // the furthest behind
    let order: Vec<JobId> = (0..6).map(|_| s.pop(Time::ZERO, None).unwrap().id).collect();
    assert_eq!(&order[..4], &[100, 200, 101, 102], "queue, guard (10% read), queue, guard (80% read)");
    assert_eq!(&order[4..], &[1, 103], "queues of one: the longest wait first");
    s.assert_invariants();
}

/// The requests set the guard's interval (gd-rr's `guard_every`); the shortest asked for
/// holds.
#[test]
fn the_requests_set_the_starvation_guard() {
    let starved_served_at = |long: u8, short: u8| -> usize {
        let mut s = LongestQueue::default();
        for id in 0..20 {
            s.push(job(100 + id, 1, 1, 0, 1, ProgressMetric::Bytes, Service { guard_every: long, ..LQ }));
        }
        s.push(job(1, 2, 2, 0, 1, ProgressMetric::Bytes, Service { guard_every: short, ..LQ }));
        let order: Vec<JobId> = (0..20).map(|_| s.pop(Time::ZERO, None).unwrap().id).collect();
        order.iter().position(|id| *id == 1).expect("the starved stream is served")
    };
    assert_eq!(starved_served_at(3, 3), 2, "the third pick");
    assert_eq!(starved_served_at(0, 0), usize::from(GUARD_EVERY) - 1, "0: the server's interval");
    assert_eq!(starved_served_at(12, 2), 1, "the shortest interval asked for");
    assert_eq!(starved_served_at(1, 0), 0, "every pick: the guard's");
}

#[test]
fn auto_dispatches_by_discipline_and_alternates_between_them() {
    let mut s = Auto::default();
    s.push(job(1, 1, 1, 500, 1000, ProgressMetric::Bytes, FB));
    s.push(job(2, 2, 2, 100, 1000, ProgressMetric::Bytes, FB));
    s.push(job(3, 3, 3, 0, 1, ProgressMetric::Bytes, LQ));
    s.push(job(4, 3, 3, 0, 1, ProgressMetric::Bytes, LQ));
    assert_eq!(s.len(), 4);
    assert_eq!(pops(&mut s, None), vec![2, 3, 1, 4]);
    s.push(job(5, 1, 1, 0, 1, ProgressMetric::Bytes, LQ));
    assert!(s.remove(5));
    assert!(s.is_empty());
}

/// Planned streams get the disk in proportion to the shares their requests carry, and a
/// stream that falls behind gets more until it has caught up.
#[test]
fn planned_shares_are_kept_and_a_lagging_stream_catches_up() {
    let planned = |share: u16| Service {
        discipline: Discipline::Planned,
        runs: true,
        share,
        phased: true,
        ..Service::FURTHEST_BEHIND
    };
    // A block every 31.25 ms, as a 32 MiB/s disk serves them.
    let at = |pick: u64| Time::ZERO + Duration::from_micros(31_250) * pick as u32;
    let run = |progress_of: &dyn Fn(usize, [u64; 2]) -> [u64; 2], picks: u64| {
        let mut s = PlannedShares::planned();
        let keys = [StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 }];
        let shares = [SHARE_ONE / 4, SHARE_ONE / 4 * 3];
        let (mut done, mut served, mut id) = ([0u64; 2], [0u32; 2], 0);
        for pick in 0..picks {
            for i in 0..2 {
                while s.s.streams.get(&keys[i]).map_or(0, |q| q.jobs.len()) < 2 {
                    id += 1;
                    let progress =
                        Progress { done_bytes: done[i], total_bytes: 1 << 30, metric: ProgressMetric::Fraction };
                    let job = Job {
                        id,
                        stream: keys[i],
                        file: i as u64,
                        bytes: 1 << 20,
                        progress,
                        service: planned(shares[i]),
                        arrival: at(pick),
                    };
                    s.push(job);
                }
            }
            let j = s.pop(at(pick), Some(0)).unwrap();
            let i = usize::from(j.stream == keys[1]);
            served[i] += 1;
            done = progress_of(i, done);
            for (k, d) in keys.iter().zip(done) {
                s.update_progress(
                    *k,
                    Progress { done_bytes: d, total_bytes: 1 << 30, metric: ProgressMetric::Fraction },
                );
            }
            s.assert_invariants();
        }
        (served, done)
    };
    // Stream 1 gets half a block a pick elsewhere: at a quarter and three quarters of this
    // disk both advance three quarters of a block a pick, so they stay level and the
    // planned shares hold.
    let level = |i: usize, mut d: [u64; 2]| {
        d[i] += 1 << 20;
        d[0] += 1 << 19;
        d
    };
    let (served, _) = run(&level, 400);
    let share = served[0] as f64 / 400.0;
    assert!((share - 0.25).abs() < 0.03, "stream 1 got {share}");
    // Stream 1 gets nothing elsewhere (the plan was wrong): it falls behind and is served
    // beyond its planned quarter, staying within a few blocks (the lag that outweighs a
    // full credit bound, 4 picks, against the mean of the two).
    let wrong = |i: usize, mut d: [u64; 2]| {
        d[i] += 1 << 20;
        d
    };
    let (served, done) = run(&wrong, 400);
    assert!(served[0] > 180, "{served:?}");
    assert!(done[1] - done[0] <= 10 << 20, "{done:?}");
}

/// Two disks of a chain, A and B, and the reader X of a fragment whose primary is on A
/// and backup on B; W reads its backup on A, Y its primary on B. Each disk takes 31.25 ms
/// a 1 MiB block and 4 ms more to seek to another stream's file (B starting 10 ms after A),
/// the streams always have requests queued, and the shares keep every reader's fraction
/// done level: W has 40% of A, X 60% of A and 40% of B, Y 60% of B. Returns the times X
/// got its blocks, after the first second, and each disk's blocks per stream after it.
fn two_disk_chain(how: ShareSettings) -> (Vec<Time>, [BTreeMap<StreamKey, u32>; 2]) {
    let block: u64 = 1 << 20;
    let (w, x, y) =
        (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 }, StreamKey { conn: 3, stream: 1 });
    // Each reader's size, so that its fraction done stays level at these shares.
    let total = |k: StreamKey| {
        if k == w {
            400 * block
        } else if k == x {
            1000 * block
        } else {
            600 * block
        }
    };
    let progress = |k: StreamKey, done: u64| Progress {
        done_bytes: done,
        total_bytes: total(k),
        metric: ProgressMetric::Fraction,
    };
    let share = |frac: f64| (frac * SHARE_ONE as f64).round() as u16;
    // Per disk: (stream, share, copy).
    let layout = [[(w, share(0.4), 1u8), (x, share(0.6), 0)], [(x, share(0.4), 1), (y, share(0.6), 0)]];
    let mut disks = [0, 1].map(|_| PerStream { s: Streams::default(), rule: Shares::new(how) });
    let mut free = [Time::ZERO, Time::ZERO + Duration::from_millis(10)];
    let mut last: [Option<StreamKey>; 2] = [None, None];
    let mut done: BTreeMap<StreamKey, u64> = BTreeMap::new();
    let mut served: [BTreeMap<StreamKey, u32>; 2] = Default::default();
    let (mut id, mut x_blocks) = (0, vec![]);
    let warm = Time::from_secs_f64(1.0);
    while free[0].min(free[1]) < Time::from_secs_f64(5.0) {
        let d = usize::from(free[1] < free[0]);
        let now = free[d];
        let disk = &mut disks[d];
        for &(stream, share, copy) in &layout[d] {
            disk.update_progress(stream, progress(stream, done.get(&stream).copied().unwrap_or(0)));
            while disk.s.streams.get(&stream).map_or(0, |q| q.jobs.len()) < 2 {
                id += 1;
                let p = progress(stream, done.get(&stream).copied().unwrap_or(0));
                disk.push(phased_job(id, stream, share, copy, p, now));
            }
        }
        let j = disk.pop(now, None).expect("both streams have requests queued");
        disk.assert_invariants();
        let seek = if last[d].is_some_and(|l| l != j.stream) { Duration::from_millis(4) } else { Duration::ZERO };
        last[d] = Some(j.stream);
        free[d] = now + Duration::from_micros(31_250) + seek;
        *done.entry(j.stream).or_default() += block;
        if now >= warm {
            *served[d].entry(j.stream).or_default() += 1;
            if j.stream == x {
                x_blocks.push(free[d]);
            }
        }
    }
    (x_blocks, served)
}

/// Phased, A serves X in the part of each period B does not: X is never more than about
/// two blocks without one, and every period brings it 15 to 17 blocks (16 at the disks'
/// rate). With credits alone the disks switch files more often, and the seeks leave X
/// fewer blocks. The planned shares hold either way.
#[test]
fn phased_disks_serve_a_reader_from_its_two_copies_in_turn() {
    let period = ShareSettings::PLANNED.phase.expect("planned disks are phased");
    let longest = |blocks: &[Time]| blocks.windows(2).map(|p| p[1].since(p[0])).max().unwrap();
    // X's blocks in each whole period after the first second.
    let per_period = |blocks: &[Time]| -> Vec<usize> {
        (2..10)
            .map(|k| {
                let (from, to) = (Time::ZERO + period * k, Time::ZERO + period * (k + 1));
                blocks.iter().filter(|t| **t >= from && **t < to).count()
            })
            .collect()
    };
    let (phased, served) = two_disk_chain(ShareSettings::PLANNED);
    assert!(longest(&phased) <= Duration::from_millis(75), "X waited {:?} for a block", longest(&phased));
    let counts = per_period(&phased);
    assert!(counts.iter().all(|c| (15..=17).contains(c)), "X's blocks a period: {counts:?}");
    let (unphased, served_unphased) = two_disk_chain(ShareSettings { phase: None, ..ShareSettings::PLANNED });
    let sum = |blocks: &[Time]| per_period(blocks).iter().sum::<usize>();
    assert!(sum(&unphased) < sum(&phased), "{:?} against {counts:?}", per_period(&unphased));
    // W 40% of A, Y 60% of B.
    for served in [served, served_unphased] {
        let share = |d: usize, conn: u64| {
            let all: u32 = served[d].values().sum();
            served[d].iter().find(|(k, _)| k.conn == conn).map_or(0, |(_, n)| *n) as f64 / all as f64
        };
        assert!((share(0, 1) - 0.4).abs() < 0.05, "W got {served:?}");
        assert!((share(1, 3) - 0.6).abs() < 0.05, "Y got {served:?}");
    }
}

/// A disk that takes exactly a sixteenth of a period a block, shared 40 / 60 by two
/// readers with level progress: W's slot ends 6.4 blocks into every period. W gets 40% of
/// the blocks over many periods, not the 6 a period (37.5%) of a boundary rounded the
/// same way each time, and 6 or 7 in every period.
#[test]
fn a_slot_boundary_inside_a_block_is_not_rounded_the_same_way_every_period() {
    let period = ShareSettings::PLANNED.phase.expect("planned disks are phased");
    let (w, x) = (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 });
    let level = Progress { done_bytes: 0, total_bytes: 1 << 40, metric: ProgressMetric::Fraction };
    let mut disk = PerStream::planned();
    let (mut now, mut id) = (Time::ZERO, 0);
    let mut w_per_period: BTreeMap<u64, u32> = BTreeMap::new();
    let periods: u32 = 48;
    while now < Time::ZERO + period * periods {
        for (stream, share, copy) in [(w, 0.4, 1u8), (x, 0.6, 0)] {
            while disk.s.streams.get(&stream).map_or(0, |q| q.jobs.len()) < 2 {
                id += 1;
                disk.push(phased_job(id, stream, (share * SHARE_ONE as f64).round() as u16, copy, level, now));
            }
        }
        let j = disk.pop(now, None).expect("both streams have requests queued");
        let k = now.0 / period.as_nanos() as u64;
        if j.stream == w && k >= 2 {
            *w_per_period.entry(k).or_default() += 1;
        }
        now = now + period / 16;
    }
    let counts: Vec<u32> = (2..u64::from(periods)).map(|k| w_per_period.get(&k).copied().unwrap_or(0)).collect();
    let share = f64::from(counts.iter().sum::<u32>()) / (16.0 * counts.len() as f64);
    assert!((share - 0.4).abs() < 0.01, "W got {share} of the disk: {counts:?}");
    assert!(counts.iter().all(|n| (6..=7).contains(n)), "{counts:?}");
}

#[test]
fn a_slot_s_overlap_counts_both_periods_an_interval_touches() {
    // Slot [20, 50) of every 100.
    assert_eq!(slot_overlap(0, 100, 100, 0.2, 0.3), 30.0);
    assert_eq!(slot_overlap(40, 130, 100, 0.2, 0.3), 20.0, "40-50 and 120-130");
    assert_eq!(slot_overlap(250, 320, 100, 0.2, 0.3), 0.0);
    assert_eq!(slot_overlap(1_020, 1_030, 100, 0.2, 0.3), 10.0);
}

/// Two planned streams of equal shares, for the anticipation tests.
const PLANNED_A: StreamKey = StreamKey { conn: 1, stream: 1 };
const PLANNED_B: StreamKey = StreamKey { conn: 2, stream: 1 };

/// A 1 MiB request of a planned stream with half the disk, queued at time 0.
fn planned_job(id: JobId, stream: StreamKey, file: FileKey) -> Job {
    let service =
        Service { discipline: Discipline::Planned, runs: true, share: SHARE_ONE / 2, ..Service::FURTHEST_BEHIND };
    let progress = Progress { done_bytes: 0, total_bytes: 1 << 30, metric: ProgressMetric::Fraction };
    Job { id, stream, file, bytes: 1 << 20, progress, service, arrival: Time(0) }
}

/// `planned_job` on `stream`'s own file, asking for a slot of `share` and reading copy
/// `copy`, at `progress`, queued at `now`.
fn phased_job(id: JobId, stream: StreamKey, share: u16, copy: u8, progress: Progress, now: Time) -> Job {
    let j = planned_job(id, stream, stream.conn);
    Job { service: Service { share, copy, phased: true, ..j.service }, progress, arrival: now, ..j }
}

/// Counted in 1 MiB units, a planned disk that two readers share changes file about as
/// often in time with 256 KiB blocks as with 1 MiB ones; counted in blocks it changed
/// four times as often, and paid a seek each time.
#[test]
fn a_planned_disk_changes_file_as_often_whatever_the_block_size() {
    let changes = |block: u64| {
        let mut disk = PlannedShares::planned();
        let (mut now, mut id, mut head, mut changes) = (Time::ZERO, 0, None, 0u32);
        while now < Time::ZERO + Duration::from_secs(2) {
            for stream in [PLANNED_A, PLANNED_B] {
                while disk.s.streams.get(&stream).map_or(0, |q| q.jobs.len()) < 2 {
                    id += 1;
                    disk.push(Job { bytes: block, arrival: now, ..planned_job(id, stream, stream.conn) });
                }
            }
            let j = disk.pop(now, head).expect("both streams have requests queued");
            changes += u32::from(head.is_some_and(|h| h != j.file));
            head = Some(j.file);
            now = now + Duration::from_secs_f64(block as f64 / f64::from(32u32 << 20));
        }
        changes
    };
    let (mib, quarter) = (changes(1 << 20), changes(256 << 10));
    assert!(mib >= 8, "two readers of half the disk each take turns: {mib} changes in 2 s");
    // 14 against 11 (43 counted in blocks).
    assert!(
        f64::from(quarter.abs_diff(mib)) <= 0.5 * f64::from(mib),
        "{quarter} changes of file with 256 KiB blocks, {mib} with 1 MiB"
    );
}

/// A planned disk running a stream whose queue ran dry waits for its next request rather
/// than seek away, but only until the anticipation deadline, and only while the run is
/// within its debt.
#[test]
fn a_planned_disk_waits_briefly_for_the_running_stream_s_next_request() {
    let (a, b, job) = (PLANNED_A, PLANNED_B, planned_job);
    let t = Time(1_000);
    let wait = ShareSettings::PLANNED.anticipate.unwrap();
    // Its request comes within the wait: the run goes on, until its debt ends it.
    let mut s = PlannedShares::planned();
    s.push(job(1, a, 0));
    s.push(job(2, b, 1));
    let first = s.pop(Time(0), Some(0)).unwrap();
    assert_eq!(first.stream, a, "ties go to the file under the head");
    // a has nothing queued: the disk waits for it instead of seeking to b's file.
    assert_eq!(s.pop(t, Some(0)), None);
    assert_eq!(s.wake_at(), Some(t + wait), "a deadline to decide again");
    s.push(job(3, a, 0));
    assert_eq!(s.pop(Time(2_000), Some(0)).unwrap().id, 3);
    assert_eq!(s.wake_at(), None);
    // Two blocks on a half share are one block of debt: the run is over, b is next at once.
    assert_eq!(s.pop(Time(3_000), Some(0)).unwrap().stream, b);
    s.assert_invariants();
    // Its request does not come: at the deadline the disk goes to b.
    let mut s = PlannedShares::planned();
    s.push(job(1, a, 0));
    s.push(job(2, b, 1));
    assert_eq!(s.pop(Time(0), Some(0)).unwrap().stream, a);
    assert_eq!(s.pop(t, Some(0)), None);
    assert_eq!(s.pop(t + wait / 2, Some(0)), None, "still waiting");
    assert_eq!(s.pop(t + wait, Some(0)).unwrap().stream, b);
    s.assert_invariants();
}

/// Inside the running stream's phase slot the disk waits for its next request however
/// long the run has been; where the slots do not decide (here: near the end of the
/// scan), a run of `RUN_MAX` ends as before; deep in debt, W is waited for all the same.
/// W has 70% of the disk (its slot: the first 350 ms of every 500 ms, 11 blocks of
/// 31.25 ms), X 30%.
#[test]
fn a_planned_disk_waits_for_the_slot_s_reader_past_the_longest_run() {
    let period = ShareSettings::PLANNED.phase.expect("planned disks are phased");
    let wait = ShareSettings::PLANNED.anticipate.expect("planned disks anticipate");
    let block = period / 16;
    let (w, x) = (PLANNED_A, PLANNED_B);
    let share = |f: f64| (f * SHARE_ONE as f64).round() as u16;
    // From the start of a period W runs `RUN_MAX` blocks of a scan of `total` bytes, to
    // 250 ms, and its queue is then empty; X has requests queued.
    let run = |total: u64| {
        let progress = Progress { done_bytes: 0, total_bytes: total, metric: ProgressMetric::Fraction };
        let start = Time::ZERO + period * 4;
        let mut disk = PlannedShares::planned();
        let mut id = 0;
        for _ in 0..RUN_MAX {
            id += 1;
            disk.push(phased_job(id, w, share(0.7), 1, progress, start));
        }
        for _ in 0..2 {
            id += 1;
            disk.push(phased_job(id, x, share(0.3), 0, progress, start));
        }
        let mut now = start;
        for _ in 0..RUN_MAX {
            assert_eq!(disk.pop(now, Some(w.conn)).expect("W is queued").stream, w, "at {now:?}");
            now = now + block;
        }
        (disk, now, id, progress)
    };
    let (mut disk, now, id, progress) = run(1 << 40);
    assert_eq!(disk.pop(now, Some(w.conn)), None, "W's slot lasts to 350 ms");
    assert_eq!(disk.wake_at(), Some(now + wait));
    disk.push(phased_job(id + 1, w, share(0.7), 1, progress, now + wait / 2));
    assert_eq!(disk.pop(now + wait / 2, Some(w.conn)).expect("W's request came").stream, w);
    disk.assert_invariants();
    // W deep in debt (it caught up on X's time before its slot): its slot still holds.
    let (mut disk, now, _, _) = run(1 << 40);
    let bound = ShareSettings::PLANNED.credit_bound;
    disk.rule.state.get_mut(&w).expect("W has state").credit = -bound;
    assert_eq!(disk.pop(now, Some(w.conn)), None, "W's slot holds whatever its credit");
    assert_eq!(disk.wake_at(), Some(now + wait));
    // Ten blocks left: the slots are set aside, and X is served at once.
    let (mut disk, now, _, _) = run(10 << 20);
    assert_eq!(disk.pop(now, Some(w.conn)).expect("X is queued").stream, x);
    disk.assert_invariants();
}

/// A disk waiting for the running stream's next request whose other requests are then
/// cancelled has nothing to wait for: with its queue empty it names no deadline, so the
/// server sleeps until a request comes instead of waking at a past deadline in a loop
/// (the simulator found this spin when an end-of-scan steal emptied the queue).
#[test]
fn an_emptied_queue_has_no_deadline_to_wake_at() {
    let (a, b, job) = (PLANNED_A, PLANNED_B, planned_job);
    // The planned scheduler itself, and as the server runs it (behind `Auto`).
    let schedulers: [Box<dyn Scheduler>; 2] = [Box::new(PlannedShares::planned()), SchedulerKind::Auto.build()];
    for mut s in schedulers {
        s.push(job(1, a, 0));
        s.push(job(2, b, 1));
        assert_eq!(s.pop(Time(0), Some(0)).unwrap().stream, a);
        assert_eq!(s.pop(Time(1_000), Some(0)), None, "waiting for a's next request");
        assert!(s.wake_at().is_some());
        assert!(s.remove(2), "b's request is cancelled");
        assert_eq!(s.wake_at(), None, "{}", s.name());
        // A new request is served at once.
        s.push(job(3, b, 1));
        assert_eq!(s.pop(Time(1_000_000_000), Some(0)).unwrap().id, 3);
    }
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
    let mut seen = pops(&mut s, None);
    seen.sort();
    assert_eq!(seen, vec![0, 2, 3, 5]);
    s.assert_invariants();
}

#[test]
fn primary_progress_is_the_least_of_fresh_primary_streams() {
    let mut t = PrimaryTracker::default();
    let p = |done| Progress { done_bytes: done, total_bytes: 100, metric: ProgressMetric::Bytes };
    let (a, b) = (StreamKey { conn: 1, stream: 1 }, StreamKey { conn: 2, stream: 1 });
    t.note(7, a, p(30), Time::ZERO);
    t.note(7, b, p(20), Time::ZERO);
    assert_eq!(t.progress(7, Time::from_secs_f64(0.5)), Some(0.2));
    t.note(7, a, p(40), Time::from_secs_f64(0.9));
    // b has been silent for more than a second: only a counts.
    assert_eq!(t.progress(7, Time::from_secs_f64(1.2)), Some(0.4));
    // A finished stream leaves the server free for backups.
    t.note(7, a, p(100), Time::from_secs_f64(1.3));
    assert_eq!(t.progress(7, Time::from_secs_f64(1.4)), None);
    assert_eq!(t.progress(9, Time::ZERO), None);
    t.forget_conn(1);
    assert_eq!(t.progress(7, Time::from_secs_f64(1.4)), None);
}
