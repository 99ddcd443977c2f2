"""Helpers the test modules (and scripts/dashboard-shot) share: a test that cannot run here
says why; how to start Debian's Chromium here."""

from __future__ import annotations

import importlib.util
import os

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
