//! Cells of the fault matrix (docs/reliability.md) that no other test covers: a server
//! stopped (SIGSTOP) for 5 s in a static, gd, dq or ceft write, a completion or a scrub; a
//! server killed in a static or ceft write, or before a scrub; random-access reads through
//! a killed or stopped server or a corrupt block; a corrupt block met by an ordered export
//! or by a completion that has no other copy; gd and dq writes, and a repair, on a full
//! disk. Each ends with every byte where it belongs (read back, or verified on every copy)
//! or a typed error with nothing half-visible.

mod common;

use common::{TestCluster, create, start};
use ganges_client::dataset;
use ganges_client::repair;
use ganges_client::scan::ReadOptions;
use ganges_client::write::{self, WriteSource, WriteSpec};
use ganges_core::datagen::Generator;
use ganges_core::ids::NodeId;
use ganges_core::write::WritePolicyKind;
use ganges_proto::manifest::{DatasetName, DatasetState, RecordFormat};
use std::time::{Duration, Instant};

const STOP: Duration = Duration::from_secs(5);
const G: Generator = Generator::Random { seed: 11 };

fn spec(name: &str, policy: WritePolicyKind, complete: bool) -> WriteSpec {
    WriteSpec {
        name: name.parse().unwrap(),
        writers: 4,
        total_bytes: 16 << 20,
        block_bytes: 256 << 10,
        replicas: policy.default_replicas(),
        policy,
        window: None,
        source: WriteSource::Generated(G),
        complete,
        run_blocks: 1,
        ceft: Default::default(),
        mirrored: policy.default_mirrored(),
        records: RecordFormat::Bytes,
    }
}

/// Stop `node` for `STOP` once it has moved a byte of the operation (read or written),
/// from a thread of its own; returns when it was continued.
fn stop_for_a_while(t: &TestCluster, node: NodeId) -> std::thread::JoinHandle<()> {
    let pid = t.local.pid(node).expect("running");
    std::thread::spawn(move || {
        assert!(ganges_harness::sys::signal(pid, ganges_harness::sys::SIGSTOP));
        std::thread::sleep(STOP);
        assert!(ganges_harness::sys::signal(pid, ganges_harness::sys::SIGCONT));
    })
}

/// Every copy of every block verifies, and the digest is the dataset's.
async fn whole(client: &ganges_client::Client, name: &DatasetName) {
    let v = dataset::verify(client, name, None).await.expect("verify");
    assert!(v.is_clean(), "{name}: {v:?}");
}

async fn moved(client: &ganges_client::Client, node: NodeId, writes: bool) -> u64 {
    use ganges_proto::control::{ControlReply, ControlRequest};
    match client.control(node, ControlRequest::Stats).await.unwrap() {
        ControlReply::Stats { stats } => {
            if writes {
                stats.write_bytes
            } else {
                stats.read_bytes
            }
        }
        other => panic!("{other:?}"),
    }
}

