"""A blocking call lets other Python threads run, and Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

import ganges


@pytest.fixture(scope="module")
def slow() -> Iterator[ganges.Dataset]:
    """A dataset on disks of 4 MiB/s: reading 8 MiB takes about half a second at best."""
    with ganges.local_cluster(nodes=4, disk_rate="4MiB/s", seek=0.0) as c:
        c.create_dataset("slow", size="16MiB", replicas=2, block_size="256KiB")
        yield c.dataset("slow")


def test_other_threads_run_while_a_read_waits(slow: ganges.Dataset) -> None:
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    started = time.perf_counter()
    data = slow.pread(0, 8 << 20)
    waited = time.perf_counter() - started
    stop.set()
    t.join()
    assert len(data) == 8 << 20 and waited > 0.3
    # The counter ran through the read: at a tick per millisecond or so, most of the wait.
    assert ticks > 100 * waited, f"{ticks} ticks in {waited:.2f} s: the read held the GIL"


def test_ctrl_c_stops_a_blocking_read(slow: ganges.Dataset) -> None:
    # Python's own Ctrl-C handler, whatever this process inherited: a shell starts background
    # jobs with SIGINT ignored, and Python then leaves it ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            slow.numpy()  # 16 MiB: seconds at these rates
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.perf_counter() - started < 1.5
    # The cluster is still usable after the interrupted read.
    assert len(slow.pread(0, 1000)) == 1000
