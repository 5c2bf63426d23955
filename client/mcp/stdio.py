"""The stdio edge of ``trusty-memory serve``: framing, the handshake, and contract fixes.

Everything MCP goes through the official SDK, except what happens at this edge, where the
SDK and the contract (seeds/000) disagree or where start-up time matters:

* **Framing.** One JSON object per line, UTF-8. A line that is not valid UTF-8 or JSON gets
  ``-32700 Parse error: …`` with ``id: null`` and reading goes on (the SDK's stdio transport
  answers nothing). A JSON array is a batch, which the contract does not support: it gets
  ``-32600`` and none of it is processed.
* **Line limits.** Every hop reads and writes lines under limits derived from the largest
  legal message (``lines.py``). A line over one is never held: it is skipped, its
  top-level ``id`` read on the way, and the side that drops it answers that id with an
  error naming the limit (``request_too_long``, ``reply_too_long``), so no request is left
  without an answer.
* **Methods.** The contract recognises only ``initialize``, ``ping``, ``tools/list``,
  ``tools/call`` and the two notifications; any other request gets ``-32601 Method not
  found: <method>`` (the SDK says ``Method not found`` and puts the method in ``data``).
  Notifications never get an answer.
* **The handshake.** ``initialize`` is answered *here*, at once, with the contract's
  ``serverInfo`` (``default_palace`` only with ``--palace``), and then also handed to the
  SDK, whose own reply is dropped. Importing the SDK costs about a second (pydantic
  models for every protocol revision); answering the handshake before that is what keeps
  spawn -> ``initialize`` near 100 ms, and agents time out slow servers.

This module imports only the standard library, so it can start serving before anything
heavy is loaded. Threads, not asyncio: a blocking reader thread answers the handshake
while the main thread is still importing the SDK, and a writer thread keeps a slow
client from ever blocking the event loop.

The edge also claims fds 0 and 1: the wire moves to private duplicates and fd 1 points
at stderr, so a stray ``print`` (ours or a library's) can never corrupt the JSON-RPC
stream, and fd 0 reads ``/dev/null`` so child processes never steal our input.

* **Backpressure.** A client that writes requests and never reads its answers must be
  pushed back, not buffered: before each line the reader waits while the session is over
  a bound (:data:`MAX_INFLIGHT` requests or :data:`MAX_INFLIGHT_BYTES` of them awaiting
  answers, :data:`MAX_QUEUED_BYTES` of answers the client has not read, or
  :data:`MAX_BACKLOG` messages the SDK side has not taken yet). stdin then stays unread,
  the OS pipe fills and the client's own writes block, as TCP's window would; memory stays
  bounded whatever the client sends. A client that reads its answers never waits here.
"""

from __future__ import annotations

import json
import os
import queue
import select
import threading
from collections.abc import Callable
from typing import Any

from trusty_memory.client.mcp.lines import (
    DEFAULT_LIMITS,
    READ_CHUNK,
    Line,
    LineLimits,
    LineSplitter,
    TooLong,
    configured_limits,
    salvage,
)
from trusty_memory.common.json_depth import nesting_over

# How deeply a request may nest, arrays and objects: the envelope, params and arguments
# above a drawer's metadata (common.bounds.MAX_METADATA_DEPTH, 64), with room to spare.
MAX_NESTING = 100
NESTING_TOO_DEEP = f"nested more than {MAX_NESTING} levels deep (arrays and objects)"

# The handshake revisions the SDK serves (mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS,
# kept in step by a test). Copied, because importing mcp_types costs ~250 ms.
HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]

# The revisions whose sessions get the contract's tool errors (seeds/000, section 6): every
# failed tools/call is JSON-RPC -32603 with a message naming the cause, and arguments a
# tool does not declare are ignored. The spec's text on tool errors reads the same in
# 2024-11-05, 2025-03-26 and 2025-06-18 (a tool's own failure is a result with isError, an
# unknown tool a JSON-RPC error); the contract, a 2024-11-05 client's guide, answers -32603
# instead, and 2025-03-26 sessions, older clients, keep that. Sessions of 2025-06-18 and
# later get the spec's shape: a tool's own failure is a result with ``isError: true`` and
# the message as text, which the model reads and acts on (2025-11-25 says outright that
# argument errors are such failures), and an unknown tool or a malformed call is -32602.
# See :func:`spec_tool_errors`.
CONTRACT_ERROR_VERSIONS = frozenset({"2024-11-05", "2025-03-26"})

