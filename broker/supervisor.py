"""Worker processes: spawn on demand, reap, restart with back-off.

The supervisor only knows processes; the broker decides which ones should exist. A child
is keyed by ``(service, slot)`` so a service can have several processes: the embedder
pool, and a palace's writer (slot 0) with its readers (slots 1..N). Children inherit the
daemon's environment, so they load the same config and find the same sockets, and they
write their logs to the daemon's stderr.

Crashes are remembered per ``(service, slot)`` (``Crashes``), beyond the life of a
``Child`` record, so that ``status`` shows a crash loop and the broker can answer the
requests waiting for it with the cause instead of a timeout. Forked palace workers that
die before they answer anything, twice in a row, turn forking off until the daemon
restarts: the template is a saving, never a reason for a palace not to answer.

A child the supervisor kills itself (``kill``: the broker found it silent past
``[broker] worker_expiry_s``) is told apart from one that crashed: its exit is logged and
kept as "killed by the supervisor: <why>", and it never counts toward turning forking
off, since its start path worked (it registered and was given work).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from trusty_memory.broker.forks import ForkedProcess, Template, TemplateUnavailable
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.launch import module_args, module_command

QUICK_CRASH_S = 30.0  # a child that dies sooner than this counts toward back-off
YOUNG_FORK_DEATHS = 2  # forked workers dead before their first answer, in a row: stop forking
# A palace worker asked for while the template is still starting waits for it, this long
# at most, rather than start afresh: a fresh interpreter's imports cost ~0.6 CPU-seconds,
# which on a small machine a cold start's first answer waited behind (the template is
# ready within a second or two of the daemon's start; a fork then takes milliseconds).
TEMPLATE_WAIT_S = 10.0
TEMPLATE_POLL_S = 0.05
CRASHES_KEPT = 1000  # (service, slot) crash records kept, the least recent dropped first


def describe_exit(code: int | None, killed_why: str | None = None) -> str:
    """``-11`` -> ``killed by SIGSEGV``; ``3`` -> ``exited with code 3``; a child the
    supervisor killed (``killed_why``) -> ``killed by the supervisor: <why>``."""
    if killed_why is not None:
        return f"killed by the supervisor: {killed_why}"
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Crashes:
    """The crashes of one ``(service, slot)``: the current run of quick ones and all."""

    in_a_row: int = 0
    total: int = 0
    last_code: int | None = None
    last_lived_s: float = 0.0
    forked: bool = False
    last_killed_why: str | None = None  # the last exit was the supervisor's kill: why

    def as_dict(self) -> dict:
        return {
            "in_a_row": self.in_a_row,
            "total": self.total,
            "last_exit": describe_exit(self.last_code, self.last_killed_why),
            "last_code": self.last_code,
            "last_lived_s": round(self.last_lived_s, 3),
            "forked": self.forked,
        }


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
    forked: bool = False  # this run came from the template
    served: bool = False  # this run answered a request
    killed_why: str | None = None  # this run was killed by the supervisor: why

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def terminate(self) -> None:
        """SIGTERM this run's process (callers check ``running`` first)."""
        if self.popen is not None:
            self.popen.terminate()


