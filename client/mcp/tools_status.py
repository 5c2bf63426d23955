"""The extended set's status tools: ``memory_stats`` (one palace) and ``health`` (the daemon).

Part of ``tools_extended.py``'s set, which lists them last; kept apart because their
answers are the widest of the set. ``trusty-memory health`` runs :func:`health` too.
"""

from __future__ import annotations

import time
from typing import Any

from trusty_memory.client.mcp.tool_record import READ_ONLY, Args, Plan, Tool, fields, resolve_palace
from trusty_memory.client.mcp.tool_schema import PALACE, count, inputs, obj, string
from trusty_memory.common.methods import Method
from trusty_memory.common.protocol import EMBEDDER_SERVICE, PALACE_SERVICE_PREFIX, TrustyError

# --------------------------------------------------------------------------------------
# A palace: stats.

_STATS_OUTPUT = obj(
    palace=string("The palace"),
    role={"enum": ["writer", "reader"], "description": "The worker that answered"},
    drawer_count=count("Drawers the palace holds"),
    room_counts={
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0},
        "description": "Drawers per room",
    },
    tag_count=count("Distinct tags in use"),
    triple_count=count("Active knowledge-graph facts"),
    triple_total=count("Facts including closed ones"),
    archived_count=count("Drawers and versions in the archive"),
    redacted_count=count("Drawers whose text had credentials replaced by markers"),
    last_seq=count("Newest change the answering worker has read"),
    index_seq=count("Newest change its vector index holds"),
    index_lag=count("Changes its vector index has yet to apply"),
    index_loaded={"type": "boolean", "description": "Whether the index is in memory"},
    last_dream_at={
        "type": ["string", "null"],
        "format": "date-time",
        "description": "When the dreamer last finished a pass; null if never",
    },
    db_bytes=count("Size of the palace's SQLite file and its WAL"),
    index_bytes=count("Size of the newest vector index snapshot"),
    dream_passes={
        "type": "array",
        "description": "The dreamer's last passes, newest first (at most 10)",
        "items": obj(
            finished_at={
                "type": "string",
                "format": "date-time",
                "description": "When the pass finished",
            },
            duration_s={"type": "number", "description": "How long it ran, seconds"},
            merged=count("Drawers merged into others"),
            decayed=count("Drawers whose importance decayed"),
            archived=count("Drawers archived once they had faded"),
            kg_decayed=count("Facts whose confidence decayed"),
            truncated={
                "type": "boolean",
                "description": "The pass stopped at its time budget",
            },
        ),
    },
)


def _stats(a: Args, default_palace: str | None) -> Plan:
    palace = resolve_palace(a, default_palace)
    return Plan(Method.PALACE_STATS, {}, palace, fields(*_STATS_OUTPUT["properties"]))


MEMORY_STATS = Tool(
    name="memory_stats",
    title="Palace stats",
    description=(
        "Counts (drawers by room, tags, facts, archive, drawers with credentials redacted),"
        " index lag, last dream pass and sizes on disk of one palace."
    ),
    input_schema=inputs({"palace": PALACE}, "palace"),
    output_schema=_STATS_OUTPUT,
    annotations=READ_ONLY,
    handler=_stats,
)

# --------------------------------------------------------------------------------------
# The daemon: health.


async def health(backend: Any) -> dict[str, Any]:
    """The daemon's status, and one real embedding timed (the embedder's health is whether
    it embeds, not whether its process exists). ``trusty-memory health`` runs it too."""
    status = await backend.call(Method.STATUS, {}, palace=None)
    services = {s["name"]: s for s in status.get("services") or []}
    started = time.perf_counter()
    embed_ms, error = None, None
    try:
        # A text of its own each time, so that the model runs (not the embedder's cache).
        probe = f"health check {time.time_ns()}"
        await backend.call(Method.EMBED, {"texts": [probe]}, palace=None, timeout=30.0)
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


def _health(a: Args, default_palace: str | None) -> Plan:
    return Plan(Method.STATUS, {}, None, dict, run=health)


HEALTH = Tool(
    name="health",
    title="Health",
    description="Is the daemon well: its workers, the embedder (a real embedding is "
    "timed) and the dreamer.",
    input_schema=inputs({}),
    output_schema=obj(
        status={
            "enum": ["ok", "degraded"],
            "description": (
                "degraded: the embedder failed, or the dreamer is enabled but not running"
            ),
        },
        version=string("The daemon's version"),
        pid={"type": "integer", "description": "The daemon's process id"},
        uptime_s={"type": "number", "minimum": 0, "description": "Seconds since start"},
        embedder=obj(
            ok={"type": "boolean", "description": "An embedding came back"},
            workers=count("Embedder processes"),
            embed_ms={
                "type": ["number", "null"],
                "description": "Time of one short embedding; null if it failed",
            },
            error={"type": ["string", "null"], "description": "Why it failed, if it did"},
        ),
        dreamer=obj(
            running={"type": "boolean", "description": "The dreamer process runs"},
            pid={"type": ["integer", "null"], "description": "Its process id"},
        ),
        palaces={
            "type": "array",
            "items": obj(
                palace=string("Palace name"),
                workers=count("Its worker processes (writer and readers)"),
                queued=count("Requests waiting for a worker"),
                max_lag=count("The furthest a reader is behind the writer, in changes"),
            ),
            "description": "Palaces with workers running",
        },
        restarts=count("Worker restarts since the daemon started"),
    ),
    annotations=READ_ONLY,
    handler=_health,
)
