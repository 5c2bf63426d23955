"""The CLI's verbs for the extended tools (``serve --tools extended``): update, search,
stats, health and the knowledge graph's history and invalidate."""

from __future__ import annotations

import sys

from trusty_memory.client.cli.output import daemon_client, output


def cmd_kg_history(args) -> int:
    import msgspec

    result = daemon_client().kg_history(args.palace, args.subject, args.predicate)
    lines = [
        f"{t.valid_from} .. {t.valid_to or 'now':20}  {t.subject} {t.predicate} {t.object}"
        for t in result.triples
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(no facts)")
    return 0


def cmd_kg_invalidate(args) -> int:
    import msgspec

    result = daemon_client().kg_invalidate(args.palace, args.subject, args.predicate, args.object)
    text = f"invalidated: {result.subject} {result.predicate} {result.object} ({result.valid_to})"
    output(args, msgspec.to_builtins(result), text)
    return 0


def cmd_update(args) -> int:
    import msgspec

    text = sys.stdin.read().rstrip("\r\n") if args.text == "-" else args.text
    fields = {"text": text, "room": args.room, "importance": args.importance}
    if args.tag is not None:
        fields["tags"] = [] if args.tag == [""] else args.tag
    result = daemon_client().update(args.palace, args.drawer_id, **fields)
    text = f"{result.status} {result.drawer_id}"
    if result.previous_version:
        text += f" ({', '.join(result.changed)}; previous version {result.previous_version})"
    output(args, msgspec.to_builtins(result), text)
    return 0


def cmd_search(args) -> int:
    import msgspec

    params = {"room": args.room, "tag": args.tag, "since": args.since, "until": args.until,
              "limit": args.limit, "cursor": args.cursor}  # fmt: skip
    result = daemon_client().search(args.palace, args.query, **params)
    lines = [f"{d.created_at}  {d.drawer_id}  {d.content[:80]}" for d in result.drawers]
    if result.next_cursor:
        lines.append(f"(more: --cursor {result.next_cursor})")
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(nothing)")
    return 0


def cmd_stats(args) -> int:
    import msgspec

    s = daemon_client().palace_stats(args.palace)
    rooms = ", ".join(f"{room} {n}" for room, n in s.room_counts.items()) or "no rooms"
    text = (
        f"{s.palace}: {s.drawer_count} drawers ({rooms}), {s.tag_count} tags,"
        f" {s.triple_count} active facts of {s.triple_total}, {s.archived_count} archived\n"
        f"change log at {s.last_seq}, index at {s.index_seq} (lag {s.index_lag},"
        f" {'loaded' if s.index_loaded else 'released'}); last dream {s.last_dream_at or 'never'}\n"
        f"{s.db_bytes / 1e6:.1f} MB in SQLite, {s.index_bytes / 1e6:.1f} MB index snapshot"
    )
    for run in s.dream_passes:
        text += (
            f"\n  dream {run.finished_at} ({run.duration_s:.1f} s): merged {run.merged},"
            f" decayed {run.decayed}, archived {run.archived}, facts decayed {run.kg_decayed}"
            + (" (stopped at its time budget)" if run.truncated else "")
        )
    output(args, msgspec.to_builtins(s), text)
    return 0


def cmd_health(args) -> int:
    import asyncio

    from trusty_memory.client.aio import AsyncClient
    from trusty_memory.client.mcp.tools_extended import health

    async def check() -> dict:
        async with AsyncClient() as client:
            return await health(client)

    data = asyncio.run(check())
    embedder = data["embedder"]
    embed = f"{embedder['embed_ms']} ms" if embedder["ok"] else f"FAILED: {embedder['error']}"
    text = (
        f"{data['status']}: daemon {data['version']} pid {data['pid']}, up {data['uptime_s']:.0f}s,"
        f" {data['restarts']} restarts\n"
        f"embedder: {embedder['workers']} workers, one embedding {embed}\n"
        f"dreamer: {'running' if data['dreamer']['running'] else 'not running'}\n"
        + "\n".join(
            f"palace {x['palace']}: {x['workers']} workers, {x['queued']} queued,"
            f" reader lag {x['max_lag']}"
            for x in data["palaces"]
        )
    )
    output(args, data, text.rstrip())
    return 0 if data["status"] == "ok" else 1
