"""Finding the daemon, and starting one when none answers.

Any client may start the daemon, so fifty agent sessions starting at once must make
exactly one. Two locks make that so: starters serialise on ``start.lock`` (the first one
spawns and waits until the daemon answers; the rest then find it answering), and the
daemon itself holds ``daemon.pid`` exclusively, so even a starter that raced past the
first lock cannot produce a second daemon.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import zmq

from trusty_memory import protocol as p
from trusty_memory.config import Config


class DaemonUnavailable(p.TrustyError):
    def __init__(self, message: str) -> None:
        super().__init__(p.ErrorCode.NO_WORKER, message)


def is_local(config: Config) -> bool:
    return config.frontend.startswith("ipc://")


def daemon_pid(config: Config) -> int | None:
    """The pid in the pid file if that process is alive (local daemons only)."""
    try:
        pid = int(config.pid_file.read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def ping(config: Config, timeout_s: float = 1.0) -> bool:
    """True if a broker answers ``ping`` on the frontend within ``timeout_s``."""
    if is_local(config) and daemon_pid(config) is None:
        return False
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(config.frontend)
        rid, frame = p.encode_request("ping")
        sock.send(frame)
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if sock.poll(int(remaining * 1000) + 1):
                resp = p.decode_response(sock.recv())
                if resp.id == rid:
                    return resp.ok
        return False
    finally:
        sock.close(linger=0)


def spawn_daemon(config: Config) -> subprocess.Popen:
    """Start a detached daemon whose logs go to ``logs/daemon.log``."""
    config.ensure_dirs()
    log = open(config.log_dir / "daemon.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.broker"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
        close_fds=True,
    )
    log.close()
    # Reap it whenever it exits so a long-lived starter never collects a zombie.
    threading.Thread(target=proc.wait, daemon=True, name="reap-daemon").start()
    return proc


def ensure_daemon(config: Config, timeout_s: float = 30.0) -> None:
    """Return once a daemon answers, starting one if needed."""
    if ping(config, 0.5):
        return
    if not is_local(config):
        raise DaemonUnavailable(f"no daemon answers at {config.frontend}")
    config.ensure_dirs()
    with open(config.start_lock, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ping(config, 0.5):
            return
        proc = spawn_daemon(config)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ping(config, 0.5):
                return
            if proc.poll() not in (None, 0) and daemon_pid(config) is None:
                break
            time.sleep(0.05)
    raise DaemonUnavailable(
        f"the daemon did not start within {timeout_s:.0f}s; see {config.log_dir / 'daemon.log'}"
    )
