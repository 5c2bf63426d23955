"""``trusty-memory daemon``: one broker + supervisor per user per machine.

Exactly one daemon may own a home: it holds an exclusive ``flock`` on ``daemon.pid`` for
its whole life, so a second one (fifty agents starting at once, or systemd racing a
client) fails fast instead of stealing the sockets. The pid file's content is how clients
and ``trusty-memory stop`` find it. SIGTERM/SIGINT stop it cleanly: every worker is told
to save its index and exit before the daemon does.
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import sys

from trusty_memory.broker.broker import Broker
from trusty_memory.config import Config, load_config
from trusty_memory.logs import setup_logging


class AlreadyRunning(Exception):
    pass


def acquire_pid_lock(config: Config) -> int:
    """Take the daemon lock and write our pid; returns the fd to keep open."""
    config.ensure_dirs()
    fd = os.open(config.pid_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(f"a daemon already runs for {config.home}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def run_daemon(config: Config | None = None) -> int:
    config = config or load_config()
    log = setup_logging("daemon", default_level="info")
    try:
        lock_fd = acquire_pid_lock(config)
    except AlreadyRunning as exc:
        log.warning(str(exc))
        print(f"trusty-memory: {exc}", file=sys.stderr)
        return 1
    broker = Broker(config, log)

    def stop(signum, frame) -> None:
        broker.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("daemon started", home=str(config.home), frontend=config.frontend)
    gc.freeze()  # start-up's objects live for good: keep them out of full collections
    try:
        broker.mediate()
    finally:
        os.ftruncate(lock_fd, 0)
        os.close(lock_fd)
        log.info("daemon stopped")
    return 0


if __name__ == "__main__":
    sys.exit(run_daemon())
