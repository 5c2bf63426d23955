"""A daemon a client started leaves once unused; one started on purpose stays.

Real daemons in their own homes, started the two ways: on demand by a client (the CLI,
``serve``) and as ``trusty-memory daemon`` (what a service manager runs). The dreamer is
on, so its own polling is there to (wrongly) keep a daemon alive.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, _short_tmp
from tests.mcp.conftest import RawServe
from trusty_memory.common import home as h

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]
IDLE = {"TRUSTY_MEMORY_DAEMON_IDLE_EXIT_S": "3", "TRUSTY_MEMORY_DREAMER_ENABLED": "1",
        "TRUSTY_MEMORY_BROKER_HEARTBEAT_S": "0.5"}  # fmt: skip


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), **IDLE}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)


def wait_gone(home: Path, timeout: float) -> float:
    """Seconds until no daemon owns ``home``; fails after ``timeout``."""
    t0 = time.monotonic()
    while h.live_daemon(home) is not None:
        assert time.monotonic() - t0 < timeout, "the daemon is still running"
        time.sleep(0.1)
    return time.monotonic() - t0


def test_a_client_started_daemon_exits_when_unused_and_comes_back():
    home = _short_tmp("tmx-")
    try:
        assert cli(home, "palace", "create", "notes").returncode == 0
        first = h.live_daemon(home)
        assert first is not None
        assert cli(home, "remember", "notes", "kept across the exit").returncode == 0
        # 3 s without a client request (the dreamer's polling does not count), then gone,
        # cleanly: the record is removed, the palace's worker saved its index.
        wait_gone(home, timeout=30)
        assert h.read_record(home) is None
        assert "no client requests; exiting" in (home / "logs" / "daemon.log").read_text()
        recalled = cli(home, "recall", "notes", "what was kept?", "--json")
        assert recalled.returncode == 0, recalled.stderr
        assert "kept across the exit" in recalled.stdout
        second = h.live_daemon(home)
        assert second is not None and second.pid != first.pid
    finally:
        Daemon(home).stop()


def test_requests_keep_it_alive():
    home = _short_tmp("tmx-")
    try:
        assert cli(home, "palace", "create", "busy").returncode == 0
        pid = h.live_daemon(home).pid
        for i in range(6):  # 6 s of use, a request a second: longer than idle_exit_s
            assert cli(home, "remember", "busy", f"note {i}").returncode == 0
            time.sleep(1.0)
        assert h.live_daemon(home).pid == pid
    finally:
        Daemon(home).stop()


def test_a_daemon_started_on_purpose_stays():
    home = _short_tmp("tmx-")
    daemon = Daemon(home, IDLE).start()
    try:
        pid = daemon.pid()
        assert cli(home, "palace", "create", "kept").returncode == 0
        time.sleep(6)
        assert daemon.pid() == pid
    finally:
        daemon.stop()


def test_a_serve_session_outlives_the_daemon_it_started():
    home = _short_tmp("tmx-")
    s = RawServe(home, "--palace", "agent", **IDLE)
    try:
        s.initialize()
        assert "result" in s.tool(1, "memory_remember", {"text": "said before the pause"})
        wait_gone(home, timeout=30)
        # The relay lost its host with nothing in flight; the next call starts a daemon.
        listed = s.tool(2, "memory_list", {}, timeout=120)["result"]["structuredContent"]
        assert [d["content"] for d in listed["drawers"]] == ["said before the pause"]
    finally:
        s.kill()
        Daemon(home).stop()
