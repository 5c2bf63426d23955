"""A long-running daemon must not keep the memory of its biggest moment.

Covers: workers/embedder/worker.py
"""

from __future__ import annotations

import time

from tests.engine.test_faults import worker_pid
from trusty_memory.client.sync import Client


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_the_embedder_gives_back_a_big_batchs_memory_once_idle(daemon):
    # 64 texts of 256 tokens need about 600 MB of scratch space in one forward pass. ONNX
    # Runtime's arena (off in workers/embedder/compiled_model.py) would keep all of it for
    # good; glibc keeps freed pages until the worker's idle hook hands them back.
    with Client(daemon.config, autostart=False) as client:
        client.call("embed", {"texts": ["warm"]})
        pid = worker_pid(client, "embedder")
        time.sleep(2.5)
        before = rss_mb(pid)
        client.call("embed", {"texts": [f"{i} " + "word " * 300 for i in range(64)]}, timeout=120)
        deadline = time.monotonic() + 15
        while rss_mb(pid) > before + 60 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert rss_mb(pid) <= before + 60, (before, rss_mb(pid))
