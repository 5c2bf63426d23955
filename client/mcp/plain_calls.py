"""The MCP host's plain calls: a plain ``tools/call`` answered without the SDK, byte for byte.

Why, first: importing the ``mcp`` SDK costs the host about 1.6 CPU-seconds (it builds the
pydantic models of every protocol revision at import), and on a cold start that sat on
the path of the agent's first call. On two cores the daemon's starts share the CPU, so
spawn-to-first-answer followed their sum (ours 5.0 CPU-seconds against MemPalace's 2.8).
The host now listens before it loads the SDK (:class:`SdkLoader`). The SDK is loaded on a
thread :data:`LOAD_AFTER_S` after the host starts, once no call is being answered here
(so it never competes with a cold start's first answer for the CPU) or, under calls that
never pause, :data:`LOAD_BY_S` after it starts; at once when a message needs it.

Why, then: a recall's own work is one embedding, and the SDK's share of each call (its
dispatch, its pydantic result model and that model's dump, a second encoding of the
line) was about 1.2 ms of a 7.7 ms recall (issue 41). So a plain call, the kind nearly
every call is, is answered here before and after the SDK loads (:class:`PlainCalls`).
The SDK serves everything else: another method, a call of any unusual form, a session not
yet initialised; a session that never sends such a message never builds an SDK session.

Only the envelope is written here. What a tool does and how its failure reads is
``session.tool_answer``, which the SDK's handler runs too, and a test holds the two answers
byte-equal for every protocol revision we negotiate (as ``tools/list``'s are in the
relay).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

from trusty_memory.client.mcp.session import FrontEnd, tool_answer
from trusty_memory.client.mcp.stdio import (
    error_message,
    id_key,
    negotiate_version,
    spec_tool_errors,
)
from trusty_memory.common import tracing

LOAD_AFTER_S = 10.0  # the SDK loads this long after the host starts (unless needed sooner)
REQUEST_MEMBERS = {"jsonrpc", "id", "method", "params"}
QUIET_POLL_S = 0.2  # past that, while calls are answered here: how often to look again
LOAD_BY_S = 30.0  # and at the latest this long after start, calls in flight or not


def plain_call(message: dict[str, Any]) -> bool:
    """A ``tools/call`` whose answer cannot depend on the SDK's parsing: the request's
    members and no others, an id that is a string or an integer, a tool name, arguments
    that are an object (or none), and no ``_meta`` but a progress token (and, with tracing
    on, our trace id)."""
    if message.get("method") != "tools/call" or set(message) != REQUEST_MEMBERS:
        return False
    rid, params = message["id"], message["params"]
    if message["jsonrpc"] != "2.0" or isinstance(rid, bool) or not isinstance(rid, str | int):
        return False
    if not isinstance(params, dict) or not set(params) <= {"name", "arguments", "_meta"}:
        return False
    meta = params.get("_meta", {})
    allowed = {"progressToken", tracing.META_KEY} if tracing.ON else {"progressToken"}
    known_only = isinstance(meta, dict) and set(meta) <= allowed
    token = meta.get("progressToken", "") if known_only else None
    return (
        isinstance(params.get("name"), str)
        and isinstance(params.get("arguments", {}), dict)
        and known_only
        and isinstance(token, str | int)
        and not isinstance(token, bool)
    )


async def plain_answer(front: FrontEnd, message: dict[str, Any], version: str) -> dict[str, Any]:
    """The answer to a :func:`plain_call`, as the SDK session would send it (same keys,
    same order: ``dump_line`` writes it byte for byte as the SDK's own)."""
    params = message["params"]
    current = spec_tool_errors(version)
    answer = await tool_answer(front, params["name"], params.get("arguments"), current)
    if answer.code:
        return error_message(message["id"], answer.code, answer.text)
    result: dict[str, Any] = {
        "content": [{"text": answer.text, "type": "text"}],
        "isError": answer.structured is None,
    }
    if answer.structured is not None:
        result["structuredContent"] = answer.structured
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


class PlainCalls:
    """One relayed session's plain calls, answered here, and what answering them needs:
    the revision its client negotiated (its handshake as the relay hands it on, and any
    later one).

    :meth:`take` says whether a message was dealt with; one that was not goes to the SDK
    session, which the host creates when the first such message comes, with
    :attr:`init_params` and :attr:`initialized` replayed into it.
    """

    def __init__(
        self,
        front: FrontEnd,
        hello: dict[str, Any],
        send: Callable[[dict[str, Any]], None],
        loader: SdkLoader,
    ) -> None:
        self.front = front
        self.send = send
        self.loader = loader
        self.handshake_id = hello.get("handshake_id")
        init = hello.get("initialize")
        self.init_params: dict[str, Any] | None = init if isinstance(init, dict) else None
        self.initialized = bool(hello.get("initialized"))
        self.sdk_open = False  # set by the host once this session has an SDK session
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def version(self) -> str | None:
        """The revision the client was answered with (the edge's rule, which is the SDK's)."""
        requested = (self.init_params or {}).get("protocolVersion")
        return negotiate_version(requested) if isinstance(requested, str) else None

    def take(self, message: dict[str, Any], id_in_use: bool = False) -> bool:
        """Deal with ``message`` without the SDK if it can be; True if it was.

        A handshake is noted here and, once the session has an SDK session, handed on to
        it too (False); before that it is replayed into it when it is created. ``id_in_use``: a
        request with this id is still unanswered, which the SDK's rules are for."""
        method = message.get("method")
        if method == "notifications/cancelled":
            params = message.get("params")
            rid = params.get("requestId") if isinstance(params, dict) else None
            task = self._tasks.pop(id_key(rid), None) if rid is not None else None
            if task is not None:
                task.cancel()  # a cancelled request gets no answer, as from the SDK
            return task is not None
        if method == "initialize" and message.get("id") == self.handshake_id:
            params = message.get("params")  # the client initialised (again)
            if not isinstance(params, dict):
                return False
            self.init_params, self.initialized = params, False
            return not self.sdk_open
        if method == "notifications/initialized" and "id" not in message:
            if self.init_params is None:
                return False
            self.initialized = True
            return not self.sdk_open
        version = self.version()
        if version is None or not self.initialized or not plain_call(message):
            return False
        key = id_key(message["id"])
        if id_in_use or key in self._tasks:
            return False  # an id still in use: the SDK's rules for that
        task = asyncio.create_task(self._answer(message, version))
        self._tasks[key] = task
        self.loader.inflight += 1

        def done(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(key, None)
            self.loader.inflight -= 1

        task.add_done_callback(done)
        return True

    async def _answer(self, message: dict[str, Any], version: str) -> None:
        trace = self.front.traces.pop(id_key(message["id"]), "") if tracing.ON else ""
        if trace:
            tracing.since(trace, "sdk_in", "host.dispatch")
            token = tracing.current.set(trace)  # the daemon client's spans join the trace
            started = tracing.now()
        reply = await plain_answer(self.front, message, version)
        if trace:
            tracing.current.reset(token)
            tracing.span(trace, "host.handler", started)
            started = tracing.now()
        self.send(reply)
        if trace:
            tracing.span(trace, "host.encode", started)
        loaded = self.loader.ready.is_set()
        self.front.log.debug("plain call answered", tool=message["params"]["name"], sdk=loaded)
        self.loader.early_answers += not loaded

    def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()


class SdkLoader:
    """The host's ``mcp`` SDK import, on a thread, once it is wanted; :attr:`ready` is set
    when it is done (also if it failed: the sessions then fail as they would have)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.ready = asyncio.Event()
        self.inflight = 0  # plain calls being answered, every session
        self.early_answers = 0  # plain calls answered before the SDK loaded
        self._thread: threading.Thread | None = None

    def want_later(self, seconds: float = LOAD_AFTER_S, by: float = LOAD_BY_S) -> None:
        """Load the SDK ``seconds`` from now once no plain call is in flight, and ``by``
        seconds from now whatever is."""
        loop = asyncio.get_running_loop()
        loop.call_later(seconds, self._when_quiet, loop.time() + max(by, seconds))

    def _when_quiet(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        if self.inflight and loop.time() < deadline:
            loop.call_later(QUIET_POLL_S, self._when_quiet, deadline)
        else:
            self.want()

    def want(self) -> None:
        if self._thread is None:
            loop = asyncio.get_running_loop()
            self._thread = threading.Thread(
                target=self._load, args=(loop,), name="mcp-sdk-load", daemon=True
            )
            self._thread.start()

    def _load(self, loop: asyncio.AbstractEventLoop) -> None:
        started = time.perf_counter()
        cpu = time.thread_time()
        error = ""
        try:
            import anyio  # noqa: F401  (what SdkSession and build_server import)
            import mcp.server.lowlevel
            import mcp.shared.message
            import mcp.types  # noqa: F401
        except Exception as exc:  # logged; build_server raises it again for each session
            error = repr(exc)
        seconds = (time.perf_counter() - started, time.thread_time() - cpu)
        loop.call_soon_threadsafe(self._loaded, seconds, error)

    def _loaded(self, seconds: tuple[float, float], error: str) -> None:
        if error:
            self.log.error("mcp sdk failed to load", error=error)
        else:
            # Start-up's objects (the SDK, pydantic's schemas) live as long as we do: out
            # of the collector's sight, a full collection no longer stalls a request.
            gc.collect()
            gc.freeze()
            self.log.info(
                "mcp sdk loaded",
                s=round(seconds[0], 2),
                cpu_s=round(seconds[1], 2),
                early_answers=self.early_answers,
            )
        self.ready.set()
