"""The contract's ten MCP tools: their schemas, argument checks and result shapes.

This module is plain data plus small functions, and imports neither the ``mcp`` SDK nor
the ZeroMQ client, so it costs nothing at start-up and can be unit-tested alone. The
server module turns :func:`tool_definitions` into SDK ``Tool`` objects and hands every
``tools/call`` to :func:`call_tool` with a :class:`Backend` (the daemon client).

Why the front end checks arguments itself: the contract fixes the error *messages*
(``missing 'text'``, ``memory_recall: missing 'palace' (no --palace default
configured)``), and a bad argument should fail fast without a round trip to the daemon.
Everything that needs storage (room normalisation, size limits, existence) stays with
the palace worker, which is the only authority on it.

Results are projected onto exactly the contract's fields, in the contract's order: the
workers return richer records (a hit's ``room``, a palace's ``triple_count``), and a
drop-in must not surprise integrators who compare objects.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

MAX_INTEGER = 2**31 - 1

# --------------------------------------------------------------------------------------
# The tool table, verbatim from the contract (seeds/000, section 4).

_PALACE_PROP = {
    "type": "string",
    "description": "Palace ID (optional if server started with --palace)",
}
_STR = {"type": "string"}

_ROOM_FILTER_DESCRIPTION = (
    "Filter by room type (Frontend, Backend, Testing, Planning, Documentation, Research, "
    "Configuration, Meetings, General, or custom)"
)

# name -> (description, properties, required). ``palace`` leads ``required`` when present.
_TABLE: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "memory_remember": (
        "Store a memory (drawer) in a palace room.",
        {
            "palace": _PALACE_PROP,
            "text": {"type": "string", "description": "Memory content"},
            "room": {"type": "string", "description": "Room type (optional)"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        ["palace", "text"],
    ),
    "memory_recall": (
        "Recall memories using L0+L1+L2 progressive retrieval.",
        {"palace": _STR, "query": _STR, "top_k": {"type": "integer", "default": 10}},
        ["palace", "query"],
    ),
    "memory_recall_deep": (
        "Deep recall using L3 full HNSW search.",
        {"palace": _STR, "query": _STR, "top_k": {"type": "integer", "default": 10}},
        ["palace", "query"],
    ),
    "palace_create": (
        "Create a new memory palace.",
        {"name": _STR, "description": _STR},
        ["name"],
    ),
    "palace_list": ("List all palaces on this machine.", {}, []),
    "kg_assert": (
        "Assert a fact in the temporal knowledge graph.",
        {
            "palace": _STR,
            "subject": _STR,
            "predicate": _STR,
            "object": _STR,
            "confidence": {"type": "number", "default": 1.0},
            "provenance": _STR,
        },
        ["palace", "subject", "predicate", "object"],
    ),
    "kg_query": (
        "Query active knowledge-graph triples for a subject.",
        {"palace": _STR, "subject": _STR},
        ["palace", "subject"],
    ),
    "memory_list": (
        "List drawers in a palace, optionally filtered by room type or tag.",
        {
            "palace": _STR,
            "room": {"type": "string", "description": _ROOM_FILTER_DESCRIPTION},
            "tag": {"type": "string", "description": "Filter by tag"},
            "limit": {"type": "integer", "description": "Max results (default 50)"},
        },
        ["palace"],
    ),
    "memory_forget": (
        "Delete a drawer from a palace by its UUID.",
        {
            "palace": _STR,
            "drawer_id": {"type": "string", "description": "UUID of the drawer to delete"},
        },
        ["palace", "drawer_id"],
    ),
    "palace_info": (
        "Get metadata and stats for a single palace.",
        {"palace": _STR},
        ["palace"],
    ),
}

TOOL_NAMES: tuple[str, ...] = tuple(_TABLE)

# MCP tool annotations (an addition the contract does not forbid; AutoMem's lesson, seed
# 003): hosts use them to decide what needs a confirmation prompt.
_READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
_ANNOTATIONS: dict[str, dict[str, bool]] = {
    "memory_remember": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "memory_recall": _READ_ONLY,
    "memory_recall_deep": _READ_ONLY,
    "palace_create": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "palace_list": _READ_ONLY,
    # Asserting closes the previous active triple for (subject, predicate): an update,
    # but history is kept, so it is not destructive.
    "kg_assert": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "kg_query": _READ_ONLY,
    "memory_list": _READ_ONLY,
    "memory_forget": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    "palace_info": _READ_ONLY,
}


# --------------------------------------------------------------------------------------
# Additions to the contract's table. The contract fixes the names, the input properties,
# the results and the errors; what follows only describes them, for hosts and for the
# model that reads the tool list: a title per tool, a description for every input
# property the contract left bare (the contract's own stay verbatim), the bounds the
# contract states, and an output schema per tool that ``structuredContent`` always
# matches (tests/mcp/test_output_schemas.py checks every tool through the SDK client).

_TITLES: dict[str, str] = {
    "memory_remember": "Remember",
    "memory_recall": "Recall memories",
    "memory_recall_deep": "Deep recall",
    "palace_create": "Create a palace",
    "palace_list": "List palaces",
    "kg_assert": "Assert a fact",
    "kg_query": "Query facts",
    "memory_list": "List memories",
    "memory_forget": "Forget a memory",
    "palace_info": "Palace info",
}

_PALACE_DESCRIPTION = _PALACE_PROP["description"]
_QUERY_DESCRIPTION = "What to look for, in natural language"
_TOP_K_DESCRIPTION = (
    "Maximum number of results, at least 1 (default 10; the server refuses more than its "
    "limit, 1000 unless configured otherwise)"
)

# Descriptions for the properties the contract gives none; a property the contract
# describes keeps the contract's words (tool_definitions never overwrites one).
_INPUT_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "memory_remember": {"tags": "Tags to attach (optional); blank and repeated tags are dropped"},
    "memory_recall": {
        "palace": _PALACE_DESCRIPTION,
        "query": _QUERY_DESCRIPTION,
        "top_k": _TOP_K_DESCRIPTION,
    },
    "memory_recall_deep": {
        "palace": _PALACE_DESCRIPTION,
        "query": _QUERY_DESCRIPTION,
        "top_k": _TOP_K_DESCRIPTION,
    },
    "palace_create": {
        "name": (
            "Name of the new palace: up to 64 letters, digits, '-', '_' and '.', "
            "not starting with '.'"
        ),
        "description": "What the palace is for (optional)",
    },
    "kg_assert": {
        "palace": _PALACE_DESCRIPTION,
        "subject": "Entity identifier",
        "predicate": (
            "Relationship name; a new fact closes the active one with the same subject "
            "and predicate"
        ),
        "object": "Value or target entity",
        "confidence": "Confidence score in [0.0, 1.0] (default 1.0)",
        "provenance": "Free-form source identifier (optional)",
    },
    "kg_query": {
        "palace": _PALACE_DESCRIPTION,
        "subject": "Entity identifier whose active facts to return",
    },
    "memory_list": {"palace": _PALACE_DESCRIPTION},
    "memory_forget": {"palace": _PALACE_DESCRIPTION},
    "palace_info": {"palace": _PALACE_DESCRIPTION},
}

# Bounds only where the contract states them, and only ones the server already enforces
# (Args.integer refuses a top_k below 1, Args.unit_number a confidence outside [0, 1]), so
# a schema-checking client refuses nothing the server would accept. top_k's upper limit
# is a setting ([palace] max_top_k), so the schema names none.
_INPUT_BOUNDS: dict[str, dict[str, dict[str, float]]] = {
    "memory_recall": {"top_k": {"minimum": 1}},
    "memory_recall_deep": {"top_k": {"minimum": 1}},
    "kg_assert": {"confidence": {"minimum": 0.0, "maximum": 1.0}},
}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    """An object schema whose properties are all required: every result carries every
    field of its shape (``_pick`` fills none in)."""
    return {"type": "object", "properties": properties, "required": list(properties)}


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _array(items: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "items": items, "description": description}


def _unit(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0.0, "maximum": 1.0, "description": description}


_DRAWER_ID = _string("Stable identifier of the drawer (a UUID)")
_TAGS = _array({"type": "string"}, "Tags attached at write time")
_IMPORTANCE = _unit("Importance weight in [0.0, 1.0]")

# The result shapes of section 5 of the contract, field for field (the ``_shape_*`` and
# ``_fields`` projections below produce exactly these keys, in this order).
_HIT_SCHEMA = _object(
    drawer_id=_DRAWER_ID,
    content=_string("The stored memory text"),
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
_RECALL_SCHEMA = _object(
    palace=_string("The palace searched"),
    query=_string("The query, as given"),
    results=_array(_HIT_SCHEMA, "The hits, most relevant first"),
)
_DRAWER_SCHEMA = _object(
    drawer_id=_DRAWER_ID,
    content=_string("The stored memory text"),
    importance=_IMPORTANCE,
    tags=_TAGS,
    created_at=_string("When the drawer was stored (RFC 3339)", format="date-time"),
)
_TRIPLE_SCHEMA = _object(
    subject=_string("Entity identifier"),
    predicate=_string("Relationship name"),
    object=_string("Value or target entity"),
    valid_from=_string("When this fact became active (RFC 3339)", format="date-time"),
    valid_to={
        "type": ["string", "null"],
        "format": "date-time",
        "description": "When this fact was superseded; null means currently active",
    },
    confidence=_unit("Caller-supplied confidence score in [0.0, 1.0]"),
    provenance={"type": ["string", "null"], "description": "Free-form source identifier"},
)

_OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "memory_remember": _object(
        drawer_id=_DRAWER_ID,
        palace=_string("The palace the drawer was stored in"),
        status={"const": "stored", "description": 'Always "stored"'},
    ),
    "memory_recall": _RECALL_SCHEMA,
    "memory_recall_deep": _RECALL_SCHEMA,
    "palace_create": _object(
        palace_id=_string("The new palace's name"),
        status={"const": "created", "description": 'Always "created"'},
    ),
    "palace_list": _object(
        palaces=_array({"type": "string"}, "The name of every palace on this machine"),
    ),
    "kg_assert": _object(status={"const": "asserted", "description": 'Always "asserted"'}),
    "kg_query": _object(
        subject=_string("The subject, as given"),
        triples=_array(_TRIPLE_SCHEMA, "The subject's active facts"),
    ),
    "memory_list": _object(
        palace=_string("The palace listed"),
        drawers=_array(_DRAWER_SCHEMA, "The drawers, most important first"),
    ),
    "memory_forget": _object(
        status={"const": "deleted", "description": 'Always "deleted"'},
        drawer_id=_DRAWER_ID,
        palace=_string("The palace the drawer was deleted from"),
    ),
    "palace_info": _object(
        id=_string("The palace's identifier (its name)"),
        name=_string("The palace's name"),
        drawer_count={
            "type": "integer",
            "minimum": 0,
            "description": "Drawers the palace holds",
        },
        data_dir=_string("Where the palace's files are"),
    ),
}


def _input_schema(name: str, default_palace: str | None) -> dict[str, Any]:
    _, contract_properties, required = _TABLE[name]
    properties = json.loads(json.dumps(contract_properties))
    for prop, description in _INPUT_DESCRIPTIONS.get(name, {}).items():
        properties[prop].setdefault("description", description)
    for prop, bounds in _INPUT_BOUNDS.get(name, {}).items():
        properties[prop].update(bounds)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    req = [r for r in required if not (r == "palace" and default_palace)]
    if req:  # an empty ``required`` is invalid in older JSON Schema drafts: omit it
        schema["required"] = req
    return schema


def tool_definitions(
    default_palace: str | None = None, tools: str = "contract"
) -> list[dict[str, Any]]:
    """The ``tools/list`` entries in wire (camelCase) form.

    ``tools="extended"`` adds ``mcp_tools_extended.TOOLS`` after the contract's ten and
    ``as_of`` to ``kg_query``; the contract's entries are otherwise the same objects.

    The contract's name, description and input schema, plus the additions above. With a
    default palace, ``palace`` leaves ``required`` but stays an accepted property, as the
    contract says. Fresh dicts every call, so callers may mutate them.

    The SDK shapes every handshake revision's ``tools/list`` result through the newest
    handshake revision's models (mcp_types.methods.SERVER_RESULTS), which carry
    ``title`` and ``outputSchema``, so the same entries serve every revision; the relay
    answers with them as they are (tests/mcp/test_relay.py holds the two answers equal).
    """
    entries = []
    for name, (description, _, _) in _TABLE.items():
        title = _TITLES[name]
        entries.append(
            {
                "name": name,
                "title": title,
                "description": description,
                "inputSchema": _input_schema(name, default_palace),
                "outputSchema": json.loads(json.dumps(_OUTPUT_SCHEMAS[name])),
                # The title again where the 2025-03-26 revision put it (annotations.title),
                # for hosts that only read that one.
                "annotations": {"title": title, **_ANNOTATIONS[name]},
            }
        )
    if tools == "extended":
        _add_extended(entries, default_palace)
    return entries


def _add_extended(entries: list[dict[str, Any]], default_palace: str | None) -> None:
    from trusty_memory.client.mcp import tools_extended as ext

    for entry in entries:
        if entry["name"] == "kg_query":
            entry["inputSchema"]["properties"]["as_of"] = dict(ext.KG_QUERY_AS_OF)
    for name, tool in ext.TOOLS.items():
        schema: dict[str, Any] = {
            "type": "object",
            "properties": json.loads(json.dumps(tool["properties"])),
        }
        req = [r for r in tool["required"] if not (r == "palace" and default_palace)]
        if req:
            schema["required"] = req
        entries.append(
            {
                "name": name,
                "title": tool["title"],
                "description": tool["description"],
                "inputSchema": schema,
                "outputSchema": json.loads(json.dumps(tool["output"])),
                "annotations": {"title": tool["title"], **tool["annotations"]},
            }
        )


# --------------------------------------------------------------------------------------
# Calling a tool.


class ToolError(Exception):
    """A tool call that failed; the message goes to the client as JSON-RPC ``-32603``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Backend(Protocol):
    """What a tool call needs from the daemon: ``AsyncClient.call``'s shape.

    Implementations raise ``trusty_memory.common.protocol.TrustyError`` on daemon errors.
    """

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, palace: str | None = None
    ) -> Any: ...


