"""Readers in forked processes (multiprocessing, data-loader workers), and `ganges://` through
fsspec in pandas, pyarrow and dask."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

import ganges


def _consume(args: tuple[str, str, int, int]) -> tuple[int, int]:
    """One consumer's scan in a child process: (bytes, sum of bytes)."""
    path, name, consumer, consumers = args
    c = ganges.connect(path)
    total = checksum = 0
    for block in c.dataset(name).scan(consumer=consumer, consumers=consumers):
        a = block.numpy()
        total += len(a)
        checksum += int(a.sum(dtype=np.uint64))
    return total, checksum


def _consume_dataset(ds: ganges.Dataset) -> int:
    return sum(len(b) for c in range(2) for b in ds.scan(consumer=c, consumers=2))


def _scan_inherited(ds: ganges.Dataset, q: mp.Queue) -> None:  # type: ignore[type-arg]
    """A forked child that uses the cluster object its parent connected: it connects anew."""
    q.put(sum(len(b) for b in ds.scan(consumer=1, consumers=2)))


def test_a_fork_pool_of_readers(cluster: ganges.Cluster, name: str) -> None:
    ds = cluster.create_dataset(name, size="12MiB", replicas=2)
    whole = ds.numpy()
    # The parent has used its runtime and connections before forking.
    assert sum(len(b) for b in ds.scan(consumer=0, consumers=3)) > 0
    ctx = mp.get_context("fork")
    with ctx.Pool(3) as pool:
        parts = pool.map(_consume, [(cluster.path, name, c, 3) for c in range(3)])
        # A Dataset pickles as its cluster file and name.
        pickled = pool.apply(_consume_dataset, (ds,))
    assert sum(p[0] for p in parts) == len(whole)
    assert sum(p[1] for p in parts) == int(whole.sum(dtype=np.uint64))
    assert pickled == len(whole)
    q = ctx.Queue()
    child = ctx.Process(target=_scan_inherited, args=(ds, q))
    child.start()
    assert q.get(timeout=30) == ds.scan(consumer=1, consumers=2).partition[1]
    child.join(10)
    # And the parent still reads after its children are gone.
    assert ds.pread(0, 16) == whole[:16].tobytes()


def test_a_scan_opened_before_fork_says_so_in_the_child(cluster: ganges.Cluster, name: str) -> None:
    ds = cluster.create_dataset(name, size="2MiB", replicas=2)
    scan = ds.scan(consumer=0)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_next_in_child, args=(scan, q))
    p.start()
    p.join(30)
    assert "before a fork" in q.get(timeout=5)
    assert len(next(scan)) > 0  # the parent's scan is unharmed


def _next_in_child(scan: ganges.Scan, q: mp.Queue) -> None:  # type: ignore[type-arg]
    try:
        next(scan)
        q.put("no error")
    except ganges.GangesError as e:
        q.put(str(e))


@pytest.fixture
def env_cluster(cluster: ganges.Cluster, monkeypatch: pytest.MonkeyPatch) -> ganges.Cluster:
    monkeypatch.setenv("GANGES_CLUSTER", cluster.path)
    return cluster


def test_fsspec_through_pandas_pyarrow_and_dask(env_cluster: ganges.Cluster, name: str) -> None:
    pd = pytest.importorskip("pandas", reason="pandas is in the test requirements")
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is in the test requirements")
    fsspec = pytest.importorskip("fsspec", reason="fsspec is in the test requirements")
    dd = pytest.importorskip("dask.dataframe", reason="dask is in the test requirements")
    df = pd.DataFrame({"k": np.arange(50_000), "v": np.random.default_rng(1).random(50_000)})
    url = f"ganges://{name}.parquet"
    df.to_parquet(url)  # no import of ganges.fs: the entry point registers the protocol
    assert f"{name}.parquet" in env_cluster.datasets()
    pd.testing.assert_frame_equal(pd.read_parquet(url), df)
    fs = fsspec.filesystem("ganges")
    assert pq.read_table(f"{name}.parquet", filesystem=fs).num_rows == len(df)
    assert int(dd.read_parquet(url).v.count().compute()) == len(df)
    info = fs.info(url)
    assert info["type"] == "file" and info["size"] == env_cluster.dataset(f"{name}.parquet").size
    assert f"{name}.parquet" in fs.ls("", detail=False)
    with pytest.raises(FileNotFoundError):
        fs.info("ganges://no-such-thing")


def test_fsspec_ranges_put_get_and_rm(env_cluster: ganges.Cluster, name: str, tmp_path: object) -> None:
    fsspec = pytest.importorskip("fsspec", reason="fsspec is in the test requirements")
    import pathlib

    local = pathlib.Path(str(tmp_path)) / "blob"
    data = np.random.default_rng(5).bytes(3_000_000)
    local.write_bytes(data)
    fs = fsspec.filesystem("ganges")
    fs.put_file(str(local), f"ganges://{name}")
    ranges = [(0, 10), (2_999_990, None), (1_000_000, 1_500_000), (-5, None)]
    got = fs.cat_ranges([name] * 4, [r[0] for r in ranges], [r[1] for r in ranges])
    assert got == [data[0:10], data[2_999_990:], data[1_000_000:1_500_000], data[-5:]]
    with fs.open(name, "rb", block_size=1 << 16) as f:
        f.seek(123_456)
        assert f.read(1000) == data[123_456:124_456]
    back = pathlib.Path(str(tmp_path)) / "back"
    fs.get_file(name, str(back))
    assert back.read_bytes() == data
    fs.rm(f"ganges://{name}")
    assert not fs.exists(name)
