//! Hunts: seeded random schedules of faults against scans, DQ writes, replicated writes and
//! replica completion, checked after every event.
//!
//! A quarter of the seeds draw a DQ write ([`crate::dq`]): 1 to 8 writers, 3 to 8 servers,
//! slow disks, and one or two servers that die mid-write (at least one is left). After every
//! event: no block is held by two live servers, none is sent while a live server holds it,
//! and a server takes only what its writer has sent it; at the end every block is held by
//! exactly one live server. The write must finish within three times the time the
//! survivors' disks need for all of it, plus the last death.
//!
//! A quarter draw a write into a replicated layout (`static`, `gd`, `ceft`, `ceft-adaptive`;
//! chained with 2 or 3 copies, or mirrored groups for CEFT), with slow disks and up to one
//! server fewer than the copies crashing mid-write (restarted or not). The writers are read
//! engines in write mode (`ScanSpec::write`), and the run keeps the write's
//! [`ganges_core::write::Landing`] as the client does. After every event, every block
//! acknowledged once is held by a live server or is being written again to one; at the end
//! the commit's placement holds every block, on live servers only, and the write finished
//! within the scans' progress bound plus the last crash. Then replica completion runs from
//! that placement ([`Placement::fills`], as the servers do), with one server crashing part
//! way through when the seed says so: that completion fails, a copy whose fill did not
//! finish gives back what it wrote, and the manifest (still the placement) names only
//! copies that hold their blocks; with the server back, completion runs again and every copy
//! holds every block.
//!
//! The others draw a cluster (3 to 8 servers, chained declustering with two copies), a
//! dataset, a read policy, and a schedule: slow disks (a quarter or half speed, for a window
//! or the whole scan), and around one *victim* server a crash (restarted a while later, or
//! not), or one consumer's connection to it lost; and blocks corrupt on copies whose other
//! copy stays live. Every block keeps a good copy on a live server, so the scan must finish.
//!
//! The simulated scan runs with `ScanSpec::check`: after every event, every consumer's read
//! engine meets its invariants and no piece is delivered twice; at the end every piece was
//! delivered. The scan must also finish within a progress bound: three fragments read by
//! the slowest disk, one after another, plus the longest outage (a stall or livelock breaks
//! it; an inefficient but live policy does not).
//!
//! A seed gives the same schedule and the same run to the event, so a failing seed printed
//! by `ganges sim hunt` reproduces the failure exactly (`--from SEED --seeds 1`).

use crate::dq::{DqMode, DqSpec, run_dq};
use crate::net::NetParams;
use crate::scan::{Chaos, FaultWindow, ScanSpec, SimError, run_scan};
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::dq::{DqSettings, START_CREDITS};
use ganges_core::ids::{FragmentId, NodeId};
use ganges_core::layout::Layout;
use ganges_core::route::{PolicySettings, ReadPolicyKind};
use ganges_core::sched::SchedulerKind;
use ganges_core::shape::Shape;
use ganges_core::write::WritePolicyKind;
use rand::{Rng, SeedableRng};
use std::time::Duration;

const RATE: f64 = 32.0 * 1024.0 * 1024.0;
const BLOCK: u32 = 256 << 10;

/// One seed's work and what it must meet.
#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub work: Work,
    /// The progress bound, in seconds of virtual time.
    pub bound: f64,
}

/// What a seed runs.
#[derive(Clone, Debug)]
pub enum Work {
    Scan(Box<ScanSpec>),
    DqWrite(DqSpec),
    Write(Box<WriteCase>),
}

/// A replicated write, then replica completion.
#[derive(Clone, Debug)]
pub struct WriteCase {
    pub policy: WritePolicyKind,
    /// The write, run as writers in write mode.
    pub spec: ScanSpec,
    /// A server that crashes during the first completion, and how far into it (a fraction of
    /// its time); the completion then fails, and runs again once the server is back.
    pub completion_crash: Option<(NodeId, f64)>,
}

/// How many of each fault a case holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    pub crashes: usize,
    pub restarts: usize,
    pub lost_connections: usize,
    pub corrupt_blocks: usize,
}

