"""Shared fixtures: real daemons in throw-away homes.

Every integration test runs against the real thing: a ``trusty-memory daemon`` process,
its worker processes, ZeroMQ ipc sockets, SQLite files and the real MiniLM model. The
``daemon`` fixture starts one per test module (model loading costs seconds); tests that
kill or restart daemons use ``fresh_daemon`` for a home of their own.
"""

from __future__ import annotations

import os
import pty
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trusty_memory.client.autostart import daemon_pid, ping
from trusty_memory.common.config import Config, load_config

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Daemon:
    """A daemon process in its own home; ``config`` is what clients should use."""

    def __init__(self, home: Path, extra_env: dict[str, str] | None = None) -> None:
        self.home = home
        self.env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), **(extra_env or {})}
        self.proc: subprocess.Popen | None = None

    @property
    def config(self) -> Config:
        saved = os.environ.get("TRUSTY_MEMORY_HOME")
        os.environ["TRUSTY_MEMORY_HOME"] = str(self.home)
        try:
            return load_config()
        finally:
            if saved is None:
                del os.environ["TRUSTY_MEMORY_HOME"]
            else:
                os.environ["TRUSTY_MEMORY_HOME"] = saved

    def start(self, timeout: float = 60.0) -> Daemon:
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "daemon-test.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trusty_memory.broker"], env=self.env, stderr=log
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ping(self.config, 0.5):
                return self
            assert self.proc.poll() is None, f"daemon exited: {self.log_tail()}"
            time.sleep(0.05)
        raise AssertionError(f"daemon did not answer within {timeout}s: {self.log_tail()}")

    def pid(self) -> int | None:
        return daemon_pid(self.config)

    def stop(self, timeout: float = 20.0) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and daemon_pid(self.config) is not None:
                time.sleep(0.05)
            if daemon_pid(self.config) is not None:
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def log_tail(self, n: int = 40) -> str:
        lines: list[str] = []
        for name in ("daemon-test.log", "logs/daemon.log"):
            path = self.home / name
            if path.exists():
                lines += path.read_text(errors="replace").splitlines()[-n:]
        return "\n".join(lines)


def run_cli(
    daemon: Daemon,
    *args: str,
    stdin: str | bytes | None = None,
    text: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """Run the real ``trusty-memory`` command against ``daemon``'s home."""
    return subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env=daemon.env,
        input=stdin,
        capture_output=True,
        text=text,
        timeout=timeout,
        check=False,
    )


def on_pty(
    argv: list[str], env: dict[str, str], *, streams: tuple[str, ...], timeout: float = 120
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` with the named ``streams`` ("stdin", "stdout", "stderr") on a fresh
    pseudo-terminal, stdout piped when it is not one and the rest discarded: its exit
    status, what it wrote on the terminal (as sent, ``\r`` included) and its piped stdout
    (read once the command is done: for short output).
    Reading stops at the command's close (EIO), its exit or ``timeout``; it is killed if
    still running."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=slave if "stdin" in streams else subprocess.DEVNULL,
        stdout=slave if "stdout" in streams else subprocess.PIPE,
        stderr=slave if "stderr" in streams else subprocess.DEVNULL,
    )
    os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the command closed its side
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        piped = proc.stdout.read() if proc.stdout is not None else b""
        return proc.wait(timeout=10), bytes(shown), piped
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()


def _short_tmp(prefix: str) -> Path:
    # ipc socket paths must stay under ~100 bytes: keep homes short.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    home = _short_tmp("tm-")
    d = Daemon(home).start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def fresh_home() -> Iterator[Path]:
    home = _short_tmp("tmf-")
    yield home
    pid = daemon_pid(Daemon(home).config)
    if pid is not None:
        Daemon(home).stop()
    shutil.rmtree(home, ignore_errors=True)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    """``predicate()``'s first truthy value within ``timeout`` seconds; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


ATTACKER = "tm-attacker"  # the other local user the suite acts as (made when missing)


@pytest.fixture(scope="session")
def attacker() -> pwd.struct_passwd:
    """A second local user: made when missing (root only, with ``useradd``)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a second local user is made and acted as")
    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} to make and act as a second local user")
    try:
        return pwd.getpwnam(ATTACKER)
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ATTACKER],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd {ATTACKER} failed: {made.stderr.strip()}")
    return pwd.getpwnam(ATTACKER)


def as_attacker(who: pwd.struct_passwd, script: str, *args: str, **popen) -> subprocess.Popen:
    """``sh -c script`` as the other user (no supplementary groups), ``args`` as $1..."""
    argv = ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups"]
    return subprocess.Popen([*argv, "--", "/bin/sh", "-c", script, "sh", *args], **popen)
