"""trusty-memory: long-term memory for coding agents, shared by every agent on the machine.

An agent spawns ``trusty-memory serve`` and speaks MCP over stdio; a per-machine daemon
keeps the memories in palaces. The other commands are for people and scripts, each a
thin layer over the client library with readable output (``--json`` for scripts).

This module only assembles and dispatches. Each verb group is a module beside it with
``register(subparsers)``, which adds its subcommands with the handler each runs
(``parser.command``); ``GROUPS`` lists them, in the order ``--help`` shows them, so a new
group is one line there and a new verb one ``command(...)`` in its group. Handlers import
what they need when they run, so ``serve`` starts without paying for the others.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys

from trusty_memory.client.cli import (
    admin,
    capture,
    dreaming,
    hooks,
    keys,
    kg,
    memory,
    palaces,
    processes,
    scrub,
    service,
    transfer,
)
from trusty_memory.client.cli.output import daemon_client, say
from trusty_memory.client.cli.parser import Parser
from trusty_memory.common import __version__
from trusty_memory.common.home import make_private
from trusty_memory.common.human import visible
from trusty_memory.common.protocol import ErrorCode, TrustyError

GROUPS = (
    processes,
    memory,
    palaces,
    kg,
    transfer,
    scrub,
    dreaming,
    admin,
    service,
    keys,
    hooks,
    capture,
)

DESCRIPTION = """\
trusty-memory: long-term memory for coding agents, shared by every agent on the machine.

An agent spawns `trusty-memory serve` and speaks MCP over stdio (README: "Using it from an
agent"); a per-machine daemon keeps the memories in palaces. The commands below are for
people and scripts."""

TOUR = """\
a first session (the daemon starts by itself):
  trusty-memory palace create demo --description "scratch notes"
  trusty-memory remember demo "The staging DB listens on port 5433" --tag db
  trusty-memory recall demo "which port is staging on?"
  trusty-memory show demo DRAWER_ID      # the id that remember printed
  trusty-memory ui                       # open the URL it prints

The palace a command works on comes first: recall demo ..., show demo ID, dream demo.
Every command but serve takes --json; `trusty-memory COMMAND --help` says more."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="trusty-memory",
        description=DESCRIPTION,
        epilog=TOUR,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--version", action="version", version=f"trusty-memory {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
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


def _use_daemon(args) -> None:
    """``--daemon``/``--server-key`` as the environment every later ``load_config`` reads."""
    if getattr(args, "daemon", None):
        os.environ["TRUSTY_MEMORY_DAEMON"] = args.daemon
    if getattr(args, "server_key", None):
        os.environ["TRUSTY_MEMORY_SERVER_KEY"] = args.server_key


def main(argv: list[str] | None = None) -> int:
    make_private()  # exports, logs and a daemon this command starts: the user's alone
    args = build_parser().parse_args(_keys_as_values(sys.argv[1:] if argv is None else argv))
    _use_daemon(args)
    try:
        return args.fn(args)
    except TrustyError as exc:
        hint = palace_hint(exc, args)
        if args.json:
            error: dict = {"code": int(exc.code), "message": exc.message}
            if hint:
                error["hint"] = hint
            print(json.dumps({"error": error}))
        else:
            say_error(exc)
            if hint:
                say(f"trusty-memory: hint: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # ``trusty-memory status | head -1``: the reader left; that is not an error. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


_NO_PALACE = re.compile(r"palace not found: ([A-Za-z0-9._-]+)")


def palace_hint(exc, args) -> str | None:
    """For "palace not found: NAME" (the daemon's words, which the contract fixes), what a
    person can do: the palace of that name there is nearest to it, and how to create it
    (``serve --palace NAME`` creates its palace; the other verbs do not)."""
    found = _NO_PALACE.fullmatch(exc.message)
    if exc.code != ErrorCode.PALACE_NOT_FOUND or found is None:
        return None  # a palace being deleted or moved is not one to create
    name = found.group(1)
    remote = f" --daemon {args.daemon}" if getattr(args, "daemon", None) else ""
    create = f"`trusty-memory palace create {name}{remote}` creates it"
    try:
        palaces = daemon_client().palace_list()
    except Exception:  # the hint is a courtesy: the error is what was asked about
        return create
    near = difflib.get_close_matches(name, palaces, n=1, cutoff=0.6)
    if not near:
        return create
    return f"did you mean {near[0]}? ({create})"


def say_error(exc) -> None:
    """An error for people, on one line: its message often quotes what was typed or
    stored (``drawer not found: ID``), so a newline in it is shown, not obeyed, too."""
    say(f"trusty-memory: error {int(exc.code)}: {visible(exc.message)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
