"""A log write that fails (a full disk) must drop the line, never raise into the actor.

Covers: common/logs.py
"""

from __future__ import annotations

import contextlib
import io

import structlog

from trusty_memory.common.logs import TolerantStream, setup_logging


def test_logging_to_a_full_device_drops_lines_instead_of_raising():
    """``/dev/full`` fails every write with ENOSPC, as a full disk does: before the sink, that
    error escaped the log call and killed the broker's loop."""
    full = open("/dev/full", "w", buffering=1)  # noqa: SIM115
    try:
        log = setup_logging("test", default_level="info", file=full)
        for i in range(50):
            log.info("still working", i=i)  # would raise OSError(ENOSPC) without the sink
        log.error("and errors too")
    finally:
        structlog.reset_defaults()
        with contextlib.suppress(OSError):  # closing flushes into the full device too
            full.close()


def test_the_sink_counts_dropped_lines_and_says_so_once_writes_work_again():
    """Lines lost while the disk was full are counted and reported by the first line that
    gets through, so the log shows the gap instead of hiding it."""

    class FlakyFile(io.StringIO):
        full = True

        def write(self, text: str) -> int:
            if self.full:
                raise OSError(28, "No space left on device")
            return super().write(text)

    target = FlakyFile()
    sink = TolerantStream(target)
    for _ in range(3):
        assert sink.write("lost\n") == 0
    assert sink.dropped == 3
    target.full = False
    sink.write("back\n")
    assert sink.dropped == 0
    assert target.getvalue() == '{"event": "log lines dropped", "dropped": 3}\nback\n'
