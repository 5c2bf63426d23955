"""``scrub``: the credentials older versions (or ``[privacy] secrets = "keep"``) left in
palaces, counted by kind, and with ``--apply`` redacted in place so that no file of the
home keeps a copy (the palace's writer does the work: ``workers/scrub.py``)."""

from __future__ import annotations

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import command
from trusty_memory.common.methods import Method

# Re-embedding the drawers that changed and rewriting the palace file take a while on a
# large palace: longer than the default request deadline.
SCRUB_TIMEOUT_S = 3600.0


def _line(result: dict) -> str:
    found = result["found"]
    if not found:
        return f"{result['palace']}: no credentials found"
    kinds = ", ".join(f"{kind} {n}" for kind, n in found.items())
    places = (
        f"{result['drawers']} drawers, {result['archived']} archived, {result['triples']} facts"
    )
    if result.get("palace_files"):
        places += " and the description (" + ", ".join(result["palace_files"]) + ")"
    if result["applied"]:
        return (
            f"{result['palace']}: redacted {sum(found.values())} credentials ({kinds}) in"
            f" {places}; {result['reembedded']} texts embedded again"
        )
    return (
        f"{result['palace']}: {sum(found.values())} credentials ({kinds}) in {places};"
        " nothing changed (run again with --apply to redact them)"
    )


def cmd_scrub(args) -> int:
    client = daemon_client()
    names = [args.palace] if args.palace else client.palace_list()
    results = [
        client.call(
            Method.PALACE_SCRUB, {"apply": args.apply}, palace=name, timeout=SCRUB_TIMEOUT_S
        )
        for name in names
    ]
    text = "\n".join(_line(r) for r in results) or "(no palaces)"
    output(args, results if not args.palace else results[0], text)
    return 0


def register(sub) -> None:
    s = command(
        sub,
        "scrub",
        cmd_scrub,
        "find credentials already stored in a palace; --apply redacts them",
        description=(
            "Find the credentials a palace already holds (drawers, the archive, context"
            " words, knowledge-graph facts), counted by kind. Nothing changes without"
            " --apply; with it each one becomes its marker, as a write is redacted now,"
            " the drawers that changed are embedded again, and the index snapshot and the"
            " palace file are rewritten so that no copy is left in the home."
        ),
        remote=True,
    )
    s.add_argument("palace", nargs="?", help="palace name (default: every palace)")
    s.add_argument("--apply", action="store_true", help="redact them (default: count only)")
