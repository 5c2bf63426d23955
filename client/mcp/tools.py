"""The contract's ten MCP tools (seeds/000, section 4), one :class:`Tool` record each.

Each record sits beside its handler and holds all there is to the tool: the contract's
name, description and input properties, verbatim, plus what the contract does not
forbid and hosts use: a title, annotations (read-only / destructive / idempotent hints),
a description for every input property the contract left bare (its own stay word for
word), the bounds the contract states, and an output schema that ``structuredContent``
always matches. tests/mcp/test_tools_list.py takes the additions away and compares what
is left with the contract's list.

Bounds only where the contract states them, and only ones the server already enforces
(``Args.integer`` refuses a ``top_k`` below 1, ``Args.unit_number`` a confidence
outside [0, 1]), so a schema-checking client refuses nothing the server would accept.
``top_k``'s upper limit is a setting (``[palace] max_top_k``), so the schema names none.

Results are the shapes of section 5 of the contract, field for field, in its order;
``memory_list``'s drawers add ``room`` after them (the contract's results allow more).
This set imports nothing of the extended one (``tools_extended.py``); ``tool_sets.py``
lists and calls both.
"""

from __future__ import annotations

import uuid
from typing import Any

from trusty_memory.client.mcp.tool_record import (
    READ_ONLY,
    Args,
    Plan,
    Tool,
    by_name,
    fields,
    palace_name,
    pick,
    pick_list,
    resolve_palace,
)
from trusty_memory.client.mcp.tool_schema import (
    DRAWER_ID,
    PALACE,
    TRIPLE_FIELDS,
    array,
    inputs,
    obj,
    string,
    unit,
)

_WRITES = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}

_TAGS = array({"type": "string"}, "Tags attached at write time")
_IMPORTANCE = unit("Importance weight in [0.0, 1.0]")
_CREATED_AT = string("When the drawer was stored (RFC 3339)", format="date-time")

# --------------------------------------------------------------------------------------
# Drawers: remember, recall, list, forget.


def _remember(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params: dict[str, Any] = {
        "text": a.string("text", required=True),
        "room": a.string("room"),  # passed through: the worker normalises rooms
        "tags": a.strings("tags"),
        # Chosen here, before the first send, so a retried call stores one drawer.
        "drawer_id": str(uuid.uuid4()),
    }
    return Plan(a.tool, params, palace, fields("drawer_id", "palace", "status"))


MEMORY_REMEMBER = Tool(
    name="memory_remember",
    title="Remember",
    description="Store a memory (drawer) in a palace room.",
    input_schema=inputs(
        {
            "palace": PALACE,
            "text": {"type": "string", "description": "Memory content"},
            "room": {"type": "string", "description": "Room type (optional)"},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tags to attach (optional); blank and repeated tags are dropped",
            },
        },
        "palace",
        "text",
    ),
    output_schema=obj(
        drawer_id=DRAWER_ID,
        palace=string("The palace the drawer was stored in"),
        status={"const": "stored", "description": 'Always "stored"'},
    ),
    annotations=_WRITES,
    handler=_remember,
)

_HIT = ("drawer_id", "content", "score", "layer", "tags", "importance")


def _recall(a: Args, default_palace: str | None) -> Plan:
    """``memory_recall`` and ``memory_recall_deep``: the same call, another daemon method."""
    palace = resolve_palace(a, default_palace)
    params = {"query": a.string("query", required=True), "top_k": a.integer("top_k", 10)}
    return Plan(a.tool, params, palace, _shape_recall)


def _shape_recall(data: Any) -> dict[str, Any]:
    return pick_list(data, ("palace", "query"), "results", _HIT)


_RECALL_INPUT = inputs(
    {
        "palace": PALACE,
        "query": {"type": "string", "description": "What to look for, in natural language"},
        "top_k": {
            "type": "integer",
            "default": 10,
            "description": (
                "Maximum number of results, at least 1 (default 10; the server refuses more "
                "than its limit, 1000 unless configured otherwise)"
            ),
            "minimum": 1,
        },
    },
    "palace",
    "query",
)
_HIT_SCHEMA = obj(
    drawer_id=DRAWER_ID,
    content=string("The stored memory text"),
    score={"type": "number", "description": "Similarity score (higher is more relevant)"},
    layer={
        "type": "integer",
        "minimum": 0,
        "maximum": 3,
        "description": "Retrieval layer that surfaced this result (0-3)",
    },
    tags=_TAGS,
    importance=_IMPORTANCE,
)
_RECALL_OUTPUT = obj(
    palace=string("The palace searched"),
    query=string("The query, as given"),
    results=array(_HIT_SCHEMA, "The hits, most relevant first"),
)

