//! The frame codec on the data path: a read request and a 1 MiB reply, encoded and decoded.
//! `cargo bench -p ganges-proto`.

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ganges_proto::frame::FrameHeader;
use ganges_proto::msg::{Message, ReadOk};
use std::hint::black_box;

fn frame(m: &Message) -> (FrameHeader, Bytes) {
    let e = m.encode(7);
    let mut all = BytesMut::new();
    all.extend_from_slice(&e.head);
    all.extend_from_slice(&e.payload);
    let all = all.freeze();
    let head: &[u8; ganges_proto::frame::HEADER_BYTES] =
        all[..ganges_proto::frame::HEADER_BYTES].try_into().expect("a header's bytes");
    let h = FrameHeader::parse(head).expect("a header");
    (h, all.slice(ganges_proto::frame::HEADER_BYTES..))
}

fn codec(c: &mut Criterion) {
    let data = Bytes::from(vec![7u8; 1 << 20]);
    let reply = Message::ReadOk(ReadOk {
        crc: crc32c::crc32c(&data),
        queue_len: 3,
        service_us: 31_000,
        primary_progress: Some(0.5),
        backup_depth: None,
        origin: None,
        data,
    });
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(1 << 20));
    g.bench_function("encode a 1 MiB ReadOk", |b| b.iter(|| black_box(&reply).encode(7)));
    let (h, body) = frame(&reply);
    g.bench_function("decode a 1 MiB ReadOk", |b| {
        b.iter(|| Message::decode(&h, black_box(body.clone())).expect("decodes"))
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
