"""Every reader: scans per consumer, zero-copy blocks, the file object, random access,
written order, Arrow, progress callbacks, and a scan that survives a killed server."""

from __future__ import annotations

import io

import numpy as np
import pytest

import ganges


@pytest.fixture(scope="module")
def events(cluster: ganges.Cluster) -> ganges.Dataset:
    return cluster.create_dataset("py-events", size="24MiB", replicas=2, block_size="256KiB")


@pytest.fixture(scope="module")
def whole(events: ganges.Dataset) -> np.ndarray:
    data = events.numpy()
    assert len(data) == 24 << 20
    return data


@pytest.mark.parametrize("policy", ["static", "gd", "gd-rr", "gd-plan"])
@pytest.mark.parametrize("consumers", [None, 3])
def test_consumers_read_every_byte_once(
    events: ganges.Dataset, whole: np.ndarray, policy: str, consumers: int | None
) -> None:
    n = consumers or 4
    seen = np.zeros(len(whole), dtype=np.uint8)
    for c in range(n):
        scan = events.scan(consumer=c, consumers=consumers, policy=policy)
        start, length = scan.partition
        for block in scan:
            a = block.numpy()
            assert start <= block.offset and block.offset + len(a) <= start + length
            assert np.array_equal(a, whole[block.offset : block.offset + len(a)])
            seen[block.offset : block.offset + len(a)] += 1
        report = scan.report()
        assert report["bytes"] == length and report["policy"] == policy
    assert (seen == 1).all(), "every byte delivered exactly once"


def test_blocks_reach_numpy_and_arrow_without_a_copy(events: ganges.Dataset) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is in the test requirements")
    block = next(iter(events.scan(consumer=0)))
    # Two views made separately land on the same memory: the bytes Rust received.
    a, b = np.frombuffer(memoryview(block.data), dtype=np.uint8), block.numpy()
    assert a.ctypes.data == b.ctypes.data
    assert pa.py_buffer(block.data).address == a.ctypes.data
    assert memoryview(block.data).readonly and not a.flags.writeable


def test_file_object_reads_seeks_and_readinto(events: ganges.Dataset, whole: np.ndarray) -> None:
    with events.open(buffer_blocks=4) as f:
        assert f.read(10) == whole[:10].tobytes()
        f.seek(5 << 20)
        assert f.tell() == 5 << 20
        buf = bytearray(1000)
        assert f.readinto(buf) == 1000 and bytes(buf) == whole[5 << 20 : (5 << 20) + 1000].tobytes()
        f.seek(-7, io.SEEK_END)
        assert f.read() == whole[-7:].tobytes()
        assert f.read(1) == b""
    buffered = io.BufferedReader(events.open())
    assert buffered.read(300_000) == whole[:300_000].tobytes()


def test_random_reads_one_and_many(events: ganges.Dataset, whole: np.ndarray) -> None:
    assert events.pread(12345, 777) == whole[12345 : 12345 + 777].tobytes()
    rng = np.random.default_rng(7)
    starts, lengths = rng.integers(0, len(whole) - 70000, 50), rng.integers(1, 70000, 50)
    ranges = [(int(o), int(n)) for o, n in zip(starts, lengths, strict=True)]
    for (o, n), data in zip(ranges, events.read_many(ranges), strict=True):
        assert bytes(data) == whole[o : o + n].tobytes()
    with pytest.raises(ganges.InvalidArgument, match="past the end"):
        events.pread(len(whole) - 1, 2)


def test_progress_callback_counts_every_byte(cluster: ganges.Cluster, name: str) -> None:
    tqdm = pytest.importorskip("tqdm", reason="tqdm is in the test requirements").tqdm
    bar = tqdm(total=2 * (8 << 20), file=io.StringIO())
    seen: list[int] = []

    def step(n: int) -> None:
        seen.append(n)
        bar.update(n)

    ds = cluster.create_dataset(name, size="8MiB", replicas=2, progress=step)
    assert sum(seen) == 2 * (8 << 20) and bar.n == sum(seen)  # both copies
    seen.clear()
    ds.verify(progress=step)
    assert sum(seen) > 0


def test_records_as_arrow(cluster: ganges.Cluster, name: str) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is in the test requirements")
    ds = cluster.create_dataset(name, size="2MiB", records=100, replicas=2)
    raw = ds.numpy()
    table = ds.read_arrow(columns=["record", "key", "value"])
    n = len(raw) // 100
    assert table.num_rows == n and table.schema.field("key").type == pa.binary(10)
    assert table.column("record")[3].as_py() == raw[300:400].tobytes()
    assert table.column("key")[5].as_py() == raw[500:510].tobytes()
    assert table.column("value")[5].as_py() == raw[510:600].tobytes()
    with pytest.raises(ganges.InvalidArgument, match="fixed-size records"):
        cluster.create_dataset(name + "-b", size="1MiB").read_arrow()


def test_written_order_follows_the_writers(cluster: ganges.Cluster, name: str) -> None:
    src = np.random.default_rng(3).integers(0, 255, 6 << 20, dtype=np.uint8)
    ds = cluster.write(name, [src], writers=3, policy="dq", block_size="256KiB")
    with ds.open(written_order=True) as f:
        assert f.read() == src.tobytes()


def test_a_scan_survives_a_killed_server(name: str) -> None:
    with ganges.local_cluster(nodes=4) as c:
        ds = c.create_dataset(name, size="16MiB", replicas=2, block_size="256KiB")
        expected = ds.numpy()
        c.kill(2)
        got = np.zeros_like(expected)
        for consumer in range(4):
            for block in ds.scan(consumer=consumer, policy="gd"):
                got[block.offset : block.offset + len(block)] = block.numpy()
        assert np.array_equal(got, expected)
