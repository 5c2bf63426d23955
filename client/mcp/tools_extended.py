"""The extended tool set: what ``serve --tools extended`` adds to the contract's ten.

Opt-in (``--tools extended``, ``[mcp] tools = "extended"`` or ``TRUSTY_MEMORY_TOOLS``):
without it ``tools/list`` is the contract's exact ten, so a drop-in user sees no change.
With it, an agent can correct a memory (``memory_update``, the previous version kept in
the archive), read one whole (``memory_get``), find memories by keyword or phrase and page
through a palace past ``memory_list``'s 1,000 (``memory_search``), see how a fact changed
(``kg_history``, ``kg_query`` with ``as_of``), close a fact (``kg_invalidate``), archive a
palace (``palace_delete``, with an explicit confirm), and check on the palace and the
daemon (``memory_stats``, ``health``). The peers in the seeds show these are what agents
reach for next (quaid, AutoMem, MemPalace; the README's table compares them row by row).

Like ``tools.py``, one :class:`Tool` record per tool beside its handler, plain data and
small functions: no SDK, no ZeroMQ, and nothing of the contract's set (``tool_sets.py``
serves the two together; ``kg_query``'s ``as_of`` is in its own record); ``memory_stats``
and ``health`` are in ``tools_status.py``. Each tool has a
title, annotations (read-only / destructive / idempotent hints), an input schema whose
every property is described, and an output schema its ``structuredContent`` always
matches (tests/mcp/test_extended_tools.py checks each through the SDK client). Errors
follow the contract's style: ``missing 'x'``, ``<tool>: '<arg>' must be ...``, and the
daemon's own messages, which name the cause.
"""

from __future__ import annotations

from typing import Any

from trusty_memory.client.mcp.tool_record import (
    READ_ONLY,
    Args,
    Plan,
    Tool,
    ToolError,
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
    count,
    date_time,
    inputs,
    obj,
    string,
    unit,
)

# ``health`` stays importable from here: ``trusty-memory health`` runs it.
from trusty_memory.client.mcp.tools_status import HEALTH, MEMORY_STATS, health  # noqa: F401
from trusty_memory.common.methods import Method

_DRAWER_ID_IN = {"type": "string", "description": "UUID of the drawer"}
_TAGS = array({"type": "string"}, "The drawer's tags")
_ROOM = string("The drawer's room")
_CREATED_AT = date_time("When the drawer was stored (RFC 3339)")
_TIME_ARG = "RFC 3339 time, e.g. 2026-01-31T12:00:00Z (a date alone means its midnight UTC)"

# --------------------------------------------------------------------------------------
# Drawers: get, update, search.

_GET_OUTPUT = obj(
    drawer_id=DRAWER_ID,
    palace=string("The palace that holds it"),
    content=string("The stored memory text"),
    room=_ROOM,
    tags=_TAGS,
    importance=unit("Importance weight in [0.0, 1.0] (after the dreamer's decay)"),
    created_at=_CREATED_AT,
    hits=count("How often recall has returned it"),
    metadata={"type": ["object", "null"], "description": "Metadata stored with it"},
)


