"""What the broker keeps about requests, workers, services and palaces being moved.

Plain records, no I/O: ``broker.py`` holds them in its maps and mutates them in its loop;
``status_report.py`` reads them. A worker's answered-request times feed its rate, which
``status`` shows and autoscale (``reader_scaling.py``) weighs.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from trusty_memory.common.methods import Method

RATE_WINDOW_S = 10.0
RATE_WINDOW_MAX = 100_000


@dataclass
class Pending:
    """A request accepted from a client and not answered yet."""

    client: bytes
    rid: str
    frame: bytes
    method: str
    deadline: float
    write: bool
    attempts: int = 0


@dataclass
class WorkerRec:
    identity: bytes
    service: str
    role: str
    pid: int
    last_seen: float
    inflight: dict[tuple[bytes, str], Pending] = field(default_factory=dict)
    seq: int = 0  # the palace change-log seq it has applied (palace workers)
    remote: bool = False  # on another host: not our child (see the module's docstring)
    host: str = ""
    answered: deque[float] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW_MAX))

    def rate(self, now: float) -> float:
        """Requests answered per second over the last ``RATE_WINDOW_S``."""
        while self.answered and self.answered[0] < now - RATE_WINDOW_S:
            self.answered.popleft()
        return len(self.answered) / RATE_WINDOW_S

    def answered_since(self, since: float) -> int:
        """Requests answered after ``since`` (counted from the newest: the recent ones)."""
        count = 0
        for at in reversed(self.answered):
            if at < since:
                break
            count += 1
        return count


@dataclass
class Service:
    name: str
    workers: list[WorkerRec] = field(default_factory=list)
    queue: deque[Pending] = field(default_factory=deque)
    last_used: float = field(default_factory=time.monotonic)
    # Requests other than the dreamer's, and when the last one came: how the dreamer
    # tells that a palace is idle without its own traffic counting as use.
    foreground_requests: int = 0
    last_foreground: float = field(default_factory=time.monotonic)

    def pick(self, write: bool) -> WorkerRec | None:
        """The writer for a write; for a read the least-loaded worker, readers first on a
        tie (the writer's queue is where writes wait)."""
        candidates = [w for w in self.workers if not write or w.role in ("writer", "embedder")]
        return min(candidates, key=lambda w: (len(w.inflight), w.role == "writer"), default=None)

    @property
    def writer(self) -> WorkerRec | None:
        return next((w for w in self.workers if w.role == "writer"), None)

    @property
    def busy(self) -> bool:
        return bool(self.queue) or any(w.inflight for w in self.workers)


@dataclass
class Closing:
    """A palace whose workers are stopping so that its directory can move."""

    palace: str
    method: str  # one of methods.PALACE_MOVE_METHODS
    params: Any
    client: bytes
    rid: str
    started: float = field(default_factory=time.monotonic)
    killed: bool = False

    @property
    def gone(self) -> str:
        """What happened to the palace, for the errors its callers get."""
        if self.method == Method.PALACE_RENAME:
            return f"renamed to {self.params.new_name}"
        return "deleted"


def rss_mb(pid: int) -> float | None:
    """Resident memory of a local process, from /proc (None where unknown)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None
