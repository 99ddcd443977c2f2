//! Tests of the read engine and its policies' decisions (deterministic).

use super::*;
use crate::sched::ProgressMetric;
use crate::shape::{Partition, Shape};

fn engine(kind: ReadPolicyKind, nodes: u32, replicas: u32, fragment: u32, blocks: u64) -> ReadEngine {
    let shape = Shape::uniform(nodes, blocks * 4096, 4096).unwrap();
    let layout = Layout::chained(nodes, replicas).unwrap();
    let part = shape.fragment_partitions()[fragment as usize];
    let pieces = shape.pieces(part).unwrap();
    ReadEngine::new(kind.build(&PolicySettings::default()), &layout, &shape, pieces, ReadConfig::default()).unwrap()
}

fn drain(e: &mut ReadEngine) -> Vec<Dispatch> {
    drain_at(e, Time::ZERO)
}

/// Every request the engine sends at `at`.
fn drain_at(e: &mut ReadEngine, at: Time) -> Vec<Dispatch> {
    std::iter::from_fn(|| e.poll_send(at).unwrap()).collect()
}

#[test]
fn static_reads_only_the_primary() {
    let mut e = engine(ReadPolicyKind::Static, 4, 2, 1, 10);
    let sends = drain(&mut e);
    assert_eq!(sends.len(), WINDOW_DEFAULT as usize);
    assert!(sends.iter().all(|s| s.node == NodeId(1)));
    while !e.is_done() {
        let s = sends_pending(&mut e);
        assert_eq!(e.on_data(Time::ZERO, s.piece, s.node), Delivery::New);
        drain(&mut e).iter().for_each(|s| assert_eq!(s.node, NodeId(1)));
        e.assert_invariants();
    }
    assert_eq!(e.stats().backup_bytes(), 0);
}

/// Test helper: the oldest piece in flight and its server.
fn sends_pending(e: &mut ReadEngine) -> Dispatch {
    let i = (0..e.pieces.len()).find(|&i| matches!(e.state[i], PieceState::InFlight(_))).expect("something in flight");
    let PieceState::InFlight(n) = &e.state[i] else { unreachable!() };
    let node = n[0].0;
    Dispatch { piece: i, node, request: e.request_at(i, node).expect("in flight") }
}

/// Test helper: a request's piece and server.
fn pn(d: Dispatch) -> (usize, NodeId) {
    (d.piece, d.node)
}

fn pns(ds: Vec<Dispatch>) -> Vec<(usize, NodeId)> {
    ds.into_iter().map(pn).collect()
}

#[test]
fn gd_starts_round_robin_and_replies_pull_requests() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 100);
    let sends = drain(&mut e);
    let nodes: Vec<u32> = sends.iter().map(|s| s.node.0).collect();
    assert_eq!(nodes, vec![0, 1, 0, 1]);
    // Node 1 replies three times in a row: each reply pulls the next request to node 1.
    for s in sends.iter().filter(|s| s.node == NodeId(1)) {
        e.on_data(Time::ZERO, s.piece, s.node);
        let next = drain(&mut e);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].node, NodeId(1));
    }
    assert_eq!(e.progress().done_bytes, 2 * 4096);
    e.assert_invariants();
}

#[test]
fn gd_tells_the_other_servers_of_new_progress_and_static_does_not() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 100);
    let sends = drain(&mut e);
    e.on_data(Time::ZERO, sends[1].piece, NodeId(1));
    assert_eq!(pns(drain(&mut e)), [(4, NodeId(1))], "the reply pulls the next request");
    assert_eq!(e.poll_notify(), Some(NodeId(0)), "node 0 holds our requests");
    assert_eq!(e.poll_notify(), None, "node 1 learns it from the request");
    // A reply that pulls nothing (the last pieces are in flight): its server still holds
    // one of ours, queued with the old figure, and is told too.
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 4);
    let sends = drain(&mut e);
    e.on_data(Time::ZERO, sends[1].piece, NodeId(1));
    assert!(drain(&mut e).is_empty());
    assert_eq!([e.poll_notify(), e.poll_notify(), e.poll_notify()], [Some(NodeId(0)), Some(NodeId(1)), None]);
    let mut s = engine(ReadPolicyKind::Static, 4, 2, 0, 100);
    let sends = drain(&mut s);
    s.on_data(Time::ZERO, sends[0].piece, NodeId(0));
    assert_eq!(s.poll_notify(), None);
}

/// A finished scan tells its servers it is done: otherwise the figure its last request
/// carried (short of 1) is what a server reports of its primary reader to the next scan of
/// the dataset for a second, and that scan reads its backups from the start.
#[test]
fn the_last_piece_tells_every_server_read_from_that_the_scan_is_done() {
    for kind in ReadPolicyKind::ALL {
        let mut e = engine(kind, 4, 2, 0, 3);
        drain(&mut e);
        while !e.is_done() {
            while e.poll_notify().is_some() {}
            let s = sends_pending(&mut e);
            e.on_data(Time::ZERO, s.piece, s.node);
            drain(&mut e);
        }
        assert_eq!(e.progress().fraction(), 1.0);
        assert_eq!(e.poll_notify(), Some(NodeId(0)), "{kind}: the primary, though it holds nothing of ours now");
    }
    // An open-ended engine is done only until its caller adds the next piece: no notice.
    let shape = Shape::uniform(4, 3 * 4096, 4096).unwrap();
    let layout = Layout::chained(4, 2).unwrap();
    let policy = ReadPolicyKind::GdPc.build(&PolicySettings::default());
    let mut e = ReadEngine::open_ended(policy, &layout, ReadConfig::default()).unwrap();
    let part = shape.fragment_partitions()[0];
    e.add_pieces(&shape, shape.pieces(part).unwrap().into_iter().take(1).map(|p| (p, None)));
    let s = drain(&mut e);
    e.on_data(Time::ZERO, s[0].piece, s[0].node);
    assert!(e.is_done());
    assert_eq!(e.poll_notify(), None);
}

