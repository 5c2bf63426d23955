"""The service's daemon (``daemon --take-over``, what the systemd unit runs) and daemons
that clients start share a home without failing or looping: it takes the home over from a
client's daemon, cleanly, and waits for one started on purpose.

Real daemons in their own homes; the unit itself needs a running systemd, which these
tests do not have, so they run its ExecStart's command directly.

Covers: broker/daemon.py broker/__main__.py client/cli/processes.py
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, _short_tmp
from trusty_memory.common import home as h

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]


def env_for(home: Path) -> dict[str, str]:
    return {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], env=env_for(home), capture_output=True, text=True, timeout=120
    )


def service_daemon(home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "daemon", "--take-over"],
        env=env_for(home), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_owner(home: Path, pid: int, timeout: float) -> h.DaemonRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = h.live_daemon(home)
        if record is not None and record.pid == pid:
            return record
        time.sleep(0.1)
    raise AssertionError(f"pid {pid} did not take the home within {timeout}s")


def exits(pid: int, timeout: float) -> bool:
    """True once ``pid`` has exited (a zombie left to whoever reaps orphans counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat[stat.rfind(")") + 2] in "ZX":
            return True
        time.sleep(0.05)
    return False


def finish(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


def test_it_takes_the_home_over_from_a_client_started_daemon():
    home = _short_tmp("tko-")
    proc = None
    try:
        assert cli(home, "palace", "create", "notes").returncode == 0
        assert cli(home, "remember", "notes", "kept across the take-over").returncode == 0
        first = h.live_daemon(home)
        assert first is not None and first.client_started
        proc = service_daemon(home)
        record = wait_owner(home, proc.pid, timeout=60)
        assert not record.client_started
        assert exits(first.pid, timeout=10)
        # The client's daemon stopped as on `trusty-memory stop`, not killed.
        assert "daemon stopped" in (home / "logs" / "daemon.log").read_text()
        recalled = cli(home, "recall", "notes", "what was kept?", "--json")
        assert recalled.returncode == 0, recalled.stderr
        assert "kept across the take-over" in recalled.stdout
        assert h.live_daemon(home).pid == proc.pid  # the client used it, started none
        assert finish(proc) == 0
    finally:
        if proc is not None and proc.poll() is None:
            finish(proc)
        Daemon(home).stop()
        shutil.rmtree(home, ignore_errors=True)


def test_it_waits_for_a_daemon_started_on_purpose_then_takes_the_home():
    home = _short_tmp("tko-")
    first = Daemon(home).start()
    proc = None
    try:
        first_pid = first.pid()
        proc = service_daemon(home)
        time.sleep(3.0)
        assert proc.poll() is None, "it must wait, not fail"
        assert h.live_daemon(home).pid == first_pid
        first.stop()
        wait_owner(home, proc.pid, timeout=30)
        assert finish(proc) == 0
        assert "waiting for the daemon that owns" in proc.stderr.read()
    finally:
        if proc is not None and proc.poll() is None:
            finish(proc)
        first.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_a_waiting_service_daemon_stops_at_once_on_sigterm():
    home = _short_tmp("tko-")
    first = Daemon(home).start()
    try:
        proc = service_daemon(home)
        time.sleep(2.0)
        t0 = time.monotonic()
        assert finish(proc) == 0
        assert time.monotonic() - t0 < 5
        assert h.live_daemon(home).pid == first.pid()
    finally:
        first.stop()
        shutil.rmtree(home, ignore_errors=True)
