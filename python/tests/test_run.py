"""River's query primitives from Python (`Cluster.run`) against what the data holds."""

from __future__ import annotations

import pytest

import ganges


def test_sort_filter_topn_and_join_give_what_the_records_hold(cluster: ganges.Cluster, name: str) -> None:
    ds = cluster.create_dataset(name, size="4MB", fragments=4, records=100)
    keys = sorted(ds.read_arrow(columns=["key"]).column("key").to_pylist())

    r = cluster.run("sort", name, f"{name}-s", check=True)
    assert r["summary"]["records"] == len(keys) == r["input"]["records"] and r["sorted"]
    check = cluster.run("check", f"{name}-s")
    assert check["sorted"] and check["checksum"] == r["input"]["checksum"]
    sorted_ds = cluster.dataset(f"{name}-s")
    assert sorted_ds.read_arrow(columns=["key"]).column("key").to_pylist() == keys, "in written order"
    stored = sorted_ds.read_arrow(columns=["key"], written_order=False).column("key").to_pylist()
    assert sorted(stored) == keys, "the same records, as the servers hold them"

    top = cluster.run("topn", name, f"{name}-t", n=7, robust=False)["top"]
    assert [bytes(t[:10]) for t in top] == keys[:7]
    more = cluster.run("topn", name, f"{name}-t", n=5, after=7)["top"]
    assert [bytes(t[:10]) for t in more] == keys[7:12], "the merge continued from the runs"

    kept = cluster.run("filter", name, f"{name}-f", keep=0.25)
    below = sum(1 for k in keys if int.from_bytes(k[:8], "big") < 0.25 * 2**64)
    assert kept["summary"]["records"] == below

    pairs = cluster.run("join", name, name, f"{name}-j", key_bytes=8)
    assert pairs["summary"]["records"] >= len(keys)  # every record meets itself
    assert cluster.run("scan", name)["summary"]["records"] == len(keys)
    for out in ("s", "t", "f", "j"):
        cluster.dataset(f"{name}-{out}").rm()


def test_a_wrong_primitive_or_dataset_count_is_refused(cluster: ganges.Cluster, name: str) -> None:
    with pytest.raises(ganges.InvalidArgument, match="one of scan"):
        cluster.run("shuffle", name)
    with pytest.raises(ganges.InvalidArgument, match="takes 2"):
        cluster.run("sort", name)
    with pytest.raises(ganges.InvalidArgument, match="records="):
        cluster.run("generate", name)
    with pytest.raises(ganges.DatasetNotFound):
        cluster.run("scan", "no-such-dataset")