/// In the second half of a read, a holder that reports nothing queued and no reader of its
/// own takes up to `IDLE_TAKE` requests, whatever the policy picks; not in the first half,
/// not when its report is stale, and never for static.
#[test]
fn an_idle_copy_takes_the_end_of_a_read() {
    let idle = ServerState { queue_len: 0, primary_progress: None, ..ServerState::default() };
    let busy = ServerState { primary_progress: Some(0.6), ..idle };
    let reply = |e: &mut ReadEngine, at: Time| {
        let s = sends_pending(e);
        e.on_data(at, s.piece, s.node);
        drain_at(e, at)
    };
    for kind in [ReadPolicyKind::GdRr, ReadPolicyKind::Static] {
        let mut e = engine(kind, 4, 2, 0, 20);
        let mut at = Time::ZERO;
        assert!(drain(&mut e).iter().all(|s| s.node == NodeId(0)), "primary only, no fault");
        e.on_probe_answer(at, NodeId(1), idle, None);
        assert!(reply(&mut e, at).iter().all(|s| s.node == NodeId(0)), "{kind}: the first half is the policy's");
        while e.progress().fraction() < 0.5 {
            at = at + Duration::from_millis(10);
            reply(&mut e, at);
        }
        e.on_probe_answer(at, NodeId(1), busy, None);
        assert!(reply(&mut e, at).iter().all(|s| s.node == NodeId(0)), "{kind}: its own reader still reads");
        e.on_probe_answer(at, NodeId(1), idle, None);
        let later = at + IDLE_FRESH + Duration::from_millis(1);
        assert!(reply(&mut e, later).iter().all(|s| s.node == NodeId(0)), "{kind}: a stale report");
        e.on_probe_answer(later, NodeId(1), idle, None);
        let sent: Vec<NodeId> = (0..4).flat_map(|_| reply(&mut e, later)).map(|s| s.node).collect();
        let at_idle = sent.iter().filter(|n| **n == NodeId(1)).count();
        let want = if kind == ReadPolicyKind::Static { 0 } else { IDLE_TAKE as usize };
        assert_eq!(at_idle, want, "{kind}: {sent:?}");
        e.assert_invariants();
    }
}

/// Once everything is requested, an idle copy that answers a probe takes a piece queued at a
/// busier holder, unless its disk is slower than the one holding our requests.
#[test]
fn an_idle_copy_that_answers_a_probe_takes_a_piece_at_the_end() {
    let idle = ServerState { queue_len: 0, primary_progress: None, ..ServerState::default() };
    for (rate, steals) in [(100e6, 1), (60e6, 0)] {
        let mut e = engine(ReadPolicyKind::GdPc, 4, 2, 0, 20);
        e.on_disk_rate(NodeId(0), 100e6, true);
        let mut at = Time::ZERO;
        drain(&mut e);
        while e.cursor < e.pieces.len() {
            at = at + Duration::from_millis(10);
            let s = sends_pending(&mut e);
            e.on_data(at, s.piece, s.node);
            assert!(drain_at(&mut e, at).iter().all(|s| s.node == NodeId(0)), "primary only, no fault");
        }
        assert_eq!(e.outstanding(NodeId(0)), WINDOW_DEFAULT);
        e.on_probe_answer(at, NodeId(1), idle, Some((rate, true)));
        let moved = drain_at(&mut e, at);
        assert_eq!((e.stats().steals, moved.len()), (steals, steals as usize), "disk at {rate}");
        if steals > 0 {
            assert_eq!(moved[0].node, NodeId(1));
            assert_eq!(e.poll_cancel().map(pn), Some((moved[0].piece, NodeId(0))), "taken from the primary");
        }
        e.assert_invariants();
    }
}

#[test]
fn gd_rel_reports_fractional_progress_metric() {
    let e = engine(ReadPolicyKind::GdRel, 4, 2, 0, 10);
    assert_eq!(e.progress().metric, ProgressMetric::Fraction);
    assert_eq!(e.progress().total_bytes, 10 * 4096);
}

#[test]
fn a_dead_server_s_requests_fail_over_and_nothing_is_lost() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 20);
    drain(&mut e);
    e.on_node_down(Time::ZERO, NodeId(1));
    let mut delivered = 0;
    loop {
        for s in drain(&mut e) {
            assert_eq!(s.node, NodeId(0), "only the live copy is asked");
        }
        if e.is_done() {
            break;
        }
        let s = sends_pending(&mut e);
        if e.on_data(Time::ZERO, s.piece, s.node) == Delivery::New {
            delivered += 1;
        }
        e.assert_invariants();
    }
    assert_eq!(delivered, 20);
    assert!(e.stats().retries >= 2);
}

#[test]
fn static_fails_over_to_the_backup_when_the_primary_dies() {
    let mut e = engine(ReadPolicyKind::Static, 4, 2, 2, 3);
    drain(&mut e);
    e.on_node_down(Time::ZERO, NodeId(2));
    let sends = drain(&mut e);
    assert!(sends.iter().all(|s| s.node == NodeId(3)));
}

#[test]
fn losing_every_copy_is_an_error_not_a_hang() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 3);
    drain(&mut e);
    e.on_node_down(Time::ZERO, NodeId(0));
    e.on_node_down(Time::ZERO, NodeId(1));
    let err = e.poll_send(Time::ZERO).unwrap_err();
    assert!(matches!(err, RouteError::NoLiveCopy { fragment: FragmentId(0), .. }));
}

#[test]
fn a_corrupt_block_is_read_from_another_copy() {
    let mut e = engine(ReadPolicyKind::Static, 4, 2, 0, 2);
    let sends = drain(&mut e);
    e.on_failure(Time::ZERO, sends[0].piece, NodeId(0), Failure::Corrupt);
    let again = drain(&mut e);
    assert_eq!(pns(again), vec![(sends[0].piece, NodeId(1))]);
    assert_eq!(e.stats().corrupt.len(), 1);
}

#[test]
fn a_block_corrupt_on_every_live_copy_is_a_checksum_error() {
    let mut e = engine(ReadPolicyKind::Static, 4, 2, 0, 2);
    let sends = drain(&mut e);
    let piece = sends[0].piece;
    e.on_failure(Time::ZERO, piece, NodeId(0), Failure::Corrupt);
    let again = drain(&mut e);
    e.on_node_down(Time::ZERO, NodeId(1));
    assert_eq!(again[0].piece, piece);
    let err = e.poll_send(Time::ZERO).unwrap_err();
    assert_eq!(err, RouteError::Corrupt { offset: 0, corrupt_on: vec![NodeId(0)] });
}

#[test]
fn the_end_of_a_scan_steals_from_a_loaded_server_and_drops_the_duplicate() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 4);
    let sends = drain(&mut e); // pieces 0..4 on nodes 0,1,0,1
    assert_eq!(e.cursor, 4);
    // Node 1 delivers both of its pieces; node 0 is slow and still holds pieces 0 and 2.
    e.on_data(Time::ZERO, sends[1].piece, NodeId(1));
    e.on_data(Time::ZERO, sends[3].piece, NodeId(1));
    let steal = drain(&mut e);
    assert_eq!(pns(steal), vec![(2, NodeId(1))]);
    assert_eq!(e.poll_cancel().map(pn), Some((2, NodeId(0))));
    // The cancel lost the race: node 0 sends piece 2 anyway, then node 1 does too.
    assert_eq!(e.on_data(Time::ZERO, 2, NodeId(0)), Delivery::New);
    assert_eq!(e.on_data(Time::ZERO, 2, NodeId(1)), Delivery::Duplicate);
    e.on_data(Time::ZERO, 0, NodeId(0));
    assert!(e.is_done());
    assert_eq!(e.stats().duplicates, 1);
    assert_eq!(e.inflight(), 0);
    e.assert_invariants();
}

