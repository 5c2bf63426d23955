"""MCP sessions on the official SDK: the tool handlers, and one session fed line by line.

Used by the daemon's MCP host (one SDK session per relayed ``serve``) and by ``serve`` in
direct mode (``mcp/direct.py``). :class:`FrontEnd` is what tool handlers need (the daemon
client, the ``--palace`` default and the tool set), :func:`build_server` is the SDK's
low-level ``Server`` with the contract's ten tools (``mcp/tools.py``), or with
``--tools extended`` those plus ``mcp/tools_extended.py``'s and the resources of
``mcp/resources.py``, and :class:`SdkSession` runs that server over messages handed to it
one at a time, whatever the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trusty_memory.client.mcp.stdio import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    error_message,
    id_key,
    spec_tool_errors,
)
from trusty_memory.client.mcp.tool_record import ToolError, UnknownTool
from trusty_memory.client.mcp.tool_sets import call_tool, tool_definitions
from trusty_memory.common import tracing
from trusty_memory.common.methods import Method
from trusty_memory.common.protocol import ErrorCode, TrustyError


class FrontEnd:
    """What the tool handlers of MCP sessions with one ``--palace`` default share: the
    daemon client (created on first use unless one is given) and the default's creation.
    A ``serve`` process in direct mode has one; the MCP host has one per session, all
    with the host's single daemon client."""

    def __init__(
        self, default_palace: str | None, log: Any, client: Any = None, tools: str = "contract"
    ) -> None:
        self.default_palace = default_palace
        self.log = log
        self.tools = tools  # "contract" or "extended" (mcp/tools_extended.py)
        self._client: Any = client
        self._owns_client = client is None
        self._ensure: asyncio.Task[None] | None = None
        # Traced tools/call requests handed to the SDK and not yet answered: trace id by
        # JSON-RPC id (``id_key``), filled by the MCP host only while tracing is on.
        self.traces: dict[str, str] = {}

    def client(self) -> Any:
        if self._client is None:
            from trusty_memory.client.aio import AsyncClient  # lazy: pyzmq, after start-up

            self._client = AsyncClient()
        return self._client

    async def close(self) -> None:
        if self._ensure is not None and not self._ensure.done():
            self._ensure.cancel()
        if self._client is not None and self._owns_client:
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
        try:
            await self.client().call(Method.PALACE_CREATE, {"name": self.default_palace})
            self.log.info("default palace created", palace=self.default_palace)
        except TrustyError as exc:
            if exc.code != ErrorCode.PALACE_EXISTS:
                raise

    async def ensure_default_palace(self) -> None:
        """Wait until the ``--palace`` default exists; a failed attempt is retried."""
        if self.default_palace:
            # shield: one caller giving up must not cancel the attempt the others await
            await asyncio.shield(self._ensure_task())

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, current_spec: bool = False
    ) -> dict[str, Any]:
        """Run one tool (``current_spec``: for a session of protocol 2025-06-18 or
        later, see ``tool_sets.call_tool``); its result, or a ``ToolError``."""
        started = time.perf_counter()
        try:
            result = await call_tool(
                name,
                arguments,
                self.client(),
                default_palace=self.default_palace,
                before_call=self.ensure_default_palace,
                tools=self.tools,
                current_spec=current_spec,
            )
        except ToolError as exc:
            self.log.debug("tool call failed", tool=name, error=exc.message)
            raise
        self.log.debug("tool call", tool=name, ms=round((time.perf_counter() - started) * 1e3, 1))
        return result


@dataclass(frozen=True)
class ToolAnswer:
    """How a ``tools/call`` is answered, before any SDK type: the handler the SDK runs and
    the host's plain calls (``mcp/plain_calls.py``) both shape this, so
    what a tool says and how its failure reads are decided once.

    ``structured``: the tool's result (sent as ``structuredContent`` and as ``text``, its
    JSON); None for a failure. ``code``: a JSON-RPC error with ``text`` as its message;
    0 with no result is a failure the model reads (``isError``)."""

    text: str
    structured: dict[str, Any] | None = None
    code: int = 0


async def tool_answer(
    front: FrontEnd, name: str, arguments: dict[str, Any] | None, current: bool
) -> ToolAnswer:
    """Run one tool and say how to answer it, by the revision the session negotiated
    (``stdio.spec_tool_errors``): the contract's -32603 for 2024-11-05 and 2025-03-26;
    for 2025-06-18 and later a tool's own failure is a result the model reads (``isError``,
    the message as text, no ``structuredContent``) and an unknown tool is -32602. The
    message is the same either way."""
    try:
        result = await front.call_tool(name, arguments, current)
    except UnknownTool as exc:
        return ToolAnswer(exc.message, code=INVALID_PARAMS if current else INTERNAL_ERROR)
    except ToolError as exc:
        return ToolAnswer(exc.message, code=0 if current else INTERNAL_ERROR)
    except Exception as exc:  # a bug or a broken daemon reply: say so, keep serving
        front.log.exception("tool call failed", tool=name)
        return ToolAnswer(f"{name}: internal error: {exc}", code=INTERNAL_ERROR)
    return ToolAnswer(json.dumps(result, ensure_ascii=False), structured=result)


