"""What keeps the two HTTP servers (``serve --http``, ``trusty-memory ui``) answering the
user while another local user holds connections open against them.

Any local user can connect to a loopback port. Without these guards a few thousand
connections that send half a request and one header every few seconds were never closed:
at the descriptor limit the user's own request timed out, and every failed ``accept()``
wrote a traceback to stderr (CPython 3.11's accept loop retries up to ``backlog`` times
per wake-up and logs each failure: hundreds of MB a minute, kept by MCP clients).

* **Head deadline** (``[http] header_timeout_s``): a connection must deliver a complete
  request head within it of being accepted, and of its previous response ending. A
  connection that trickles bytes is closed all the same; uvicorn's own keep-alive timer
  is reset by any byte, so it alone never closed one.
* **Idle timeout** (``[http] idle_timeout_s``): uvicorn's keep-alive timeout, between
  requests.
* **Caps** (``[http] max_connections_per_peer``, ``max_connections``; the total is also
  held to half of the descriptor limit less ``BACKLOG``: ``total_cap``). Over a
  cap, the oldest connection still *waiting for its head* is dropped to make room: the
  user's client sends its head at once, a slow attacker's never arrives, so the slot goes
  to the newcomer. All local users share the peer address 127.0.0.1, which is why the
  per-peer cap sheds rather than refuses. With nothing to shed, the newcomer is closed at
  once, before it holds a descriptor for long.
* **Accept errors** (EMFILE, ENFILE, ...) are counted and logged at most once per
  ``ACCEPT_LOG_INTERVAL_S``, as one line with the count, never one traceback each.

uvicorn is imported inside the functions that need it, as its callers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from trusty_memory.common.config import HttpSettings

ACCEPT_LOG_INTERVAL_S = 10.0
BACKLOG = 128  # also how many accepts asyncio tries per wake-up (and logs, unguarded)
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Sheddable(Protocol):
    def shed(self) -> None: ...


def total_cap(settings: HttpSettings) -> int:
    """``max_connections``, held to half of the soft descriptor limit less ``BACKLOG``:
    asyncio accepts up to ``BACKLOG`` connections in one wake-up before any is checked
    against a cap, and the other half is for the process's own files and sockets, so
    the server does not reach EMFILE by accepting."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return settings.max_connections
    return max(1, min(settings.max_connections, (soft - BACKLOG) // 2))


class ConnectionTable:
    """Every open connection by peer address, and which of them wait for a request head
    (oldest first: the ones to shed when a cap is reached)."""

    def __init__(self, per_peer: int, total: int) -> None:
        self.per_peer = per_peer
        self.total = total
        self.peer_of: dict[Sheddable, str] = {}
        self.count_of: dict[str, int] = {}
        self.waiting: dict[Sheddable, None] = {}  # insertion order: oldest first
        self.shed_count = 0

    def admit(self, conn: Sheddable, peer: str) -> bool:
        """Take ``conn`` in, shedding a waiting connection if a cap is reached; False
        when full of connections that are all being served (the caller closes it)."""
        victim: Sheddable | None = None
        if self.count_of.get(peer, 0) >= self.per_peer:
            victim = self._oldest_waiting(peer)
            if victim is None:
                return False
        elif len(self.peer_of) >= self.total:
            victim = self._oldest_waiting(None)
            if victim is None:
                return False
        if victim is not None:
            self.release(victim)
            self.shed_count += 1
            victim.shed()
        self.peer_of[conn] = peer
        self.count_of[peer] = self.count_of.get(peer, 0) + 1
        return True

    def wait_for_head(self, conn: Sheddable) -> None:
        """``conn`` now owes a request head: the youngest such, the last to be shed."""
        if conn in self.peer_of:
            self.waiting.pop(conn, None)
            self.waiting[conn] = None

    def head_arrived(self, conn: Sheddable) -> None:
        self.waiting.pop(conn, None)

    def release(self, conn: Sheddable) -> None:
        """Forget ``conn`` (closed, or shed); a second call does nothing."""
        self.waiting.pop(conn, None)
        peer = self.peer_of.pop(conn, None)
        if peer is not None:
            left = self.count_of[peer] - 1
            if left:
                self.count_of[peer] = left
            else:
                del self.count_of[peer]

    def _oldest_waiting(self, peer: str | None) -> Sheddable | None:
        for conn in self.waiting:
            if peer is None or self.peer_of.get(conn) == peer:
                return conn
        return None


def guarded_protocol(table: ConnectionTable, header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with ``table``'s caps and the head deadline. Four hooks on
    its protocol methods; the head counts as arrived once uvicorn has a request cycle
    open, and as owed again when that cycle's response is complete."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            peer = self.client[0] if self.client else "?"
            if not table.admit(self, peer):
                transport.abort()
                return
            self._owe_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._request_open():
                self._cancel_timer()
                table.head_arrived(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self._request_open():
                self._owe_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_timer()
            table.release(self)
            super().connection_lost(exc)

        def shed(self) -> None:
            """Close now: a head deadline missed, or a slot needed for a newcomer."""
            self._cancel_timer()
            self.transport.abort()

        def _request_open(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _owe_head(self) -> None:
            self._cancel_timer()
            self.head_timer = self.loop.call_later(header_timeout_s, self.shed)
            table.wait_for_head(self)

        def _cancel_timer(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

    return GuardedH11


def uvicorn_config(app: Any, settings: HttpSettings, **options: Any) -> Any:
    """A ``uvicorn.Config`` for ``app`` with the guards of ``settings`` (module doc)."""
    import uvicorn

    table = ConnectionTable(settings.max_connections_per_peer, total_cap(settings))
    return uvicorn.Config(
        app,
        http=guarded_protocol(table, settings.header_timeout_s),
        timeout_keep_alive=max(1, round(settings.idle_timeout_s)),
        backlog=BACKLOG,
        log_config=None,
        access_log=False,
        lifespan="on",
        **options,
    )


class AcceptErrorLog:
    """A loop exception handler: accept errors are counted and logged as one line per
    ``interval_s`` with the count; any other context goes to the handler it replaced."""

    def __init__(
        self,
        warn: Callable[..., Any],
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], Any] | None,
        interval_s: float = ACCEPT_LOG_INTERVAL_S,
    ) -> None:
        self.warn = warn
        self.previous = previous
        self.interval_s = interval_s
        self.pending = 0
        self.last_logged = float("-inf")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS):
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.pending += 1
        now = time.monotonic()
        if now - self.last_logged >= self.interval_s:
            self.warn(
                "http accept failing, retrying",
                error=exc.strerror,
                failures=self.pending,
                at_most_one_line_per_s=self.interval_s,
            )
            self.pending = 0
            self.last_logged = now


@contextlib.contextmanager
def accept_errors_logged(
    loop: asyncio.AbstractEventLoop, warn: Callable[..., Any]
) -> Iterator[None]:
    """Install :class:`AcceptErrorLog` on ``loop`` for the block, then put back the old."""
    previous = loop.get_exception_handler()
    loop.set_exception_handler(AcceptErrorLog(warn, previous))
    try:
        yield
    finally:
        loop.set_exception_handler(previous)
