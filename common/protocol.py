"""The one wire protocol every trusty-memory actor speaks.

Front ends, the CLI, the Python client, palace workers, embedders and the dreamer all
exchange the same Engram-style envelope, encoded as MessagePack by msgspec:

    request:  {id, method, palace?, params, timeout_ms?, min_seq?, trace?}
    response: {id, ok, data, error: {code, message}?, seq?}

A palace is served by one writer and 0..N readers. A write's response carries ``seq``,
the palace's change-log sequence number once that write committed; a client sends the
highest one it got for a palace as ``min_seq`` with its reads of that palace, and a reader
answers only after it has applied that much of the change log (read-your-writes).

Two sockets carry it, both on the broker (the ZeroMQ guide's Majordomo shape):

* **frontend** (ROUTER): clients connect a DEALER and send one frame, the encoded
  ``Request``; the reply is one frame, the encoded ``Response``.
* **backend** (ROUTER): workers connect a DEALER. Every frame list starts with a one-byte
  command (``W_READY``, ``W_REQUEST``, ``W_REPLY``, ``W_HEARTBEAT``, ``W_DISCONNECT``).
  ``W_REQUEST`` and ``W_REPLY`` carry the client's routing identity so the broker can
  relay without decoding the payload, and ``W_REPLY`` carries the request id as its own
  frame so the broker can settle its bookkeeping without decoding the response. A palace
  worker ends ``W_REPLY`` and ``W_HEARTBEAT`` with one more frame, the change-log seq it
  has applied (ASCII digits), which is how ``status`` shows a reader's lag.
  A worker may also send a client's one-frame request on the backend (the first byte
  of an encoded ``Request`` is never a command byte) and gets the one-frame response
  back there: that is how a remote worker, which reaches only the backend, asks the
  embedder for vectors.

Everything that crosses a process boundary is decoded into a typed ``msgspec.Struct``;
a frame that fails to decode gets an error reply naming the cause (or, if it cannot even
be answered, a log line) and never takes a process down. A request with a string UTF-8
cannot carry is refused, naming the field, before it is sent.

This module is the envelope. What each method carries is elsewhere in ``common/``:
``methods.py`` declares every method once (who answers it, its params and result, and
the tables derived from those), ``messages.py`` holds the params and result Structs, and
``bounds.py`` the ``[limits]`` every decoded params is held to.
"""

from __future__ import annotations

import enum
import re
import uuid
from typing import Any, TypeVar

import msgspec

from trusty_memory.common import tracing

PROTOCOL_VERSION = 1

# Backend commands: the first frame of every worker <-> broker message.
W_READY = b"\x01"
W_REQUEST = b"\x02"
W_REPLY = b"\x03"
W_HEARTBEAT = b"\x04"
W_DISCONNECT = b"\x05"
W_COMMANDS = {W_READY, W_REQUEST, W_REPLY, W_HEARTBEAT, W_DISCONNECT}

EMBEDDER_SERVICE = "embedder"
# The bulk lane: ``embed_bulk`` (mining, imports) goes to an embedder process of its own,
# started on first use at a lower CPU priority and stopped when idle, so bulk work yields
# the CPU to the interactive embedder instead of queueing interactive calls behind it.
EMBEDDER_BULK_SERVICE = "embedder-bulk"
DREAMER_SERVICE = "dreamer"  # a supervised child, not a worker: it is a client
MCP_HOST_SERVICE = "mcp-host"  # likewise: runs the MCP SDK for every relayed serve session
PALACE_SERVICE_PREFIX = "palace:"


def palace_service(palace: str) -> str:
    """The routing-table key of a palace's workers."""
    return PALACE_SERVICE_PREFIX + palace


def palace_of(service: str) -> str:
    """The palace a ``palace:NAME`` service serves (``palace_service``'s inverse)."""
    return service[len(PALACE_SERVICE_PREFIX) :]


