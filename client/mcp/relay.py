"""``serve``'s stdio side when the daemon is local: a relay to the daemon's MCP host.

Why a relay: an agent host spawns one ``serve`` per session, and each used to load the MCP
SDK and pydantic itself, about 70 MB and half a second per session. Now the SDK runs once
per daemon, in the MCP host (``mcp/host.py``), and ``serve`` is this: the stdio edge
(``mcp/stdio.py``: framing, the instant ``initialize``, contract spellings) plus a line
pipe to the host over a private Unix socket. The standard library only, so a session
costs what a bare interpreter costs.

What the relay answers itself, without the daemon:

* ``initialize``: the edge answers at once, as before; the relay remembers the client's
  parameters and hands them to the host in its hello, so a (re)connected host session is
  initialised the same way.
* ``ping`` and a plain ``tools/list`` once the session is initialised: the tool table is
  plain data (``mcp/tool_sets.py``) and a test holds these answers equal to the SDK's, for
  every protocol revision. So a session that only lists tools starts no daemon, and
  ``tools/list`` comes back in milliseconds after spawn.

Everything else (``tools/call``, unusual forms of the above, notifications, the client's
answers) goes to the host, in order, on one connection. The first message that needs the
daemon starts it if none runs (one line on stderr says so: the first start loads the
embedding model). If the connection drops, every request still waiting on it is answered
with an error (never left hanging) and the next one reconnects.

Nothing here grows without bound: the edge stops reading stdin while too many requests
await answers, too many answers await the client, or too many messages wait in this
relay's outbox (:meth:`Relay.backlog`); a host that stops reading (it bounds each
session's pending work too) blocks the forwarder's ``sendall``, which fills the outbox,
which stops stdin. Answers from the host are always read, so they can always drain.

Wire to the host: a stream of JSON lines (UTF-8). The relay's first line is a hello,
``{"palace": ..., "tools": "contract" or "extended", "initialize": params or null,
"initialized": bool, "handshake_id": id}``; then JSON-RPC messages both ways. Lines are
bounded both ways by the limits of ``lines.line_limits``: a request that would be
longer than the host reads is answered here; a reply line from the host that is longer
than the relay reads, or not JSON, is skipped and its request answered with an error
(its id read from the line), never left waiting.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from trusty_memory.client.mcp.lines import (
    READ_CHUNK,
    IdScanner,
    Line,
    LineLimits,
    LineSplitter,
    TooLong,
    salvage,
)
from trusty_memory.client.mcp.stdio import (
    EOF,
    EOF_DRAIN_S,
    GRACE_S,
    HARD_EXIT_S,
    INTERNAL_ERROR,
    StdioEdge,
    dump_line,
    error_message,
    exit_after,
    id_key,
    label_of,
    reply_too_long,
    request_too_long,
)
from trusty_memory.common import tracing
from trusty_memory.common.config import load_config

START_TIMEOUT_S = 60.0  # a daemon start, model preparation included


_VERBOSITY = {"trace": 10, "debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40}


def _level_wanted() -> int:
    """The most verbose level ``TRUSTY_MEMORY_LOG``/``RUST_LOG`` name (as in ``logs.py``,
    whose import this avoids); warn by default."""
    spec = (os.environ.get("TRUSTY_MEMORY_LOG") or os.environ.get("RUST_LOG") or "warn").lower()
    named = [_VERBOSITY.get(part.split("=")[-1].strip(), 50) for part in spec.split(",")]
    return min(named, default=30)


class LazyLog:
    """The relay's log: structlog is imported only when something is logged, so a quiet
    session never loads it; lower levels only when the environment asks for them."""

    def __init__(self, palace: str | None) -> None:
        self.palace = palace
        level = _level_wanted()
        self.debug_on = level <= 10
        self.info_on = level <= 20
        self._log: Any = None

    def _get(self) -> Any:
        if self._log is None:
            from trusty_memory.common.logs import setup_logging  # lazy: structlog, at the first log

            self._log = setup_logging("serve").bind(default_palace=self.palace)
        return self._log

    def debug(self, event: str, **fields: Any) -> None:
        if self.debug_on:
            self._get().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        if self.info_on:
            self._get().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._get().warning(event, **fields)


class HostUnavailable(Exception):
    """No MCP host could be reached (the message says why, for the client)."""


class HostStarting(HostUnavailable):
    """The daemon runs but its MCP host does not answer yet (it may be starting)."""


def plain_list_or_ping(message: dict[str, Any]) -> bool:
    """A ``ping`` or ``tools/list`` whose answer cannot depend on the SDK's validation."""
    if message.get("method") not in ("ping", "tools/list"):
        return False
    params = message.get("params")
    if params is None or params == {}:
        return True
    return (
        message["method"] == "tools/list"
        and isinstance(params, dict)
        and set(params) == {"cursor"}
        and isinstance(params["cursor"], str)
    )


