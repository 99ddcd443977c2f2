"""A collective array checkpoint from an MPI job (Panda's server-directed I/O): each rank
holds its block of a global 3-D array, all ranks write it at once, and each then reads back
its chunk of another layout and checks every element.

    mpirun -n 4 python -m mpi4py examples/mpi_array.py --cluster CLUSTER_FILE --shape 256,256,256

(`-m mpi4py` aborts every rank when one raises, instead of leaving them waiting.)

With `--part-time DIR` every rank is also a part-time I/O node (Panda's): rank K serves node K
of the cluster file (one node per rank; data under DIR/node-K), and the pieces of its chunk
that its own server writes are handed over in memory. With natural chunking and `--alloc
static`, that is all of them.

The servers gather 1 MiB subchunks from the ranks holding them and write each where the
allocation says: `dynamic` (the default) hands subchunks out as servers ask, so a slow
server takes fewer; `round-robin` waits on it.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets

import numpy as np
from mpi4py import MPI

import ganges


def block(extent: int, parts: int, i: int) -> slice:
    """What BLOCK gives part i of `parts` along an extent (HPF's rule: ceil-sized blocks)."""
    size = -(-extent // parts)
    return slice(min(i * size, extent), min((i + 1) * size, extent))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster")
    p.add_argument("--name", default="checkpoint")
    p.add_argument("--shape", default="128,128,128")
    p.add_argument("--alloc", default="dynamic")
    p.add_argument("--part-time", metavar="DIR", help="serve node RANK of the cluster file, data under DIR")
    args = p.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.part_time:
        cluster = ganges.part_time(args.cluster, rank, data_dir=f"{args.part_time}/node-{rank}")
    else:
        cluster = ganges.connect(args.cluster)

    # The global array's elements are their own indices, so every rank can check any part.
    mine = block(shape[0], size, rank)
    planes = np.arange(mine.start, mine.stop, dtype=np.float64)[:, None, None]
    chunk = planes * (shape[1] * shape[2]) + np.arange(shape[1] * shape[2], dtype=np.float64).reshape(
        shape[1:]
    )
    if rank == 0:
        with contextlib.suppress(ganges.DatasetNotFound):
            cluster.dataset(args.name).rm()  # the checkpoint before this one
    # Every collective write of a name needs its own call number, the same in every rank.
    call = comm.bcast(secrets.randbits(62) if rank == 0 else None, root=0)
    comm.Barrier()
    start = MPI.Wtime()
    report = cluster.write_array_part(
        args.name,
        chunk,
        shape=shape,
        memory_mesh=[size],
        memory_dist=["BLOCK", "*", "*"],
        rank=rank,
        alloc=args.alloc,
        call=call,
    )
    comm.Barrier()
    seconds = MPI.Wtime() - start

    # Read back this rank's chunk of a CYCLIC layout along the second dimension.
    back = cluster.read_array(args.name, memory_mesh=[size], memory_dist=["*", "CYCLIC(1)", "*"], rank=rank)
    cols = np.arange(rank, shape[1], size)
    expect = (np.arange(shape[0])[:, None, None] * shape[1] + cols[None, :, None]) * shape[2] + np.arange(
        shape[2]
    )
    ok = comm.allreduce(int(np.array_equal(back, expect)), op=MPI.SUM)
    local = comm.reduce((cluster.local_traffic or (0, 0))[1], op=MPI.SUM, root=0)
    if args.part_time:
        comm.Barrier()  # every rank has read: the servers may stop
        cluster.stop()
    if rank == 0:
        assert report is not None
        total = int(np.prod(shape)) * 8
        per = ", ".join(f"{b >> 20} MiB" for b in report["server_bytes"])
        print(
            f"wrote {total >> 20} MiB from {size} ranks in {seconds:.2f} s ({total / seconds / 1e6:.1f} MB/s)"
        )
        print(f"{args.alloc}: per server {per}")
        if args.part_time:
            print(f"part-time: {100 * (local or 0) / total:.0f}% of the bytes handed over in memory")
        print(f"{ok} of {size} ranks read their CYCLIC chunk back exactly")
        if ok != size:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
