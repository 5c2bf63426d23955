"""``trusty-memory serve``: the MCP front end agents spawn (contract: seeds/000).

Three small modules make it up:

* :mod:`.mcp_stdio` - the stdio edge: framing, parse errors, the instant ``initialize``,
  contract spellings of errors. Standard library only.
* :mod:`.mcp_tools` - the ten tools: schemas verbatim from the contract, argument checks,
  result shapes. No SDK, no ZeroMQ.
* this module - wiring: the SDK's low-level ``Server`` with ``tools/list`` and
  ``tools/call`` handlers, the daemon client, the ``--palace`` default, the ``--http``
  companion, signals and shutdown, and :func:`run_serve` for the CLI.

Start-up order is the point of the design: parse flags, bind ``--http``, start the stdio
edge (which can already answer ``initialize``), and only then import the SDK, structlog and
the ZeroMQ client, none of which the handshake needs. torch and sentence-transformers are
never imported here; they live in the daemon's embedder processes.

Shutdown: EOF on stdin lets every request already read finish, then exits 0. SIGTERM or
SIGINT stops reading at once, gives in-flight tool calls up to ``GRACE_S`` to finish, and
exits 0 well inside the contract's 2 seconds. With ``--http``, either side ending stops
the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import os
import signal
import sys
import time
from typing import Any

from trusty_memory.client.mcp_stdio import (
    EOF,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    StdioEdge,
    error_message,
)

GRACE_S = 1.5  # in-flight calls get this long after SIGTERM/SIGINT; the contract allows 2 s
HARD_EXIT_S = 1.9  # after a signal, exit 0 by then whatever is still running (a stuck thread)
EOF_DRAIN_S = 120.0  # after stdin EOF, requests already read may still finish (model loads)
USAGE_ERROR = 2


class ShutdownRequested(BaseException):
    """A signal arrived while the main thread was still starting (importing the SDK)."""


# --------------------------------------------------------------------------------------
# The tool side: what the SDK's handlers call.


class FrontEnd:
    """The state one ``serve`` process shares across its MCP sessions (stdio and HTTP):
    the daemon client, created on first use, and the ``--palace`` default's creation."""

    def __init__(self, default_palace: str | None, log: Any) -> None:
        self.default_palace = default_palace
        self.log = log
        self._client: Any = None
        self._ensure: asyncio.Task[None] | None = None

    def client(self) -> Any:
        if self._client is None:
            from trusty_memory.client.aio import AsyncClient

            self._client = AsyncClient()
        return self._client

    async def close(self) -> None:
        if self._ensure is not None and not self._ensure.done():
            self._ensure.cancel()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()

    def start_background(self) -> None:
        """Get ready for the first tool call while the agent gets going: create the default
        palace (and so start the daemon) or, without one, load the daemon client (its
        imports and config) without connecting, so a session that calls no tool starts no
        daemon."""
        if self.default_palace:
            task = self._ensure_task()
            task.add_done_callback(self._log_ensure_failure)
        else:
            asyncio.get_running_loop().call_soon(self.client)

    def _log_ensure_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.log.warning(
                "default palace not ready yet",
                palace=self.default_palace,
                error=str(task.exception()),
            )

    def _ensure_task(self) -> asyncio.Task[None]:
        if self._ensure is None or (
            self._ensure.done() and (self._ensure.cancelled() or self._ensure.exception())
        ):
            self._ensure = asyncio.create_task(self._create_default_palace())
        return self._ensure

    async def _create_default_palace(self) -> None:
        from trusty_memory.protocol import ErrorCode, TrustyError

        try:
            await self.client().call("palace_create", {"name": self.default_palace})
            self.log.info("default palace created", palace=self.default_palace)
        except TrustyError as exc:
            if exc.code != ErrorCode.PALACE_EXISTS:
                raise

    async def ensure_default_palace(self) -> None:
        """Wait until the ``--palace`` default exists; a failed attempt is retried."""
        if self.default_palace:
            # shield: one caller giving up must not cancel the attempt the others await
            await asyncio.shield(self._ensure_task())

    async def call_tool(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        from trusty_memory.client.mcp_tools import ToolError, call_tool

        started = time.perf_counter()
        try:
            result = await call_tool(
                name,
                arguments,
                self.client(),
                default_palace=self.default_palace,
                before_call=self.ensure_default_palace,
            )
        except ToolError as exc:
            self.log.debug("tool call failed", tool=name, error=exc.message)
            raise
        self.log.debug("tool call", tool=name, ms=round((time.perf_counter() - started) * 1e3, 1))
        return result


def build_server(front: FrontEnd, version: str) -> Any:
    """The SDK's low-level ``Server`` with the contract's tools."""
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from trusty_memory.client.mcp_tools import ToolError, tool_definitions

    tools = [types.Tool.model_validate(t) for t in tool_definitions(front.default_palace)]

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await front.call_tool(params.name, params.arguments)
        except ToolError as exc:
            raise MCPError(INTERNAL_ERROR, exc.message) from None
        except Exception as exc:  # a bug or a broken daemon reply: say so, keep serving
            front.log.exception("tool call failed", tool=params.name)
            raise MCPError(INTERNAL_ERROR, f"{params.name}: internal error: {exc}") from None
        text = json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=result
        )

    server = Server(
        "trusty-memory", version=version, on_list_tools=on_list_tools, on_call_tool=on_call_tool
    )
    if front.default_palace:
        # stdio's handshake is answered by the edge; this covers --http sessions.
        async def add_default_palace(ctx: Any, call_next: Any) -> Any:
            result = await call_next(ctx)
            if ctx.method == "initialize" and isinstance(result, dict):
                info = dict(result.get("serverInfo") or {})
                info["default_palace"] = front.default_palace
                result = {**result, "serverInfo": info}
            return result

        server.middleware.append(add_default_palace)
    return server


