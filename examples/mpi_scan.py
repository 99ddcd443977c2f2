"""Scan a dataset from every rank of an MPI job: each rank is one graduated-declustering
consumer, and rank 0 prints each rank's share against the ideal.

    mpirun -n 4 python -m mpi4py examples/mpi_scan.py --cluster CLUSTER_FILE --dataset events

With one slow disk, the ranks still finish together: each server's load shifts to the copies
on its neighbours as it falls behind. `--policy static` shows what happens without that.
"""

from __future__ import annotations

import argparse

from mpi4py import MPI

import ganges


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", help="cluster file (default: $GANGES_CLUSTER or the local cluster)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--policy", default="gd")
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ds = ganges.connect(args.cluster).dataset(args.dataset)

    comm.Barrier()
    start = MPI.Wtime()
    scan = ds.scan(consumer=rank, consumers=size, policy=args.policy)
    total = checksum = 0
    for block in scan:
        data = block.numpy()
        total += len(data)
        checksum = (checksum + int(data[::4096].sum())) % (1 << 61)
    seconds = MPI.Wtime() - start
    report = scan.report()
    backup = sum(report["stats"]["bytes_by_copy"][1:])
    rows = comm.gather((rank, total, seconds, backup), root=0)
    comm.Barrier()
    elapsed = MPI.Wtime() - start

    if rank == 0:
        assert rows is not None
        print(f"{'rank':>4} {'bytes':>12} {'seconds':>8} {'MB/s':>8} {'backup %':>8}")
        for r, n, secs, b in rows:
            print(f"{r:>4} {n:>12} {secs:>8.3f} {n / secs / 1e6:>8.1f} {100 * b / max(n, 1):>8.1f}")
        read = sum(n for _, n, _, _ in rows)
        ideal = ds.ideal_seconds(consumers=size)
        line = f"{args.policy}: {read} bytes in {elapsed:.3f} s = {read / elapsed / 1e6:.1f} MB/s"
        if ideal:
            line += f"; ideal {ideal:.3f} s, {100 * ideal / elapsed:.0f}% of ideal"
        else:
            line += "; ideal: unknown (the servers read real disks, with no model rate)"
        print(line)
        if read != ds.size:
            raise SystemExit(f"read {read} bytes of {ds.size}")


if __name__ == "__main__":
    main()