class Args:
    """Typed access to one call's ``arguments`` that raises the contract's messages.

    JSON ``null`` counts as absent: some hosts send every schema property, filled or not.
    """

    def __init__(self, tool: str, arguments: dict[str, Any] | None) -> None:
        self.tool = tool
        self.raw = arguments or {}
        self.extended = False  # the call came through the extended tool set

    def _get(self, key: str) -> Any:
        return self.raw.get(key)

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self._get(key)
        if value is None:
            if required:
                raise ToolError(f"missing '{key}'")
            return None
        if not isinstance(value, str):
            raise ToolError(f"{self.tool}: '{key}' must be a string, got {_json_type(value)}")
        self._utf8(key, value)
        return value

    def strings(self, key: str) -> list[str]:
        value = self._get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ToolError(f"{self.tool}: '{key}' must be an array of strings")
        for i, item in enumerate(value):
            self._utf8(f"{key}[{i}]", item)
        return list(value)

    def _utf8(self, key: str, value: str) -> None:
        """JSON may carry a lone surrogate (``"\\ud800"``) that UTF-8 cannot: refused here,
        naming the argument, before it reaches the daemon's encoder."""
        from trusty_memory.common.protocol import surrogate_in

        where = surrogate_in(value)
        if where is not None:
            raise ToolError(
                f"{self.tool}: '{key}' contains a lone surrogate {where}; send valid UTF-8"
            )

    def integer(self, key: str, default: int) -> int:
        value = self._get(key)
        if value is None:
            return default
        # bool is an int in Python but not in JSON; 5.0 is a fine integer in JSON.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolError(f"{self.tool}: '{key}' must be an integer, got {_json_type(value)}")
        if value < 1:
            raise ToolError(f"{self.tool}: '{key}' must be a positive integer, got {value}")
        if value > MAX_INTEGER:  # the wire's integers are bounded; the worker bounds it more
            raise ToolError(f"{self.tool}: '{key}' is too large: {value}")
        return value

    def unit_number(self, key: str, default: float) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolError(f"{self.tool}: '{key}' must be a number, got {_json_type(value)}")
        if not 0.0 <= value <= 1.0:
            raise ToolError(f"{self.tool}: '{key}' must be between 0.0 and 1.0, got {value}")
        return float(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def resolve_palace(args: Args, default_palace: str | None) -> str:
    """The palace a call targets: its own argument, else the ``--palace`` default."""
    from trusty_memory.common.names import validate_palace_name
    from trusty_memory.common.protocol import TrustyError

    palace = args.string("palace") or default_palace
    if not palace:
        raise ToolError(f"{args.tool}: missing 'palace' (no --palace default configured)")
    try:
        return validate_palace_name(palace)
    except TrustyError as exc:
        raise ToolError(f"{args.tool}: {exc.message}") from None


def _pick(obj: Any, *keys: str) -> dict[str, Any]:
    """Exactly ``keys`` from a result record, in that order (missing ones as null)."""
    if not isinstance(obj, dict):
        raise ToolError(f"malformed daemon result: expected an object, got {_json_type(obj)}")
    return {k: obj.get(k) for k in keys}


_HIT = ("drawer_id", "content", "score", "layer", "tags", "importance")
_DRAWER = ("drawer_id", "content", "importance", "tags", "created_at")
_TRIPLE = ("subject", "predicate", "object", "valid_from", "valid_to", "confidence", "provenance")


def _shape_recall(data: Any) -> dict[str, Any]:
    out = _pick(data, "palace", "query")
    out["results"] = [_pick(hit, *_HIT) for hit in data.get("results") or []]
    return out


def _shape_list(data: Any) -> dict[str, Any]:
    out = _pick(data, "palace")
    out["drawers"] = [_pick(d, *_DRAWER) for d in data.get("drawers") or []]
    return out


def _shape_kg_query(data: Any) -> dict[str, Any]:
    out = _pick(data, "subject")
    out["triples"] = [_pick(t, *_TRIPLE) for t in data.get("triples") or []]
    return out


def _shape_kg_assert(data: Any) -> dict[str, Any]:
    status = data.get("status") if isinstance(data, dict) else None
    return {"status": status or "asserted"}


def _shape_palace_list(data: Any) -> dict[str, Any]:
    return {"palaces": list(_pick(data, "palaces")["palaces"] or [])}


def _fields(*keys: str) -> Callable[[Any], dict[str, Any]]:
    return lambda data: _pick(data, *keys)


@dataclass(frozen=True)
class Plan:
    """A checked tool call: the daemon method, its params, and how to shape the answer."""

    method: str
    params: dict[str, Any]
    palace: str | None
    shape: Callable[[Any], dict[str, Any]]
    # Tools that need more than one daemon call (``health``) run this instead.
    run: Callable[[Backend], Awaitable[dict[str, Any]]] | None = None


def _palace_params(name: str, a: Args) -> tuple[dict[str, Any], Callable[[Any], dict[str, Any]]]:
    """Params and result shape of the tools that work inside one palace."""
    if name == "memory_remember":
        params: dict[str, Any] = {
            "text": a.string("text", required=True),
            "room": a.string("room"),  # passed through: the worker normalises rooms
            "tags": a.strings("tags"),
            # Chosen here, before the first send, so a retried call stores one drawer.
            "drawer_id": str(uuid.uuid4()),
        }
        return params, _fields("drawer_id", "palace", "status")
    if name in ("memory_recall", "memory_recall_deep"):
        params = {"query": a.string("query", required=True), "top_k": a.integer("top_k", 10)}
        return params, _shape_recall
    if name == "memory_list":
        params = {"room": a.string("room"), "tag": a.string("tag"), "limit": a.integer("limit", 50)}
        return params, _shape_list
    if name == "memory_forget":
        return {"drawer_id": a.string("drawer_id", required=True)}, _fields(
            "status", "drawer_id", "palace"
        )
    if name == "kg_assert":
        params = {
            "subject": a.string("subject", required=True),
            "predicate": a.string("predicate", required=True),
            "object": a.string("object", required=True),
            "confidence": a.unit_number("confidence", 1.0),
            "provenance": a.string("provenance"),
        }
        return params, _shape_kg_assert
    if name == "kg_query":
        params = {"subject": a.string("subject", required=True)}
        if a.extended and a.raw.get("as_of") is not None:
            params["as_of"] = a.string("as_of")  # the extended set's argument
        return params, _shape_kg_query
    if name == "palace_info":
        return {}, _fields("id", "name", "drawer_count", "data_dir")
    raise ToolError(f"unknown tool: {name}")


def plan_call(
    name: str,
    arguments: dict[str, Any] | None,
    default_palace: str | None,
    tools: str = "contract",
) -> Plan:
    """Check a call's arguments and build its daemon request, without any I/O.

    Everything the front end can reject, it rejects here, so a bad call fails fast
    even when no daemon is running. ``tools="extended"`` also accepts the extended set
    (``mcp/tools_extended.py``); without it those names are unknown tools.
    """
    from trusty_memory.common.names import validate_palace_name
    from trusty_memory.common.protocol import TrustyError

    extended = tools == "extended"
    if extended and name not in _TABLE:
        return _plan_extended(name, arguments, default_palace)
    if name not in _TABLE:
        raise ToolError(f"unknown tool: {name}")
    a = Args(name, arguments)
    a.extended = extended
    if name == "palace_list":
        return Plan("palace_list", {}, None, _shape_palace_list)
    if name == "palace_create":
        palace_name = a.string("name", required=True)
        try:
            validate_palace_name(palace_name)
        except TrustyError as exc:
            raise ToolError(f"palace_create: {exc.message}") from None
        params = {"name": palace_name, "description": a.string("description")}
        return Plan("palace_create", params, None, _fields("palace_id", "status"))
    palace = resolve_palace(a, default_palace)
    params, shape = _palace_params(name, a)
    return Plan(name, params, palace, shape)


def _plan_extended(name: str, arguments: dict[str, Any] | None, default_palace: str | None) -> Plan:
    from trusty_memory.client.mcp import tools_extended as ext

    if name not in ext.TOOLS:
        raise ToolError(f"unknown tool: {name}")
    a = Args(name, arguments)
    if name == "health":
        return Plan("status", {}, None, dict, run=ext.health)
    if name == "palace_delete":
        return Plan("palace_delete", {}, None, dict, run=ext.delete_runner(ext.confirm_delete(a)))
    palace = resolve_palace(a, default_palace)
    params, shape = ext.palace_params(name, a)
    return Plan(ext.DAEMON_METHODS.get(name, name), params, palace, shape)


async def call_tool(
    name: str,
    arguments: dict[str, Any] | None,
    backend: Backend,
    *,
    default_palace: str | None = None,
    before_call: Callable[[], Awaitable[None]] | None = None,
    tools: str = "contract",
) -> dict[str, Any]:
    """Run one tool; return the contract's result object or raise :class:`ToolError`.

    ``before_call`` runs once the arguments have passed their checks and before the
    daemon is asked anything: the server uses it to make sure the ``--palace`` default
    exists. Daemon errors keep their message, which already names the cause.
    """
    from trusty_memory.common.protocol import TrustyError

    plan = plan_call(name, arguments, default_palace, tools)
    try:
        if before_call is not None:
            await before_call()
        if plan.run is not None:
            return await plan.run(backend)
        data = await backend.call(plan.method, plan.params, palace=plan.palace)
    except TrustyError as exc:
        raise ToolError(exc.message) from None
    return plan.shape(data)
