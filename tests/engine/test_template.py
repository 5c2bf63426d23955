"""Palace workers forked from the template: cheaper, and supervised like any other."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon
from trusty_memory.client.sync import Client

pytestmark = pytest.mark.slow


def parent_cmdline(pid: int) -> str:
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def palace_workers(client: Client, palace: str) -> list[dict]:
    for s in client.status()["services"]:
        if s["name"] == f"palace:{palace}":
            return s["workers"]
    return []


def wait_workers(client: Client, palace: str, n: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = palace_workers(client, palace)
        if len(workers) == n:
            return workers
        time.sleep(0.05)
    raise AssertionError(f"{palace}: wanted {n} workers, have {palace_workers(client, palace)}")


def template_ready(client: Client, timeout: float = 60.0) -> int:
    """The pid of the template once it forks (palaces asked for sooner start afresh)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        template = client.status()["template"]
        if template["ready"]:
            return template["pid"]
        time.sleep(0.05)
    raise AssertionError(f"the template never became ready: {client.status()['template']}")


def test_writers_and_readers_are_forked_from_the_template(daemon):
    with Client(daemon.config, autostart=False) as c:
        template_ready(c)
        c.palace_create("forked")
        c.remember("forked", "the template imported everything before this worker existed")
        c.scale("forked", 1)
        for worker in wait_workers(c, "forked", 2):
            assert "trusty_memory.workers.template" in parent_cmdline(worker["pid"])
        c.scale("forked", 0)


def test_a_killed_template_costs_nothing_acknowledged(daemon):
    with Client(daemon.config, autostart=False) as c:
        template = template_ready(c)
        c.palace_create("orphans")
        first = c.remember("orphans", "written before the template died").drawer_id
        [writer] = wait_workers(c, "orphans", 1)
        assert "trusty_memory.workers.template" in parent_cmdline(writer["pid"])
        os.kill(template, signal.SIGKILL)
        # Its workers notice their parent is gone and stop. The next request starts a new
        # template, and a writer the long way while that one imports: nothing waits on it.
        wait_workers(c, "orphans", 0)
        second = c.remember("orphans", "written after the template died").drawer_id
        ids = {d.drawer_id for d in c.list("orphans", limit=10).drawers}
        assert {first, second} <= ids
        assert template_ready(c) != template


def test_fresh_interpreters_when_forking_is_off(fresh_home):
    d = Daemon(fresh_home, extra_env={"TRUSTY_MEMORY_PALACE_FORK_WORKERS": "false"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.palace_create("fresh")
            c.remember("fresh", "started the long way")
            [writer] = wait_workers(c, "fresh", 1)
            assert "trusty_memory.broker" in parent_cmdline(writer["pid"])
    finally:
        d.stop()