class ProgressTicker:
    """MCP progress notifications for calls that wait.

    A client that sends a ``progressToken`` with a request hears once a second, while the
    request waits (a daemon starting, the embedding model loading on first use), that it
    is still being worked on, rather than silence until its own timeout. Progress is the
    seconds waited so far, which only grows, as the spec requires. Nothing is sent for a
    request once its answer has gone out: ``done`` and the sending share a lock, and both
    go through the edge's one output queue.
    """

    INTERVAL_S = 1.0

    def __init__(self, edge: StdioEdge) -> None:
        self.edge = edge
        self._lock = threading.Lock()
        self._waiting: dict[str, list[Any]] = {}  # key -> [token, since, what]
        self._thread: threading.Thread | None = None

    def watch(self, key: str, message: dict[str, Any], what: str) -> None:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if not isinstance(token, str | int) or isinstance(token, bool):
            return
        with self._lock:
            self._waiting[key] = [token, time.monotonic(), what]
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mcp-progress", daemon=True)
                self._thread.start()

    def now_waiting_for(self, key: str, what: str) -> None:
        with self._lock:
            if key in self._waiting:
                self._waiting[key][2] = what

    def done(self, key: str) -> None:
        with self._lock:
            self._waiting.pop(key, None)

    def _loop(self) -> None:
        while True:
            time.sleep(self.INTERVAL_S)
            now = time.monotonic()
            with self._lock:
                for token, since, what in self._waiting.values():
                    waited = now - since
                    if waited >= self.INTERVAL_S:
                        params = {"progressToken": token, "progress": round(waited, 1),
                                  "message": f"{what} ({waited:.0f} s)"}  # fmt: skip
                        self.edge.send(
                            {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
                        )


class LineTooLong(Exception):
    """A message that would be longer than the host reads a line (the message says how long)."""


class HostLink:
    """One connection to the MCP host: lines out under a lock, a thread reading lines in.

    ``limits``: what the host reads (``request``, checked before sending) and what is read
    from it (``reply``). A line from the host that is over the limit or not JSON goes to
    ``on_dropped`` with what could be read of it (an :class:`IdScanner` or a ``TooLong``).
    """

    def __init__(
        self,
        sock: socket.socket,
        on_message: Callable[[dict[str, Any]], None],
        on_closed: Callable[[HostLink], None],
        on_dropped: Callable[[IdScanner | TooLong], None],
        limits: LineLimits,
    ) -> None:
        self.sock = sock
        self.limits = limits
        self._send_lock = threading.Lock()
        self.closed = False
        self.line_at = 0  # tracing on: when the line being handled was read
        self._on_message = on_message
        self._on_closed = on_closed
        self._on_dropped = on_dropped
        threading.Thread(target=self._read_loop, name="mcp-host-in", daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        """Send one line; ``LineTooLong`` (nothing sent) if the host would not read it."""
        data = dump_line(message)
        if len(data) - 1 > self.limits.request:
            raise LineTooLong(f"{len(data) - 1} bytes once encoded for the daemon")
        with self._send_lock:
            self.sock.sendall(data)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_loop(self) -> None:
        splitter = LineSplitter(self.limits.reply)
        try:
            while chunk := self.sock.recv(READ_CHUNK):
                for item in splitter.feed(chunk):
                    self._read_one(item)
        except OSError:
            pass
        for item in splitter.end():  # a line cut off by the close: not JSON, or too long
            self._read_one(item)
        self.closed = True
        self.sock.close()
        self._on_closed(self)

    def _read_one(self, item: Line | TooLong) -> None:
        if tracing.ON:
            self.line_at = tracing.now()
        if isinstance(item, TooLong):
            self._on_dropped(item)
            return
        try:
            message = json.loads(item)
        except (ValueError, RecursionError):
            self._on_dropped(salvage(item))
            return
        if isinstance(message, dict):
            self._on_message(message)


class Relay:
    """Routes the edge's messages: answered here, or forwarded to the host in order."""

    def __init__(
        self, edge: StdioEdge, palace: str | None, log: LazyLog, tools: str = "contract"
    ) -> None:
        self.edge = edge
        self.palace = palace
        self.tools = tools  # the tool set, for the local tools/list and the host's session
        self.log = log
        self.init_params: dict[str, Any] | None = None  # the client's initialize
        self.initialized = False  # the client sent notifications/initialized
        self.link: HostLink | None = None
        self._lock = threading.Lock()  # guards _inflight
        self._connect_lock = threading.Lock()  # one connection attempt at a time
        # forwarded, unanswered: key -> (id, label, when sent)
        self._inflight: dict[str, tuple[Any, str, float]] = {}
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.stdin_closed = threading.Event()
        self._announced_start = False
        self._traces: dict[str, str] = {}  # tracing on: trace id of forwarded tools/call
        self.progress = ProgressTicker(edge)
        # The id under which the host's SDK session gets the client's handshake: the host
        # drops the SDK's reply to it (the edge answered the client at once). Unique, so
        # no id a client picks is ever mistaken for it.
        self.handshake_id = f"relay-handshake-{os.getpid()}-{os.urandom(6).hex()}"

    # -- from the edge (its reader thread) ----------------------------------------------

    def sink(self, message: Any) -> None:
        if message is EOF:
            self._outbox.put(EOF)
            return
        method = message.get("method")
        if method == "initialize" and "id" in message:
            # The edge has answered it. The host gets the handshake under handshake_id (in
            # the hello, or below for a client that initialises again) and drops the SDK's
            # reply itself, so the client's id stays free for its later requests.
            self.init_params = message.get("params")
            self.edge.handshake_stays_here(message["id"])
        elif method == "notifications/initialized":
            self.initialized = True
        elif method == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:
                key = id_key(params["requestId"])
                self.progress.done(key)
                with self._lock:  # a cancelled request gets no answer, not even on a drop
                    self._inflight.pop(key, None)
        elif self.init_params is not None and "id" in message and plain_list_or_ping(message):
            self.edge.emit({"jsonrpc": "2.0", "id": message["id"], "result": self._local(method)})
            return
        elif tracing.ON and method == "tools/call" and "id" in message:
            self._trace(message)
        self._outbox.put(message)

    def _trace(self, message: dict[str, Any]) -> None:
        """Tracing on: a ``tools/call`` keeps the client's trace id (``_meta.trustyTrace``)
        or gets one, which the host reads from the line; its relay spans start here."""
        params = message.get("params")
        if not isinstance(params, dict):
            return
        trace = tracing.of_meta(params)
        if not trace:
            trace = f"{os.getpid()}-{os.urandom(4).hex()}"
            meta = params.get("_meta")
            meta = dict(meta) if isinstance(meta, dict) else {}
            meta[tracing.META_KEY] = trace
            message["params"] = {**params, "_meta": meta}
        self._traces[id_key(message["id"])] = trace
        tracing.mark(trace, "relay_in")

    def _local(self, method: str) -> dict[str, Any]:
        if method == "ping":
            return {}
        from trusty_memory.client.mcp.tool_sets import tool_definitions  # lazy: stdlib-only module

        return {"tools": tool_definitions(self.palace, self.tools)}

    # -- the forwarder thread -------------------------------------------------------------

    def forward_loop(self) -> None:
        """Hand messages to the host in stdin order; connect (or start the daemon) on need."""
        while (message := self._outbox.get()) is not EOF:
            try:
                self._forward(message)
            except Exception as exc:  # a bug costs one message, never the session
                self.log.warning("relay failed a message", error=repr(exc))
            self.edge.wake()  # the outbox is a message shorter: stdin may be read again
        self.stdin_closed.set()

    def backlog(self) -> int:
        """Messages from stdin not yet handed to the host. The edge stops reading stdin
        while there are too many (the host is slow to read, or the daemon is starting),
        so a client that floods notifications is pushed back, not queued here."""
        return self._outbox.qsize()

    def _forward(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        is_request = "id" in message and method is not None
        key = id_key(message["id"]) if is_request else ""
        if method == "initialize" and is_request:
            if self.link is not None and not self.link.closed:  # else: in the next hello
                self._send({**message, "id": self.handshake_id})
            return
        if self.link is None or self.link.closed:
            if not is_request:
                return  # moot without a host session (initialized: in the next hello)
            self.progress.watch(key, message, "starting the daemon")
            try:
                self._connect(start=True)
            except HostUnavailable as exc:
                self.progress.done(key)
                text = f"{label_of(message)}: {exc}"
                self.edge.emit(error_message(message["id"], INTERNAL_ERROR, text))
                return
            self.progress.now_waiting_for(key, "waiting for the daemon")
        elif is_request:
            self.progress.watch(key, message, "waiting for the daemon")
        if is_request:
            with self._lock:
                entry = (message["id"], label_of(message), time.perf_counter())
                self._inflight[key] = entry
        self._send(message)
        if tracing.ON and is_request and (trace := self._traces.get(key)):
            tracing.since(trace, "relay_in", "relay.in")

    def _send(self, message: dict[str, Any]) -> None:
        link = self.link
        assert link is not None  # _forward connected first, and a link is never unset
        try:
            link.send(message)
        except OSError:
            link.close()  # the reader thread settles what was in flight
        except LineTooLong as exc:
            # Re-encoding can lengthen a line that fitted on stdin (1e15 is written
            # 1000000000000000.0): answered here, as stdin's limit would have been.
            self.log.warning("request over the line limit", request=label_of(message))
            if "id" in message and "method" in message:
                limit = link.limits.request
                self._from_host(request_too_long(message["id"], limit, f" ({exc})"))

    def connect_if_running(self) -> None:
        """At start-up: join a daemon that already runs (never start one), so the first
        tool call pays no connection set-up."""
        try:
            self._connect(start=False)
        except HostUnavailable:
            pass

    def _connect(self, start: bool) -> None:
        with self._connect_lock:
            if self.link is not None and not self.link.closed:
                return
            sock = open_host(start, self._announce_start)
            link = HostLink(
                sock, self._from_host, self._host_closed, self._dropped, self.edge.limits
            )
            hello: dict[str, Any] = {
                "palace": self.palace,
                "tools": self.tools,
                "initialize": self.init_params,
            }
            hello.update(initialized=self.initialized, handshake_id=self.handshake_id)
            try:
                link.send(hello)
            except LineTooLong as exc:
                link.close()
                raise HostUnavailable(f"the client's initialize is too long ({exc})") from None
            self.link = link
        self.log.debug("relaying to the daemon's MCP host")

    def _announce_start(self) -> None:
        if not self._announced_start:
            self._announced_start = True
            print(
                "trusty-memory: starting the daemon (the first start prepares the embedding"
                " model, which can take a minute)",
                file=sys.stderr,
                flush=True,
            )

    # -- from the host (the link's reader thread) -----------------------------------------

    def _from_host(self, message: dict[str, Any]) -> None:
        if "id" in message and ("result" in message or "error" in message):
            key = id_key(message["id"])
            self.progress.done(key)
            with self._lock:
                entry = self._inflight.pop(key, None)
            if entry is not None and self.log.debug_on:
                ms = round((time.perf_counter() - entry[2]) * 1e3, 1)
                self.log.debug("answered", request=entry[1], ms=ms, error="error" in message)
            if tracing.ON and (trace := self._traces.pop(key, "")) and self.link is not None:
                started = self.link.line_at
                self.edge.emit(message)
                tracing.span(trace, "relay.out", started)
                return
        self.edge.emit(message)

    def _dropped(self, line: IdScanner | TooLong) -> None:
        """A line from the host that could not be read (over the reply limit, or not JSON).

        Its request, named by the id read from the line, gets an error instead. A line
        that names none is a notification (dropped) or a host gone wrong: the link is
        closed, which answers every request still waiting, rather than leave one hanging.
        """
        is_response = bool({"result", "error"} & line.keys) and "method" not in line.keys
        if line.id is None or not is_response:
            if "method" in line.keys:
                too_long = isinstance(line, TooLong)
                self.log.warning("dropped a message from the MCP host", too_long=too_long)
            elif self.link is not None:
                self.log.warning("unreadable line from the MCP host; reconnecting")
                self.link.close()
            return
        with self._lock:
            entry = self._inflight.get(id_key(line.id))
        if entry is None:
            self.log.warning("dropped a reply to no waiting request", id=line.id)
            return
        rid, label, _sent = entry
        if isinstance(line, TooLong):
            self._from_host(reply_too_long(rid, label, self.edge.limits.reply))
        else:
            text = f"{label}: the daemon's MCP host sent a reply that is not JSON; try again"
            self._from_host(error_message(rid, INTERNAL_ERROR, text))

    def _host_closed(self, link: HostLink) -> None:
        with self._lock:
            lost, self._inflight = self._inflight, {}
        if lost:
            self.log.warning("connection to the MCP host lost", unanswered=len(lost))
        for key in lost:
            self.progress.done(key)
        for rid, label, _sent in lost.values():
            text = f"{label}: the connection to the daemon was lost; try again"
            self.edge.emit(error_message(rid, INTERNAL_ERROR, text))

    def close(self) -> None:
        if self.link is not None:
            self.link.close()


# --------------------------------------------------------------------------------------
# Finding (or starting) the daemon's MCP host.


def open_host(start: bool, announce: Callable[[], None]) -> socket.socket:
    """A connected socket to the MCP host of this home's daemon.

    With ``start``, a daemon is started when none runs (under the home's start lock, as
    every client does; ``announce()`` is called if this call starts it), and a host that
    is still starting up is waited for. Without, one attempt is made.
    """
    from trusty_memory.common import home  # lazy: only once a call needs the daemon

    config = load_config()
    record = home.live_daemon(config.home)
    if record is None:
        if not start:
            raise HostUnavailable("no daemon runs")
        record = _start_daemon(config, announce)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return _connect_record(record)
        except HostStarting:
            if not start or time.monotonic() > deadline:
                raise
            if home.live_daemon(config.home) is None:
                raise HostUnavailable(
                    "the daemon stopped while its MCP host was starting"
                ) from None
            time.sleep(0.05)


def _start_daemon(config: Any, announce: Callable[[], None]) -> Any:
    """Start a daemon unless another starter beats us to it; its record once it is live."""
    from trusty_memory.client.spawn import spawn_daemon, start_lock  # lazy: only to start a daemon
    from trusty_memory.common import home  # lazy: only once a call needs the daemon

    with start_lock(config):
        proc = None
        if home.live_daemon(config.home) is None:
            announce()
            proc = spawn_daemon(config)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            record = home.live_daemon(config.home)
            if record is not None:
                return record
            if proc is not None and proc.poll() not in (None, 0):
                break
            time.sleep(0.05)
    raise HostUnavailable(
        f"the daemon did not start within {START_TIMEOUT_S:.0f}s;"
        f" see {config.log_dir / 'daemon.log'}"
    )


def _connect_record(record) -> socket.socket:
    if not record.mcp:
        raise HostUnavailable(
            f"the running daemon (version {record.version}) has no MCP host;"
            " restart it with 'trusty-memory stop'"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(record.mcp)
    except OSError as exc:
        sock.close()
        raise HostStarting(f"the daemon's MCP host is not reachable: {exc.strerror}") from None
    return sock


# --------------------------------------------------------------------------------------
# The process.


def run_relay(edge: StdioEdge, palace: str | None, tools: str = "contract") -> int:
    """Relay stdio to the host until EOF (requests already read finish) or a signal."""
    log = LazyLog(palace)
    edge.log = lambda event, fields: log.warning(event, **fields)
    relay = Relay(edge, palace, log, tools)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        edge.stop_reading()
        stop.set()
        exit_after(HARD_EXIT_S, edge)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    forwarder = threading.Thread(target=relay.forward_loop, name="mcp-forward", daemon=True)
    forwarder.start()
    edge.attach(relay.sink, relay.backlog)
    log.info("serving MCP on stdio", mode="relay")
    relay.connect_if_running()
    while not (relay.stdin_closed.is_set() or stop.is_set()):
        stop.wait(0.05)
    deadline = time.monotonic() + (GRACE_S if stop.is_set() else EOF_DRAIN_S)
    while edge.inflight() and time.monotonic() < deadline:
        if stop.is_set():
            deadline = min(deadline, time.monotonic() + GRACE_S)
        time.sleep(0.01)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # a late signal must not turn exit 0 into death
    relay.close()
    return 0
