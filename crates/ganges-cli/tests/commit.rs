//! The commit rule under crashes: a fail point (`GANGES_FAIL_AT`) kills or stops a server
//! or the writing client at every step of stage / prepare / commit, on a real local
//! cluster; afterwards the write is either whole on every server (and reads back checked)
//! or nowhere, with no staging left behind, and never anything in between. Also a repair
//! killed or stopped between two blocks.

mod common;

use common::{TestCluster, binary};
use ganges_client::dataset;
use ganges_core::ids::NodeId;
use ganges_harness::local::{LocalCluster, LocalSpec};
use std::time::{Duration, Instant};

const NODES: u32 = 3;
/// Short, so that servers act on a dead client's writes within the test.
const TXN_TIMEOUT: Duration = Duration::from_secs(2);
const NAME: &str = "precious";

fn start() -> TestCluster {
    let root = tempfile::tempdir().unwrap();
    let spec = LocalSpec {
        txn_timeout: Some(TXN_TIMEOUT),
        ..LocalSpec::new(NODES, root.path().to_path_buf(), None, binary())
    };
    let local = LocalCluster::start(&spec).expect("local cluster starts");
    local.cluster().save(&local.cluster().path).unwrap();
    TestCluster { local, root }
}

/// `ganges dataset create` of a 3 MiB dataset with 2 copies, in a process of its own, with
/// `fail_at` in its environment; returns whether it succeeded, and its stderr.
fn create(t: &TestCluster, fail_at: Option<&str>) -> (bool, String) {
    let cluster = t.local.cluster().path.display().to_string();
    let mut cmd = std::process::Command::new(binary());
    cmd.args(["dataset", "create", NAME, "--size", "3MiB", "--block-size", "256KiB", "--replicas", "2"])
        .args(["--cluster", &cluster]);
    if let Some(f) = fail_at {
        cmd.env(ganges_net::failpoint::ENV, f);
    }
    let out = cmd.output().expect("ganges runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// What every server holds of the dataset: committed, and staging folders left.
fn holdings(t: &TestCluster) -> (Vec<bool>, usize) {
    let mut committed = vec![];
    let mut staging = 0;
    for n in 0..NODES {
        let dir = t.data_dir(n);
        committed.push(dir.join("datasets").join(NAME).join("manifest.json").exists());
        staging += std::fs::read_dir(dir.join("staging")).map(|d| d.count()).unwrap_or(0);
    }
    (committed, staging)
}

/// Wait until the write is resolved everywhere (no staging left), then check it is whole
/// (`whole`: on every server, every copy checked, the digest right) or nowhere.
async fn settles(t: &TestCluster, whole: bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (committed, staging) = loop {
        let (committed, staging) = holdings(t);
        let done = staging == 0 && committed.iter().all(|&c| c == whole);
        if done || Instant::now() > deadline {
            break (committed, staging);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(staging, 0, "{what}: staging folders left behind");
    assert!(
        committed.iter().all(|&c| c == whole),
        "{what}: committed on {committed:?}; the rule says {}",
        if whole { "everywhere" } else { "nowhere" }
    );
    let client = t.client().await;
    let name = NAME.parse().unwrap();
    if whole {
        let v = dataset::verify(&client, &name, None).await.expect("verify");
        assert!(v.is_clean(), "{what}: the committed write does not verify: {v:?}");
        assert_eq!(v.bytes, 2 * 3 * 1024 * 1024, "{what}: both copies of every block");
    } else {
        let e = client.manifest(&name).await.expect_err("nothing visible");
        assert!(e.to_string().contains("no dataset"), "{what}: {e}");
    }
}

/// A server crashes at `point` during the write; it is restarted; the write ends `whole`
/// or not, by the rule.
async fn server_crash(node: u32, point: &str, whole: bool) {
    let mut t = start();
    let spec = format!("{point}=crash");
    t.local.restart_with_env(NodeId(node), &[(ganges_net::failpoint::ENV, &spec)]).unwrap();
    let (ok, err) = create(&t, None);
    let what = format!("node{node} crashed at {point}");
    assert!(t.local.pid(NodeId(node)).is_some());
    t.local.restart(NodeId(node)).unwrap();
    if !whole {
        assert!(!ok, "{what}: the write reported success");
    }
    eprintln!("{what}: the client said ok={ok}: {}", err.lines().last().unwrap_or(""));
    settles(&t, whole, &what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_crash_before_its_manifest_is_written_rolls_the_write_back() {
    server_crash(1, "server.prepare.synced", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_crashed_prepared_rolls_back_when_the_write_failed() {
    // Its prepare never answered, so the client aborted the others; back up, it asks the
    // coordinator, which knows nothing of the write.
    server_crash(1, "server.prepare.done", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_that_crashed_after_committing_rolls_everyone_forward() {
    // The client saw no answer and aborted nothing (the commit is in doubt); the
    // participants ask the coordinator once it is back, and commit.
    server_crash(0, "server.commit.renamed", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_crashed_while_committing_has_the_dataset_when_back() {
    server_crash(2, "server.commit.renamed", true).await;
}

/// The writing client crashes at `point`; the servers end the write `whole` or not.
async fn client_crash(point: &str, whole: bool) {
    let t = start();
    let (ok, err) = create(&t, Some(&format!("{point}=crash")));
    assert!(!ok, "the client was killed at {point} but exited cleanly: {err}");
    assert!(err.contains(&format!("fail point {point}")), "{point} was never reached: {err}");
    settles(&t, whole, &format!("the client crashed at {point}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_crash_while_writing_leaves_nothing_once_the_servers_time_out() {
    client_crash("client.write.staged", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_crash_after_prepare_is_rolled_back_by_the_coordinator() {
    client_crash("client.write.prepared", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_crash_after_the_coordinator_committed_is_rolled_forward() {
    client_crash("client.write.committed-first", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_stopped_in_its_commit_finishes_it_once_continued() {
    let mut t = start();
    t.local.restart_with_env(NodeId(0), &[(ganges_net::failpoint::ENV, "server.commit.renamed=stop")]).unwrap();
    let pid = t.local.pid(NodeId(0)).unwrap();
    let writer = {
        let cluster = t.local.cluster().path.clone();
        std::thread::spawn(move || {
            std::process::Command::new(binary())
                .args(["dataset", "create", NAME, "--size", "3MiB", "--block-size", "256KiB", "--replicas", "2"])
                .arg("--cluster")
                .arg(cluster)
                .output()
                .expect("ganges runs")
        })
    };
    // Stopped in the middle of its commit, the coordinator holds everyone in doubt: the
    // participants, asking it, get no answer and wait.
    common::wait_stopped(pid);
    std::thread::sleep(TXN_TIMEOUT * 2);
    let (committed, staging) = holdings(&t);
    assert_eq!(committed, vec![true, false, false], "only the coordinator renamed; the others wait");
    assert_eq!(staging, 2, "the participants keep their prepared writes while in doubt");
    assert!(ganges_harness::sys::signal(pid, ganges_harness::sys::SIGCONT));
    let out = writer.join().unwrap();
    assert!(out.status.success(), "the write failed: {}", String::from_utf8_lossy(&out.stderr));
    settles(&t, true, "node0 stopped in its commit, then continued").await;
}

/// A repair (scrub's `Fill` of named blocks) interrupted after its first block: crashed, the
/// next scrub repairs what is still bad; stopped for 5 s, the same scrub finishes it. Either
/// way every copy verifies in the end.
async fn repair_interrupted(action: &str) {
    use ganges_client::repair;
    let mut t = start();
    let name: ganges_proto::manifest::DatasetName = NAME.parse().unwrap();
    let (ok, err) = create(&t, None);
    assert!(ok, "{err}");
    // Two bad blocks in node1's primary copy of fragment 1.
    let path = t.data_dir(1).join(format!("datasets/{NAME}/f00001.c0.data"));
    let mut bytes = std::fs::read(&path).unwrap();
    for b in [0usize, 2] {
        bytes[b * (256 << 10) + 3] ^= 0x10;
    }
    std::fs::write(&path, bytes).unwrap();
    let spec = format!("server.fill.wrote={action}");
    t.local.restart_with_env(NodeId(1), &[(ganges_net::failpoint::ENV, &spec)]).unwrap();
    let client = t.client().await;
    let pid = t.local.pid(NodeId(1)).unwrap();
    let stopped = (action == "stop").then(|| {
        std::thread::spawn(move || {
            // Continue it once it has stopped itself, 5 s later.
            common::wait_stopped(pid);
            std::thread::sleep(Duration::from_secs(5));
            assert!(ganges_harness::sys::signal(pid, ganges_harness::sys::SIGCONT));
        })
    });
    let first = repair::scrub(&client, &name, None).await.expect("a report");
    assert_eq!(first.checked.bad.len(), 2, "both bad blocks found: {first:?}");
    if let Some(s) = stopped {
        s.join().unwrap();
        assert!(first.is_clean(), "the stopped repair finished: {first:?}");
    } else {
        assert!(!first.unrepaired.is_empty(), "the crash interrupted the repair: {first:?}");
        t.local.restart(NodeId(1)).unwrap();
        let again = repair::scrub(&*t.client().await, &name, None).await.expect("a report");
        assert!(again.is_clean(), "{again:?}");
    }
    let v = dataset::verify(&*t.client().await, &name, None).await.unwrap();
    assert!(v.is_clean(), "every copy verifies: {v:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_crashed_after_its_first_block_is_finished_by_the_next_scrub() {
    repair_interrupted("crash").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_stopped_after_its_first_block_finishes_once_continued() {
    repair_interrupted("stop").await;
}
