"""Timing spans of one request across every actor it crosses, on demand (issue 41).

A recall crosses five processes: ``serve``'s relay, the MCP host (the SDK), the broker, a
palace worker and the embedder (through the broker again). To see which hop costs what,
set ``TRUSTY_MEMORY_TRACE`` to a directory before starting them (the daemon's children
inherit it): each process then appends one JSON line per span to
``<dir>/spans-<pid>.jsonl``::

    {"t": trace id, "s": stage, "a": start ns, "b": end ns, "p": pid}

Start and end are ``time.perf_counter_ns()``, which on Linux and macOS reads the one
monotonic clock every process on the host shares, so spans from different processes can
be laid on one time line. The trace id starts with the client (an MCP request's
``params._meta.trustyTrace``; ``serve``'s relay makes one up when a traced request has
none) and travels in the envelope's ``Request.trace``, which is left out of the encoding
when empty, so an untraced request's bytes are what they were.

Off (the default) it costs each instrumented place one test of the module constant
:data:`ON`: callers read the clock, look the trace id up and format nothing unless it is
set. ``bench/trace_recall.py`` collects the spans and prints the per-stage breakdown.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import os
import threading
import time
from typing import Any

ENV = "TRUSTY_MEMORY_TRACE"
META_KEY = "trustyTrace"  # in an MCP request's params._meta

DIR: str = os.environ.get(ENV, "")
ON: bool = bool(DIR)

# The trace of the request this task or thread is working on: how the id reaches an
# envelope built deep below the code that read it (the MCP host's tool call, a palace
# worker's call to the embedder) without threading it through every signature.
current: contextvars.ContextVar[str] = contextvars.ContextVar("trusty_trace", default="")

now = time.perf_counter_ns  # callers read it only when ON

FLUSH_S = 0.1  # spans reach the file this often, from a thread of their own

_lock = threading.Lock()
_pending: list[str] = []
_flusher_pid = 0
_marks: dict[tuple[str, str], int] = {}


def span(trace: str, stage: str, start: int, end: int | None = None) -> None:
    """Record one span (call only when :data:`ON` and ``trace`` is set).

    The line is only queued here: a thread writes the queue out every :data:`FLUSH_S`
    (and at exit), so the file write never lands inside the next span being timed."""
    global _flusher_pid
    end = now() if end is None else end
    pid = os.getpid()
    line = json.dumps({"t": trace, "s": stage, "a": start, "b": end, "p": pid})
    with _lock:
        _pending.append(line)
        if _flusher_pid != pid:  # first span, or a forked child's first
            _flusher_pid = pid
            threading.Thread(target=_flush_loop, name="trace-flush", daemon=True).start()
            atexit.register(flush)


def flush() -> None:
    """Write the queued spans to this process's file."""
    with _lock:
        lines = _pending[:]
        _pending.clear()
    if lines:
        os.makedirs(DIR, exist_ok=True)
        with open(os.path.join(DIR, f"spans-{os.getpid()}.jsonl"), "a") as out:
            out.write("\n".join(lines) + "\n")


def _flush_loop() -> None:
    while True:
        time.sleep(FLUSH_S)
        flush()


def mark(trace: str, name: str, at: int | None = None) -> None:
    """Remember a moment of ``trace`` for a span that ends in another function."""
    if trace:
        if len(_marks) > 10_000:  # marks whose span never ended (a failed request)
            _marks.clear()
        _marks[(trace, name)] = now() if at is None else at


def since(trace: str, name: str, stage: str) -> None:
    """Record ``stage`` from the moment :func:`mark` kept under ``name`` until now."""
    if trace and (start := _marks.pop((trace, name), None)) is not None:
        span(trace, stage, start)


def of_meta(params: Any) -> str:
    """The trace id a JSON-RPC request's ``params._meta`` carries, or ''."""
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            value = meta.get(META_KEY)
            if isinstance(value, str):
                return value[:64]
    return ""


def read_spans(directory: str) -> list[dict[str, Any]]:
    """Every span the processes tracing into ``directory`` have written."""
    spans: list[dict[str, Any]] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("spans-") and name.endswith(".jsonl"):
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    if line.endswith("\n"):
                        spans.append(json.loads(line))
    return spans
