"""Feed a PyTorch DataLoader from a ganges dataset: each loader worker is one
graduated-declustering consumer of its share, so a slow disk does not starve the batches.

    python examples/torch_loader.py --cluster CLUSTER_FILE --dataset events --workers 2

Workers are forked processes: each connects to the cluster on its own.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import ganges


class GangesBlocks(IterableDataset):  # type: ignore[misc,type-arg,unused-ignore]
    """The dataset's blocks as uint8 tensors over the received bytes (read-only: do not
    write to them), each worker reading its own share."""

    def __init__(self, dataset: ganges.Dataset, policy: str = "gd") -> None:
        self.dataset = dataset
        self.policy = policy

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        consumer, consumers = (info.id, info.num_workers) if info else (0, 1)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            for block in self.dataset.scan(consumer=consumer, consumers=consumers, policy=self.policy):
                yield torch.frombuffer(block.data, dtype=torch.uint8)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster")
    p.add_argument("--dataset", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--policy", default="gd")
    args = p.parse_args()

    ds = ganges.connect(args.cluster).dataset(args.dataset)
    loader = DataLoader(GangesBlocks(ds, args.policy), batch_size=None, num_workers=args.workers)
    start = time.perf_counter()
    read = total = 0
    for tensor in loader:
        read += tensor.numel()
        total += int(tensor[::4096].sum())
    elapsed = time.perf_counter() - start
    print(f"{read} bytes in {elapsed:.2f} s ({read / elapsed / 1e6:.1f} MB/s) by {args.workers} workers")
    if read != ds.size:
        raise SystemExit(f"read {read} bytes of {ds.size}")


if __name__ == "__main__":
    main()
