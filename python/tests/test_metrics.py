"""Every server's /metrics, parsed by Prometheus's own text-format parser, adds up to what a
known scan read."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

import ganges

parser = pytest.importorskip(
    "prometheus_client.parser", reason="prometheus_client is in the test requirements"
)


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """{sample name: [(labels, value)]} of one scrape."""
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(samples: list[tuple[dict[str, str], float]], **labels: str) -> float:
    return sum(v for ls, v in samples if all(ls.get(k) == w for k, w in labels.items()))


@pytest.fixture(scope="module")
def cluster() -> Iterator[ganges.Cluster]:
    with ganges.local_cluster(nodes=4, disk_rate="256MiB/s", metrics=True) as c:
        yield c


def test_served_bytes_add_up_to_the_scans(cluster: ganges.Cluster) -> None:
    urls = cluster.metrics_urls()
    assert all(urls), urls
    ds = cluster.create_dataset("m", size="16MiB", replicas=2, block_size="256KiB")
    before = [scrape(u) for u in urls if u]
    # static reads every byte once from its primary copy.
    streams = []
    for c in range(4):
        scan = ds.scan(consumer=c, policy="static")
        assert sum(len(b) for b in scan) == 4 << 20
        streams.append(scan)
    after = [scrape(u) for u in urls if u]
    served = sum(
        total(a["ganges_served_bytes_total"], copy="primary")
        - total(b["ganges_served_bytes_total"], copy="primary")
        for a, b in zip(after, before, strict=True)
    )
    assert served == 16 << 20
    assert all(
        total(a["ganges_served_bytes_total"], copy="backup")
        == total(b["ganges_served_bytes_total"], copy="backup")
        for a, b in zip(after, before, strict=True)
    )
    # Per consumer: four streams, 4 MiB each, summed over the servers.
    per: dict[str, float] = {}
    for a in after:
        for labels, v in a["ganges_consumer_served_bytes_total"]:
            per[labels["consumer"]] = per.get(labels["consumer"], 0) + v
    assert sorted(v for v in per.values() if v) == [4 << 20] * 4
    # The latency histogram counted every read, and is cumulative.
    for a in after:
        buckets = [
            v for _, v in sorted(a["ganges_read_latency_seconds_bucket"], key=lambda s: float(s[0]["le"]))
        ]
        assert buckets == sorted(buckets)
        assert buckets[-1] == total(a["ganges_read_latency_seconds_count"]) == total(a["ganges_reads_total"])
    info = after[0]["ganges_server_info"][0][0]
    assert info["node"] == "0" and info["disk_model"] == "true"


def test_a_fault_shows_in_the_metrics(cluster: ganges.Cluster) -> None:
    url = cluster.metrics_urls()[2]
    assert url
    cluster.fault_set(2, factor=0.25)
    assert total(scrape(url)["ganges_disk_model_fault_fraction"]) == 0.25
    cluster.fault_clear()
    assert total(scrape(url)["ganges_disk_model_fault_fraction"]) == 1.0


def test_only_get_metrics_is_served(cluster: ganges.Cluster) -> None:
    url = cluster.metrics_urls()[0]
    assert url
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/secrets"), timeout=5)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=5)
    assert e.value.code == 405


def test_a_client_serves_its_own_metrics(cluster: ganges.Cluster) -> None:
    """A long-running client's metrics: what this process's consumers got, by copy."""
    url = f"http://{ganges.serve_metrics()}/metrics"
    ds = cluster.create_dataset("client-m", size="8MiB", replicas=2, block_size="256KiB")
    before = scrape(url)
    cluster.fault_set(1, factor=0.25)
    try:
        got = sum(len(b) for c in range(4) for b in ds.scan(consumer=c, policy="gd"))
    finally:
        cluster.fault_clear()
    after = scrape(url)
    assert got == 8 << 20

    def delta(name: str, **labels: str) -> float:
        return total(after[name], **labels) - total(before[name], **labels)

    read = delta("ganges_client_read_bytes_total")
    assert read == 8 << 20, "every byte delivered once, primaries and backups together"
    assert delta("ganges_client_read_bytes_total", copy="backup") > 0, "gd reads round the slow disk"
    assert delta("ganges_client_read_blocks_total") == 32
    assert delta("ganges_client_stream_events_total", kind="request") >= 32
    assert total(after["ganges_client_streams"]) == 0, "every scan closed"
    assert ganges.client_metrics().startswith("# HELP ganges_client_read_bytes_total")