# --------------------------------------------------------------------------------------
# The async main: SDK session over the edge, optional HTTP, signals.


async def _serve(
    edge: StdioEdge, front: FrontEnd, http_sock: Any, version: str, token: str = ""
) -> None:
    import anyio
    import mcp.types as types
    from mcp.shared.message import SessionMessage
    from pydantic import ValidationError

    loop = asyncio.get_running_loop()
    server = build_server(front, version)
    # Start-up's objects (the SDK, pydantic's schemas) live as long as we do: moved out of
    # the collector's sight, a full collection no longer walks them. About one request in a
    # thousand triggers one: it stalled that request 35-40 ms, now 1.2 ms.
    gc.freeze()
    to_sdk, sdk_in = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
    sdk_out, from_sdk = anyio.create_memory_object_stream[SessionMessage](math.inf)
    stdin_closed = asyncio.Event()
    stop = asyncio.Event()  # a signal, or the HTTP side ended

    def feed(message: Any) -> None:  # on the loop thread, in stdin order
        if message is EOF:
            stdin_closed.set()
            return
        try:
            parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValidationError as exc:
            if "id" in message:
                edge.forget(message["id"])
                detail = exc.errors()[0]
                where = ".".join(str(x) for x in detail.get("loc", ()))
                edge.send(
                    error_message(
                        message["id"], INVALID_REQUEST, f"Invalid Request: {where}: {detail['msg']}"
                    )
                )
            return
        with contextlib.suppress(anyio.ClosedResourceError):
            to_sdk.send_nowait(SessionMessage(parsed))

    edge.attach(lambda message: loop.call_soon_threadsafe(feed, message))

    def on_signal(signum: int) -> None:
        front.log.info("signal received, shutting down", signal=signal.Signals(signum).name)
        edge.stop_reading()
        stop.set()
        _exit_after(HARD_EXIT_S, edge)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    async def pump_out() -> None:
        async for session_message in from_sdk:
            try:
                edge.emit(
                    session_message.message.model_dump(
                        mode="json", by_alias=True, exclude_unset=True
                    )
                )
            except Exception:  # one bad message must not silence every later answer
                front.log.exception("could not write a message to stdout")

    async def run_sdk() -> None:
        await server.run(sdk_in, sdk_out, server.create_initialization_options())

    async def run_http() -> None:
        from trusty_memory.client.mcp_http import serve_http

        try:
            await serve_http(server, http_sock, stop, token)
        except (Exception, SystemExit) as exc:  # uvicorn sys.exit()s on a failed start
            front.log.error("http server failed", error=repr(exc))
        finally:
            stop.set()  # either ending stops the other

    tasks = [asyncio.create_task(run_sdk()), asyncio.create_task(pump_out())]
    if http_sock is not None:
        tasks.append(asyncio.create_task(run_http()))
    front.start_background()
    front.log.info("serving MCP on stdio", http=http_sock is not None)
    try:
        ended = asyncio.create_task(stdin_closed.wait())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        stopped.cancel()
        front.log.debug("stopping", reason="signal" if stop.is_set() else "stdin closed")
        if stop.is_set():
            edge.stop_reading()
        # Let requests already handed to the SDK answer. Polled on the loop, not waited
        # for in a thread: asyncio.run() joins its threads, so a thread parked here would
        # hold the exit. A signal during the EOF drain cuts what is left to GRACE_S.
        deadline = time.monotonic() + (GRACE_S if stop.is_set() else EOF_DRAIN_S)
        while edge.inflight() and time.monotonic() < deadline:
            if stop.is_set():
                deadline = min(deadline, time.monotonic() + GRACE_S)
            await asyncio.sleep(0.01)
        stop.set()
        await to_sdk.aclose()
        await asyncio.wait(tasks, timeout=0.3)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await front.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


