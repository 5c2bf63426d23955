"""``trusty-memory daemon``: one broker + supervisor per data home.

Exactly one daemon may own a home, whatever the environment of whoever started it: it
holds an exclusive ``flock`` on ``<home>/daemon.lock`` for its whole life and records in
``<home>/daemon.json`` where its sockets are (``trusty_memory.home``), so a second daemon
(fifty agents starting at once, systemd racing a client, a session whose host filtered
out ``XDG_RUNTIME_DIR``) fails fast instead of opening the same palaces, and every client
finds this one. SIGTERM/SIGINT stop it cleanly: every worker is told to save its index
and exit before the daemon does.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from dataclasses import replace

from trusty_memory import __version__, home
from trusty_memory.broker.broker import Broker
from trusty_memory.config import Config, load_config
from trusty_memory.logs import setup_logging


def pin_endpoints(config: Config) -> Config:
    """Fix the endpoints this daemon binds, for itself and (through the environment) for
    the workers it spawns, so a child never recomputes them from a different runtime dir."""
    broker = replace(config.broker, frontend=config.frontend, backend=config.backend)
    os.environ["TRUSTY_MEMORY_BROKER_FRONTEND"] = broker.frontend
    os.environ["TRUSTY_MEMORY_BROKER_BACKEND"] = broker.backend
    return replace(config, broker=broker)


def run_daemon(config: Config | None = None, *, client_started: bool = False) -> int:
    """Run the daemon until SIGTERM/SIGINT; one a client started (``client_started``)
    also exits after ``[daemon] idle_exit_s`` without client requests."""
    home.make_private()
    config = config or load_config()
    log = setup_logging("daemon", default_level="info")
    config.ensure_dirs()
    try:
        lock_fd = home.hold_lock(config.home)
    except home.AlreadyRunning as exc:
        log.warning(str(exc))
        print(f"trusty-memory: {exc}", file=sys.stderr)
        return 1
    loosened = home.tighten(config.home)
    if loosened:
        log.warning(
            "tightened file modes in the home: memories are private to their user",
            paths=len(loosened),
            example=str(loosened[0]),
        )
    config = pin_endpoints(config)
    broker = Broker(config, log)
    if client_started and config.daemon.idle_exit_s > 0:
        broker.idle_exit_s = config.daemon.idle_exit_s
    pid = os.getpid()
    home.write_record(
        config.home,
        home.DaemonRecord(
            pid=pid,
            started=home.process_started(pid),
            frontend=config.frontend,
            backend=config.backend,
            home=str(config.home),
            version=__version__,
            mcp=str(config.mcp_socket),
        ),
    )

    def stop(signum, frame) -> None:
        broker.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("daemon started", home=str(config.home), frontend=config.frontend)
    gc.freeze()  # start-up's objects live for good: keep them out of full collections
    try:
        broker.mediate()
    finally:
        home.clear_record(config.home, pid)
        os.close(lock_fd)
        log.info("daemon stopped")
    return 0


if __name__ == "__main__":
    sys.exit(run_daemon())
