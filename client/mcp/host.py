"""The daemon's MCP host: the SDK, once, for every relayed ``serve`` session.

Each ``serve`` an agent spawns is a small relay (``mcp/relay.py``); the MCP SDK, pydantic
and the daemon client live here, in one process the daemon supervises like the dreamer
(restarted if it dies; a relay then answers its in-flight requests with an error and
reconnects). Eight sessions used to cost eight copies of the SDK.

It listens on a Unix socket in the daemon's private run directory (recorded in the home's
``daemon.json`` as ``mcp``), accepts connections from the same user only, and serves each
connection as one session. A plain ``tools/call`` is answered without the SDK, the same
bytes (``mcp/plain_calls.py``): so a cold start's first call does not wait for the SDK's
1.5 CPU-seconds of import (it loads after start-up), and no call pays for the SDK's
models. Every other message goes to the session's SDK session, created when the first
such message comes.
A connection starts with the relay's hello line
(``{"palace", "tools", "initialize", "initialized", "handshake_id"}``): the host creates
the session with that ``--palace`` default and tool set and replays the client's
handshake into it under the relay's ``handshake_id``, dropping the SDK's answers to that
id (the relay's edge already answered the client; a client that initialises again is
relayed the same way).
Then JSON-RPC lines flow both ways, UTF-8, under the limits of
``lines.line_limits`` for this home's settings: a reply longer than a line may be is
answered with an error naming the limit (it would otherwise be dropped by the relay), and a
line from the relay over the request limit, or not JSON, is answered with an error for the
id read from it; the session goes on either way.
Every session shares one daemon client, so a session's write and its next read go through
the same read-your-writes tracker.

Backpressure: a session's socket is read only while that session has fewer than
:data:`MAX_PENDING` requests unanswered, fewer than :data:`SDK_BUFFER` messages waiting
for the SDK, and its answers are flushed to the relay (:data:`WRITE_BUFFER_BYTES`). Past
that, lines wait in the socket and the relay's ``sendall`` blocks, so one session that
floods (or a relay that stops reading) holds a bounded share of the host every session
shares: the bounds are what keep the host small, since memory once taken mostly stays
(:func:`give_back_memory` returns what it can when a session ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import os
import signal
import socket
import struct
import sys
from collections.abc import AsyncIterator
from typing import Any

from trusty_memory.client.aio import AsyncClient
from trusty_memory.client.mcp.lines import (
    READ_CHUNK,
    Line,
    LineSplitter,
    TooLong,
    configured_limits,
    salvage,
)
from trusty_memory.client.mcp.plain_calls import PlainCalls, SdkLoader
from trusty_memory.client.mcp.session import FrontEnd, SdkSession, build_server
from trusty_memory.client.mcp.stdio import (
    INTERNAL_ERROR,
    dump_line,
    error_message,
    id_key,
    label_of,
    reply_too_long,
    request_too_long,
)
from trusty_memory.common import __version__, tracing
from trusty_memory.common.config import load_config
from trusty_memory.common.home import expected_parent
from trusty_memory.common.logs import setup_logging

PARENT_CHECK_S = 1.0
# Per session: requests fed to the SDK and not yet answered. Twice the relay's own bound
# (stdio.MAX_INFLIGHT), so a relay that keeps to its bound is never held up here (nor are
# its notifications, a cancel among them); this bound is for a relay gone wrong.
MAX_PENDING = 128
SDK_BUFFER = 32  # messages parsed and waiting for the SDK's read loop to take them
WRITE_BUFFER_BYTES = 2**20  # answers written to the relay's socket and not yet sent


class Host:
    """Accepts relay connections and runs an SDK session for each."""

    def __init__(self, config: Any, log: Any) -> None:
        self.config = config
        self.log = log
        # With autostart, as every client: if the daemon dies (kill -9, a crash), calls in
        # flight are sent again to the daemon that replaces it, started here if need be,
        # the way each serve's own client did before the relay (writes are idempotent).
        self.client = AsyncClient(config)
        self.limits = configured_limits(config)
        self.sessions = 0
        self.sdk = SdkLoader(log)  # the SDK, loaded after start-up (mcp/plain_calls.py)
        self.server: asyncio.AbstractServer | None = None

    async def serve(self, stop: asyncio.Event) -> None:
        path = self.config.mcp_socket
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a crashed host's socket: the daemon lock makes it ours
        self.server = await asyncio.start_unix_server(
            self.on_connection, path=str(path), limit=READ_CHUNK
        )
        os.chmod(path, 0o600)
        self.log.info("mcp host listening", socket=str(path))
        async with self.server:
            await stop.wait()
        await self.client.close()

    async def drain(self, stop: asyncio.Event) -> None:
        """Our daemon died without stopping us: take no new sessions (the next daemon has
        its own host), finish the open ones, whose calls go on against the next daemon,
        and exit once the last relay has gone."""
        if self.server is not None:
            self.server.close()  # stop listening; the socket path is the next host's
        while self.sessions:
            await asyncio.sleep(PARENT_CHECK_S)
        stop.set()

    async def on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if not same_user(writer.get_extra_info("socket")):
            self.log.warning("refused a connection from another user")
            writer.close()
            return
        self.sessions += 1
        try:
            await self.run_session(reader, writer)
        except Exception:
            self.log.exception("mcp session failed")
        finally:
            self.sessions -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            give_back_memory()

    async def run_session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines = read_lines(reader, self.limits.request)
        first = await anext(lines, b"null")
        hello = json.loads(first) if isinstance(first, bytes | bytearray) else None
        if not isinstance(hello, dict):
            return
        tools = "extended" if hello.get("tools") == "extended" else "contract"
        front = FrontEnd(hello.get("palace"), self.log, client=self.client, tools=tools)
        handshake_id = str(hello.get("handshake_id") or "relay-handshake")
        waiting = Waiting(MAX_PENDING)
        writer.transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)

        def send(message: dict[str, Any]) -> None:
            label = waiting.answered(message)
            if message.get("id") == handshake_id:
                return  # the replayed handshake: the client already has its answer
            writer.write(self.fitted(message, label))

        plain = PlainCalls(front, hello, send, self.sdk)
        session: SdkSession | None = None
        running: asyncio.Task[None] | None = None

        def sdk_session() -> SdkSession:
            nonlocal session, running
            if session is None:
                session = SdkSession(
                    build_server(front, __version__), send, self.log, SDK_BUFFER, front.traces
                )
                if plain.init_params is not None:
                    session.feed(
                        {"jsonrpc": "2.0", "id": handshake_id, "method": "initialize",
                         "params": plain.init_params}
                    )  # fmt: skip
                if plain.initialized:
                    session.feed({"jsonrpc": "2.0", "method": "notifications/initialized"})
                plain.sdk_open = True
                running = asyncio.create_task(session.run())
            return session

        front.start_background()
        try:
            async for line in lines:
                if tracing.ON:
                    started = tracing.now()
                message = self.parse(line, send)
                if tracing.ON and message is not None:
                    trace_request(front.traces, message, started)
                if message is not None:
                    in_use = waiting.has(message)
                    waiting.asked(message)
                    if plain.take(message, in_use):
                        pass  # answered (or being answered) without the SDK
                    else:
                        if not self.sdk.ready.is_set():
                            self.sdk.want()
                            await self.sdk.ready.wait()  # later lines wait in the socket
                        await sdk_session().put(message)  # waits while SDK_BUFFER wait
                await waiting.room()  # fewer than MAX_PENDING requests unanswered
                try:
                    await writer.drain()  # the relay reads what we answered
                except ConnectionError:
                    break  # the relay has gone
        finally:
            # The relay has gone (its client closed stdin and every answer it waited for
            # came back, or it died): nobody is left to answer.
            plain.close()
            if session is not None:
                await session.close_input()
            if running is not None:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            await front.close()

    def fitted(self, message: dict[str, Any], label: str) -> bytes:
        """``message`` as a line, or, if it is longer than the relay reads, the error that
        answers its request instead (the relay would drop it and wait for nothing)."""
        data = dump_line(message)
        size = len(data) - 1
        if size <= self.limits.reply:
            return data
        self.log.warning("reply over the line limit", request=label, bytes=size)
        if "id" not in message or "method" in message:
            return b""  # a notification: nobody waits on it
        return dump_line(reply_too_long(message["id"], label, self.limits.reply, size))

    def parse(self, line: Line | TooLong, send: Any) -> dict[str, Any] | None:
        """A message from the relay, or None once a line that cannot be one is answered."""
        if isinstance(line, TooLong):
            self.log.warning("request over the line limit", id=line.id)
            if line.id is not None and line.is_request:
                send(request_too_long(line.id, self.limits.request, " (from the relay)"))
            return None
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            found = salvage(line)
            self.log.warning("unreadable line from the relay", id=found.id)
            if found.id is not None and "method" in found.keys:
                text = "the MCP host could not read this request; try again"
                send(error_message(found.id, INTERNAL_ERROR, text))
            return None
        return message if isinstance(message, dict) else None


def trace_request(traces: dict[str, str], message: dict[str, Any], started: int) -> None:
    """A traced ``tools/call`` (tracing on): note its trace id for whichever answers it
    (the plain path or the SDK's handler), record the line's decoding, and mark its
    hand-over."""
    if message.get("method") != "tools/call" or "id" not in message:
        return
    trace = tracing.of_meta(message.get("params"))
    if trace:
        traces[id_key(message["id"])] = trace
        tracing.span(trace, "host.decode", started)
        tracing.mark(trace, "sdk_in")


class Waiting:
    """The requests of one session not yet answered, by id: how an error names one, and
    how many there are (reading the session waits while ``limit`` are).

    A request the client cancels is no longer counted (the SDK never answers it); a
    reused id counts once, so the count can only err low, never hold a session up."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self._labels: dict[str, str] = {}
        self.limit = limit
        self._room = asyncio.Event()
        self._room.set()

    def asked(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" in message:
            self._labels[id_key(message["id"])] = label_of(message)
            if len(self._labels) >= self.limit:
                self._room.clear()
        elif message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:
                self._labels.pop(id_key(params["requestId"]), None)
                self._check()

    def has(self, message: dict[str, Any]) -> bool:
        """True if ``message`` is a request whose id a request still unanswered has."""
        return "method" in message and "id" in message and id_key(message["id"]) in self._labels

    def answered(self, message: dict[str, Any]) -> str:
        if "id" in message and "method" not in message:
            label = self._labels.pop(id_key(message["id"]), "reply")
            self._check()
            return label
        return "message"

    def __len__(self) -> int:
        return len(self._labels)

    def _check(self) -> None:
        if len(self._labels) < self.limit:
            self._room.set()

    async def room(self) -> None:
        await self._room.wait()


def give_back_memory() -> None:
    """Collect what an ended session left (cycles through its cancelled tasks) and ask
    glibc to return its free heap to the OS (``malloc_trim``; nothing off glibc).

    Measured on a host flooded without the bounds (+200 MB at its peak): 5 s after the
    session ended it still held +172 MB, +145 MB with this; CPython's small-object arenas
    stay while any object in them lives. So this is a help, and the bounds are the cure.
    With them a session's end costs about 1 ms here (0.9 ms collecting, 0.2 ms trimming)."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Any:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library we run on
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _find_malloc_trim()


async def read_lines(reader: asyncio.StreamReader, limit: int) -> AsyncIterator[Line | TooLong]:
    """The lines of a stream, each at most ``limit`` bytes; a longer one as ``TooLong``."""
    splitter = LineSplitter(limit)
    while chunk := await reader.read(READ_CHUNK):
        for item in splitter.feed(chunk):
            yield item
    for item in splitter.end():
        yield item


def same_user(sock: socket.socket | None) -> bool:
    """True if the peer of a Unix socket runs as our user (SO_PEERCRED)."""
    if sock is None:
        return False
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


async def main_async() -> int:
    log = setup_logging("mcp-host", default_level="info")
    host = Host(load_config(), log)
    host.sdk.want_later()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    parent = expected_parent()

    async def watch_parent() -> None:
        while os.getppid() == parent:
            await asyncio.sleep(PARENT_CHECK_S)
        log.warning("daemon gone; serving the open sessions until they end", open=host.sessions)
        await host.drain(stop)

    watcher = asyncio.create_task(watch_parent())
    await host.serve(stop)
    watcher.cancel()
    return 0


def main() -> int:
    return asyncio.run(main_async())


if __name__ == "__main__":
    sys.exit(main())
