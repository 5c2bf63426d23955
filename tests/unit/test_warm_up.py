"""The template's warm-up: it must run to the end (a failure is only logged, so a broken
warm-up would silently cost every worker memory) and leave nothing a fork could trip on.

Covers: workers/warm_up.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import structlog

from trusty_memory.common.logs import setup_logging
from trusty_memory.workers.store import state as store_state
from trusty_memory.workers.warm_up import warm_up


class Recorder:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict]] = []

    def warning(self, event: str, **kw) -> None:
        self.warnings.append((event, kw))


@pytest.fixture
def saved_logging():
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_warm_up_runs_through_and_leaves_no_file_thread_or_cached_logger(
    saved_logging, monkeypatch, tmp_path
):
    # A temporary folder of this test's own: the suite's daemons share /tmp, and a
    # template killed mid-warm-up (the reliability tests' kill -9) leaves its folder there.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    setup_logging("template")  # as the template has it: loggers cache on first use
    monkeypatch.delitem(vars(store_state.log), "bind", raising=False)
    before = threads()
    log = Recorder()
    warm_up(log)
    assert log.warnings == []
    assert not list(Path(tempfile.gettempdir()).glob("trusty-memory-warm-up-*"))
    assert threads() == before  # a forked child gets only the forking thread
    # The store's module logger ran during the warm-up but did not cache the template's
    # configuration: a worker's own (its level, its stderr) applies after the fork.
    assert "bind" not in vars(store_state.log)
    assert structlog.get_config()["cache_logger_on_first_use"] is True


def test_a_failing_warm_up_is_logged_not_raised(saved_logging, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("trusty_memory.workers.warm_up.PalaceStore.open", broken)
    log = Recorder()
    warm_up(log)
    assert [event for event, _ in log.warnings] == ["template warm-up failed"]