class ErrorCode(enum.IntEnum):
    """Numeric error codes, grouped by family (the thousands digit).

    The message that goes with a code always names the cause; the MCP front end keeps the
    message and maps every code onto JSON-RPC ``-32603`` as the contract requires (for
    sessions of protocol 2024-11-05 and 2025-03-26), or onto a tool result with
    ``isError`` (2025-06-18 and later: ``client/mcp/session.py``).
    """

    # 1xxx validation: the caller sent something we will not accept.
    INVALID_PARAMS = 1001
    INVALID_PALACE_NAME = 1002
    TEXT_TOO_LARGE = 1003
    MALFORMED_FRAME = 1004
    UNKNOWN_METHOD = 1005
    # 2xxx not found.
    PALACE_NOT_FOUND = 2001
    DRAWER_NOT_FOUND = 2002
    FACT_NOT_FOUND = 2003
    # 3xxx conflict.
    PALACE_EXISTS = 3001
    # 4xxx storage: SQLite or the vector index failed.
    STORAGE_ERROR = 4001
    INDEX_ERROR = 4002
    # 5xxx embedder.
    EMBEDDER_UNAVAILABLE = 5001
    EMBEDDING_FAILED = 5002
    # 6xxx dispatch: routing, deadlines, crashed workers.
    TIMEOUT = 6001
    WORKER_CRASHED = 6002
    NO_WORKER = 6003
    SHUTTING_DOWN = 6004
    INTERNAL = 6005
    # 7xxx overload.
    OVERLOADED = 7001

    @property
    def family(self) -> str:
        return _FAMILIES[self.value // 1000]


_FAMILIES = {
    1: "validation",
    2: "not found",
    3: "conflict",
    4: "storage",
    5: "embedder",
    6: "dispatch",
    7: "overload",
}


class ErrorInfo(msgspec.Struct, frozen=True):
    code: int
    message: str


class Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A call to a method. ``params`` stays raw MessagePack until the handler that owns
    the method decodes it into that method's params Struct, so the broker can route a
    request without paying to decode its body."""

    id: str
    method: str
    palace: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"\x80")  # an empty map
    timeout_ms: int | None = None
    min_seq: int = 0  # reads: answer only once this palace seq is applied
    # Sent by the daemon's own actors (the dreamer): not a client's use of the daemon, so
    # it does not keep a client-started daemon from its idle exit.
    background: bool = False
    # The request's trace id (``common/tracing.py``), set only while tracing is on; empty,
    # it is not encoded, and a receiver that predates it ignores it (unknown fields are).
    trace: str = ""


class Response(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    seq: int = 0  # writes: the palace's seq after this write committed


class Ready(msgspec.Struct, kw_only=True):
    """A worker announcing itself on the backend socket."""

    service: str
    role: str = "writer"
    pid: int = 0
    protocol: int = PROTOCOL_VERSION
    # A worker on another host (``trusty-memory worker``): not the broker's child, so
    # never signalled or restarted by it, and its pid means nothing on the broker's host.
    remote: bool = False
    host: str = ""  # its host name, for ``status``


class TrustyError(Exception):
    """An error that travels: raised anywhere, it becomes ``Response.error``."""

    def __init__(self, code: ErrorCode | int, message: str) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"[{int(self.code)}] {message}")

    def info(self) -> ErrorInfo:
        return ErrorInfo(code=int(self.code), message=self.message)

    @classmethod
    def from_info(cls, info: ErrorInfo) -> TrustyError:
        try:
            code = ErrorCode(info.code)
        except ValueError:
            code = ErrorCode.MALFORMED_FRAME
        return cls(code, info.message)


# ---------------------------------------------------------------------------
# Encoding helpers.

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Request)
_response_decoder = msgspec.msgpack.Decoder(Response)
_ready_decoder = msgspec.msgpack.Decoder(Ready)

S = TypeVar("S", bound=msgspec.Struct)


def new_id() -> str:
    return uuid.uuid4().hex


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def encode_request(
    method: str,
    params: Any = None,
    *,
    palace: str | None = None,
    id: str | None = None,
    timeout_ms: int | None = None,
    min_seq: int = 0,
    background: bool = False,
) -> tuple[str, bytes]:
    """Build and encode a request; returns ``(id, frame)``."""
    rid = id or new_id()
    params = params if params is not None else {}
    raw = msgspec.Raw(_encode_valid(method, params))
    req = Request(
        id=rid,
        method=method,
        palace=palace,
        params=raw,
        timeout_ms=timeout_ms,
        min_seq=min_seq,
        background=background,
    )
    if tracing.ON:
        req.trace = tracing.current.get()
    return rid, _encode_valid(method, req, {"palace": palace, "method": method, "id": rid})


def _encode_valid(method: str, obj: Any, fields: dict[str, Any] | None = None) -> bytes:
    """``obj`` encoded; a string that UTF-8 cannot carry (a lone surrogate: JSON's
    ``"\\ud800"``, or a command-line argument that was not UTF-8) is ``INVALID_PARAMS``
    naming its field, where msgspec's ``UnicodeEncodeError`` reached callers as an
    internal error. The search runs only once encoding failed: a valid request pays nothing.
    """
    try:
        return _encoder.encode(obj)
    except UnicodeEncodeError:
        problem = lone_surrogate(fields if fields is not None else obj)
        if problem is None:
            raise
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"{method}: {problem}") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_in(text: str) -> str | None:
    """Where ``text`` holds a lone surrogate, as "(U+D800) at character 5"; None if nowhere."""
    found = None if text.isascii() else _SURROGATE.search(text)
    if found is None:
        return None
    return f"(U+{ord(found.group()):04X}) at character {found.start()}"


def lone_surrogate(obj: Any, path: str = "") -> str | None:
    """The first string inside ``obj`` (params as built by a caller: dicts, lists, Structs)
    that holds a lone surrogate, as ``"text: contains a lone surrogate (U+D800) at
    character 5; send valid UTF-8"``; None when every string is valid."""
    if isinstance(obj, str):
        where = surrogate_in(obj)
        if where is None:
            return None
        return f"{path or 'value'}: contains a lone surrogate {where}; send valid UTF-8"
    if isinstance(obj, msgspec.Struct):
        obj = {name: getattr(obj, name) for name in obj.__struct_fields__}
    if isinstance(obj, dict):
        for key, value in obj.items():
            name = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and surrogate_in(key) is not None:
                return lone_surrogate(key, f"{path or 'params'}: a key")
            if (problem := lone_surrogate(value, name)) is not None:
                return problem
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            if (problem := lone_surrogate(value, f"{path}[{i}]")) is not None:
                return problem
    return None


# What msgspec raises on a frame it cannot decode. Besides its own errors: RecursionError
# for a frame nested ~1,000 levels deep (a few KB of MessagePack), and UnicodeDecodeError
# (a ValueError) for a string that is not UTF-8. Either must cost that one request an
# error reply, never the answer itself or the process reading it.
UNDECODABLE = (msgspec.MsgspecError, RecursionError, ValueError)


def reason(exc: Exception) -> str:
    """Why a frame or params failed to decode, in words that do not change with msgspec's
    version: up to 0.22 it raised ``UnicodeDecodeError`` for a string that is not UTF-8,
    from 0.23 a ``DecodeError`` saying "Invalid UTF-8 encoded string"."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return f"a string is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    if isinstance(exc, msgspec.DecodeError) and "utf-8" in str(exc).lower():
        return "a string is not valid UTF-8"
    return str(exc)


def decode_request(frame: bytes) -> Request:
    try:
        return _request_decoder.decode(frame)
    except UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"malformed request frame: {reason(exc)}"
        ) from exc


def salvage_id(frame: bytes) -> str:
    """The id of a request that failed to decode, so its error reply reaches the caller
    waiting for it; "" when there is none to be found.

    A full decode finds it wherever it is. When even that fails (a frame nested too
    deeply, or broken after its id), the id is read from the frame's first key-value
    pair, which is where every client of ours puts it (``Request``'s field order).
    """
    try:
        obj = msgspec.msgpack.decode(frame)
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            return obj["id"]
    except Exception:
        pass
    try:
        if not frame or not (0x81 <= frame[0] <= 0x8F or frame[0] in (0xDE, 0xDF)):
            return ""
        pos = {0xDE: 3, 0xDF: 5}.get(frame[0], 1)
        key, pos = _read_str(frame, pos)
        if key != "id":
            return ""
        return _read_str(frame, pos)[0]
    except (IndexError, UnicodeDecodeError, ValueError):
        return ""


def _read_str(frame: bytes, pos: int) -> tuple[str, int]:
    """The MessagePack string at ``pos`` and the position after it."""
    tag = frame[pos]
    if 0xA0 <= tag <= 0xBF:
        size, pos = tag & 0x1F, pos + 1
    elif tag in (0xD9, 0xDA, 0xDB):
        width = {0xD9: 1, 0xDA: 2, 0xDB: 4}[tag]
        size, pos = int.from_bytes(frame[pos + 1 : pos + 1 + width], "big"), pos + 1 + width
    else:
        raise ValueError("not a string")
    if pos + size > len(frame):
        raise ValueError("truncated string")
    return frame[pos : pos + size].decode("utf-8"), pos + size


def decode_response(frame: bytes) -> Response:
    try:
        return _response_decoder.decode(frame)
    except UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"malformed response frame: {reason(exc)}"
        ) from exc


def decode_ready(frame: bytes) -> Ready:
    try:
        return _ready_decoder.decode(frame)
    except UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"malformed READY frame: {reason(exc)}"
        ) from exc


def ok_response(rid: str, data: Any, seq: int = 0) -> bytes:
    return _encoder.encode(Response(id=rid, ok=True, data=data, seq=seq))


def error_response(rid: str, code: ErrorCode | int, message: str) -> bytes:
    return _encoder.encode(
        Response(id=rid, ok=False, error=ErrorInfo(code=int(code), message=message))
    )


def unwrap(resp: Response) -> Any:
    """The data of a successful response, or the ``TrustyError`` it carries."""
    if resp.ok:
        return resp.data
    raise TrustyError.from_info(resp.error or ErrorInfo(code=6003, message="empty error"))


def convert(data: Any, cls: type[S]) -> S:
    """Turn decoded response data into a typed result."""
    return msgspec.convert(data, cls)
