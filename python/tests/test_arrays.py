"""Arrays from Python: whole-array writes with every allocation, collective writes by forked
processes each holding its chunk, reads of any layout, Zarr export."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import loopback_cluster_file

import ganges

SHAPE = (48, 40, 32)


def cube(dtype: Any = np.float32) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype=dtype).reshape(SHAPE)


@pytest.mark.parametrize("alloc", ["round-robin", "static", "dynamic", "steal"])
def test_a_whole_array_round_trips_with_every_allocation(
    cluster: ganges.Cluster, name: str, alloc: str
) -> None:
    a = cube()
    report = cluster.write_array(name, a, alloc=alloc, subchunk="16KiB")
    assert report["bytes"] == a.nbytes and len(report["server_bytes"]) == cluster.nodes
    assert sum(report["server_bytes"]) == a.nbytes
    back = cluster.read_array(name)
    assert back.dtype == a.dtype and back.shape == a.shape and np.array_equal(back, a)


def test_chunks_of_any_layout(cluster: ganges.Cluster, name: str) -> None:
    a = cube(np.int64)
    cluster.write_array(name, a, disk_mesh=[2, 2], disk_dist=["BLOCK", "*", "BLOCK"], replicas=2)
    # Process 3 of a 2x2 BLOCK,BLOCK,* layout holds the last half of each of the first two dims.
    chunk = cluster.read_array(name, memory_mesh=[2, 2], memory_dist=["BLOCK", "BLOCK", "*"], rank=3)
    assert np.array_equal(chunk, a[24:, 20:, :])
    # CYCLIC(2) along the first dimension over 3 processes: process 1 holds rows 2,3, 8,9, ...
    cyc = cluster.read_array(
        name, memory_mesh=[3], memory_dist=["CYCLIC(2)", "*", "*"], rank=1, policy="static"
    )
    rows = [r for r in range(SHAPE[0]) if (r // 2) % 3 == 1]
    assert np.array_equal(cyc, a[rows])
    info = cluster.dataset(name).info()["manifest"]["array"]
    assert info["schema"] == {"shape": list(SHAPE), "dtype": "i64"}


def _write_part(path: str, name: str, rank: int, q: mp.Queue) -> None:  # type: ignore[type-arg]
    a = cube()
    i, j = divmod(rank, 2)
    chunk = a[i * 24 : (i + 1) * 24, j * 20 : (j + 1) * 20, :]
    try:
        report = ganges.connect(path).write_array_part(
            name,
            chunk,
            shape=SHAPE,
            memory_mesh=[2, 2],
            memory_dist=["BLOCK", "BLOCK", "*"],
            rank=rank,
            alloc="dynamic",
            subchunk="32KiB",
        )
        q.put((rank, report is not None and report["bytes"] == a.nbytes))
    except ganges.GangesError as e:
        q.put((rank, str(e)))


def test_a_collective_write_by_four_processes(cluster: ganges.Cluster, name: str) -> None:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_write_part, args=(cluster.path, name, r, q)) for r in range(4)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(10)
    assert results == {0: True, 1: False, 2: False, 3: False}, results
    assert np.array_equal(cluster.read_array(name), cube())


def test_zarr_export_reads_back_in_zarr(cluster: ganges.Cluster, name: str, tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr", reason="zarr is in the test requirements")
    a = cube(np.uint16)
    cluster.write_array(name, a, alloc="static")
    out = cluster.export_zarr(name, tmp_path / "a.zarr")
    assert out["bytes"] == a.nbytes
    assert np.array_equal(zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[:], a)


def test_array_errors(cluster: ganges.Cluster, name: str) -> None:
    with pytest.raises(ganges.InvalidArgument, match="not supported"):
        cluster.write_array(name, np.zeros(4, dtype=np.complex64))
    with pytest.raises(ganges.InvalidArgument, match="bytes"):
        cluster.write_array_part(name, np.zeros(5, np.float32), shape=(8,), memory_mesh=[2], rank=1)
    cluster.write_array(name + "-a", np.zeros((4, 4), np.float64))
    with pytest.raises(ganges.InvalidArgument, match="memory_dist"):
        cluster.read_array(name + "-a", memory_dist=["DIAGONAL", "*"])
    with pytest.raises(ganges.InvalidArgument, match="rank 4"):
        cluster.read_array(name + "-a", memory_mesh=[2, 2], rank=4)
    cluster.create_dataset(name, size="1MiB")
    with pytest.raises(ganges.InvalidArgument, match="not an array"):
        cluster.read_array(name)


def _part_time_rank(path: str, data_dir: str, name: str, rank: int, q: mp.Queue, done: Any) -> None:  # type: ignore[type-arg]
    """Process `rank` of 4: it serves node `rank` and writes its quarter of the cube."""
    a = cube()
    i, j = divmod(rank, 2)
    chunk = a[i * 24 : (i + 1) * 24, j * 20 : (j + 1) * 20, :]
    try:
        with ganges.part_time(path, rank, data_dir=data_dir, wait_for="30s") as node:
            report = node.write_array_part(
                name,
                chunk,
                shape=SHAPE,
                memory_mesh=[2, 2],
                memory_dist=["BLOCK", "BLOCK", "*"],
                disk_mesh=[2, 2],
                disk_dist=["BLOCK", "BLOCK", "*"],
                rank=rank,
                alloc="round-robin",
                subchunk="8KiB",
            )
            traffic = node.local_traffic
            # Keep serving until every process has written and the test has read the array.
            q.put((rank, report is not None, traffic))
            done.wait(60)
    except ganges.GangesError as e:
        q.put((rank, str(e), None))


def test_part_time_io_nodes_serve_their_own_disks_while_writing(tmp_path: Path, name: str) -> None:
    """Four processes, each serving one node of the cluster file (Panda's part-time I/O
    nodes), write a cube collectively; the pieces each one's own server writes stay in
    memory, and a plain client reads the cube back from the four."""
    path = loopback_cluster_file(tmp_path, 4)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    done = ctx.Event()
    procs = [
        ctx.Process(target=_part_time_rank, args=(str(path), str(tmp_path / f"node-{r}"), name, r, q, done))
        for r in range(4)
    ]
    for p in procs:
        p.start()
    try:
        results = {r: (ok, traffic) for r, ok, traffic in (q.get(timeout=120) for _ in procs)}
        assert {r: ok for r, (ok, _) in results.items()} == {0: True, 1: False, 2: False, 3: False}, results
        # Each process's own server took some of its pieces in memory, never all of the cube.
        for r, (_, traffic) in results.items():
            assert traffic is not None and 0 < traffic[1] < cube().nbytes, (r, traffic)
        back = ganges.connect(path).read_array(name)
        assert np.array_equal(back, cube())
    finally:
        done.set()
        for p in procs:
            p.join(30)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