impl Case {
    pub fn faults(&self) -> Faults {
        match &self.work {
            Work::DqWrite(d) => Faults { crashes: d.crashes.len(), ..Faults::default() },
            Work::Write(w) => {
                let s = &w.spec;
                let count = |f: fn(&Chaos) -> bool| s.chaos.iter().filter(|(_, c)| f(c)).count();
                Faults {
                    crashes: count(|c| matches!(c, Chaos::Crash(_))) + w.completion_crash.iter().count(),
                    restarts: count(|c| matches!(c, Chaos::Restart(_))),
                    ..Faults::default()
                }
            }
            Work::Scan(s) => {
                let count = |f: fn(&Chaos) -> bool| s.chaos.iter().filter(|(_, c)| f(c)).count();
                Faults {
                    crashes: count(|c| matches!(c, Chaos::Crash(_))),
                    restarts: count(|c| matches!(c, Chaos::Restart(_))),
                    lost_connections: count(|c| matches!(c, Chaos::Disconnect { .. })),
                    corrupt_blocks: count(|c| matches!(c, Chaos::Corrupt { .. })),
                }
            }
        }
    }

    /// A line saying what the seed drew.
    pub fn describe(&self) -> String {
        match &self.work {
            Work::Scan(s) => describe_scan(s),
            Work::Write(w) => {
                let completion = match w.completion_crash {
                    Some((n, at)) => format!("; completion: {n} crashes {:.0}% into it", at * 100.0),
                    None => String::new(),
                };
                format!(
                    "{} write, {} copies: {}{completion}",
                    w.policy,
                    w.spec.layout.replicas(),
                    describe_scan(&w.spec)
                )
            }
            Work::DqWrite(d) => {
                let rates: Vec<String> = d.consumer_rates.iter().map(|r| format!("{:.2}", r / RATE)).collect();
                let deaths: Vec<String> =
                    d.crashes.iter().map(|(t, c)| format!("node{c} dies at {:.2} s", t.as_secs_f64())).collect();
                format!(
                    "dq write: {} writers x {} blocks to {} servers (speeds [{}]); {}",
                    d.producers,
                    d.blocks_per_producer,
                    d.consumers,
                    rates.join(", "),
                    deaths.join(", ")
                )
            }
        }
    }
}

/// A scan's (or a replicated write's) cluster and schedule, in words.
fn describe_scan(s: &ScanSpec) -> String {
    let slow: Vec<String> = s
        .faults
        .iter()
        .map(|(n, f)| match f {
            Fault::Factor { factor } => format!("{n} x{factor}"),
            other => format!("{n} {other:?}"),
        })
        .collect();
    let chaos: Vec<String> = s
        .chaos
        .iter()
        .map(|(at, c)| {
            let what = match c {
                Chaos::Crash(n) => format!("{n} crashes"),
                Chaos::Restart(n) => format!("{n} restarts"),
                Chaos::Disconnect { consumer, node } => format!("consumer {consumer} loses {node}"),
                Chaos::Corrupt { node, fragment, block } => format!("{node}'s {fragment} block {block} corrupt"),
                Chaos::Rate { node, factor } => format!("{node}'s disk at x{factor}"),
            };
            format!("{what} at {:.2} s", at.as_secs_f64())
        })
        .collect();
    format!(
        "{} servers, {} MiB, {}; slow: [{}]{}; {}",
        s.layout.nodes(),
        s.shape.total_bytes() >> 20,
        s.policy,
        slow.join(", "),
        if s.schedule.is_empty() { "" } else { " (a window)" },
        if chaos.is_empty() { "no chaos".into() } else { chaos.join(", ") }
    )
}

