"""ganges from Python: datasets spread over a cluster's servers, read and written at the speed
of the aggregate even when one disk is slow.

    import ganges
    with ganges.local_cluster(nodes=8, disk_rate="32MiB/s") as cluster:
        ds = cluster.create_dataset("events", size="1GiB", replicas=2)
        for block in ds.scan(consumer=3, consumers=8, policy="gd"):
            arr = block.numpy()            # no copy

The Rust library does the work (`ganges._ganges`); this package gives it Python shapes:
context managers, file objects, NumPy and Arrow. Every blocking call releases the GIL and
stops on Ctrl-C. Errors are `GangesError` and its subclasses.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import _ganges
from ._ganges import (
    AuthenticationError,
    Block,
    ChecksumError,
    ClusterFileError,
    ClusterUnreachable,
    DatasetExists,
    DatasetNotFound,
    DiskFull,
    GangesError,
    InvalidArgument,
    LocalClusterError,
    LocalIOError,
    ProtocolError,
    ServerError,
)

if TYPE_CHECKING:
    import pyarrow

__version__ = _ganges.__version__

__all__ = [
    "AuthenticationError",
    "Block",
    "ChecksumError",
    "Cluster",
    "ClusterFileError",
    "ClusterUnreachable",
    "Dataset",
    "DatasetExists",
    "DatasetFile",
    "DatasetNotFound",
    "DiskFull",
    "GangesError",
    "InvalidArgument",
    "LocalClusterError",
    "LocalIOError",
    "ProtocolError",
    "Scan",
    "ServerError",
    "client_metrics",
    "connect",
    "local_cluster",
    "part_time",
    "serve_metrics",
]

Size = int | str
Progress = Callable[[int], object]
PathLike = str | os.PathLike[str]


def _binary(binary: PathLike | None) -> str:
    """The `ganges` binary that runs a local cluster's servers."""
    found = binary or os.environ.get("GANGES_BIN") or shutil.which("ganges")
    if not found:
        raise LocalClusterError(
            "no `ganges` binary to run servers with: run ./install.sh from the ganges checkout, put "
            "`ganges` on PATH, or set GANGES_BIN"
        )
    return os.fspath(found)


def serve_metrics(addr: str = "127.0.0.1:0") -> str:
    """Serve this process's client metrics for Prometheus (`GET /metrics`: bytes read by copy,
    bytes written, streams open, duplicates, hedges, steals, retries) at `addr` until the
    process ends; returns the address it listens on."""
    return _ganges.serve_metrics(addr)


def client_metrics() -> str:
    """This process's client metrics in the Prometheus text format."""
    return _ganges.client_metrics()


def connect(path: PathLike | None = None) -> Cluster:
    """Connect to the cluster a cluster file lists (default: $GANGES_CLUSTER, else the file of
    the local cluster `ganges local up` started)."""
    return Cluster(_ganges.Cluster.connect(path))


def part_time(
    path: PathLike,
    node: int | None = None,
    *,
    data_dir: PathLike | None = None,
    wait_for: float | str = "60s",
    disk_rate: float | str | None = None,
    seek: float | str | None = None,
) -> Cluster:
    """Make this process a part-time I/O node (Panda's): it serves node `node` of the cluster
    file `path` (its address and, unless `data_dir` is given, its data directory from the
    file) while it computes, and connects once every node of the file answers (within
    `wait_for`: the other processes of the job start too). `node` defaults to the MPI or
    Slurm launcher's rank. In a collective array write (`write_array_part`) the pieces of this
    process's chunk that its own server writes are handed over in memory, not sent. Use as a
    context manager, or call `stop()`, to stop serving. `disk_rate` gives the server the disk
    model, as in `local_cluster`."""
    if node is None:
        launched = _ganges.launcher_rank()
        if launched is None:
            raise InvalidArgument("no node given and no MPI or Slurm launcher's rank in the environment")
        node = launched[0]
    inner = _ganges.Cluster.part_time(
        os.fspath(path),
        node,
        data_dir=None if data_dir is None else os.fspath(data_dir),
        wait_for=wait_for,
        disk_rate=disk_rate,
        seek=seek,
    )
    return Cluster(inner)


