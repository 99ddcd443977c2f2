//! Flows in one process: every edge delivers every batch exactly once; a distributed queue
//! sends a slow consumer less where a static partition cannot; a range partition and a
//! sort make a one-pass sort; a failing instance fails the flow.

use bytes::Bytes;
use ganges_core::datagen::Generator;
use ganges_flow::{Batch, Edge, Flow, FlowError, Module, Out, RecordLayout, Summary};
use proptest::prelude::*;
use std::time::Duration;

const L: RecordLayout = RecordLayout::SORT_BENCHMARK;

/// Producer p's `batches` batches of `per` records, distinct from every other producer's.
fn source(p: usize, batches: usize, per: usize) -> ganges_flow::flow::Source {
    let g = Generator::Records { seed: 7 };
    Box::new((0..batches).map(move |b| {
        let mut buf = vec![0u8; per * 100];
        g.fill(((p * batches + b) * per * 100) as u64, &mut buf);
        Ok(Batch::new(Bytes::from(buf), L).expect("whole records"))
    }))
}

fn summary<'a>(batches: impl IntoIterator<Item = &'a Batch>) -> Summary {
    let mut s = Summary::default();
    for b in batches {
        s.add(b);
    }
    s
}

fn input(producers: usize, batches: usize, per: usize) -> Summary {
    let all: Vec<Batch> = (0..producers).flat_map(|p| source(p, batches, per).map(Result::unwrap)).collect();
    summary(&all)
}

/// Passes its batches on, taking `delay` over each record.
struct Pass {
    delay: Duration,
}

impl Module for Pass {
    fn on_batch(&mut self, batch: Batch, out: &mut Out) -> Result<(), String> {
        std::thread::sleep(self.delay * batch.len() as u32);
        out.put(batch);
        Ok(())
    }
}

/// Keeps its records and puts them out sorted at the end.
#[derive(Default)]
struct Sort {
    got: Vec<u8>,
}

impl Module for Sort {
    fn on_batch(&mut self, batch: Batch, _out: &mut Out) -> Result<(), String> {
        self.got.extend_from_slice(batch.bytes());
        Ok(())
    }

    fn on_end(&mut self, out: &mut Out) -> Result<(), String> {
        let all = Batch::new(Bytes::from(std::mem::take(&mut self.got)), L).map_err(|e| e.to_string())?;
        out.put(all.sorted());
        Ok(())
    }
}