/// The schedule `seed` draws.
pub fn case(seed: u64) -> Case {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    if rng.random_bool(0.25) {
        return dq_case(seed, &mut rng);
    }
    if rng.random_bool(1.0 / 3.0) {
        return write_case(seed, &mut rng);
    }
    let n: u32 = rng.random_range(3..=8);
    let layout = Layout::chained(n, 2).expect("2 copies on 3 or more nodes");
    let blocks: u64 = rng.random_range(8..=40);
    let shape = Shape::uniform(n, blocks * BLOCK as u64, BLOCK).expect("a valid shape");
    // Every read policy but mirror's, which needs mirrored groups.
    let policies: Vec<ReadPolicyKind> =
        ReadPolicyKind::ALL.into_iter().filter(|p| *p != ReadPolicyKind::Mirror).collect();
    let policy = policies[rng.random_range(0..policies.len())];
    let fragment_secs = shape.fragment_bytes(FragmentId(0)) as f64 / RATE;
    let (faults, slowest) = slow_disks(&mut rng, n);
    let schedule = if !faults.is_empty() && rng.random_bool(0.5) {
        let start = Duration::from_secs_f64(rng.random_range(0.0..fragment_secs));
        vec![FaultWindow { start, end: Some(start + Duration::from_secs_f64(fragment_secs)) }]
    } else {
        vec![]
    };
    // Chaos around one victim.
    let victim = NodeId(rng.random_range(0..n));
    let mut chaos = vec![];
    let mut outage = 0.0;
    let at = |rng: &mut rand_chacha::ChaCha8Rng| Duration::from_secs_f64(rng.random_range(0.0..fragment_secs * 1.5));
    match rng.random_range(0..3) {
        0 => {
            let t = at(&mut rng);
            chaos.push((t, Chaos::Crash(victim)));
            if rng.random_bool(0.5) {
                let back = Duration::from_secs_f64(rng.random_range(0.05..2.0));
                chaos.push((t + back, Chaos::Restart(victim)));
                outage = back.as_secs_f64();
            }
        }
        1 => {
            let consumer = rng.random_range(0..n as usize);
            chaos.push((at(&mut rng), Chaos::Disconnect { consumer, node: victim }));
        }
        _ => {}
    }
    // Corrupt blocks, on fragments the victim does not hold, one copy each.
    for _ in 0..rng.random_range(0..=3) {
        let f = FragmentId(rng.random_range(0..n));
        if layout.copy_on(f, victim).is_some() {
            continue;
        }
        let copy = rng.random_range(0..2);
        let block = rng.random_range(0..blocks as u32);
        let node = layout.node_of(f, copy);
        let other = layout.node_of(f, 1 - copy);
        if chaos.iter().any(|(_, c)| *c == Chaos::Corrupt { node: other, fragment: f, block }) {
            continue;
        }
        chaos.push((at(&mut rng), Chaos::Corrupt { node, fragment: f, block }));
    }
    chaos.sort_by_key(|(t, _)| *t);
    let bound = 3.0 * fragment_secs / slowest + outage + 1.0;
    let spec = ScanSpec { faults, schedule, chaos, ..hunted(seed, layout, shape, policy, bound) };
    Case { seed, work: Work::Scan(Box::new(spec)), bound }
}

/// A hunted scan of `shape` with `policy` and no faults yet, checked after every event.
fn hunted(seed: u64, layout: Layout, shape: Shape, policy: ReadPolicyKind, bound: f64) -> ScanSpec {
    ScanSpec {
        partitions: shape.fragment_partitions(),
        layout,
        disk: DiskParams { rate_bytes_per_sec: RATE, seek: Duration::from_millis(4), queue_depth: 1 },
        faults: vec![],
        schedule: vec![],
        consumer_rate: None,
        net: NetParams::LOCAL,
        policy,
        settings: PolicySettings::default(),
        window: policy.default_window(BLOCK as u64, &PolicySettings::default()),
        start_jitter: Duration::from_micros(200),
        start_phase: crate::scan::start_phase(seed),
        sample_every: None,
        time_limit: Duration::from_secs_f64(bound * 10.0),
        seed,
        chaos: vec![],
        check: true,
        write: false,
        shape,
    }
}

/// Slow disks for `n` servers: none, one or two, at a quarter or half speed; and the
/// slowest factor.
fn slow_disks(rng: &mut rand_chacha::ChaCha8Rng, n: u32) -> (Vec<(NodeId, Fault)>, f64) {
    let mut faults = vec![];
    let mut slowest: f64 = 1.0;
    for _ in 0..rng.random_range(0..=2) {
        let node = NodeId(rng.random_range(0..n));
        if faults.iter().any(|(m, _)| *m == node) {
            continue;
        }
        let factor = [0.25, 0.5][rng.random_range(0..2)];
        slowest = slowest.min(factor);
        faults.push((node, Fault::Factor { factor }));
    }
    (faults, slowest)
}

