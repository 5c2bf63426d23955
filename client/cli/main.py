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
from pathlib import Path

from trusty_memory.client.cli.extended import (
    cmd_health,
    cmd_kg_history,
    cmd_kg_invalidate,
    cmd_search,
    cmd_stats,
    cmd_update,
)
from trusty_memory.client.cli.keys import (
    cmd_keys_add,
    cmd_keys_init,
    cmd_keys_list,
    cmd_keys_revoke,
    cmd_keys_show,
)
from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.service import cmd_service_install, cmd_service_uninstall


def cmd_serve(args) -> int:
    from trusty_memory.client.mcp.server import run_serve

    return run_serve(
        palace=args.palace, http=args.http, allow_remote=args.allow_remote, tools=args.tools
    )


def cmd_ui(args) -> int:
    from trusty_memory.ui.server import run_ui

    return run_ui(args.host, args.port, allow_remote=args.allow_remote)


def cmd_daemon(args) -> int:
    """Become the daemon: this process, so a service manager's pid is the daemon's."""
    if args.insecure:
        os.environ["TRUSTY_MEMORY_BROKER_INSECURE"] = "1"
    return become("trusty_memory.broker", *(["--take-over"] if args.take_over else []))


def cmd_worker(args) -> int:
    """Become a remote palace worker (``workers/remote.py``), as ``daemon`` becomes the
    broker: the command line only parses and hands over."""
    os.environ["TRUSTY_MEMORY_BROKER_BACKEND"] = args.broker
    return become("trusty_memory.workers.remote", f"--palace={args.palace}",
                  *(["--reader"] if args.reader else []))  # fmt: skip


