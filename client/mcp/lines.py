"""JSON-RPC lines on every hop of ``serve``: how long one may be, and reading them under
that limit.

Every hop (stdin, relay -> host, host -> relay, stdout) reads and writes lines under limits
derived from the largest legal message (:func:`line_limits`), so a request the contract
allows is never refused for its length and a hostile line is never held whole: a line over
the limit is skipped while :class:`IdScanner` reads its top-level ``id`` on the way, and
:class:`LineSplitter` hands it out as :class:`TooLong` so the side that drops it can answer
that id with an error. Standard library only: the stdio edge imports this before anything
heavy is loaded.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from trusty_memory.common.config import load_config

# A line read from stdin: LineSplitter hands out its bytearrays, which json.loads and decode
# take without a copy.
Line = bytes | bytearray


# --------------------------------------------------------------------------------------
# Line limits: derived from the largest legal message, in one place, for every hop.

# The settings the limits follow, at their defaults (``[palace] max_text_bytes`` and
# ``max_top_k``; copied, because the edge starts before any config is read; a test keeps
# them in step).
DEFAULT_MAX_TEXT_BYTES = 64 * 1024
DEFAULT_MAX_TOP_K = 1000
# The most drawers one reply carries besides recall's ``top_k``: the workers' caps on
# memory_list, memory_search and archive_list (LIST_LIMIT_MAX, SEARCH_LIMIT_MAX,
# ARCHIVE_LIMIT_MAX; kept in step by a test).
MAX_LISTED = 1000
# The most bytes one byte of text takes in a JSON string: a control character, ``\u0001``.
ESCAPED_BYTES = 6
# A tool's result is in its reply twice: as ``structuredContent`` (6 bytes a byte, as
# above) and as the JSON text of ``content[0]``, a string in the line, where that escape is
# escaped once more (``\\u0001``, 7).
REPLY_BYTES_PER_TEXT_BYTE = 2 * ESCAPED_BYTES + 1
# A result's fields beside its text (id, room, tags, times, score), counted as text: well
# above what an agent attaches. A drawer with more makes a longer reply, which is then
# answered with an error naming the limit (tags have no bound of their own here).
RESULT_FIELDS_BYTES = 16 * 1024
# What a request may carry besides its one text (a drawer's text, a recall's query): tags,
# a room, a fact's fields, none bounded by a setting here. It was the one line limit before
# the limits were derived, so no request accepted then is refused now.
FREE_STRINGS_BYTES = 16 * 2**20
ENVELOPE_BYTES = 2**20  # the JSON-RPC around it all, and room to spare


class LineLimits(NamedTuple):
    """The longest line, in bytes without its newline, each way."""

    request: int  # client -> server: stdin, relay -> host
    reply: int  # server -> client: host -> relay, stdout


def line_limits(
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES, max_top_k: int = DEFAULT_MAX_TOP_K
) -> LineLimits:
    """The limits that let the largest legal message through, every byte escaped its worst.

    With the defaults: a request of 18.2 MB (one text of 64 KiB as ``\\u0001``s, plus
    the free strings), a reply of 1.07 GB (1,000 drawers and the query a recall echoes,
    each 64 KiB of text and 16 KiB of fields, at 13 bytes a byte). A limit is a ceiling,
    not an allocation: a line costs what it holds.
    """
    request = max_text_bytes * ESCAPED_BYTES + FREE_STRINGS_BYTES + ENVELOPE_BYTES
    texts = max(MAX_LISTED, max_top_k) + 1
    results = texts * (max_text_bytes + RESULT_FIELDS_BYTES) * REPLY_BYTES_PER_TEXT_BYTE
    # A reply may echo its request (an unknown method's name): never less than one.
    return LineLimits(request, max(results, request) + ENVELOPE_BYTES)


DEFAULT_LIMITS = line_limits()
MAX_LINE_BYTES = DEFAULT_LIMITS.request  # a request line's limit with the default settings


def configured_limits(config: Any = None) -> LineLimits:
    """The limits for this home's settings (``config``, else loaded now), with
    ``[mcp] max_reply_bytes`` (``TRUSTY_MEMORY_MCP_MAX_REPLY_BYTES``) over the reply's;
    the defaults' if the settings cannot be read (their own error surfaces where they are
    needed)."""
    try:
        if config is None:
            config = load_config()
        limits = line_limits(config.palace.max_text_bytes, config.palace.max_top_k)
        if config.mcp.max_reply_bytes > 0:
            limits = limits._replace(reply=config.mcp.max_reply_bytes)
    except Exception:
        limits = DEFAULT_LIMITS
    return limits


# --------------------------------------------------------------------------------------
# Reading lines under a limit, and what a line too long to parse still tells.

READ_CHUNK = 2**16  # per read: big lines take more reads; small ones stay cheap
_STRUCTURAL = re.compile(rb'["{}\[\],:]')
_ROLE_KEYS = frozenset({"method", "result", "error"})


class IdScanner:
    """Reads a JSON-RPC object's top-level ``id`` (and whether it has a ``method``, a
    ``result`` or an ``error``) from a line fed a chunk at a time, holding none of it.

    What lets a side that drops a line answer it: the id may come first (the SDK's order)
    or last, so the whole line is scanned. Strings are skipped with ``bytes.find`` (C
    speed, however long); the structure between them costs a Python step per character,
    so a pathological line (a million brackets) stops being scanned after ``MAX_STEPS``
    and keeps what it found by then.
    """

    MAX_STEPS = 1_000_000
    MAX_CAPTURE = 4096  # a key or an id longer than this is not worth keeping

    def __init__(self) -> None:
        self.id: Any = None  # the last valid top-level id (a string or an integer)
        self.keys: set[str] = set()  # which of method, result and error it has
        self.named_id = False  # it has a top-level "id" key (valid or not)
        self._steps = 0
        self._depth = 0
        self._object = False  # the top level is an object
        self._in_string = False
        self._backslashes = 0  # a run of them ending the last chunk inside a string
        self._want_key = False
        self._key: str | None = None  # the top-level key whose value comes next
        self._capturing = ""  # "key" or "id": what _capture holds, at the top level
        self._capture: bytearray | None = None

    @property
    def answerable(self) -> bool:
        """Known to be a request or a response with an id (it may still change: a second
        ``id`` later in the line would win, as in ``json.loads``)."""
        return self.id is not None and bool(self.keys)

    def feed(self, data: Line, start: int = 0, end: int | None = None) -> None:
        pos, end = start, len(data) if end is None else end
        while pos < end and self._steps < self.MAX_STEPS:
            self._steps += 1
            step = self._string if self._in_string else self._structure
            pos = step(data, pos, end)

    def _string(self, data: Line, pos: int, end: int) -> int:
        quote = data.find(b'"', pos, end)
        stop = end if quote < 0 else quote
        run = 0  # the backslashes just before stop
        if stop > pos and data[stop - 1] == 0x5C:
            run = stop - pos - len(data[pos:stop].rstrip(b"\\"))
        if run == stop - pos:
            run += self._backslashes  # the run began in an earlier chunk
        if quote < 0:
            self._keep(data, pos, end)
            self._backslashes = run
            return end
        self._backslashes = 0
        self._keep(data, pos, quote + 1)
        if run % 2 == 0:  # not escaped: the string ends
            self._in_string = False
            if self._capturing == "key":
                self._key = self._decoded()
                if self._key in _ROLE_KEYS:
                    self.keys.add(self._key)
                self.named_id = self.named_id or self._key == "id"
                self._capturing, self._capture = "", None
        return quote + 1

    def _structure(self, data: Line, pos: int, end: int) -> int:
        found = _STRUCTURAL.search(data, pos, end)
        stop = end if found is None else found.start()
        if self._capturing == "id":
            self._keep(data, pos, stop)
        if found is None:
            return end
        char = data[stop : stop + 1]
        top = self._depth == 1 and self._object
        if char == b'"':
            self._in_string = True
            if top and self._want_key:
                self._capturing, self._capture = "key", bytearray()
            self._keep(data, stop, stop + 1)
        elif char in (b"{", b"["):
            if top and self._capturing == "id":
                self._capturing, self._capture = "", None  # an object is no id
            self._depth += 1
            if self._depth == 1:
                self._object = self._want_key = char == b"{"
        elif char in (b"}", b"]"):
            if top:
                self._value_end()
            self._depth = max(0, self._depth - 1)
        elif char == b",":
            if top:
                self._value_end()
                self._want_key = True
        elif top:  # ":"
            self._want_key = False
            if self._key == "id":
                self._capturing, self._capture = "id", bytearray()
        return stop + 1

    def _keep(self, data: Line, start: int, end: int) -> None:
        if self._capture is not None:
            if len(self._capture) + end - start > self.MAX_CAPTURE:
                self._capture = None
            else:
                self._capture += data[start:end]

    def _decoded(self) -> Any:
        try:
            return json.loads(self._capture) if self._capture else None
        except ValueError:
            return None

    def _value_end(self) -> None:
        if self._capturing == "id":
            value = self._decoded()
            valid = isinstance(value, str | int) and not isinstance(value, bool)
            self.id = value if valid else None
        self._capturing, self._capture, self._key = "", None, None


def salvage(line: Line) -> IdScanner:
    """What an unparseable line still tells (its id, whether it is a request)."""
    scanner = IdScanner()
    scanner.feed(line)
    return scanner


class TooLong(NamedTuple):
    """A line over the limit, dropped unread: what it said of itself."""

    id: Any  # its top-level id, if one could be read; else None
    keys: frozenset[str]  # which of method, result and error it has (all that could be read)

    @property
    def is_request(self) -> bool:
        return "method" in self.keys


class LineSplitter:
    """Splits a byte stream into lines of at most ``limit`` bytes (newline not counted).

    Sans I/O, so the edge's blocking reads, the relay's socket and the host's asyncio
    stream split the same way. ``feed`` returns the lines completed (each ending in
    ``\\n``) and, for each line over the limit, one :class:`TooLong`: as soon as its id
    and role are known (a client that never ends the line is still answered), else when
    it ends. Such a line is scanned as it passes, never held: memory stays within a
    line's limit whatever a peer sends.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._skipping = False  # inside a line over the limit
        self._scanner: IdScanner | None = None  # ... whose TooLong is still to come

    def feed(self, data: bytes) -> list[Line | TooLong]:
        out: list[Line | TooLong] = []
        pos, size = 0, len(data)
        while pos < size:
            newline = data.find(b"\n", pos)
            end = size if newline < 0 else newline + 1
            text_end = end - (newline >= 0)  # the line's bytes without its newline
            if not self._skipping and len(self._buf) + text_end - pos > self.limit:
                self._skipping, self._scanner = True, IdScanner()
                self._scanner.feed(self._buf)
                self._buf = bytearray()
            if self._skipping:
                self._scan(data, pos, end, out)
                if newline >= 0:
                    self._finish(out)
            else:
                self._buf += data[pos:end]
                if newline >= 0:
                    out.append(self._take())
            pos = end
        return out

    def end(self) -> list[Line | TooLong]:
        """At the end of the stream: a last line without its newline, or its TooLong."""
        out: list[Line | TooLong] = []
        if self._skipping:
            self._finish(out)
        elif self._buf:
            out.append(self._take())
        return out

    def _scan(self, data: bytes, start: int, end: int, out: list[Line | TooLong]) -> None:
        if self._scanner is None:
            return  # answered already: only the newline matters
        self._scanner.feed(data, start, end)
        if self._scanner.answerable:
            self._emit(out)

    def _finish(self, out: list[Line | TooLong]) -> None:
        if self._scanner is not None:
            self._emit(out)
        self._skipping = False

    def _emit(self, out: list[Line | TooLong]) -> None:
        assert self._scanner is not None
        out.append(TooLong(self._scanner.id, frozenset(self._scanner.keys)))
        self._scanner = None

    def _take(self) -> bytearray:
        line, self._buf = self._buf, bytearray()
        return line  # a bytearray: json.loads and decode take it without a copy
