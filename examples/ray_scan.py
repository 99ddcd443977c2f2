"""Read a ganges dataset into Ray Data through a datasource whose read tasks are
graduated-declustering consumers, then feed two consumers with `streaming_split`.

    python examples/ray_scan.py --cluster CLUSTER_FILE --dataset events --tasks 8

Each read task reads its share with the policy given; with `gd`, a slow disk's share moves to
the copies on its neighbours, so no task (and no split fed by it) waits on that disk.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

import ganges


class GangesDatasource(Datasource):
    """Rows of one column, `data`: each a block of the dataset as delivered, with `offset`."""

    def __init__(self, dataset: ganges.Dataset, policy: str = "gd") -> None:
        self.dataset = dataset
        self.policy = policy

    def estimate_inmemory_data_size(self) -> int:
        return self.dataset.size

    def get_read_tasks(self, parallelism: int, *args: Any, **kwargs: Any) -> list[ReadTask]:
        ds, policy = self.dataset, self.policy

        def read(consumer: int) -> Iterable[pa.Table]:
            for block in ds.scan(consumer=consumer, consumers=parallelism, policy=policy):
                yield _table(block)

        share = ds.size // parallelism
        return [
            ReadTask(
                lambda c=c: read(c),  # type: ignore[misc]
                BlockMetadata(num_rows=None, size_bytes=share, exec_stats=None, input_files=None),
            )
            for c in range(parallelism)
        ]


def _table(block: ganges.Block) -> pa.Table:
    """One row: the block's offset, and its bytes as a binary value over the block's own
    memory (no copy into Arrow)."""
    ends = pa.py_buffer(np.array([0, len(block)], dtype=np.int32))
    data = pa.Array.from_buffers(pa.binary(), 1, [None, ends, pa.py_buffer(block.data)])
    return pa.table({"offset": pa.array([block.offset], type=pa.uint64()), "data": data})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster")
    p.add_argument("--dataset", required=True)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--policy", default="gd")
    args = p.parse_args()

    ds = ganges.connect(args.cluster).dataset(args.dataset)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    start = time.perf_counter()
    data = ray.data.read_datasource(GangesDatasource(ds, args.policy), override_num_blocks=args.tasks)
    totals = [0, 0]

    def consume(i: int, it: Any) -> None:
        for batch in it.iter_batches(batch_format="numpy"):
            totals[i] += sum(len(b) for b in batch["data"])

    splits = data.streaming_split(2)
    threads = [threading.Thread(target=consume, args=(i, s)) for i, s in enumerate(splits)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    read = sum(totals)
    print(f"two splits read {totals[0]} + {totals[1]} = {read} bytes in {elapsed:.2f} s")
    ray.shutdown()
    if read != ds.size:
        raise SystemExit(f"read {read} bytes of {ds.size}")
    print(f"every byte of `{args.dataset}` read once ({read / elapsed / 1e6:.1f} MB/s)")


if __name__ == "__main__":
    main()
