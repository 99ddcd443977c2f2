//! `ganges run`: River's query primitives on a cluster's record datasets, static or robust.

use crate::commands::connect;
use crate::error::{CliResult, fail};
use bytes::Bytes;
use ganges_bench::util::Table;
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_flow::Mesh;
use ganges_flow::apps::{AppReport, Primitive, Ran, Setup};
use ganges_flow::records::Summary;
use ganges_proto::manifest::DatasetName;
use std::path::Path;

/// Where the workers run.
#[derive(Clone, Debug)]
pub enum Workers {
    /// Every worker a task of this process.
    InProcess,
    /// Start the workers as processes of this machine: this one is worker 0, and `args` (the
    /// command line after `run`) start the others as `ganges worker ARGS`.
    Launch { args: Vec<String> },
    /// One worker of a run started elsewhere (by `ganges run`, or a launcher: mpirun, srun).
    Worker { rank: u32, size: u32, run: u64 },
}

/// Environment of a worker `ganges run` starts: its rank, the run's size and id.
pub const RANK_ENV: &str = "GANGES_WORKER_RANK";
pub const SIZE_ENV: &str = "GANGES_WORKER_SIZE";
pub const RUN_ENV: &str = "GANGES_RUN_ID";

#[derive(Clone, Debug)]
pub struct RunArgs {
    pub app: Primitive,
    /// Workers per stage [default: one per server].
    pub workers: Option<usize>,
    pub robust: bool,
    pub seed: u64,
    pub placement: Workers,
}

/// This worker's rank, the run's size and its id, for `ganges worker`: from `ganges run`'s
/// environment, else the launcher's (`mpirun`'s, `srun`'s) with `run_id` or the launcher's
/// job id naming the run.
pub fn worker_place(run_id: Option<&str>) -> CliResult<Workers> {
    let get = |k: &str| std::env::var(k).ok();
    let (rank, size) = match (get(RANK_ENV), get(SIZE_ENV)) {
        (Some(r), Some(s)) => match (r.parse(), s.parse()) {
            (Ok(r), Ok(s)) => (r, s),
            _ => return fail(format!("{RANK_ENV}={r} and {SIZE_ENV}={s} are not numbers")),
        },
        _ => match ganges_client::array::launcher_rank() {
            Some(x) => x,
            None => return fail("a worker's rank is not set: run it under `ganges run`, mpirun or srun"),
        },
    };
    let job = run_id
        .map(str::to_string)
        .or_else(|| get(RUN_ENV))
        .or_else(|| get("PMIX_NAMESPACE"))
        .or_else(|| get("OMPI_MCA_ess_base_jobid"))
        .or_else(|| Some(format!("{}.{}", get("SLURM_JOB_ID")?, get("SLURM_STEP_ID").unwrap_or_default())));
    let Some(job) = job else {
        return fail("the workers of a run need one id: give every worker the same --run-id");
    };
    // FNV-1a of the job's name, unless it is the hex id `ganges run` gave.
    let fnv =
        |s: &str| s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let run = u64::from_str_radix(&job, 16).unwrap_or_else(|_| fnv(&job));
    Ok(Workers::Worker { rank, size, run })
}

/// The other workers of a launched run, killed if this one ends first.
struct Children(Vec<(u32, std::process::Child)>);

impl Children {
    fn start(args: &[String], size: u32, run: u64) -> CliResult<Children> {
        let exe = std::env::current_exe()?;
        let mut children = Children(vec![]);
        for rank in 1..size {
            let mut cmd = std::process::Command::new(&exe);
            cmd.arg("worker")
                .args(args)
                .env(RANK_ENV, rank.to_string())
                .env(SIZE_ENV, size.to_string())
                .env(RUN_ENV, format!("{run:x}"))
                .stdout(std::process::Stdio::null());
            ganges_harness::sys::tie_to_parent(&mut cmd, false);
            children.0.push((rank, cmd.spawn()?));
        }
        Ok(children)
    }