/// GD keeps as many requests at a slow copy as at a fast one, so at the end of a scan the
/// slow disk's line is the last to be served. A faster server that answers takes the last
/// piece of that line while it would serve it sooner, though it still has some of ours;
/// between disks of about the same speed nothing moves.
#[test]
fn the_end_of_a_scan_moves_a_piece_from_a_slow_disks_longer_line() {
    for (slow, moved) in [(0.3e6, true), (0.9e6, false)] {
        let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 4);
        for _ in 0..3 {
            e.on_disk_rate(NodeId(0), slow, true);
            e.on_disk_rate(NodeId(1), 1e6, true);
        }
        let sends = drain(&mut e); // pieces 0..4 on nodes 0,1,0,1
        assert_eq!(e.cursor, 4);
        // Node 1 answers one: it still has one of ours, node 0 two.
        e.on_data(Time::ZERO, sends[1].piece, NodeId(1));
        let steal = drain(&mut e);
        if moved {
            // Second in line at a disk at 0.3 of node 1's speed, against second here.
            assert_eq!(pns(steal), vec![(2, NodeId(1))]);
            assert_eq!(e.poll_cancel().map(pn), Some((2, NodeId(0))));
        } else {
            assert!(steal.is_empty(), "{steal:?}");
            assert_eq!(e.poll_cancel(), None);
        }
        e.assert_invariants();
    }
}

/// Replies are reported by the engine's request ids, even when one piece is asked of one
/// server twice (a stolen request that its first server handed to the thief).
#[test]
fn replies_taken_by_request_id_release_the_request_they_answer() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 4);
    let sends = drain(&mut e); // pieces 0..4 on nodes 0,1,0,1
    for d in &sends {
        assert_eq!(e.in_flight(d.request), Some((d.piece, d.node)));
    }
    for d in [sends[1], sends[3]] {
        assert_eq!(e.take(d.request), Some((d.piece, NodeId(1))));
        e.on_data(Time::ZERO, d.piece, NodeId(1));
    }
    let steal = drain(&mut e)[0];
    assert_eq!((steal.piece, steal.node), (2, NodeId(1)));
    // Node 0 hands its request for piece 2 to node 1 too: node 1 owes two answers.
    assert!(e.on_moved(Time::ZERO, 2, NodeId(0), NodeId(1)));
    assert_eq!(e.in_flight(sends[2].request), Some((2, NodeId(1))));
    for (d, delivery) in [(steal, Delivery::New), (sends[2], Delivery::Duplicate)] {
        assert_eq!(e.take(d.request), Some((2, NodeId(1))));
        assert_eq!(e.on_data(Time::ZERO, 2, NodeId(1)), delivery);
        e.assert_invariants();
    }
    assert_eq!(e.take(sends[2].request), None, "answered once");
    assert_eq!(e.take(sends[0].request), Some((0, NodeId(0))));
    e.on_data(Time::ZERO, 0, NodeId(0));
    assert!(e.is_done());
    assert_eq!(e.inflight(), 0);
    e.assert_invariants();
}

/// A server that refused a read is avoided, but its late copy of a delivered piece still
/// answers: taken by its id, it frees its place in the window.
#[test]
fn a_late_copy_from_a_server_that_refused_a_read_is_released_by_its_id() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 2, 0, 4);
    let sends = drain(&mut e); // pieces 0..4 on nodes 0,1,0,1
    for d in [sends[1], sends[3]] {
        e.take(d.request);
        e.on_data(Time::ZERO, d.piece, NodeId(1));
    }
    let steal = drain(&mut e)[0]; // piece 2 to node 1 as well
    e.take(steal.request);
    assert_eq!(e.on_data(Time::ZERO, 2, NodeId(1)), Delivery::New);
    // Node 0 refuses piece 0, then sends its copy of piece 2 after all.
    e.take(sends[0].request);
    e.on_failure(Time::ZERO, 0, NodeId(0), Failure::Unavailable);
    assert_eq!(e.take(sends[2].request), Some((2, NodeId(0))));
    assert_eq!(e.on_data(Time::ZERO, 2, NodeId(0)), Delivery::Duplicate);
    assert_eq!(e.inflight(), 0, "nothing is left counted at node 0");
    e.assert_invariants();
    let again = drain(&mut e);
    assert_eq!(pns(again), vec![(0, NodeId(1))]);
}

/// A gd read of fragment 0 (of four, two copies) in `blocks` pieces, two in flight.
fn gd_window_of_two(blocks: u64) -> ReadEngine {
    let shape = Shape::uniform(4, blocks * 4096, 4096).unwrap();
    let layout = Layout::chained(4, 2).unwrap();
    let pieces = shape.pieces(shape.fragment_partitions()[0]).unwrap();
    let config = ReadConfig { window: 2, ..ReadConfig::default() };
    ReadEngine::new(ReadPolicyKind::Gd.build(&PolicySettings::default()), &layout, &shape, pieces, config).unwrap()
}