# The methods the contract recognises (seeds/000, section 6).
REQUEST_METHODS = frozenset({"initialize", "ping", "tools/list", "tools/call"})
# ``serve --tools extended`` serves palaces and drawers as MCP resources too.
RESOURCE_METHODS = frozenset({"resources/list", "resources/read", "resources/templates/list"})

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
CONNECTION_CLOSED = -32000  # the SDK's answer to calls cut off by shutdown

SERVER_NAME = "trusty-memory"

# The bounds of one session (see Backpressure above). Far above what an agent keeps in
# flight (a handful of parallel tool calls), far below what hurts: at the bound a session
# holds a few MB in ``serve`` and its share of the MCP host.
MAX_INFLIGHT = 64  # requests read from stdin, handed on, not yet answered
MAX_INFLIGHT_BYTES = 16 * 2**20  # their lines' bytes (one request is always let through)
MAX_QUEUED_BYTES = 4 * 2**20  # answers queued for stdout that the client has not read
MAX_BACKLOG = 256  # messages handed on that the relay or SDK has not taken yet
ROOM_POLL_S = 0.1  # while waiting for room: how often stdin is checked for a hang-up

EOF = object()  # handed to the sink when stdin closes

# Receives a message dict, or EOF; called from the reader thread. What it returns is dropped.
Sink = Callable[[Any], object]


def id_key(rid: Any) -> str:
    # 1 and "1" are different JSON-RPC ids; their JSON spellings keep them apart.
    return json.dumps(rid)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def negotiate_version(requested: Any) -> str:
    """The client's protocol version if we serve it, else our latest (the SDK's rule)."""
    return requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


def spec_tool_errors(version: str | None) -> bool:
    """Whether a session of the negotiated ``version`` gets the current spec's tool errors
    (``isError`` results, -32602 for an unknown tool, unknown arguments refused) rather
    than the contract's -32603; None (no handshake yet) is the contract's."""
    return version is not None and version not in CONTRACT_ERROR_VERSIONS


def initialize_result(
    requested_version: Any, version: str, default_palace: str | None, extended: bool = False
) -> dict:
    """The contract's ``initialize`` result (with the extended tools, resources too)."""
    server_info: dict[str, Any] = {"name": SERVER_NAME, "version": version}
    if default_palace:
        server_info["default_palace"] = default_palace
    capabilities: dict[str, Any] = {"tools": {}}
    if extended:
        capabilities["resources"] = {}
    return {
        "protocolVersion": negotiate_version(requested_version),
        "capabilities": capabilities,
        "serverInfo": server_info,
    }


def _tools_call_problem(params: Any) -> str | None:
    """What is wrong with a ``tools/call``'s name or arguments, in the contract's words.

    The SDK would answer ``-32602 Invalid request parameters`` without naming the cause;
    the contract reports every failure to dispatch a tool as ``-32603`` with one, and
    sessions of 2025-06-18 and later get ``-32602`` with the same message (a call that
    does not fit the ``tools/call`` schema is a protocol error, not a tool's failure).
    """
    if not isinstance(params, dict):
        return None  # not JSON-RPC at all: the SDK's -32600 Invalid Request
    name = params.get("name")
    if name is None:
        return "tools/call: missing 'name'"
    if not isinstance(name, str):
        return "tools/call: 'name' must be a string"
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return f"{name}: 'arguments' must be an object"
    return None


def error_message(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def label_of(message: dict[str, Any]) -> str:
    """How an error names a request: the tool for ``tools/call``, else the method."""
    params = message.get("params")
    if message.get("method") == "tools/call" and isinstance(params, dict):
        return str(params.get("name"))
    return str(message.get("method"))


def dump_line(message: dict[str, Any]) -> bytes:
    """One message as a line of UTF-8 JSON, the shortest spelling: an emoji is 4 bytes, not
    the 12 of ``\\ud83d\\ude00``. A string with a lone surrogate (valid JSON, not
    encodable UTF-8) makes the message go out ASCII-escaped, still valid JSON for the
    same string."""
    try:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(message, separators=(",", ":")) + "\n").encode("ascii")


