"""Helpers the test modules (and scripts/dashboard-shot) share: a test that cannot run here
says why; a cluster file for part-time I/O nodes; how to start Debian's Chromium here."""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

import pytest


def need(ok: bool, why: str) -> None:
    """Skip, saying why, unless `ok` (with GANGES_NO_SKIP=1, fail instead)."""
    if ok:
        return
    if os.environ.get("GANGES_NO_SKIP") == "1":
        pytest.fail(f"cannot run here: {why} (GANGES_NO_SKIP=1)")
    pytest.skip(why)


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def loopback_cluster_file(dir: Path, nodes: int) -> Path:
    """A cluster file of `nodes` loopback addresses free a moment ago, for processes that
    each serve one node (part-time I/O nodes)."""
    ports = []
    for _ in range(nodes):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    path = dir / "cluster.toml"
    servers = (f'[[server]]\nnode = {k}\naddr = "127.0.0.1:{p}"\n' for k, p in enumerate(ports))
    path.write_text("\n".join(servers))
    return path


CHROMIUM = "/usr/bin/chromium"
# As root and on a closed network Chromium needs these: no sandbox, and none of its own
# background connections (each refused one is logged).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
