"""What every benchmark needs: a real daemon in a throw-away home, corpora, percentiles.

Benchmarks run the product as users do (a real ``trusty-memory daemon`` with its worker
processes and the real model), so their figures include every hop. Percentiles come from
one run each; this machine is shared and noisy, so compare figures taken in the same run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from trusty_memory.client.autostart import daemon_pid, ping
from trusty_memory.client.sync import Client
from trusty_memory.common.config import Config, load_config

TOPICS = [
    "database migrations", "the login page", "flaky integration tests", "deployment to staging",
    "the billing service", "API rate limits", "caching strategy", "the search index",
    "on-call rotation", "release notes", "memory leaks", "TLS certificates",
]  # fmt: skip


def sentence(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"Note {i}: we discussed {topic} and decided to revisit item {i * 7 % 1000} next sprint."


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(ms: list[float]) -> dict:
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 0.50), 3),
        "p99_ms": round(pct(ms, 0.99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


@contextlib.contextmanager
def running_daemon(env: dict[str, str] | None = None) -> Iterator[Config]:
    """Start a daemon in a temp home (exported as TRUSTY_MEMORY_HOME); stop it after."""
    home = Path(tempfile.mkdtemp(prefix="tmb-", dir="/tmp"))
    os.environ["TRUSTY_MEMORY_HOME"] = str(home)
    os.environ.update(env or {})
    config = load_config()
    try:
        with daemon_process(config):
            yield config
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def daemon_process(config: Config, env: dict[str, str] | None = None) -> Iterator[None]:
    """Start the daemon of ``config``'s home (``env``: its whole environment, or ours);
    return once it answers, stop it after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.broker"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        while not ping(config, 0.5):
            if proc.poll() is not None:
                raise RuntimeError("daemon exited at start")
            time.sleep(0.05)
        yield
    finally:
        pid = daemon_pid(config)
        if pid:
            os.kill(pid, signal.SIGTERM)
        proc.wait(timeout=60)


def fill(config: Config, palace: str, n: int, clients: int = 16) -> float:
    """Store ``n`` drawers with ``clients`` concurrent writers; returns drawers per second."""

    def work(start: int) -> None:
        with Client(config, autostart=False) as c:
            for i in range(start, n, clients):
                room = "Backend" if i % 3 else "Planning"
                c.remember(palace, sentence(i), room=room, tags=[f"t{i % 5}"])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n / (time.monotonic() - t0)


def worker_pids(status: dict, service: str, *, prefix: bool = False) -> list[int]:
    """Pids of the workers of a service in a daemon ``status`` (of every service whose name
    starts with ``service`` when ``prefix``)."""
    return [
        int(w["pid"])
        for s in status["services"]
        if (s["name"].startswith(service) if prefix else s["name"] == service)
        for w in s["workers"]
    ]


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS:") / 1024


def pss_mb(pid: int) -> float:
    """Proportional set size: shared library pages split among the processes sharing them."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0