def reply_too_long(rid: Any, label: str, limit: int, size: int | None = None) -> dict[str, Any]:
    """The error that answers a request whose reply did not fit in a line."""
    what = f"the reply is {size} bytes," if size is not None else "the reply is"
    return error_message(
        rid,
        INTERNAL_ERROR,
        f"{label}: {what} longer than a line may be ({limit} bytes); ask for fewer results"
        " (a smaller limit or top_k)",
    )


def request_too_long(rid: Any, limit: int, where: str = "") -> dict[str, Any]:
    """The error that answers a request line over the limit (``id: null`` if it had none)."""
    return error_message(rid, PARSE_ERROR, f"Parse error: line longer than {limit} bytes{where}")


class StdioEdge:
    """Reads JSON-RPC lines from stdin, writes them to stdout, and fixes what the SDK
    does differently from the contract. The SDK side plugs in with :meth:`attach`
    (inbound) and :meth:`emit` (outbound).

    Messages that arrive before :meth:`attach` are kept and replayed in order, so a
    client may pipeline ``tools/list`` behind ``initialize`` while the SDK loads.

    ``limits`` bound stdin's lines (``request``) and the answers :meth:`emit` writes
    (``reply``); by default they follow this home's settings, read when :meth:`start`
    claims the fds.
    """

    def __init__(
        self,
        *,
        version: str,
        default_palace: str | None = None,
        extended: bool = False,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        log: Callable[[str, dict[str, Any]], None] | None = None,
        limits: LineLimits | None = None,
    ) -> None:
        self.version = version
        self.default_palace = default_palace
        self.extended = extended
        self.methods = REQUEST_METHODS | (RESOURCE_METHODS if extended else frozenset())
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        self.log = log or (lambda event, fields: None)
        # Reentrant: attach() replays waiting messages to the sink under the lock (so they
        # keep their order), and a sink may answer one at once through emit().
        self._lock = threading.RLock()
        self._sink: Sink | None = None
        self._pending: list[Any] = []  # messages (and EOF) waiting for attach()
        # id -> (label, line bytes): forwarded to the SDK, unanswered
        self._inflight: dict[str, tuple[str, int]] = {}
        self._inflight_bytes = 0
        self._queued = 0  # bytes in _out, not yet written to stdout
        # The reader waits on this for room (backpressure); whatever makes room notifies.
        self._room = threading.Condition(self._lock)
        self._backlog: Callable[[], int] = lambda: 0  # messages the sink has not taken
        self._line_bytes = 0  # the size of the line being routed (for _inflight)
        self._hung_up = False  # stdin's writer has closed: what is left in it is bounded
        self._configured = limits is not None
        self.limits = limits or DEFAULT_LIMITS
        self._suppress: set[str] = set()  # initialize ids whose SDK reply we drop
        self.protocol_version: str | None = None  # negotiated by the last initialize
        self._reading = True
        self._out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._in_fd = -1
        self._out_fd = -1
        self.broken = False  # stdout went away

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Claim the std fds and start the reader and writer threads."""
        if not self._configured:
            self.limits = configured_limits()
        if self._stdin_fd == 0:
            say_when_on_a_terminal()
        self._in_fd = os.dup(self._stdin_fd)
        self._out_fd = os.dup(self._stdout_fd)
        if self._stdin_fd == 0 and self._stdout_fd == 1:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            os.dup2(2, 1)
        self._writer = threading.Thread(target=self._write_loop, name="mcp-stdout", daemon=True)
        self._writer.start()
        threading.Thread(target=self._read_loop, name="mcp-stdin", daemon=True).start()

    def stop_reading(self) -> None:
        """Ignore stdin from now on (shutdown); lines not yet forwarded are dropped."""
        with self._lock:
            self._reading = False
            self._pending = [m for m in self._pending if m is EOF]
            self._room.notify_all()  # dropping lines needs no room

    def close(self, timeout: float = 1.0) -> None:
        """Flush what is queued for stdout and stop the writer."""
        self._out.put(None)
        if self._writer is not None:
            self._writer.join(timeout)

    def attach(self, sink: Sink, backlog: Callable[[], int] | None = None) -> None:
        """Start handing messages to ``sink``, first replaying those that waited.

        ``backlog`` says how many handed messages the sink has queued and not yet taken;
        reading waits while that is :data:`MAX_BACKLOG` or more (the sink calls
        :meth:`wake` as it takes them).
        """
        with self._lock:
            pending, self._pending = self._pending, []
            for msg in pending:
                sink(msg)
            self._sink = sink
            if backlog is not None:
                self._backlog = backlog
            self._room.notify_all()

    def wake(self) -> None:
        """Room may have been made (the sink took a message): the reader looks again."""
        with self._lock:
            self._room.notify_all()

    # -- in-flight requests ------------------------------------------------------------

    def inflight(self) -> int:
        with self._lock:
            return len(self._inflight)

    def forget(self, rid: Any) -> None:
        """A request that will never be answered through :meth:`emit`."""
        with self._lock:
            self._settle(id_key(rid))

    def _settle(self, key: str) -> str | None:
        """Drop an in-flight request (the lock held); its label, None if it was not one."""
        entry = self._inflight.pop(key, None)
        if entry is None:
            return None
        self._inflight_bytes -= entry[1]
        self._room.notify_all()
        return entry[0]

    def handshake_stays_here(self, rid: Any) -> None:
        """The ``initialize`` with this id goes to no SDK (the relay replays the handshake
        under its own id), so no reply of that id is to be dropped."""
        with self._lock:
            self._suppress.discard(id_key(rid))

    # -- output ------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message for stdout (thread-safe, never blocks, never raises).

        A string echoed back from the client may hold a lone surrogate (``"\\ud800"`` is
        valid JSON but not encodable UTF-8); such a message goes out ASCII-escaped, which
        is still valid JSON and round-trips the same string.
        """
        self._queue(dump_line(message))

    def _queue(self, data: bytes) -> None:
        with self._lock:
            self._queued += len(data)
        self._out.put(data)

    def emit(self, message: dict[str, Any]) -> None:
        """A message from the SDK on its way to stdout: drop the SDK's own ``initialize``
        reply, spell ``Method not found`` the contract's way, settle in-flight ids, and
        answer with an error a reply longer than a line may be."""
        label = "reply"
        if "id" in message and ("result" in message or "error" in message):
            key = id_key(message["id"])
            with self._lock:
                if key in self._suppress:
                    self._suppress.discard(key)
                    return
                label = self._settle(key) or label
            error = message.get("error")
            if isinstance(error, dict) and error.get("code") == METHOD_NOT_FOUND:
                data = error.pop("data", None)
                if error.get("message") == "Method not found" and isinstance(data, str):
                    error["message"] = f"Method not found: {data}"
            elif isinstance(error, dict) and error.get("code") == CONNECTION_CLOSED:
                # A call still running when shutdown closed the session: the contract
                # knows only -32603 for a tool that could not finish.
                error.pop("data", None)
                error.update(code=INTERNAL_ERROR, message="server shutting down")
        data = dump_line(message)
        if len(data) - 1 > self.limits.reply:
            self.log("reply over the line limit", {"bytes": len(data) - 1, "request": label})
            if "id" not in message or "method" in message:
                return  # a notification or a request of ours: nobody waits on it
            data = dump_line(reply_too_long(message["id"], label, self.limits.reply, len(data) - 1))
        self._queue(data)

    def _write_loop(self) -> None:
        while (chunk := self._out.get()) is not None:
            if not self.broken:
                try:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(self._out_fd, view) :]
                except OSError as exc:  # the client closed our stdout: nobody is listening
                    self.broken = True
                    self.log("stdout closed", {"error": str(exc)})
                    self._deliver(EOF)
            with self._lock:
                self._queued -= len(chunk)
                if self._queued <= MAX_QUEUED_BYTES:
                    self._room.notify_all()

    # -- backpressure --------------------------------------------------------------------

    def _has_room(self) -> bool:
        """Whether the reader may take another line (the lock held)."""
        if not self._reading or self._hung_up:
            return True  # lines are dropped; or what is left of stdin is bounded (the pipe)
        return (
            self._queued <= MAX_QUEUED_BYTES
            and len(self._inflight) < MAX_INFLIGHT
            and self._inflight_bytes < MAX_INFLIGHT_BYTES
            and len(self._pending) < MAX_BACKLOG
            and self._backlog() < MAX_BACKLOG
        )

    def _wait_for_room(self) -> None:
        """Block the reader (and so, through the pipe, the client's writes) while the
        session is over a bound. A client that closes stdin while it waits is still
        heard: its pipe reports the hang-up, and what is left in the pipe (its capacity
        at most) is then read, so EOF's promise (in-flight answers, then exit) holds."""
        with self._lock:
            while not self._has_room():
                self._room.wait(ROOM_POLL_S)
                if not self._has_room() and self._stdin_hung_up():
                    self._hung_up = True

    def _stdin_hung_up(self) -> bool:
        poller = select.poll()
        poller.register(self._in_fd, select.POLLIN)
        try:
            return any(event & select.POLLHUP for _fd, event in poller.poll(0))
        except OSError:
            return False

    # -- input -------------------------------------------------------------------------

    def _read_loop(self) -> None:
        splitter = LineSplitter(self.limits.request)
        while True:
            try:
                chunk = os.read(self._in_fd, READ_CHUNK)
            except OSError as exc:
                self.log("stdin failed", {"error": str(exc)})
                chunk = b""
            for item in splitter.feed(chunk) if chunk else splitter.end():
                self._wait_for_room()
                self._read_one(item)
            if not chunk:
                break
        self._deliver(EOF)

    def _read_one(self, item: Line | TooLong) -> None:
        if isinstance(item, TooLong):
            # Answered even while shutting down, as every bad line is: with the request's
            # id when the line had one (and was a request), else with id null.
            rid = item.id if item.is_request else None
            self.send(request_too_long(rid, self.limits.request))
            return
        if not self._reading:
            return
        line = item.strip()
        if not line:
            return
        self._line_bytes = len(line)
        try:
            self.handle_line(line)
        except Exception as exc:  # a bug must not end the reading: log, go on
            self.log("stdin line failed", {"error": repr(exc)})

    def handle_line(self, line: Line) -> None:
        """Decode one line and route it (public for tests)."""
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.send(error_message(None, PARSE_ERROR, f"Parse error: invalid UTF-8: {exc}"))
            return
        if nesting_over(line, MAX_NESTING):
            self._too_deep(line)
            return
        try:
            message = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            self.send(error_message(None, PARSE_ERROR, f"Parse error: {exc}"))
            return
        except RecursionError:
            self.send(error_message(None, PARSE_ERROR, "Parse error: nested too deeply"))
            return
        if isinstance(message, list):
            self.send(
                error_message(
                    None, INVALID_REQUEST, "Invalid Request: batch requests are not supported"
                )
            )
            return
        if not isinstance(message, dict):
            self.send(
                error_message(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
            )
            return
        self._route(message)

    def _too_deep(self, line: Line) -> None:
        """A line nested past ``MAX_NESTING``, refused before decoding, on every Python
        alike (3.11's decoder gives up near 1,000 levels, 3.13's parses far deeper). What
        it says of itself decides the answer, as if it had been decoded: a request gets
        the error with its id (id null when its id is no valid id); a notification or a
        response sent to us gets none; anything else is answered with id null."""
        found = salvage(line)
        if "method" in found.keys and not found.named_id:
            self.log("notification nested too deeply: dropped", {"bytes": len(line)})
            return
        if "method" not in found.keys and found.keys & {"result", "error"} and found.named_id:
            self.log("response nested too deeply: dropped", {"bytes": len(line)})
            return
        rid = found.id if "method" in found.keys else None
        self.send(error_message(rid, PARSE_ERROR, f"Parse error: {NESTING_TOO_DEEP}"))

    def _route(self, message: dict[str, Any]) -> None:
        has_id = "id" in message
        rid = message.get("id")
        method = message.get("method")
        if has_id and (isinstance(rid, bool) or not isinstance(rid, str | int)):
            self.send(
                error_message(
                    None, INVALID_REQUEST, "Invalid Request: 'id' must be a string or an integer"
                )
            )
            return
        if message.get("jsonrpc") != "2.0":
            if has_id:
                self.send(
                    error_message(
                        rid, INVALID_REQUEST, "Invalid Request: 'jsonrpc' must be \"2.0\""
                    )
                )
            return
        if method is None:
            if has_id and ("result" in message or "error" in message):
                self._deliver(message)  # the client answering a server request
            elif has_id:
                self.send(error_message(rid, INVALID_REQUEST, "Invalid Request: no 'method'"))
            return
        if not isinstance(method, str):
            if has_id:
                self.send(
                    error_message(
                        rid, INVALID_REQUEST, "Invalid Request: 'method' must be a string"
                    )
                )
            return
        if not has_id:
            if method == "notifications/cancelled":
                params = message.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self.forget(params["requestId"])  # a cancelled request gets no answer
            self._deliver(message)  # the SDK ignores notifications it does not know
            return
        if method not in self.methods:
            self.send(error_message(rid, METHOD_NOT_FOUND, f"Method not found: {method}"))
            return
        if method == "tools/call" and (problem := _tools_call_problem(message.get("params"))):
            code = INVALID_PARAMS if spec_tool_errors(self.protocol_version) else INTERNAL_ERROR
            self.send(error_message(rid, code, problem))
            return
        if method == "initialize":
            params = message.get("params")
            if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
                self.send(
                    error_message(
                        rid,
                        INVALID_PARAMS,
                        "Invalid params: initialize needs a 'protocolVersion' string",
                    )
                )
                return
            result = initialize_result(
                params["protocolVersion"], self.version, self.default_palace, self.extended
            )
            self.protocol_version = result["protocolVersion"]
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})
            with self._lock:
                self._suppress.add(id_key(rid))
        else:
            with self._lock:
                key = id_key(rid)
                self._settle(key)  # a reused id: the newer request is the one tracked
                self._inflight[key] = (label_of(message), self._line_bytes)
                self._inflight_bytes += self._line_bytes
        self._deliver(message)

    def _deliver(self, message: Any) -> None:
        with self._lock:
            if message is not EOF and not self._reading:
                return
            if self._sink is None:
                self._pending.append(message)
                return
            sink = self._sink
        sink(message)


