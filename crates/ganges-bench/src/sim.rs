//! `ganges sim`: the paper scenarios in virtual time (ganges-sim), printed, written as JSON
//! and drawn like the benchmarks.

use crate::plot::{self, Series};
use crate::util::{BenchError, BenchResult, Table};
use ganges_sim::scenario::{self, Job, Plan, Report, SCENARIOS, SimOptions};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// A scenario's report with what the machine did to produce it.
#[derive(Debug, Serialize)]
struct Document<'a> {
    bench: &'static str,
    #[serde(flatten)]
    report: &'a Report,
    wall_seconds: f64,
    events_per_second: f64,
    git_commit: String,
}

pub fn list() {
    let mut t = Table::new(&["scenario", "what it reproduces"]);
    for (name, what) in SCENARIOS {
        t.row(vec![name.to_string(), what.to_string()]);
    }
    t.row(vec!["hunt".into(), "seeded crashes, lost connections, corrupt blocks and slow disks against scans, invariants checked after every event (--seeds N from --seed)".into()]);
    print!("{}", t.render());
}

pub fn run(name: &str, opts: &SimOptions, json: Option<&PathBuf>, plot_path: Option<&PathBuf>) -> BenchResult<()> {
    let started = Instant::now();
    let plan = scenario::plan(name, opts).map_err(|e| BenchError::Failed(e.to_string()))?;
    let report = run_parallel(plan).map_err(|e| BenchError::Failed(e.to_string()))?;
    let wall = started.elapsed().as_secs_f64();
    print!("{}", render(&report));
    let rate = report.events as f64 / wall.max(1e-9);
    println!("{} events in {wall:.2} s of wall time: {:.2} M events/s", report.events, rate / 1e6);
    if let Some(path) = json {
        let doc = Document {
            bench: "sim",
            report: &report,
            wall_seconds: wall,
            events_per_second: rate,
            git_commit: crate::util::git_commit(),
        };
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .map_err(|e| BenchError::Failed(format!("writing {}: {e}", path.display())))?;
        println!("json: {}", path.display());
    }
    if let Some(path) = plot_path {
        draw(&report, path)?;
        println!("plot: {}", path.display());
    }
    Ok(())
}

/// Run a scenario's independent runs on every core, in virtual time each; the report is the
/// same as running them one after the other (each run is deterministic on its own).
fn run_parallel(plan: Plan) -> Result<Report, ganges_sim::SimError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(plan.jobs.len().max(1));
    let jobs: Vec<(usize, Job)> = plan.jobs.into_iter().enumerate().collect();
    let queue = std::sync::Mutex::new(jobs);
    let mut results: Vec<(usize, _)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = vec![];
                    loop {
                        // Take the lowest-numbered job left, so rows finish roughly in order.
                        let next = {
                            let mut q = queue.lock().expect("job queue");
                            if q.is_empty() { None } else { Some(q.remove(0)) }
                        };
                        let Some((i, job)) = next else { break };
                        done.push((i, job()));
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a simulation thread panicked")).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    Plan::finish(plan.report, results.into_iter().map(|(_, r)| r).collect())
}

fn pct(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

pub fn render(r: &Report) -> String {
    let mut out = format!("{}: {}\n", r.scenario, r.title);
    let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k} {v}")).collect();
    out.push_str(&format!("{}\n", params.join(", ")));
    let mut t =
        Table::new(&["series", &r.x_label, "seconds", "delivered %", "MOD-1 %", "MOD-2 %", "% of MOD-2", "backup %"]);
    for row in &r.rows {
        t.row(vec![
            row.series.clone(),
            format!("{}", row.x),
            format!("{:.3}", row.seconds),
            pct(row.delivered),
            pct(row.mod1),
            pct(row.mod2),
            pct(row.frac_layout_ideal),
            pct(row.backup_bytes_frac),
        ]);
    }
    out.push_str(&t.render());
    out.push_str(
        "delivered, MOD-1 and MOD-2: performance as a share of the unperturbed ideal (River's y axis); \
         % of MOD-2: this run against the best possible with its faults\n",
    );
    for tl in r.timelines.iter().filter(|tl| !tl.changes.is_empty()) {
        let after: Vec<String> = tl
            .changes
            .iter()
            .zip(&tl.adaptation_secs)
            .map(|(&(at, on), secs)| {
                let change = if on { "start" } else { "stop" };
                let secs = secs.map_or("never".into(), |s| format!("{s:.1} s"));
                format!("{secs} after the {change} ({at:.1} s)")
            })
            .collect();
        out.push_str(&format!("{}: adapted {}\n", tl.series, after.join(", ")));
    }
    if r.timelines.iter().any(|tl| !tl.changes.is_empty()) {
        out.push_str("adapted: the slowest consumer stays within 10% of its new ideal rate, over 500 ms windows\n");
    }
    for tl in r.timelines.iter().filter(|tl| tl.changes.is_empty()) {
        let when = match tl.convergence_secs {
            Some(s) => format!("balanced from {s:.1} s on"),
            None => "never balanced".to_string(),
        };
        out.push_str(&format!(
            "{}: {when} (every consumer within 10% of the mean rate, over 2 s windows)\n",
            tl.series
        ));
    }
    out.push_str(&format!("the paper: {}\n", r.paper));
    out
}

