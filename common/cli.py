"""The ``trusty-memory`` command: a thin layer over the client library.

``serve`` is the MCP stdio front end (what agents spawn); ``daemon`` runs the broker in
the foreground (what systemd runs); the rest are small conveniences for people, each one
a single client call with readable output (``--json`` for scripts). Imports are deferred
to the subcommand that needs them, so ``serve`` starts without paying for the others.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def _client():
    from trusty_memory.client.sync import Client

    return Client()


def _print(args, data, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def cmd_serve(args) -> int:
    from trusty_memory.client.mcp_server import run_serve

    return run_serve(palace=args.palace, http=args.http, allow_remote=args.allow_remote)


def cmd_daemon(args) -> int:
    from trusty_memory.broker.daemon import run_daemon

    return run_daemon()


def cmd_status(args) -> int:
    from trusty_memory.client.daemon import ping
    from trusty_memory.config import load_config

    config = load_config()
    if not ping(config, 1.0):
        _print(args, {"running": False}, f"not running (home {config.home})")
        return 3
    status = _client().status()
    lines = [f"running: pid {status['pid']}, up {status['uptime_s']:.0f}s, home {status['home']}"]
    for s in status["services"]:
        lines.append(f"  {s['name']}: queued {s['queued']}")
        for w in s["workers"] or [{}]:
            lines.append("    " + _worker_line(w) if w else "    no workers")
    _print(args, status, "\n".join(lines))
    return 0


def _worker_line(w: dict) -> str:
    parts = [f"{w['role']:<8} pid {w['pid']}", f"inflight {w['inflight']}"]
    parts.append(f"{w['requests_per_s']:.1f} req/s")
    if w.get("lag") is not None:
        parts.append(f"seq {w['seq']} (lag {w['lag']})")
    if w.get("rss_mb") is not None:
        parts.append(f"{w['rss_mb']:.0f} MB")
    return ", ".join(parts)


def cmd_scale(args) -> int:
    data = _client().call("palace_scale", {"name": args.palace, "readers": args.readers})
    _print(args, data, f"{data['palace']}: {data['readers']} readers")
    return 0


def cmd_stop(args) -> int:
    from trusty_memory.client.daemon import daemon_pid
    from trusty_memory.config import load_config

    config = load_config()
    # Only the daemon that holds the home's lock, checked by pid *and* start time: a pid
    # left by a crashed daemon and since reused belongs to someone else.
    pid = daemon_pid(config)
    if pid is None:
        print("not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if daemon_pid(config) is None:
            print(f"stopped (pid {pid})")
            return 0
        time.sleep(0.05)
    print(f"pid {pid} did not stop within {args.timeout}s", file=sys.stderr)
    return 1


def cmd_remember(args) -> int:
    params = {
        "text": args.text,
        "room": args.room,
        "tags": args.tag or [],
        "importance": args.importance,
    }
    result = _client().remember(args.palace, **params)
    _print(
        args,
        {"drawer_id": result.drawer_id, "palace": result.palace, "status": result.status},
        result.drawer_id,
    )
    return 0


def cmd_recall(args) -> int:
    import msgspec

    result = _client().recall(args.palace, args.query, top_k=args.top_k, deep=args.deep)
    lines = [
        f"{hit.score:6.3f}  L{hit.layer}  {hit.drawer_id}  {hit.content[:100]}"
        for hit in result.results
    ]
    _print(args, msgspec.to_builtins(result), "\n".join(lines) or "(nothing)")
    return 0


def cmd_list(args) -> int:
    import msgspec

    result = _client().list(args.palace, room=args.room, tag=args.tag, limit=args.limit)
    lines = [
        f"{d.importance:4.2f}  {d.created_at}  {d.drawer_id}  {d.content[:80]}"
        for d in result.drawers
    ]
    _print(args, msgspec.to_builtins(result), "\n".join(lines) or "(empty)")
    return 0


def cmd_forget(args) -> int:
    import msgspec

    result = _client().forget(args.palace, args.drawer_id)
    _print(args, msgspec.to_builtins(result), f"{result.status} {result.drawer_id}")
    return 0


def cmd_palace(args) -> int:
    import msgspec

    client = _client()
    if args.action == "list":
        names = client.palace_list()
        _print(args, {"palaces": names}, "\n".join(names) or "(no palaces)")
    elif args.action == "create":
        result = client.palace_create(args.name, args.description)
        _print(args, result, f"created {args.name}")
    else:
        info = client.palace_info(args.name)
        text = f"{info.name}: {info.drawer_count} drawers, {info.triple_count} triples"
        text += f", {info.data_dir}"
        _print(args, msgspec.to_builtins(info), text)
    return 0


def cmd_export(args) -> int:
    from trusty_memory.client import bulk

    client = _client()
    total = client.palace_info(args.palace).drawer_count
    progress = bulk.Progress(f"export {args.palace}", total=total)
    if args.output in (None, "-"):
        summary = bulk.export_jsonl(
            client, args.palace, sys.stdout.buffer, vectors=not args.no_vectors, progress=progress
        )
    else:
        with open(args.output, "wb") as out:
            summary = bulk.export_jsonl(
                client, args.palace, out, vectors=not args.no_vectors, progress=progress
            )
    progress.close()
    print(f"exported {summary.drawers} drawers, {summary.triples} triples", file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from trusty_memory.client import bulk
    from trusty_memory.config import load_config
    from trusty_memory.protocol import ErrorCode, TrustyError

    client = _client()
    if not args.dry_run:
        try:
            client.palace_create(args.palace)
        except TrustyError as exc:
            if exc.code != ErrorCode.PALACE_EXISTS:
                raise
    progress = bulk.Progress(f"import {args.palace}")
    options = {
        "max_text_bytes": load_config().palace.max_text_bytes,
        "batch_size": args.batch_size,
        "dry_run": args.dry_run,
        "progress": progress,
    }
    if args.file == "-":
        summary = bulk.import_jsonl(client, args.palace, sys.stdin.buffer, **options)
    else:
        with open(args.file, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            summary = bulk.import_jsonl(client, args.palace, stream, total_bytes=size, **options)
    progress.close()
    for bad in summary.bad[: bulk.MAX_BAD_SHOWN]:
        print(f"line {bad.lineno}: {bad.error}", file=sys.stderr)
    if len(summary.bad) > bulk.MAX_BAD_SHOWN:
        print(f"... and {len(summary.bad) - bulk.MAX_BAD_SHOWN} more bad lines", file=sys.stderr)
    if summary.error:
        print(f"import stopped: {summary.error} (re-run to resume)", file=sys.stderr)
    text = (
        f"imported {summary.imported}, skipped {summary.skipped} existing,"
        f" {len(summary.bad)} bad lines ({summary.held_back} good lines held back with them);"
        f" triples imported {summary.triples_imported}, skipped {summary.triples_skipped}"
    )
    _print(args, summary.as_dict(), text)
    return 0 if summary.ok else 1


def cmd_dream(args) -> int:
    from trusty_memory.config import load_config
    from trusty_memory.dreamer import progress
    from trusty_memory.dreamer.__main__ import dream_once

    emit = progress.json_lines() if args.json else progress.text()
    palaces = [args.palace] if args.palace else None
    dream_once(load_config(), palaces, dry_run=args.dry_run, emit=emit)
    return 0


def cmd_dreamer(args) -> int:
    from trusty_memory.dreamer.__main__ import run_dreamer

    return run_dreamer(supervised=False, json_lines=args.json)


def cmd_archive(args) -> int:
    client = _client()
    if args.action == "restore":
        if not args.drawer_id:
            print("trusty-memory: archive restore needs a DRAWER_ID", file=sys.stderr)
            return 2
        data = client.call("archive_restore", {"drawer_id": args.drawer_id}, palace=args.palace)
        _print(args, data, f"restored {data['drawer_id']}")
        return 0
    params = {"limit": args.limit, "reason": args.reason}
    data = client.call("archive_list", params, palace=args.palace)
    lines = []
    for d in data["drawers"]:
        why = f"merged into {d['merged_into']}" if d["reason"] == "merged" else d["reason"]
        lines.append(f"{d['archived_at']}  {d['drawer_id']}  {why}  {d['content'][:60]}")
    _print(args, data, "\n".join(lines) or "(archive empty)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trusty-memory", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="MCP server on stdio (what agents spawn)")
    s.add_argument("--palace", help="default palace; created if missing")
    s.add_argument("--http", metavar="ADDR", help="also serve MCP over HTTP at ADDR (host:port)")
    s.add_argument(
        "--allow-remote", action="store_true", help="allow --http on a non-loopback address"
    )
    s.set_defaults(fn=cmd_serve)

    sub.add_parser("daemon", help="run the broker in the foreground").set_defaults(fn=cmd_daemon)
    sub.add_parser("status", help="is the daemon running, and what it runs").set_defaults(
        fn=cmd_status
    )
    s = sub.add_parser("stop", help="stop the daemon cleanly")
    s.add_argument("--timeout", type=float, default=15.0)
    s.set_defaults(fn=cmd_stop)

    s = sub.add_parser("scale", help="set how many reader processes serve a palace's reads")
    s.add_argument("palace")
    s.add_argument("--readers", type=int, required=True, help="readers beside the writer")
    s.set_defaults(fn=cmd_scale)

    s = sub.add_parser("remember", help="store a memory")
    s.add_argument("palace")
    s.add_argument("text")
    s.add_argument("--room")
    s.add_argument("--tag", action="append", help="repeatable")
    s.add_argument("--importance", type=float, default=0.5)
    s.set_defaults(fn=cmd_remember)

    s = sub.add_parser("recall", help="search memories")
    s.add_argument("palace")
    s.add_argument("query")
    s.add_argument("--top-k", type=int, default=10)
    s.add_argument("--deep", action="store_true", help="L3: exhaustive hybrid search")
    s.set_defaults(fn=cmd_recall)

    s = sub.add_parser("list", help="list drawers by importance")
    s.add_argument("palace")
    s.add_argument("--room")
    s.add_argument("--tag")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("forget", help="delete a drawer")
    s.add_argument("palace")
    s.add_argument("drawer_id")
    s.set_defaults(fn=cmd_forget)

    s = sub.add_parser("export", help="write a palace as JSON lines (drawers, vectors, triples)")
    s.add_argument("palace")
    s.add_argument("-o", "--output", help="file to write (default: stdout)")
    s.add_argument("--no-vectors", action="store_true", help="leave vectors out (smaller)")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("import", help="load JSON lines into a palace (idempotent by drawer id)")
    s.add_argument("palace")
    s.add_argument("file", help="JSONL file, or - for stdin")
    s.add_argument("--batch-size", type=int, default=500, help="lines per transaction")
    s.add_argument("--dry-run", action="store_true", help="validate every line, send nothing")
    s.set_defaults(fn=cmd_import)

    s = sub.add_parser("dream", help="one dream pass now: dedup, decay, prune (see --dry-run)")
    s.add_argument("--palace", help="only this palace (default: all)")
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    s.add_argument(
        "--json", action="store_true", help="JSON-lines progress events", default=argparse.SUPPRESS
    )
    s.set_defaults(fn=cmd_dream)

    s = sub.add_parser("dreamer", help="run the dreamer process in the foreground")
    s.add_argument(
        "--json", action="store_true", help="JSON-lines events on stdout", default=argparse.SUPPRESS
    )
    s.set_defaults(fn=cmd_dreamer)

    s = sub.add_parser("archive", help="drawers the dreamer pruned or merged: list, restore")
    s.add_argument("action", choices=["list", "restore"])
    s.add_argument("palace")
    s.add_argument("drawer_id", nargs="?")
    s.add_argument("--reason", choices=["pruned", "merged"])
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_archive)

    s = sub.add_parser("palace", help="list, create or inspect palaces")
    s.add_argument("action", choices=["list", "create", "info"])
    s.add_argument("name", nargs="?")
    s.add_argument("--description")
    s.set_defaults(fn=cmd_palace)
    return parser


def main(argv: list[str] | None = None) -> int:
    from trusty_memory.home import make_private

    make_private()  # exports, logs and a daemon this command starts: the user's alone
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "action", None) in ("create", "info") and not args.name:
        parser.error(f"palace {args.action} needs a NAME")
    from trusty_memory.protocol import TrustyError

    try:
        return args.fn(args)
    except TrustyError as exc:
        print(f"trusty-memory: error {int(exc.code)}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # ``trusty-memory status | head -1``: the reader left; that is not an error. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
