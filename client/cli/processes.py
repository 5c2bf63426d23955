"""The verbs that run or watch processes: ``serve`` (the MCP stdio front end agents
spawn), ``http`` (its HTTP endpoint as a long-lived service), ``ui``, ``daemon`` (what
systemd runs), ``worker`` (a remote palace worker), ``status``, ``health`` and ``stop``.

``serve``, ``http``, ``daemon`` and ``worker`` hand over at once (``run_serve``,
``run_http_service``, or ``exec`` of the actor's module): the command line only parses.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import command
from trusty_memory.common.config import load_config
from trusty_memory.common.human import duration
from trusty_memory.common.launch import module_command

HTTP_LISTEN = "127.0.0.1:3031"  # `http` and `service install --http` without an address


def cmd_serve(args) -> int:
    from trusty_memory.client.mcp.server import run_serve  # lazy: serve only

    return run_serve(
        palace=args.palace, http=args.http, allow_remote=args.allow_remote, tools=args.tools
    )


def cmd_http(args) -> int:
    from trusty_memory.client.mcp.http_service import run_http_service  # lazy: asyncio; http only

    return run_http_service(
        args.listen,
        palace=args.palace,
        allow_remote=args.allow_remote,
        tools=args.tools,
        json_out=args.json,
    )


def cmd_ui(args) -> int:
    """Become the web page's process (``ui/__main__.py``), as ``daemon`` becomes the broker."""
    return become("trusty_memory.ui", f"--host={args.host}", f"--port={args.port}",
                  *(["--allow-remote"] if args.allow_remote else []))  # fmt: skip


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
    command = module_command(module, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 1  # not reached


def cmd_status(args) -> int:
    from trusty_memory.client.autostart import is_local, reach  # lazy: pyzmq; status only

    config = load_config()
    why = reach(config, 1.0 if is_local(config) else 3.0)
    if why is not None:
        text = f"not running (home {config.home})" if is_local(config) else f"not reachable: {why}"
        output(args, {"running": False, "reason": why}, text)
        return 3
    status = daemon_client().status()
    where = f" on {status['host']}" if status.get("host") else ""
    up = duration(status["uptime_s"])
    lines = [f"running{where}: pid {status['pid']}, up {up}, home {status['home']}"]
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
    for name, remote in (status.get("remote_palaces") or {}).items():
        if not remote["connected"]:
            lines.append(
                f"  waiting: palace {name} is served by a remote worker on {remote['host']},"
                " not connected (its requests wait for it)"
            )
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


def cmd_health(args) -> int:
    import asyncio

    from trusty_memory.client.aio import AsyncClient  # lazy: pyzmq and asyncio; health only
    from trusty_memory.client.mcp.tools_extended import health  # lazy: health only

    async def check() -> dict:
        async with AsyncClient() as client:
            return await health(client)

    data = asyncio.run(check())
    embedder = data["embedder"]
    embed = f"{embedder['embed_ms']} ms" if embedder["ok"] else f"FAILED: {embedder['error']}"
    text = (
        f"{data['status']}: daemon {data['version']} pid {data['pid']},"
        f" up {duration(data['uptime_s'])}, {data['restarts']} restarts\n"
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


def cmd_stop(args) -> int:
    from trusty_memory.client.autostart import daemon_pid  # lazy: pyzmq; stop only

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


def register(sub) -> None:
    # No --json: serve speaks MCP on stdout whatever is asked; it writes no report.
    s = command(
        sub, "serve", cmd_serve, "MCP server on stdio (what agents spawn)", remote=True, json=False
    )
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

    s = command(
        sub,
        "http",
        cmd_http,
        "MCP over HTTP as a long-lived service (what `service install --http` runs)",
        "Serve the endpoint of `serve --http` alone, with its token, Host and Origin checks"
        " and limits, until SIGTERM or SIGINT (exit 0). It reads no stdin, so it outlives"
        " whatever started it, unlike `serve --http`, which ends with its stdio session."
        " Says its URL and the token's file on stdout; logs on stderr.",
        remote=True,
    )
    s.add_argument(
        "--listen",
        metavar="ADDR",
        default=HTTP_LISTEN,
        help=f"host:port to serve MCP over HTTP at (default {HTTP_LISTEN}; port 0: a free one)",
    )
    s.add_argument("--palace", help="default palace for tools that name none; created if missing")
    s.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --listen address"
    )
    s.add_argument(
        "--tools",
        choices=("contract", "extended"),
        help="tool set, as for serve (default: [mcp] tools, TRUSTY_MEMORY_TOOLS, else contract)",
    )

    s = command(
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

    s = command(sub, "daemon", cmd_daemon, "run the broker in the foreground (what systemd runs)")
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
    command(
        sub, "status", cmd_status, "is the daemon running; its palaces and their workers",
        remote=True,
    )  # fmt: skip
    s = command(sub, "stop", cmd_stop, "stop the daemon cleanly (workers save their indexes)")
    s.add_argument("--timeout", type=float, default=15.0, help="seconds to wait (default 15)")
    command(
        sub, "health", cmd_health,
        "the daemon's workers, embedder and dreamer; exit 1 if not ok", remote=True,
    )  # fmt: skip

    s = command(
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
