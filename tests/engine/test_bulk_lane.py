"""The embedder's bulk lane (``embed_bulk``), against the real daemon and model: the same
vectors as ``embed``, from a process of its own that runs niced, starts on first use,
stops when idle and comes back on the next bulk call; and ``mine`` stores vectors that
recall finds, with a redacted drawer embedded again from its redacted text.

Covers: workers/embedder/worker.py broker/broker.py client/capture/mine.py
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.capture.claude_code import transcript, write_transcript
from tests.conftest import Daemon, _short_tmp, run_cli, wait_until
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.messages import EmbedResult

TEXTS = ["the staging database listens on port 5433", "Alice owns the billing service"]


@pytest.fixture(scope="module")
def lane():
    home = _short_tmp("tmbl-")
    d = Daemon(home, {"TRUSTY_MEMORY_EMBEDDER_BULK_IDLE_STOP_S": "2"}).start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def _vectors(client: Client, method: str) -> np.ndarray:
    result = p.convert(client.call(method, {"texts": TEXTS}, timeout=180), EmbedResult)
    return np.frombuffer(result.vectors, dtype=np.float32).reshape(len(TEXTS), result.dim)


def _bulk_pids(client: Client) -> list[int]:
    services = {s["name"]: s for s in client.status()["services"]}
    bulk = services.get(p.EMBEDDER_BULK_SERVICE, {"workers": []})
    return [w["pid"] for w in bulk["workers"]]


def test_bulk_lane_gives_the_interactive_vectors_from_a_niced_process(lane):
    with Client(lane.config, autostart=False) as c:
        assert np.allclose(_vectors(c, "embed_bulk"), _vectors(c, "embed"), atol=1e-6)
        (bulk,) = _bulk_pids(c)
        services = {s["name"]: s for s in c.status()["services"]}
        (interactive,) = [w["pid"] for w in services[p.EMBEDDER_SERVICE]["workers"]]
        assert bulk != interactive
        daemon_nice = os.getpriority(os.PRIO_PROCESS, lane.pid())
        assert os.getpriority(os.PRIO_PROCESS, bulk) == min(19, daemon_nice + 10)
        assert os.getpriority(os.PRIO_PROCESS, interactive) == daemon_nice


def test_the_idle_bulk_embedder_stops_and_comes_back(lane):
    with Client(lane.config, autostart=False) as c:
        _vectors(c, "embed_bulk")
        (first,) = _bulk_pids(c)
        wait_until(lambda: not _bulk_pids(c), 30, "the idle bulk embedder to stop")
        wait_until(lambda: not os.path.exists(f"/proc/{first}"), 30, "its process to exit")
        assert _vectors(c, "embed_bulk").shape == (2, 384)  # started again on demand
        (second,) = _bulk_pids(c)
        assert second != first
        assert "embedder-bulk#0" in c.status()["restarts"]


def test_mined_vectors_are_found_and_a_redacted_drawer_is_embedded_again(lane):
    secret = "sk-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"  # an OpenAI-shaped key
    qa = [
        ("Which port does the staging database use?", "It listens on port 5433."),
        (f"Keep this key: {secret}", "Stored the API key for the deploy job."),
    ]
    path = write_transcript(lane.home / "t" / "s1.jsonl", transcript("s1", "/w/app", qa))
    done = run_cli(lane, "mine", "mined", str(path), "--json")
    assert done.returncode == 0, done.stderr
    with Client(lane.config, autostart=False) as c:
        hits = c.recall("mined", "staging database port", top_k=1).results
        assert "5433" in hits[0].content
        drawers = c.call("palace_export", {}, palace="mined")["drawers"]
    (kept,) = [d for d in drawers if "deploy job" in d["content"]]
    assert secret not in kept["content"]
    with Client(lane.config, autostart=False) as c:
        own = p.convert(c.call("embed", {"texts": [kept["content"]]}), EmbedResult)
    # The drawer's own vector (``vector`` is a context mix when it continues the first).
    stored = np.frombuffer(kept["own_vector"] or kept["vector"], dtype=np.float32)
    assert np.allclose(stored, np.frombuffer(own.vectors, dtype=np.float32), atol=1e-5)
