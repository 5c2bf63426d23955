"""How far an import, an export or ``mine`` is, on stderr: :class:`Progress`."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import IO

# How often progress is written: redrawn on a terminal; elsewhere (a pipe, a log file,
# ``--json``) a line of its own every few seconds, so a long import is never silent.
TTY_EVERY_S = 0.2
LINE_EVERY_S = 5.0


class Progress:
    """How far an import or export is, on stderr: on a terminal one line redrawn with
    ``\r``, elsewhere a line of its own every ``LINE_EVERY_S`` and one at the end
    (:meth:`finish`: every line read and stored, 100%). A clock thread writes it
    as well as ``update``: while the daemon stores a batch (500 texts to embed take tens of
    seconds) nothing calls ``update``, and the report must go on (with its seconds)."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        stream: IO[str] | None = None,
        every_s: float | None = None,
    ):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s or (TTY_EVERY_S if self.tty else LINE_EVERY_S)
        self.label = label
        self.total = total
        self.started = time.monotonic()
        self.last_draw = 0.0
        self.state: tuple[int, str, float | None, int | None] | None = None
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.clock: threading.Thread | None = None

    def update(
        self,
        done: int,
        unit: str = "lines",
        fraction: float | None = None,
        stored: int | None = None,
    ) -> None:
        """``done`` of ``unit`` read or written so far; ``stored``: how many of them the
        palace holds now (an import's rate is of those)."""
        with self.lock:
            self.state = (done, unit, fraction, stored)
        if self.clock is None:
            self.clock = threading.Thread(target=self._tick, name="progress", daemon=True)
            self.clock.start()
        if self.tty and time.monotonic() - self.last_draw >= self.every_s:
            self._draw()

    def _tick(self) -> None:
        """The clock: a terminal's line each second (its seconds move on), else a line
        every ``every_s``."""
        while not self.stopped.wait(max(self.every_s, 1.0) if self.tty else self.every_s):
            self._draw()

    def text(self) -> str:
        """The report as it stands: percent (when known), counts, rate, seconds."""
        done, unit, fraction, stored = self.state or (0, "lines", None, None)
        elapsed = time.monotonic() - self.started
        if fraction is None and self.total:
            fraction = done / self.total
        pct = f" {100 * fraction:5.1f}%" if fraction is not None else ""
        counted = f", {stored:,} stored" if stored is not None else ""
        rate = (stored if stored is not None else done) / max(elapsed, 1e-9)
        return f"{self.label}:{pct} {done:,} {unit}{counted}, {rate:,.0f}/s, {elapsed:,.0f} s"

    def _draw(self) -> None:
        with self.lock:
            if self.stopped.is_set() or self.state is None:
                return
            self.last_draw = time.monotonic()
            line = f"\r{self.text()} " if self.tty else f"{self.text()}\n"
            with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing to tell
                self.stream.write(line)
                self.stream.flush()

    def finish(self) -> None:
        """The work is done: report how it ended now, whatever the interval (a terminal's
        line redrawn, elsewhere a line of its own, a short run's only one), then
        :meth:`close`."""
        self._draw()
        self.close()

    def close(self) -> None:
        """Stop the clock; a terminal's line is ended, so what follows starts afresh."""
        with self.lock:
            if self.stopped.is_set():
                return
            self.stopped.set()
        if self.clock is not None:
            self.clock.join()
        if self.tty and self.last_draw:
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\n")
                self.stream.flush()


# -- import --------------------------------------------------------------------------
