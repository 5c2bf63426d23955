"""The dreamer starts after the first answer from a palace, not beside the embedder (issue
40, item 9).

On a cold start (an agent's first ``serve`` with no daemon running) the first search waits
for the embedder's model load and the MCP host's SDK import; on two cores the dreamer's own
interpreter start took CPU from both. The daemon now holds the dreamer back until a palace
worker is ready with nothing left to answer, or ``DREAMER_START_S`` at the latest, and it
still runs: a real daemon, its log read for the order of the events.

Covers: broker/broker.py
"""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from tests.conftest import Daemon, _short_tmp, wait_until
from trusty_memory.broker.broker import DREAMER_START_S
from trusty_memory.client.sync import Client

pytestmark = pytest.mark.slow


def _events(daemon: Daemon) -> list[dict]:
    out = []
    for line in (daemon.home / "daemon-test.log").read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _at(event: dict) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def test_the_dreamer_starts_after_the_first_answer_from_a_palace():
    daemon = Daemon(_short_tmp("tmd-")).start()
    try:
        client = Client(daemon.config, autostart=False)
        client.palace_create("first")
        client.remember("first", "the first note of the day")
        pid = wait_until(lambda: client.status()["dreamer_pid"], 60, "the dreamer")
        events = _events(daemon)
        started = next(e for e in events if e["event"] == "daemon started")
        spawned = next(
            e for e in events if e["event"] == "spawned" and e.get("service") == "dreamer"
        )
        ready = [
            e for e in events if e["event"] == "worker ready" and e.get("service") == "palace:first"
        ]
        # After the palace's READY (its first answer then follows), or (a machine so loaded
        # that the model took longer) once DREAMER_START_S had passed: never at the start.
        assert (ready and _at(spawned) >= _at(ready[0])) or (
            _at(spawned) - _at(started) >= DREAMER_START_S - 0.1
        ), (spawned, ready, started)
        assert spawned["child_pid"] == pid
        os.kill(pid, 0)  # alive
    finally:
        daemon.stop()
