"""The supervisor's end of the palace-worker template (``workers/template.py``).

``Template.spawn(argv)`` asks the template to fork a palace worker and returns a
``ForkedProcess``, which answers the part of ``subprocess.Popen`` the supervisor uses
(``pid``, ``poll``, ``wait``, ``terminate``, ``kill``, ``returncode``), so a forked worker
is supervised exactly like a spawned one. Its exit code comes from the template, which
reaps it and reports ``{"exit": pid, "code": c}`` on its stdout.

The broker's loop must never wait on the template: ``start`` launches it without waiting,
``collect`` (called every housekeeping turn) reads what it said, and ``spawn`` is used
only once it has said it is ready, after which a fork answers in milliseconds. While the
template is starting, or if it is gone or does not answer, ``spawn`` raises
``TemplateUnavailable`` and the supervisor starts the worker the ordinary way: a broken
template costs speed, never a palace.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import time
from collections import deque

from trusty_memory.common.home import pid_alive
from trusty_memory.common.launch import module_command

SPAWN_TIMEOUT_S = 2.0  # a ready template forks in milliseconds
# Thread pools capped before the template imports numpy: a pool's threads would make every
# fork a copy of a multi-threaded process (see the template's docstring). A palace worker's
# vector arithmetic is small; one thread serves it, and a hundred palaces do not each start
# one thread per core.
SINGLE_THREADED = {
    name: "1"
    for name in (
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "RAYON_NUM_THREADS",
    )
}


class TemplateUnavailable(Exception):
    pass


class ForkedProcess:
    """A worker forked by the template; ``Popen``'s interface as far as the supervisor uses it."""

    def __init__(self, pid: int, template: Template) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._template = template
        self._generation = template.generation

    def poll(self) -> int | None:
        if self.returncode is None:
            self._template.collect()
            self.returncode = self._template.exits.pop(self.pid, None)
        orphan = self.returncode is None and (
            self._generation != self._template.generation or not self._template.alive()
        )
        if orphan and not pid_alive(self.pid):
            # Its template died, and its exit code with it: the kernel still knows if it lives.
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if timeout is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
            time.sleep(0.02)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Template:
    """The template process: started without waiting, restarted after it dies."""

    def __init__(self, log) -> None:
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.generation = 0  # which template: a new one for every start
        self.ready = False
        self.started_at = 0.0  # monotonic, when this template was launched
        self.exits: dict[int, int] = {}  # pid -> exit code, reported and not yet polled
        self.threads: int | None = None  # the template's threads when it said it was ready
        self.thread_names: list[str] = []
        self.refusals = 0  # forks refused because the template had threads
        self._replies: deque[dict] = deque()
        self._buffer = b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Launch the template if it is not running; returns at once."""
        if self.alive():
            return
        self.close()
        self.generation += 1
        self.started_at = time.monotonic()
        self.proc = proc = subprocess.Popen(
            module_command("trusty_memory.workers.template"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env={**os.environ, **SINGLE_THREADED},
        )
        assert proc.stdout is not None  # stdout=PIPE
        os.set_blocking(proc.stdout.fileno(), False)
        self.log.info("worker template started", template_pid=proc.pid)

    def starting(self, within_s: float) -> bool:
        """Launched less than ``within_s`` ago, alive, and not ready yet."""
        self.collect()
        return not self.ready and self.alive() and time.monotonic() - self.started_at < within_s

    def spawn(self, argv: list[str]) -> ForkedProcess:
        """Fork a worker; raises ``TemplateUnavailable`` at once if the template is not ready."""
        self.collect()
        if not (self.ready and self.alive()):
            self.start()
            raise TemplateUnavailable("worker template: not ready yet")
        proc = self.proc
        assert proc is not None and proc.stdin is not None  # alive(), started with stdin=PIPE
        try:
            os.write(proc.stdin.fileno(), (json.dumps({"argv": argv}) + "\n").encode())
            reply = self._reply(SPAWN_TIMEOUT_S)
        except (OSError, TemplateUnavailable) as exc:
            self.close()
            raise TemplateUnavailable(f"worker template: {exc}") from exc
        if "pid" not in reply:
            if "threads" in reply:
                self.refusals += 1
            raise TemplateUnavailable(f"worker template: {reply.get('error', reply)}")
        return ForkedProcess(int(reply["pid"]), self)

    def collect(self) -> None:
        """Take in whatever the template has said (ready, exit reports), without waiting."""
        while self._read(0):
            pass

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:  # both are PIPEs (start)
                    pipe.close()
        self.proc = None
        self.ready = False
        self._replies.clear()
        self._buffer = b""

    # -- plumbing --------------------------------------------------------------------

    def _reply(self, timeout: float) -> dict:
        """The template's answer to the request just written."""
        deadline = time.monotonic() + timeout
        while not self._replies:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.alive():
                raise TemplateUnavailable("no answer")
            self._read(remaining)
        return self._replies.popleft()

    def _read(self, timeout: float) -> bool:
        """Read one chunk if one comes within ``timeout``, and sort its lines."""
        if self.proc is None:
            return False
        assert self.proc.stdout is not None  # stdout=PIPE (start)
        fd = self.proc.stdout.fileno()
        # poll, not select: a broker with many tcp connections holds descriptors past 1023,
        # where select.select fails.
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        if not poller.poll(max(timeout, 0) * 1000):
            return False
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            return False
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exit" in message:
                self.exits[int(message["exit"])] = int(message["code"])
            elif "ready" in message:
                self.ready = True
                self.threads = message.get("threads")
                self.thread_names = message.get("thread_names", [])
            else:
                self._replies.append(message)
        return True
