"""Starting a detached daemon: the one piece of client start-up that needs no ZeroMQ.

Kept apart from ``daemon.py`` (which pings the broker over ZeroMQ) so that the stdio relay
of ``serve`` can start a daemon with the standard library alone.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

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


def spawn_daemon(config: Config) -> subprocess.Popen:
    """Start a detached daemon whose logs go to ``logs/daemon.log``."""
    config.ensure_dirs()
    fd = os.open(config.log_dir / "daemon.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = os.fdopen(fd, "ab")  # handed to the child
    proc = subprocess.Popen(
        module_command("trusty_memory.broker", "--client-started"),
        env=daemon_env(config),
        umask=0o077,
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
