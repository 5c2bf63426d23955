"""The supervisor's end of the palace-worker template (``workers/template.py``).

``Template.spawn(argv)`` asks the template to fork a palace worker and returns a
``ForkedProcess``, which answers the part of ``subprocess.Popen`` the supervisor uses
(``pid``, ``poll``, ``wait``, ``terminate``, ``kill``, ``returncode``), so a forked worker
is supervised exactly like a spawned one. Its exit code comes from the template, which
reaps it and reports ``{"exit": pid, "code": c}`` on its stdout.

If the template is gone or does not answer, ``spawn`` raises ``TemplateUnavailable`` and
the supervisor falls back to starting the worker the ordinary way (and a new template
next time): a broken template costs speed, never a palace.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

SPAWN_TIMEOUT_S = 5.0
START_TIMEOUT_S = 30.0  # the template's imports, on a busy machine


class TemplateUnavailable(Exception):
    pass


class ForkedProcess:
    """A worker forked by the template; ``Popen``'s interface as far as the supervisor uses it."""

    def __init__(self, pid: int, template: Template) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._template = template

    def poll(self) -> int | None:
        if self.returncode is None:
            self._template.collect()
            self.returncode = self._template.exits.pop(self.pid, None)
            orphan = self.returncode is None and not self._template.alive()
            if orphan and not _pid_alive(self.pid):
                # Its exit code went down with the template: report it as killed.
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

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
    """The template process: started on first use, restarted after it dies."""

    def __init__(self, log) -> None:
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.exits: dict[int, int] = {}  # pid -> exit code, reported and not yet polled
        self._buffer = b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, argv: list[str]) -> ForkedProcess:
        if not self.alive():
            self._start()
        try:
            os.write(self.proc.stdin.fileno(), (json.dumps({"argv": argv}) + "\n").encode())
            reply = self._reply(SPAWN_TIMEOUT_S)
        except (OSError, TemplateUnavailable) as exc:
            self.close()
            raise TemplateUnavailable(f"worker template: {exc}") from exc
        if "pid" not in reply:
            raise TemplateUnavailable(f"worker template: {reply.get('error', reply)}")
        return ForkedProcess(int(reply["pid"]), self)

    def collect(self) -> None:
        """Read whatever the template has said (exit reports), without waiting."""
        while self.alive() and self._read(0):
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
                pipe.close()
        self.proc = None
        self._buffer = b""

    # -- plumbing --------------------------------------------------------------------

    def _start(self) -> None:
        self.close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trusty_memory.workers.template"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.log.info("worker template started", template_pid=self.proc.pid)

    def _reply(self, timeout: float) -> dict:
        """The next line that is not an exit report."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if "exit" in message:
                    self.exits[int(message["exit"])] = int(message["code"])
                else:
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.alive():
                raise TemplateUnavailable("no answer")
            self._read(remaining)

    def _read(self, timeout: float) -> bool:
        """Read one chunk if there is one within ``timeout``; file exit reports away."""
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            return False
        self._buffer += chunk
        while b"\n" in self._buffer and b'"exit"' in self._buffer.split(b"\n", 1)[0]:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            self.exits[int(message["exit"])] = int(message["code"])
        return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