def local_cluster(
    nodes: int = 4,
    disk_rate: float | str | None = None,
    *,
    root: PathLike | None = None,
    seek: float | str | None = None,
    direct_io: bool = False,
    secret: bool = False,
    metrics: bool = False,
    binary: PathLike | None = None,
) -> Cluster:
    """Start `nodes` servers on this machine, as a context manager that stops them.

    `disk_rate` ("32MiB/s", or bytes per second) gives each server the disk model; `None`
    serves from the real file system. `root` holds the servers' data (default: a temporary
    folder, removed when the cluster stops). With `metrics`, each server serves Prometheus
    metrics on a port of its own (`Cluster.metrics_urls()`)."""
    owned = None
    if root is None:
        owned = tempfile.mkdtemp(prefix="ganges-py-")
        root = owned
    try:
        inner = _ganges.Cluster.start_local(
            nodes,
            root,
            _binary(binary),
            disk_rate=disk_rate,
            seek=seek,
            direct_io=direct_io,
            secret=secret,
            metrics=metrics,
        )
    except BaseException:
        if owned:
            shutil.rmtree(owned, ignore_errors=True)
        raise
    return Cluster(inner, owned_root=owned)


class Cluster:
    """A cluster's servers: datasets, writes and faults. Use as a context manager to stop a
    local cluster at the end. Safe to use from forked children (each process connects anew)."""

    def __init__(self, inner: _ganges.Cluster, owned_root: str | None = None) -> None:
        self._inner = inner
        self._owned_root = owned_root
        self._owner = os.getpid()

    def __enter__(self) -> Cluster:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Pickled as its cluster file: a worker process (multiprocessing, dask, ray) that
        # unpickles it connects on its own.
        return (connect, (self.path,))

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop a local cluster's servers and remove its temporary folder (nothing for a
        cluster this process connected to, and nothing in a forked child)."""
        if os.getpid() != self._owner:
            return
        self._inner.stop()
        if self._owned_root:
            shutil.rmtree(self._owned_root, ignore_errors=True)
            self._owned_root = None

    @property
    def path(self) -> str:
        """The cluster file: other processes pass it to `ganges.connect`."""
        return os.fspath(self._inner.path)

    @property
    def nodes(self) -> int:
        return self._inner.nodes

    @property
    def local_traffic(self) -> tuple[int, int] | None:
        """For a part-time I/O node (`ganges.part_time`): the frames and bytes this process
        handed its own server in memory so far; None for any other cluster."""
        return self._inner.local_traffic

    def dataset(self, name: str) -> Dataset:
        """A dataset of this cluster by name (checked when first used)."""
        return Dataset(self, name)

    def datasets(self) -> list[str]:
        return [d["name"] for d in self._inner.ls()["datasets"]]

    def create_dataset(
        self,
        name: str,
        size: Size | None = None,
        *,
        fragment_size: Size | None = None,
        fragments: int | None = None,
        replicas: int = 2,
        block_size: Size = "1MiB",
        records: int | None = None,
        seed: int = 1,
        layout: str = "chained",
        progress: Progress | None = None,
    ) -> Dataset:
        """A dataset the servers generate: random bytes, or with `records=100` the sort
        benchmark's 100-byte records with 10-byte keys."""
        if records not in (None, 100):
            raise InvalidArgument(f"records={records}: generated records are 100 bytes (10-byte keys)")
        self._inner.create(
            name,
            size=size,
            fragment_size=fragment_size,
            fragments=fragments,
            replicas=replicas,
            block_size=block_size,
            records=records is not None,
            seed=seed,
            layout=layout,
            progress_cb=progress,
        )
        return Dataset(self, name)

    def put(
        self,
        name: str,
        path: PathLike,
        *,
        fragments: int | None = None,
        replicas: int = 2,
        block_size: Size = "1MiB",
        progress: Progress | None = None,
    ) -> Dataset:
        """Import a local file as a dataset."""
        self._inner.put(
            name, path, fragments=fragments, replicas=replicas, block_size=block_size, progress_cb=progress
        )
        return Dataset(self, name)

    def write(
        self,
        name: str,
        source: PathLike | Iterable[Any] | None = None,
        *,
        size: Size | None = None,
        writers: int | None = None,
        policy: str = "gd",
        replicas: int | None = None,
        block_size: Size = "1MiB",
        complete: bool = True,
        seed: int = 1,
        progress: Progress | None = None,
    ) -> Dataset:
        """Write a dataset from `writers` writers at once through a write policy (static, gd,
        dq, ceft, ceft-adaptive). `source` is a file, or buffers (bytes, NumPy arrays, anything
        with the buffer protocol) laid end to end and taken without a copy; with `size` and no
        source the writers generate the bytes. All-or-nothing: on failure nothing is visible,
        except that a server dying mid-write leaves the dataset committed *degraded* (every
        block on a live copy; a warning names the server; `Dataset.repair()` restores it)."""
        src: Any = source
        if source is not None and not isinstance(source, str | os.PathLike):
            src = [_contiguous(b) for b in source]
        outcome: dict[str, Any] = self._inner.write(
            name,
            source=src,
            size=size,
            writers=writers,
            policy=policy,
            replicas=replicas,
            block_size=block_size,
            complete=complete,
            seed=seed,
            progress_cb=progress,
        )
        said = {
            "missing": "`{name}` is committed degraded: {nodes} went down during the write; "
            "Dataset.repair() restores its copies once it is back",
            "without": "{nodes} went down during the write; `{name}` is whole on the other "
            "servers, which took its share",
        }
        for key, text in said.items():
            if outcome.get(key):
                nodes = ", ".join(f"node{n}" for n in outcome[key])
                warnings.warn(text.format(name=name, nodes=nodes), stacklevel=2)
        return Dataset(self, name)

    def write_array(
        self,
        name: str,
        array: npt.NDArray[Any],
        *,
        disk_mesh: Sequence[int] | None = None,
        disk_dist: Sequence[str] | None = None,
        alloc: str = "dynamic",
        replicas: int = 1,
        subchunk: Size | None = None,
    ) -> dict[str, Any]:
        """Write a whole N-dimensional array from this process (Panda's server-directed
        write: the servers take 1 MiB subchunks by the allocation `alloc`: round-robin,
        static, dynamic or steal). The disk layout defaults to BLOCK over the servers along
        the first dimension."""
        a = _native(array)
        result: dict[str, Any] = _ganges.array_write(
            self._inner,
            name,
            _contiguous(a),
            list(a.shape),
            _dtype_name(a.dtype),
            disk_mesh=disk_mesh,
            disk_dist=disk_dist,
            alloc=alloc,
            replicas=replicas,
            subchunk=subchunk,
        )
        return result

    def write_array_part(
        self,
        name: str,
        chunk: npt.NDArray[Any],
        *,
        shape: Sequence[int],
        memory_mesh: Sequence[int],
        memory_dist: Sequence[str] | None = None,
        rank: int | None = None,
        disk_mesh: Sequence[int] | None = None,
        disk_dist: Sequence[str] | None = None,
        alloc: str = "dynamic",
        replicas: int = 1,
        subchunk: Size | None = None,
        call: int = 0,
    ) -> dict[str, Any] | None:
        """One process's part of a collective array write: every process of the memory
        layout (`memory_mesh`, `memory_dist`: "BLOCK", "CYCLIC(k)" or "*" per dimension) calls
        this with its chunk of the global array `shape`; the servers gather what they need
        from each. `rank` defaults to the MPI or Slurm launcher's. `call` numbers the
        collective writes of one name: each its own, the same in every process (a time step,
        or a random number rank 0 broadcasts). Returns, on rank 0, the report once the array
        is committed (None on the others)."""
        if rank is None:
            launched = _ganges.launcher_rank()
            if launched is None:
                raise InvalidArgument("no rank given and no MPI or Slurm launcher's rank in the environment")
            rank = launched[0]
        c = _native(chunk)
        result: dict[str, Any] | None = _ganges.array_write_part(
            self._inner,
            name,
            _contiguous(c),
            rank,
            list(shape),
            _dtype_name(c.dtype),
            memory_mesh=memory_mesh,
            memory_dist=memory_dist,
            disk_mesh=disk_mesh,
            disk_dist=disk_dist,
            alloc=alloc,
            replicas=replicas,
            subchunk=subchunk,
            call=call,
        )
        return result

    def read_array(
        self,
        name: str,
        *,
        memory_mesh: Sequence[int] | None = None,
        memory_dist: Sequence[str] | None = None,
        rank: int = 0,
        policy: str = "gd-plan",
    ) -> npt.NDArray[Any]:
        """Process `rank`'s chunk of an array in any memory layout (default: the whole
        array), as a read-only NumPy array over the bytes read (no copy). Read by gd-plan
        unless told otherwise: the processes of a collective read each read parts of many
        fragments, which gd-plan's plan of every server's share balances and gd's progress
        rule cannot."""
        data, shape, dtype = _ganges.array_read(
            self._inner, name, memory_mesh=memory_mesh, memory_dist=memory_dist, rank=rank, policy=policy
        )
        return np.frombuffer(memoryview(data), dtype=_numpy_dtype(dtype)).reshape(shape)

    def export_zarr(self, name: str, folder: PathLike) -> dict[str, Any]:
        """Write an array as a Zarr v3 array (`zarr.open_array(folder)`)."""
        result: dict[str, Any] = _ganges.array_export_zarr(self._inner, name, folder)
        return result

    def fault_set(
        self,
        nodes: int | Sequence[int],
        *,
        factor: float | None = None,
        competing_share: float | None = None,
        kernel_read_rate: float | str | None = None,
        kernel_write_rate: float | str | None = None,
        competing_reader: float | None = None,
        link_rate: float | str | None = None,
        link_delay: float | str | None = None,
    ) -> list[dict[str, Any]]:
        """Slow servers down: the disk model (`factor`, `competing_share`) or for real (the
        kernel's block-I/O throttle, a competing reader process, a shaped link)."""
        node_list = [nodes] if isinstance(nodes, int) else list(nodes)
        result: list[dict[str, Any]] = self._inner.fault_set(
            node_list,
            factor=factor,
            competing_share=competing_share,
            kernel_read_rate=kernel_read_rate,
            kernel_write_rate=kernel_write_rate,
            competing_reader=competing_reader,
            link_rate=link_rate,
            link_delay=link_delay,
        )
        return result

    def fault_clear(self, nodes: int | Sequence[int] | None = None) -> None:
        """Remove every fault (from every server, or those named)."""
        node_list = [nodes] if isinstance(nodes, int) else (list(nodes) if nodes is not None else None)
        self._inner.fault_clear(node_list)

    def stats(self) -> list[dict[str, Any] | None]:
        """Each server's disk, faults in force and counters (None: unreachable)."""
        result: list[dict[str, Any] | None] = self._inner.stats()
        return result

    def run(
        self,
        primitive: str,
        *datasets: str,
        workers: int | None = None,
        robust: bool = True,
        seed: int = 1,
        keep: float = 0.1,
        n: int = 10,
        after: int | None = None,
        key_bytes: int = 3,
        records: int | None = None,
        data_seed: int = 1,
        check: bool = False,
    ) -> dict[str, Any]:
        """One of River's query primitives on records datasets, as `ganges run` runs them
        (every worker a thread of this process; a worker per server by default): `scan IN`,
        `generate OUT` (`records=`), `filter IN OUT` (`keep=` share of the keys), `topn IN
        RUNS` (`n=`; the records in `"top"`; `after=K` continues from the runs), `join LEFT
        RIGHT OUT` (`key_bytes=`), `sort IN OUT` (`check=True`: read back, `"sorted"`),
        `check NAME` (is it in key order). `robust=False` runs the static version."""
        result: dict[str, Any] = self._inner.run(
            primitive,
            *datasets,
            workers=workers,
            robust=robust,
            seed=seed,
            keep=keep,
            n=n,
            after=after,
            key_bytes=key_bytes,
            records=records,
            data_seed=data_seed,
            check=check,
        )
        return result

    def metrics_urls(self) -> list[str | None]:
        """Each server's Prometheus endpoint (None: it serves none, or did not answer)."""
        return [
            f"http://{s['metrics_addr']}/metrics" if s and s.get("metrics_addr") else None
            for s in self.stats()
        ]

    def kill(self, node: int) -> None:
        """Kill one server of a local cluster."""
        self._inner.kill(node)

    def restart(self, node: int) -> None:
        """Start a killed server of a local cluster again, on its data and address."""
        self._inner.restart(node)

    def __repr__(self) -> str:
        return f"ganges.Cluster({self.path!r}, nodes={self.nodes})"


