"""A throw-away palace run through the store code once, in the template, before any fork.

A palace worker forked from the template shares its pages copy-on-write until it writes
to one, and a first run of the store code writes to many: CPython 3.11 rewrites a
function's bytecode in place as it specialises it, msgspec builds and caches the codec of
each message type on first use, sqlite-utils, numpy and hnswlib fill caches and import
modules lazily, and the worker's first allocations fill the holes import left in memory.
Done here, once, that work is shared by every worker instead of copied into each; what is
left per worker is mostly reference counts (measured in BENCHMARKS.md, "Palace readers,
and idle palaces").

Nothing here may start a thread (a child gets only the forking thread) or leave a file
open; hnswlib adds batches under ``index._PARALLEL_ADD_MIN`` on the calling thread. A
failure costs only the sharing: it is logged and the template serves as before.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import numpy as np
import structlog

from trusty_memory.common import protocol as p
from trusty_memory.common.config import PalaceSettings, load_config
from trusty_memory.common.credentials import detector
from trusty_memory.common.logs import setup_logging
from trusty_memory.common.messages import (
    KgAssertParams,
    ListParams,
    ListResult,
    RecallResult,
    RememberParams,
)
from trusty_memory.common.methods import PARAMS_FOR_METHOD, Method, decode_params
from trusty_memory.workers import palace_process
from trusty_memory.workers.embedder.embedding import DIM
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.write import PalaceStore

DRAWERS_PER_BATCH = 16  # under index._PARALLEL_ADD_MIN: added on this thread
BATCHES = 3
QUERIES = 12  # enough calls for 3.11 to specialise each function on the request path


def warm_up(log) -> None:
    """Run a palace worker's start-up, and its writer and reader paths on a palace in a
    temp dir, once; never raises. Leaves structlog configured as the template had it."""
    try:
        palace_process.parse_args(["--palace", "warm-up", "--reader"])  # argparse compiles regexes
        load_config()
        detector.warm()  # the credential rules, and detect-secrets' plugins they name
        _codecs()
        with _uncached_loggers(), _scratch_dir() as directory:
            _writer_and_reader(directory / "warm-up")
        _log_lines()
    except Exception as exc:  # sharing less is the only cost
        log.warning("template warm-up failed", error=repr(exc))
    finally:
        setup_logging("template")


@contextmanager
def _uncached_loggers() -> Iterator[None]:
    """Loggers the store code uses must not cache the template's configuration: a worker
    configures its own (level, bound names) after the fork."""
    structlog.configure(cache_logger_on_first_use=False)
    try:
        yield
    finally:
        structlog.configure(cache_logger_on_first_use=True)


@contextmanager
def _scratch_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="trusty-memory-warm-up-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _log_lines() -> None:
    """A worker's first log lines build its renderer's state; rendered here into nothing."""
    log = setup_logging("palace", default_level="info", file=io.StringIO())
    for _ in range(3):
        log.bind(palace="warm-up", role="writer").info("palace open", seconds=0.1)
        log.warning("idle work failed", error="warm-up")


def _codecs() -> None:
    """msgspec builds each Struct's codec on first use: the params of every method, the
    envelope, and the replies a palace sends most."""
    for method in PARAMS_FOR_METHOD:
        try:
            decode_params(method, p.encode({}))
        except p.TrustyError:
            pass  # most need fields; the codec is built before the check
    _, frame = p.encode_request(Method.MEMORY_RECALL, {"query": "q"}, palace="warm-up", min_seq=1)
    p.decode_request(frame)
    p.error_response("id", p.ErrorCode.INVALID_PARAMS, "warm-up")
    msgspec.msgpack.decode(p.ok_response("id", {"status": "stored"}, 1))


def _unit_vectors(start: int, n: int) -> np.ndarray:
    """``n`` distinct unit vectors, without ``numpy.random``: no worker imports it, and
    importing it here would cost every worker's RSS (a child maps the template's pages)."""
    rows = np.arange(start + 1, start + n + 1, dtype=np.float32)[:, None]
    vectors = np.sin(rows * np.arange(1, DIM + 1, dtype=np.float32))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _writer_and_reader(palace_dir: Path) -> None:
    settings = PalaceSettings()
    with PalaceStore.open(palace_dir, "warm-up", settings) as store:
        ids = _write(store, 0)
        _read(store)
        store.forget(ids[0])
        store.kg_assert(KgAssertParams(subject="template", predicate="is", object="warm"))
        store.release_index()
        reader = ReadStore.open_reader(palace_dir, "warm-up", settings)
        try:
            _write(store, BATCHES * DRAWERS_PER_BATCH)
            reader.changed()
            reader.refresh()
            _read(reader)
        finally:
            reader.close()
        store.flush()
        store.shrink_memory()


def _write(store: PalaceStore, first: int) -> list[str]:
    ids: list[str] = []
    for batch in range(BATCHES):
        vectors = _unit_vectors(first + batch * DRAWERS_PER_BATCH, DRAWERS_PER_BATCH)
        items = [
            (
                RememberParams(
                    text=f"warm-up note {batch}.{i} about topic {i % 5}",
                    room=f"Room {i % 2}",
                    tags=[f"tag{i % 3}"],
                ),
                vector,
            )
            for i, vector in enumerate(vectors)
        ]
        ids += [result.drawer_id for result in store.remember_batch(items)]
    return ids


def _read(store: ReadStore) -> None:
    for query in _unit_vectors(10_000, QUERIES):
        p.encode(RecallResult(palace="warm-up", query="q", results=store.recall("q", query)))
        store.recall("warm-up topic", query, 5, room="Room 1", tag="tag2", deep=True)
        p.encode(ListResult(palace="warm-up", drawers=store.list(ListParams(limit=5))))
        p.encode(store.info())
        store.kg_query("template")
