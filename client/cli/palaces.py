"""The verbs on whole palaces: ``palace list|create|info|delete|rename|restore``,
``stats`` and ``scale``."""

from __future__ import annotations

import sys

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import actions, command
from trusty_memory.common.human import describe, visible
from trusty_memory.common.methods import Method
from trusty_memory.common.names import validate_palace_name
from trusty_memory.common.protocol import ErrorCode, TrustyError


def cmd_palace_list(args) -> int:
    if args.archived:
        archived = daemon_client().palace_archived()
        lines = [f"{a['name']}  deleted {a['deleted_at']}  ({a['entry']})" for a in archived]
        output(args, {"archived": archived}, "\n".join(lines) or "(no archived palaces)")
        return 0
    names = daemon_client().palace_list()
    output(args, {"palaces": names}, "\n".join(names) or "(no palaces)")
    return 0


def cmd_palace_create(args) -> int:
    result = daemon_client().palace_create(args.name, args.description)
    output(args, result, f"created {args.name}")
    return 0


def cmd_palace_info(args) -> int:
    import msgspec

    info = daemon_client().palace_info(args.name)
    dreams = (
        f"merged {info.dream_merged}, decayed {info.dream_decayed},"
        f" archived {info.dream_archived} (all passes)"
    )
    text = describe(
        [
            ("Palace", info.name),
            ("Description", info.description),
            ("Drawers", info.drawer_count),
            ("Facts", info.triple_count),
            ("Archived", info.archived_count),
            ("Last dream", info.last_dream_at or "never"),
            ("Dreamer", dreams),
            ("Data", info.data_dir),
        ]
    )
    output(args, msgspec.to_builtins(info), text)
    return 0


def cmd_palace_delete(args) -> int:
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
    try:
        data = daemon_client().palace_restore(args.name, entry=args.entry, new_name=args.as_name)
    except TrustyError as exc:
        if exc.code != ErrorCode.PALACE_EXISTS:
            raise
        # The daemon says a palace has the name; this says the command that gets round it.
        taken = args.as_name or args.name
        entry = f" --entry {args.entry}" if args.entry else ""
        raise TrustyError(
            exc.code,
            f"palace already exists: {taken}; restore the archived one under another name:"
            f" trusty-memory palace restore {args.name}{entry} --as NEW_NAME (or rename or"
            f" delete palace {taken} first)",
        ) from None
    output(args, data, f"restored {data['palace']} from the archive ({data['entry']})")
    return 0


def cmd_palace_forget_remote(args) -> int:
    data = daemon_client().palace_forget_remote(args.name)
    where = "this home's copy" if data["local_copy"] else "none here yet (`palace create`)"
    output(
        args,
        data,
        f"{data['palace']}: no longer served from {data['host']}; local workers serve it from"
        f" {where}",
    )
    return 0


def cmd_stats(args) -> int:
    import msgspec

    s = daemon_client().palace_stats(args.palace)
    rooms = ", ".join(f"{visible(room)} {n}" for room, n in s.room_counts.items()) or "no rooms"
    text = (
        f"{s.palace}: {s.drawer_count} drawers ({rooms}), {s.tag_count} tags,"
        f" {s.triple_count} active facts of {s.triple_total}, {s.archived_count} archived,"
        f" {s.redacted_count} with credentials redacted\n"
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


def cmd_scale(args) -> int:
    data = daemon_client().call(Method.PALACE_SCALE, {"name": args.palace, "readers": args.readers})
    output(args, data, f"{data['palace']}: {data['readers']} readers")
    return 0


def register(sub) -> None:
    palace = actions(sub, "palace", "list, create, inspect, delete, rename or restore palaces")
    s = command(palace, "list", cmd_palace_list, "every palace in the home", remote=True)
    s.add_argument(
        "--archived", action="store_true", help="list the deleted palaces in the archive instead"
    )
    s = command(palace, "create", cmd_palace_create, "create a palace", remote=True)
    s.add_argument("name", help="letters, digits, '-', '_' and '.' (not first), up to 64")
    s.add_argument("--description", help="what it is for (its L0 identity)")
    s = command(
        palace, "info", cmd_palace_info, "counts, places and the dreamer's work", remote=True
    )
    s.add_argument("name", help="palace name")
    dash = " (a name that starts with '-' goes after '--')"
    s = command(
        palace,
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
    s = command(
        palace,
        "rename",
        cmd_palace_rename,
        "give a palace a new name (its drawers, ids and index go with it)",
        remote=True,
    )
    s.add_argument("name", help="its name now" + dash)
    s.add_argument("new_name", help="the new name; no palace may have it")
    s = command(
        palace,
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
    s = command(
        palace,
        "forget-remote",
        cmd_palace_forget_remote,
        "let local workers serve a palace a remote worker served",
        "The daemon remembers every palace a remote worker (`trusty-memory worker`) has"
        " served, across restarts, and never serves it from this home while that worker is"
        " away (a write here would be lost to it). When the palace has moved here for good"
        " (its files copied into this home, or given up), this lets local workers serve it"
        " again. Refused while a remote worker serves it.",
        remote=True,
    )
    s.add_argument("name", help="palace name" + dash)

    s = command(
        sub, "stats", cmd_stats, "a palace's counts, index lag, last dream, sizes", remote=True
    )
    s.add_argument("palace", help="palace name")
    s = command(
        sub, "scale", cmd_scale, "set how many reader processes serve a palace's reads", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("--readers", type=int, required=True, help="readers beside the writer (0-16)")
