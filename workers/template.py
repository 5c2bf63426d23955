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
arguments of ``python -m trusty_memory.workers.palace_process``) to the template's stdin and
reads ``{"pid": N}`` (or ``{"error": "..."}``) from its stdout. The template says
``{"ready": true}`` once its imports are done; whenever a child exits,
the template reaps it and writes ``{"exit": PID, "code": C}`` (C negative: killed by
signal -C, as ``subprocess`` reports it). ``broker/forks.py`` is the other end.

What must never happen in the template before a fork
----------------------------------------------------
A forked child gets a copy of the template's memory but only the thread that called
``fork``. Any other thread's state is copied frozen mid-flight: a lock it held stays held
for ever, a pool it ran is a list of threads that no longer exist. So, before a fork:

- **no thread pools**: a BLAS or OpenMP pool (numpy's OpenBLAS starts one thread per core
  when numpy is imported: 16 on a 16-core host, 1 on a 2-core one where the main thread
  does the work) is capped to one thread by the environment ``forks.Template.start``
  gives this process, because the cap only takes effect if set before numpy loads;
- **no threads of our own, no ZeroMQ context** (its I/O thread), no hnswlib batch added
  with more than one thread (``warm_up.py`` adds small batches on this thread);
- **no file, socket or lock** left open that a child could share by accident.

``threads()`` checks this at every fork: with more than one thread here the template
refuses (``{"error": ..., "threads": N}``) and the supervisor starts that worker afresh,
saying why once in the log. On a 16-core host with Python 3.12.3 and numpy 2.5.2, forks
from a multi-threaded template died with SIGSEGV about 50 ms after opening their palace;
this machine (2 cores) could not reproduce the crash, so the supervisor also stops
forking altogether when forked workers die young twice in a row (``broker/forks.py``).
A child enables ``faulthandler`` on the daemon's stderr, so a crash in it leaves a
traceback in the daemon log rather than no trace at all.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import select
import signal
import sys
import threading
import time

from trusty_memory.common.home import CRASH_TEST_ENV, PARENT_ENV, expected_parent

PARENT_CHECK_S = 1.0
# Test-only: a thread started in the template once it is ready (a fork must be refused).
# ``home.CRASH_TEST_ENV`` is the other test-only switch a forked child reads.
TEMPLATE_THREAD_ENV = "TRUSTY_MEMORY_TEST_TEMPLATE_THREAD"
# Test-only: seconds the template sleeps before it prepares (a slow start, made certain).
TEMPLATE_DELAY_ENV = "TRUSTY_MEMORY_TEST_TEMPLATE_DELAY_S"


def threads() -> tuple[int, list[str]]:
    """How many threads this process has, native ones included, and what they are.

    ``/proc/self/task`` counts every thread (BLAS and OpenMP pools, library threads), named
    by their ``comm``; ``threading`` knows Python's own by name, and is all there is off
    Linux.
    """
    python = {t.native_id: t.name for t in threading.enumerate()}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return len(python), sorted(python.values())
    names = []
    for task in tasks:
        if int(task) in python:
            names.append(python[int(task)])
            continue
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(f"native:{comm.read().strip()}")
        except OSError:
            names.append("native:?")
    return max(len(tasks), len(python)), sorted(names)


def preload() -> None:
    """Import what every palace worker needs (the heavy part of its start-up): the
    template's import phase, which ``main()`` runs once ^C is ignored, in this order."""
    # First: the store's package keeps sqlite-utils from loading pandas (see its __init__).
    import trusty_memory.workers.store  # lazy: first, before sqlite-utils

    # isort: split
    import hnswlib  # noqa: F401
    import msgspec  # noqa: F401
    import numpy  # noqa: F401
    import sqlite_utils  # noqa: F401
    import zmq  # noqa: F401

    # The worker code (palace, reader, writer).
    import trusty_memory.workers.palace_process  # noqa: F401  # lazy: the import phase
    from trusty_memory.common.logs import setup_logging  # lazy: the import phase

    setup_logging("template")  # structlog's processors built once, shared


def warm() -> None:
    """Run the store code once (``warm_up.py``) and hand back what that freed, so that
    children copy fewer of the template's pages."""
    from trusty_memory.common.logs import get_logger  # lazy: after the import phase
    from trusty_memory.workers.base import release_freed_memory  # lazy: after the import phase
    from trusty_memory.workers.warm_up import warm_up  # lazy: after the import phase

    warm_up(get_logger().bind(actor="template", pid=os.getpid()))
    gc.collect()
    release_freed_memory()


def child(argv: list[str], wakeup: tuple[int, int]) -> None:
    """In the forked child: become a palace worker; never return into the template loop."""
    code = 1
    try:
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
        # A crash in native code leaves a traceback on stderr, which is the daemon's log.
        faulthandler.enable(file=sys.stderr, all_threads=True)
        if os.environ.get(CRASH_TEST_ENV) == "forked":
            os.kill(os.getpid(), signal.SIGSEGV)
        from trusty_memory.workers.palace_process import main  # lazy: loaded in the import phase

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
    parent = expected_parent()
    wakeup = os.pipe()  # SIGCHLD wakes the loop through it, to reap at once
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the daemon
    if delay := os.environ.get(TEMPLATE_DELAY_ENV):
        time.sleep(float(delay))
    preload()
    warm()
    gc.freeze()
    if os.environ.get(TEMPLATE_THREAD_ENV) == "1":
        threading.Thread(target=time.sleep, args=(3600,), name="test-thread", daemon=True).start()
    count, names = threads()
    tell({"ready": True, "threads": count, "thread_names": names})
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
    count, names = threads()
    if count > 1:
        return {
            "error": f"the template has {count} threads ({', '.join(names)}); "
            "forking a multi-threaded process can crash its child",
            "threads": count,
        }
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork failed: {exc}"}
    if pid == 0:
        child(argv, wakeup)
    return {"pid": pid}


if __name__ == "__main__":
    sys.exit(main())
