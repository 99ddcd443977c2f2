//! `ganges run`: River's query primitives on a cluster's record datasets, static or robust.

use crate::commands::connect;
use crate::error::{CliResult, fail};
use bytes::Bytes;
use ganges_bench::util::Table;
use ganges_core::units::{ByteSize, mb_per_sec};
use ganges_flow::apps::{self, AppReport, Setup};
use ganges_flow::records::Summary;
use ganges_proto::manifest::DatasetName;
use std::path::Path;

/// Which primitive, on what.
#[derive(Clone, Debug)]
pub enum App {
    Scan {
        input: DatasetName,
    },
    Generate {
        output: DatasetName,
        records: u64,
        seed: u64,
    },
    Filter {
        input: DatasetName,
        output: DatasetName,
        keep: f64,
    },
    /// `after`: records already seen, to continue the merge from the runs alone.
    TopN {
        input: DatasetName,
        runs: DatasetName,
        n: usize,
        after: Option<usize>,
    },
    Join {
        left: DatasetName,
        right: DatasetName,
        output: DatasetName,
        key_bytes: u32,
    },
    /// `check`: read the output back in written order and check it as valsort does.
    Sort {
        input: DatasetName,
        output: DatasetName,
        check: bool,
    },
    Check {
        name: DatasetName,
    },
}

#[derive(Clone, Debug)]
pub struct RunArgs {
    pub app: App,
    /// Workers per stage [default: one per server].
    pub workers: Option<usize>,
    pub robust: bool,
    pub seed: u64,
}

pub async fn run(cluster: &Path, a: RunArgs) -> CliResult<()> {
    let client = connect(cluster).await?;
    let workers = a.workers.unwrap_or(client.nodes() as usize);
    if workers == 0 {
        return fail("--workers must be at least 1");
    }
    let setup = Setup { client: client.clone(), workers, robust: a.robust, seed: a.seed };
    let version = if a.robust { "robust" } else { "static" };
    let report = match &a.app {
        App::Scan { input } => apps::scan(&setup, input).await?,
        App::Generate { output, records, seed } => apps::generate(&setup, output, *records, *seed).await?,
        App::Filter { input, output, keep } => apps::filter(&setup, input, output, apps::key_below(*keep)).await?,
        App::TopN { runs, n, after: Some(after), .. } => {
            let top = apps::topn_next(&client, runs, *after, *n).await?;
            print_records(&top, *after);
            return Ok(());
        }
        App::TopN { input, runs, n, after: None } => {
            let r = apps::topn(&setup, input, runs, *n).await?;
            print_records(&r.top, 0);
            println!("(the next {n}: ganges run topn {input} --runs {runs} --n {n} --after {})", r.top.len());
            r
        }
        App::Join { left, right, output, key_bytes } => apps::join(&setup, left, right, output, *key_bytes).await?,
        App::Sort { input, output, check } => {
            let r = apps::sort(&setup, input, output).await?;
            print_report(version, workers, &r);
            if !check {
                return Ok(());
            }
            let s = apps::check(&client, output).await?;
            print_check(output, &s);
            if !s.same_records(&r.input) || s.unordered != 0 {
                return fail(format!(
                    "`{output}` is not `{input}` sorted: {} records in, checksum {:x}",
                    r.input.records, r.input.checksum
                ));
            }
            println!("valid: the records of `{input}`, in key order");
            return Ok(());
        }
        App::Check { name } => {
            let s = apps::check(&client, name).await?;
            print_check(name, &s);
            return if s.unordered == 0 { Ok(()) } else { fail(format!("`{name}` is not in key order")) };
        }
    };
    print_report(version, workers, &report);
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