# --------------------------------------------------------------------------------------
# Shutdown timing, the same in relay and direct mode.

GRACE_S = 1.5  # in-flight calls get this long after SIGTERM/SIGINT; the contract allows 2 s
HARD_EXIT_S = 1.9  # after a signal, exit 0 by then whatever is still running (a stuck thread)

TERMINAL_NOTICE = (
    "trusty-memory serve: long-term memory for coding agents, over MCP. It waits for an MCP"
    " client on stdin (an agent spawns it) and prints nothing more here.\n"
    "To register it with your agent, see the README's section 'Using it from an agent'."
    " Ctrl-D quits.\n"
)


def say_when_on_a_terminal(stdin_fd: int = 0, stderr_fd: int = 2) -> None:
    """Started by a person at a terminal rather than by an agent through a pipe, ``serve``
    would look hung: say on stderr what it is and what it waits for."""
    try:
        if os.isatty(stdin_fd):
            os.write(stderr_fd, TERMINAL_NOTICE.encode())
    except OSError:
        pass  # no stderr to say it on


EOF_DRAIN_S = 120.0  # after stdin EOF, requests already read may still finish (model loads)


def exit_after(seconds: float, edge: StdioEdge) -> None:
    """Exit 0 after ``seconds`` even if some thread (a daemon start-up, a blocked call)
    would hold the interpreter: the contract promises exit within 2 s of a signal."""

    def hard_exit() -> None:
        edge.close(timeout=0.05)
        os._exit(0)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()