/// The last piece a consumer has at a slow server is hedged only when it is expected back
/// later than the idle server would answer: a piece sent long ago is likely on the slow disk
/// already, and a second copy would only read it twice. A hedge keeps the first request, and
/// whichever server answers first wins; the other is cancelled then.
#[test]
fn the_end_of_a_scan_hedges_a_last_piece_only_when_it_would_come_sooner() {
    let at = Time::from_secs_f64;
    // Five pieces, two in flight: node 1 answers in 50 ms, node 0 in 500 ms.
    let run_to_the_end = |last_reply: f64| {
        let mut e = gd_window_of_two(5);
        let send = |e: &mut ReadEngine, t: f64| {
            let mut out = vec![];
            while let Some(d) = e.poll_send(at(t)).unwrap() {
                out.push((d.piece, d.node.0));
            }
            out
        };
        assert_eq!(send(&mut e, 0.0), vec![(0, 0), (1, 1)]);
        e.on_data(at(0.05), 1, NodeId(1));
        assert_eq!(send(&mut e, 0.05), vec![(2, 1)]);
        e.on_data(at(0.10), 2, NodeId(1));
        assert_eq!(send(&mut e, 0.10), vec![(3, 1)]);
        e.on_data(at(0.5), 0, NodeId(0));
        assert_eq!(send(&mut e, 0.5), vec![(4, 0)], "every piece requested; node 0 has one, just sent");
        // Node 1 answers its last piece and has nothing of ours left.
        e.on_data(at(last_reply), 3, NodeId(1));
        let sent = send(&mut e, last_reply);
        e.assert_invariants();
        assert_eq!(e.poll_cancel(), None, "a hedge keeps the first request");
        (e, sent)
    };
    // At 0.55 s piece 4 is expected from node 0 at about 1.0 s; node 1 answers in about
    // 0.13 s (its smoothed latency): hedge.
    let (mut e, sent) = run_to_the_end(0.55);
    assert_eq!(sent, vec![(4, 1)]);
    assert_eq!((e.stats().hedges, e.stats().steals, e.inflight()), (1, 0, 2));
    // Node 1 answers first: node 0 is told to drop its copy, which is no retry.
    assert_eq!(e.on_data(at(0.6), 4, NodeId(1)), Delivery::New);
    assert!(e.is_done());
    assert_eq!(e.poll_cancel().map(pn), Some((4, NodeId(0))));
    assert_eq!(e.poll_cancel(), None);
    e.on_failure(at(0.61), 4, NodeId(0), Failure::Cancelled);
    assert_eq!((e.inflight(), e.stats().retries, e.stats().duplicates), (0, 0, 0));
    e.assert_invariants();
    // Or node 0 answers first after all, and node 1's cancel comes too late: its copy is a
    // duplicate, dropped.
    let (mut e, _) = run_to_the_end(0.55);
    assert_eq!(e.on_data(at(0.58), 4, NodeId(0)), Delivery::New);
    assert_eq!(e.poll_cancel().map(pn), Some((4, NodeId(1))));
    assert_eq!(e.on_data(at(0.6), 4, NodeId(1)), Delivery::Duplicate);
    assert_eq!((e.inflight(), e.stats().duplicates), (0, 1));
    e.assert_invariants();
    // At 0.95 s piece 4 is due from node 0 within 0.05 s, sooner than node 1's 0.21 s: keep.
    let (e, sent) = run_to_the_end(0.95);
    assert_eq!((sent, e.stats().hedges), (vec![], 0));
}

/// A piece that has waited at a server longer than its usual reply time there, and than what
/// the idle server would take, is queued behind other consumers (a backup whose plan share is
/// small serves us about once a period): the end of the scan hedges it even though it was
/// expected soon, and even if that server never answered us before.
#[test]
fn the_end_of_a_scan_hedges_a_piece_late_at_its_server() {
    let at = Time::from_secs_f64;
    // Piece 0 goes to node 0, which never answers; node 1 answers every 50 ms and each reply
    // pulls the next piece to it. Returns what node 1's last answer hedges.
    let end = |pieces: u64| {
        let mut e = gd_window_of_two(pieces);
        assert_eq!(e.poll_send(at(0.0)).unwrap().map(pn), Some((0, NodeId(0))));
        assert_eq!(e.poll_send(at(0.0)).unwrap().map(pn), Some((1, NodeId(1))));
        let mut stolen = vec![];
        for piece in 1..pieces as usize {
            let t = 0.05 * piece as f64;
            e.on_data(at(t), piece, NodeId(1));
            while let Some(d) = e.poll_send(at(t)).unwrap() {
                if d.piece == 0 {
                    // Taken when node 1 answered `piece`.
                    stolen.push((piece, d.node.0));
                }
            }
            e.assert_invariants();
        }
        (stolen, e.stats().hedges, e.poll_cancel())
    };
    // Two pieces: at 0.05 s piece 0 has waited no longer than node 1 takes: keep.
    assert_eq!(end(2), (vec![], 0, None));
    // Five: at 0.20 s it has waited four of node 1's answers: node 1 is sent it too.
    assert_eq!(end(5), (vec![(4, 1)], 1, None));
}

/// When a fault ends, gd-plan's plan goes back to primaries only; a request still queued at a
/// backup would wait there behind the backup's own reader (it is planned no share), so the
/// engine takes it back and sends it to the primary, without counting a retry.
#[test]
fn a_plan_that_stops_reading_a_backup_takes_its_queued_requests_back() {
    let mut e = engine(ReadPolicyKind::GdPlan, 4, 2, 0, 100);
    for n in 0..4 {
        e.on_disk_rate(NodeId(n), if n == 0 { 0.5e6 } else { 1e6 }, true);
    }
    let sends = drain(&mut e);
    let at_backup: Vec<usize> = sends.iter().filter(|d| d.node == NodeId(1)).map(|d| d.piece).collect();
    assert!(!at_backup.is_empty(), "disk 0 is slow: the plan reads node 1 too: {sends:?}");
    assert_eq!(e.poll_cancel(), None);
    // The fault ends (two figures say so: a server's speed is the median of its last three);
    // the next plan (made when a reply frees a slot) reads primaries only.
    e.on_disk_rate(NodeId(0), 1e6, true);
    e.on_disk_rate(NodeId(0), 1e6, true);
    let first = sends.iter().find(|d| d.node == NodeId(0)).expect("node 0 has some");
    e.on_data(Time::ZERO, first.piece, NodeId(0));
    assert!(drain(&mut e).iter().all(|d| d.node == NodeId(0)));
    let cancels: Vec<Dispatch> = std::iter::from_fn(|| e.poll_cancel()).collect();
    let expected: Vec<(usize, NodeId)> = at_backup.iter().map(|&piece| (piece, NodeId(1))).collect();
    assert_eq!(pns(cancels), expected);
    // Node 1 confirms: the pieces go to node 0, and none of it is a retry.
    for &p in &at_backup {
        e.on_failure(Time::ZERO, p, NodeId(1), Failure::Cancelled);
    }
    let again = drain(&mut e);
    assert_eq!(again.iter().map(|d| d.piece).take(at_backup.len()).collect::<Vec<_>>(), at_backup);
    assert!(again.iter().all(|d| d.node == NodeId(0)), "{again:?}");
    assert_eq!((e.stats().retries, e.stats().withdrawn), (0, at_backup.len() as u64));
    assert_eq!(e.poll_cancel(), None, "nothing is taken back twice");
    e.assert_invariants();
}

