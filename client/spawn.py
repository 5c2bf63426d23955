"""Starting a detached daemon: the one piece of client start-up that needs no ZeroMQ.

Kept apart from ``daemon.py`` (which pings the broker over ZeroMQ) so that the stdio relay
of ``serve`` can start a daemon with the standard library alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from trusty_memory.common import home
from trusty_memory.common.config import Config, default_home
from trusty_memory.common.launch import module_command


def daemon_env(config: Config) -> dict[str, str]:
    """The environment of a daemon started for ``config``: this one, naming the home when
    the daemon would not find it by itself. A client handed a config for another home
    (``Client(config)`` in a process whose environment names none) must start the daemon
    of THAT home, not one of the default home that never answers it."""
    env = dict(os.environ)
    if Path(env.get("TRUSTY_MEMORY_HOME") or default_home()).expanduser() != config.home:
        env["TRUSTY_MEMORY_HOME"] = str(config.home)
    return env


def spawn_daemon(config: Config, start_lock_fd: int | None = None) -> subprocess.Popen:
    """Start a detached daemon whose logs go to ``logs/daemon.log``.

    ``start_lock_fd``: this process's descriptor of the home's start lock, held, for a
    starter that leaves before the daemon is up (the SessionStart hook). The daemon
    inherits it and closes it once its record is written, so every other starter keeps
    waiting on the lock until then instead of starting a second daemon; if the daemon
    dies first, its exit releases the lock."""
    config.ensure_dirs()
    fd = os.open(config.log_dir / "daemon.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = os.fdopen(fd, "ab")  # handed to the child
    argv = module_command("trusty_memory.broker", "--client-started")
    if start_lock_fd is not None:
        argv.append(f"--start-lock-fd={start_lock_fd}")
    proc = subprocess.Popen(
        argv,
        env=daemon_env(config),
        umask=0o077,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
        close_fds=True,
        pass_fds=() if start_lock_fd is None else (start_lock_fd,),
    )
    log.close()
    # Reap it whenever it exits so a long-lived starter never collects a zombie.
    threading.Thread(target=proc.wait, daemon=True, name="reap-daemon").start()
    return proc


@contextlib.contextmanager
def start_lock(config: Config, wait: bool = True) -> Iterator[int | None]:
    """The home's start lock, held for the block: the one starter at a time. Its file
    descriptor, or None without ``wait`` when another starter holds it."""
    config.ensure_dirs()
    fd = os.open(config.start_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None  # someone is starting it now
            return
        yield fd
    finally:
        os.close(fd)  # a daemon given the lock holds its own copy until its record is out


def start_daemon_behind(config: Config) -> int | None:
    """Start the home's daemon without waiting for it (the SessionStart hook, which must
    answer within a second): its pid, or None when another starter is at it (the start
    lock is taken) or a daemon runs after all. The held start lock goes to the daemon
    (``spawn_daemon``'s ``start_lock_fd``), so a ``serve`` or client that asks meanwhile
    waits for this daemon instead of starting another."""
    with start_lock(config, wait=False) as fd:
        if fd is None:
            return None
        if home.live_daemon(config.home) is not None or home.lock_held(config.home):
            return None
        return spawn_daemon(config, start_lock_fd=fd).pid
