"""The daemon's own dreamer: started by default, dreams idle palaces, restarted on crash.

Covers: dreamer/scheduler.py dreamer/__main__.py broker/supervisor.py
"""

from __future__ import annotations

import os
import signal

from tests.conftest import Daemon, wait_until
from tests.dreamer.test_dream_daemon import PLANTED, sql
from trusty_memory.client.sync import Client

FAST_DREAMER = {
    "TRUSTY_MEMORY_DREAMER_IDLE_AFTER_S": "1.5",
    "TRUSTY_MEMORY_DREAMER_POLL_S": "0.3",
}


def test_the_daemon_dreams_idle_palaces_and_restarts_a_killed_dreamer(fresh_home):
    daemon = Daemon(fresh_home, FAST_DREAMER).start()
    client = Client(daemon.config, autostart=False)
    client.palace_create("idle")
    for a, b in PLANTED:
        client.remember("idle", a)
        client.remember("idle", b)
    # Only the dreamer talks to the palace now; its own requests do not count as use.
    dreams = wait_until(
        lambda: sql(daemon.config, "idle", "SELECT merged FROM dream_log"), 90, "a dream"
    )
    assert dreams[0][0] == len(PLANTED)
    info = client.palace_info("idle")
    assert info.drawer_count == info.index_count == len(PLANTED)
    assert info.dream_merged == len(PLANTED) and info.last_dream_at

    first = client.status()["dreamer_pid"]
    assert first
    os.kill(first, signal.SIGKILL)
    second = wait_until(
        lambda: (pid := client.status()["dreamer_pid"]) not in (None, first) and pid,
        30,
        "the dreamer's restart",
    )
    os.kill(second, 0)  # alive
    assert client.status()["restarts"]["dreamer#0"] == 1
    # SIGTERM (what the daemon sends at shutdown) stops it promptly.
    os.kill(second, signal.SIGTERM)
    wait_until(lambda: not alive(second), 5, "the dreamer to stop on SIGTERM")
    client.close()
    daemon.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie waiting for the daemon to reap it is stopped, too.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False