/// A request a server handed to another cannot be cancelled (its id belongs to the first
/// server), so the end-of-scan steal takes another piece rather than read it twice.
#[test]
fn the_end_of_a_scan_never_steals_a_handed_over_request() {
    let mut e = engine(ReadPolicyKind::Gd, 4, 3, 0, 4);
    let sends = drain(&mut e); // pieces 0..4 on nodes 0,1,2,0
    assert_eq!(sends.iter().map(|d| d.node.0).collect::<Vec<_>>(), vec![0, 1, 2, 0]);
    // Node 0 hands piece 3 to node 2, which now holds pieces 2 and 3.
    assert!(e.on_moved(Time::ZERO, 3, NodeId(0), NodeId(2)));
    assert_eq!(e.in_flight(sends[3].request), Some((3, NodeId(2))), "the request follows the move");
    // Node 1 answers and is idle: it steals piece 2, not the moved piece 3.
    e.on_data(Time::ZERO, 1, NodeId(1));
    assert_eq!(pns(drain(&mut e)), vec![(2, NodeId(1))]);
    assert_eq!(e.poll_cancel().map(pn), Some((2, NodeId(2))));
    assert_eq!(e.poll_cancel(), None);
    e.assert_invariants();
}

/// A server that holds our requests and says nothing is hung, not slow: after the stall
/// timeout its requests go to the other copy, even for the static policy.
#[test]
fn a_hung_server_is_given_up_after_the_stall_timeout() {
    let mut e = engine(ReadPolicyKind::Static, 4, 2, 0, 3);
    let t0 = Time::from_secs_f64(1.0);
    let first: Vec<Dispatch> = std::iter::from_fn(|| e.poll_send(t0).unwrap()).collect();
    assert_eq!(pns(first.clone()), vec![(0, NodeId(0)), (1, NodeId(0)), (2, NodeId(0))]);
    let deadline = e.stall_deadline().unwrap();
    assert_eq!(deadline, t0 + STALL_TIMEOUT_DEFAULT);
    // An answer moves the deadline on.
    let t1 = Time::from_secs_f64(20.0);
    e.on_data(t1, 0, NodeId(0));
    assert_eq!(e.stall_deadline(), Some(t1 + STALL_TIMEOUT_DEFAULT));
    assert!(e.check_stalls(t1 + Duration::from_secs(29)).is_empty());
    assert_eq!(e.check_stalls(t1 + STALL_TIMEOUT_DEFAULT), vec![NodeId(0)]);
    // Its connection is open: a late answer still names its piece.
    assert_eq!(e.in_flight(first[1].request), Some((1, NodeId(0))));
    assert_eq!(e.take(first[1].request), Some((1, NodeId(0))));
    assert_eq!(e.take(first[1].request), None, "taken once");
    let again: Vec<Dispatch> = std::iter::from_fn(|| e.poll_send(t1).unwrap()).collect();
    assert_eq!(pns(again), vec![(1, NodeId(1)), (2, NodeId(1))]);
    assert_eq!(e.stall_deadline(), Some(t1 + STALL_TIMEOUT_DEFAULT));
    e.assert_invariants();
    // The hung server answers after all (a stopped process resumed): dropped, not delivered
    // twice, and the copies asked of node 1 complete the read.
    let t2 = t1 + Duration::from_secs(31);
    assert_eq!(e.on_data(t2, 1, NodeId(0)), Delivery::Duplicate);
    assert_eq!(e.on_data(t2, 1, NodeId(1)), Delivery::New);
    assert_eq!(e.on_data(t2, 2, NodeId(1)), Delivery::New);
    assert_eq!(e.on_data(t2, 2, NodeId(0)), Delivery::Duplicate);
    assert!(e.is_done());
    assert_eq!((e.inflight(), e.stats().duplicates), (0, 2));
    assert_eq!(e.in_flight(first[1].request), None, "answered: forgotten");
    e.assert_invariants();
}

#[test]
fn windows_are_bounded() {
    let shape = Shape::uniform(2, 4096, 4096).unwrap();
    let layout = Layout::chained(2, 2).unwrap();
    let pieces = shape.pieces(Partition { offset: 0, len: 4096 }).unwrap();
    let config = ReadConfig { window: 0, ..ReadConfig::default() };
    let err =
        ReadEngine::new(ReadPolicyKind::Gd.build(&PolicySettings::default()), &layout, &shape, pieces.clone(), config);
    assert_eq!(err.unwrap_err(), RouteError::Window(0));
    let config = ReadConfig { stall_timeout: Duration::ZERO, ..ReadConfig::default() };
    let err = ReadEngine::new(ReadPolicyKind::Gd.build(&PolicySettings::default()), &layout, &shape, pieces, config);
    assert_eq!(err.unwrap_err(), RouteError::StallTimeout);
}

fn shape_and_layout(nodes: u32, blocks: u64) -> (Shape, Layout) {
    (Shape::uniform(nodes, blocks * 4096, 4096).unwrap(), Layout::chained(nodes, 2).unwrap())
}

fn open_ended_gd(layout: &Layout) -> ReadEngine {
    ReadEngine::open_ended(ReadPolicyKind::Gd.build(&PolicySettings::default()), layout, ReadConfig::default()).unwrap()
}

#[test]
fn an_open_ended_engine_reads_pieces_as_they_are_added() {
    let (shape, layout) = shape_and_layout(2, 4);
    let mut e = open_ended_gd(&layout);
    assert!(e.is_done() && drain(&mut e).is_empty());
    let p = shape.pieces(Partition { offset: 8192, len: 100 }).unwrap()[0];
    let i = e.add_pieces(&shape, [(p, None)]).start;
    assert!(!e.is_done());
    let sends = drain(&mut e);
    assert_eq!(sends.len(), 1);
    e.on_data(Time::ZERO, i, sends[0].node);
    assert!(e.is_done());
    assert_eq!(e.total_bytes(), 100);
}

/// An in-order reader adds a block at a time: told what the whole read comes to, its
/// progress is how far through that it is (not near 1 from the start), and the last block
/// tells every server it read from that it is done.
#[test]
fn an_open_ended_engine_told_its_size_counts_progress_against_it_and_seals_itself() {
    let (shape, layout) = shape_and_layout(2, 4);
    let mut e = open_ended_gd(&layout);
    e.expect_bytes(4 * 4096);
    let mut servers = BTreeSet::new();
    for block in 0..4u64 {
        let p = shape.pieces(Partition { offset: block * 4096, len: 4096 }).unwrap()[0];
        let i = e.add_pieces(&shape, [(p, None)]).start;
        let progress = e.progress();
        assert_eq!((progress.done_bytes, progress.total_bytes), (block * 4096, 4 * 4096));
        let sends = drain(&mut e);
        assert_eq!(sends.len(), 1);
        servers.insert(sends[0].node);
        while e.poll_notify().is_some() {}
        e.on_data(Time::ZERO, i, sends[0].node);
        let told: BTreeSet<_> = std::iter::from_fn(|| e.poll_notify()).collect();
        if block < 3 {
            assert!(told.is_empty(), "nothing held anywhere, and not done yet: {told:?}");
        } else {
            assert_eq!(told, servers, "done: every server read from is told");
        }
    }
    assert!(e.is_done());
    assert_eq!(e.progress().fraction(), 1.0);
}