/// A write into a replicated layout with slow disks and fewer crashes than copies, then
/// replica completion, perhaps with a crash.
fn write_case(seed: u64, rng: &mut rand_chacha::ChaCha8Rng) -> Case {
    let policies = [WritePolicyKind::Static, WritePolicyKind::Gd, WritePolicyKind::Ceft, WritePolicyKind::CeftAdaptive];
    let policy = policies[rng.random_range(0..policies.len())];
    let (n, layout) = if policy.default_mirrored() {
        let n = 2 * rng.random_range(2..=4);
        (n, Layout::mirrored(n).expect("an even count of nodes"))
    } else {
        let n = rng.random_range(3..=8);
        (n, Layout::chained(n, rng.random_range(2..=3)).expect("2 or 3 copies on 3 or more nodes"))
    };
    let blocks: u64 = rng.random_range(8..=40);
    let shape = Shape::uniform(n, blocks * BLOCK as u64, BLOCK).expect("a valid shape");
    let fragment_secs = shape.fragment_bytes(FragmentId(0)) as f64 / RATE;
    let (faults, slowest) = slow_disks(rng, n);
    // Fewer crashes than copies, so every fragment keeps a live copy.
    let mut chaos = vec![];
    let mut last: f64 = 0.0;
    let mut crashed = vec![];
    for _ in 0..rng.random_range(1..layout.replicas()) {
        let victim = NodeId(rng.random_range(0..n));
        if crashed.contains(&victim) {
            continue;
        }
        crashed.push(victim);
        let t = Duration::from_secs_f64(rng.random_range(0.0..fragment_secs * 1.5));
        last = last.max(t.as_secs_f64());
        chaos.push((t, Chaos::Crash(victim)));
        if rng.random_bool(0.5) {
            chaos.push((t + Duration::from_secs_f64(rng.random_range(0.05..2.0)), Chaos::Restart(victim)));
        }
    }
    chaos.sort_by_key(|(t, _)| *t);
    let completion_crash = rng.random_bool(0.5).then(|| (NodeId(rng.random_range(0..n)), rng.random_range(0.0..1.0)));
    let route = policy.route().expect("a replicated write routes its blocks");
    // The writers' time, plus the last crash and the blocks it makes the writers send again.
    let bound = 3.0 * fragment_secs / slowest * 2.0 + last + 1.0;
    let spec = ScanSpec { faults, chaos, write: true, ..hunted(seed, layout, shape, route, bound) };
    Case { seed, work: Work::Write(Box::new(WriteCase { policy, spec, completion_crash })), bound }
}

/// Run a replicated write and its completion; the write's virtual time.
fn run_write(w: &WriteCase) -> Result<Ran, SimError> {
    let spec = &w.spec;
    let o = run_scan(spec)?;
    let broken = |why: String| Err(SimError::Invariant(why));
    let landing = o.landing.expect("a write keeps its landing");
    let down = landing.down().to_vec();
    let placement = landing.placement().map_err(|e| SimError::Invariant(format!("the commit: {e}")))?;
    let (layout, shape) = (&spec.layout, &spec.shape);
    let fragments = || (0..shape.fragment_count()).map(FragmentId);
    // What each server's disk holds of the dataset, as (node, fragment, block).
    let mut held = std::collections::BTreeSet::new();
    for f in fragments() {
        for block in 0..shape.blocks_in(f) {
            for c in placement.copies(f, block) {
                let node = layout.node_of(f, c);
                if down.contains(&node) {
                    return broken(format!("the commit places {f} block {block} on {node}, which went down"));
                }
                held.insert((node, f, block));
            }
        }
    }
    // Replica completion, from the committed placement, with every server back. Each copy
    // fills its missing blocks one after another, each at the slower of the two disks.
    let rate = |node: NodeId| {
        spec.faults.iter().find(|(n, _)| *n == node).map_or(1.0, |(_, f)| match f {
            Fault::Factor { factor } => *factor,
            _ => 1.0,
        }) * spec.disk.rate_bytes_per_sec
    };
    let mut fills = vec![];
    for f in fragments() {
        for copy in 0..layout.replicas() {
            let target = layout.node_of(f, copy);
            let mut t = 0.0;
            let mut blocks = vec![];
            for (block, source) in placement.fills(f, copy) {
                let from = layout.node_of(f, source);
                t += shape.block_len(f, block) as f64 / rate(from).min(rate(target));
                blocks.push((block, from));
            }
            if blocks.len() != placement.missing(f, copy).len() {
                return broken(format!("completion has no source for some block copy {copy} of {f} lacks"));
            }
            fills.push((f, target, blocks, t));
        }
    }
    if let Some((victim, at)) = w.completion_crash {
        // Several copies fill on one server at once: the crash comes at `at` of the longest.
        let end = fills.iter().map(|x| x.3).fold(0.0, f64::max);
        let crash = at * end;
        for (f, target, blocks, t) in &fills {
            // A fill done before the crash, or one the victim plays no part in, is synced; one
            // the crash cuts short gives back what it wrote.
            if *t <= crash || (*target != victim && blocks.iter().all(|b| b.1 != victim)) {
                held.extend(blocks.iter().map(|&(b, _)| (*target, *f, b)));
            }
        }
        // The completion failed: the manifest is still the placement, and every copy it
        // names holds its blocks.
        for f in fragments() {
            for block in 0..shape.blocks_in(f) {
                for c in placement.copies(f, block) {
                    if !held.contains(&(layout.node_of(f, c), f, block)) {
                        return broken(format!("after a failed completion, copy {c} of {f} lacks block {block}"));
                    }
                }
            }
        }
    }
    // With every server back, completion runs (again) to the end: fills are idempotent.
    for (f, target, blocks, _) in &fills {
        held.extend(blocks.iter().map(|&(b, _)| (*target, *f, b)));
    }
    for f in fragments() {
        for block in 0..shape.blocks_in(f) {
            for node in layout.holders(f) {
                if !held.contains(&(node, f, block)) {
                    return broken(format!("after completion, {node} lacks {f} block {block}"));
                }
            }
        }
    }
    Ok(Ran { seconds: o.seconds, events: o.events })
}

