"""The verbs on memories: ``remember``, ``recall``, ``list``, ``show`` (``get``),
``forget``, ``update`` and ``search``. Each is one client call; the palace comes first."""

from __future__ import annotations

import sys

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import command, old_palace_option, palace_of
from trusty_memory.common.human import clip, describe, score
from trusty_memory.common.methods import Method
from trusty_memory.common.protocol import ErrorCode, TrustyError

TEXT_WIDTH = 100  # characters of a drawer's text on a one-line listing


def cmd_remember(args) -> int:
    text = sys.stdin.read().rstrip("\r\n") if args.text == "-" else args.text
    params = {
        "text": text,
        "room": args.room,
        "tags": args.tag or [],
        "importance": args.importance,
    }
    result = daemon_client().remember(args.palace, **params)
    output(
        args,
        {"drawer_id": result.drawer_id, "palace": result.palace, "status": result.status},
        result.drawer_id,
    )
    return 0


def cmd_recall(args) -> int:
    import msgspec

    result = daemon_client().recall(args.palace, args.query, top_k=args.top_k, deep=args.deep)
    lines = [
        f"{score(hit.score)}  L{hit.layer}  {hit.drawer_id}  {clip(hit.content, TEXT_WIDTH)}"
        for hit in result.results
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(nothing)")
    return 0


def cmd_list(args) -> int:
    import msgspec

    result = daemon_client().list(args.palace, room=args.room, tag=args.tag, limit=args.limit)
    lines = [
        f"{d.importance:4.2f}  {d.created_at}  {d.drawer_id}  {clip(d.content, 80)}"
        for d in result.drawers
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(empty)")
    return 0


def cmd_show(args) -> int:
    named = palace_of(args, args.drawer_id)
    client = daemon_client()
    for palace in [named] if named else client.palace_list():
        try:
            data = client.call(Method.DRAWER_GET, {"drawer_id": args.drawer_id}, palace=palace)
        except TrustyError as exc:
            if exc.code == ErrorCode.DRAWER_NOT_FOUND and not named:
                continue
            raise
        output(args, data, drawer_text(data))
        return 0
    raise TrustyError(
        ErrorCode.DRAWER_NOT_FOUND, f"drawer not found in any palace: {args.drawer_id}"
    )


def drawer_text(d: dict) -> str:
    """A whole drawer for people: its fields, then its text."""
    importance = f"{d['importance']:.4g}"
    if d.get("base_importance") is not None and d["base_importance"] != d["importance"]:
        importance += f" (given {d['base_importance']:.4g}; the dreamer's decay changed it)"
    rows = [
        ("Drawer", d["drawer_id"]),
        ("Palace", d["palace"]),
        ("Room", d["room"]),
        ("Tags", d["tags"]),
        ("Importance", importance),
        ("Created", d["created_at"]),
        ("Recalled", f"{d['hits']} times"),
    ]
    if d.get("metadata"):
        rows.append(("Metadata", d["metadata"]))
    return f"{describe(rows)}\n\n{d['content']}"


def cmd_forget(args) -> int:
    import msgspec

    result = daemon_client().forget(args.palace, args.drawer_id)
    output(args, msgspec.to_builtins(result), f"{result.status} {result.drawer_id}")
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
    lines = [f"{d.created_at}  {d.drawer_id}  {clip(d.content, 80)}" for d in result.drawers]
    if result.next_cursor:
        lines.append(f"(more: --cursor {result.next_cursor})")
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(nothing)")
    return 0


def register(sub) -> None:
    s = command(sub, "remember", cmd_remember, "store a memory", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("text", help="what to remember, or - to read it from stdin")
    s.add_argument("--room", help="room (default General)")
    s.add_argument("--tag", action="append", help="a tag (repeatable)")
    s.add_argument("--importance", type=float, default=0.5, help="0..1 (default 0.5)")

    s = command(sub, "recall", cmd_recall, "search memories by meaning", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("query", help="what to look for")
    s.add_argument("--top-k", type=int, default=10, help="how many results (default 10)")
    s.add_argument("--deep", action="store_true", help="L3: exhaustive hybrid search")

    s = command(sub, "list", cmd_list, "list drawers by importance", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("--room", help="only this room")
    s.add_argument("--tag", help="only drawers with this tag")
    s.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    s = command(
        sub,
        "show",
        cmd_show,
        "one whole drawer: show PALACE ID (show ID looks in every palace)",
        remote=True,
        aliases=("get",),
    )
    s.add_argument("palace", nargs="?", help="the palace that holds it (none: look in every one)")
    s.add_argument("drawer_id", help="the drawer's id")
    old_palace_option(s)

    s = command(sub, "forget", cmd_forget, "delete a drawer", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("drawer_id", help="the drawer's id")

    s = command(
        sub,
        "update",
        cmd_update,
        "change a drawer in place (the previous version goes to the archive)",
        remote=True,
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("drawer_id", help="the drawer's id")
    s.add_argument("--text", help="new text (embedded again), or - to read it from stdin")
    s.add_argument("--room", help="new room")
    s.add_argument("--tag", action="append", help="a tag (repeatable; replaces them all;"
                   " --tag '' clears them)")  # fmt: skip
    s.add_argument("--importance", type=float, help="new importance, 0..1")

    s = command(
        sub, "search", cmd_search, "keyword and phrase search, a page at a time", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument(
        "query", nargs="?", help='words and "quoted phrases" (none: list, last written first)'
    )
    s.add_argument("--room", help="only this room")
    s.add_argument("--tag", help="only drawers with this tag")
    s.add_argument("--since", help="only drawers stored at or after this time (RFC 3339)")
    s.add_argument("--until", help="only drawers stored before this time (RFC 3339)")
    s.add_argument("--limit", type=int, default=20, help="per page (default 20)")
    s.add_argument("--cursor", help="the next page: the cursor the previous one printed")