def _contiguous(buf: Any) -> Any:
    """A buffer the Rust side can take without a copy: C-contiguous bytes."""
    if isinstance(buf, bytes | bytearray | memoryview):
        return buf
    if isinstance(buf, np.ndarray):
        return np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    return memoryview(buf).cast("B")


def _native(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The array in native byte order (ganges stores elements little-endian, as x86 and Arm)."""
    a = np.asarray(a)
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _dtype_name(dtype: np.dtype[Any]) -> str:
    """ganges's element type for a NumPy dtype: u8..u64, i8..i64, f32, f64."""
    if dtype.kind not in "uif":
        raise InvalidArgument(f"arrays of {dtype} are not supported: use unsigned or signed ints or floats")
    return f"{dtype.kind}{8 * dtype.itemsize}"


def _numpy_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(f"{name[0]}{int(name[1:]) // 8}")


class Dataset:
    """One dataset: scans, file-like and random-access reads, Arrow, admin."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster = cluster
        self.name = name

    def __repr__(self) -> str:
        return f"ganges.Dataset({self.name!r})"

    def info(self) -> dict[str, Any]:
        """The manifest (shape, layout, records, digest) and the state of every copy."""
        result: dict[str, Any] = self.cluster._inner.info(self.name)
        return result

    @property
    def size(self) -> int:
        return int(sum(self.info()["manifest"]["shape"]["fragment_bytes"]))

    def scan(
        self, consumer: int = 0, consumers: int | None = None, policy: str = "gd", window: int | None = None
    ) -> _ganges.Scan:
        """Consumer `consumer` of `consumers` (default: one per fragment) reads its share,
        blocks in the order they arrive. `policy="gd"` keeps a slow disk from holding it back."""
        return self.cluster._inner.scan(self.name, consumer, consumers, policy, window)

    def ideal_seconds(self, consumers: int | None = None) -> float | None:
        """The least time in which the servers, at their modelled rates with the faults in
        force, can deliver every consumer's share (None on real disks: no model rate)."""
        return self.cluster._inner.ideal_seconds(self.name, consumers)

    def open(self, policy: str = "gd", buffer_blocks: int = 32, written_order: bool = False) -> DatasetFile:
        """A read-only binary file object (`read`, `readinto`, `seek`), reading ahead
        `buffer_blocks` blocks. `written_order` reads a dq write in its writers' order."""
        return DatasetFile(self, policy=policy, buffer_blocks=buffer_blocks, written_order=written_order)

    def random_reader(self, policy: str = "gd") -> _ganges.RandomReader:
        """A reader of any ranges, many at once (`read`, `read_many`)."""
        return self.cluster._inner.random_reader(self.name, policy)

    def pread(self, offset: int, length: int, policy: str = "gd") -> bytes:
        """`length` bytes at `offset`."""
        r = self.random_reader(policy)
        try:
            return bytes(r.read(offset, length))
        finally:
            r.close()

    def read_many(self, ranges: Sequence[tuple[int, int]], policy: str = "gd") -> list[_ganges.Bytes]:
        """Many ranges at once, in the order asked (buffers, no copy)."""
        r = self.random_reader(policy)
        try:
            return r.read_many(list(ranges))
        finally:
            r.close()

    def numpy(
        self, dtype: str = "uint8", policy: str = "gd", written_order: bool | None = None
    ) -> npt.NDArray[Any]:
        """The whole dataset in one NumPy array. A dq write (a robust sort's output, say) comes
        in its writers' order, as `ganges dataset get` exports it; `written_order=False`: in
        the order its servers hold it."""
        info = self.info()["manifest"]
        if written_order is None:
            written_order = "origin" in info
        size = int(sum(info["shape"]["fragment_bytes"]))
        out = np.empty(size, dtype=np.uint8)
        with self.open(policy=policy, written_order=written_order) as f:
            view = out.data
            done = 0
            while done < len(out):
                n = f.readinto(view[done:])
                if not n:
                    raise GangesError(f"`{self.name}` ended after {done} of {len(out)} bytes")
                done += n
        return out.view(dtype)

    def read_arrow(
        self, columns: Sequence[str] | None = None, policy: str = "gd", written_order: bool | None = None
    ) -> pyarrow.Table:
        """A records dataset as an Arrow table: `record` (the whole record, without a copy),
        `key` and `value` (fixed-size binary columns); rows in the order `numpy` gives."""
        import pyarrow as pa

        fmt = self.info()["manifest"]["records"]
        if fmt.get("kind") != "fixed":
            raise InvalidArgument(
                f"`{self.name}` holds bytes, not fixed-size records (create it with records=100)"
            )
        size, key = int(fmt["record_bytes"]), int(fmt["key_bytes"])
        wanted = list(columns) if columns is not None else ["key", "value"]
        unknown = sorted(set(wanted) - {"record", "key", "value"})
        if unknown:
            raise InvalidArgument(f"unknown columns {unknown}: record, key or value")
        data = self.numpy(policy=policy, written_order=written_order)
        n = len(data) // size
        rows = data[: n * size].reshape(n, size)
        arrays = []
        for c in wanted:
            if c == "record":
                arrays.append(
                    pa.FixedSizeBinaryArray.from_buffers(pa.binary(size), n, [None, pa.py_buffer(data)])
                )
            else:
                part = rows[:, :key] if c == "key" else rows[:, key:]
                width = part.shape[1]
                arrays.append(
                    pa.FixedSizeBinaryArray.from_buffers(
                        pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(part))]
                    )
                )
        return pa.table(arrays, names=wanted)

    def get(self, path: PathLike, policy: str = "gd", progress: Progress | None = None) -> Path:
        """Export to a local file, checked against the dataset's digest before it appears."""
        out = self.cluster._inner.get(self.name, path, policy=policy, progress_cb=progress)
        return Path(out["path"])

    def verify(self, progress: Progress | None = None) -> dict[str, Any]:
        """Check every copy's every block on the servers; `["clean"]` says whether all is well."""
        result: dict[str, Any] = self.cluster._inner.verify(self.name, progress_cb=progress)
        return result

    def scrub(self, progress: Progress | None = None) -> dict[str, Any]:
        """Check every copy's every block, and rewrite each bad one from a good copy:
        `["repaired"]`, `["unrepaired"]`, and `["clean"]` (every copy good now)."""
        result: dict[str, Any] = self.cluster._inner.scrub(self.name, progress_cb=progress)
        return result

    def complete(self) -> dict[str, Any]:
        """Fill every copy of a dataset written with a choice of copy."""
        result: dict[str, Any] = self.cluster._inner.complete(self.name)
        return result

    def repair(self) -> dict[str, Any]:
        """Restore full replication: servers down when it was written get their copies, and
        every copy is filled (what `complete` does)."""
        return self.complete()

    def rm(self) -> dict[str, Any]:
        result: dict[str, Any] = self.cluster._inner.rm(self.name)
        return result