#[test]
fn a_moved_request_is_expected_from_its_new_server_and_retried_if_that_dies() {
    let mut e = engine(ReadPolicyKind::GdRrHandoff, 4, 2, 0, 4);
    let sends = drain(&mut e);
    let first = sends[0];
    let other = if first.node == NodeId(0) { NodeId(1) } else { NodeId(0) };
    assert!(e.on_moved(Time::ZERO, first.piece, first.node, other));
    assert!(!e.on_moved(Time::ZERO, first.piece, first.node, other), "nothing left at the old server");
    e.assert_invariants();
    // The new server dies before answering: the piece is retried, nothing is lost.
    e.on_node_down(Time::ZERO, other);
    let again = drain(&mut e);
    assert!(again.iter().any(|d| d.piece == first.piece && d.node == first.node));
    assert_eq!(e.stats().moved, 1);
    e.assert_invariants();
}

#[test]
fn primary_copies_reads_no_backup_without_a_fault_and_probes_it() {
    let mut e = engine(ReadPolicyKind::GdPc, 4, 2, 0, 100);
    let sends = drain(&mut e);
    assert!(sends.iter().all(|d| d.node == NodeId(0)));
    assert_eq!(e.poll_probe(Time::ZERO), Some(NodeId(1)));
    // The backup's primary consumer is level with us: still primary only.
    e.on_state(Time::ZERO, NodeId(1), ServerState { primary_progress: Some(0.0), ..ServerState::default() });
    for d in sends {
        e.on_data(Time::ZERO, d.piece, d.node);
        assert!(drain(&mut e).iter().all(|d| d.node == NodeId(0)));
    }
    // It reports 30% while we are at 4%: the backup joins.
    e.on_state(Time::ZERO, NodeId(1), ServerState { primary_progress: Some(0.3), ..ServerState::default() });
    let mut to_backup = 0;
    for _ in 0..8 {
        let s = sends_pending(&mut e);
        e.on_data(Time::ZERO, s.piece, s.node);
        to_backup += drain(&mut e).iter().filter(|d| d.node == NodeId(1)).count();
    }
    assert!(to_backup > 0);
    e.assert_invariants();
}

#[test]
fn a_hold_never_stalls_a_read() {
    // gd-rr with no trouble sends everything to the primary; with the primary's share in
    // flight it holds, but never with nothing in flight.
    let mut e = engine(ReadPolicyKind::GdRr, 4, 2, 0, 100);
    let sends = drain(&mut e);
    assert_eq!(sends.len() as u32, WINDOW_DEFAULT);
    assert!(sends.iter().all(|d| d.node == NodeId(0)), "no trouble: everything to the primary");
    let probed: Vec<_> = std::iter::from_fn(|| e.poll_probe(Time::ZERO)).collect();
    let every: Vec<_> = (0..4).map(NodeId).collect();
    assert_eq!(probed, every, "every server is measured by probes, both holders with them");
    for d in sends {
        e.on_data(Time::ZERO, d.piece, d.node);
    }
    assert!(!drain(&mut e).is_empty());
}

#[test]
fn mirror_alternates_over_the_copies_whatever_their_speed() {
    let mut e = engine(ReadPolicyKind::Mirror, 4, 2, 0, 100);
    let nodes: Vec<u32> = drain(&mut e).iter().map(|d| d.node.0).collect();
    assert_eq!(nodes, vec![0, 1, 0, 1]);
}

#[test]
fn every_policy_name_parses_and_settings_are_checked() {
    for k in ReadPolicyKind::ALL {
        assert_eq!(k.to_string().parse::<ReadPolicyKind>().unwrap(), k);
        assert_eq!(k.build(&PolicySettings::default()).kind(), k);
    }
    assert!("gd-xyz".parse::<ReadPolicyKind>().unwrap_err().to_string().contains("gd-pc"));
    PolicySettings::default().validate().unwrap();
    let mut s = PolicySettings::default();
    s.primary.low_watermark = 0.5;
    let e = s.validate().unwrap_err();
    assert_eq!(e.name, "pc-low-watermark");
    let mut s = PolicySettings::default();
    s.rate.slow_ratio = 0.5;
    assert_eq!(s.validate().unwrap_err().name, "rr-slow-ratio");
    for bad in [0, 256] {
        let mut s = PolicySettings::default();
        s.rate.guard_every = bad;
        assert_eq!(s.validate().unwrap_err().name, "rr-guard-every");
    }
    for bad in [0, 4096, (64 << 10) + 1, 32 << 20] {
        let mut s = PolicySettings::default();
        s.plan.piece_bytes = bad;
        assert_eq!(s.validate().unwrap_err().name, "plan-piece");
    }
}

#[test]
fn gd_plan_reads_a_block_in_pieces_and_the_others_read_it_whole() {
    const MIB: u32 = 1 << 20;
    const Q: u32 = 256 << 10;
    let shape = Shape::uniform(4, 3 * MIB as u64 + 100_000, MIB).unwrap();
    let layout = Layout::chained(4, 2).unwrap();
    // From the middle of block 0 of fragment 1 to its end (block 3 is short).
    let part = Partition { offset: shape.fragment_start(FragmentId(1)) + 300_000, len: 3 * MIB as u64 - 200_000 };
    let read = |kind: ReadPolicyKind| {
        let pieces = shape.pieces(part).unwrap();
        let mut e =
            ReadEngine::new(kind.build(&PolicySettings::default()), &layout, &shape, pieces, ReadConfig::default())
                .unwrap();
        let mut read = vec![];
        drain(&mut e);
        while !e.is_done() {
            let s = sends_pending(&mut e);
            assert_eq!(e.on_data(Time::ZERO, s.piece, s.node), Delivery::New);
            let p = e.piece(s.piece);
            read.push((p.block, p.start_in_block, p.len));
            drain(&mut e);
        }
        assert_eq!(e.total_bytes(), part.len);
        read.sort();
        read
    };
    let whole = vec![(0, 300_000, MIB - 300_000), (1, 0, MIB), (2, 0, MIB), (3, 0, 100_000)];
    assert_eq!(read(ReadPolicyKind::GdPc), whole);
    assert_eq!(read(ReadPolicyKind::GdRr), whole);
    let mut pieces = vec![(0, 300_000, 2 * Q - 300_000), (0, 2 * Q, Q), (0, 3 * Q, Q)];
    pieces.extend([1, 2].into_iter().flat_map(|b| (0..4).map(move |i| (b, i * Q, Q))));
    pieces.push((3, 0, 100_000));
    assert_eq!(read(ReadPolicyKind::GdPlan), pieces);
}