# --------------------------------------------------------------------------------------
# Entry point.


def _usage_error(message: str) -> int:
    print(f"trusty-memory serve: {message}", file=sys.stderr, flush=True)
    return USAGE_ERROR


def _raise_shutdown(signum: int, frame: Any) -> None:
    global _signalled
    _signalled = signum
    raise ShutdownRequested(signum)


_signalled: int | None = None  # the signal that interrupted start-up, if one did


def run_serve(
    palace: str | None = None, http: str | None = None, allow_remote: bool = False
) -> int:
    """Serve MCP on stdio (and HTTP with ``http``) until EOF or a signal; the exit code.

    Bad flags (an invalid palace name, a bad or busy ``--http`` address) print one line
    on stderr and return 2 before anything is served.
    """
    from trusty_memory import __version__

    if palace is not None:
        from trusty_memory.names import validate_palace_name
        from trusty_memory.protocol import TrustyError

        try:
            validate_palace_name(palace)
        except TrustyError as exc:
            return _usage_error(f"--palace: {exc.message}")
    http_sock = None
    if http is not None:
        from trusty_memory.client.mcp_http import AddressError, bind

        try:
            http_sock = bind(http, allow_remote)
        except AddressError as exc:
            return _usage_error(str(exc))

    # Until the event loop owns them, a signal aborts start-up and still exits 0.
    previous = {sig: signal.signal(sig, _raise_shutdown) for sig in (signal.SIGTERM, signal.SIGINT)}
    edge = StdioEdge(version=__version__, default_palace=palace)
    try:
        edge.start()
        # Everything below is heavy; the edge is already answering `initialize`.
        from trusty_memory.logs import setup_logging

        log = setup_logging("serve").bind(default_palace=palace)
        edge.log = lambda event, fields: log.warning(event, **fields)
        token = ""
        if http_sock is not None:
            token = _announce_http(http_sock, log)
        front = FrontEnd(palace, log)
        if os.environ.get("TRUSTY_MEMORY_SERVE_DEBUG_MODULES"):
            _report_modules_at_exit(os.environ["TRUSTY_MEMORY_SERVE_DEBUG_MODULES"])
        asyncio.run(_serve(edge, front, http_sock, __version__, token))
    except (ShutdownRequested, Exception):
        # A signal during start-up. The exception it raised may have been caught by the
        # code it interrupted and re-raised as another (pydantic turns it into a SchemaError
        # while the SDK's types are being built): once signalled, any start-up error is it.
        if _signalled is None:
            raise
        edge.stop_reading()
        _exit_after(HARD_EXIT_S, edge)
    finally:
        # Shutting down: a late signal must not turn exit 0 into death by SIGTERM.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        edge.close()
        if http_sock is not None:
            http_sock.close()
    return 0


def _exit_after(seconds: float, edge: StdioEdge) -> None:
    """Exit 0 after ``seconds`` even if some thread (a daemon start-up, a blocked call)
    would hold the interpreter: the contract promises exit within 2 s of a signal."""
    import threading

    def hard_exit() -> None:
        edge.close(timeout=0.05)
        os._exit(0)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()


def _announce_http(sock: Any, log: Any) -> str:
    """The HTTP endpoint's bearer token, told once on stderr with the URL to use it at."""
    from trusty_memory.client.mcp_http import TOKEN_FILE, http_token, is_loopback
    from trusty_memory.config import load_config

    home = load_config().home
    token = http_token(home)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"
    print(
        f"trusty-memory: MCP over HTTP at {url}; send 'Authorization: Bearer {token}'"
        f" (kept in {home / TOKEN_FILE})",
        file=sys.stderr,
        flush=True,
    )
    if not is_loopback(host):
        log.warning(
            "serving MCP over plain HTTP on a non-loopback address: the bearer token and"
            " memories cross the network unencrypted",
            address=url,
        )
    return token


def _report_modules_at_exit(path: str) -> None:
    """Debug hook for tests: write the loaded module names to ``path`` at exit, so a test
    can prove that torch and sentence-transformers never entered this process."""
    import atexit

    def dump() -> None:
        with open(path, "w") as out:
            out.write("\n".join(sorted(sys.modules)))

    atexit.register(dump)


def main(argv: list[str] | None = None) -> int:
    """``python -m trusty_memory.client.mcp_server``: the same flags as ``serve``."""
    import argparse

    parser = argparse.ArgumentParser(prog="trusty-memory serve", description=__doc__.split("\n")[0])
    parser.add_argument("--palace", metavar="NAME", help="default palace for tool calls")
    parser.add_argument("--http", metavar="ADDR", help="also serve MCP over HTTP at ADDR")
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --http address"
    )
    args = parser.parse_args(argv)
    return run_serve(palace=args.palace, http=args.http, allow_remote=args.allow_remote)


if __name__ == "__main__":
    sys.exit(main())
