"""``tools/list``: the contract's ten tools, names, descriptions and schemas verbatim.

Our additions (a title, an output schema, annotations, descriptions for the properties the
contract left bare, the bounds the contract states) are checked to be additions only:
taking them away must give the contract's list back, exactly.

Covers: client/mcp/tools.py client/mcp/tool_sets.py client/mcp/tool_schema.py client/mcp/relay.py
"""

from __future__ import annotations

import asyncio
import copy

import pytest
from jsonschema import Draft202012Validator

from tests.mcp.conftest import sdk_session
from trusty_memory.client.mcp.tool_sets import tool_definitions

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


# What a tool may add to the contract's entry, and the only bounds an input may add
# (where the contract states a range: top_k counts results, confidence is in [0.0, 1.0]).
TOOL_ADDITIONS = {"title", "outputSchema", "annotations"}
BOUNDS = {
    ("memory_recall", "top_k"): {"minimum": 1},
    ("memory_recall_deep", "top_k"): {"minimum": 1},
    ("kg_assert", "confidence"): {"minimum": 0.0, "maximum": 1.0},
}


def _contract_view(tools, contract=CONTRACT_TOOLS):
    """The tools with our additions checked and taken away.

    A tool may add only ``TOOL_ADDITIONS``; an input property may add a description where
    the contract's has none, and the bounds in ``BOUNDS``; nothing else may differ (the
    caller compares what is left with the contract).
    """
    described = {
        (t["name"], prop)
        for t in contract
        for prop, schema in t["inputSchema"]["properties"].items()
        if "description" in schema
    }
    view = []
    for tool in copy.deepcopy(tools):
        assert set(tool) - {"name", "description", "inputSchema"} <= TOOL_ADDITIONS, tool["name"]
        for prop, schema in tool["inputSchema"]["properties"].items():
            for key, value in BOUNDS.get((tool["name"], prop), {}).items():
                assert schema.pop(key) == value, (tool["name"], prop, key)
            if (tool["name"], prop) not in described:
                assert schema.pop("description", "").strip(), (tool["name"], prop)
        view.append({k: tool[k] for k in ("name", "description", "inputSchema")})
    return view


def test_definitions_match_contract_verbatim():
    assert _contract_view(tool_definitions()) == CONTRACT_TOOLS
    assert _contract_view(tool_definitions("proj")) == _without_palace_required(CONTRACT_TOOLS)


def test_the_contract_check_catches_changes():
    """_contract_view is what keeps the additions additions: it must fail on a change."""
    changed = tool_definitions()
    changed[1]["inputSchema"]["properties"]["top_k"]["maximum"] = 100  # a bound not allowed
    with pytest.raises(AssertionError):
        assert _contract_view(changed) == CONTRACT_TOOLS
    changed = tool_definitions()
    changed[0]["inputSchema"]["properties"]["text"]["description"] = "Other words"
    assert _contract_view(changed) != CONTRACT_TOOLS
    changed = tool_definitions()
    changed[0]["inputSchema"]["properties"]["text"]["maxLength"] = 10
    assert _contract_view(changed) != CONTRACT_TOOLS
    changed = tool_definitions()
    changed[2]["icons"] = []
    with pytest.raises(AssertionError):
        _contract_view(changed)


@pytest.mark.parametrize("default_palace", [None, "proj"])
def test_every_input_property_has_a_description(default_palace):
    for tool in tool_definitions(default_palace):
        for prop, schema in tool["inputSchema"]["properties"].items():
            assert isinstance(schema.get("description"), str), (tool["name"], prop)
            assert len(schema["description"]) >= 10, (tool["name"], prop)


def test_titles():
    tools = tool_definitions()
    titles = [t["title"] for t in tools]
    assert all(isinstance(t, str) and t.strip() for t in titles)
    assert len(set(titles)) == len(titles)
    for tool in tools:  # also where the 2025-03-26 revision carried it
        assert tool["annotations"]["title"] == tool["title"]


def test_bounds_are_the_contracts():
    tools = {t["name"]: t for t in tool_definitions()}
    for name in ("memory_recall", "memory_recall_deep"):
        top_k = tools[name]["inputSchema"]["properties"]["top_k"]
        assert top_k["minimum"] == 1 and "maximum" not in top_k  # the limit is a setting
        assert top_k["default"] == 10
    confidence = tools["kg_assert"]["inputSchema"]["properties"]["confidence"]
    assert (confidence["minimum"], confidence["maximum"], confidence["default"]) == (0, 1, 1)
    bounded = {
        (t["name"], prop)
        for t in tools.values()
        for prop, schema in t["inputSchema"]["properties"].items()
        if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(schema)
    }
    assert bounded == set(BOUNDS)


def test_output_schemas_are_valid_json_schemas():
    """Object schemas (as MCP requires) that name every field of the contract's result,
    all required; each input default lies within its bounds."""
    contract_fields = {  # section 4's "Tool reference summary", returns column
        "memory_remember": {"drawer_id", "palace", "status"},
        "memory_recall": {"palace", "query", "results"},
        "memory_recall_deep": {"palace", "query", "results"},
        "memory_list": {"palace", "drawers"},
        "memory_forget": {"status", "drawer_id", "palace"},
        "palace_create": {"palace_id", "status"},
        "palace_list": {"palaces"},
        "palace_info": {"id", "name", "drawer_count", "data_dir"},
        "kg_assert": {"status"},
        "kg_query": {"subject", "triples"},
    }
    for tool in tool_definitions():
        schema = tool["outputSchema"]
        Draft202012Validator.check_schema(schema)
        Draft202012Validator.check_schema(tool["inputSchema"])
        assert schema["type"] == "object"
        assert set(schema["properties"]) == contract_fields[tool["name"]], tool["name"]
        assert set(schema["required"]) == contract_fields[tool["name"]], tool["name"]
        for prop, sub in tool["inputSchema"]["properties"].items():
            if "default" in sub:
                assert Draft202012Validator(sub).is_valid(sub["default"]), (tool["name"], prop)


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
            top_k = by_name["memory_recall"].input_schema["properties"]["top_k"]
            assert {k: top_k[k] for k in ("type", "default")} == {"type": "integer", "default": 10}
            assert by_name["memory_recall"].title == "Recall memories"
            assert by_name["memory_recall"].output_schema == tool_definitions()[1]["outputSchema"]
            assert by_name["kg_assert"].input_schema["properties"]["confidence"]["default"] == 1.0
            assert by_name["memory_remember"].input_schema["properties"]["tags"]["items"] == {
                "type": "string"
            }

    asyncio.run(go())
