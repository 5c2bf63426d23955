"""Worker processes: spawn on demand, reap, restart with back-off.

The supervisor only knows processes; the broker decides which ones should exist. A child
is keyed by ``(service, slot)`` so a service can have several processes: the embedder
pool, and a palace's writer (slot 0) with its readers (slots 1..N). Children inherit the
daemon's environment, so they load the same config and find the same sockets, and they
write their logs to the daemon's stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from trusty_memory import protocol as p
from trusty_memory.broker.forks import ForkedProcess, Template, TemplateUnavailable
from trusty_memory.config import Config

QUICK_CRASH_S = 30.0  # a child that dies sooner than this counts toward back-off


@dataclass
class Child:
    service: str
    slot: int
    argv: list[str]
    popen: subprocess.Popen | ForkedProcess | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    exit_code: int | None = None
    stopping: bool = False
    starts: int = field(default=0)
    last_pid: int = 0

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


def argv_for(service: str, slot: int = 0) -> list[str]:
    """The command line of the process that serves ``service`` in ``slot``."""
    if service == p.EMBEDDER_SERVICE:
        return [sys.executable, "-m", "trusty_memory.workers.embedder"]
    if service == p.DREAMER_SERVICE:
        return [sys.executable, "-m", "trusty_memory.dreamer", "--supervised"]
    if service == p.MCP_HOST_SERVICE:
        return [sys.executable, "-m", "trusty_memory.client.mcp_host"]
    if service.startswith(p.PALACE_SERVICE_PREFIX):
        palace = service[len(p.PALACE_SERVICE_PREFIX) :]
        # One argument, ``--palace=NAME``: a name may start with '-' ("-x", "--help"),
        # which argparse would read as an option if it stood on its own.
        argv = [sys.executable, "-m", "trusty_memory.workers.palace", f"--palace={palace}"]
        return argv if slot == 0 else [*argv, "--reader"]
    raise ValueError(f"no process serves {service!r}")


class Supervisor:
    def __init__(self, config: Config, log) -> None:
        self.config = config
        self.log = log
        self.children: dict[tuple[str, int], Child] = {}
        # Palace workers are forked from a template that has done their imports
        # (``workers/template.py``): cheaper to start and to keep.
        self.template = Template(log) if config.palace.fork_workers else None

    def by_pid(self, pid: int) -> Child | None:
        for child in self.children.values():
            if child.pid == pid:
                return child
        return None

    def ensure(self, service: str, slot: int = 0) -> Child:
        """Make sure a process for ``(service, slot)`` runs or is scheduled to restart."""
        child = self.children.get((service, slot))
        if child is None:
            child = Child(service, slot, argv_for(service, slot))
            self.children[(service, slot)] = child
        if not child.running and child.restart_at is None:
            self._spawn(child)
        child.stopping = False
        return child

    def _spawn(self, child: Child) -> None:
        child.popen = self._fork(child) or subprocess.Popen(
            child.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True
        )
        child.last_pid = child.popen.pid
        child.started_at = time.monotonic()
        child.restart_at = None
        child.exit_code = None
        child.starts += 1
        self.log.info("spawned", service=child.service, slot=child.slot, child_pid=child.pid)

    def _fork(self, child: Child) -> ForkedProcess | None:
        """A palace worker forked from the template, or None to start it the usual way."""
        if self.template is None or not child.service.startswith(p.PALACE_SERVICE_PREFIX):
            return None
        try:
            return self.template.spawn(child.argv[3:])  # after python -m <module>
        except TemplateUnavailable as exc:
            self.log.warning("forking failed; starting the worker afresh", error=str(exc))
            return None

    def reap(self) -> list[Child]:
        """Children that exited since the last call."""
        if self.template is not None:
            self.template.collect()
        gone = []
        for child in self.children.values():
            if child.popen is not None and child.popen.poll() is not None:
                child.exit_code = child.popen.returncode
                lived = time.monotonic() - child.started_at
                child.failures = child.failures + 1 if lived < QUICK_CRASH_S else 0
                child.popen = None
                gone.append(child)
                level = self.log.info if child.stopping else self.log.warning
                level("child exited", service=child.service, code=child.exit_code, lived_s=lived)
        return gone

    def schedule_restart(self, child: Child) -> None:
        delay = min(
            0.1 * (2 ** max(child.failures - 1, 0)), self.config.broker.restart_backoff_max_s
        )
        child.restart_at = time.monotonic() + delay
        self.log.info("restart scheduled", service=child.service, delay_s=delay)

    def forget(self, child: Child) -> None:
        self.children.pop((child.service, child.slot), None)

    def slots(self, service: str) -> list[Child]:
        """The children of ``service``, by slot."""
        return sorted((c for c in self.children.values() if c.service == service),
                      key=lambda c: c.slot)  # fmt: skip

    def restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if child.restart_at is not None and child.restart_at <= now and not child.running:
                self._spawn(child)

    def terminate(self, service: str) -> None:
        """SIGTERM the children of ``service`` (a client child, the dreamer or the MCP
        host, is not reached by the workers' ``W_DISCONNECT``)."""
        for child in self.children.values():
            if child.service == service and child.running:
                child.stopping = True
                child.popen.terminate()

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def shutdown(self, grace_s: float) -> None:
        """Wait for children told to stop; kill what is still alive after ``grace_s``."""
        deadline = time.monotonic() + grace_s
        for child in self.children.values():
            if child.popen is None:
                continue
            try:
                child.popen.wait(timeout=max(deadline - time.monotonic(), 0.05))
            except subprocess.TimeoutExpired:
                child.popen.terminate()
        for child in self.children.values():
            if child.popen is None:
                continue
            try:
                child.popen.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait()
        if self.template is not None:
            self.template.close()
