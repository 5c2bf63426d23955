"""``tools/list``: the contract's ten tools, names, descriptions and schemas verbatim."""

from __future__ import annotations

import asyncio
import copy

from tests.mcp.conftest import sdk_session
from trusty_memory.client.mcp_tools import tool_definitions

# Copied from the contract (seeds/000, section 4, "Full tools/list response").
CONTRACT_TOOLS = [
    {
        "name": "memory_remember",
        "description": "Store a memory (drawer) in a palace room.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "palace": {
                    "type": "string",
                    "description": "Palace ID (optional if server started with --palace)",
                },
                "text": {"type": "string", "description": "Memory content"},
                "room": {"type": "string", "description": "Room type (optional)"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["palace", "text"],
        },
    },
    {
        "name": "memory_recall",
        "description": "Recall memories using L0+L1+L2 progressive retrieval.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "palace": {"type": "string"},
                "query": {"type": "string"},
                "top_k": {"type": "integer", "default": 10},
            },
            "required": ["palace", "query"],
        },
    },
    {
        "name": "memory_recall_deep",
        "description": "Deep recall using L3 full HNSW search.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "palace": {"type": "string"},
                "query": {"type": "string"},
                "top_k": {"type": "integer", "default": 10},
            },
            "required": ["palace", "query"],
        },
    },
    {
        "name": "palace_create",
        "description": "Create a new memory palace.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "description": {"type": "string"}},
            "required": ["name"],
        },
    },
    {
        "name": "palace_list",
        "description": "List all palaces on this machine.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "kg_assert",
        "description": "Assert a fact in the temporal knowledge graph.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "palace": {"type": "string"},
                "subject": {"type": "string"},
                "predicate": {"type": "string"},
                "object": {"type": "string"},
                "confidence": {"type": "number", "default": 1.0},
                "provenance": {"type": "string"},
            },
            "required": ["palace", "subject", "predicate", "object"],
        },
    },
    {
        "name": "kg_query",
        "description": "Query active knowledge-graph triples for a subject.",
        "inputSchema": {
            "type": "object",
            "properties": {"palace": {"type": "string"}, "subject": {"type": "string"}},
            "required": ["palace", "subject"],
        },
    },
    {
        "name": "memory_list",
        "description": "List drawers in a palace, optionally filtered by room type or tag.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "palace": {"type": "string"},
                "room": {
                    "type": "string",
                    "description": "Filter by room type (Frontend, Backend, Testing, Planning, Documentation, Research, Configuration, Meetings, General, or custom)",  # noqa: E501 (verbatim)
                },
                "tag": {"type": "string", "description": "Filter by tag"},
                "limit": {"type": "integer", "description": "Max results (default 50)"},
            },
            "required": ["palace"],
        },
    },
    {
        "name": "memory_forget",
        "description": "Delete a drawer from a palace by its UUID.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "palace": {"type": "string"},
                "drawer_id": {"type": "string", "description": "UUID of the drawer to delete"},
            },
            "required": ["palace", "drawer_id"],
        },
    },
    {
        "name": "palace_info",
        "description": "Get metadata and stats for a single palace.",
        "inputSchema": {
            "type": "object",
            "properties": {"palace": {"type": "string"}},
            "required": ["palace"],
        },
    },
]


def _without_palace_required(tools):
    tools = copy.deepcopy(tools)
    for tool in tools:
        schema = tool["inputSchema"]
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != "palace"]
            if not schema["required"]:
                del schema["required"]
    return tools


def _contract_view(tools):
    """Only the fields the contract lists (annotations are an allowed addition)."""
    return [{k: t[k] for k in ("name", "description", "inputSchema")} for t in tools]


def test_definitions_match_contract_verbatim():
    assert _contract_view(tool_definitions()) == CONTRACT_TOOLS
    assert _contract_view(tool_definitions("proj")) == _without_palace_required(CONTRACT_TOOLS)


def test_tools_list_over_stdio_without_palace(raw_serve):
    s = raw_serve()
    s.initialize()
    tools = s.call(1, "tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == [t["name"] for t in CONTRACT_TOOLS]
    assert _contract_view(tools) == CONTRACT_TOOLS
    for tool in tools:
        if "palace" in tool["inputSchema"]["properties"]:
            assert "palace" in tool["inputSchema"]["required"], tool["name"]


def test_tools_list_with_palace_default(raw_serve):
    s = raw_serve("--palace", "proj", TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9")
    s.initialize()
    tools = s.call(1, "tools/list")["result"]["tools"]
    assert _contract_view(tools) == _without_palace_required(CONTRACT_TOOLS)
    for tool in tools:
        # palace stays an accepted property, just not a required one
        assert "palace" not in tool["inputSchema"].get("required", [])
    assert "palace" in {t["name"]: t for t in tools}["memory_remember"]["inputSchema"]["properties"]


def test_tool_annotations(raw_serve):
    s = raw_serve()
    s.initialize()
    tools = {t["name"]: t for t in s.call(1, "tools/list")["result"]["tools"]}
    read_only = {
        "memory_recall",
        "memory_recall_deep",
        "palace_list",
        "palace_info",
        "kg_query",
        "memory_list",
    }
    for name, tool in tools.items():
        hints = tool["annotations"]
        assert set(hints) >= {"readOnlyHint", "destructiveHint", "idempotentHint"}
        assert hints["readOnlyHint"] is (name in read_only), name
        assert hints["destructiveHint"] is (name == "memory_forget"), name


def test_tools_list_through_sdk_client(mcp_home):
    async def go():
        async with sdk_session(mcp_home) as session:
            result = await session.list_tools()
            assert len(result.tools) == 10
            by_name = {t.name: t for t in result.tools}
            assert by_name["memory_recall"].input_schema["properties"]["top_k"] == {
                "type": "integer",
                "default": 10,
            }
            assert by_name["kg_assert"].input_schema["properties"]["confidence"]["default"] == 1.0
            assert by_name["memory_remember"].input_schema["properties"]["tags"]["items"] == {
                "type": "string"
            }

    asyncio.run(go())