Scan = _ganges.Scan


class DatasetFile(io.RawIOBase):
    """A dataset as a read-only, seekable binary file. Sequential reads stream through the
    ordered reader (with read-ahead); a seek starts a new one at the new place."""

    def __init__(
        self, dataset: Dataset, policy: str = "gd", buffer_blocks: int = 32, written_order: bool = False
    ):
        super().__init__()
        self._cluster = dataset.cluster._inner
        self.name = dataset.name
        self._policy = policy
        self._buffer_blocks = buffer_blocks
        self._written = written_order
        self._reader: _ganges.Reader | None = self._open_at(0)
        self.size = self._reader.length
        self._pos = 0

    def _open_at(self, offset: int) -> _ganges.Reader:
        return self._cluster.reader(
            self.name,
            offset=offset,
            policy=self._policy,
            buffer_blocks=self._buffer_blocks,
            written_order=self._written,
        )

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        pos = base + offset
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        if pos != self._pos:
            if self._reader is not None:
                self._reader.close()
            self._reader = None
            self._pos = pos
        return self._pos

    def _read(self, n: int) -> _ganges.Bytes | bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        n = min(n, self.size - self._pos)
        if n <= 0:
            return b""
        if self._reader is None:
            self._reader = self._open_at(self._pos)
        data = self._reader.read(n)
        self._pos += len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self.size - self._pos
        return bytes(self._read(size))

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._read(len(view))
        n = len(data)
        view[:n] = memoryview(data)
        return n

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        super().close()
