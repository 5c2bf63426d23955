"""The MCP host's plain calls, answered without the SDK: byte for byte the SDK's, by revision.

The first part runs in process with a scripted daemon (a stand-in that answers each method
with a fixed reply, named as such): every call goes through the SDK's session and through
the plain path, and the two lines must be the same bytes. The second starts a real
daemon cold and drives a relayed ``serve``: its first call is answered before the SDK
has loaded; the SDK then serves what the plain path leaves to it, and plain calls are
still answered without it, by the revision the client negotiates last.

Covers: client/mcp/plain_calls.py client/mcp/host.py client/mcp/session.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import INIT_PARAMS, RawServe, short_tmp, stop_daemon_in, wait_for
from trusty_memory.client.mcp.plain_calls import PlainCalls, SdkLoader, plain_answer, plain_call
from trusty_memory.client.mcp.session import FrontEnd, SdkSession, build_server
from trusty_memory.client.mcp.stdio import HANDSHAKE_PROTOCOL_VERSIONS, dump_line
from trusty_memory.common.protocol import ErrorCode, TrustyError

HIT = {
    "drawer_id": "d1", "content": "the deploy key rotates monthly — 🔑", "score": 0.5,
    "layer": 2, "tags": ["ops"], "importance": 0.5, "room": "general",
}  # fmt: skip


class ScriptedDaemon:
    """A stand-in for the daemon client: a fixed reply (or error) per method."""

    def __init__(self, replies: dict[str, Any]) -> None:
        self.replies = replies

    async def call(self, method: str, params: Any = None, *, palace: Any = None) -> Any:
        reply = self.replies.get(str(method))
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def close(self) -> None:
        pass


REPLIES: dict[str, Any] = {
    "memory_recall": {"results": [HIT]},
    "memory_remember": {"drawer_id": "x", "palace": "p", "status": "stored"},
    "palace_list": {"palaces": ["notes", "work"]},
    "memory_forget": TrustyError(ErrorCode.PALACE_NOT_FOUND, "palace not found: note"),
    "memory_list": {"drawers": "not a list"},  # a broken reply: an internal error
}

CALLS = [
    {"name": "memory_recall", "arguments": {"palace": "p", "query": "keys"}},
    {"name": "memory_remember", "arguments": {"palace": "p", "text": "t", "tags": ["a"]}},
    {"name": "memory_recall", "arguments": {"query": "q"}},  # no palace, no default
    {"name": "memory_recall", "arguments": {"palace": "p", "query": "q", "tgas": ["x"]}},
    {"name": "memory_teleport", "arguments": {}},
    {"name": "memory_forget", "arguments": {"palace": "note", "drawer_id": "d"}},
    {"name": "memory_list", "arguments": {"palace": "p"}},
    {"name": "palace_list"},  # no arguments at all
    {"name": "memory_recall", "arguments": {"palace": "p", "query": 3}},
    {"name": "palace_list", "arguments": {}, "_meta": {"progressToken": 7}},
]


LIST = {"name": "palace_list"}


def _init(version: str) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    }


async def _both(version: str, params: dict[str, Any], rid: int) -> tuple[bytes, bytes]:
    log = _QuietLog()
    front = FrontEnd(None, log, client=ScriptedDaemon(REPLIES))
    message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    assert plain_call(message)
    plain = dump_line(await plain_answer(front, message, version))

    got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    session = SdkSession(build_server(front, "0"), got.put_nowait, log)
    running = asyncio.create_task(session.run())
    session.feed({"jsonrpc": "2.0", "id": "hs", "method": "initialize", "params": _init(version)})
    assert (await asyncio.wait_for(got.get(), 10))["id"] == "hs"
    session.feed({"jsonrpc": "2.0", "method": "notifications/initialized"})
    session.feed(message)
    sdk = dump_line(await asyncio.wait_for(got.get(), 10))
    await session.close_input()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    return plain, sdk


class _QuietLog:
    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_plain_answers_are_the_sdks_byte_for_byte(version):
    """Success, a tool's own failure, an unknown tool, a daemon error, a broken reply,
    unknown arguments: the same line either way, in every revision we negotiate."""

    async def go() -> None:
        for rid, params in enumerate(CALLS, start=1):
            plain, sdk = await _both(version, params, rid)
            assert plain == sdk, params

    asyncio.run(go())


def test_string_ids_and_unicode_match_too():
    """Odd ids and hostile text: a string id, a huge integer id, a lone surrogate, nested
    arguments where a string belongs."""
    cases = [
        ("req-ü", {"name": "memory_recall", "arguments": {"palace": "p", "query": "🔑"}}),
        (10**20, {"name": "memory_recall", "arguments": {"palace": "p", "query": "q"}}),
        (-1, {"name": "memory_remember", "arguments": {"palace": "p", "text": "a \ud800 b"}}),
        (2, {"name": "memory_remember", "arguments": {"palace": "p", "text": [[[{"x": 1}]]]}}),
    ]

    async def go() -> None:
        for version in ("2024-11-05", "2025-11-25"):
            for rid, params in cases:
                plain, sdk = await _both(version, params, rid)  # type: ignore[arg-type]
                assert plain == sdk, (rid, params)

    asyncio.run(go())


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": True, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "id": 1.5, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 3}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "x", "arguments": []}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "task": {}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "x", "_meta": {"a": 1}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "x", "_meta": {"progressToken": True}}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}, "extra": 1},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": None},
    ],
)  # fmt: skip
def test_anything_unusual_goes_to_the_sdk(message):
    assert not plain_call(message)


def test_a_session_not_yet_initialised_goes_to_the_sdk():
    async def go() -> None:
        sent: list[dict[str, Any]] = []
        front = FrontEnd(None, _QuietLog(), client=ScriptedDaemon(REPLIES))
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": LIST}
        hello = {"palace": None, "initialize": None, "initialized": False, "handshake_id": "hs"}
        loader = SdkLoader(_QuietLog())
        plain = PlainCalls(front, hello, sent.append, loader)
        assert not plain.take(call)  # no handshake yet
        init = {"jsonrpc": "2.0", "id": "hs", "method": "initialize", "params": _init("2025-06-18")}
        assert plain.take(init)
        assert not plain.take(call)  # initialize, but not initialized
        assert plain.take({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert plain.take(call)
        await asyncio.sleep(0.05)
        assert sent and sent[0]["result"]["structuredContent"] == {"palaces": ["notes", "work"]}
        assert loader.early_answers == 1 and loader.inflight == 0

    asyncio.run(go())


def test_a_handshake_reaches_an_open_sdk_session_too_and_a_busy_id_goes_to_it():
    """Once the session has an SDK session, a new handshake is noted here and handed on
    (the SDK keeps its own state), and plain calls follow the new revision; a plain call
    whose id a request still unanswered has is the SDK's to judge."""

    async def go() -> None:
        sent: list[dict[str, Any]] = []
        front = FrontEnd(None, _QuietLog(), client=ScriptedDaemon(REPLIES))
        hello = {"initialize": _init("2025-06-18"), "initialized": True, "handshake_id": "hs"}
        plain = PlainCalls(front, hello, sent.append, SdkLoader(_QuietLog()))
        plain.sdk_open = True
        init = {"jsonrpc": "2.0", "id": "hs", "method": "initialize", "params": _init("2024-11-05")}
        assert not plain.take(init)
        assert plain.version() == "2024-11-05" and not plain.initialized
        assert not plain.take({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert plain.initialized
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": LIST}
        assert not plain.take(call, id_in_use=True)
        forget = {"name": "memory_forget", "arguments": {"palace": "note", "drawer_id": "d"}}
        assert plain.take({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": forget})
        await asyncio.sleep(0.05)
        assert sent[0]["error"]["code"] == -32603  # 2024-11-05's way of a tool's failure

    asyncio.run(go())


def test_a_cancelled_plain_call_gets_no_answer():
    async def go() -> None:
        sent: list[dict[str, Any]] = []

        class Slow(ScriptedDaemon):
            async def call(self, method: str, params: Any = None, *, palace: Any = None) -> Any:
                await asyncio.sleep(30)

        front = FrontEnd(None, _QuietLog(), client=Slow({}))
        hello = {"initialize": _init("2024-11-05"), "initialized": True, "handshake_id": "hs"}
        plain = PlainCalls(front, hello, sent.append, SdkLoader(_QuietLog()))
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": LIST}
        assert plain.take(call)
        assert not plain.take(call)  # its id is in use: left to the SDK's rules
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
        assert plain.take(cancel)
        assert not plain.take(cancel)  # not ours any more
        await asyncio.sleep(0.05)
        assert sent == []

    asyncio.run(go())


def test_the_sdk_loads_after_start_up_once_no_plain_call_is_in_flight():
    async def go() -> None:
        loader = SdkLoader(_QuietLog())
        loader.inflight = 1  # a cold start's first call, still being answered
        loader.want_later(0.01)
        await asyncio.sleep(0.5)
        assert not loader.ready.is_set() and loader._thread is None
        loader.inflight = 0
        await asyncio.wait_for(loader.ready.wait(), 30)

    asyncio.run(go())


def test_calls_that_never_pause_do_not_keep_the_sdk_out():
    """16 sessions' steady calls may never leave the host without one in flight: past
    its deadline the SDK loads anyway."""

    async def go() -> None:
        loader = SdkLoader(_QuietLog())
        loader.inflight = 3
        loader.want_later(0.01, by=0.3)
        await asyncio.sleep(0.1)
        assert loader._thread is None
        await asyncio.wait_for(loader.ready.wait(), 30)
        assert loader.inflight == 3

    asyncio.run(go())


def test_answers_keep_their_json_text():
    """The text content is the structured result's JSON (non-ASCII as is)."""

    async def go() -> None:
        front = FrontEnd(None, _QuietLog(), client=ScriptedDaemon(REPLIES))
        params = {"name": "memory_recall", "arguments": {"palace": "p", "query": "k"}}
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        reply = await plain_answer(front, message, "2025-11-25")
        result = reply["result"]
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        assert "🔑" in result["content"][0]["text"]

    asyncio.run(go())


def _daemon_log(home: Path) -> str:
    log = home / "logs" / "daemon.log"
    return log.read_text(errors="replace") if log.exists() else ""


def _events(home: Path) -> list[dict[str, Any]]:
    """The daemon log's JSON lines."""
    events = []
    for line in _daemon_log(home).splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return [e for e in events if isinstance(e, dict)]


def _plain_answers(home: Path, sdk: bool) -> int:
    """How many calls the plain path answered with the SDK loaded (or before)."""
    return sum(
        1 for e in _events(home) if e.get("event") == "plain call answered" and e.get("sdk") is sdk
    )


def test_a_cold_start_answers_its_first_call_before_the_sdk_loads():
    """Real daemon, host and relay, started by the call itself: the first call is
    answered without the SDK, which loads after it for a call of an unusual form; from
    then on the SDK has the session's handshake and serves what the plain path leaves it,
    and plain calls (a write and its recall, a tool's failure) are still answered without
    it, by the revision of the client's new handshake."""
    home = short_tmp("tme-")
    s = RawServe(home, TRUSTY_MEMORY_LOG="debug")
    try:
        s.initialize("2025-06-18")
        created = s.tool(1, "palace_create", {"name": "early"}, timeout=120)
        assert created["result"]["structuredContent"]["status"] == "created", created
        # a call of a form the plain path leaves alone: the SDK is loaded for it at once
        unusual = {"name": "palace_list", "arguments": {}, "_meta": {"client": "x"}}
        listed = s.call(7, "tools/call", unusual, timeout=60)
        assert "early" in listed["result"]["structuredContent"]["palaces"], listed
        assert wait_for(lambda: "mcp sdk loaded" in _daemon_log(home), 5), "no SDK load"
        loaded = [e for e in _events(home) if e.get("event") == "mcp sdk loaded"]
        assert loaded[0]["early_answers"] >= 1, _daemon_log(home)[-3000:]
        assert _plain_answers(home, sdk=False) == loaded[0]["early_answers"]
        assert _plain_answers(home, sdk=True) == 0
        stored = s.tool(2, "memory_remember", {"palace": "early", "text": "tea at five"})
        assert stored["result"]["structuredContent"]["status"] == "stored", stored
        found = s.tool(3, "memory_recall", {"palace": "early", "query": "tea"})
        assert found["result"]["structuredContent"]["results"][0]["content"] == "tea at five"
        typo = s.tool(4, "memory_recall", {"palace": "early", "query": "q", "tgas": ["x"]})
        assert typo["result"]["isError"] is True
        again = s.call(5, "initialize", {**INIT_PARAMS, "protocolVersion": "2024-11-05"})
        assert again["result"]["protocolVersion"] == "2024-11-05"
        typo = s.tool(9, "memory_recall", {"query": "q"})  # not yet initialised: the SDK's
        assert typo["error"]["code"] == -32603, typo
        s.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        typo = s.tool(6, "memory_recall", {"query": "q"})
        assert typo["error"]["code"] == -32603, typo  # 2024-11-05's way, not 2025-06-18's
        listed = s.call(8, "tools/call", unusual)  # the SDK, with the new handshake
        assert "early" in listed["result"]["structuredContent"]["palaces"], listed
        assert wait_for(lambda: _plain_answers(home, sdk=True) == 4, 5), _daemon_log(home)[-3000:]
        s.close_stdin()
        assert s.wait(10) == 0
    finally:
        s.kill()
        stop_daemon_in(home)
