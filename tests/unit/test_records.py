"""The broker's plain records (``broker/records.py``): a worker's rate over its window, the
worker a request goes to, and what a moved palace's callers are told. Autoscale weighs
the rate and ``status`` shows it, so the arithmetic is pinned here, apart from a daemon.

Covers: broker/records.py
"""

from __future__ import annotations

import os

from trusty_memory.broker.records import (
    RATE_WINDOW_S,
    Closing,
    Pending,
    Service,
    WorkerRec,
    rss_mb,
)
from trusty_memory.common.messages import PalaceRenameParams
from trusty_memory.common.methods import Method


def worker(role: str, name: bytes, inflight: int = 0) -> WorkerRec:
    rec = WorkerRec(identity=name, service="palace:p", role=role, pid=1, last_seen=0.0)
    for i in range(inflight):
        rec.inflight[(b"c", str(i))] = Pending(b"c", str(i), b"", "memory_recall", 0.0, False)
    return rec


def test_the_rate_counts_only_the_last_window_and_forgets_older_answers():
    rec = worker("reader", b"r")
    rec.answered.extend([0.0, 1.0, 50.0, 55.0, 59.0])
    # At 60 s the window is 50-60 s: three answers in ten seconds.
    assert rec.rate(60.0) == 3 / RATE_WINDOW_S
    assert list(rec.answered) == [50.0, 55.0, 59.0]  # the older ones are dropped for good
    assert rec.rate(100.0) == 0.0


def test_answered_since_counts_from_the_newest():
    rec = worker("reader", b"r")
    rec.answered.extend([1.0, 2.0, 3.0, 4.0])
    assert rec.answered_since(2.5) == 2
    assert rec.answered_since(0.0) == 4
    assert rec.answered_since(5.0) == 0


def test_a_write_goes_to_the_writer_and_a_read_to_the_least_loaded_reader_first():
    writer, reader = worker("writer", b"w", inflight=1), worker("reader", b"r", inflight=1)
    service = Service("palace:p", workers=[writer, reader])
    assert service.pick(write=True) is writer
    assert service.pick(write=False) is reader  # a tie: the writer's queue is for writes
    reader.inflight.update(worker("reader", b"x", inflight=2).inflight)
    assert service.pick(write=False) is writer
    assert service.writer is writer
    assert Service("palace:q").pick(write=False) is None


def test_a_service_is_busy_while_anything_waits_or_runs():
    service = Service("palace:p", workers=[worker("writer", b"w")])
    assert not service.busy
    service.workers[0].inflight.update(worker("writer", b"v", inflight=1).inflight)
    assert service.busy


def test_a_closing_palace_tells_its_callers_what_became_of_it():
    renamed = PalaceRenameParams(name="old", new_name="new")
    assert Closing("old", Method.PALACE_RENAME, renamed, b"c", "1").gone == "renamed to new"
    assert Closing("old", Method.PALACE_DELETE, None, b"c", "1").gone == "deleted"


def test_rss_is_read_for_a_live_process_and_unknown_for_a_gone_one():
    mine = rss_mb(os.getpid())
    assert mine is not None and mine > 0
    assert rss_mb(2**22 + 12345) is None
