"""The dreamer's verbs: ``dream`` (one pass now, or its plan with ``--dry-run``),
``dreamer`` (the process, in the foreground) and ``archive list|restore`` (what it pruned
or merged, and the versions updates replaced)."""

from __future__ import annotations

import sys
from typing import TextIO, cast

from trusty_memory.client.cli.output import Shown, daemon_client, output
from trusty_memory.client.cli.parser import actions, command, old_palace_option, palace_of
from trusty_memory.common.config import load_config
from trusty_memory.common.human import clip
from trusty_memory.common.methods import Method


def cmd_dream(args) -> int:
    from trusty_memory.client.sync import Client  # lazy: pyzmq; verbs that call the daemon
    from trusty_memory.dreamer import progress  # lazy: the dreamer's code; dream only
    from trusty_memory.dreamer.__main__ import dream_once  # lazy: the dreamer's code; dream only

    palace = palace_of(args, "--dry-run" if args.dry_run else "")
    config = load_config()
    # The plan's reasons may quote a drawer's words: shown, never obeyed.
    emit = progress.json_lines() if args.json else progress.text(cast(TextIO, Shown(sys.stdout)))
    with Client(config) as client:  # starts the daemon when none runs
        palaces = [palace] if palace else None
        reports = dream_once(config, palaces, dry_run=args.dry_run, emit=emit, caller=client)
    if not args.json and any(r.decayed or r.archived for r in reports):
        print(decay_note(config.dreamer))
    return 0


def decay_note(s) -> str:
    """What "decayed" and "archived" mean, with this home's settings: a count alone reads
    as loss, and a pass over notes written minutes ago still "decays" the recalled ones."""
    return (
        f"decay: importance = what it was given x 2^(-age / {s.half_life_days:g} days)"
        " + 0.05 per recall (at most +0.3),\n  kept within 0.05..1. 'decayed' counts the"
        " drawers whose importance changes: down with age,\n  up with recalls, so notes"
        " written minutes ago count once recalled. Importance orders list\n  and recall;"
        f" decay deletes nothing. 'archived': older than {s.prune_min_age_days:g} days and"
        f" below {s.prune_below:g}\n  (`archive restore` brings one back)."
    )


def cmd_dreamer(args) -> int:
    from trusty_memory.client.sync import Client  # lazy: pyzmq; verbs that call the daemon
    from trusty_memory.dreamer.__main__ import run_dreamer  # lazy: the dreamer's code; dreamer only

    with Client(load_config()) as client:  # starts the daemon when none runs
        return run_dreamer(supervised=False, json_lines=args.json, caller=client)


def cmd_archive_list(args) -> int:
    params = {"limit": args.limit, "reason": args.reason}
    data = daemon_client().call(Method.ARCHIVE_LIST, params, palace=args.palace)
    lines = []
    for d in data["drawers"]:
        why = d["reason"]
        if d["reason"] == "merged":
            why = f"merged into {d['merged_into']}"
        elif d["reason"] == "updated":
            why = f"earlier version of {d['merged_into']}"
        lines.append(f"{d['archived_at']}  {d['drawer_id']}  {why}  {clip(d['content'], 60)}")
    output(args, data, "\n".join(lines) or "(archive empty)")
    return 0


def cmd_archive_restore(args) -> int:
    data = daemon_client().call(
        Method.ARCHIVE_RESTORE, {"drawer_id": args.drawer_id}, palace=args.palace
    )
    output(args, data, f"restored {data['drawer_id']}")
    return 0


def register(sub) -> None:
    s = command(sub, "dream", cmd_dream, "one dream pass now: dedup, decay, prune")
    s.add_argument("palace", nargs="?", help="only this palace (default: all)")
    s.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    old_palace_option(s)

    command(sub, "dreamer", cmd_dreamer, "run the dreamer process in the foreground")

    archive = actions(
        sub, "archive", "drawers the dreamer pruned or merged, versions updates replaced"
    )
    s = command(archive, "list", cmd_archive_list, "archived drawers, oldest first", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("--reason", choices=["pruned", "merged", "updated"], help="only this kind")
    s.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    s = command(
        archive,
        "restore",
        cmd_archive_restore,
        "put an archived drawer back (an update's version: into its drawer)",
        remote=True,
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("drawer_id", help="the archived drawer's id")
