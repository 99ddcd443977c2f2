//! Collective array writes against servers in this process: every allocation writes an array
//! that reads back, element for element, into other memory layouts; a server lost in the
//! middle leaves nothing committed and every process told why.

use bytes::Bytes;
use ganges_client::array::{self, ArraySpec, CallId, Rates};
use ganges_core::array::{AllocKind, ArrayLayout, DType, Dist, Schema, SubchunkStyle, generated};
use ganges_core::disk::DiskParams;
use ganges_harness::InProcessCluster;
use std::sync::Arc;
use std::time::Duration;

fn layout(mesh: &[u32], dist: &str) -> ArrayLayout {
    ArrayLayout::new(mesh.to_vec(), dist.split(',').map(|d| d.parse::<Dist>().unwrap()).collect()).unwrap()
}

fn chunks(spec: &ArraySpec) -> Vec<Bytes> {
    (0..spec.ranks()).map(|r| Bytes::from(generated(&spec.schema, &spec.memory.chunk(&spec.schema, r)))).collect()
}

fn model(mib_per_sec: f64) -> Option<DiskParams> {
    Some(DiskParams { rate_bytes_per_sec: mib_per_sec * 1048576.0, seek: Duration::from_micros(200), queue_depth: 1 })
}

/// Every process's chunk of `memory`, read back and compared with what was generated.
async fn check_reads(c: &InProcessCluster, name: &str, schema: &Schema, memory: &ArrayLayout) {
    let client = c.client().await.unwrap();
    let manifest = Arc::new(client.manifest(&name.parse().unwrap()).await.unwrap());
    for r in 0..memory.positions() {
        let got = array::read_chunk(&client, &manifest, memory, r).await.expect("read");
        assert!(got == generated(schema, &memory.chunk(schema, r)), "{name}: chunk {r} of {memory:?} differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_allocation_writes_what_reads_back_in_any_layout() {
    let c = InProcessCluster::start(3, model(400.0)).await.unwrap();
    let client = c.client().await.unwrap();
    // 3 MiB: a 2×2×2 BLOCK memory layout, a row-major disk layout, 256 KiB subchunks.
    let schema = Schema::new(vec![48, 64, 128], DType::F64).unwrap();
    let mut rates = Rates::default();
    for (i, alloc) in AllocKind::ALL.into_iter().enumerate() {
        let name = format!("grid-{alloc}");
        let mut spec = ArraySpec::new(
            name.parse().unwrap(),
            schema.clone(),
            layout(&[2, 2, 2], "BLOCK,BLOCK,BLOCK"),
            layout(&[3], "BLOCK,*,*"),
            alloc,
        );
        spec.threshold = 256 << 10;
        if i == 1 {
            spec.style = SubchunkStyle::FirstDim;
        }
        let report = array::write_all(&client, &spec, &rates, chunks(&spec)).await.expect("write");
        rates.0 = Some(report.rates.clone());
        let meta = report.manifest.array.as_ref().unwrap();
        assert_eq!(meta.places.len(), 12, "{alloc}");
        assert_eq!(report.server_bytes.iter().sum::<u64>(), schema.bytes());
        // Read back as the writers held it, as one process, and with CYCLIC rows.
        check_reads(&c, &name, &schema, &spec.memory).await;
        check_reads(&c, &name, &schema, &ArrayLayout::whole(3)).await;
        check_reads(&c, &name, &schema, &layout(&[3, 2], "CYCLIC(5),*,BLOCK")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_and_dynamic_allocation_give_a_slow_server_less() {
    let c = InProcessCluster::start(2, model(64.0)).await.unwrap();
    let client = c.client().await.unwrap();
    let slow = ganges_proto::control::ControlRequest::SetFault {
        fault: Some(ganges_core::disk::Fault::Factor { factor: 0.25 }),
    };
    client.control(ganges_core::ids::NodeId(1), slow).await.unwrap();
    let schema = Schema::new(vec![1024, 4096], DType::U8).unwrap();
    for alloc in [AllocKind::Static, AllocKind::Dynamic, AllocKind::Steal] {
        let spec = ArraySpec::new(
            format!("slow-{alloc}").parse().unwrap(),
            schema.clone(),
            layout(&[2], "BLOCK,*"),
            layout(&[2], "BLOCK,*"),
            alloc,
        );
        let spec = ArraySpec { threshold: 128 << 10, ..spec };
        let report = array::write_all(&client, &spec, &Rates::default(), chunks(&spec)).await.expect("write");
        let [fast, slow] = report.server_bytes[..] else { panic!() };
        // At a quarter of the speed, the slow server should take about a fifth.
        assert!(slow * 2 < fast, "{alloc}: fast {fast}, slow {slow}");
        check_reads(&c, &spec.name.to_string(), &schema, &spec.memory).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_hold_the_same_bytes_and_read_round_a_slow_server() {
    let c = InProcessCluster::start(4, model(128.0)).await.unwrap();
    let client = c.client().await.unwrap();
    let schema = Schema::new(vec![64, 128, 256], DType::U32).unwrap();
    let mut spec = ArraySpec::new(
        "twice".parse().unwrap(),
        schema.clone(),
        layout(&[2, 2], "BLOCK,BLOCK,*"),
        layout(&[4], "BLOCK,*,*"),
        AllocKind::Dynamic,
    );
    spec.replicas = 2;
    spec.threshold = 512 << 10;
    let report = array::write_all(&client, &spec, &Rates::default(), chunks(&spec)).await.expect("write");
    assert_eq!(report.manifest.layout.replicas(), 2);
    // Every copy of every fragment is checked against the other when read or verified.
    let v = ganges_client::dataset::verify(&client, &spec.name, None).await.expect("verify");
    assert!(v.is_clean(), "{v:?}");
    let slow = ganges_proto::control::ControlRequest::SetFault {
        fault: Some(ganges_core::disk::Fault::Factor { factor: 0.25 }),
    };
    client.control(ganges_core::ids::NodeId(2), slow).await.unwrap();
    check_reads(&c, "twice", &schema, &layout(&[4], "BLOCK,*,*")).await;
    // With one copy stopped, every element still reads (from the other).
    let mut c = c;
    c.stop(1).await;
    check_reads(&c, "twice", &schema, &ArrayLayout::whole(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lost_mid_write_commits_nothing_and_every_process_hears_it() {
    let mut c = InProcessCluster::start(3, model(8.0)).await.unwrap();
    let client = c.client().await.unwrap();
    let schema = Schema::new(vec![256, 256, 64], DType::U8).unwrap();
    let spec = ArraySpec::new(
        "lost".parse().unwrap(),
        schema.clone(),
        layout(&[2], "BLOCK,*,*"),
        layout(&[3], "BLOCK,*,*"),
        AllocKind::RoundRobin,
    );
    let call = CallId::random();
    let coordinator = array::Coordinator::begin(&client, spec.clone(), call, &Rates::default()).await.unwrap();
    let ranks: Vec<_> = chunks(&spec)
        .into_iter()
        .enumerate()
        .map(|(r, chunk)| {
            let (client, spec) = (client.clone(), spec.clone());
            tokio::spawn(async move { array::write_rank(&client, &spec, call, r as u32, chunk).await })
        })
        .collect();
    // 4 MiB at 8 MiB/s per server: the write is under way for about a sixth of a second.
    tokio::time::sleep(Duration::from_millis(60)).await;
    c.stop(2).await;
    let err = coordinator.finish().await.expect_err("a write missing a server must fail");
    assert!(err.to_string().contains("node2") || err.to_string().contains("down"), "{err}");
    for r in ranks {
        let e = r.await.unwrap().expect_err("every process hears the write failed");
        assert!(e.to_string().contains("not committed") || e.to_string().contains("down"), "{e}");
    }
    let err = client.manifest(&"lost".parse().unwrap()).await.expect_err("nothing is visible");
    assert!(err.to_string().contains("lost"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_joins_an_ended_call_is_told_so_at_once() {
    let c = InProcessCluster::start(2, None).await.unwrap();
    let client = c.client().await.unwrap();
    let spec = ArraySpec::new(
        "again".parse().unwrap(),
        Schema::new(vec![64, 64], DType::U32).unwrap(),
        layout(&[2], "BLOCK,*"),
        layout(&[2], "BLOCK,*"),
        AllocKind::Static,
    );
    let call = CallId::derive(&spec.name, 7);
    let coordinator = array::Coordinator::begin(&client, spec.clone(), call, &Rates::default()).await.unwrap();
    let parts = chunks(&spec);
    let (a, b, report) = tokio::join!(
        array::write_rank(&client, &spec, call, 0, parts[0].clone()),
        array::write_rank(&client, &spec, call, 1, parts[1].clone()),
        coordinator.finish()
    );
    a.unwrap();
    b.unwrap();
    report.unwrap();
    // The servers remember call 7's outcome: a process of a later write that reuses the id
    // must not take it for its own (and leave the servers waiting for its pieces).
    let started = std::time::Instant::now();
    let err = array::write_rank(&client, &spec, call, 1, parts[1].clone()).await.expect_err("an ended call");
    assert!(err.to_string().contains("had ended"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}
