"""The tool layer in-process with a fake daemon: params sent, results projected."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from trusty_memory.client.mcp.tool_record import ToolError
from trusty_memory.client.mcp.tool_sets import call_tool
from trusty_memory.common.protocol import ErrorCode, TrustyError


class FakeDaemon:
    def __init__(self, answer=None, error=None):
        self.calls = []
        self.answer = answer or {}
        self.error = error

    async def call(self, method, params=None, *, palace=None):
        self.calls.append((method, params, palace))
        if self.error:
            raise self.error
        return self.answer


def run(coro):
    return asyncio.run(coro)


def test_remember_generates_uuid4_drawer_id_before_the_call():
    daemon = FakeDaemon({"drawer_id": "x", "palace": "p", "status": "stored", "extra": 1})
    out = run(call_tool("memory_remember", {"palace": "p", "text": "t"}, daemon))
    assert out == {"drawer_id": "x", "palace": "p", "status": "stored"}
    method, params, palace = daemon.calls[0]
    assert (method, palace) == ("memory_remember", "p")
    assert uuid.UUID(params["drawer_id"]).version == 4
    assert params["room"] is None and params["tags"] == []
    run(call_tool("memory_remember", {"palace": "p", "text": "t"}, daemon))
    assert daemon.calls[1][1]["drawer_id"] != params["drawer_id"]


def test_room_is_passed_through_verbatim():
    daemon = FakeDaemon({"drawer_id": "x", "palace": "p", "status": "stored"})
    run(call_tool("memory_remember", {"palace": "p", "text": "t", "room": "backend"}, daemon))
    assert daemon.calls[0][1]["room"] == "backend"  # the worker normalises


def test_recall_results_are_projected_to_contract_fields():
    hit = {
        "drawer_id": "d",
        "content": "c",
        "score": 0.5,
        "layer": 2,
        "tags": ["a"],
        "importance": 0.5,
        "room": "General",
        "created_at": "now",
    }
    daemon = FakeDaemon({"palace": "p", "query": "q", "results": [hit], "took_ms": 3})
    out = run(call_tool("memory_recall", {"palace": "p", "query": "q"}, daemon))
    assert list(out) == ["palace", "query", "results"]
    assert list(out["results"][0]) == [
        "drawer_id",
        "content",
        "score",
        "layer",
        "tags",
        "importance",
    ]
    assert daemon.calls[0][1] == {"query": "q", "top_k": 10}


def test_defaults_and_palace_fallback():
    daemon = FakeDaemon({"palace": "d", "drawers": []})
    run(call_tool("memory_list", {}, daemon, default_palace="d"))
    assert daemon.calls[0] == ("memory_list", {"room": None, "tag": None, "limit": 50}, "d")
    run(call_tool("memory_list", {"palace": "other"}, daemon, default_palace="d"))
    assert daemon.calls[1][2] == "other"


def test_daemon_error_keeps_its_message():
    daemon = FakeDaemon(error=TrustyError(ErrorCode.PALACE_NOT_FOUND, "palace not found: x"))
    with pytest.raises(ToolError) as info:
        run(call_tool("palace_info", {"palace": "x"}, daemon))
    assert info.value.message == "palace not found: x"


def test_before_call_runs_after_checks_only():
    seen = []

    async def before():
        seen.append(1)

    daemon = FakeDaemon({"palace_id": "n", "status": "created"})
    with pytest.raises(ToolError):
        run(call_tool("memory_remember", {"palace": "p"}, daemon, before_call=before))
    assert seen == [] and daemon.calls == []
    run(call_tool("palace_create", {"name": "n"}, daemon, before_call=before))
    assert seen == [1]
