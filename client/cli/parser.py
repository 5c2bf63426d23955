"""How a verb group adds its subcommands (``command``), and the parser they hang on.

Every subcommand but ``serve`` (whose stdout is MCP) takes ``--json`` (so it may come
before or after the verb); ``remote`` ones also take ``--daemon``/``--server-key``, to talk
to a daemon on another host. The parser answers a usage error as JSON under ``--json``, and
names the nearest verb when one was mistyped (``remeber``: did you mean remember?), since a
bare usage line does not say what went wrong. A mistyped option is the verb's to answer:
its own usage line and the nearest of its options (``list demo --limt 3``: did you mean
--limit?), where argparse would show the top-level usage.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from typing import NoReturn

from trusty_memory.common.human import visible
from trusty_memory.common.protocol import ErrorCode, TrustyError

# argparse's message for an unknown verb or action; 3.12 dropped the quotes around choices.
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error suggests the nearest verb or option, is said by the verb
    it concerns, and is JSON under ``--json``."""

    def parse_args(self, args=None, namespace=None):
        # argparse leaves what a verb did not know to the top-level parser, which names no
        # verb and shows its own usage: the verb that was given answers instead.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            verb = chosen(self, parsed)
            verb.error(unrecognized(verb, extras))
        return parsed

    def error(self, message: str) -> NoReturn:
        message = suggest(message)
        if "--json" in sys.argv[1:]:
            print(json.dumps({"error": {"code": 2, "message": f"{self.prog}: {message}"}}))
            raise SystemExit(2)
        super().error(visible(message))  # it quotes the arguments, which may be stored text


def suggest(message: str) -> str:
    """argparse's "invalid choice" message with the list of choices replaced by the
    nearest one, when one is close; any other message as it is."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return message
    typed = found.group(1)
    choices = [c.strip().strip("'") for c in found.group(2).split(",")]
    near = difflib.get_close_matches(typed, choices, n=1, cutoff=0.6)
    if not near:
        return message
    return message[: found.start()] + f"invalid choice: '{typed}': did you mean {near[0]}?"


def chosen(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The innermost (sub)parser ``args`` went through: ``palace create``'s for
    ``palace create demo``, the top-level one when no verb was given."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return chosen(action.choices[name], args)
    return parser


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments" message, with the option of ``parser`` nearest
    to the first unknown one when one is close (``--limt``: did you mean --limit?)."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    offered = [
        option
        for action in parser._actions
        if action.help is not argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--")
    ]
    for extra in extras:
        if extra.startswith("--") and len(extra) > 2:
            typed = extra.split("=", 1)[0]
            near = difflib.get_close_matches(typed, offered, n=1, cutoff=0.6)
            if near:
                return f"{message}: did you mean {near[0]}?"
            break
    return message


def command(
    sub,
    name: str,
    fn,
    help: str,
    description: str | None = None,
    remote: bool = False,
    aliases: tuple[str, ...] = (),
    json: bool = True,
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` running ``fn(args)``; it takes ``--json`` too (unless
    ``json`` is False: a verb whose output is no report, ``serve``'s MCP), and with
    ``remote`` also ``--daemon``/``--server-key``."""
    parser = sub.add_parser(name, help=help, description=description or help, aliases=list(aliases))
    if json:
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


def actions(sub, name: str, help: str, description: str | None = None):
    """A verb whose work is done by its actions (``palace create``): their subparsers."""
    group = command(sub, name, None, help, description)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def old_palace_option(parser: argparse.ArgumentParser) -> None:
    """``--palace P``, the old spelling of a verb whose palace now comes first; hidden
    from ``--help``, accepted with a hint (:func:`palace_of`) for one release."""
    parser.add_argument("--palace", dest="old_palace", help=argparse.SUPPRESS)


def palace_of(args, rest: str = "") -> str | None:
    """The palace a verb was given: first and positional, or (the old order) ``--palace``,
    which prints a one-line hint on stderr and still works. ``rest``: the verb's other
    words, for the hint."""
    verb = args.command  # as typed: an alias too
    old = getattr(args, "old_palace", None)
    if old is None:
        return args.palace
    if args.palace is not None and args.palace != old:
        raise TrustyError(
            ErrorCode.INVALID_PARAMS,
            f"{verb}: two palaces given ({args.palace} and --palace {old}): name one",
        )
    tail = f" {visible(rest)}" if rest else ""
    shown = visible(old)
    print(
        f"trusty-memory: hint: the palace now comes first: `{verb} {shown}{tail}`"
        f" (`{verb}{tail} --palace {shown}` works until the next release)",
        file=sys.stderr,
    )
    return old