/// gd and gd-rel read the last window of whole blocks of each fragment in half blocks (see
/// "A fine tail"); gd-pc reads every block whole, and so does a read that never says where
/// it ends.
#[test]
fn gd_reads_the_last_window_of_each_fragment_in_half_blocks() {
    const MIB: u32 = 1 << 20;
    const H: u32 = MIB / 2;
    let shape = Shape::uniform(2, 6 * MIB as u64, MIB).unwrap();
    let layout = Layout::chained(2, 2).unwrap();
    let config = ReadConfig { window: 2, ..ReadConfig::default() };
    let all = || shape.pieces(Partition { offset: 0, len: shape.total_bytes() }).unwrap();
    let cuts = |e: &ReadEngine| {
        let mut cuts: Vec<_> =
            (0..e.pieces.len()).map(|i| e.piece(i)).map(|p| (p.fragment.0, p.block, p.start_in_block, p.len)).collect();
        cuts.sort();
        cuts
    };
    let whole: Vec<_> = (0..2).flat_map(|f| (0..6).map(move |b| (f, b, 0, MIB))).collect();
    let mut fine: Vec<_> = (0..2).flat_map(|f| (0..4).map(move |b| (f, b, 0, MIB))).collect();
    fine.extend((0..2).flat_map(|f| (4..6).flat_map(move |b| [(f, b, 0, H), (f, b, H, H)])));
    fine.sort();
    let built = |kind: ReadPolicyKind| {
        ReadEngine::new(kind.build(&PolicySettings::default()), &layout, &shape, all(), config).unwrap()
    };
    assert_eq!(cuts(&built(ReadPolicyKind::Gd)), fine);
    assert_eq!(cuts(&built(ReadPolicyKind::GdRel)), fine);
    assert_eq!(cuts(&built(ReadPolicyKind::GdPc)), whole);
    let open = |expect: bool| {
        let mut e =
            ReadEngine::open_ended(ReadPolicyKind::Gd.build(&PolicySettings::default()), &layout, config).unwrap();
        if expect {
            e.expect_bytes(shape.total_bytes());
        }
        e.add_pieces(&shape, all().into_iter().map(|p| (p, None)));
        cuts(&e)
    };
    assert_eq!(open(false), whole);
    assert_eq!(open(true), fine);
}

/// A read of blocks 2 and 3 of fragment 0 (pieces 0 and 1), then all of fragment 1 (pieces 2
/// to 5), of four fragments of four blocks, two copies.
fn across_two_fragments(kind: ReadPolicyKind, config: ReadConfig) -> ReadEngine {
    let shape = Shape::uniform(4, 4 * 4096, 4096).unwrap();
    let layout = Layout::chained(4, 2).unwrap();
    let pieces = shape.pieces(Partition { offset: 2 * 4096, len: 6 * 4096 }).unwrap();
    ReadEngine::new(kind.build(&PolicySettings::default()), &layout, &shape, pieces, config).unwrap()
}

/// gd-plan reads a range that spans fragments (a logical partition) at the same pace in
/// each, so its fraction done is each part's; other policies keep order.
#[test]
fn a_range_across_fragments_is_read_in_step_by_gd_plan_only() {
    let order = |kind: ReadPolicyKind| {
        let mut e = across_two_fragments(kind, ReadConfig { window: 8, ..ReadConfig::default() });
        drain(&mut e).iter().map(|d| d.piece).collect::<Vec<_>>()
    };
    // Places in their runs: fragment 0's at 1/4 and 3/4, fragment 1's at 1/8, 3/8, 5/8, 7/8.
    assert_eq!(order(ReadPolicyKind::GdPlan), vec![2, 0, 3, 4, 1, 5]);
    assert_eq!(order(ReadPolicyKind::Gd), vec![0, 1, 2, 3, 4, 5]);
}

/// Requests say which copy they read, and a read of one fragment asks for phase slots; a
/// read that spans two fragments does not (its disks are not a pair that can take turns).
#[test]
fn requests_carry_their_copy_and_only_one_fragment_reads_ask_for_slots() {
    let e = engine(ReadPolicyKind::GdPlan, 4, 2, 1, 8);
    let holders = e.holders[&FragmentId(1)].clone();
    for (copy, node) in holders.iter().enumerate() {
        let s = e.service(0, *node);
        assert_eq!((s.copy as usize, s.phased), (copy, true), "{node}");
    }
    let e = across_two_fragments(ReadPolicyKind::GdPlan, ReadConfig::default());
    let primary = e.holders[&FragmentId(0)][0];
    assert!(!e.service(0, primary).phased);
}

/// A whole fragment is exactly one part however many pieces it is read in: summed as
/// fractions, 1280 pieces of 1/1280 came to 0.99999999999998, and gd-plan took a consumer
/// of a whole fragment for a reader of a part.
#[test]
fn a_fragment_read_whole_in_many_pieces_is_exactly_one_part() {
    let shape = Shape::uniform(2, 1280 * 4096, 4096).unwrap();
    let whole = shape.pieces(Partition { offset: 0, len: 1280 * 4096 }).unwrap();
    assert_eq!(fragment_parts(&shape, &whole), BTreeMap::from([(FragmentId(0), 1.0)]));
    let across = shape.pieces(Partition { offset: 640 * 4096, len: 1280 * 4096 }).unwrap();
    assert_eq!(fragment_parts(&shape, &across), BTreeMap::from([(FragmentId(0), 0.5), (FragmentId(1), 0.5)]));
}

/// Random reads: a reply seldom comes from a server holding the next piece, so GD's pull
/// finds no taker, and the request goes to the holder with the fewest of ours outstanding. A
/// server that never answers gets a request only while its copy's other holder has as many:
/// not half of its fragment's, which would fill the window and stop the read.
#[test]
fn gd_sends_a_piece_no_reply_pulled_to_the_holder_with_fewest_outstanding() {
    let shape = Shape::uniform(4, 100 * 4096, 4096).unwrap();
    let layout = Layout::chained(4, 2).unwrap();
    let config = ReadConfig::default();
    let mut e = ReadEngine::open_ended(ReadPolicyKind::Gd.build(&PolicySettings::default()), &layout, config).unwrap();
    // Fragments 0 (on nodes 0 and 1) and 2 (on nodes 2 and 3) in turn.
    let block = |f: u64, b: u64| shape.pieces(Partition { offset: (f * 100 + b) * 4096, len: 4096 }).unwrap()[0];
    e.add_pieces(&shape, (0..40).flat_map(|b| [(block(0, b), None), (block(2, b), None)]));
    let mut at_node_0 = 0;
    loop {
        let sends = drain(&mut e);
        if sends.is_empty() {
            break;
        }
        for s in sends {
            if s.node == NodeId(0) {
                at_node_0 += 1;
            } else {
                e.on_data(Time::ZERO, s.piece, s.node);
            }
        }
        e.assert_invariants();
    }
    assert!(at_node_0 <= WINDOW_DEFAULT as usize / 2, "{at_node_0} requests sent to the silent node");
    assert_eq!(e.progress().done_bytes, (80 - at_node_0 as u64) * 4096, "every other piece was read");
}

