"""Idle palace workers let their vector index go; the palace still answers and takes writes.

Against the real daemon, forked workers and model, with ``[palace] idle_release_s`` made
short. Each worker says in the log when it released its index, which is how the test
knows the requests after it met a released index.

Covers: workers/palace.py workers/store/state.py
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import Daemon
from tests.engine.test_readers import wait_for_readers, workers_of
from trusty_memory.client.sync import Client

pytestmark = pytest.mark.slow

RELEASE_FAST = {"TRUSTY_MEMORY_PALACE_IDLE_RELEASE_S": "0.5"}
TEXTS = [
    "The staging database listens on port 5433.",
    "Deploys to production need two approvals.",
    "The nightly backup runs at 02:00 UTC.",
]


def logged(daemon: Daemon, event: str, palace: str) -> list[dict]:
    """The JSON log lines about ``palace`` whose event is ``event``, oldest first."""
    lines = []
    for line in (daemon.home / "daemon-test.log").read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event and entry.get("palace") == palace:
            lines.append(entry)
    return lines


def wait_released(daemon: Daemon, palace: str, pids: set[int]) -> None:
    """Wait until every worker in ``pids`` has logged a release of its index."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if pids <= {entry["pid"] for entry in logged(daemon, "index released", palace)}:
            return
        time.sleep(0.1)
    raise AssertionError(f"{palace}: no index release from {pids}: {daemon.log_tail()}")


def wait_all_released_again(daemon: Daemon, palace: str, loads: int, releases: int) -> None:
    """Wait until each index loaded since the counts ``loads`` / ``releases`` were taken
    has been released again (the log of a load does not say which worker loaded)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        loaded = len(logged(daemon, "index loaded", palace)) - loads
        if loaded and len(logged(daemon, "index released", palace)) - releases >= loaded:
            return
        time.sleep(0.1)
    raise AssertionError(f"{palace}: indexes loaded again were kept: {daemon.log_tail()}")


@pytest.fixture
def releasing(fresh_home):
    d = Daemon(fresh_home, extra_env=RELEASE_FAST).start()
    yield d
    d.stop()


def test_a_palace_that_released_its_index_answers_recall_and_takes_writes(releasing):
    with Client(releasing.config, autostart=False) as c:
        c.palace_create("idle")
        stored = [c.remember("idle", text).drawer_id for text in TEXTS]
        c.scale("idle", 1)
        wait_for_readers(c, "idle", 1)
        wait_released(releasing, "idle", {w["pid"] for w in workers_of(c, "idle")})

        loads = len(logged(releasing, "index loaded", "idle"))
        releases = len(logged(releasing, "index released", "idle"))
        for text, drawer_id in zip(TEXTS, stored, strict=True):
            [hit] = c.recall("idle", text, top_k=1).results
            assert hit.drawer_id == drawer_id
        wait_all_released_again(releasing, "idle", loads, releases)

        # A write to the released writer, then a read of it: stored, indexed, found.
        new = c.remember("idle", "The cache is flushed every Sunday night.", room="Ops")
        deep = c.recall("idle", "when is the cache flushed?", top_k=1, deep=True)
        assert [h.drawer_id for h in deep.results] == [new.drawer_id]
        info = c.palace_info("idle")
        assert info.drawer_count == info.index_count == 4
        c.scale("idle", 0)


def test_writes_made_while_the_index_was_released_survive_a_restart(fresh_home):
    d = Daemon(fresh_home, extra_env=RELEASE_FAST).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.palace_create("kept")
            c.remember("kept", TEXTS[0])
            [writer] = workers_of(c, "kept")
            wait_released(d, "kept", {writer["pid"]})
            new = c.remember("kept", TEXTS[1]).drawer_id  # committed; the index stays away
    finally:
        d.stop()
    loads_before = len(logged(d, "index loaded", "kept"))
    d = Daemon(fresh_home, extra_env=RELEASE_FAST).start()
    try:
        with Client(d.config, autostart=False) as c:
            [hit] = c.recall("kept", TEXTS[1], top_k=1).results
            assert hit.drawer_id == new
            info = c.palace_info("kept")
            assert info.drawer_count == info.index_count == 2
        # The write was in no snapshot: the restarted writer replayed it from the change log.
        [load] = logged(d, "index loaded", "kept")[loads_before:]
        assert load["replayed"] == 1
    finally:
        d.stop()
