"""Types of the Rust extension module (crates/ganges-py); use the `ganges` package instead."""

from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any, Self

import numpy.typing as npt

__version__: str

Size = int | str
RateLike = float | str
DurLike = float | str
Progress = Callable[[int], object]
Json = Any

class Bytes:
    """A read-only buffer over bytes held by Rust (the buffer protocol, no copy)."""

    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int) -> memoryview: ...
    def to_bytes(self) -> bytes: ...

class Block:
    offset: int
    node: int
    @property
    def data(self) -> Bytes: ...
    def __len__(self) -> int: ...
    def numpy(self, dtype: str = "uint8") -> npt.NDArray[Any]: ...

class Scan:
    def __iter__(self) -> Self: ...
    def __next__(self) -> Block: ...
    @property
    def partition(self) -> tuple[int, int]: ...
    def report(self) -> Json: ...
    def close(self) -> None: ...

class Reader:
    offset: int
    length: int
    def read(self, max: int) -> Bytes: ...
    def close(self) -> Json | None: ...

class RandomReader:
    size: int
    def read(self, offset: int, length: int) -> Bytes: ...
    def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[Bytes]: ...
    def close(self) -> Json | None: ...

class Cluster:
    @staticmethod
    def connect(path: str | PathLike[str] | None = None) -> Cluster: ...
    @staticmethod
    def start_local(
        nodes: int,
        root: str | PathLike[str],
        binary: str | PathLike[str],
        disk_rate: RateLike | None = None,
        seek: DurLike | None = None,
        direct_io: bool = False,
        secret: bool = False,
        metrics: bool = False,
    ) -> Cluster: ...
    @staticmethod
    def part_time(
        path: str | PathLike[str],
        node: int,
        data_dir: str | PathLike[str] | None = None,
        wait_for: DurLike | None = None,
        disk_rate: RateLike | None = None,
        seek: DurLike | None = None,
    ) -> Cluster: ...
    def stop(self) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def nodes(self) -> int: ...
    @property
    def local_traffic(self) -> tuple[int, int] | None: ...
    def server_pids(self) -> list[int | None]: ...
    def kill(self, node: int) -> None: ...
    def restart(self, node: int) -> None: ...
    def create(
        self,
        name: str,
        size: Size | None = None,
        fragment_size: Size | None = None,
        fragments: int | None = None,
        replicas: int = 2,
        block_size: Size | None = None,
        records: bool = False,
        seed: int = 1,
        layout: str = "chained",
        progress_cb: Progress | None = None,
    ) -> Json: ...
    def put(
        self,
        name: str,
        path: str | PathLike[str],
        fragments: int | None = None,
        replicas: int = 2,
        block_size: Size | None = None,
        progress_cb: Progress | None = None,
    ) -> Json: ...
    def get(
        self, name: str, path: str | PathLike[str], policy: str = "gd", progress_cb: Progress | None = None
    ) -> Json: ...
    def ls(self, staging: bool = False) -> Json: ...
    def info(self, name: str) -> Json: ...
    def verify(self, name: str, progress_cb: Progress | None = None) -> Json: ...
    def scrub(self, name: str, progress_cb: Progress | None = None) -> Json: ...
    def rm(self, name: str) -> Json: ...
    def complete(self, name: str) -> Json: ...
    def write(
        self,
        name: str,
        source: str | PathLike[str] | Sequence[Any] | None = None,
        size: Size | None = None,
        writers: int | None = None,
        policy: str = "gd",
        replicas: int | None = None,
        block_size: Size | None = None,
        complete: bool = True,
        seed: int = 1,
        window: int | None = None,
        progress_cb: Progress | None = None,
    ) -> Json: ...
    def fault_set(
        self,
        nodes: Sequence[int],
        factor: float | None = None,
        competing_share: float | None = None,
        kernel_read_rate: RateLike | None = None,
        kernel_write_rate: RateLike | None = None,
        competing_reader: float | None = None,
        link_rate: RateLike | None = None,
        link_delay: DurLike | None = None,
    ) -> Json: ...
    def fault_clear(self, nodes: Sequence[int] | None = None) -> None: ...
    def stats(self) -> Json: ...
    def ideal_seconds(self, name: str, consumers: int | None = None) -> float | None: ...
    def scan(
        self,
        name: str,
        consumer: int = 0,
        consumers: int | None = None,
        policy: str = "gd",
        window: int | None = None,
    ) -> Scan: ...
    def reader(
        self,
        name: str,
        offset: int = 0,
        length: int | None = None,
        policy: str = "gd",
        buffer_blocks: int = 32,
        written_order: bool = False,
    ) -> Reader: ...
    def random_reader(self, name: str, policy: str = "gd") -> RandomReader: ...
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
    ) -> Json: ...

def launcher_rank() -> tuple[int, int] | None: ...
def serve_metrics(addr: str = "127.0.0.1:0") -> str: ...
def client_metrics() -> str: ...
def array_write_part(
    cluster: Cluster,
    name: str,
    chunk: Any,
    rank: int,
    shape: Sequence[int],
    dtype: str,
    memory_mesh: Sequence[int] | None = None,
    memory_dist: Sequence[str] | None = None,
    disk_mesh: Sequence[int] | None = None,
    disk_dist: Sequence[str] | None = None,
    alloc: str = "dynamic",
    replicas: int = 1,
    subchunk: Size | None = None,
    call: int = 0,
) -> Json | None: ...
def array_write(
    cluster: Cluster,
    name: str,
    data: Any,
    shape: Sequence[int],
    dtype: str,
    disk_mesh: Sequence[int] | None = None,
    disk_dist: Sequence[str] | None = None,
    alloc: str = "dynamic",
    replicas: int = 1,
    subchunk: Size | None = None,
) -> Json: ...
def array_read(
    cluster: Cluster,
    name: str,
    memory_mesh: Sequence[int] | None = None,
    memory_dist: Sequence[str] | None = None,
    rank: int = 0,
    policy: str = "gd",
) -> tuple[Bytes, list[int], str]: ...
def array_export_zarr(cluster: Cluster, name: str, dir: str | PathLike[str]) -> Json: ...

class GangesError(Exception): ...
class ClusterUnreachable(GangesError): ...
class AuthenticationError(GangesError): ...
class DatasetNotFound(GangesError): ...
class DatasetExists(GangesError): ...
class ChecksumError(GangesError): ...
class DiskFull(GangesError): ...
class InvalidArgument(GangesError): ...
class ClusterFileError(GangesError): ...
class LocalClusterError(GangesError): ...
class ServerError(GangesError): ...
class ProtocolError(GangesError): ...
class LocalIOError(GangesError): ...
