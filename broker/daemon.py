"""``trusty-memory daemon``: one broker + supervisor per data home.

Exactly one daemon may own a home, whatever the environment of whoever started it: it
holds an exclusive ``flock`` on ``<home>/daemon.lock`` for its whole life and records in
``<home>/daemon.json`` where its sockets are (``trusty_memory.common.home``), so a second daemon
(fifty agents starting at once, systemd racing a client, a session whose host filtered
out ``XDG_RUNTIME_DIR``) fails fast instead of opening the same palaces, and every client
finds this one. SIGTERM/SIGINT stop it cleanly: every worker is told to save its index
and exit before the daemon does.

A service manager's daemon (``daemon --take-over``, what ``service install`` writes) does
not fail when the home is taken: a daemon a client started gives the home up to it (it is
stopped as ``trusty-memory stop`` would, while clients queue on the home's start lock
rather than start another one), and a daemon started on purpose is waited for, so the
unit neither fails nor loops through restarts.
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import sys
import time
from dataclasses import replace

from trusty_memory.broker.broker import Broker
from trusty_memory.broker.remote_palaces import UnreadableList
from trusty_memory.common import __version__, home, keys, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.logs import setup_logging


def pin_endpoints(config: Config) -> Config:
    """Fix the endpoints this daemon binds, for itself and (through the environment) for
    the workers it spawns, so a child never recomputes them from a different runtime dir."""
    broker = replace(config.broker, frontend=config.frontend, backend=config.backend)
    os.environ["TRUSTY_MEMORY_BROKER_FRONTEND"] = broker.frontend
    os.environ["TRUSTY_MEMORY_BROKER_BACKEND"] = broker.backend
    os.environ[home.PARENT_ENV] = str(os.getpid())  # children stop once we are gone
    # Our own actors are clients of this daemon, never of a ``[client] daemon`` elsewhere;
    # over CURVE they sign in with the daemon's key pair, which the key gate lets in.
    os.environ["TRUSTY_MEMORY_DAEMON"] = broker.frontend
    if any(transport.check_bind(e, broker.insecure) for e in (broker.frontend, broker.backend)):
        pair = keys.server_pair(config.home)
        os.environ[keys.CLIENT_SECRET_ENV] = str(pair.path)
        os.environ["TRUSTY_MEMORY_SERVER_KEY"] = pair.public.decode()
    return replace(config, broker=broker)


# How long a daemon a client started gets to stop when a service's daemon takes over.
TAKE_OVER_WAIT_S = 60.0


def take_over(config: Config, log, stopping: list[int]) -> tuple[int, int] | None:
    """The home's lock for a service manager's daemon, and the home's start lock, held so
    that clients wait for this daemon instead of starting one (close it once the record is
    written). A daemon a client started is asked to stop (SIGTERM: workers save their
    indexes); one started on purpose is waited for. None if this process is stopped first."""
    waited_for = 0
    while not stopping:
        start_fd = os.open(config.start_lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(start_fd, fcntl.LOCK_EX)
        try:
            return home.hold_lock(config.home), start_fd
        except home.AlreadyRunning:
            pass
        owner = home.live_daemon(config.home)
        if owner is not None and owner.client_started:
            log.info("taking the home over from the daemon a client started", pid=owner.pid)
            os.kill(owner.pid, signal.SIGTERM)
            fd = os.open(config.home / home.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            if home.flock_within(fd, TAKE_OVER_WAIT_S):
                return fd, start_fd
            os.close(fd)
            log.warning("the daemon a client started did not stop", pid=owner.pid)
        os.close(start_fd)
        if owner is not None and owner.pid != waited_for and not owner.client_started:
            waited_for = owner.pid
            message = f"waiting for the daemon that owns {config.home} (pid {owner.pid}) to stop"
            log.warning(message)
            print(f"trusty-memory: {message}", file=sys.stderr)
        time.sleep(1.0)
    return None


OPEN_FILES_WANTED = 65536


def raise_open_file_limit(log) -> None:
    """Raise the soft limit on open files towards the hard one: every tcp connection, pipe
    and palace process costs the broker descriptors, and a default soft limit of 1024
    makes a busy team daemon refuse work long before the machine is full. The tcp side's
    connection caps (``transport``) scale with the limit set here."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = (
            OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
        )
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            log.info("open-file limit raised", soft=soft, now=wanted, hard=hard)
    except (ImportError, ValueError, OSError) as exc:  # a limit we cannot raise: keep it
        log.warning("open-file limit not raised", error=str(exc))


def run_daemon(
    config: Config | None = None,
    *,
    client_started: bool = False,
    take_over_home: bool = False,
    start_lock_fd: int | None = None,
) -> int:
    """Run the daemon until SIGTERM/SIGINT; one a client started (``client_started``)
    also exits after ``[daemon] idle_exit_s`` without client requests. With
    ``take_over_home`` a home owned by another daemon is taken over or waited for
    (``take_over``) instead of exiting 1. ``start_lock_fd``: the home's start lock, held
    for us by a starter that did not wait (``client/spawn.py``), closed once our record is
    written (or by our exit, whatever ends us first)."""
    home.make_private()
    config = config or load_config()
    log = setup_logging("daemon", default_level="info")
    config.ensure_dirs()
    raise_open_file_limit(log)
    start_fd = -1 if start_lock_fd is None else start_lock_fd
    stopping: list[int] = []
    if take_over_home:
        signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
        signal.signal(signal.SIGINT, lambda signum, frame: stopping.append(signum))
        held = take_over(config, log, stopping)
        if held is None:
            return 0
        lock_fd, start_fd = held
    else:
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
    try:
        config = pin_endpoints(config)
        broker = Broker(config, log)
    except p.TrustyError as exc:  # plain tcp refused, no server key: one line, no traceback
        log.error("cannot listen", error=exc.message)
        print(f"trusty-memory: {exc.message}", file=sys.stderr)
        os.close(lock_fd)
        return 2
    except UnreadableList as exc:
        log.error("cannot start", error=str(exc))
        print(f"trusty-memory: {exc}", file=sys.stderr)
        os.close(lock_fd)
        return 2
    if client_started and config.daemon.idle_exit_s > 0:
        broker.idle_exit_s = config.daemon.idle_exit_s
    pid = os.getpid()
    used_reserve = home.write_record(
        config.home,
        home.DaemonRecord(
            pid=pid,
            started=home.process_started(pid),
            frontend=config.frontend,
            backend=config.backend,
            home=str(config.home),
            version=__version__,
            mcp=str(config.mcp_socket),
            client_started=client_started,
        ),
    )
    if start_fd >= 0:
        os.close(start_fd)  # clients waiting to start a daemon now find this one
    if used_reserve:
        log.warning("the disk is full: started on the home's reserve (1 MiB)")
    home.ensure_reserve(config.home)  # made, or made again, once there is room

    def stop(signum, frame) -> None:
        broker.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if stopping:  # a signal that came while the home was being taken over
        broker.running = False
    log.info("daemon started", home=str(config.home), frontend=config.frontend)
    if config.privacy.secrets != "redact":  # once, at start: the one thing to know
        log.warning(
            "credentials in writes are not redacted ([privacy] secrets)",
            secrets=config.privacy.secrets,
        )
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
