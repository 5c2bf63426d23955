"""Starting a detached daemon: the one piece of client start-up that needs no ZeroMQ.

Kept apart from ``daemon.py`` (which pings the broker over ZeroMQ) so that the stdio relay
of ``serve`` can start a daemon with the standard library alone.
"""

from __future__ import annotations

import os
import subprocess
import threading

from trusty_memory.config import Config
from trusty_memory.launch import module_command


def spawn_daemon(config: Config) -> subprocess.Popen:
    """Start a detached daemon whose logs go to ``logs/daemon.log``."""
    config.ensure_dirs()
    fd = os.open(config.log_dir / "daemon.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = os.fdopen(fd, "ab")  # handed to the child
    proc = subprocess.Popen(
        module_command("trusty_memory.broker", "--client-started"),
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