/// Delivered performance against x, one line per series, with the models dashed; or, for
/// a timeline scenario, every consumer's rate over time as a share of its ideal rate.
fn draw(r: &Report, path: &std::path::Path) -> BenchResult<()> {
    let log_x = r.scenario == "river-fig12";
    let x = |v: f64| if log_x { v.log2() } else { v };
    let x_label = if log_x { format!("log2 {}", r.x_label) } else { r.x_label.clone() };
    let mut names: Vec<&str> = vec![];
    for row in &r.rows {
        if !names.contains(&row.series.as_str()) {
            names.push(&row.series);
        }
    }
    if r.timelines.iter().any(|tl| !tl.changes.is_empty()) {
        return draw_slowest(r, path);
    }
    if !r.timelines.is_empty() {
        let mut series = vec![];
        let w = scenario::BALANCE_WINDOW_SAMPLES;
        // One colour per policy; its first consumer names it in the legend.
        for (t, tl) in r.timelines.iter().enumerate() {
            for (c, d) in tl.delivered.iter().enumerate() {
                let points = (w..d.len())
                    .map(|k| {
                        let rate = (d[k] - d[k - w]) as f64 / (w as f64 * tl.sample_secs);
                        (k as f64 * tl.sample_secs, rate / tl.ideal_rates[c])
                    })
                    .collect();
                series.push(Series {
                    name: format!("{} (each consumer)", tl.series),
                    points,
                    color: Some(t),
                    unlabelled: c > 0,
                    ..Default::default()
                });
            }
        }
        let title = format!("{}: each consumer's rate over 2 s, share of its ideal", r.scenario);
        return plot::line_chart(path, &title, "seconds", "share of ideal rate", &series, 1.6);
    }
    let mut series = vec![];
    for name in &names {
        let rows: Vec<_> = r.rows.iter().filter(|row| row.series == *name).collect();
        series.push(Series {
            name: name.to_string(),
            points: rows.iter().map(|row| (x(row.x), row.delivered)).collect(),
            ..Default::default()
        });
        let mod2: Vec<(f64, f64)> = rows.iter().map(|row| (x(row.x), row.mod2)).collect();
        let drawn = series.iter().any(|s| s.dashed && s.points == mod2);
        if !drawn && rows.iter().any(|row| (row.mod2 - row.mod1).abs() > 1e-9) {
            series.push(Series { name: format!("MOD-2 for {name}"), points: mod2, dashed: true, ..Default::default() });
        }
    }
    let first: Vec<_> = r.rows.iter().filter(|row| row.series == names[0]).collect();
    series.push(Series {
        name: "MOD-1 (River's model)".into(),
        points: first.iter().map(|row| (x(row.x), row.mod1)).collect(),
        dashed: true,
        ..Default::default()
    });
    let title = format!("{}: performance against the unperturbed ideal", r.scenario);
    plot::line_chart(path, &title, &x_label, "share of unperturbed ideal", &series, 1.1)
}

