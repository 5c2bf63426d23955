"""Tool-call failures, by the protocol revision the session negotiated.

Sessions of 2024-11-05 (the contract's clients) and 2025-03-26 get JSON-RPC ``-32603``
errors with the contract's messages, byte for byte, and arguments a tool does not declare
are ignored. Sessions of 2025-06-18 and later get the current spec's shape: a tool's own
failure is a result with ``isError: true`` and the same message as its text, an unknown
tool or a malformed call is ``-32602``, and an undeclared argument is refused, naming
the nearest known one.

None of these reach the daemon: the front end rejects them before any request is sent,
which is also why they answer even when no daemon can start.

Covers: client/mcp/session.py client/mcp/stdio.py client/mcp/tool_record.py client/mcp/tool_sets.py
"""

from __future__ import annotations

import asyncio

import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import INIT_PARAMS, sdk_session, tool_error

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
    """The official SDK client negotiates the latest revision: a tool's failures arrive as
    a CallToolResult with isError, the message as text, and no structuredContent; an
    unknown tool is a protocol error, -32602."""

    async def go():
        async with sdk_session(mcp_home, **NO_DAEMON) as session:
            result = await session.call_tool("memory_recall", {"query": "q"})
            assert tool_error(result) == (
                "memory_recall: missing 'palace' (no --palace default configured)"
            )
            result = await session.call_tool("memory_recall", {"palace": "p", "query": 3})
            assert tool_error(result) == "memory_recall: 'query' must be a string, got number"
            result = await session.call_tool("memory_recall", {"palace": "p", "qeury": "q"})
            assert tool_error(result) == (
                "memory_recall: unknown argument 'qeury' (did you mean 'query'?)"
            )
            result = await session.call_tool("memory_remember", {"text": "t", "tgas": ["x"]})
            assert tool_error(result) == (
                "memory_remember: unknown argument 'tgas' (did you mean 'tags'?)"
            )
            with pytest.raises(MCPError) as info:
                await session.call_tool("nope", {})
            assert info.value.code == -32602 and info.value.message == "unknown tool: nope"
            # the session goes on serving
            assert len((await session.list_tools()).tools) == 10

    asyncio.run(go())


# The contract's answers, byte for byte (seeds/000, section 6).
CONTRACT_BYTES = [
    ({"name": "memory_recall", "arguments": {"query": "q"}},
     b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"memory_recall: missing'
     b' \'palace\' (no --palace default configured)"}}\n'),
    ({"name": "memory_teleport", "arguments": {}},
     b'{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"unknown tool:'
     b' memory_teleport"}}\n'),
    # an argument the tool does not declare is ignored: the error is the missing palace
    ({"name": "memory_recall", "arguments": {"query": "q", "tgas": ["x"]}},
     b'{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"memory_recall: missing'
     b' \'palace\' (no --palace default configured)"}}\n'),
    ({"arguments": {}},
     b'{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"tools/call: missing'
     b' \'name\'"}}\n'),
]  # fmt: skip


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26"])
def test_contract_errors_byte_for_byte(raw_serve, version):
    """A 2024-11-05 session (and 2025-03-26, whose spec text on tool errors is the same)
    gets exactly the contract's -32603 lines."""
    s = raw_serve(**NO_DAEMON)
    assert s.initialize(version)["result"]["protocolVersion"] == version
    for rid, (params, expected) in enumerate(CONTRACT_BYTES, start=1):
        s.request(rid, "tools/call", params)
        assert s.lines.get(timeout=30) == expected


# The current spec's answers (2025-06-18 and later), byte for byte: the same messages.
CURRENT_BYTES = [
    ({"name": "memory_recall", "arguments": {"query": "q"}},
     b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"text":"memory_recall: missing'
     b' \'palace\' (no --palace default configured)","type":"text"}],"isError":true}}\n'),
    ({"name": "memory_teleport", "arguments": {}},
     b'{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"unknown tool:'
     b' memory_teleport"}}\n'),
    ({"name": "memory_recall", "arguments": {"query": "q", "tgas": ["x"], "zzz": 1}},
     b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"text":"memory_recall: unknown'
     b' arguments \'tgas\', \'zzz\'; memory_recall takes \'palace\', \'query\','
     b' \'top_k\'","type":"text"}],"isError":true}}\n'),
    ({"arguments": {}},
     b'{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"tools/call: missing'
     b' \'name\'"}}\n'),
    ({"name": "palace_list", "arguments": {"palce": "p"}},
     b'{"jsonrpc":"2.0","id":5,"result":{"content":[{"text":"palace_list: unknown argument'
     b' \'palce\'; palace_list takes no arguments","type":"text"}],"isError":true}}\n'),
]  # fmt: skip


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_current_spec_errors_byte_for_byte(raw_serve, version):
    s = raw_serve(**NO_DAEMON)
    assert s.initialize(version)["result"]["protocolVersion"] == version
    for rid, (params, expected) in enumerate(CURRENT_BYTES, start=1):
        s.request(rid, "tools/call", params)
        assert s.lines.get(timeout=30) == expected
    # a session that initialises again is answered by its new revision
    s.call(9, "initialize", {**INIT_PARAMS, "protocolVersion": "2024-11-05"})
    s.request(1, "tools/call", CONTRACT_BYTES[0][0])
    assert s.lines.get(timeout=30) == CONTRACT_BYTES[0][1]


def test_daemon_unreachable_is_a_tool_error_naming_the_cause(raw_serve):
    """A daemon that cannot be reached: -32603 with the client's message, not a hang."""
    s = raw_serve(
        TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9",
        TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S="2",
    )
    s.initialize()
    message = _error(s, 1, "palace_list", {})
    assert message, message
