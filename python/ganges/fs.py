"""`ganges://NAME` for fsspec, and so for pandas, pyarrow, dask and polars.

Registered by entry point: `pandas.read_parquet("ganges://events.parquet")` works without
importing ganges. The cluster is the one `storage_options={"cluster": PATH}` names, else
$GANGES_CLUSTER, else the local cluster's. Datasets form one flat namespace (no folders).

Reads go through ganges's random-access reader (each range from the copy the read policy
picks, many ranges at once for `cat_ranges`); files opened for writing are written as one
dataset when closed, all or nothing.
"""

from __future__ import annotations

import os
from typing import Any

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import Cluster, DatasetNotFound, _ganges, connect


class GangesFileSystem(AbstractFileSystem):  # type: ignore[misc]
    protocol = "ganges"
    root_marker = ""

    def __init__(
        self, cluster: str | None = None, policy: str = "gd", replicas: int = 2, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.policy = policy
        self.replicas = replicas
        self._cluster_path = cluster
        self._cluster: Cluster | None = None
        self._pid = -1

    @property
    def cluster(self) -> Cluster:
        # Connected per process: fsspec instances are cached and cross forks (dask workers).
        if self._cluster is None or self._pid != os.getpid():
            self._cluster = connect(self._cluster_path)
            self._pid = os.getpid()
        return self._cluster

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("ganges://"):
            path = path[len("ganges://") :]
        return path.strip("/")

    def _entry(self, name: str, size: int) -> dict[str, Any]:
        return {"name": name, "size": size, "type": "file"}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        if path:
            entries = [self.info(path)]
        else:
            listed = self.cluster._inner.ls()["datasets"]
            entries = [self._entry(d["name"], int(d["total_bytes"])) for d in listed]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        name = self._strip_protocol(path)
        if not name:
            return {"name": "", "size": 0, "type": "directory"}
        try:
            manifest = self.cluster._inner.info(name)["manifest"]
        except DatasetNotFound as e:
            raise FileNotFoundError(name) from e
        return self._entry(name, int(sum(manifest["shape"]["fragment_bytes"])))

    def exists(self, path: str, **kwargs: Any) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = "default",
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> GangesFile:
        return GangesFile(
            self,
            self._strip_protocol(path),
            mode,
            block_size=block_size,
            autocommit=autocommit,
            cache_options=cache_options,
            **kwargs,
        )

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        return self.cat_ranges([path], [start], [end])[0]  # type: ignore[no-any-return]

    def cat_ranges(
        self,
        paths: list[str],
        starts: list[int | None] | int | None,
        ends: list[int | None] | int | None,
        max_gap: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        """Every range of a dataset read at once, from the copies the read policy picks."""
        n = len(paths)
        starts_l = starts if isinstance(starts, list) else [starts] * n
        ends_l = ends if isinstance(ends, list) else [ends] * n
        out: list[Any] = [b""] * n
        by_name: dict[str, list[int]] = {}
        for i, p in enumerate(paths):
            by_name.setdefault(self._strip_protocol(p), []).append(i)
        for name, idx in by_name.items():
            try:
                size = self.info(name)["size"]
                ranges = []
                for i in idx:
                    start, end = starts_l[i], ends_l[i]
                    s: int = start or 0
                    e: int = size if end is None else end
                    s, e = (s + size if s < 0 else s), (e + size if e < 0 else e)
                    s, e = min(max(s, 0), size), min(max(e, 0), size)
                    ranges.append((s, max(e - s, 0)))
                reader = self.cluster._inner.random_reader(name, self.policy)
                try:
                    for i, data in zip(idx, reader.read_many(ranges), strict=True):
                        out[i] = bytes(data)
                finally:
                    reader.close()
            except Exception as e:
                if on_error == "raise":
                    raise
                for i in idx:
                    out[i] = e
        return out

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        self.cluster.put(self._strip_protocol(rpath), lpath, replicas=self.replicas)

    def get_file(
        self, rpath: str, lpath: str, callback: Any = None, outfile: Any = None, **kwargs: Any
    ) -> None:
        if outfile is not None:
            super().get_file(rpath, lpath, callback=callback, outfile=outfile, **kwargs)
            return
        self.cluster.dataset(self._strip_protocol(rpath)).get(lpath, policy=self.policy)

    def rm_file(self, path: str) -> None:
        self.cluster._inner.rm(self._strip_protocol(path))

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        for p in path if isinstance(path, list) else [path]:
            self.rm_file(p)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        pass  # one flat namespace: nothing to make

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass


class GangesFile(AbstractBufferedFile):  # type: ignore[misc]
    """Reads fetch ranges through the random-access reader (fsspec's cache adds read-ahead);
    writes gather the parts and commit one dataset at close."""

    def __init__(self, fs: GangesFileSystem, path: str, mode: str, *args: Any, **kwargs: Any) -> None:
        if mode not in ("rb", "wb"):
            raise ValueError(f"mode {mode!r}: ganges datasets open as 'rb' or 'wb'")
        self._random: _ganges.RandomReader | None = None
        self._parts: list[bytes] = []
        super().__init__(fs, path, mode, *args, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        if self._random is None:
            self._random = self.fs.cluster._inner.random_reader(self.path, self.fs.policy)
        return bytes(self._random.read(start, end - start))

    def _initiate_upload(self) -> None:
        self._parts = []

    def _upload_chunk(self, final: bool = False) -> bool:
        self._parts.append(self.buffer.getvalue())
        if final:
            parts = [p for p in self._parts if p]
            if not parts:
                raise ValueError(f"{self.path}: a dataset holds at least one byte")
            replicas = min(self.fs.replicas, self.fs.cluster.nodes)
            self.fs.cluster.write(self.path, parts, writers=1, policy="static", replicas=replicas)
            self._parts = []
        return True

    def close(self) -> None:
        super().close()
        if self._random is not None:
            self._random.close()
            self._random = None
