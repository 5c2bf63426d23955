"""The tool layer in-process with a fake daemon: params sent, results projected.

Covers: client/mcp/tools.py client/mcp/tool_sets.py client/mcp/tool_record.py
"""

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


def test_listed_drawers_carry_their_room_after_the_contract_fields():
    from trusty_memory.client.mcp.tools import MEMORY_LIST

    drawer = {
        "drawer_id": "d",
        "content": "c",
        "importance": 0.5,
        "tags": ["a"],
        "created_at": "2026-05-10T14:32:00Z",
        "room": "Backend",
        "hits": 3,
    }
    daemon = FakeDaemon({"palace": "p", "drawers": [drawer]})
    out = run(call_tool("memory_list", {"palace": "p"}, daemon))
    assert out == {"palace": "p", "drawers": [{k: v for k, v in drawer.items() if k != "hits"}]}
    assert list(out["drawers"][0]) == [
        "drawer_id",
        "content",
        "importance",
        "tags",
        "created_at",
        "room",
    ]
    listed = MEMORY_LIST.output_schema["properties"]["drawers"]["items"]
    assert listed["properties"]["room"]["type"] == "string"
    assert "room" not in listed["required"]  # an addition: the contract's fields stay required
    assert "additionalProperties" not in listed


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


class PalacesDaemon:
    """A daemon where the palace a call names does not exist; palace_list lists these."""

    def __init__(self, palaces, list_error=None):
        self.palaces = palaces
        self.list_error = list_error

    async def call(self, method, params=None, *, palace=None):
        if method == "palace_list":
            if self.list_error:
                raise self.list_error
            return {"palaces": self.palaces}
        raise TrustyError(ErrorCode.PALACE_NOT_FOUND, f"palace not found: {palace}")


def failure(name, arguments, daemon, **kwargs):
    with pytest.raises(ToolError) as info:
        run(call_tool(name, arguments, daemon, **kwargs))
    return info.value.message


def test_palace_not_found_tells_the_current_spec_how_to_create_it():
    daemon = PalacesDaemon(["notes", "work"])
    args = {"palace": "Notes", "query": "q"}
    assert failure("memory_recall", args, daemon) == "palace not found: Notes"
    assert failure("memory_recall", args, daemon, current_spec=True) == (
        "palace not found: Notes; did you mean 'notes'? To create 'Notes', call the"
        ' palace_create tool with {"name": "Notes"}.'
    )
    far = {"palace": "zzzz", "query": "q"}
    assert failure("memory_recall", far, daemon, current_spec=True) == (
        "palace not found: zzzz. To create 'zzzz', call the palace_create tool with"
        ' {"name": "zzzz"}.'
    )
    # palaces that cannot be listed: no near match, the way to create it all the same
    broken = PalacesDaemon([], list_error=TrustyError(ErrorCode.INTERNAL, "down"))
    assert failure("memory_recall", args, broken, current_spec=True).endswith(
        "palace not found: Notes. To create 'Notes', call the palace_create tool with"
        ' {"name": "Notes"}.'
    )


def test_unknown_arguments_are_refused_for_the_current_spec_only():
    daemon = FakeDaemon({"drawer_id": "x", "palace": "p", "status": "stored"})
    typo = {"palace": "p", "text": "t", "tgas": ["x"]}
    run(call_tool("memory_remember", typo, daemon))  # the contract's: ignored
    assert "tgas" not in daemon.calls[0][1]
    assert failure("memory_remember", typo, daemon, current_spec=True) == (
        "memory_remember: unknown argument 'tgas' (did you mean 'tags'?)"
    )
    assert len(daemon.calls) == 1  # refused before the daemon is asked
    long = "x" * 100
    assert failure("palace_list", {long: 1}, daemon, current_spec=True) == (
        f"palace_list: unknown argument '{'x' * 64}...'; palace_list takes no arguments"
    )
    # kg_query's as_of is the extended set's: unknown in the contract's
    as_of = {"palace": "p", "subject": "s", "as_of": "2026-01-01"}
    assert failure("kg_query", as_of, daemon, current_spec=True) == (
        "kg_query: unknown argument 'as_of'; kg_query takes 'palace', 'subject'"
    )
    run(call_tool("kg_query", as_of, FakeDaemon({"subject": "s", "triples": []}),
                  tools="extended", current_spec=True))  # fmt: skip
