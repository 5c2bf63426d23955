"""Logging for every actor: structlog to stderr, never stdout.

stdout belongs to MCP in ``serve`` mode, so nothing here ever writes to it. Output is JSON
lines when stderr is not a terminal (a daemon's log file, a CI run) and coloured console
lines when it is. ``TRUSTY_MEMORY_LOG`` sets the level; ``RUST_LOG`` is honoured too, so a
drop-in for the Rust ``trusty-memory serve`` keeps working with its users' environments.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

# structlog imports rich (and pygments) whenever rich is installed, only to draw tracebacks
# on a terminal, and transformers brings rich along. That is 7 MB in every process that
# logs, and an idle palace worker is 49 MB without it, so the actors keep it out: console
# lines get plain tracebacks. Modules log through ``get_logger`` below so that this line
# runs before structlog is first imported.
# None in sys.modules makes an import fail (the import system's documented stop); typeshed
# types the values as modules only.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

import structlog  # noqa: E402

get_logger = structlog.get_logger

_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 10,
}


def _level_from_env(default: str) -> int:
    spec = os.environ.get("TRUSTY_MEMORY_LOG") or os.environ.get("RUST_LOG") or default
    # RUST_LOG may look like "info,trusty_memory=debug": take the most verbose level named.
    levels = []
    for part in spec.split(","):
        name = part.rsplit("=", 1)[-1].strip().lower()
        if name in _LEVELS:
            levels.append(_LEVELS[name])
    return min(levels) if levels else _LEVELS[default]


class TolerantStream:
    """A log sink that never raises: a write or flush that fails with ``OSError`` (ENOSPC on
    a full disk, EIO, a closed pipe) drops that line and counts it.

    A log line is worth less than the actor writing it: before this, a full disk made a log
    write raise ENOSPC inside the broker's loop and killed the whole daemon. Each later
    line tries the file again, so logging resumes by itself once there is room; the first
    line that gets through says how many were dropped.
    """

    def __init__(self, file: TextIO) -> None:
        self.file = file
        self.dropped = 0

    def write(self, text: str) -> int:
        try:
            if self.dropped:
                pending, self.dropped = self.dropped, 0
                try:
                    self.file.write(f'{{"event": "log lines dropped", "dropped": {pending}}}\n')
                except OSError:
                    self.dropped = pending
                    raise
            return self.file.write(text)
        except OSError:
            self.dropped += 1
            return 0
        except ValueError:  # written after the file was closed (interpreter shutdown)
            self.dropped += 1
            return 0

    def flush(self) -> None:
        try:
            self.file.flush()
        except (OSError, ValueError):
            # The buffered text is lost with the failed flush; count it once.
            self.dropped += 1

    def isatty(self) -> bool:
        try:
            return self.file.isatty()
        except (OSError, ValueError):
            return False


def setup_logging(
    actor: str, default_level: str = "warn", file: TextIO | None = None
) -> structlog.stdlib.BoundLogger:
    """Configure structlog for this process and return a logger bound to ``actor``;
    lines go to ``file`` (default: stderr) through a ``TolerantStream``, so a failing log
    write (a full disk) drops the line instead of raising into the actor."""
    level = _level_from_env(default_level)
    file = file or sys.stderr
    sink = file if isinstance(file, TolerantStream) else TolerantStream(file)
    renderer: structlog.typing.Processor
    if sink.isatty():
        renderer = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=sink),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    return structlog.get_logger().bind(actor=actor, pid=os.getpid())