    /// The first worker to end (a worker ends only once the run has, or when it failed).
    async fn first_exit(&mut self) -> String {
        loop {
            for (rank, c) in &mut self.0 {
                match c.try_wait() {
                    Ok(Some(status)) => return format!("worker {rank} ended before the run began ({status})"),
                    Ok(None) => {}
                    Err(e) => return format!("worker {rank}: {e}"),
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Wait for every worker; the first that failed.
    fn wait(mut self) -> CliResult<()> {
        let mut first = None;
        for (rank, c) in &mut self.0 {
            let status = c.wait()?;
            if !status.success() && first.is_none() {
                first = Some(format!("worker {rank} failed ({status})"));
            }
        }
        self.0.clear();
        first.map_or(Ok(()), fail)
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub async fn run(cluster: &Path, a: RunArgs) -> CliResult<()> {
    let client = connect(cluster).await?;
    let workers = a.workers.unwrap_or(client.nodes() as usize);
    if workers == 0 {
        return fail("--workers must be at least 1");
    }
    let (mesh, children) = match &a.placement {
        Workers::InProcess => (None, None),
        Workers::Launch { args } => {
            let run: u64 = rand::random();
            let mut children = Children::start(args, workers as u32, run)?;
            // A worker that dies before the others have met fails the run now, not when
            // the meeting times out.
            let mesh = tokio::select! {
                m = Mesh::join(&client, run, 0, workers as u32) => m?,
                why = children.first_exit() => return fail(why),
            };
            (Some(mesh), Some(children))
        }
        Workers::Worker { rank, size, run } => {
            if a.workers.is_some_and(|w| w != *size as usize) {
                return fail(format!("--workers {workers}, but the launcher started {size}"));
            }
            (Some(Mesh::join(&client, *run, *rank, *size).await?), None)
        }
    };
    let workers = mesh.as_ref().map_or(workers, |m| m.size() as usize);
    let setup = Setup { client: client.clone(), workers, robust: a.robust, seed: a.seed, mesh: mesh.clone() };
    let result = run_app(&setup, &a).await;
    if let Some(m) = &mesh
        && result.is_ok()
    {
        m.leave().await;
    }
    result?;
    match children {
        Some(c) => c.wait(),
        None => Ok(()),
    }
}

async fn run_app(setup: &Setup, a: &RunArgs) -> CliResult<()> {
    let workers = setup.workers;
    let version = if a.robust { "robust" } else { "static" };
    let leads = setup.leads();
    let ran = a.app.run(setup).await?;
    if !leads {
        return Ok(());
    }
    match (&a.app, ran) {
        (Primitive::TopN { after, .. }, Ran::Top(top)) => print_records(&top, after.unwrap_or(0)),
        (Primitive::TopN { input, runs, n, .. }, Ran::Report(r, _)) => {
            print_records(&r.top, 0);
            println!("(the next {n}: ganges run topn {input} --runs {runs} --n {n} --after {})", r.top.len());
            print_report(version, workers, &r);
        }
        (Primitive::Sort { input, output, .. }, Ran::Report(r, read_back)) => {
            print_report(version, workers, &r);
            if let Some(s) = read_back {
                print_check(output, &s);
                if !s.same_records(&r.input) || s.unordered != 0 {
                    return fail(format!(
                        "`{output}` is not `{input}` sorted: {} records in, checksum {:x}",
                        r.input.records, r.input.checksum
                    ));
                }
                println!("valid: the records of `{input}`, in key order");
            }
        }
        (Primitive::Check { name }, Ran::Check(s)) => {
            print_check(name, &s);
            if s.unordered != 0 {
                return fail(format!("`{name}` is not in key order"));
            }
        }
        (_, Ran::Report(r, _)) => print_report(version, workers, &r),
        (_, _) => {}
    }
    Ok(())
}

fn print_records(top: &[Bytes], after: usize) {
    for (i, r) in top.iter().enumerate() {
        let key: String = r.iter().take(10).map(|b| format!("{b:02x}")).collect();
        println!("{:>6}  {key}", after + i + 1);
    }
}

fn print_check(name: &DatasetName, s: &Summary) {
    println!(
        "{name}: {} records, checksum {:x}, {} out of order, {} duplicate keys",
        s.records, s.checksum, s.unordered, s.duplicate_keys
    );
}

fn print_report(version: &str, workers: usize, r: &AppReport) {
    let mut t = Table::new(&["stage", "instances", "records in", "records out", "busiest (s)", "idlest (s)"]);
    for s in &r.stages {
        let busy = s.instances.iter().map(|i| i.busy.as_secs_f64());
        let (max, min) = busy.fold((0f64, f64::MAX), |(a, b), x| (a.max(x), b.min(x)));
        t.row(vec![
            s.name.clone(),
            s.instances.len().to_string(),
            s.records_in().to_string(),
            s.records_out().to_string(),
            format!("{max:.2}"),
            format!("{min:.2}"),
        ]);
    }
    print!("{}", t.render());
    let moved = r.bytes_read + r.bytes_written;
    println!(
        "{version}, {workers} workers: {:.2} s ({:.1} MB/s through the disks); read {} ({:.0}% from backup copies), wrote {} in {:.2} s",
        r.seconds,
        mb_per_sec(moved, r.seconds),
        ByteSize(r.bytes_read),
        100.0 * r.backup_bytes as f64 / r.bytes_read.max(1) as f64,
        ByteSize(r.bytes_written),
        r.write_seconds,
    );
    let what = match &r.output {
        Some(m) => format!("output `{}`: {} records", m.name, r.summary.records),
        None => format!("{} records", r.summary.records),
    };
    match r.summary.checksum {
        0 => println!("{what}"),
        sum => println!("{what}, checksum {sum:x}"),
    }
}

/// Where `topn` keeps its runs unless told: `INPUT.runs`.
pub fn default_runs(input: &DatasetName) -> CliResult<DatasetName> {
    Ok(format!("{input}.runs").parse()?)
}
