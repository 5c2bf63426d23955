"""A daemon a client started leaves once unused; one started on purpose stays.

Real daemons in their own homes, started the two ways: on demand by a client (the CLI,
``serve``) and as ``trusty-memory daemon`` (what a service manager runs). The dreamer is
on, so its own polling is there to (wrongly) keep a daemon alive.

Covers: broker/daemon.py broker/__main__.py broker/broker.py client/mcp/relay.py
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


def cli(home: Path, *args: str, idle: dict[str, str] = IDLE) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), **idle}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)


def wait_gone(home: Path, timeout: float = 120) -> float:
    """Seconds until no daemon owns ``home``; fails after ``timeout``. Generous: the exit
    is due ``idle_exit_s`` after the last request, but stopping the workers (a palace
    saves its index) on a loaded machine takes what it takes, which is not timed here."""
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
        wait_gone(home)
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
    """Requests closer together than the idle window keep one daemon for longer than the
    window. The window is 10 s here, not 3: each request is a CLI process, whose start
    alone took more than 3 s on a loaded machine, so the gaps are the machine's, not ours."""
    home = _short_tmp("tmx-")
    idle = {**IDLE, "TRUSTY_MEMORY_DAEMON_IDLE_EXIT_S": "10"}
    try:
        assert cli(home, "palace", "create", "busy", idle=idle).returncode == 0
        pid = h.live_daemon(home).pid
        t0, i = time.monotonic(), 0
        while time.monotonic() - t0 < 25:  # use for 2.5 idle windows, a request a second
            assert cli(home, "remember", "busy", f"note {i}", idle=idle).returncode == 0
            i += 1
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
    # A longer idle window here: the daemon serve starts counts no use until the first
    # request, which waits for the MCP host to start, and on a loaded machine that took
    # longer than 3 s ("the daemon stopped while its MCP host was starting").
    s = RawServe(home, "--palace", "agent", **{**IDLE, "TRUSTY_MEMORY_DAEMON_IDLE_EXIT_S": "15"})
    try:
        s.initialize()
        assert "result" in s.tool(1, "memory_remember", {"text": "said before the pause"})
        wait_gone(home)
        # The relay lost its host with nothing in flight; the next call starts a daemon.
        listed = s.tool(2, "memory_list", {}, timeout=120)["result"]["structuredContent"]
        assert [d["content"] for d in listed["drawers"]] == ["said before the pause"]
    finally:
        s.kill()
        Daemon(home).stop()