def _get(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {"drawer_id": a.string("drawer_id", required=True)}
    return Plan(Method.DRAWER_GET, params, palace, fields(*_GET_OUTPUT["properties"]))


MEMORY_GET = Tool(
    name="memory_get",
    title="Get a memory",
    description="Get one whole drawer by its UUID: text, room, tags, importance, hits.",
    input_schema=inputs({"palace": PALACE, "drawer_id": _DRAWER_ID_IN}, "palace", "drawer_id"),
    output_schema=_GET_OUTPUT,
    annotations=READ_ONLY,
    handler=_get,
)


def _importance(a: Args) -> float | None:
    """``None`` (left as it is) unless given; a given one restarts its decay."""
    if a.raw.get("importance") is None:
        return None
    return a.unit_number("importance", 0.5)


def _update(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {
        "drawer_id": a.string("drawer_id", required=True),
        "text": a.string("text"),
        "room": a.string("room"),
        "tags": None if a.raw.get("tags") is None else a.strings("tags"),
        "importance": _importance(a),
    }
    if all(params[k] is None for k in ("text", "room", "tags", "importance")):
        raise ToolError("memory_update: nothing to update: give text, room, tags or importance")
    shape = fields("drawer_id", "palace", "status", "changed", "previous_version")
    return Plan(Method.MEMORY_UPDATE, params, palace, shape)


MEMORY_UPDATE = Tool(
    name="memory_update",
    title="Update a memory",
    description=(
        "Correct a drawer in place (same UUID): new text (embedded again), room, tags or "
        "importance. Fields left out stay as they are. The previous version goes to the "
        "archive; `trusty-memory archive restore <previous_version>` brings it back."
    ),
    input_schema=inputs(
        {
            "palace": PALACE,
            "drawer_id": _DRAWER_ID_IN,
            "text": {"type": "string", "description": "New memory content (optional)"},
            "room": {"type": "string", "description": "New room type (optional)"},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "New tags, replacing the old ones (optional)",
            },
            "importance": {
                "type": "number",
                "minimum": 0.0,
                "maximum": 1.0,
                "description": "New importance in [0.0, 1.0] (optional; restarts its decay)",
            },
        },
        "palace",
        "drawer_id",
    ),
    output_schema=obj(
        drawer_id=DRAWER_ID,
        palace=string("The palace that holds it"),
        status={"enum": ["updated", "unchanged"], "description": "What happened"},
        changed={
            "type": "array",
            "items": {"enum": ["text", "room", "tags", "importance"]},
            "description": "The fields that changed",
        },
        previous_version={
            "type": ["string", "null"],
            "description": "Archive id of the version replaced; null when nothing changed",
        },
    ),
    annotations={"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    handler=_update,
)

_FOUND = ("drawer_id", "content", "room", "tags", "importance", "created_at", "score")


def _search(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {
        "query": a.string("query"),
        "room": a.string("room"),
        "tag": a.string("tag"),
        "since": a.string("since"),
        "until": a.string("until"),
        "limit": a.integer("limit", 20),
        "cursor": a.string("cursor"),
    }
    return Plan(Method.MEMORY_SEARCH, params, palace, _shape_search)


def _shape_search(data: Any) -> dict[str, Any]:
    out = pick_list(data, ("palace", "query"), "drawers", _FOUND)
    out["next_cursor"] = data.get("next_cursor")
    return out


MEMORY_SEARCH = Tool(
    name="memory_search",
    title="Search memories",
    description=(
        "Keyword search (a word also matches words it begins, word* as a prefix; drawers "
        'holding more of the words rank first; "quoted words" must match as a phrase, '
        "and an upper-case AND asks for every word) with "
        "room, tag and time filters, a page at a time. Without a query, lists the "
        "drawers last written first (a new text counts as a write). Pass next_cursor back "
        "as cursor for the next page."
    ),
    input_schema=inputs(
        {
            "palace": PALACE,
            "query": {
                "type": "string",
                "description": 'Words and "quoted phrases" to find (optional: list without)',
            },
            "room": {"type": "string", "description": "Only drawers in this room"},
            "tag": {"type": "string", "description": "Only drawers with this tag"},
            "since": {
                "type": "string",
                "description": "Only drawers stored at or after: " + _TIME_ARG,
            },
            "until": {"type": "string", "description": "Only drawers stored before: " + _TIME_ARG},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Drawers per page (default 20, at most 1000)",
            },
            "cursor": {
                "type": "string",
                "description": "next_cursor of the previous page, with the same query and filters",
            },
        },
        "palace",
    ),
    output_schema=obj(
        palace=string("The palace searched"),
        query={"type": ["string", "null"], "description": "The query; null when listing"},
        drawers={
            "type": "array",
            "items": obj(
                drawer_id=DRAWER_ID,
                content=string("The stored memory text"),
                room=_ROOM,
                tags=_TAGS,
                importance=unit("Importance weight in [0.0, 1.0]"),
                created_at=_CREATED_AT,
                score={
                    "type": ["number", "null"],
                    "description": "BM25 relevance (higher is better); null when listing",
                },
            ),
            "description": "This page: best match first, or last written first when listing",
        },
        next_cursor={
            "type": ["string", "null"],
            "description": "Pass as cursor for the next page; null on the last page",
        },
    ),
    annotations=READ_ONLY,
    handler=_search,
)

# --------------------------------------------------------------------------------------
# The knowledge graph: history, invalidate (``kg_query``'s ``as_of`` is in its record).


def _kg_history(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {"subject": a.string("subject", required=True), "predicate": a.string("predicate")}
    return Plan(Method.KG_HISTORY, params, palace, _shape_history)


def _shape_history(data: Any) -> dict[str, Any]:
    return pick_list(data, ("subject",), "triples", TRIPLE_FIELDS)


KG_HISTORY = Tool(
    name="kg_history",
    title="Fact history",
    description="Every knowledge-graph triple of a subject, closed ones too, oldest first.",
    input_schema=inputs(
        {
            "palace": PALACE,
            "subject": {"type": "string", "description": "Entity identifier"},
            "predicate": {"type": "string", "description": "Only this relationship (optional)"},
        },
        "palace",
        "subject",
    ),
    output_schema=obj(
        subject=string("The subject, as given"),
        triples={
            "type": "array",
            "items": obj(
                subject=string("Entity identifier"),
                predicate=string("Relationship name"),
                object=string("Value or target entity"),
                valid_from=date_time("When this fact became active (RFC 3339)"),
                valid_to={
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "When this fact was closed; null means still active",
                },
                confidence=unit("Caller-supplied confidence score in [0.0, 1.0]"),
                provenance={
                    "type": ["string", "null"],
                    "description": "Free-form source identifier",
                },
            ),
            "description": "Oldest first",
        },
    ),
    annotations=READ_ONLY,
    handler=_kg_history,
)


def _kg_invalidate(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    params = {
        "subject": a.string("subject", required=True),
        "predicate": a.string("predicate", required=True),
        "object": a.string("object"),
    }
    shape = fields("status", "subject", "predicate", "object", "valid_to")
    return Plan(Method.KG_INVALIDATE, params, palace, shape)


KG_INVALIDATE = Tool(
    name="kg_invalidate",
    title="Invalidate a fact",
    description=(
        "Close the active fact for a subject and predicate without asserting a "
        "replacement (it stays in kg_history)."
    ),
    input_schema=inputs(
        {
            "palace": PALACE,
            "subject": {"type": "string", "description": "Entity identifier"},
            "predicate": {"type": "string", "description": "Relationship name"},
            "object": {
                "type": "string",
                "description": "Only close it if this is its value (optional)",
            },
        },
        "palace",
        "subject",
        "predicate",
    ),
    output_schema=obj(
        status={"const": "invalidated", "description": 'Always "invalidated"'},
        subject=string("Entity identifier"),
        predicate=string("Relationship name"),
        object=string("The value the closed fact had"),
        valid_to=date_time("When it was closed (RFC 3339)"),
    ),
    annotations={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    handler=_kg_invalidate,
)

# --------------------------------------------------------------------------------------
# Palaces: delete (stats and health are in ``tools_status.py``).


def _palace_delete(a: Args, default_palace: str | None) -> Plan:
    """Archive the palace named, once ``confirm`` is exactly true."""
    name = palace_name(a, "name")
    confirm = a.raw.get("confirm")
    if confirm is not True:
        got = "missing" if confirm is None else f"{confirm!r}"
        raise ToolError(
            f"palace_delete: 'confirm' must be true to delete palace {name} (got {got});"
            f" it moves to the archive, from where `trusty-memory palace restore {name}`"
            " brings it back"
        )

    async def run(backend: Any) -> dict[str, Any]:
        data = await backend.call(Method.PALACE_DELETE, {"name": name}, palace=None, timeout=60.0)
        return pick(data, "palace", "status", "entry")

    return Plan(Method.PALACE_DELETE, {}, None, dict, run=run)


PALACE_DELETE = Tool(
    name="palace_delete",
    title="Delete a palace",
    description=(
        "Move a palace to the archive (`trusty-memory palace restore NAME` brings it "
        "back). Needs confirm: true."
    ),
    input_schema=inputs(
        {
            "name": {"type": "string", "description": "Name of the palace to delete"},
            "confirm": {"type": "boolean", "description": "Must be true: deleting is deliberate"},
        },
        "name",
        "confirm",
    ),
    output_schema=obj(
        palace=string("The palace deleted"),
        status={"const": "archived", "description": 'Always "archived"'},
        entry=string("Its archive entry (what palace restore takes)"),
    ),
    annotations={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    handler=_palace_delete,
)

# --------------------------------------------------------------------------------------
# The set, in ``tools/list`` order (after the contract's ten).

TOOLS: dict[str, Tool] = by_name(
    MEMORY_GET,
    MEMORY_UPDATE,
    MEMORY_SEARCH,
    KG_HISTORY,
    KG_INVALIDATE,
    PALACE_DELETE,
    MEMORY_STATS,
    HEALTH,
)
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)
