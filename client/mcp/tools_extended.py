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

Like ``mcp/tools.py``, plain data and small functions: no SDK, no ZeroMQ. Each tool has a
title, annotations (read-only / destructive / idempotent hints), an input schema whose
every property is described, and an output schema its ``structuredContent`` always
matches (tests/mcp/test_extended_tools.py checks each through the SDK client). Errors
follow the contract's style: ``missing 'x'``, ``<tool>: '<arg>' must be ...``, and the
daemon's own messages, which name the cause.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

CONTRACT = "contract"
EXTENDED = "extended"
TOOL_SETS = (CONTRACT, EXTENDED)

PALACE = {
    "type": "string",
    "description": "Palace ID (optional if server started with --palace)",
}
_DRAWER_ID_IN = {"type": "string", "description": "UUID of the drawer"}
_STR_OR_NULL = {"type": ["string", "null"]}


def _object(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _time(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": description}


def _int(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "description": description}


def _unit(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0.0, "maximum": 1.0, "description": description}


_TAGS = {"type": "array", "items": {"type": "string"}, "description": "The drawer's tags"}
_ROOM = _s("The drawer's room")
_DRAWER_ID = _s("Stable identifier of the drawer (a UUID)")
_CREATED_AT = _time("When the drawer was stored (RFC 3339)")
_TRIPLE = _object(
    subject=_s("Entity identifier"),
    predicate=_s("Relationship name"),
    object=_s("Value or target entity"),
    valid_from=_time("When this fact became active (RFC 3339)"),
    valid_to={
        "type": ["string", "null"],
        "format": "date-time",
        "description": "When this fact was closed; null means still active",
    },
    confidence=_unit("Caller-supplied confidence score in [0.0, 1.0]"),
    provenance={"type": ["string", "null"], "description": "Free-form source identifier"},
)
_TIME_ARG = "RFC 3339 time, e.g. 2026-01-31T12:00:00Z (a date alone means its midnight UTC)"

# ``kg_query``'s extra argument: only listed when the extended set is on.
KG_QUERY_AS_OF = {
    "type": "string",
    "description": (
        "Return the facts that were active at this moment instead of now (" + _TIME_ARG + ")"
    ),
}

_READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}

# name -> title, description, input properties, required, annotations, output schema
TOOLS: dict[str, dict[str, Any]] = {
    "memory_get": {
        "title": "Get a memory",
        "description": "Get one whole drawer by its UUID: text, room, tags, importance, hits.",
        "properties": {"palace": PALACE, "drawer_id": _DRAWER_ID_IN},
        "required": ["palace", "drawer_id"],
        "annotations": _READ,
        "output": _object(
            drawer_id=_DRAWER_ID,
            palace=_s("The palace that holds it"),
            content=_s("The stored memory text"),
            room=_ROOM,
            tags=_TAGS,
            importance=_unit("Importance weight in [0.0, 1.0] (after the dreamer's decay)"),
            created_at=_CREATED_AT,
            hits=_int("How often recall has returned it"),
            metadata={"type": ["object", "null"], "description": "Metadata stored with it"},
        ),
    },
    "memory_update": {
        "title": "Update a memory",
        "description": (
            "Correct a drawer in place (same UUID): new text (embedded again), room, tags or "
            "importance. Fields left out stay as they are. The previous version goes to the "
            "archive; `trusty-memory archive restore <previous_version>` brings it back."
        ),
        "properties": {
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
        "required": ["palace", "drawer_id"],
        "annotations": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
        "output": _object(
            drawer_id=_DRAWER_ID,
            palace=_s("The palace that holds it"),
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
    },
    "memory_search": {
        "title": "Search memories",
        "description": (
            'Keyword search (every word must match; "quoted words" match as a phrase) with '
            "room, tag and time filters, a page at a time. Without a query, lists the "
            "drawers last written first (a new text counts as a write). Pass next_cursor back "
            "as cursor for the next page."
        ),
        "properties": {
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
        "required": ["palace"],
        "annotations": _READ,
        "output": _object(
            palace=_s("The palace searched"),
            query={"type": ["string", "null"], "description": "The query; null when listing"},
            drawers={
                "type": "array",
                "items": _object(
                    drawer_id=_DRAWER_ID,
                    content=_s("The stored memory text"),
                    room=_ROOM,
                    tags=_TAGS,
                    importance=_unit("Importance weight in [0.0, 1.0]"),
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
    },
    "kg_history": {
        "title": "Fact history",
        "description": "Every knowledge-graph triple of a subject, closed ones too, oldest first.",
        "properties": {
            "palace": PALACE,
            "subject": {"type": "string", "description": "Entity identifier"},
            "predicate": {"type": "string", "description": "Only this relationship (optional)"},
        },
        "required": ["palace", "subject"],
        "annotations": _READ,
        "output": _object(
            subject=_s("The subject, as given"),
            triples={"type": "array", "items": _TRIPLE, "description": "Oldest first"},
        ),
    },
    "kg_invalidate": {
        "title": "Invalidate a fact",
        "description": (
            "Close the active fact for a subject and predicate without asserting a "
            "replacement (it stays in kg_history)."
        ),
        "properties": {
            "palace": PALACE,
            "subject": {"type": "string", "description": "Entity identifier"},
            "predicate": {"type": "string", "description": "Relationship name"},
            "object": {
                "type": "string",
                "description": "Only close it if this is its value (optional)",
            },
        },
        "required": ["palace", "subject", "predicate"],
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "output": _object(
            status={"const": "invalidated", "description": 'Always "invalidated"'},
            subject=_s("Entity identifier"),
            predicate=_s("Relationship name"),
            object=_s("The value the closed fact had"),
            valid_to=_time("When it was closed (RFC 3339)"),
        ),
    },
    "palace_delete": {
        "title": "Delete a palace",
        "description": (
            "Move a palace to the archive (`trusty-memory palace restore NAME` brings it "
            "back). Needs confirm: true."
        ),
        "properties": {
            "name": {"type": "string", "description": "Name of the palace to delete"},
            "confirm": {"type": "boolean", "description": "Must be true: deleting is deliberate"},
        },
        "required": ["name", "confirm"],
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "output": _object(
            palace=_s("The palace deleted"),
            status={"const": "archived", "description": 'Always "archived"'},
            entry=_s("Its archive entry (what palace restore takes)"),
        ),
    },
    "memory_stats": {
        "title": "Palace stats",
        "description": (
            "Counts (drawers by room, tags, facts, archive), index lag, last dream pass and "
            "sizes on disk of one palace."
        ),
        "properties": {"palace": PALACE},
        "required": ["palace"],
        "annotations": _READ,
        "output": _object(
            palace=_s("The palace"),
            role={"enum": ["writer", "reader"], "description": "The worker that answered"},
            drawer_count=_int("Drawers the palace holds"),
            room_counts={
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
                "description": "Drawers per room",
            },
            tag_count=_int("Distinct tags in use"),
            triple_count=_int("Active knowledge-graph facts"),
            triple_total=_int("Facts including closed ones"),
            archived_count=_int("Drawers and versions in the archive"),
            last_seq=_int("Newest change the answering worker has read"),
            index_seq=_int("Newest change its vector index holds"),
            index_lag=_int("Changes its vector index has yet to apply"),
            index_loaded={"type": "boolean", "description": "Whether the index is in memory"},
            last_dream_at={
                "type": ["string", "null"],
                "format": "date-time",
                "description": "When the dreamer last finished a pass; null if never",
            },
            db_bytes=_int("Size of the palace's SQLite file and its WAL"),
            index_bytes=_int("Size of the newest vector index snapshot"),
            dream_passes={
                "type": "array",
                "description": "The dreamer's last passes, newest first (at most 10)",
                "items": _object(
                    finished_at={
                        "type": "string",
                        "format": "date-time",
                        "description": "When the pass finished",
                    },
                    duration_s={"type": "number", "description": "How long it ran, seconds"},
                    merged=_int("Drawers merged into others"),
                    decayed=_int("Drawers whose importance decayed"),
                    archived=_int("Drawers archived once they had faded"),
                    kg_decayed=_int("Facts whose confidence decayed"),
                    truncated={
                        "type": "boolean",
                        "description": "The pass stopped at its time budget",
                    },
                ),
            },
        ),
    },
    "health": {
        "title": "Health",
        "description": "Is the daemon well: its workers, the embedder (a real embedding is "
        "timed) and the dreamer.",
        "properties": {},
        "required": [],
        "annotations": _READ,
        "output": _object(
            status={
                "enum": ["ok", "degraded"],
                "description": (
                    "degraded: the embedder failed, or the dreamer is enabled but not running"
                ),
            },
            version=_s("The daemon's version"),
            pid={"type": "integer", "description": "The daemon's process id"},
            uptime_s={"type": "number", "minimum": 0, "description": "Seconds since start"},
            embedder=_object(
                ok={"type": "boolean", "description": "An embedding came back"},
                workers=_int("Embedder processes"),
                embed_ms={
                    "type": ["number", "null"],
                    "description": "Time of one short embedding; null if it failed",
                },
                error={"type": ["string", "null"], "description": "Why it failed, if it did"},
            ),
            dreamer=_object(
                running={"type": "boolean", "description": "The dreamer process runs"},
                pid={"type": ["integer", "null"], "description": "Its process id"},
            ),
            palaces={
                "type": "array",
                "items": _object(
                    palace=_s("Palace name"),
                    workers=_int("Its worker processes (writer and readers)"),
                    queued=_int("Requests waiting for a worker"),
                    max_lag=_int("The furthest a reader is behind the writer, in changes"),
                ),
                "description": "Palaces with workers running",
            },
            restarts=_int("Worker restarts since the daemon started"),
        ),
    },
}


# --------------------------------------------------------------------------------------
# Calls. Each returns (daemon method, params, palace or None, shape) like mcp_tools'
# _palace_params, or a coroutine function for tools that need more than one call.

Shape = Callable[[Any], dict[str, Any]]
Runner = Callable[[Any], Awaitable[dict[str, Any]]]


def _pick(data: Any, *keys: str) -> dict[str, Any]:
    from trusty_memory.client.mcp.tools import _pick as pick

    return pick(data, *keys)


def _shape_drawers(data: Any) -> dict[str, Any]:
    out = _pick(data, "palace", "query")
    keys = ("drawer_id", "content", "room", "tags", "importance", "created_at", "score")
    out["drawers"] = [_pick(d, *keys) for d in data.get("drawers") or []]
    out["next_cursor"] = data.get("next_cursor")
    return out


def _shape_history(data: Any) -> dict[str, Any]:
    from trusty_memory.client.mcp.tools import _shape_kg_query

    return _shape_kg_query(data)


def importance_of(a: Any) -> float | None:
    if a.raw.get("importance") is None:
        return None
    return a.unit_number("importance", 0.5)


def tags_or_none(a: Any) -> list[str] | None:
    return None if a.raw.get("tags") is None else a.strings("tags")


def palace_params(name: str, a: Any) -> tuple[dict[str, Any], Shape]:
    """Params and result shape of the extended tools that work inside one palace."""
    if name == "memory_get":
        keys = ("drawer_id", "palace", "content", "room", "tags", "importance", "created_at",
                "hits", "metadata")  # fmt: skip
        return {"drawer_id": a.string("drawer_id", required=True)}, lambda d: _pick(d, *keys)
    if name == "memory_update":
        params = {
            "drawer_id": a.string("drawer_id", required=True),
            "text": a.string("text"),
            "room": a.string("room"),
            "tags": tags_or_none(a),
            "importance": importance_of(a),
        }
        if all(params[k] is None for k in ("text", "room", "tags", "importance")):
            from trusty_memory.client.mcp.tools import ToolError

            raise ToolError("memory_update: nothing to update: give text, room, tags or importance")
        keys = ("drawer_id", "palace", "status", "changed", "previous_version")
        return params, lambda d: _pick(d, *keys)
    if name == "memory_search":
        params = {
            "query": a.string("query"),
            "room": a.string("room"),
            "tag": a.string("tag"),
            "since": a.string("since"),
            "until": a.string("until"),
            "limit": a.integer("limit", 20),
            "cursor": a.string("cursor"),
        }
        return params, _shape_drawers
    if name == "kg_history":
        params = {
            "subject": a.string("subject", required=True),
            "predicate": a.string("predicate"),
        }
        return params, _shape_history
    if name == "kg_invalidate":
        params = {
            "subject": a.string("subject", required=True),
            "predicate": a.string("predicate", required=True),
            "object": a.string("object"),
        }
        keys = ("status", "subject", "predicate", "object", "valid_to")
        return params, lambda d: _pick(d, *keys)
    if name == "memory_stats":
        keys = tuple(TOOLS["memory_stats"]["output"]["properties"])
        return {}, lambda d: _pick(d, *keys)
    raise KeyError(name)


DAEMON_METHODS = {"memory_get": "drawer_get", "memory_stats": "palace_stats"}


def confirm_delete(a: Any) -> str:
    """``palace_delete``'s name, once ``confirm`` is exactly true."""
    from trusty_memory.client.mcp.tools import ToolError
    from trusty_memory.common.names import validate_palace_name
    from trusty_memory.common.protocol import TrustyError

    name = a.string("name", required=True)
    try:
        validate_palace_name(name)
    except TrustyError as exc:
        raise ToolError(f"palace_delete: {exc.message}") from None
    confirm = a.raw.get("confirm")
    if confirm is not True:
        got = "missing" if confirm is None else f"{confirm!r}"
        raise ToolError(
            f"palace_delete: 'confirm' must be true to delete palace {name} (got {got});"
            f" it moves to the archive, from where `trusty-memory palace restore {name}`"
            " brings it back"
        )
    return name


def delete_runner(name: str) -> Runner:
    async def run(backend: Any) -> dict[str, Any]:
        data = await backend.call("palace_delete", {"name": name}, palace=None, timeout=60.0)
        return _pick(data, "palace", "status", "entry")

    return run


async def health(backend: Any) -> dict[str, Any]:
    """The daemon's status, and one real embedding timed (the embedder's health is whether
    it embeds, not whether its process exists)."""
    from trusty_memory.common.protocol import EMBEDDER_SERVICE, PALACE_SERVICE_PREFIX, TrustyError

    status = await backend.call("status", {}, palace=None)
    services = {s["name"]: s for s in status.get("services") or []}
    started = time.perf_counter()
    embed_ms, error = None, None
    try:
        # A text of its own each time, so that the model runs (not the embedder's cache).
        probe = f"health check {time.time_ns()}"
        await backend.call("embed", {"texts": [probe]}, palace=None, timeout=30.0)
        embed_ms = round((time.perf_counter() - started) * 1e3, 1)
    except TrustyError as exc:
        error = exc.message
    embedder = services.get(EMBEDDER_SERVICE, {})
    dreamer_pid = status.get("dreamer_pid")
    palaces = []
    for name, service in sorted(services.items()):
        if not name.startswith(PALACE_SERVICE_PREFIX):
            continue
        workers = service.get("workers") or []
        palaces.append(
            {
                "palace": name[len(PALACE_SERVICE_PREFIX) :],
                "workers": len(workers),
                "queued": service.get("queued", 0),
                "max_lag": max((w.get("lag") or 0 for w in workers), default=0),
            }
        )
    config = getattr(backend, "config", None)
    dreamer_wanted = config is None or config.dreamer.enabled
    ok = error is None and (dreamer_pid is not None or not dreamer_wanted)
    return {
        "status": "ok" if ok else "degraded",
        "version": status.get("version"),
        "pid": status.get("pid"),
        "uptime_s": status.get("uptime_s"),
        "embedder": {
            "ok": error is None,
            "workers": len(embedder.get("workers") or []),
            "embed_ms": embed_ms,
            "error": error,
        },
        "dreamer": {"running": dreamer_pid is not None, "pid": dreamer_pid},
        "palaces": palaces,
        "restarts": sum((status.get("restarts") or {}).values()),
    }
