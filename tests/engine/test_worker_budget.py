"""A budget of palace worker processes (``[broker] max_workers``): a home of thousands of
palaces cannot start thousands of processes. Past the budget the least recently used idle
palace stops first; only when every palace is busy does a request get "busy".

Covers: broker/broker.py
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.conftest import Daemon, wait_until
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p

pytestmark = pytest.mark.slow


def awake(client: Client) -> set[str]:
    """Palaces with a worker registered."""
    return {
        s["name"].removeprefix("palace:")
        for s in client.status()["services"]
        if s["name"].startswith("palace:") and s["workers"]
    }


def test_past_the_budget_the_least_recently_used_idle_palace_stops(fresh_home):
    d = Daemon(fresh_home, extra_env={"TRUSTY_MEMORY_BROKER_MAX_WORKERS": "2"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            assert c.status()["max_workers"] == 2
            ids = {}
            for name in ("one", "two", "three", "four"):
                c.palace_create(name)
                ids[name] = c.remember(name, f"a note kept in palace {name}").drawer_id
                assert c.status()["palace_processes"] <= 2
            wait_until(lambda: awake(c) == {"three", "four"}, 30, "the two newest to be awake")
            # The oldest wakes on its next request, and its note is there.
            assert [h.drawer_id for h in c.recall("one", "note kept", 1).results] == [ids["one"]]
            wait_until(lambda: awake(c) == {"four", "one"}, 30, "'three' to make room")
            assert c.status()["palace_processes"] <= 2
    finally:
        d.stop()


def test_when_every_palace_is_busy_a_new_one_gets_a_clear_busy_error(fresh_home):
    d = Daemon(fresh_home, extra_env={"TRUSTY_MEMORY_BROKER_MAX_WORKERS": "1"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.palace_create("busy")
            c.palace_create("other")
            c.remember("busy", "wakes the writer")
        rows = [
            {"drawer_id": str(uuid.uuid4()), "content": f"bulk note {i} about topic {i % 17}"}
            for i in range(1500)
        ]
        done = threading.Event()

        def hold_the_palace() -> None:  # a large import keeps 'busy' busy for seconds
            with Client(d.config, autostart=False) as bulk:
                bulk.call("palace_import", {"drawers": rows}, palace="busy", timeout=120)
            done.set()

        worker = threading.Thread(target=hold_the_palace, daemon=True)
        worker.start()
        with Client(d.config, autostart=False) as c:
            wait_until(
                lambda: any(
                    s["name"] == "palace:busy" and any(w["inflight"] for w in s["workers"])
                    for s in c.status()["services"]
                ),
                30,
                "the import to be in flight",
                interval=0.02,
            )
            started = time.monotonic()
            with pytest.raises(p.TrustyError) as caught:
                c.remember("other", "no room for this palace right now")
            assert time.monotonic() - started < 5
            assert caught.value.code == p.ErrorCode.OVERLOADED
            assert "max_workers" in caught.value.message and "busy" in caught.value.message
            worker.join(120)
            assert done.is_set()
            # Once it is idle, 'other' gets the room.
            c.remember("other", "room again")
            assert awake(c) == {"other"}
    finally:
        d.stop()