/// A DQ write with slow disks and one or two servers dying mid-write.
fn dq_case(seed: u64, rng: &mut rand_chacha::ChaCha8Rng) -> Case {
    let consumers: u32 = rng.random_range(3..=8);
    let producers: u32 = rng.random_range(1..=8);
    let blocks: u64 = rng.random_range(8..=64);
    let mut rates = vec![RATE; consumers as usize];
    for _ in 0..rng.random_range(0..=2) {
        rates[rng.random_range(0..consumers as usize)] *= [0.25, 0.5][rng.random_range(0..2)];
    }
    let total = (producers as u64 * blocks * BLOCK as u64) as f64;
    let span = total / rates.iter().sum::<f64>();
    let mut crashes: Vec<(Duration, usize)> = vec![];
    for _ in 0..rng.random_range(1..=2) {
        let c = rng.random_range(0..consumers as usize);
        if !crashes.iter().any(|x| x.1 == c) {
            crashes.push((Duration::from_secs_f64(rng.random_range(0.0..span * 1.2)), c));
        }
    }
    let survivors: f64 = (0..consumers as usize).filter(|c| !crashes.iter().any(|x| x.1 == *c)).map(|c| rates[c]).sum();
    let last = crashes.iter().map(|x| x.0.as_secs_f64()).fold(0.0, f64::max);
    let bound = 3.0 * total / survivors + last + 1.0;
    let spec = DqSpec {
        producers,
        consumers,
        producer_rate: 400e6,
        consumer_rates: rates,
        blocks_per_producer: blocks,
        block_bytes: BLOCK as u64,
        credits: DqSettings::for_consumers(consumers).with_slow_start(START_CREDITS),
        mode: DqMode::Dq,
        consumer_scheduler: SchedulerKind::Auto,
        net: NetParams::LOCAL,
        time_limit: Duration::from_secs_f64(bound * 10.0),
        seed,
        crashes,
    };
    Case { seed, work: Work::DqWrite(spec), bound }
}

/// What a seed's run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ran {
    /// Virtual time to the end.
    pub seconds: f64,
    pub events: u64,
}

/// How a seed ended.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub case: Case,
    pub result: Result<Ran, String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.result.is_ok()
    }
}

/// Run one seed: its scan or write must finish, move every byte once, keep every
/// invariant, and stay within the progress bound.
pub fn run(seed: u64) -> Verdict {
    let case = case(seed);
    // The engine's invariant checks panic; the hunt reports them as failures.
    let ran = std::panic::catch_unwind(|| match &case.work {
        Work::Scan(spec) => run_scan(spec).and_then(|o| {
            if o.bytes != spec.shape.total_bytes() {
                return Err(SimError::Invariant(format!(
                    "{} bytes delivered of {}",
                    o.bytes,
                    spec.shape.total_bytes()
                )));
            }
            Ok(Ran { seconds: o.seconds, events: o.events })
        }),
        Work::DqWrite(spec) => run_dq(spec).map(|o| Ran { seconds: o.seconds, events: o.events }),
        Work::Write(w) => run_write(w),
    })
    .unwrap_or_else(|p| {
        let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
        Err(SimError::Invariant(why.unwrap_or_else(|| "a panic".into())))
    });
    let result = match ran {
        Err(e) => Err(e.to_string()),
        Ok(o) if o.seconds > case.bound => {
            Err(format!("took {:.2} s of virtual time, past the progress bound of {:.2} s", o.seconds, case.bound))
        }
        Ok(o) => Ok(o),
    };
    Verdict { case, result }
}