def argv_for(service: str, slot: int = 0) -> list[str]:
    """The command line of the process that serves ``service`` in ``slot``."""
    if service == p.EMBEDDER_SERVICE:
        return module_command("trusty_memory.workers.embedder.worker")
    if service == p.EMBEDDER_BULK_SERVICE:
        return module_command("trusty_memory.workers.embedder.worker", "--bulk")
    if service == p.DREAMER_SERVICE:
        return module_command("trusty_memory.dreamer", "--supervised")
    if service == p.MCP_HOST_SERVICE:
        return module_command("trusty_memory.client.mcp.host")
    if service.startswith(p.PALACE_SERVICE_PREFIX):
        palace = p.palace_of(service)
        # One argument, ``--palace=NAME``: a name may start with '-' ("-x", "--help"),
        # which argparse would read as an option if it stood on its own.
        argv = module_command("trusty_memory.workers.palace_process", f"--palace={palace}")
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
        self.crashes: OrderedDict[tuple[str, int], Crashes] = OrderedDict()
        self.young_fork_deaths = 0  # forked workers dead before their first answer, in a row
        self.fork_off_reason: str | None = None  # why forking stopped (None: it did not)
        self._refusal_logged = False

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
            # A child record forgotten between crashes keeps its back-off.
            child.failures = self.crashes.get((service, slot), Crashes()).in_a_row
            self.children[(service, slot)] = child
        if not child.running and child.restart_at is None:
            self._spawn(child)
        child.stopping = False
        return child

    def active(self, service: str, slot: int = 0) -> bool:
        """Whether ``(service, slot)`` has a process running or a restart scheduled, not
        told to stop: a request for it needs no new process."""
        child = self.children.get((service, slot))
        return (
            child is not None
            and not child.stopping
            and (child.running or child.restart_at is not None)
        )

    def _spawn(self, child: Child) -> None:
        if self._template_starting(child):
            child.restart_at = time.monotonic() + TEMPLATE_POLL_S  # tried again then
            return
        forked = self._fork(child)
        child.popen = forked or subprocess.Popen(
            child.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True
        )
        child.forked = forked is not None
        child.served = False
        child.last_pid = child.popen.pid
        child.started_at = time.monotonic()
        child.restart_at = None
        child.exit_code = None
        child.killed_why = None
        child.starts += 1
        self.log.info("spawned", service=child.service, slot=child.slot, child_pid=child.pid)

    def _template_starting(self, child: Child) -> bool:
        """Whether ``child``, a palace worker, should wait for the template to be ready
        (see ``TEMPLATE_WAIT_S``) rather than start afresh now."""
        if self.template is None or not child.service.startswith(p.PALACE_SERVICE_PREFIX):
            return False
        return self.fork_off_reason is None and self.template.starting(TEMPLATE_WAIT_S)

    def _fork(self, child: Child) -> ForkedProcess | None:
        """A palace worker forked from the template, or None to start it the usual way."""
        if self.template is None or not child.service.startswith(p.PALACE_SERVICE_PREFIX):
            return None
        if self.fork_off_reason is not None:
            return None
        refusals = self.template.refusals
        try:
            return self.template.spawn(module_args(child.argv))
        except TemplateUnavailable as exc:
            if self.template.refusals == refusals:
                self.log.warning("forking failed; starting the worker afresh", error=str(exc))
            elif not self._refusal_logged:  # it will say the same at every fork: once
                self._refusal_logged = True
                self.log.warning(
                    "the template refuses to fork while it has threads; palace workers "
                    "start afresh",
                    error=str(exc),
                )
            return None

    def note_served(self, pid: int) -> None:
        """A local worker answered its first request: its start path works."""
        child = self.by_pid(pid)
        if child is None or child.served:
            return
        child.served = True
        if child.forked:
            self.young_fork_deaths = 0
        if (record := self.crashes.get((child.service, child.slot))) is not None:
            record.in_a_row = 0  # it works now: no loop, whatever came before

    def stop_forking(self, reason: str) -> None:
        """Start palace workers afresh from now until the daemon restarts."""
        if self.fork_off_reason is not None:
            return
        self.fork_off_reason = reason
        self.log.error(
            "forked palace workers die young: forking is off until the daemon restarts; "
            "palace workers start afresh",
            reason=reason,
        )
        if self.template is not None:
            self.template.close()  # its memory is of no more use

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
                level(
                    "child exited",
                    service=child.service,
                    slot=child.slot,
                    child_pid=child.last_pid,
                    code=child.exit_code,
                    exit=describe_exit(child.exit_code, child.killed_why),
                    lived_s=round(lived, 3),
                    forked=child.forked,
                )
                self._note_exit(child, lived)
        return gone

    def _note_exit(self, child: Child, lived: float) -> None:
        """Count a crash (a non-zero exit nobody asked for), and stop forking when forked
        workers keep dying before their first answer."""
        key = (child.service, child.slot)
        crashed = not child.stopping and child.exit_code not in (0, None)
        if not crashed:
            if lived >= QUICK_CRASH_S and key in self.crashes:
                self.crashes[key].in_a_row = 0
            return
        record = self.crashes.pop(key, None) or Crashes()
        self.crashes[key] = record  # now the most recent
        while len(self.crashes) > CRASHES_KEPT:
            self.crashes.popitem(last=False)
        record.in_a_row = record.in_a_row + 1 if lived < QUICK_CRASH_S else 1
        record.total += 1
        record.last_code, record.last_lived_s, record.forked = child.exit_code, lived, child.forked
        record.last_killed_why = child.killed_why
        if child.forked and not child.served and child.killed_why is None:
            self.young_fork_deaths += 1
            if self.young_fork_deaths >= YOUNG_FORK_DEATHS:
                self.stop_forking(
                    f"{self.young_fork_deaths} forked palace workers in a row "
                    f"{describe_exit(child.exit_code)} before their first answer "
                    f"(last: {child.service}, after {lived:.2f} s)"
                )
                child.failures = 0  # the next start is a different path: no back-off

    def crash_loop(self, child: Child, at_least: int) -> Crashes | None:
        """The crash record of ``child`` if it died ``at_least`` times in a row."""
        record = self.crashes.get((child.service, child.slot))
        return record if record is not None and record.in_a_row >= at_least else None

    def crash_status(self) -> dict[str, dict]:
        """Every ``(service, slot)`` that crashed since the daemon started, for ``status``."""
        return {f"{service}#{slot}": c.as_dict() for (service, slot), c in self.crashes.items()}

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
                child.terminate()

    def kill(self, pid: int, why: str | None = None) -> None:
        """SIGKILL a child; ``why`` (the broker gave up on it) is what its exit is called."""
        if why is not None and (child := self.by_pid(pid)) is not None:
            child.killed_why = why
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
