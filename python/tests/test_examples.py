"""The examples in examples/ run for real against a local cluster: a scan and an array
checkpoint under mpirun, Dask, Ray Data and a PyTorch DataLoader. A tool this machine lacks
is a skip that says what is missing (with GANGES_NO_SKIP=1, a failure)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import has, loopback_cluster_file, need

import ganges

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(*args: str, timeout: float = 300) -> str:
    # From examples/, so no process (Ray starts workers in the driver's folder) finds the
    # package's sources before the installed package.
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, cwd=EXAMPLES)
    assert out.returncode == 0, f"{args} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def slow_cluster() -> Iterator[ganges.Cluster]:
    """4 servers with the disk model, node 1 at half speed."""
    with ganges.local_cluster(nodes=4, disk_rate="64MiB/s") as c:
        c.create_dataset("ex-events", size="64MiB", replicas=2)
        c.create_dataset("ex-records", size="32MiB", records=100, replicas=2)
        c.fault_set(1, factor=0.5)
        yield c


def mpirun(ranks: int, example: str, *args: str) -> str:
    """An example under mpirun (`-m mpi4py`: one rank's exception aborts them all)."""
    found = shutil.which("mpirun")
    need(found is not None, "no mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    need(has("mpi4py"), "no mpi4py (pip install mpi4py)")
    assert found is not None
    flags = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return run(
        found, *flags, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(EXAMPLES / example), *args
    )


def test_mpi_scan_under_mpirun(slow_cluster: ganges.Cluster) -> None:
    out = mpirun(4, "mpi_scan.py", "--cluster", slow_cluster.path, "--dataset", "ex-events")
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3], out
    assert sum(int(r[1]) for r in rows) == 64 << 20
    assert re.search(r"gd: 67108864 bytes in [\d.]+ s = [\d.]+ MB/s; ideal [\d.]+ s, \d+% of ideal", out), out


def test_mpi_array_checkpoint_under_mpirun(slow_cluster: ganges.Cluster) -> None:
    for _ in range(2):  # the second checkpoint replaces the first
        args = ["--cluster", slow_cluster.path, "--shape", "96,64,64", "--alloc", "dynamic"]
        out = mpirun(3, "mpi_array.py", *args)
        assert "3 of 3 ranks read their CYCLIC chunk back exactly" in out, out
    assert slow_cluster.read_array("checkpoint").shape == (96, 64, 64)


def test_mpi_array_ranks_as_part_time_io_nodes(tmp_path: Path) -> None:
    """Every rank serves its own node; natural chunking with static allocation hands each
    rank's piece to its own server in memory (unless the empirical test of the page cache
    measured that server at under half the others' rate, which moves its subchunk away)."""
    path = loopback_cluster_file(tmp_path, 3)
    args = ["--cluster", str(path), "--shape", "96,64,64", "--alloc", "static", "--part-time", str(tmp_path)]
    out = mpirun(3, "mpi_array.py", *args)
    found = re.search(r"part-time: (\d+)% of the bytes handed over in memory", out)
    assert found and int(found.group(1)) >= 66, out
    assert "3 of 3 ranks read their CYCLIC chunk back exactly" in out, out


def test_dask_counts_every_record(slow_cluster: ganges.Cluster) -> None:
    need(has("dask"), "no dask (pip install 'dask[dataframe]')")
    script = str(EXAMPLES / "dask_scan.py")
    args = ["--cluster", slow_cluster.path, "--dataset", "ex-records", "--tasks", "6"]
    out = run(sys.executable, script, *args)
    records = (32 << 20) // 100
    assert out.startswith(f"{records} records"), out


def test_ray_data_read_tasks_are_consumers(slow_cluster: ganges.Cluster) -> None:
    need(has("ray"), "no ray (pip install 'ray[data]')")
    script = str(EXAMPLES / "ray_scan.py")
    args = ["--cluster", slow_cluster.path, "--dataset", "ex-events", "--tasks", "4"]
    out = run(sys.executable, script, *args)
    assert "every byte of `ex-events` read once" in out, out


def test_torch_loader_workers_are_consumers(slow_cluster: ganges.Cluster) -> None:
    need(
        has("torch"),
        "no torch: PyPI's Linux torch wheels need NVIDIA's CUDA packages (gigabytes), and the CPU-only "
        "wheels live on download.pytorch.org, which this machine cannot reach; pip install torch to run it",
    )
    script = str(EXAMPLES / "torch_loader.py")
    out = run(sys.executable, script, "--cluster", slow_cluster.path, "--dataset", "ex-events")
    assert out.startswith(f"{64 << 20} bytes"), out
