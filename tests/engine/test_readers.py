"""One writer plus N readers per palace, against the real daemon, workers and model.

The readers here are made to lag on purpose (``reader_refresh_s`` of an hour): they catch
up only when a request's ``min_seq`` demands it, so read-your-writes is tested, not
granted by a reader that happens to be current.

Covers: workers/reader.py broker/reader_scaling.py broker/broker.py broker/palaces.py
    broker/records.py broker/status_report.py
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.conftest import Daemon
from trusty_memory.client.sync import Client
from trusty_memory.common.protocol import TrustyError

pytestmark = pytest.mark.slow

LAGGING = {"TRUSTY_MEMORY_PALACE_READER_REFRESH_S": "3600"}


def workers_of(client: Client, palace: str) -> list[dict]:
    for s in client.status()["services"]:
        if s["name"] == f"palace:{palace}":
            return s["workers"]
    return []


def wait_for_readers(client: Client, palace: str, n: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        readers = [w for w in workers_of(client, palace) if w["role"] == "reader"]
        if len(readers) == n:
            return readers
        time.sleep(0.1)
    raise AssertionError(f"{palace}: wanted {n} readers, have {workers_of(client, palace)}")


@pytest.fixture
def lagging(fresh_home):
    d = Daemon(fresh_home, extra_env=LAGGING).start()
    yield d
    d.stop()


def test_a_session_always_reads_its_own_write_through_lagging_readers(lagging):
    with Client(lagging.config, autostart=False) as me, Client(lagging.config) as other:
        me.palace_create("ryw")
        me.remember("ryw", "warm up the writer and the embedder")
        assert me.scale("ryw", 2)["readers"] == 2
        wait_for_readers(me, "ryw", 2)
        misses = []
        for i in range(1000):
            text = f"deploy {i} of service-{i % 13} went out on runner r{i}"
            stored = me.remember("ryw", text)
            hits = me.recall("ryw", text, top_k=1).results
            if not hits or hits[0].drawer_id != stored.drawer_id:
                misses.append(i)
        assert misses == []
        # The readers answered (reads prefer a reader when it is as free as the writer)...
        rates = [w["requests_per_s"] for w in workers_of(me, "ryw") if w["role"] == "reader"]
        assert sum(rates) > 0
        # ...and they do lag: a session that never wrote is not owed the newest write.
        last = "a note only the writer and its author know about yet"
        me.remember("ryw", last)
        seen = [h.content for h in other.recall("ryw", last, top_k=1).results]
        assert seen != [last]
        assert max(w["lag"] for w in workers_of(me, "ryw")) > 0


def read_load(config, palace: str, stop: threading.Event, errors: list, counts: list) -> None:
    with Client(config, autostart=False) as c:
        n = 0
        while not stop.is_set():
            try:
                c.recall(palace, f"which runner built release {n % 50}?", top_k=3)
                n += 1
            except TrustyError as exc:
                errors.append(exc.message)
        counts.append(n)


def start_readers(config, palace: str, n: int):
    stop, errors, counts = threading.Event(), [], []
    threads = [
        threading.Thread(target=read_load, args=(config, palace, stop, errors, counts))
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    return stop, errors, counts, threads


def test_kill_9_of_a_reader_under_read_load_costs_no_client_an_error(daemon):
    with Client(daemon.config, autostart=False) as admin:
        admin.palace_create("kr")
        for i in range(50):
            admin.remember("kr", f"release {i} was built on runner r{i % 7}")
        admin.scale("kr", 2)
        victim = wait_for_readers(admin, "kr", 2)[0]["pid"]
        stop, errors, counts, threads = start_readers(daemon.config, "kr", 4)
        time.sleep(1.5)
        os.kill(victim, signal.SIGKILL)
        time.sleep(1.5)
        replaced = wait_for_readers(admin, "kr", 2)
        stop.set()
        for t in threads:
            t.join(30)
        assert errors == []
        assert sum(counts) > 40
        assert victim not in {w["pid"] for w in replaced}
        admin.scale("kr", 0)


def test_kill_9_of_the_writer_with_readers_up_reads_go_on_and_writes_wait(daemon):
    with Client(daemon.config, autostart=False) as admin:
        admin.palace_create("kw")
        for i in range(30):
            admin.remember("kw", f"release {i} was built on runner r{i % 7}")
        admin.scale("kw", 1)
        wait_for_readers(admin, "kw", 1)
        writer = next(w["pid"] for w in workers_of(admin, "kw") if w["role"] == "writer")
        stop, errors, _, threads = start_readers(daemon.config, "kw", 3)
        acked: list[str] = []

        def write_after_kill() -> None:
            with Client(daemon.config, autostart=False) as w:
                for i in range(20):
                    acked.append(
                        w.remember("kw", f"written while the writer was down {i}").drawer_id
                    )

        time.sleep(1.0)
        os.kill(writer, signal.SIGKILL)
        writing = threading.Thread(target=write_after_kill)
        writing.start()
        writing.join(60)
        stop.set()
        for t in threads:
            t.join(30)
        assert errors == []
        assert len(acked) == 20
        listed = {d.drawer_id for d in admin.list("kw", limit=1000).drawers}
        assert set(acked) <= listed
        admin.scale("kw", 0)


def test_scaling_up_and_down_under_load_loses_no_read(daemon):
    with Client(daemon.config, autostart=False) as admin:
        admin.palace_create("sc")
        for i in range(40):
            admin.remember("sc", f"release {i} was built on runner r{i % 7}")
        stop, errors, counts, threads = start_readers(daemon.config, "sc", 4)
        for n in (3, 1, 2, 0):
            admin.scale("sc", n)
            wait_for_readers(admin, "sc", n)
            time.sleep(0.7)
        stop.set()
        for t in threads:
            t.join(30)
        assert errors == []
        assert sum(counts) > 40


def test_a_palaces_reader_count_survives_a_daemon_restart(fresh_home):
    d = Daemon(fresh_home).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.palace_create("kept")
            c.scale("kept", 2)
            c.remember("kept", "wake the palace")
            wait_for_readers(c, "kept", 2)
            with pytest.raises(TrustyError, match=r"readers: must be 0\.\.16"):
                c.scale("kept", 17)
    finally:
        d.stop()
    d = Daemon(fresh_home).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.recall("kept", "wake the palace")
            wait_for_readers(c, "kept", 2)
    finally:
        d.stop()