def build_server(front: FrontEnd, version: str) -> Any:
    """The SDK's low-level ``Server`` with the session's tool set (and, extended, the
    resources)."""
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    tools = [
        types.Tool.model_validate(t) for t in tool_definitions(front.default_palace, front.tools)
    ]

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # Errors by the revision the session negotiated (see tool_answer). A relayed
        # session has the client's own handshake replayed into it (mcp/host.py), so its
        # version is the client's here too.
        current = spec_tool_errors(ctx.protocol_version)
        if tracing.ON and (trace := front.traces.get(id_key(ctx.request_id), "")):
            tracing.since(trace, "sdk_in", "host.sdk.dispatch")
            token = tracing.current.set(trace)
            try:
                return await traced_call(trace, params, current)
            finally:
                tracing.current.reset(token)
        return await call(params, current)

    async def traced_call(
        trace: str, params: types.CallToolRequestParams, current: bool
    ) -> types.CallToolResult:
        started = tracing.now()
        result = await call(params, current)
        tracing.span(trace, "host.handler", started)
        tracing.mark(trace, "handled")
        return result

    async def call(params: types.CallToolRequestParams, current: bool) -> types.CallToolResult:
        answer = await tool_answer(front, params.name, params.arguments, current)
        if answer.code:
            raise MCPError(answer.code, answer.text)
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=answer.text)]
        if answer.structured is None:  # fields left unset stay out of the answer
            return types.CallToolResult(content=content, is_error=True)
        return types.CallToolResult(content=content, structured_content=answer.structured)

    resources: dict[str, Any] = {}
    if front.tools == "extended":
        from trusty_memory.client.mcp.resources import resource_handlers  # lazy: extended set only

        resources = resource_handlers(front)
    server = Server(
        "trusty-memory",
        version=version,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        **resources,
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


class SdkSession:
    """One MCP session on the SDK: JSON-RPC dicts in, answers out through ``send``.

    The stdio edge (direct mode) and each connection of the MCP host (relayed mode) feed
    one of these. A message the SDK's models refuse gets ``-32600 Invalid Request`` naming
    the field, rather than the SDK's silence.
    """

    def __init__(
        self,
        server: Any,
        send: Callable[[dict[str, Any]], None],
        log: Any,
        buffer: float = math.inf,
        traces: dict[str, str] | None = None,
    ) -> None:
        """``buffer``: how many messages may wait for the SDK to take them. Unbounded for
        :meth:`feed` (direct mode, whose stdio edge bounds what it hands on); the MCP host
        gives a bound and hands messages on with :meth:`put`, which waits for room, so a
        flood of lines from a relay waits in the socket, not here."""
        import anyio
        from mcp.shared.message import SessionMessage

        self.server = server
        self.send = send
        self.traces = traces if traces is not None else {}  # FrontEnd.traces (tracing on)
        self.log = log
        self._to_sdk, self._sdk_in = anyio.create_memory_object_stream[SessionMessage | Exception](
            buffer
        )
        self._sdk_out, self._from_sdk = anyio.create_memory_object_stream[SessionMessage](math.inf)

    def feed(self, message: dict[str, Any]) -> None:
        """Hand one client message to the SDK (on the event loop's thread, in order)."""
        import anyio

        parsed = self._parsed(message)
        if parsed is not None:
            with contextlib.suppress(anyio.ClosedResourceError):
                self._to_sdk.send_nowait(parsed)

    async def put(self, message: dict[str, Any]) -> None:
        """:meth:`feed`, waiting while ``buffer`` messages already wait for the SDK."""
        import anyio

        parsed = self._parsed(message)
        if parsed is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._to_sdk.send(parsed)

    def _parsed(self, message: dict[str, Any]) -> Any:
        """The SDK's form of a message, or None once one it refuses is answered."""
        import mcp.types as types
        from mcp.shared.message import SessionMessage
        from pydantic import ValidationError

        try:
            parsed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValidationError as exc:
            if "id" in message:
                detail = exc.errors()[0]
                where = ".".join(str(x) for x in detail.get("loc", ()))
                text = f"Invalid Request: {where}: {detail['msg']}"
                self.send(error_message(message["id"], INVALID_REQUEST, text))
            return None
        return SessionMessage(parsed)

    def _traced_out(self, message: Any) -> bool:
        """Send a traced request's answer with its spans (True), or leave it (False)."""
        trace = self.traces.pop(id_key(getattr(message, "id", None)), "")
        if not trace:
            return False
        tracing.since(trace, "handled", "host.sdk.out")
        started = tracing.now()
        try:
            self.send(message.model_dump(mode="json", by_alias=True, exclude_unset=True))
        except Exception:
            self.log.exception("could not send a message to the client")
        tracing.span(trace, "host.encode", started)
        return True

    async def close_input(self) -> None:
        await self._to_sdk.aclose()

    async def run(self) -> None:
        """Serve until the input is closed and the SDK has finished."""

        async def pump_out() -> None:
            async for session_message in self._from_sdk:
                if tracing.ON and self.traces and self._traced_out(session_message.message):
                    continue
                try:
                    self.send(
                        session_message.message.model_dump(
                            mode="json", by_alias=True, exclude_unset=True
                        )
                    )
                except Exception:  # one bad message must not silence every later answer
                    self.log.exception("could not send a message to the client")

        async def run_sdk() -> None:
            await self.server.run(
                self._sdk_in, self._sdk_out, self.server.create_initialization_options()
            )

        await asyncio.gather(run_sdk(), pump_out())
