//! River's query primitives (`ganges run`) on a real local cluster, each checked exactly
//! against a simple in-memory reference, static and robust.

mod common;

use common::*;
use ganges_core::datagen::Generator;
use ganges_core::ids::{FragmentId, NodeId};
use ganges_flow::apps::{self, AppError, Setup};
use ganges_flow::records::{Batch, RecordLayout, Summary};
use ganges_flow::storage::{self, Sink, Streaming};
use ganges_proto::manifest::{DatasetName, DatasetState};
use std::collections::HashMap;
use std::sync::Arc;

const R: usize = 100;

fn name(s: &str) -> DatasetName {
    s.parse().unwrap()
}

/// The records a `Generator::Records` dataset of `bytes` holds, in order.
fn reference(seed: u64, bytes: usize) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; bytes];
    Generator::Records { seed }.fill(0, &mut buf);
    buf.chunks(R).map(<[u8]>::to_vec).collect()
}

fn records_of(batches: &[Batch]) -> Vec<Vec<u8>> {
    batches.iter().flat_map(|b| b.records().map(<[u8]>::to_vec).collect::<Vec<_>>()).collect()
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

/// A dataset's records in written order.
async fn written(client: &Arc<ganges_client::Client>, n: &str) -> Vec<Vec<u8>> {
    records_of(&apps::read_written(client, &name(n)).await.unwrap().1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_gives_the_reference_result_static_and_robust() {
    let c = start(4, disk(200.0));
    let client = c.client().await;
    // Blocks of 64 KiB + 36 B cut records everywhere; fragments hold whole records.
    let (left_bytes, right_bytes) = (4 * 5_000 * R, 4 * 1_500 * R);
    create(&client, "left", vec![left_bytes as u64 / 4; 4], 65_572, 2, Generator::Records { seed: 11 }).await;
    create(&client, "right", vec![right_bytes as u64 / 4; 4], 65_572, 2, Generator::Records { seed: 12 }).await;
    let left = reference(11, left_bytes);
    let right = reference(12, right_bytes);

    for robust in [false, true] {
        // Three workers on four servers: partitions are not fragments.
        for workers in [4, 3] {
            let v = format!("{}{workers}", if robust { "r" } else { "s" });
            let setup = Setup::in_process(client.clone(), workers, robust, 7);

            let scan = apps::scan(&setup, &name("left")).await.unwrap();
            let mut want = Summary::default();
            want.add(&Batch::new(left.concat().into(), RecordLayout::SORT_BENCHMARK).unwrap());
            assert!(scan.summary.same_records(&want), "{v}: scan {:?} != {want:?}", scan.summary);
            assert_eq!(scan.bytes_read, left_bytes as u64, "{v}");

            apps::generate(&setup, &name(&format!("gen{v}")), 12_345, 3).await.unwrap();
            assert_eq!(sorted(written(&client, &format!("gen{v}")).await), sorted(reference(3, 12_345 * R)), "{v}");

            let keep = apps::key_below(0.25);
            apps::filter(&setup, &name("left"), &name(&format!("filter{v}")), keep.clone()).await.unwrap();
            let want: Vec<_> = left.iter().filter(|r| keep(r)).cloned().collect();
            assert!(want.len() > 4_000, "{}", want.len());
            assert_eq!(sorted(written(&client, &format!("filter{v}")).await), sorted(want), "{v}");

            let all_sorted = sorted(left.clone());
            let top = apps::topn(&setup, &name("left"), &name(&format!("runs{v}")), 5).await.unwrap();
            let top: Vec<Vec<u8>> = top.top.iter().map(|b| b.to_vec()).collect();
            assert_eq!(top, all_sorted[..5], "{v}");
            let next = apps::topn_next(&client, &name(&format!("runs{v}")), 5, 7).await.unwrap();
            let next: Vec<Vec<u8>> = next.iter().map(|b| b.to_vec()).collect();
            assert_eq!(next, all_sorted[5..12], "{v}: the merge continued");

            apps::join(&setup, &name("left"), &name("right"), &name(&format!("join{v}")), 2).await.unwrap();
            let mut by_key: HashMap<&[u8], Vec<&Vec<u8>>> = HashMap::new();
            for l in &left {
                by_key.entry(&l[..2]).or_default().push(l);
            }
            let want: Vec<Vec<u8>> = right
                .iter()
                .flat_map(|r| by_key.get(&r[..2]).into_iter().flatten().map(move |l| [l.as_slice(), r].concat()))
                .collect();
            assert!(want.len() > 1_000, "{}", want.len());
            assert_eq!(sorted(written(&client, &format!("join{v}")).await), sorted(want), "{v}");

            let s = apps::sort(&setup, &name("left"), &name(&format!("sorted{v}"))).await.unwrap();
            assert_eq!(written(&client, &format!("sorted{v}")).await, all_sorted, "{v}: written order is key order");
            let check = apps::check(&client, &name(&format!("sorted{v}"))).await.unwrap();
            assert!(check.same_records(&s.input) && check.unordered == 0, "{v}: {check:?} {:?}", s.input);
        }
    }
}

/// A flow's output streamed to a distributed queue write reads back, in written order, as
/// the batches in the order they were put, with many writers taking its blocks as they come
/// (a sort's output is sorted only if that holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_write_keeps_the_order_its_batches_were_put_in() {
    let c = start(4, disk(400.0));
    let client = c.client().await;
    let layout = RecordLayout::SORT_BENCHMARK;
    let recs = reference(5, 40_000 * R);
    // The smallest blocks (41 records), so the sixteen writers take 976 of them.
    let mut streaming = Streaming::start(&client, name("streamed"), layout, 16, 0);
    let sink = streaming.sink();
    for chunk in recs.chunks(3) {
        if sink.send(Batch::new(chunk.concat().into(), layout).unwrap()).await.is_err() {
            break; // the write failed: its commit says why
        }
    }
    drop(sink);
    let (out, summary) = streaming.commit().await.unwrap();
    assert_eq!(summary.records, recs.len() as u64);
    let used = out.manifest.shape.fragment_sizes().iter().filter(|&&b| b > 0).count();
    assert!(used > 1, "the queue spread the blocks over the servers: {used}");
    assert_eq!(written(&client, "streamed").await, recs);
}

/// A flow's output written by graduated declustering has two full copies once written: it
/// reads back the same, in written order, with any one server gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gd_sink_writes_two_copies_that_survive_a_server() {
    let mut c = start(4, disk(400.0));
    let client = c.client().await;
    let layout = RecordLayout::SORT_BENCHMARK;
    let recs = reference(8, 4 * 3_000 * R);
    // Four instances' output, each of several batches.
    let output: Vec<Vec<Batch>> = recs
        .chunks(3_000)
        .map(|inst| inst.chunks(700).map(|b| Batch::new(b.concat().into(), layout).unwrap()).collect())
        .collect();
    storage::write_output(&client, &name("gd-out"), layout, &output, Sink::Gd, 4).await.unwrap();
    let m = client.manifest(&name("gd-out")).await.unwrap();
    assert_eq!((m.layout.replicas(), m.state), (2, DatasetState::Complete), "{m:?}");
    assert_eq!(written(&client, "gd-out").await, recs);
    c.local.kill(NodeId(1));
    let client = c.client().await;
    assert_eq!(written(&client, "gd-out").await, recs, "the other copies hold everything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primitive_refuses_what_it_cannot_run_and_leaves_nothing() {
    let c = start(3, disk(200.0));
    let client = c.client().await;
    create(&client, "bytes", vec![1 << 20; 3], 1 << 16, 2, Generator::Random { seed: 1 }).await;
    create(&client, "recs", vec![3_000 * R as u64; 3], 1 << 16, 2, Generator::Records { seed: 1 }).await;
    let setup = Setup::in_process(client.clone(), 3, true, 1);

    let e = apps::scan(&setup, &name("bytes")).await.unwrap_err();
    assert!(e.to_string().contains("not a dataset of records"), "{e}");
    let e = apps::scan(&setup, &name("nothing")).await.unwrap_err();
    assert!(matches!(e, AppError::Client(_)), "{e}");
    // A filter that keeps nothing writes nothing.
    let e = apps::filter(&setup, &name("recs"), &name("none"), apps::key_below(0.0)).await.unwrap_err();
    assert!(e.to_string().contains("no records"), "{e}");
    let e = apps::join(&setup, &name("recs"), &name("recs"), &name("j"), 9).await.unwrap_err();
    assert!(e.to_string().contains("1 to 8 bytes"), "{e}");
    let zero = Setup { workers: 0, ..setup.clone() };
    assert!(apps::sort(&zero, &name("recs"), &name("s")).await.is_err());
    // A module that fails fails the run, and its output is never written.
    let keep: apps::Predicate = Arc::new(|r: &[u8]| if r[0] == 0xff { panic!("a module dies") } else { true });
    let e = apps::filter(&setup, &name("recs"), &name("half"), keep).await.unwrap_err();
    assert!(e.to_string().contains("panicked"), "{e}");
    let (list, _) = ganges_client::dataset::list(&client, true).await.unwrap();
    let names: Vec<String> = list.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(names, ["bytes", "recs"], "nothing written and nothing staged");
}

/// A robust filter whose output is written as it is made goes on through a server killed
/// mid-run: its reads move to the other copies, the blocks that server held are written
/// again on the others, and the output is the reference's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robust_filter_writes_its_output_through_a_server_killed_mid_run() {
    let mut c = start(4, disk(12.0));
    let client = c.client().await;
    let bytes = 4 * 60_000 * R;
    create(&client, "recs", vec![bytes as u64 / 4; 4], 1 << 20, 2, Generator::Records { seed: 5 }).await;
    let keep = apps::key_below(0.5);
    let setup = Setup::in_process(client.clone(), 4, true, 1);
    let kill = async {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        c.local.kill(NodeId(2));
    };
    let (recs, kept) = (name("recs"), name("kept"));
    let (report, ()) = tokio::join!(apps::filter(&setup, &recs, &kept, keep.clone()), kill);
    let report = report.unwrap();
    assert!(report.seconds > 0.3, "the server died mid-run, not after it: {} s", report.seconds);
    let want: Vec<_> = reference(5, bytes).into_iter().filter(|r| keep(r)).collect();
    assert_eq!(report.summary.records, want.len() as u64);
    let out = report.output.as_ref().unwrap();
    let on: Vec<_> = (0..out.shape.fragment_count()).flat_map(|f| out.layout.holders(FragmentId(f))).collect();
    assert!(!on.contains(&NodeId(2)), "the output lives on the servers left: {on:?}");
    assert_eq!(sorted(written(&client, "kept").await), sorted(want));
}

/// `ganges run` from the shell: a generate, a sort that checks itself, a top-N continued.
#[test]
fn ganges_run_sorts_and_checks_from_the_shell() {
    let c = start(3, disk(200.0));
    let cluster = c.cluster_file();
    let cl = ["--cluster", cluster.as_str()];
    ok(&[&["run", "generate", "g", "--size", "3MB"][..], &cl].concat());
    let out = ok(&[&["run", "sort", "g", "gs", "--check", "--static"][..], &cl].concat());
    assert!(out.contains("valid: the records of `g`, in key order"), "{out}");
    let out = ok(&[&["run", "topn", "g", "--n", "2"][..], &cl].concat());
    assert!(out.contains("--after 2"), "{out}");
    let out = ok(&[&["run", "topn", "g", "--n", "2", "--after", "2"][..], &cl].concat());
    assert!(out.lines().next().unwrap().trim_start().starts_with("3 "), "{out}");
    let err = fails(&[&["run", "filter", "g", "f", "--keep", "2"][..], &cl].concat(), 1);
    assert!(err.contains("between 0 and 1"), "{err}");
}

/// The line a primitive ends with, its records and checksum (without the output's name).
fn result_line(out: &str) -> String {
    let last = out.lines().last().unwrap_or_default();
    last.rsplit("`: ").next().unwrap_or(last).to_string()
}

/// Workers as processes: `ganges run` starts them (the default) and gives what one process
/// gives; ranks started by a launcher (here by hand, as mpirun would: its environment)
/// find each other through the servers; a killed worker fails the run, leaving nothing.
#[test]
fn workers_as_processes_agree_with_one_process_and_a_killed_one_fails_the_run() {
    let c = start(3, disk(30.0));
    let cluster = c.cluster_file();
    let cl = cluster.as_str();
    ok(&["dataset", "create", "recs", "--size", "6MB", "--format", "records", "--cluster", cl]);

    let out = ok(&["run", "sort", "recs", "sorted", "--check", "--cluster", cl]);
    assert!(out.contains("valid: the records of `recs`, in key order"), "{out}");
    for (processes, one_process) in [
        (vec!["run", "scan", "recs"], vec!["run", "scan", "recs", "--in-process"]),
        (
            vec!["run", "join", "recs", "recs", "jp", "--key-bytes", "2"],
            vec!["run", "join", "recs", "recs", "jt", "--key-bytes", "2", "--in-process"],
        ),
    ] {
        let p = ok(&[&processes[..], &["--cluster", cl]].concat());
        let t = ok(&[&one_process[..], &["--cluster", cl]].concat());
        assert_eq!(result_line(&p), result_line(&t), "processes\n{p}\none process\n{t}");
    }

    // Three ranks as a launcher starts them: rank and size from its environment.
    let spawned: Vec<_> = (0..3)
        .map(|r| {
            std::process::Command::new(binary())
                .args(["worker", "scan", "recs", "--run-id", "t2", "--cluster", cl])
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "3")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = spawned.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let rank0 = String::from_utf8_lossy(&outs[0].stdout).to_string();
    let alone = ok(&["run", "scan", "recs", "--in-process", "--cluster", cl]);
    assert_eq!(result_line(&rank0), result_line(&alone), "rank 0 reports the whole run");
    assert!(outs[1].stdout.is_empty() && outs[2].stdout.is_empty(), "only rank 0 prints");

    // A worker killed mid-run: the run fails, naming it, and writes nothing.
    ok(&["dataset", "create", "big", "--size", "60MB", "--format", "records", "--cluster", cl]);
    let run = std::process::Command::new(binary())
        .args(["run", "sort", "big", "bigs", "--cluster", cl])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    let victim = loop {
        if let Some(&pid) = processes_with("worker\0sort\0big").first() {
            break pid;
        }
        assert!(waited.elapsed() < std::time::Duration::from_secs(20), "no worker started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(victim as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("worker"), "{err}");
    let info = ganges(&["dataset", "info", "bigs", "--cluster", cl]);
    assert!(!info.status.success(), "no output dataset: {}", String::from_utf8_lossy(&info.stdout));
    assert!(processes_with("worker\0sort\0big").is_empty(), "every worker is gone");
}