/// Run `count` seeds from `from`; returns every verdict, in seed order.
pub fn hunt(from: u64, count: u64) -> Vec<Verdict> {
    (from..from + count).map(run).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_and_run_every_time() {
        let (a, b) = (run(7), run(7));
        assert_eq!(a.case.describe(), b.case.describe());
        assert_eq!(a.result.as_ref().map(|o| o.events).ok(), b.result.as_ref().map(|o| o.events).ok());
    }

    #[test]
    fn three_hundred_seeds_lose_and_double_nothing() {
        let verdicts = hunt(1, 300);
        let failed: Vec<String> = verdicts
            .iter()
            .filter(|v| !v.passed())
            .map(|v| format!("seed {}: {} -- {}", v.case.seed, v.case.describe(), v.result.as_ref().unwrap_err()))
            .collect();
        assert!(failed.is_empty(), "{} of 300 seeds failed:\n{}", failed.len(), failed.join("\n"));
        // The schedules reach what they are for.
        let with = |f: fn(&Verdict) -> bool| verdicts.iter().filter(|v| f(v)).count();
        assert!(with(|v| matches!(v.case.work, Work::DqWrite(_))) >= 50);
        assert!(with(|v| matches!(&v.case.work, Work::Write(w) if w.completion_crash.is_some())) >= 25);
        assert!(with(|v| matches!(&v.case.work, Work::Write(w) if w.spec.layout.replicas() == 3)) >= 15);
        assert!(with(|v| matches!(v.case.work, Work::Scan(_)) && v.case.faults().crashes > 0) >= 50);
        assert!(with(|v| v.case.faults().restarts > 0) >= 25);
        assert!(with(|v| v.case.faults().lost_connections > 0) >= 50);
        assert!(with(|v| v.case.faults().corrupt_blocks > 0) >= 70);
    }

    #[test]
    fn a_dq_write_whose_every_server_dies_is_caught() {
        let seed = (1..).find(|&s| matches!(case(s).work, Work::DqWrite(_))).unwrap();
        let Work::DqWrite(mut spec) = case(seed).work else { unreachable!() };
        spec.crashes = (0..spec.consumers as usize).map(|c| (Duration::from_millis(10), c)).collect();
        assert!(run_dq(&spec).is_err(), "no server left to write to: an error, not a hang");
    }

    #[test]
    fn a_write_that_loses_every_copy_of_a_fragment_is_caught() {
        let seed = (1..).find(|&s| matches!(case(s).work, Work::Write(_))).unwrap();
        let Work::Write(mut w) = case(seed).work else { unreachable!() };
        w.spec.chaos = vec![];
        let took = run_write(&w).unwrap().seconds;
        // Before the writers are done their engines fail; after, the landing does.
        for (at, says) in [(0.0, "no live server holds fragment0"), (0.95, "every copy of fragment0 is on a server")] {
            let at = Duration::from_secs_f64(at * took);
            w.spec.chaos = w.spec.layout.holders(FragmentId(0)).into_iter().map(|n| (at, Chaos::Crash(n))).collect();
            let e = run_write(&w).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_broken_promise_is_caught() {
        // Both copies of a block corrupt: no good copy is left, and the hunt says so rather
        // than hanging or delivering bad bytes.
        let seed = (1..).find(|&s| matches!(case(s).work, Work::Scan(_))).unwrap();
        let Work::Scan(mut spec) = case(seed).work else { unreachable!() };
        spec.chaos = (0..2)
            .map(|copy| {
                let node = spec.layout.node_of(FragmentId(0), copy);
                (Duration::ZERO, Chaos::Corrupt { node, fragment: FragmentId(0), block: 0 })
            })
            .collect();
        assert!(run_scan(&spec).is_err());
    }
}
