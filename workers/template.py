"""The palace-worker template: a process that has imported everything and opened nothing.

A palace worker started from scratch pays ~0.3 s of imports (numpy, hnswlib, sqlite-utils,
structlog, msgspec, pyzmq and our own modules) and ~45 MB of memory for them, and a user
with a hundred project palaces pays that a hundred times. So the supervisor starts this
template once; it imports the worker code, runs it once on a throw-away palace (so that
what a first run writes, specialised bytecode and lazily built caches, is written once
here: ``warm_up.py``), freezes its objects out of the garbage collector (so no
collection in a child ever writes to those pages), and then only forks:
each palace writer or reader is a child that shares the template's code and library pages
copy-on-write.

Protocol, one JSON object per line: the supervisor writes ``{"argv": [...]}`` (the
arguments of ``python -m trusty_memory.workers.palace``) to the template's stdin and
reads ``{"pid": N}`` (or ``{"error": "..."}``) from its stdout. The template says
``{"ready": true}`` once its imports are done; whenever a child exits,
the template reaps it and writes ``{"exit": PID, "code": C}`` (C negative: killed by
signal -C, as ``subprocess`` reports it). ``broker/forks.py`` is the other end.

Nothing here may start a thread or a ZeroMQ context before a fork: a child gets only the
forking thread, and a context must be created in the process that uses it.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys

PARENT_CHECK_S = 1.0


def preload() -> None:
    """Import what every palace worker needs (the heavy part of its start-up)."""
    import hnswlib  # noqa: F401
    import msgspec  # noqa: F401
    import numpy  # noqa: F401
    import sqlite_utils  # noqa: F401
    import zmq  # noqa: F401

    import trusty_memory.workers.palace
    import trusty_memory.workers.reader
    import trusty_memory.workers.writer  # noqa: F401
    from trusty_memory.logs import setup_logging

    setup_logging("template")  # structlog's processors built once, shared


def warm() -> None:
    """Run the store code once (``warm_up.py``) and hand back what that freed, so that
    children copy fewer of the template's pages."""
    from trusty_memory.logs import get_logger
    from trusty_memory.workers.base import release_freed_memory
    from trusty_memory.workers.warm_up import warm_up

    warm_up(get_logger().bind(actor="template", pid=os.getpid()))
    gc.collect()
    release_freed_memory()


def child(argv: list[str], wakeup: tuple[int, int]) -> None:
    """In the forked child: become a palace worker; never return into the template loop."""
    code = 1
    try:
        from trusty_memory.home import PARENT_ENV

        os.environ[PARENT_ENV] = str(os.getppid())  # the template is this worker's supervisor
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for fd in wakeup:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # stdout is the template's reply pipe
        os.close(devnull)
        gc.enable()
        from trusty_memory.workers.palace import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    from trusty_memory.home import expected_parent

    parent = expected_parent()
    wakeup = os.pipe()  # SIGCHLD wakes the loop through it, to reap at once
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the daemon
    preload()
    warm()
    gc.freeze()
    tell({"ready": True})
    pending = b""
    while os.getppid() == parent:
        ready, _, _ = select.select([0, wakeup[0]], [], [], PARENT_CHECK_S)
        if wakeup[0] in ready:
            while _drain(wakeup[0]):
                pass
        reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0  # the supervisor closed the pipe
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            tell(spawn(line, wakeup))
    return 0


def reap() -> None:
    """Collect every child that exited and tell the supervisor its exit code."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        tell({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def tell(reply: dict) -> None:
    os.write(1, (json.dumps(reply) + "\n").encode())


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def spawn(line: bytes, wakeup: tuple[int, int]) -> dict:
    try:
        argv = json.loads(line)["argv"]
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
            raise ValueError("argv must be a list of strings")
    except (ValueError, KeyError, TypeError) as exc:
        return {"error": f"bad spawn request: {exc}"}
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork failed: {exc}"}
    if pid == 0:
        child(argv, wakeup)
    return {"pid": pid}


if __name__ == "__main__":
    sys.exit(main())
