"""Count keys below a threshold in a records dataset with Dask: each task is one
graduated-declustering consumer of its share, so one slow disk does not hold the job back.

    python examples/dask_scan.py --cluster CLUSTER_FILE --dataset sortme --tasks 8

Tasks get the dataset by pickle (a ganges.Dataset pickles as its cluster file and name), so
this runs unchanged on a distributed Dask cluster whose workers can reach the servers.
"""

from __future__ import annotations

import argparse
import time

import dask
import numpy as np

import ganges


def count_below(
    ds: ganges.Dataset, consumer: int, consumers: int, policy: str, first_byte: int
) -> tuple[int, int]:
    """(records, records whose key starts below `first_byte`) in this consumer's share."""
    records = below = 0
    for block in ds.scan(consumer=consumer, consumers=consumers, policy=policy):
        # Blocks need not hold whole records: the first byte of each record that starts here.
        keys = block.numpy()[(-block.offset) % 100 :: 100]
        records += len(keys)
        below += int(np.count_nonzero(keys < first_byte))
    return records, below


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster")
    p.add_argument("--dataset", required=True)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--policy", default="gd")
    p.add_argument("--scheduler", default="threads", choices=["threads", "processes", "synchronous"])
    args = p.parse_args()

    ds = ganges.connect(args.cluster).dataset(args.dataset)
    start = time.perf_counter()
    parts = [
        dask.delayed(count_below)(ds, i, args.tasks, args.policy, 128)  # type: ignore[attr-defined]
        for i in range(args.tasks)
    ]
    results = dask.compute(*parts, scheduler=args.scheduler)  # type: ignore[attr-defined,no-untyped-call,unused-ignore]
    elapsed = time.perf_counter() - start
    records = sum(r for r, _ in results)
    below = sum(b for _, b in results)
    print(f"{records} records, {below} with a key below 0x80 ({100 * below / max(records, 1):.1f}%)")
    ideal = ds.ideal_seconds(consumers=args.tasks)
    tail = f", {100 * ideal / elapsed:.0f}% of ideal" if ideal else ""
    print(f"{args.policy}: {records * 100 / elapsed / 1e6:.1f} MB/s in {elapsed:.2f} s{tail}")
    if records * 100 != ds.size:
        raise SystemExit(f"read {records * 100} bytes of {ds.size}")


if __name__ == "__main__":
    main()