/// Faults that come and go: each run's slowest running consumer over 500 ms windows, as a
/// share of its ideal rate in the window's phase: the adaptation measure, drawn. One
/// colour per policy, dashed from the second fault count on (series are "policy, N faults").
fn draw_slowest(r: &Report, path: &std::path::Path) -> BenchResult<()> {
    let (mut policies, mut counts) = (vec![], vec![]);
    let series: Vec<Series> = r
        .timelines
        .iter()
        .map(|tl| {
            let (policy, count) = tl.series.split_once(", ").unwrap_or((&tl.series, ""));
            let index = |seen: &mut Vec<String>, name: &str| {
                seen.iter().position(|s| s == name).unwrap_or_else(|| {
                    seen.push(name.to_string());
                    seen.len() - 1
                })
            };
            let (color, dashed) = (index(&mut policies, policy), index(&mut counts, count) > 0);
            let points = tl.sampled().slowest_over_time();
            Series { name: tl.series.clone(), points, color: Some(color), dashed, ..Default::default() }
        })
        .collect();
    let title = format!("{}: the slowest consumer's rate over 500 ms, share of its ideal", r.scenario);
    plot::line_chart(path, &title, "seconds", "share of ideal rate", &series, 1.3)
}

/// What `ganges sim hunt` found, for its JSON.
#[derive(Serialize)]
struct HuntSummary {
    bench: &'static str,
    from: u64,
    seeds: u64,
    failed: Vec<HuntFailure>,
    /// Seeds that ran a DQ write (the others, a scan).
    dq_writes: usize,
    /// Writes into a replicated layout, each followed by replica completion.
    replicated_writes: usize,
    crashes: usize,
    restarts: usize,
    lost_connections: usize,
    corrupt_blocks: usize,
    events: u64,
    /// The largest share of its progress bound any seed took.
    worst_of_bound: f64,
    wall_seconds: f64,
    git_commit: String,
}

#[derive(Serialize)]
struct HuntFailure {
    seed: u64,
    schedule: String,
    error: String,
}

/// `ganges sim hunt`: `count` seeded fault schedules from `from` (ganges-sim's `hunt`); an
/// error if any seed fails, after printing each with the command that reproduces it.
pub fn hunt(from: u64, count: u64, json: Option<&PathBuf>) -> BenchResult<()> {
    use ganges_sim::hunt::{Faults, Work};
    let started = Instant::now();
    let verdicts = ganges_sim::hunt::hunt(from, count);
    let wall = started.elapsed().as_secs_f64();
    let sum = |f: fn(Faults) -> usize| -> usize { verdicts.iter().map(|v| f(v.case.faults())).sum() };
    let failed: Vec<HuntFailure> = verdicts
        .iter()
        .filter_map(|v| {
            let error = v.result.as_ref().err()?.clone();
            Some(HuntFailure { seed: v.case.seed, schedule: v.case.describe(), error })
        })
        .collect();
    let ok = || verdicts.iter().filter_map(|v| v.result.as_ref().ok().map(|o| (v, o)));
    let summary = HuntSummary {
        bench: "sim-hunt",
        from,
        seeds: count,
        dq_writes: verdicts.iter().filter(|v| matches!(v.case.work, Work::DqWrite(_))).count(),
        replicated_writes: verdicts.iter().filter(|v| matches!(v.case.work, Work::Write(_))).count(),
        crashes: sum(|f| f.crashes),
        restarts: sum(|f| f.restarts),
        lost_connections: sum(|f| f.lost_connections),
        corrupt_blocks: sum(|f| f.corrupt_blocks),
        events: ok().map(|(_, o)| o.events).sum(),
        worst_of_bound: ok().map(|(v, o)| o.seconds / v.case.bound).fold(0.0, f64::max),
        failed,
        wall_seconds: wall,
        git_commit: crate::util::git_commit(),
    };
    for f in &summary.failed {
        println!(
            "seed {}: {}\n  {}\n  reproduce: ganges sim hunt --seed {} --seeds 1",
            f.seed, f.schedule, f.error, f.seed
        );
    }
    println!(
        "hunt: {} seeds from {} ({} dq writes, {} replicated writes and their completion, the rest scans): {} failed; {} crashes ({} restarted), {} lost \
         connections, {} corrupt blocks; {} events checked; slowest at {:.0}% of its progress bound; {wall:.1} s",
        count,
        from,
        summary.dq_writes,
        summary.replicated_writes,
        summary.failed.len(),
        summary.crashes,
        summary.restarts,
        summary.lost_connections,
        summary.corrupt_blocks,
        summary.events,
        summary.worst_of_bound * 100.0
    );
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .map_err(|e| BenchError::Failed(format!("writing {}: {e}", path.display())))?;
    }
    if summary.failed.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Failed(format!("{} of {count} seeds failed", summary.failed.len())))
    }
}