MEMORY_RECALL = Tool(
    name="memory_recall",
    title="Recall memories",
    description="Recall memories using L0+L1+L2 progressive retrieval.",
    input_schema=_RECALL_INPUT,
    output_schema=_RECALL_OUTPUT,
    annotations=READ_ONLY,
    handler=_recall,
)

MEMORY_RECALL_DEEP = Tool(
    name="memory_recall_deep",
    title="Deep recall",
    description="Deep recall using L3 full HNSW search.",
    input_schema=_RECALL_INPUT,
    output_schema=_RECALL_OUTPUT,
    annotations=READ_ONLY,
    handler=_recall,
)

# The contract's fields, then ``room`` (beyond it: set on remember, a filter here).
_DRAWER = ("drawer_id", "content", "importance", "tags", "created_at", "room")


def _list(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {"room": a.string("room"), "tag": a.string("tag"), "limit": a.integer("limit", 50)}
    return Plan(a.tool, params, palace, _shape_list)


def _shape_list(data: Any) -> dict[str, Any]:
    return pick_list(data, ("palace",), "drawers", _DRAWER)


def _with_room(drawer: dict[str, Any]) -> dict[str, Any]:
    """A listed drawer's schema with ``room`` added, optional: not one of the contract's
    fields, so its ``required`` stays the contract's."""
    properties = {**drawer["properties"], "room": string("The drawer's room")}
    return {**drawer, "properties": properties}


MEMORY_LIST = Tool(
    name="memory_list",
    title="List memories",
    description="List drawers in a palace, optionally filtered by room type or tag.",
    input_schema=inputs(
        {
            "palace": PALACE,
            "room": {
                "type": "string",
                "description": (
                    "Filter by room type (Frontend, Backend, Testing, Planning, Documentation, "
                    "Research, Configuration, Meetings, General, or custom)"
                ),
            },
            "tag": {"type": "string", "description": "Filter by tag"},
            "limit": {"type": "integer", "description": "Max results (default 50)"},
        },
        "palace",
    ),
    output_schema=obj(
        palace=string("The palace listed"),
        drawers=array(
            _with_room(
                obj(
                    drawer_id=DRAWER_ID,
                    content=string("The stored memory text"),
                    importance=_IMPORTANCE,
                    tags=_TAGS,
                    created_at=_CREATED_AT,
                )
            ),
            "The drawers, most important first",
        ),
    ),
    annotations=READ_ONLY,
    handler=_list,
)


def _forget(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {"drawer_id": a.string("drawer_id", required=True)}
    return Plan(a.tool, params, palace, fields("status", "drawer_id", "palace"))


MEMORY_FORGET = Tool(
    name="memory_forget",
    title="Forget a memory",
    description="Delete a drawer from a palace by its UUID.",
    input_schema=inputs(
        {
            "palace": PALACE,
            "drawer_id": {"type": "string", "description": "UUID of the drawer to delete"},
        },
        "palace",
        "drawer_id",
    ),
    output_schema=obj(
        status={"const": "deleted", "description": 'Always "deleted"'},
        drawer_id=DRAWER_ID,
        palace=string("The palace the drawer was deleted from"),
    ),
    annotations={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    handler=_forget,
)

# --------------------------------------------------------------------------------------
# The knowledge graph: assert, query.


def _kg_assert(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {
        "subject": a.string("subject", required=True),
        "predicate": a.string("predicate", required=True),
        "object": a.string("object", required=True),
        "confidence": a.unit_number("confidence", 1.0),
        "provenance": a.string("provenance"),
    }
    return Plan(a.tool, params, palace, _shape_kg_assert)


def _shape_kg_assert(data: Any) -> dict[str, Any]:
    status = data.get("status") if isinstance(data, dict) else None
    return {"status": status or "asserted"}


KG_ASSERT = Tool(
    name="kg_assert",
    title="Assert a fact",
    description="Assert a fact in the temporal knowledge graph.",
    input_schema=inputs(
        {
            "palace": PALACE,
            "subject": {"type": "string", "description": "Entity identifier"},
            "predicate": {
                "type": "string",
                "description": (
                    "Relationship name; a new fact closes the active one with the same subject "
                    "and predicate"
                ),
            },
            "object": {"type": "string", "description": "Value or target entity"},
            "confidence": {
                "type": "number",
                "default": 1.0,
                "description": "Confidence score in [0.0, 1.0] (default 1.0)",
                "minimum": 0.0,
                "maximum": 1.0,
            },
            "provenance": {
                "type": "string",
                "description": "Free-form source identifier (optional)",
            },
        },
        "palace",
        "subject",
        "predicate",
        "object",
    ),
    output_schema=obj(status={"const": "asserted", "description": 'Always "asserted"'}),
    # Asserting closes the previous active triple for (subject, predicate): an update,
    # but history is kept, so it is not destructive.
    annotations=_WRITES,
    handler=_kg_assert,
)


def _kg_query(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params: dict[str, str | None] = {"subject": a.string("subject", required=True)}
    if a.extended and a.raw.get("as_of") is not None:
        params["as_of"] = a.string("as_of")  # the extended set's argument
    return Plan(a.tool, params, palace, _shape_kg_query)


def _shape_kg_query(data: Any) -> dict[str, Any]:
    return pick_list(data, ("subject",), "triples", TRIPLE_FIELDS)


KG_QUERY = Tool(
    name="kg_query",
    title="Query facts",
    description="Query active knowledge-graph triples for a subject.",
    input_schema=inputs(
        {
            "palace": PALACE,
            "subject": {
                "type": "string",
                "description": "Entity identifier whose active facts to return",
            },
        },
        "palace",
        "subject",
    ),
    output_schema=obj(
        subject=string("The subject, as given"),
        triples=array(
            obj(
                subject=string("Entity identifier"),
                predicate=string("Relationship name"),
                object=string("Value or target entity"),
                valid_from=string("When this fact became active (RFC 3339)", format="date-time"),
                valid_to={
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "When this fact was superseded; null means currently active",
                },
                confidence=unit("Caller-supplied confidence score in [0.0, 1.0]"),
                provenance={
                    "type": ["string", "null"],
                    "description": "Free-form source identifier",
                },
            ),
            "The subject's active facts",
        ),
    ),
    annotations=READ_ONLY,
    handler=_kg_query,
    # Listed, and passed on, only with ``--tools extended``.
    extended_input={
        "as_of": {
            "type": "string",
            "description": (
                "Return the facts that were active at this moment instead of now (RFC 3339 "
                "time, e.g. 2026-01-31T12:00:00Z (a date alone means its midnight UTC))"
            ),
        }
    },
)

# --------------------------------------------------------------------------------------
# Palaces: create, list, info.


def _palace_create(a: Args, default_palace: str | None) -> Plan:
    params = {"name": palace_name(a, "name"), "description": a.string("description")}
    return Plan(a.tool, params, None, fields("palace_id", "status"))


PALACE_CREATE = Tool(
    name="palace_create",
    title="Create a palace",
    description="Create a new memory palace.",
    input_schema=inputs(
        {
            "name": {
                "type": "string",
                "description": (
                    "Name of the new palace: up to 64 letters, digits, '-', '_' and '.', "
                    "not starting with '.'"
                ),
            },
            "description": {"type": "string", "description": "What the palace is for (optional)"},
        },
        "name",
    ),
    output_schema=obj(
        palace_id=string("The new palace's name"),
        status={"const": "created", "description": 'Always "created"'},
    ),
    annotations=_WRITES,
    handler=_palace_create,
)


def _palace_list(a: Args, default_palace: str | None) -> Plan:
    return Plan(a.tool, {}, None, _shape_palace_list)


def _shape_palace_list(data: Any) -> dict[str, Any]:
    return {"palaces": list(pick(data, "palaces")["palaces"] or [])}


PALACE_LIST = Tool(
    name="palace_list",
    title="List palaces",
    description="List all palaces on this machine.",
    input_schema=inputs({}),
    output_schema=obj(
        palaces=array({"type": "string"}, "The name of every palace on this machine"),
    ),
    annotations=READ_ONLY,
    handler=_palace_list,
)


def _palace_info(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    return Plan(a.tool, {}, palace, fields("id", "name", "drawer_count", "data_dir"))


PALACE_INFO = Tool(
    name="palace_info",
    title="Palace info",
    description="Get metadata and stats for a single palace.",
    input_schema=inputs({"palace": PALACE}, "palace"),
    output_schema=obj(
        id=string("The palace's identifier (its name)"),
        name=string("The palace's name"),
        drawer_count={"type": "integer", "minimum": 0, "description": "Drawers the palace holds"},
        data_dir=string("Where the palace's files are"),
    ),
    annotations=READ_ONLY,
    handler=_palace_info,
)

# --------------------------------------------------------------------------------------
# The set, in the contract's order.

TOOLS: dict[str, Tool] = by_name(
    MEMORY_REMEMBER,
    MEMORY_RECALL,
    MEMORY_RECALL_DEEP,
    PALACE_CREATE,
    PALACE_LIST,
    KG_ASSERT,
    KG_QUERY,
    MEMORY_LIST,
    MEMORY_FORGET,
    PALACE_INFO,
)
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)