/// Servers that answer in any order, some slow, some handing requests on (GD-6), cancels
/// that arrive late or never, and a server lost part-way: the engine still delivers every
/// piece exactly once, never hangs, and ends with nothing in flight. End-of-scan steals and
/// hedges, which put one piece at two servers, are what this guards most.
mod any_server_behaviour {
    use super::*;
    use proptest::prelude::*;
    use rand::distr::weighted::WeightedIndex;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const NODES: u32 = 4;

    fn read_everything(kind: ReadPolicyKind, fragment: u32, blocks: u64, seed: u64, lose: Option<u32>) -> ReadStats {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let layout = Layout::chained(NODES, 2).unwrap();
        let mut e = engine(kind, NODES, 2, fragment, blocks);
        // Per server: the pieces queued there, in arrival order; cancels on their way.
        let mut queues: Vec<Vec<usize>> = vec![vec![]; NODES as usize];
        let mut cancels: Vec<Dispatch> = vec![];
        let mut down: Option<NodeId> = None;
        let mut delivered = vec![0u32; blocks as usize];
        let mut now = Time::ZERO;
        // Each server's speed: how likely it is to be the one that answers next.
        let speed: Vec<u32> = (0..NODES).map(|_| rng.random_range(1..6)).collect();
        for step in 0.. {
            assert!(step < 100_000, "the read hung: {} of {blocks} delivered", e.done_pieces);
            while let Some(d) = e.poll_send(now).expect("a live copy is left") {
                assert_ne!(Some(d.node), down, "sent to a server known lost");
                queues[d.node.0 as usize].push(d.piece);
            }
            cancels.extend(std::iter::from_fn(|| e.poll_cancel()));
            while e.poll_notify().is_some() {}
            while let Some(n) = e.poll_probe(now) {
                let state = ServerState { queue_len: queues[n.0 as usize].len() as u32, ..ServerState::default() };
                e.on_state(now, n, state);
            }
            e.assert_invariants();
            if e.is_done() && cancels.is_empty() && queues.iter().all(Vec::is_empty) {
                break;
            }
            now = now + Duration::from_millis(rng.random_range(1..40));
            let roll = rng.random_range(0..100);
            if roll < 15 && !cancels.is_empty() {
                // A cancel arrives: the server drops the request if it still holds it.
                let c = cancels.swap_remove(rng.random_range(0..cancels.len()));
                let q = &mut queues[c.node.0 as usize];
                if let Some(i) = q.iter().position(|&p| p == c.piece) {
                    q.remove(i);
                    e.on_failure(now, c.piece, c.node, Failure::Cancelled);
                }
            } else if roll < 20 {
                // A server hands its newest request of a fragment the other holder has too.
                let from = rng.random_range(0..NODES) as usize;
                let Some(&piece) = queues[from].last() else { continue };
                let f = e.pieces[piece].fragment;
                let to = layout.holders(f).into_iter().find(|n| n.0 as usize != from).unwrap();
                // (When the engine no longer waits for it there, the new server's answer is
                // taken as the old one's, as the drivers do: the request stays put here.)
                if Some(to) != down
                    && !queues[to.0 as usize].contains(&piece)
                    && e.on_moved(now, piece, NodeId(from as u32), to)
                {
                    queues[from].pop();
                    queues[to.0 as usize].push(piece);
                }
            } else if roll < 21
                && down.is_none()
                && let Some(n) = lose.map(NodeId)
                && e.done_pieces * 2 >= blocks as usize
            {
                // Half-way, a server dies with its queue.
                down = Some(n);
                queues[n.0 as usize].clear();
                cancels.retain(|c| c.node != n);
                e.on_node_down(now, n);
            } else {
                // A server answers the oldest request it holds; faster servers more often.
                let weights = queues.iter().zip(&speed).map(|(q, &s)| if q.is_empty() { 0 } else { s });
                let Ok(busy) = WeightedIndex::new(weights) else { continue };
                let n = rng.sample(&busy);
                let piece = queues[n].remove(0);
                let node = NodeId(n as u32);
                let state =
                    ServerState { queue_len: queues[n].len() as u32, service_us: 1000, ..ServerState::default() };
                e.on_state(now, node, state);
                e.on_service(node, 4096, 1000 * (6 - speed[n]));
                if e.on_data(now, piece, node) == Delivery::New {
                    delivered[piece] += 1;
                }
            }
        }
        assert!(delivered.iter().all(|&d| d == 1), "{kind:?}: delivered {delivered:?}");
        assert_eq!(e.inflight(), 0);
        assert_eq!(e.done_bytes(), e.total_bytes());
        e.stats().clone()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn every_piece_is_delivered_once(
            kind in prop::sample::select(vec![
                ReadPolicyKind::Gd,
                ReadPolicyKind::GdShare,
                ReadPolicyKind::GdPc,
                ReadPolicyKind::GdRr,
                ReadPolicyKind::GdRrHandoff,
                ReadPolicyKind::GdPlan,
                ReadPolicyKind::Mirror,
            ]),
            fragment in 0..NODES,
            blocks in 1u64..40,
            seed in any::<u64>(),
            lose in prop::option::of(0..NODES),
        ) {
            read_everything(kind, fragment, blocks, seed, lose);
        }
    }

    /// The runs above do reach the end-of-scan steal and hedge (else they would guard
    /// nothing): over 64 seeds of a gd read, both happen, and duplicates are dropped.
    #[test]
    fn the_runs_steal_and_hedge() {
        let mut all = ReadStats::default();
        for seed in 0..64 {
            all.merge(read_everything(ReadPolicyKind::Gd, 0, 24, seed, None));
        }
        assert!(all.steals > 0 && all.hedges > 0 && all.duplicates > 0, "{all:?}");
    }
}

#[test]
fn pulls_keep_the_newest_replies_up_to_their_bound() {
    let mut pulls = policy::Pulls::default();
    pulls.push(NodeId(0));
    for _ in 0..policy::PULLS_MAX {
        pulls.push(NodeId(1));
    }
    let nodes = BTreeMap::new();
    let view = RouteView::test(&nodes);
    // Node 0's reply, the oldest, was dropped to keep the bound: every request follows node 1.
    for _ in 0..policy::PULLS_MAX {
        assert_eq!(pulls.next(&view, &[NodeId(0), NodeId(1)]), NodeId(1));
    }
}
