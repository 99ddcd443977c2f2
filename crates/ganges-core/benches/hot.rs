//! The hot paths of ganges-core, so a regression shows in numbers: combining CRCs (every
//! delivered piece folds into the dataset's digest), a scheduler's pick (every disk read),
//! and the layout-aware ideal (every bench row, and every gd-plan plan).
//! `cargo bench -p ganges-core`.

use criterion::{Criterion, criterion_group, criterion_main};
use ganges_core::crc::combine;
use ganges_core::ideal::{layout_ideal, plan, scan_demands};
use ganges_core::layout::Layout;
use ganges_core::sched::{Auto, Job, Progress, ProgressMetric, Scheduler, Service, StreamKey};
use ganges_core::shape::Shape;
use ganges_core::time::Time;
use std::hint::black_box;

fn crc(c: &mut Criterion) {
    c.bench_function("crc combine, 64 KiB units of a 1 MiB block", |b| {
        b.iter(|| (0..16u32).fold(0u32, |acc, i| combine(acc, black_box(i.wrapping_mul(2_654_435_761)), 64 << 10)))
    });
}

fn job(id: u64, stream: u64, done: u64, service: Service) -> Job {
    Job {
        id,
        stream: StreamKey { conn: stream, stream },
        file: stream,
        bytes: 1 << 20,
        progress: Progress { done_bytes: done, total_bytes: 64 << 20, metric: ProgressMetric::Bytes },
        service,
        arrival: Time(id),
    }
}

fn pick(c: &mut Criterion) {
    for (name, service) in [
        ("furthest behind", Service::FURTHEST_BEHIND),
        ("furthest behind with runs", Service { runs: true, ..Service::FURTHEST_BEHIND }),
    ] {
        c.bench_function(&format!("scheduler pick, 16 streams of 4 queued, {name}"), |b| {
            let mut s = Auto::default();
            let mut id = 0;
            for stream in 0..16 {
                for _ in 0..4 {
                    id += 1;
                    s.push(job(id, stream, id << 20, service));
                }
            }
            b.iter(|| {
                let j = s.pop(Time(id), Some(3)).expect("a queued job");
                id += 1;
                s.push(job(id, j.stream.stream, j.progress.done_bytes + (1 << 20), service));
            })
        });
    }
}

fn ideal(c: &mut Criterion) {
    let shape = Shape::uniform(16, 64 << 20, 1 << 20).expect("a shape");
    let demands = scan_demands(&shape, &shape.fragment_partitions()).expect("demands");
    let layout = Layout::chained(16, 2).expect("a layout");
    let mut rates = vec![32e6; 16];
    rates[0] = 16e6;
    rates[7] = 8e6;
    c.bench_function("layout-aware ideal, 16 servers, 2 slow", |b| {
        b.iter(|| layout_ideal(black_box(&demands), &layout, &rates).expect("an ideal"))
    });
    c.bench_function("gd-plan's plan, 16 servers, 2 slow", |b| {
        b.iter(|| plan(black_box(&demands), &layout, &rates).expect("a plan"))
    });
}

criterion_group!(benches, crc, pick, ideal);
criterion_main!(benches);