/// A write through a server stopped for 5 s mid-way commits, whole or degraded, and reads
/// back byte for byte.
async fn write_through_a_stop(policy: WritePolicyKind) {
    let t = start(4, common::disk(16.0));
    let client = t.client().await;
    let name = format!("stopped-{policy}");
    let before = moved(&client, NodeId(1), true).await;
    let w = {
        let (client, s) = (client.clone(), spec(&name, policy, false));
        tokio::spawn(async move { write::write(&client, s, None).await })
    };
    common::until_moved(&client, NodeId(1), before + 1, true).await;
    let stopped = stop_for_a_while(&t, NodeId(1));
    let out = w.await.unwrap().expect("the write commits");
    stopped.join().unwrap();
    eprintln!("{policy} through a 5 s stop: missing {:?}", out.missing);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("back.bin");
    dataset::get(&client, &out.manifest.name, &file, ReadOptions::default(), None).await.expect("reads back");
    let mut want = vec![0u8; 16 << 20];
    G.fill(0, &mut want);
    assert!(std::fs::read(&file).unwrap() == want, "{policy}: the bytes read back are the bytes written");
    let m = out.manifest;
    if out.missing.is_empty() {
        whole(&client, &m.name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gd_write_through_a_stopped_server_commits_and_reads_back() {
    write_through_a_stop(WritePolicyKind::Gd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dq_write_through_a_stopped_server_commits_and_reads_back() {
    write_through_a_stop(WritePolicyKind::Dq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_through_a_stopped_server_finishes_once_it_continues() {
    let t = start(4, common::disk(16.0));
    let client = t.client().await;
    let out = write::write(&client, spec("half", WritePolicyKind::Gd, false), None).await.unwrap();
    assert_eq!(out.manifest.state, DatasetState::Incomplete);
    let c = {
        let (client, name) = (client.clone(), out.manifest.name.clone());
        tokio::spawn(async move { write::complete(&client, &name).await })
    };
    // Fills do not show in the write counters: stop it a moment into the completion.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!c.is_finished(), "the completion is still running");
    let stopped = stop_for_a_while(&t, NodeId(1));
    let started = Instant::now();
    c.await.unwrap().expect("completion finishes");
    stopped.join().unwrap();
    assert!(started.elapsed() >= STOP - Duration::from_millis(500), "it waited for the stopped server");
    let m = client.manifest(&out.manifest.name).await.unwrap();
    assert_eq!(m.state, DatasetState::Complete);
    whole(&client, &m.name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrub_through_a_stopped_server_checks_every_copy_once_it_continues() {
    let t = start(4, common::disk(16.0));
    let client = t.client().await;
    let m = create(&client, "s", vec![2 << 20; 4], 256 << 10, 2, G).await;
    // A check is too quick to stop in the middle of: the server is stopped as it begins.
    let stopped = stop_for_a_while(&t, NodeId(1));
    let started = Instant::now();
    let report = repair::scrub(&client, &m.name, None).await.expect("the scrub finishes");
    stopped.join().unwrap();
    assert!(started.elapsed() >= STOP - Duration::from_millis(500), "it waited for the stopped server");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.checked.bytes, 2 * (8 << 20), "both copies of every block");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrub_with_a_dead_server_checks_the_rest_and_names_it() {
    let mut t = start(4, None);
    let client = t.client().await;
    let m = create(&client, "s", vec![2 << 20; 4], 256 << 10, 2, G).await;
    t.local.kill(NodeId(2));
    let report = repair::scrub(&client, &m.name, None).await.expect("a report, not an error");
    assert_eq!(report.checked.unreachable, vec![NodeId(2)]);
    assert!(!report.is_clean(), "a scrub that could not check a server is not clean");
    assert_eq!(report.checked.bytes, 2 * (8 << 20) - 2 * (2 << 20), "every copy on the live servers");
    assert!(report.checked.bad.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_export_meeting_a_corrupt_block_writes_the_right_bytes_and_heals_it() {
    let t = start(4, None);
    let client = t.client().await;
    let m = create(&client, "bad", vec![1 << 20; 4], 64 << 10, 2, G).await;
    // Flip a byte of block 3 of fragment 1's primary copy (on node 1).
    let path = t.data_dir(1).join("datasets/bad/f00001.c0.data");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[3 * 65536 + 5] ^= 0x08;
    std::fs::write(&path, bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad.bin");
    // Static: every block from its primary, so the bad copy is met.
    let opts = ReadOptions::new(ganges_core::route::ReadPolicyKind::Static);
    dataset::get(&client, &m.name, &out, opts, None).await.expect("the export completes");
    let mut want = vec![0u8; 4 << 20];
    G.fill(0, &mut want);
    assert!(std::fs::read(&out).unwrap() == want, "the exported file is the dataset");
    repair::settle().await;
    whole(&client, &m.name).await;
    let info = dataset::info(&client, &m.name).await.unwrap();
    assert_eq!(info.repaired, vec![(NodeId(1), 1)], "healed on read");
}

/// A static or ceft write losing `victim` mid-way commits degraded and reads back byte for
/// byte; completion restores the copies once the server is back.
async fn write_through_a_kill(policy: WritePolicyKind, victim: NodeId) {
    let mut t = start(4, common::disk(16.0));
    let client = t.client().await;
    let name = format!("killed-{policy}");
    let before = moved(&client, victim, true).await;
    let w = {
        let (client, s) = (client.clone(), spec(&name, policy, false));
        tokio::spawn(async move { write::write(&client, s, None).await })
    };
    common::until_moved(&client, victim, before + 1, true).await;
    assert!(!w.is_finished(), "{victim} dies mid-write");
    t.local.kill(victim);
    let out = w.await.unwrap().expect("a degraded write commits");
    assert_eq!(out.missing, vec![victim], "{policy}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("back.bin");
    dataset::get(&client, &out.manifest.name, &file, ReadOptions::default(), None).await.expect("reads back");
    let mut want = vec![0u8; 16 << 20];
    G.fill(0, &mut want);
    assert!(std::fs::read(&file).unwrap() == want, "{policy}: every byte has a live copy");
    t.local.restart(victim).unwrap();
    let client = t.client().await;
    let done = write::complete(&client, &out.manifest.name).await.expect("completion restores the copies");
    assert_eq!(done.restored, vec![victim]);
    whole(&client, &out.manifest.name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_write_losing_a_server_commits_degraded_and_is_restored() {
    write_through_a_kill(WritePolicyKind::Static, NodeId(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ceft_write_losing_a_server_commits_degraded_and_is_restored() {
    // CEFT-PVFS's rule writes to group A's node of a pair when loads are even.
    write_through_a_kill(WritePolicyKind::Ceft, NodeId(1)).await;
}

/// 240 random-access reads of 64 KiB at seeded offsets of a 16 MiB dataset (2 copies), 8 in
/// flight, with `fault` applied to node1 after the 80th; every read returns the dataset's
/// bytes.
async fn random_reads_through(t: &mut TestCluster, fault: &str) {
    use ganges_client::stream::AsyncReader;
    let client = t.client().await;
    let m = std::sync::Arc::new(create(&client, "r", vec![4 << 20; 4], 256 << 10, 2, G).await);
    if fault == "corrupt" {
        // Block 5 of fragment 1's primary copy, on node1.
        let path = t.data_dir(1).join("datasets/r/f00001.c0.data");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[5 * (256 << 10) + 99] ^= 0x20;
        std::fs::write(&path, bytes).unwrap();
    }
    let mut offsets: Vec<u64> =
        (0..240u64).map(|i| ganges_core::datagen::mix64(i ^ 0x5eed) % ((16 << 20) - (64 << 10))).collect();
    if fault == "corrupt" {
        offsets.push((4 << 20) + 5 * (256 << 10)); // the bad block's range, for sure
    }
    let opts = ReadOptions::new(ganges_core::route::ReadPolicyKind::Static);
    let mut r = AsyncReader::open(client.clone(), m.clone(), opts).unwrap();
    let mut want = vec![0u8; 16 << 20];
    G.fill(0, &mut want);
    let mut tickets = std::collections::HashMap::new();
    let mut stopped = None;
    for (i, &off) in offsets.iter().enumerate() {
        if i == 80 {
            match fault {
                "kill" => t.local.kill(NodeId(1)),
                "stop" => stopped = Some(stop_for_a_while(t, NodeId(1))),
                _ => {}
            }
        }
        tickets.insert(r.submit(off, 64 << 10).unwrap(), off);
        while r.pending() >= 8 {
            let (ticket, bytes) = r.reap().await.expect("the read completes").expect("pending");
            let at = tickets.remove(&ticket).unwrap() as usize;
            assert!(bytes[..] == want[at..at + (64 << 10)], "{fault}: the bytes at {at}");
        }
    }
    while let Some((ticket, bytes)) = r.reap().await.expect("the read completes") {
        let at = tickets.remove(&ticket).unwrap() as usize;
        assert!(bytes[..] == want[at..at + (64 << 10)], "{fault}: the bytes at {at}");
    }
    assert!(tickets.is_empty());
    drop(r);
    if let Some(s) = stopped {
        s.join().unwrap();
    }
    if fault == "corrupt" {
        repair::settle().await;
        whole(&client, &m.name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_through_a_killed_server_return_the_right_bytes() {
    let mut t = start(4, common::disk(16.0));
    random_reads_through(&mut t, "kill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_through_a_stopped_server_return_the_right_bytes() {
    let mut t = start(4, common::disk(16.0));
    random_reads_through(&mut t, "stop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_meeting_a_corrupt_block_return_the_right_bytes_and_heal_it() {
    let mut t = start(4, None);
    random_reads_through(&mut t, "corrupt").await;
}

/// A gd or dq write onto a server whose disk fills: a typed error naming the server, and
/// nothing of the write visible or left in staging anywhere.
async fn write_onto_a_full_disk(policy: WritePolicyKind) {
    let Some(mut c) = common::start_with_small_disk(4, "2m", common::disk(64.0)) else { return };
    let client = ganges_client::Client::connect(c.local.cluster().clone()).await.unwrap();
    let e = write::write(&client, spec("big", policy, true), None).await.expect_err("the write cannot fit");
    assert_eq!(e.code(), Some(ganges_proto::msg::ErrorCode::DiskFull), "{policy}: {e}");
    assert!(e.to_string().contains("disk full on node1"), "{policy}: the error names the server: {e}");
    let (listed, _) = dataset::list(&client, true).await.unwrap();
    assert!(listed.is_empty(), "{policy}: nothing visible, staging removed: {listed:?}");
    c.local.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gd_write_onto_a_full_disk_fails_by_name_and_leaves_nothing() {
    write_onto_a_full_disk(WritePolicyKind::Gd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dq_write_onto_a_full_disk_fails_by_name_and_leaves_nothing() {
    write_onto_a_full_disk(WritePolicyKind::Dq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_write_through_a_stopped_server_commits_and_reads_back() {
    write_through_a_stop(WritePolicyKind::Static).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ceft_write_through_a_stopped_server_commits_and_reads_back() {
    write_through_a_stop(WritePolicyKind::Ceft).await;
}

/// Replica completion meeting a block whose only copy is bad: it fails naming the block,
/// and the dataset stays as it was (incomplete; every other block readable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_meeting_a_block_with_no_good_copy_fails_by_name_and_changes_nothing() {
    let t = start(4, None);
    let client = t.client().await;
    let out = write::write(&client, spec("half", WritePolicyKind::Gd, false), None).await.unwrap();
    let m = out.manifest;
    let placement = m.placement.as_ref().expect("a gd write records where blocks are");
    // A block of fragment 0 held by one copy only, and that copy's file.
    let f = ganges_core::ids::FragmentId(0);
    let (block, copy) = (0..m.shape.blocks_in(f))
        .find_map(|b| {
            let copies: Vec<u32> = placement.copies(f, b).collect();
            (copies.len() == 1).then(|| (b, copies[0]))
        })
        .expect("some block has one copy before completion");
    let node = m.layout.node_of(f, copy);
    let path = t.data_dir(node.0).join(format!("datasets/half/f00000.c{copy}.data"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[block as usize * (256 << 10) + 7] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let e = write::complete(&client, &m.name).await.expect_err("no good copy to complete from");
    eprintln!("completion failed as it should: {e}");
    assert!(e.to_string().contains(&format!("block {block}")), "the error names the block: {e}");
    let now = client.manifest(&m.name).await.unwrap();
    assert_eq!(now.state, DatasetState::Incomplete, "nothing changed for readers");
    assert_eq!(now.placement, m.placement);
}

/// A scrub's repair on a server whose disk is full: a repair rewrites a block in place, so it
/// needs no new space and succeeds (only its line in `repairs.log` is lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_on_a_full_disk_rewrites_in_place() {
    let Some(mut c) = common::start_with_small_disk(4, "4m", None) else { return };
    let data = c.data.clone();
    let client = ganges_client::Client::connect(c.local.cluster().clone()).await.unwrap();
    let m = create(&client, "full", vec![1 << 20; 4], 256 << 10, 2, G).await;
    let path = data.join("datasets/full/f00001.c0.data");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(256 << 10) + 1] ^= 0x04;
    std::fs::write(&path, bytes).unwrap();
    // Fill what is left of node1's disk.
    let filler = data.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![7u8; 64 << 10];
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    drop(f);
    let report = repair::scrub(&client, &m.name, None).await.expect("a report");
    assert_eq!(report.repaired.len(), 1, "{report:?}");
    assert!(report.is_clean(), "{report:?}");
    whole(&client, &m.name).await;
    c.local.stop();
}
