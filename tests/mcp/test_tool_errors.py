"""Tool-call failures: JSON-RPC ``-32603`` errors with the contract's messages.

None of these reach the daemon: the front end rejects them before any request is sent,
which is also why they answer even when no daemon can start.
"""

from __future__ import annotations

import asyncio

import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import sdk_session

NO_DAEMON = {"TRUSTY_MEMORY_BROKER_FRONTEND": "tcp://127.0.0.1:9"}


def _error(s, rid, name, arguments):
    resp = s.tool(rid, name, arguments, timeout=30)
    assert "result" not in resp, resp
    assert resp["error"]["code"] == -32603, resp
    return resp["error"]["message"]


def test_unknown_tool(raw_serve):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    assert _error(s, 1, "memory_teleport", {}) == "unknown tool: memory_teleport"


@pytest.mark.parametrize(
    ("tool", "arguments", "missing"),
    [
        ("memory_remember", {"palace": "p"}, "text"),
        ("memory_recall", {"palace": "p"}, "query"),
        ("memory_recall_deep", {"palace": "p"}, "query"),
        ("memory_forget", {"palace": "p"}, "drawer_id"),
        ("kg_assert", {"palace": "p", "subject": "s", "predicate": "p"}, "object"),
        ("kg_assert", {"palace": "p", "object": "o", "predicate": "p"}, "subject"),
        ("kg_query", {"palace": "p"}, "subject"),
        ("palace_create", {}, "name"),
        ("memory_remember", {"palace": "p", "text": None}, "text"),
    ],
)
def test_missing_argument(raw_serve, tool, arguments, missing):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    assert _error(s, 1, tool, arguments) == f"missing '{missing}'"


def test_missing_palace_without_default(raw_serve):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    for i, tool in enumerate(
        ["memory_recall", "memory_remember", "memory_list", "palace_info", "kg_query"]
    ):
        message = _error(s, i, tool, {"query": "q", "text": "t", "subject": "s"})
        assert message == f"{tool}: missing 'palace' (no --palace default configured)"


@pytest.mark.parametrize(
    ("tool", "arguments", "argument"),
    [
        ("memory_remember", {"palace": "p", "text": 42}, "'text'"),
        ("memory_remember", {"palace": "p", "text": "t", "tags": "auth"}, "'tags'"),
        ("memory_remember", {"palace": "p", "text": "t", "tags": [1, 2]}, "'tags'"),
        ("memory_remember", {"palace": "p", "text": "t", "room": 3}, "'room'"),
        ("memory_recall", {"palace": "p", "query": "q", "top_k": "ten"}, "'top_k'"),
        ("memory_recall", {"palace": "p", "query": "q", "top_k": True}, "'top_k'"),
        ("memory_recall", {"palace": "p", "query": "q", "top_k": 0}, "'top_k'"),
        ("memory_list", {"palace": "p", "limit": -1}, "'limit'"),
        ("memory_list", {"palace": "p", "tag": ["a"]}, "'tag'"),
        (
            "kg_assert",
            {"palace": "p", "subject": "s", "predicate": "p", "object": "o", "confidence": "high"},
            "'confidence'",
        ),
        (
            "kg_assert",
            {"palace": "p", "subject": "s", "predicate": "p", "object": "o", "confidence": 1.5},
            "'confidence'",
        ),
        ("memory_recall", {"palace": 7, "query": "q"}, "'palace'"),
    ],
)
def test_wrong_argument_type_names_the_argument(raw_serve, tool, arguments, argument):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    message = _error(s, 1, tool, arguments)
    assert message.startswith(f"{tool}: ") and argument in message, message


def test_invalid_palace_names_are_rejected(raw_serve):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    for i, bad in enumerate(["../etc", "a/b", "", ".hidden", "x" * 65]):
        message = _error(s, i, "memory_recall", {"palace": bad, "query": "q"})
        # "" counts as no palace given
        assert "palace" in message and message.startswith("memory_recall: "), message
    assert "invalid palace name" in _error(s, 9, "palace_create", {"name": "../x"})


def test_errors_through_sdk_client(mcp_home):
    async def go():
        async with sdk_session(mcp_home, **NO_DAEMON) as session:
            with pytest.raises(MCPError) as info:
                await session.call_tool("memory_recall", {"query": "q"})
            assert info.value.code == -32603
            assert info.value.message == (
                "memory_recall: missing 'palace' (no --palace default configured)"
            )
            with pytest.raises(MCPError) as info:
                await session.call_tool("nope", {})
            assert info.value.message == "unknown tool: nope"

    asyncio.run(go())


def test_daemon_unreachable_is_a_tool_error_naming_the_cause(raw_serve):
    """A daemon that cannot be reached: -32603 with the client's message, not a hang."""
    s = raw_serve(
        TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9",
        TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S="2",
    )
    s.initialize()
    message = _error(s, 1, "palace_list", {})
    assert message, message
