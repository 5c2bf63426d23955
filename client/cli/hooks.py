"""Capture's agent-side verbs: ``hooks install|uninstall|palace``, ``hook`` (what an
installed hook runs) and ``wake-up`` (a palace's start-of-session context).

The work is in ``client/capture/hooks.py`` and ``wake_up.py``; these handlers parse,
call and print. ``hook`` is the one verb an agent runs rather than a person: it reads the
hook's JSON on stdin, answers within a second and always exits 0 (a non-zero status from
a hook can stop the agent), so it takes its agent as a free word rather than a choice
argparse would refuse with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trusty_memory.client.cli.output import daemon_client, output, say
from trusty_memory.client.cli.parser import actions, command
from trusty_memory.common.launch import module_command
from trusty_memory.common.protocol import ErrorCode, TrustyError

CODEX_NOTE = """\
Codex CLI: its settings have no hook that is given the session's transcript, so nothing is
written for it. Its sessions are files (~/.codex/sessions/**/rollout-*.jsonl): mine them
now and then, e.g. from cron (crontab -e), every 15 minutes:
"""


def _settings(args) -> Path:
    from trusty_memory.client.capture.hooks import default_settings  # lazy: the hooks verbs only

    return Path(args.settings).expanduser() if args.settings else default_settings()


def cmd_install(args) -> int:
    from trusty_memory.client.capture import hooks  # lazy: ~20 ms; the hooks verbs only

    if args.agent == "codex":
        return _codex(args)
    if args.palace is not None:
        hooks.checked_palace(args.palace)
    if args.print:
        add = hooks.fragment(args.palace)
        if args.json:
            print(json.dumps({"settings": str(_settings(args)), "add": add}))
        else:
            print(json.dumps(add, indent=2))
            say(
                f'trusty-memory: merge this "hooks" object into {_settings(args)} (user'
                " settings), or into a project's .claude/settings.json; nothing was written",
                file=sys.stderr,
            )
        return 0
    try:
        change = hooks.install(_settings(args), args.palace)
    except hooks.SettingsError as exc:
        return _refused(args, str(exc))
    where = args.palace or "each project's own (see `trusty-memory hooks palace DIR`)"
    text = (
        f"hooks installed in {change.path} (Stop, SessionEnd, PreCompact: mine the session;"
        f" SessionStart: wake-up); palace: {where}"
        if change.changed
        else f"hooks already installed in {change.path}; nothing changed"
    )
    output(args, {"settings": str(change.path), "changed": change.changed}, text)
    return 0


def cmd_uninstall(args) -> int:
    from trusty_memory.client.capture import hooks  # lazy: ~20 ms; the hooks verbs only

    if args.agent == "codex":
        return _codex(args)
    try:
        change = hooks.uninstall(_settings(args))
    except hooks.SettingsError as exc:
        return _refused(args, str(exc))
    text = (
        f"trusty-memory hooks removed from {change.path}"
        if change.changed
        else f"no trusty-memory hooks in {change.path}; nothing changed"
    )
    output(args, {"settings": str(change.path), "changed": change.changed}, text)
    return 0


def _refused(args, message: str) -> int:
    if args.json:
        print(json.dumps({"error": {"code": 1, "message": message}}))
    else:
        say(f"trusty-memory: {message}", file=sys.stderr)
    return 1


def _codex(args) -> int:
    """Codex: nothing to install; say what to run instead."""
    import shlex

    palace = args.palace or "PALACE"
    argv = module_command("trusty_memory.client.cli.main", "mine", palace)
    line = f'*/15 * * * * {shlex.join(argv)} "$HOME/.codex/sessions"'
    output(args, {"agent": "codex", "cron": line}, CODEX_NOTE + line)
    return 0


def cmd_palace(args) -> int:
    from trusty_memory.client.capture.hooks import palace_for  # lazy: ~20 ms; the hooks verbs only

    directory = str(Path(args.dir).expanduser().resolve())
    name = palace_for(directory)
    if name is None:
        raise TrustyError(ErrorCode.INVALID_PALACE_NAME, f"no palace name in {directory}")
    output(args, {"dir": directory, "palace": name}, name)
    return 0


def cmd_hook(args) -> int:
    from trusty_memory.client.capture.hooks import run_hook  # lazy: ~20 ms; the hooks verbs only

    return run_hook(args.agent, args.palace)


def cmd_wake_up(args) -> int:
    from trusty_memory.client.capture import wake_up  # lazy: wake-up only

    text = wake_up.wake_up(daemon_client(), args.palace, args.budget)
    data = {
        "palace": args.palace,
        "budget": args.budget,
        "tokens": wake_up.estimate_tokens(text),
        "text": text,
    }
    output(args, data, text)
    return 0


def _budget(value: str) -> int:
    from trusty_memory.client.capture.wake_up import MAX_BUDGET, MIN_BUDGET  # lazy: wake-up only

    try:
        budget = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"between {MIN_BUDGET} and {MAX_BUDGET}, got {budget}")
    return budget


def register(sub) -> None:
    group = actions(
        sub,
        "hooks",
        "agent hooks that save each session into a palace, and give it a start",
        "Install (or remove) hooks in an agent's settings: at Stop, SessionEnd and PreCompact"
        " the session's transcript is mined into a palace in the background; at SessionStart"
        " the palace's wake-up context is added to the session. The palace is --palace, or"
        " the project's: its folder's name (`hooks palace DIR` prints it; give the same to"
        " `serve --palace`).",
    )
    for name, fn, what in (
        ("install", cmd_install, "add the hooks to the agent's settings (idempotent)"),
        ("uninstall", cmd_uninstall, "take trusty-memory's hooks out, nothing else"),
    ):
        s = command(group, name, fn, what)
        s.add_argument(
            "--agent",
            choices=["claude-code", "codex"],
            default="claude-code",
            help="claude-code (default); codex: prints what to run instead",
        )
        s.add_argument(
            "--settings",
            metavar="FILE",
            help="the settings file (default: ~/.claude/settings.json, or in $CLAUDE_CONFIG_DIR)",
        )
        if name == "install":
            s.add_argument("--palace", help="always this palace (default: each project's own)")
            s.add_argument("--print", action="store_true", help="print what to add; write nothing")
        else:
            s.set_defaults(palace=None, print=False)

    s = command(group, "palace", cmd_palace, "the palace a project's hooks use")
    s.add_argument("dir", nargs="?", default=".", help="the project's folder (default: here)")

    s = command(
        sub,
        "hook",
        cmd_hook,
        "what an installed agent hook runs (the hook's JSON on stdin; always exits 0)",
    )
    s.add_argument("agent", help="claude-code")
    s.add_argument("--palace", help="the palace (default: the project's, from the input)")

    s = command(
        sub,
        "wake-up",
        cmd_wake_up,
        "a palace's identity and most important notes, for a system prompt",
        "Print the palace's description and its most important recent notes (by importance,"
        " newest first), within --budget tokens (estimated as characters / 4). Reading it"
        " does not count as a recall.",
        remote=True,
    )
    s.add_argument("palace", help="palace name")
    s.add_argument(
        "--budget", type=_budget, default=800, help="at most this many tokens (default 800)"
    )