def become(module: str, *args: str) -> int:
    """Replace this process with ``python -P -m module args``: an actor runs its own code,
    and the CLI imports none of it."""
    from trusty_memory.common.launch import module_command

    command = module_command(module, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 1  # not reached


def cmd_status(args) -> int:
    from trusty_memory.client.daemon import is_local, reach
    from trusty_memory.common.config import load_config

    config = load_config()
    why = reach(config, 1.0 if is_local(config) else 3.0)
    if why is not None:
        text = f"not running (home {config.home})" if is_local(config) else f"not reachable: {why}"
        output(args, {"running": False, "reason": why}, text)
        return 3
    status = daemon_client().status()
    where = f" on {status['host']}" if status.get("host") else ""
    lines = [
        f"running{where}: pid {status['pid']}, up {status['uptime_s']:.0f}s, home {status['home']}"
    ]
    for s in status["services"]:
        scaled = s.get("readers_autoscaled")
        extra = f", readers {s['readers_wanted']} ({scaled} by autoscale)" if scaled else ""
        lines.append(f"  {s['name']}: queued {s['queued']}{extra}")
        for w in s["workers"] or [{}]:
            lines.append("    " + _worker_line(w) if w else "    no workers")
    lines += _health_lines(status)
    output(args, status, "\n".join(lines))
    return 0


def _health_lines(status: dict) -> list[str]:
    """The template's state when forking is off, and every crashed worker."""
    lines = []
    template = status.get("template") or {}
    if template.get("fork_off_reason"):
        lines.append(f"  forking off: {template['fork_off_reason']}")
    elif template.get("refused_forks"):
        lines.append(
            f"  template refused {template['refused_forks']} forks (it has threads): "
            "palace workers start afresh"
        )
    for name, crash in (status.get("crashes") or {}).items():
        loop = f", {crash['in_a_row']} in a row" if crash["in_a_row"] > 1 else ""
        lines.append(f"  crashed: {name} {crash['total']} times{loop}, last {crash['last_exit']}")
    return lines


def _worker_line(w: dict) -> str:
    host = f"{w['host']} (remote) " if w.get("remote") else f"{w['host']} " if w.get("host") else ""
    parts = [f"{w['role']:<8} {host}pid {w['pid']}", f"inflight {w['inflight']}"]
    parts.append(f"{w['requests_per_s']:.1f} req/s")
    if w.get("lag") is not None:
        parts.append(f"seq {w['seq']} (lag {w['lag']})")
    if w.get("rss_mb") is not None:
        parts.append(f"{w['rss_mb']:.0f} MB")
    return ", ".join(parts)


def cmd_scale(args) -> int:
    data = daemon_client().call("palace_scale", {"name": args.palace, "readers": args.readers})
    output(args, data, f"{data['palace']}: {data['readers']} readers")
    return 0


def cmd_stop(args) -> int:
    from trusty_memory.client.daemon import daemon_pid
    from trusty_memory.common.config import load_config

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
        f"{hit.score:6.3f}  L{hit.layer}  {hit.drawer_id}  {hit.content[:100]}"
        for hit in result.results
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(nothing)")
    return 0


def cmd_list(args) -> int:
    import msgspec

    result = daemon_client().list(args.palace, room=args.room, tag=args.tag, limit=args.limit)
    lines = [
        f"{d.importance:4.2f}  {d.created_at}  {d.drawer_id}  {d.content[:80]}"
        for d in result.drawers
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(empty)")
    return 0


def cmd_forget(args) -> int:
    import msgspec

    result = daemon_client().forget(args.palace, args.drawer_id)
    output(args, msgspec.to_builtins(result), f"{result.status} {result.drawer_id}")
    return 0


def cmd_palace_list(args) -> int:
    if args.archived:
        archived = daemon_client().palace_archived()
        lines = [f"{a['name']}  deleted {a['deleted_at']}  ({a['entry']})" for a in archived]
        output(args, {"archived": archived}, "\n".join(lines) or "(no archived palaces)")
        return 0
    names = daemon_client().palace_list()
    output(args, {"palaces": names}, "\n".join(names) or "(no palaces)")
    return 0


def cmd_palace_delete(args) -> int:
    from trusty_memory.common.names import validate_palace_name
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    client = daemon_client()
    name = validate_palace_name(args.name)
    if not args.yes:
        if name not in client.palace_list():
            raise TrustyError(ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        question = (
            f"Delete palace {name}? It moves to the archive, from where"
            f" `trusty-memory palace restore {name}` brings it back."
        )
        if not _confirmed(question, "palace delete"):
            output(args, {"palace": name, "status": "kept"}, f"kept {name}")
            return 1
    data = client.palace_delete(name)
    text = (
        f"deleted {name}: in the archive as {data['entry']};"
        f" `trusty-memory palace restore {name}` brings it back"
    )
    output(args, data, text)
    return 0


def _confirmed(question: str, command: str) -> bool:
    """Ask on the terminal; refuse outright when there is none to ask on."""
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise TrustyError(
            ErrorCode.INVALID_PARAMS,
            f"{command}: not confirmed: no terminal to ask on; pass --yes to go ahead",
        )
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_palace_rename(args) -> int:
    data = daemon_client().palace_rename(args.name, args.new_name)
    output(args, data, f"renamed {args.name} to {data['palace']}")
    return 0


def cmd_palace_restore(args) -> int:
    data = daemon_client().palace_restore(args.name, entry=args.entry, new_name=args.as_name)
    output(args, data, f"restored {data['palace']} from the archive ({data['entry']})")
    return 0


def cmd_palace_create(args) -> int:
    result = daemon_client().palace_create(args.name, args.description)
    output(args, result, f"created {args.name}")
    return 0


def cmd_palace_info(args) -> int:
    import msgspec

    info = daemon_client().palace_info(args.name)
    text = f"{info.name}: {info.drawer_count} drawers, {info.triple_count} triples"
    output(args, msgspec.to_builtins(info), f"{text}, {info.data_dir}")
    return 0


def cmd_show(args) -> int:
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    client = daemon_client()
    palaces = [args.palace] if args.palace else client.palace_list()
    for palace in palaces:
        try:
            data = client.call("drawer_get", {"drawer_id": args.drawer_id}, palace=palace)
        except TrustyError as exc:
            if exc.code == ErrorCode.DRAWER_NOT_FOUND and not args.palace:
                continue
            raise
        text = "\n".join(f"{key}: {value}" for key, value in data.items() if key != "content")
        output(args, data, f"{text}\n\n{data['content']}")
        return 0
    raise TrustyError(
        ErrorCode.DRAWER_NOT_FOUND, f"drawer not found in any palace: {args.drawer_id}"
    )


def cmd_kg_assert(args) -> int:
    kw = {"confidence": args.confidence, "provenance": args.provenance}
    data = daemon_client().kg_assert(args.palace, args.subject, args.predicate, args.object, **kw)
    output(args, data, f"{data['status']}: {args.subject} {args.predicate} {args.object}")
    return 0


def cmd_kg_query(args) -> int:
    import msgspec

    result = daemon_client().kg_query(args.palace, args.subject, as_of=args.as_of)
    lines = [
        f"{t.subject} {t.predicate} {t.object}  (since {t.valid_from}, confidence {t.confidence})"
        for t in result.triples
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(no facts)")
    return 0


def cmd_doctor(args) -> int:
    from trusty_memory.client.cli.admin import doctor
    from trusty_memory.common.config import load_config

    checks = doctor(load_config())
    data = {"ok": all(ok for _, ok, _ in checks),
            "checks": [{"check": n, "ok": ok, "detail": d} for n, ok, d in checks]}  # fmt: skip
    text = "\n".join(f"{'ok  ' if ok else 'FAIL'}  {name}: {detail}" for name, ok, detail in checks)
    output(args, data, text)
    return 0 if data["ok"] else 1


def cmd_setup(args) -> int:
    from trusty_memory.client.cli.admin import StepLine, setup
    from trusty_memory.common.config import load_config
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    config = load_config()
    if not config.embedder.compiled:
        output(args, {"ok": True, "compiled": False}, "compiled model off: nothing to prepare")
        return 0
    progress = StepLine()
    try:
        data = setup(config, progress, clean=args.clean)
    except Exception as exc:
        raise TrustyError(ErrorCode.EMBEDDER_UNAVAILABLE, f"setup failed: {exc}") from exc
    finally:
        progress.close()
    how = "compiled" if data["built"] else "already compiled"
    text = f"model ready: {data['directory']} ({data['bytes'] / 2**20:.0f} MB, {how}, "
    text += f"{data['seconds']:.1f} s)"
    for gone in data["removed"]:
        text += f"\nremoved {gone['path']} ({gone['bytes'] / 2**20:.0f} MB)"
    output(args, data, text)
    return 0


def cmd_logs(args) -> int:
    from trusty_memory.client.cli.admin import follow, log_path, tail
    from trusty_memory.common.config import load_config

    path = log_path(load_config())
    lines = tail(path, args.lines)
    if args.json:
        print(json.dumps({"path": str(path), "lines": lines}, indent=2))
        return 0
    for line in lines:
        print(line)
    if args.follow:
        sys.stdout.flush()
        follow(path, sys.stdout)
    elif not path.exists():
        print(f"(no log yet at {path})", file=sys.stderr)
    return 0


def cmd_config_show(args) -> int:
    from trusty_memory.client.cli.admin import config_dict, config_toml
    from trusty_memory.common.config import load_config

    config = load_config()
    output(args, config_dict(config), config_toml(config))
    return 0


def cmd_export(args) -> int:
    from trusty_memory.client import bulk

    client = daemon_client()
    total = client.palace_info(args.palace).drawer_count
    progress = bulk.Progress(f"export {args.palace}", total=total)
    options = {"vectors": not args.no_vectors, "progress": progress}
    try:
        if args.output in (None, "-"):
            summary = bulk.export_jsonl(client, args.palace, sys.stdout.buffer, **options)
        else:
            # Refusals and write failures are TrustyErrors naming the path and the cause.
            summary = bulk.export_file(client, args.palace, Path(args.output), **options)
    finally:
        progress.close()  # an error's line starts on a line of its own
    print(f"exported {summary.drawers} drawers, {summary.triples} triples", file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from trusty_memory.client import bulk
    from trusty_memory.common.config import load_config
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    client = daemon_client()
    progress = bulk.Progress(f"import {args.palace}")
    options = {
        "max_text_bytes": load_config().palace.max_text_bytes,
        "batch_size": args.batch_size,
        "dry_run": args.dry_run,
        "progress": progress,
    }
    # A palace this import creates is taken away again if it fails, a SIGTERM included.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.file == "-":
            summary = bulk.import_file(client, args.palace, sys.stdin.buffer, **options)
        else:
            with open(args.file, "rb") as stream:  # before the palace is created
                options["total_bytes"] = os.fstat(stream.fileno()).st_size
                summary = bulk.import_file(client, args.palace, stream, **options)
    except OSError as exc:  # opening the file: nothing was created yet
        raise TrustyError(
            ErrorCode.INVALID_PARAMS, f"import: cannot read {args.file}: {exc.strerror or exc}"
        ) from None
    finally:
        progress.close()
    for bad in summary.bad[: bulk.MAX_BAD_SHOWN]:
        print(f"line {bad.lineno}: {bad.error}", file=sys.stderr)
    if len(summary.bad) > bulk.MAX_BAD_SHOWN:
        print(f"... and {len(summary.bad) - bulk.MAX_BAD_SHOWN} more bad lines", file=sys.stderr)
    gone = summary.created_palace
    if summary.error:
        resume = "" if gone else " (re-run to resume)"
        print(f"import stopped: {summary.error}{resume}", file=sys.stderr)
    if gone:
        print(_created_palace_line(args.palace, gone), file=sys.stderr)
    if args.dry_run:
        text = (
            f"would import {summary.would_import} drawers and {summary.would_import_triples}"
            f" triples; {len(summary.bad)} bad lines ({summary.held_back} good lines in"
            " batches with them)"
        )
        output(args, summary.as_dict(), text)
        return 0 if summary.ok else 1
    if summary.interrupted:
        output(args, summary.as_dict(), f"interrupted after importing {summary.imported}")
        return 130
    text = (
        f"imported {summary.imported}, skipped {summary.skipped} existing,"
        f" {len(summary.bad)} bad lines ({summary.held_back} good lines held back with them);"
        f" triples imported {summary.triples_imported}, skipped {summary.triples_skipped}"
    )
    output(args, summary.as_dict(), text)
    return 0 if summary.ok else 1


def _created_palace_line(palace: str, gone: dict) -> str:
    """What a failed import did with the palace it had created."""
    if gone["status"] == "removed":
        return f"removed palace {palace}: this import created it and nothing got in"
    if gone["status"] == "archived":
        return (
            f"moved palace {palace}, which this import created, to the archive with what got"
            f" in ({gone['entry']}): `trusty-memory palace restore {palace}` brings it back,"
            " and the same import then resumes"
        )
    return f"could not take away palace {palace}, which this import created: {gone['error']}"


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def cmd_dream(args) -> int:
    from trusty_memory.common.config import load_config
    from trusty_memory.dreamer import progress
    from trusty_memory.dreamer.__main__ import dream_once

    emit = progress.json_lines() if args.json else progress.text()
    palaces = [args.palace] if args.palace else None
    dream_once(load_config(), palaces, dry_run=args.dry_run, emit=emit)
    return 0


def cmd_dreamer(args) -> int:
    from trusty_memory.dreamer.__main__ import run_dreamer

    return run_dreamer(supervised=False, json_lines=args.json)


def cmd_archive_list(args) -> int:
    params = {"limit": args.limit, "reason": args.reason}
    data = daemon_client().call("archive_list", params, palace=args.palace)
    lines = []
    for d in data["drawers"]:
        why = d["reason"]
        if d["reason"] == "merged":
            why = f"merged into {d['merged_into']}"
        elif d["reason"] == "updated":
            why = f"earlier version of {d['merged_into']}"
        lines.append(f"{d['archived_at']}  {d['drawer_id']}  {why}  {d['content'][:60]}")
    output(args, data, "\n".join(lines) or "(archive empty)")
    return 0


def cmd_archive_restore(args) -> int:
    data = daemon_client().call(
        "archive_restore", {"drawer_id": args.drawer_id}, palace=args.palace
    )
    output(args, data, f"restored {data['drawer_id']}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are JSON too when ``--json`` was asked for."""

    def error(self, message: str):  # type: ignore[override]
        if "--json" in sys.argv[1:]:
            print(json.dumps({"error": {"code": 2, "message": f"{self.prog}: {message}"}}))
            raise SystemExit(2)
        super().error(message)


def _command(
    sub,
    name: str,
    fn,
    help: str,
    description: str | None = None,
    remote: bool = False,
    aliases: tuple[str, ...] = (),
):
    """A subcommand; each also takes ``--json``, so it may come before or after it. With
    ``remote``, also ``--daemon``/``--server-key``: talk to a daemon on another host."""
    parser = sub.add_parser(name, help=help, description=description or help, aliases=list(aliases))
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    if remote:
        parser.add_argument(
            "--daemon",
            metavar="ENDPOINT",
            default=argparse.SUPPRESS,
            help="the daemon to use, e.g. tcp://HOST:7601 (default: this home's own;"
            " also TRUSTY_MEMORY_DAEMON, [client] daemon)",
        )
        parser.add_argument(
            "--server-key",
            metavar="Z85",
            default=argparse.SUPPRESS,
            help="that daemon's public key (`keys show --server` on its host; also"
            " TRUSTY_MEMORY_SERVER_KEY, [client] server_key)",
        )
    parser.set_defaults(fn=fn)
    return parser


def _use_daemon(args) -> None:
    """``--daemon``/``--server-key`` as the environment every later ``load_config`` reads."""
    if getattr(args, "daemon", None):
        os.environ["TRUSTY_MEMORY_DAEMON"] = args.daemon
    if getattr(args, "server_key", None):
        os.environ["TRUSTY_MEMORY_SERVER_KEY"] = args.server_key


def build_parser() -> argparse.ArgumentParser:
    from trusty_memory.common import __version__

    parser = _Parser(prog="trusty-memory", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--version", action="version", version=f"trusty-memory {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = _command(sub, "serve", cmd_serve, "MCP server on stdio (what agents spawn)", remote=True)
    s.add_argument("--palace", help="default palace for tools that name none; created if missing")
    s.add_argument("--http", metavar="ADDR", help="also serve MCP over HTTP at ADDR (host:port)")
    s.add_argument(
        "--allow-remote", action="store_true", help="allow --http on a non-loopback address"
    )
    s.add_argument(
        "--tools",
        choices=("contract", "extended"),
        help="tool set: the contract's ten (default; [mcp] tools, TRUSTY_MEMORY_TOOLS), or"
        " extended: also update, get, search, history, invalidate, delete, stats, health",
    )

    s = _command(
        sub,
        "ui",
        cmd_ui,
        "a local web page to look inside the palaces (prints its URL with a token)",
        "Serve a web page on a loopback address that shows the palaces, searches them, and"
        " restores from the archive and runs the dreamer on request. Open the URL it prints:"
        " it carries a random token, without which every request is refused.",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8737, help="port (default 8737; 0: any free port)")
    s.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host: exposes every memory in the home to the network",
    )

    s = _command(sub, "daemon", cmd_daemon, "run the broker in the foreground (what systemd runs)")
    s.add_argument(
        "--take-over",
        action="store_true",
        help="if a daemon a client started owns the home, stop it and take over; wait for"
        " one started on purpose (what the systemd unit runs)",
    )
    s.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain tcp on a loopback address (tests only; any other tcp is CURVE)",
    )
    _command(
        sub,
        "status",
        cmd_status,
        "is the daemon running; its palaces and their workers",
        remote=True,
    )
    s = _command(sub, "stop", cmd_stop, "stop the daemon cleanly (workers save their indexes)")
    s.add_argument("--timeout", type=float, default=15.0, help="seconds to wait (default 15)")

    s = _command(
        sub, "scale", cmd_scale, "set how many reader processes serve a palace's reads", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("--readers", type=int, required=True, help="readers beside the writer (0-16)")

    s = _command(sub, "remember", cmd_remember, "store a memory", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("text", help="what to remember, or - to read it from stdin")
    s.add_argument("--room", help="room (default General)")
    s.add_argument("--tag", action="append", help="a tag (repeatable)")
    s.add_argument("--importance", type=float, default=0.5, help="0..1 (default 0.5)")

    s = _command(sub, "recall", cmd_recall, "search memories by meaning", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("query", help="what to look for")
    s.add_argument("--top-k", type=int, default=10, help="how many results (default 10)")
    s.add_argument("--deep", action="store_true", help="L3: exhaustive hybrid search")

    s = _command(sub, "list", cmd_list, "list drawers by importance", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("--room", help="only this room")
    s.add_argument("--tag", help="only drawers with this tag")
    s.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    s = _command(sub, "show", cmd_show, "one whole drawer by id", remote=True, aliases=("get",))
    s.add_argument("drawer_id", help="the drawer's id")
    s.add_argument("--palace", help="the palace that holds it (default: look in every palace)")

    s = _command(sub, "forget", cmd_forget, "delete a drawer", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("drawer_id", help="the drawer's id")

    s = _command(
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

    s = _command(
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

    s = _command(
        sub, "stats", cmd_stats, "a palace's counts, index lag, last dream, sizes", remote=True
    )
    s.add_argument("palace", help="palace name")
    _command(
        sub,
        "health",
        cmd_health,
        "the daemon's workers, embedder and dreamer; exit 1 if not ok",
        remote=True,
    )

    kg = _command(
        sub, "kg", None, "the temporal knowledge graph: assert, query, trace or close facts"
    )
    kg_sub = kg.add_subparsers(dest="kg_command", required=True, metavar="ACTION")
    s = _command(
        kg_sub, "assert", cmd_kg_assert, "assert a fact (closes the one it replaces)", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("predicate")
    s.add_argument("object")
    s.add_argument("--confidence", type=float, default=1.0, help="0..1 (default 1)")
    s.add_argument("--provenance", help="where the fact comes from")
    s = _command(kg_sub, "query", cmd_kg_query, "the facts now true of a subject", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("--as-of", help="the facts true at this time instead (RFC 3339)")
    s = _command(
        kg_sub, "history", cmd_kg_history, "every fact of a subject, closed ones too", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("--predicate", help="only this relationship")
    s = _command(
        kg_sub, "invalidate", cmd_kg_invalidate, "close a fact without a replacement", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("predicate")
    s.add_argument("--object", help="only if this is its value")

    s = _command(
        sub,
        "export",
        cmd_export,
        "write a palace as JSON lines (drawers, vectors, triples)",
        remote=True,
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("-o", "--output", help="file to write (default: stdout)")
    s.add_argument("--no-vectors", action="store_true", help="leave vectors out (smaller)")

    s = _command(
        sub,
        "import",
        cmd_import,
        "load JSON lines into a palace (idempotent by drawer id)",
        remote=True,
    )
    s.add_argument("palace", help="palace name (created if missing)")
    s.add_argument("file", help="JSONL file, or - for stdin")
    s.add_argument("--batch-size", type=int, default=500, help="lines per transaction")
    s.add_argument("--dry-run", action="store_true", help="validate every line, send nothing")

    s = _command(sub, "dream", cmd_dream, "one dream pass now: dedup, decay, prune")
    s.add_argument("--palace", help="only this palace (default: all)")
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")

    _command(sub, "dreamer", cmd_dreamer, "run the dreamer process in the foreground")

    archive = _command(
        sub, "archive", None, "drawers the dreamer pruned or merged, versions updates replaced"
    )
    archive_sub = archive.add_subparsers(dest="archive_command", required=True, metavar="ACTION")
    s = _command(
        archive_sub, "list", cmd_archive_list, "archived drawers, oldest first", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("--reason", choices=["pruned", "merged", "updated"], help="only this kind")
    s.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    s = _command(
        archive_sub,
        "restore",
        cmd_archive_restore,
        "put an archived drawer back (an update's version: into its drawer)",
        remote=True,
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("drawer_id", help="the archived drawer's id")

    palace = _command(
        sub, "palace", None, "list, create, inspect, delete, rename or restore palaces"
    )
    palace_sub = palace.add_subparsers(dest="palace_command", required=True, metavar="ACTION")
    s = _command(palace_sub, "list", cmd_palace_list, "every palace in the home", remote=True)
    s.add_argument(
        "--archived", action="store_true", help="list the deleted palaces in the archive instead"
    )
    s = _command(palace_sub, "create", cmd_palace_create, "create a palace", remote=True)
    s.add_argument("name", help="letters, digits, '-', '_' and '.' (not first), up to 64")
    s.add_argument("--description", help="what it is for (its L0 identity)")
    s = _command(
        palace_sub, "info", cmd_palace_info, "counts, places and the dreamer's work", remote=True
    )
    s.add_argument("name", help="palace name")
    dash = " (a name that starts with '-' goes after '--')"
    s = _command(
        palace_sub,
        "delete",
        cmd_palace_delete,
        "move a palace to the archive (not destroyed: `palace restore` brings it back)",
        "Stop the palace's workers and move it, whole, to the home's archive"
        " (archive/palaces/NAME-<time>). Requests for it are refused from then on. Without"
        " --yes it asks on the terminal, and refuses when there is none.",
        remote=True,
    )
    s.add_argument("name", help="palace name" + dash)
    s.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    s = _command(
        palace_sub,
        "rename",
        cmd_palace_rename,
        "give a palace a new name (its drawers, ids and index go with it)",
        remote=True,
    )
    s.add_argument("name", help="its name now" + dash)
    s.add_argument("new_name", help="the new name; no palace may have it")
    s = _command(
        palace_sub,
        "restore",
        cmd_palace_restore,
        "bring a deleted palace back from the archive",
        "Move a deleted palace back from the archive, as it was: the newest one deleted"
        " under NAME unless --entry names another (`palace list --archived` shows them).",
        remote=True,
    )
    s.add_argument("name", help="the name it had" + dash)
    s.add_argument("--as", dest="as_name", metavar="NEW", help="restore it under this name")
    s.add_argument("--entry", help="which archived copy (as `palace list --archived` shows)")

    s = _command(
        sub,
        "setup",
        cmd_setup,
        "prepare the model now: compile it once per machine (else the first start does)",
    )
    s.add_argument(
        "--clean", action="store_true", help="also remove the cache's other compiled models"
    )
    _command(sub, "doctor", cmd_doctor, "check the install, model cache, daemon and home")
    s = _command(sub, "logs", cmd_logs, "the daemon's log (JSON lines)")
    s.add_argument("-n", "--lines", type=int, default=50, help="how many lines (default 50)")
    s.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    service = _command(
        sub, "service", None, "a systemd unit (a launchd agent on macOS) for this installation"
    )
    service_sub = service.add_subparsers(dest="service_command", required=True, metavar="ACTION")
    for name, fn, help in (
        ("install", cmd_service_install, "write the systemd unit (macOS: launchd agent)"),
        ("uninstall", cmd_service_uninstall, "remove what `service install` wrote"),
    ):
        s = _command(service_sub, name, fn, help)
        manager = s.add_mutually_exclusive_group()
        manager.add_argument(
            "--systemd", dest="manager", action="store_const", const="systemd", default=None,
            help="a systemd unit (the default, except on macOS)",
        )  # fmt: skip
        manager.add_argument(
            "--launchd", dest="manager", action="store_const", const="launchd",
            help="a launchd agent in ~/Library/LaunchAgents (the default on macOS)",
        )  # fmt: skip
        scope = s.add_mutually_exclusive_group()
        scope.add_argument(
            "--user", dest="scope", action="store_const", const="user", default="user",
            help="a user unit in ~/.config/systemd/user (default)",
        )  # fmt: skip
        scope.add_argument(
            "--system", dest="scope", action="store_const", const="system",
            help="a system unit in /etc/systemd/system (run as root)",
        )  # fmt: skip
        s.add_argument(
            "--run-as", metavar="USER",
            help="--system: the account the daemon runs as (default: $SUDO_USER, else you)",
        )  # fmt: skip
        if name == "install":
            s.add_argument(
                "--print", action="store_true", help="print the unit instead of writing it"
            )
    config = _command(sub, "config", None, "the effective configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    _command(config_sub, "show", cmd_config_show, "file, environment and defaults, merged")

    keys = _command(sub, "keys", None, "CURVE keys for a daemon on tcp, and who may connect")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    _command(keys_sub, "init", cmd_keys_init, "create this home's server and client key pairs")
    s = _command(keys_sub, "show", cmd_keys_show, "this home's public keys")
    which = s.add_mutually_exclusive_group()
    which.add_argument("--server", action="store_true", help="print only the server key")
    which.add_argument("--client", action="store_true", help="print only the client key")
    s = _command(keys_sub, "add", cmd_keys_add, "allow a client's public key in")
    s.add_argument("name", help="who it is (letters, digits, '.', '_', '-')")
    s.add_argument("public_key", help="its public key (`keys show --client` on its host)")
    _command(keys_sub, "list", cmd_keys_list, "allowed and revoked client keys")
    s = _command(keys_sub, "revoke", cmd_keys_revoke, "refuse a client's key from now on")
    s.add_argument("name", help="the name it was added under")

    s = _command(
        sub,
        "worker",
        cmd_worker,
        "serve a palace on this host for a daemon elsewhere (a remote palace worker)",
        "Run a palace's writer (or, with --reader, a reader) in this home, for the broker"
        " at --broker: it owns the palace's files here, gets vectors from the broker's"
        " embedder, and reconnects by itself. Stops on SIGTERM.",
    )
    s.add_argument("--broker", required=True, metavar="ENDPOINT", help="tcp://HOST:7602")
    s.add_argument(
        "--server-key",
        metavar="Z85",
        default=argparse.SUPPRESS,
        help="the daemon's public key (also TRUSTY_MEMORY_SERVER_KEY)",
    )
    s.add_argument("--palace", required=True, help="the palace it serves")
    s.add_argument("--reader", action="store_true", help="a reader, not the writer")
    return parser


def _keys_as_values(argv: list[str]) -> list[str]:
    """A Z85 key may start with '-', which argparse would take for an option: after
    ``--server-key`` such a key is joined to it (``--server-key=KEY``), and the key of
    ``keys add NAME KEY`` gets a ``--`` before it."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--server-key" and nxt.startswith("-") and len(nxt) == 40:
            out.append(f"--server-key={nxt}")
            i += 2
            continue
        out.append(arg)
        i += 1
    if out[:2] == ["keys", "add"] and "--" not in out:
        values = [a for a in out[2:] if not a.startswith("--") or len(a) == 40]
        if len(values) == 2 and values[1].startswith("-"):
            out.insert(out.index(values[1]), "--")
    return out


def main(argv: list[str] | None = None) -> int:
    from trusty_memory.common.home import make_private

    make_private()  # exports, logs and a daemon this command starts: the user's alone
    args = build_parser().parse_args(_keys_as_values(sys.argv[1:] if argv is None else argv))
    _use_daemon(args)
    from trusty_memory.common.protocol import TrustyError

    try:
        return args.fn(args)
    except TrustyError as exc:
        if args.json:
            print(json.dumps({"error": {"code": int(exc.code), "message": exc.message}}))
        else:
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
