"""``trusty-memory kg``: the temporal knowledge graph's facts (subject, predicate,
object, valid from/to): assert, query (now or ``--as-of``), history and invalidate."""

from __future__ import annotations

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import actions, command
from trusty_memory.common.human import visible


def cmd_kg_assert(args) -> int:
    kw = {"confidence": args.confidence, "provenance": args.provenance}
    data = daemon_client().kg_assert(args.palace, args.subject, args.predicate, args.object, **kw)
    output(args, data, f"{data['status']}: {fact(args.subject, args.predicate, args.object)}")
    return 0


def cmd_kg_query(args) -> int:
    import msgspec

    result = daemon_client().kg_query(args.palace, args.subject, as_of=args.as_of)
    lines = [
        f"{fact(t.subject, t.predicate, t.object)}  (since {t.valid_from},"
        f" confidence {t.confidence})"
        for t in result.triples
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(no facts)")
    return 0


def cmd_kg_history(args) -> int:
    import msgspec

    result = daemon_client().kg_history(args.palace, args.subject, args.predicate)
    lines = [
        f"{t.valid_from} .. {t.valid_to or 'now':20}  {fact(t.subject, t.predicate, t.object)}"
        for t in result.triples
    ]
    output(args, msgspec.to_builtins(result), "\n".join(lines) or "(no facts)")
    return 0


def cmd_kg_invalidate(args) -> int:
    import msgspec

    result = daemon_client().kg_invalidate(args.palace, args.subject, args.predicate, args.object)
    text = f"invalidated: {fact(result.subject, result.predicate, result.object)}"
    text += f" ({result.valid_to})"
    output(args, msgspec.to_builtins(result), text)
    return 0


def fact(subject: str, predicate: str, obj: str | None) -> str:
    """A fact on one line, each part :func:`visible` (a newline in a subject must not
    start a line that reads as another fact)."""
    return " ".join(visible(str(part)) for part in (subject, predicate, obj))


def register(sub) -> None:
    kg = actions(sub, "kg", "the temporal knowledge graph: assert, query, trace or close facts")
    s = command(kg, "assert", cmd_kg_assert, "assert a fact (closes the one it replaces)",
                remote=True)  # fmt: skip
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("predicate")
    s.add_argument("object")
    s.add_argument("--confidence", type=float, default=1.0, help="0..1 (default 1)")
    s.add_argument("--provenance", help="where the fact comes from")
    s = command(kg, "query", cmd_kg_query, "the facts now true of a subject", remote=True)
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("--as-of", help="the facts true at this time instead (RFC 3339)")
    s = command(
        kg, "history", cmd_kg_history, "every fact of a subject, closed ones too", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("--predicate", help="only this relationship")
    s = command(
        kg, "invalidate", cmd_kg_invalidate, "close a fact without a replacement", remote=True
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("subject")
    s.add_argument("predicate")
    s.add_argument("--object", help="only if this is its value")
