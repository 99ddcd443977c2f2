"""The live views, as users see them: `ganges dashboard` in headless Chromium (driven by
Playwright) and `ganges top` in a tmux terminal, both watching a real scan on a real local
cluster with the disk model."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import CHROMIUM, CHROMIUM_ARGS, has, need

import ganges

ARTIFACTS = Path(__file__).resolve().parents[2] / "target" / "test-artifacts"
BIN = os.environ.get("GANGES_BIN", "ganges")
MIB = 1 << 20
DISK_IS = "() => Number(document.querySelector('#server-2').dataset.disk) === %d"


@pytest.fixture(scope="module")
def modelled() -> Iterator[ganges.Cluster]:
    """Four servers with the disk model at 32 MiB/s, for this module alone (its faults would
    disturb other tests)."""
    with ganges.local_cluster(nodes=4, disk_rate="32MiB/s") as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scan_in_background(ds: ganges.Dataset, consumers: int, rounds: int) -> threading.Thread:
    """`rounds` scans one after another, each consumer a thread."""

    def consume(i: int) -> None:
        for _ in ds.scan(i, consumers):
            pass

    def scans() -> None:
        for _ in range(rounds):
            threads = [threading.Thread(target=consume, args=(i,)) for i in range(consumers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    t = threading.Thread(target=scans, daemon=True)
    t.start()
    return t


def test_the_dashboard_in_a_browser(modelled: ganges.Cluster, name: str) -> None:
    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is not installed (scripts/ensure-system-deps installs it)")
    need(has("playwright"), "playwright is not installed (scripts/ensure-python-deps installs it)")
    from playwright.sync_api import sync_playwright

    ds = modelled.create_dataset(name, fragment_size="48MiB")
    port = free_port()
    dash = subprocess.Popen(
        [BIN, "dashboard", "--cluster", modelled.path, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    scanning = scan_in_background(ds, 4, rounds=3)
    try:
        assert dash.stdout is not None
        assert f"http://127.0.0.1:{port}/" in dash.stdout.readline()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{port}/")
            for node in range(4):
                page.wait_for_selector(f"#server-{node}", timeout=5000)
            # The running scan: its four consumers, each with a bar and the ideal's mark.
            # (A consumer's first request may reach its server a frame after the others'.)
            # One scan shows all four (rounds of the same scan make more scans).
            scans = f'.scan[data-dataset="{name}"]'
            page.wait_for_selector(f"{scans} .consumer .ideal", timeout=10000)
            whole = (
                f"[...document.querySelectorAll('{scans}')]"
                ".some(s => s.querySelectorAll('.consumer').length === 4)"
            )
            page.wait_for_function(whole, timeout=10000)
            # Both charts drew.
            assert page.locator("#rate-chart canvas").count() == 1
            assert page.locator("#queue-chart canvas").count() == 1

            card = page.locator("#server-2")
            assert float(card.get_attribute("data-disk") or 0) == 32 * MIB
            clicked = time.monotonic()
            card.get_by_role("button", name="½ speed").click()
            page.wait_for_function(DISK_IS % (16 * MIB), timeout=2000)
            shown = time.monotonic() - clicked
            assert shown < 2.0, f"the fault showed after {shown:.2f} s"
            assert "rate x0.5" in card.inner_text()
            assert "node2: rate x0.5" in page.locator("#message").inner_text()
            # The slow server's served rate falls to its disk's (16.8 MB/s) while scans go on.
            page.wait_for_function(
                "() => { const r = Number(document.querySelector('#server-2').dataset.rate);"
                " return r > 1e6 && r < 20e6; }",
                timeout=5000,
            )
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            shot = os.environ.get("GANGES_DASHBOARD_SHOT")
            if shot:
                page.screenshot(path=shot, full_page=True)

            card.get_by_role("button", name="clear").click()
            page.wait_for_function(DISK_IS % (32 * MIB), timeout=2000)
            browser.close()
            assert errors == [], f"the page logged errors: {errors}"
    finally:
        scanning.join(timeout=120)
        modelled.fault_clear()
        dash.terminate()
        dash.wait(timeout=10)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def test_top_in_a_terminal(modelled: ganges.Cluster, name: str) -> None:
    need(shutil.which("tmux") is not None, "tmux is not installed (scripts/ensure-system-deps installs it)")
    ds = modelled.create_dataset(name, fragment_size="32MiB")
    modelled.fault_set(1, factor=0.5)
    session = f"ganges-top-{os.getpid()}"
    command = f"{BIN} top --cluster {modelled.path}; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "130", "-y", "40", command], check=True)
    scanning = scan_in_background(ds, 4, rounds=2)
    try:
        deadline = time.monotonic() + 15
        screen = ""
        wanted = [f"{name}: 4 consumers", "ideal", "rate x0.5"] + [f"node{n}" for n in range(4)]
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session)
            if all(w in screen for w in wanted):
                break
            time.sleep(0.2)
        missing = [w for w in wanted if w not in screen]
        assert not missing, f"{missing} not on the screen:\n{screen}"
        # Under the scan's line, four consumer bars, each with its share read and the share
        # from backups.
        lines = screen.splitlines()
        at = next(i for i, line in enumerate(lines) if f"{name}: 4 consumers" in line)
        bars = [line for line in lines[at + 1 : at + 5] if re.search(r"\d+% +\d+% backup", line)]
        assert len(bars) == 4, screen
        (ARTIFACTS).mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "top.txt").write_text(screen)
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "ganges top" in tmux("capture-pane", "-p", "-t", session):
            time.sleep(0.1)
        assert "ganges top" not in tmux("capture-pane", "-p", "-t", session), "q did not quit"
    finally:
        tmux("kill-session", "-t", session)
        scanning.join(timeout=120)
        modelled.fault_clear()


def test_top_needs_a_terminal(modelled: ganges.Cluster) -> None:
    # Run with its output captured: not a terminal.
    out = subprocess.run([BIN, "top", "--cluster", modelled.path], capture_output=True, text=True)
    assert out.returncode != 0
    assert "ganges dashboard" in out.stderr