fn pass_flow(edge: Edge, producers: usize, consumers: usize, batches: usize, slow: usize) -> Flow {
    Flow::source(L, "read", producers, move |p| source(p, batches, 10)).then(edge, "pass", consumers, move |c| {
        // 20 ms a batch of 10: the slow consumer is far slower than the others even when
        // they share two busy cores with the rest of the test run (at 2 ms, unoptimised and
        // crowded, the others were no faster, and the queue rightly sent it its share).
        let delay = if c == slow { Duration::from_millis(2) } else { Duration::ZERO };
        Box::new(Pass { delay })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_distributed_queue_sends_a_slow_consumer_less_and_a_static_partition_cannot() {
    let want = input(4, 100, 10);
    let dq = pass_flow(Edge::Dq, 4, 4, 100, 0).run().await.unwrap();
    assert!(summary(dq.output.iter().flatten()).same_records(&want), "every batch once");
    let took: Vec<u64> = dq.stages[1].instances.iter().map(|i| i.batches_in).collect();
    assert_eq!(took.iter().sum::<u64>(), 400);
    assert!(took[0] * 3 < took[1].min(took[2]).min(took[3]), "the slow consumer takes less: {took:?}");
    eprintln!("dq: batches taken {took:?} in {:.3} s", dq.seconds);

    let hash = pass_flow(Edge::Hash, 4, 4, 100, 0).run().await.unwrap();
    assert!(summary(hash.output.iter().flatten()).same_records(&want));
    let records: Vec<u64> = hash.stages[1].instances.iter().map(|i| i.records_in).collect();
    assert!(records.iter().all(|&r| (800..1200).contains(&r)), "a hash partition is even, slow or not: {records:?}");
    eprintln!("hash: records taken {records:?} in {:.3} s", hash.seconds);
    assert!(hash.seconds > dq.seconds * 1.5, "static {:.3} s, dq {:.3} s", hash.seconds, dq.seconds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_partition_then_a_sort_is_a_one_pass_sort() {
    let want = input(3, 40, 50);
    let flow = Flow::source(L, "read", 3, |p| source(p, 40, 50))
        .then(Edge::Dq, "pass", 2, |_| Box::new(Pass { delay: Duration::ZERO }))
        .then(Edge::Range, "sort", 4, |_| Box::<Sort>::default());
    let r = flow.run().await.unwrap();
    // Sorter k holds the k-th key range: their outputs in order are the sorted dataset.
    let got = summary(r.output.iter().flatten());
    assert!(got.same_records(&want));
    assert_eq!(got.unordered, 0, "in key order across sorters");
    assert_eq!(r.stages.iter().map(|s| s.records_out()).collect::<Vec<_>>(), vec![6000; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_keeps_instance_to_instance() {
    let r = Flow::source(L, "read", 3, |p| source(p, 5, 10))
        .then(Edge::Channel, "pass", 3, |_| Box::new(Pass { delay: Duration::ZERO }))
        .run()
        .await
        .unwrap();
    for p in 0..3 {
        let want: Vec<Batch> = source(p, 5, 10).map(Result::unwrap).collect();
        assert_eq!(r.output[p], want, "instance {p} got its producer's batches, in order");
    }
    let bad = Flow::source(L, "read", 3, |p| source(p, 1, 1))
        .then(Edge::Channel, "pass", 2, |_| Box::new(Pass { delay: Duration::ZERO }));
    assert!(matches!(bad.run().await, Err(FlowError::Invalid(_))));
}

struct Fails;

impl Module for Fails {
    fn on_batch(&mut self, _: Batch, _: &mut Out) -> Result<(), String> {
        Err("no room for it".into())
    }
}

struct Panics;

impl Module for Panics {
    fn on_batch(&mut self, _: Batch, _: &mut Out) -> Result<(), String> {
        panic!("a bug")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_fails_fails_the_flow_by_name() {
    let r =
        Flow::source(L, "read", 2, |p| source(p, 50, 10))
            .then(Edge::Dq, "filter", 2, |i| {
                if i == 1 { Box::new(Fails) } else { Box::new(Pass { delay: Duration::ZERO }) }
            })
            .run()
            .await;
    match r {
        Err(FlowError::Module { stage, instance: 1, why }) => {
            assert_eq!((stage.as_str(), why.as_str()), ("filter", "no room for it"))
        }
        other => panic!("{other:?}"),
    }
    let r =
        Flow::source(L, "read", 2, |p| source(p, 50, 10)).then(Edge::Hash, "sort", 2, |_| Box::new(Panics)).run().await;
    assert!(matches!(r, Err(FlowError::Panicked { ref stage, .. }) if stage == "sort"), "{r:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the sizes, and with one consumer slow, every edge delivers every record once.
    #[test]
    fn every_edge_delivers_every_record_exactly_once(
        producers in 1usize..5,
        consumers in 1usize..5,
        batches in 0usize..30,
        slow in 0usize..5,
        edge in prop_oneof![Just(Edge::Dq), Just(Edge::Hash), Just(Edge::Range)],
        seed in any::<u64>(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let flow = Flow::source(L, "read", producers, move |p| source(p, batches, 7))
            .then(edge, "pass", consumers, move |c| {
                let delay = if c == slow { Duration::from_micros(30) } else { Duration::ZERO };
                Box::new(Pass { delay })
            })
            .with_seed(seed);
        let r = rt.block_on(flow.run()).unwrap();
        let got = summary(r.output.iter().flatten());
        prop_assert!(got.same_records(&input(producers, batches, 7)), "{got:?}");
        prop_assert_eq!(got.records, (producers * batches * 7) as u64);
    }
}
