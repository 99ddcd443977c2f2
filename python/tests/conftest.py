"""A real local cluster (the `ganges` binary's servers on loopback) for the whole session."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

import ganges

_names = itertools.count()


@pytest.fixture(scope="session")
def cluster() -> Iterator[ganges.Cluster]:
    with ganges.local_cluster(nodes=4) as c:
        yield c


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A dataset name of this test's own."""
    return f"{request.node.name.replace('[', '-').replace(']', '')}-{os.getpid()}-{next(_names)}"[:60]
