"""Quality of capture: LoCoMo's conversations mined as Claude Code transcripts, against
the same dialog stored one turn per drawer, asked through ``memory_recall_deep`` and
``memory_recall``.

    .venv/bin/python bench/mined_transcripts.py [--data ../shared/data/locomo10.json]
        [--conversations N] [--variants mined,turns,exchanges] [--user-role speaker-a|opener]
        [--out bench/results/mined_transcripts.json]

Each LoCoMo session is written as one Claude Code transcript (``<conv>/<session>.jsonl``,
the session id a uuid5 of the conversation and session number, so a run writes the same
files every time): the conversation's first speaker (``speaker_a``) is the ``user``, the
other the ``assistant``, each message the turn as LoCoMo reads (``"Caroline: ..."``, the
shared photo's caption appended as ``bench/locomo.py`` does), each line's timestamp the
session's date plus one second per turn. A drawer of ``mine`` is a prompt and the reply
that follows it, so an exchange is one A turn and the B turn after it; a session that B
opens starts with an exchange of B's turn alone, and one that A closes ends with A's turn
alone (``--user-role opener`` makes each session's first speaker the user instead).

Variants, each in a fresh daemon home, one palace per conversation:

- ``mined``: ``trusty-memory mine PALACE DIR --format claude-code --json``, the real CLI
  as a subprocess, once per conversation;
- ``turns``: every turn a drawer, exactly as ``bench/locomo.py`` stores them
  (``memory_remember`` in order, one writer per conversation, the session date as
  ``created_at``);
- ``exchanges`` (a control, not asked for by the issue): the very drawers ``mine`` makes
  (same text, time and room) written with ``memory_remember`` in order, so a difference
  between ``mined`` and ``exchanges`` is the write path (bulk import with vectors vs one
  remember at a time: ``mine`` sends each drawer's own vector from the bulk lane, and an
  import keeps a given vector as it is, while a remember may mix in its episode
  predecessor's, ``workers/store/context.py``), and one between ``exchanges`` and
  ``turns`` is the drawer's size.

Mapping a mined drawer back to its dialog ids: every transcript line's ``uuid`` is a
uuid5 of (conversation, dia_id), and ``mine`` keeps an exchange's line uuids in the
drawer's ``metadata.message_uuids``. After mining, every drawer the transcripts should
give (id: ``exchanges.drawer_id("claude-code", session, first line uuid)``, the README's
"session and message id") is fetched with ``drawer_get`` and its dia_ids are read from its
stored uuids, never from its text (which the worker may redact, and which repeats across
turns: "Thanks!"). A drawer missing, one whose uuids differ from what was written, and a
recall hit outside the map are counted in ``mapping``; a hit outside the map is a miss.

Scores per variant and tool, over LoCoMo's questions with evidence (all categories, as
``bench/locomo.py`` counts them; top_k 10):

- ``hit_r1/5/10``: the share of questions with at least one evidence turn inside one of
  the first k drawers returned (the issue's rule);
- ``cover_r10``: the mean share of a question's evidence turns inside the first 10;
- the size of what was read: drawers, turns and characters returned per question;
- ``budget_hit_t10/t20``: the hit rule within an equal budget of turns read: the first
  drawers whose turns add up to at most T (whole drawers only). A two-turn drawer covers
  twice the dialog of a one-turn drawer at equal k, so hit@k favours it; at equal turns
  read it does not. The turns variant is asked again with top_k 20 for t20.

The dataset is read in place (CC BY-NC: never copied into the repository). Without it
the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_data import Conversation, LoadReport, Turn, load

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo10.json"
TOP_K = 10
BUDGET_K = 20  # the turns variant's second ask, for the 20-turn budget
KS = (1, 5, 10)
BUDGETS = (10, 20)
VARIANTS = ("mined", "turns", "exchanges")
TOOLS = ("memory_recall", "memory_recall_deep")
RECALL_THREADS = 4
NS = uuid.UUID("3b8e2f4a-6c1d-5e7f-9a0b-1c2d3e4f5a6b")
CWD_ROOT = "/home/locomo"  # a transcript's cwd: /home/locomo/<conv>, so the room is <conv>


# -- transcripts (pure) --------------------------------------------------------------------


def turn_line(turn: Turn, captions: bool = True) -> str:
    """A turn as LoCoMo reads: who said it, what, and the photo they shared (as
    ``bench/locomo.py`` stores it, so both variants hold the same words)."""
    line = f"{turn.speaker}: {turn.text}"
    if captions and turn.caption:
        line += f" [shares a photo: {turn.caption}]"
    return line


def session_id(conv: str, session: int) -> str:
    return str(uuid.uuid5(NS, f"{conv}/session-{session}"))


def message_uuid(conv: str, dia_id: str) -> str:
    return str(uuid.uuid5(NS, f"{conv}/{dia_id}"))


def stamp(turn: Turn) -> str | None:
    """The session's date plus one second per turn, as Claude Code writes a timestamp."""
    when = turn.when
    if when is None:
        return None
    moment = when.replace(tzinfo=UTC) + timedelta(seconds=turn.index)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def sessions_of(turns: Sequence[Turn]) -> dict[int, list[Turn]]:
    out: dict[int, list[Turn]] = {}
    for turn in turns:
        out.setdefault(turn.session, []).append(turn)
    return out


def user_of(session: Sequence[Turn], speakers: tuple[str, str], user_role: str) -> str:
    """Whose turns are the ``user`` lines: speaker A, or the session's opener."""
    return session[0].speaker if user_role == "opener" else speakers[0]


def exchanges_of(session: Sequence[Turn], user: str) -> list[list[Turn]]:
    """A session's turns grouped as ``mine`` groups a transcript: a ``user`` turn starts
    an exchange, the ``assistant`` turns after it join it; an assistant turn with no
    prompt before it (a session the other speaker opens) is an exchange of its own."""
    groups: list[list[Turn]] = []
    for turn in session:
        if turn.speaker == user or not groups:
            groups.append([turn])
        else:
            groups[-1].append(turn)
    return groups


def transcript_lines(
    conv: Conversation, session: Sequence[Turn], user: str, captions: bool = True
) -> list[dict]:
    """One session as Claude Code's JSONL lines: a ``user`` line (string content) per
    prompt, an ``assistant`` line (a text block) per reply, chained by ``parentUuid``."""
    sid = session_id(conv.sample_id, session[0].session)
    lines: list[dict] = []
    parent = None
    for i, turn in enumerate(session):
        uid = message_uuid(conv.sample_id, turn.dia_id)
        base = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": f"{CWD_ROOT}/{conv.sample_id}",
            "sessionId": sid,
            "version": "2.0.14",
            "uuid": uid,
            "timestamp": stamp(turn),
        }
        if turn.speaker == user:
            lines.append(
                {
                    **base,
                    "type": "user",
                    "message": {"role": "user", "content": turn_line(turn, captions)},
                }
            )
        else:
            lines.append(
                {
                    **base,
                    "type": "assistant",
                    "requestId": f"req_{i:03d}",
                    "message": {
                        "id": f"msg_{i:03d}",
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-sonnet-4-5",
                        "content": [{"type": "text", "text": turn_line(turn, captions)}],
                        "stop_reason": "end_turn",
                    },
                }
            )
        parent = uid
    return lines


def exchange_text(group: Sequence[Turn], user: str, captions: bool = True) -> str:
    """What ``mine`` stores for an exchange (``claude_code.Parser.finish``)."""
    asked = [turn_line(t, captions) for t in group if t.speaker == user]
    said = [turn_line(t, captions) for t in group if t.speaker != user]
    parts = []
    if asked:
        parts.append("User: " + "\n\n".join(asked))
    if said:
        parts.append("Assistant: " + "\n\n".join(said))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class Expected:
    """A drawer the transcripts should give: its session, line uuids and dialog ids."""

    session: str
    uuids: tuple[str, ...]
    dia_ids: tuple[str, ...]
    text: str
    created_at: str | None


def write_conversation(
    conv: Conversation, root: Path, user_role: str, captions: bool = True
) -> list[Expected]:
    """Write ``conv``'s sessions under ``root`` (one ``<session>.jsonl`` each); returns
    the exchanges they hold, in order."""
    root.mkdir(parents=True, exist_ok=True)
    expected: list[Expected] = []
    for session in sessions_of(conv.turns).values():
        user = user_of(session, conv.speakers, user_role)
        sid = session_id(conv.sample_id, session[0].session)
        lines = transcript_lines(conv, session, user, captions)
        (root / f"{sid}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        for group in exchanges_of(session, user):
            expected.append(
                Expected(
                    session=sid,
                    uuids=tuple(message_uuid(conv.sample_id, t.dia_id) for t in group),
                    dia_ids=tuple(t.dia_id for t in group),
                    text=exchange_text(group, user, captions),
                    created_at=stamp(group[0]),
                )
            )
    return expected


# -- scoring (pure) ------------------------------------------------------------------------


def hit(gold: Sequence[str], groups: Sequence[Sequence[str]], k: int) -> bool:
    """Some evidence turn inside one of the first ``k`` drawers (each a tuple of dia_ids)."""
    wanted = set(gold)
    return any(wanted.intersection(g) for g in groups[:k])


def cover(gold: Sequence[str], groups: Sequence[Sequence[str]], k: int) -> float:
    """The share of the evidence turns inside the first ``k`` drawers."""
    wanted = set(gold)
    seen = {d for g in groups[:k] for d in g}
    return len(wanted & seen) / len(wanted)


def within_budget(groups: Sequence[Sequence[str]], turns: int) -> list[Sequence[str]]:
    """The first drawers whose turns add up to at most ``turns`` (whole drawers only)."""
    out: list[Sequence[str]] = []
    used = 0
    for g in groups:
        if used + len(g) > turns:
            break
        out.append(g)
        used += len(g)
    return out


def summarise(rows: list[dict]) -> dict:
    """Means over questions of the per-question figures ``score_question`` gives."""
    n = len(rows)
    if not n:
        return {"n": 0}
    out: dict = {"n": n}
    for key in rows[0]:
        if key == "category":
            continue
        total = sum(r[key] for r in rows)
        scale = 100 if key.startswith(("hit_", "cover_", "budget_")) else 1
        out[key] = round(scale * total / n, 2)
    return out


def score_question(
    gold: Sequence[str],
    groups: Sequence[Sequence[str]],
    chars: Sequence[int],
    deeper: Sequence[Sequence[str]] | None = None,
) -> dict:
    """Every figure of one question from its ranked drawers (as dia_id tuples) and their
    text lengths; ``deeper`` is a longer ranking for the turn budgets (else ``groups``)."""
    pool = deeper if deeper is not None else groups
    row: dict = {f"hit_r{k}": float(hit(gold, groups, k)) for k in KS}
    row["cover_r10"] = cover(gold, groups, TOP_K)
    for t in BUDGETS:
        row[f"budget_hit_t{t}"] = float(hit(gold, within_budget(pool, t), len(pool)))
    top = groups[:TOP_K]
    row["drawers_returned"] = len(top)
    row["turns_returned"] = sum(len(g) for g in top)
    row["chars_returned"] = sum(chars[:TOP_K])
    return row


# -- the daemon ----------------------------------------------------------------------------


def palace_of(conv: Conversation) -> str:
    return f"locomo-{conv.sample_id}"


def mine_cli() -> list[str]:
    exe = Path(sys.executable).with_name("trusty-memory")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "trusty_memory.client.cli.main"]


def store_mined(config, convs, expected, root: Path) -> tuple[dict, dict]:
    """``mine`` each conversation's folder (the CLI, as a subprocess); then map every
    drawer to its dia_ids through the uuids ``mine`` stored."""
    from trusty_memory.client.capture.exchanges import drawer_id as capture_id
    from trusty_memory.client.sync import Client
    from trusty_memory.common.protocol import TrustyError

    runs = []
    started = time.monotonic()
    for conv in convs:
        t0 = time.monotonic()
        done = subprocess.run(
            [*mine_cli(), "mine", palace_of(conv), str(root / conv.sample_id),
             "--format", "claude-code", "--json"],
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(
                f"mine {conv.sample_id}: rc {done.returncode}: {done.stderr[-2000:]}"
            )
        report = json.loads(done.stdout)
        report["wall_seconds"] = round(time.monotonic() - t0, 2)
        runs.append({k: report.get(k) for k in
                     ("palace", "files", "lines_read", "bad_lines", "exchanges", "stored",
                      "skipped", "redacted", "seconds", "wall_seconds")})  # fmt: skip
        print(f"mined {conv.sample_id}: {runs[-1]}", file=sys.stderr)
    seconds = time.monotonic() - started

    by_uuid = {message_uuid(c.sample_id, t.dia_id): t.dia_id for c in convs for t in c.turns}
    groups: dict[str, tuple[str, ...]] = {}
    chars: dict[str, int] = {}
    mapping = {"expected": 0, "found": 0, "missing": 0, "uuids_differ": 0, "in_palaces": 0}
    with Client(config, autostart=False) as client:
        for conv in convs:
            mapping["in_palaces"] += client.palace_info(palace_of(conv)).drawer_count
            for ex in expected[conv.sample_id]:
                mapping["expected"] += 1
                did = capture_id("claude-code", ex.session, ex.uuids[0])
                try:
                    detail = client.get(palace_of(conv), did)
                except TrustyError:
                    mapping["missing"] += 1
                    continue
                mapping["found"] += 1
                stored = tuple((detail.metadata or {}).get("message_uuids") or ())
                if stored != ex.uuids:
                    mapping["uuids_differ"] += 1
                groups[did] = tuple(by_uuid[u] for u in stored if u in by_uuid)
                chars[did] = len(detail.content)
    stored_total = sum(r["stored"] or 0 for r in runs)
    ingest = {
        "drawers_stored": stored_total,
        "mine_seconds": round(seconds, 1),
        "mine_reported_seconds": round(sum(r["seconds"] or 0 for r in runs), 1),
        "runs": runs,
    }
    return ingest, {"groups": groups, "chars": chars, "mapping": mapping}


def remember_in_order(config, items: dict[str, list[tuple[str, dict]]]) -> float:
    """Each palace's drawers through ``memory_remember``, in order, one writer per palace
    (as an agent writes and as ``bench/locomo.py`` does); returns the seconds taken."""
    import locomo as lm

    from trusty_memory.common.protocol import ErrorCode, TrustyError

    def work(client, row) -> None:
        palace, params_list = row
        for params in params_list:
            for attempt in range(lm.INGEST_RETRIES):
                try:
                    client.call("memory_remember", params, palace=palace)
                    break
                except TrustyError as exc:
                    if exc.code != ErrorCode.TIMEOUT or attempt == lm.INGEST_RETRIES - 1:
                        raise

    from trusty_memory.client.sync import Client

    with Client(config, autostart=False) as client:
        for palace in items:
            client.palace_create(palace, description="LoCoMo bench")
    started = time.monotonic()
    lm.run_threads(len(items), list(items.items()), work, config)
    return time.monotonic() - started


def store_turns(config, convs, captions: bool) -> tuple[dict, dict]:
    import locomo as lm

    items = {}
    groups: dict[str, tuple[str, ...]] = {}
    chars: dict[str, int] = {}
    args = argparse.Namespace(captions=captions, window=0)
    for conv in convs:
        rows = []
        for i, turn in enumerate(conv.turns):
            params = lm.remember_params(conv, i, args)
            rows.append(params)
            groups[params["drawer_id"]] = (turn.dia_id,)
            chars[params["drawer_id"]] = len(params["text"])
        items[palace_of(conv)] = rows
    seconds = remember_in_order(config, items)
    ingest = {"drawers_stored": len(groups), "seconds": round(seconds, 1)}
    return ingest, {"groups": groups, "chars": chars, "mapping": {}}


def store_exchanges(config, convs, expected) -> tuple[dict, dict]:
    items = {}
    groups: dict[str, tuple[str, ...]] = {}
    chars: dict[str, int] = {}
    for conv in convs:
        rows = []
        for ex in expected[conv.sample_id]:
            did = str(uuid.uuid5(NS, f"exchange/{conv.sample_id}/{ex.uuids[0]}"))
            rows.append(
                {
                    "text": ex.text,
                    "room": conv.sample_id,
                    "drawer_id": did,
                    "created_at": ex.created_at and ex.created_at.replace(".000Z", "+00:00"),
                    "metadata": {"source": "claude-code", "session_id": ex.session,
                                 "message_uuids": list(ex.uuids)},
                }
            )  # fmt: skip
            groups[did] = ex.dia_ids
            chars[did] = len(ex.text)
        items[palace_of(conv)] = rows
    seconds = remember_in_order(config, items)
    ingest = {"drawers_stored": len(groups), "seconds": round(seconds, 1)}
    return ingest, {"groups": groups, "chars": chars, "mapping": {}}


def ask(config, convs, tool: str, top_k: int) -> tuple[dict, list[float]]:
    """Every question through ``tool``; returns each question's drawer ids, in order."""
    import locomo as lm

    ranked: dict[tuple[str, int], list[str]] = {}
    latencies: list[float] = []
    items = [(conv, q) for conv in convs for q in conv.questions]

    def work(client, item) -> None:
        conv, q = item
        t0 = time.perf_counter()
        data = client.call(tool, {"query": q.question, "top_k": top_k}, palace=palace_of(conv))
        latencies.append((time.perf_counter() - t0) * 1000)
        ranked[(q.conv, q.index)] = [h["drawer_id"] for h in data["results"]]

    lm.run_threads(RECALL_THREADS, items, work, config)
    return ranked, latencies


def evaluate(convs, store: dict, ranked: dict, deeper: dict | None) -> dict:
    groups, chars = store["groups"], store["chars"]
    unmapped = 0
    rows: list[dict] = []
    by_cat: dict[str, list[dict]] = {}

    def as_groups(ids: list[str]) -> list[tuple[str, ...]]:
        nonlocal unmapped
        out = []
        for did in ids:
            if did not in groups:
                unmapped += 1
            out.append(groups.get(did, ()))
        return out

    for conv in convs:
        for q in conv.questions:
            ids = ranked.get((q.conv, q.index), [])
            deep = as_groups(deeper[(q.conv, q.index)]) if deeper is not None else None
            row = score_question(q.gold, as_groups(ids), [chars.get(d, 0) for d in ids], deep)
            rows.append(row)
            by_cat.setdefault(str(q.category), []).append(row)
    return {
        "overall": summarise(rows),
        "by_category_hit_r10": {
            c: {"n": len(r), "hit_r10": summarise(r)["hit_r10"]} for c, r in sorted(by_cat.items())
        },
        "unmapped_hits": unmapped,
    }


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 2) if values else 0.0


def run_variant(variant: str, convs, expected, root: Path, captions: bool) -> dict:
    import locomo as lm

    home = Path(tempfile.mkdtemp(prefix=f"tmx-{variant}-", dir="/tmp"))
    try:
        with lm.Daemon(home) as daemon:
            if variant == "mined":
                ingest, store = store_mined(daemon.config, convs, expected, root)
            elif variant == "turns":
                ingest, store = store_turns(daemon.config, convs, captions)
            else:
                ingest, store = store_exchanges(daemon.config, convs, expected)
            print(f"{variant}: stored {ingest}", file=sys.stderr)
            results: dict = {}
            latency: dict = {}
            for tool in TOOLS:
                ranked, ms = ask(daemon.config, convs, tool, TOP_K)
                deeper = None
                if variant == "turns":
                    deeper, _ = ask(daemon.config, convs, tool, BUDGET_K)
                results[tool] = evaluate(convs, store, ranked, deeper)
                latency[tool] = {"p50_ms": pct(ms, 0.5), "p99_ms": pct(ms, 0.99)}
                print(f"{variant} {tool}: {results[tool]['overall']}", file=sys.stderr)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = {"ingest": ingest, "results": results, "recall_latency_ms": latency}
    if store["mapping"]:
        out["mapping"] = store["mapping"]
    return out


def table(variants: dict) -> str:
    lines = [
        "| variant | tool | R@1 | R@5 | R@10 | cover@10 | hit in 10 turns | hit in 20 turns"
        " | drawers/q | turns/q | chars/q |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, v in variants.items():
        for tool, res in v["results"].items():
            m = res["overall"]
            lines.append(
                f"| {name} | {tool} | {m['hit_r1']:.1f} | {m['hit_r5']:.1f} | {m['hit_r10']:.1f}"
                f" | {m['cover_r10']:.1f} | {m['budget_hit_t10']:.1f} | {m['budget_hit_t20']:.1f}"
                f" | {m['drawers_returned']:.1f} | {m['turns_returned']:.1f}"
                f" | {m['chars_returned']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--conversations", type=int, default=None, help="the first N only")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--user-role", choices=("speaker-a", "opener"), default="speaker-a")
    parser.add_argument("--no-captions", dest="captions", action="store_false")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variants: {sorted(unknown)}")

    if not args.data.is_file():
        print(f"LoCoMo data not found at {args.data} (see ../shared/data/README.md): "
              "nothing to measure", file=sys.stderr)  # fmt: skip
        return 0
    raw = args.data.read_bytes()
    report = LoadReport()
    convs = load(json.loads(raw), report)
    if args.conversations:
        convs = convs[: args.conversations]

    root = Path(tempfile.mkdtemp(prefix="tmx-transcripts-", dir="/tmp"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    started = time.monotonic()
    try:
        expected = {
            c.sample_id: write_conversation(c, root / c.sample_id, args.user_role, args.captions)
            for c in convs
        }
        results = {v: run_variant(v, convs, expected, root, args.captions) for v in variants}
    finally:
        shutil.rmtree(root, ignore_errors=True)

    sizes = [len(ex.dia_ids) for exs in expected.values() for ex in exs]
    out = {
        "benchmark": "LoCoMo mined as Claude Code transcripts vs one turn per drawer",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "command": " ".join(
            ["bench/mined_transcripts.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "conversations": [c.sample_id for c in convs],
        "turns": sum(len(c.turns) for c in convs),
        "sessions": sum(len(sessions_of(c.turns)) for c in convs),
        "exchanges": len(sizes),
        "exchange_sizes": {str(n): sizes.count(n) for n in sorted(set(sizes))},
        "questions": sum(len(c.questions) for c in convs),
        "questions_skipped": dict(report.skipped),
        "settings": {"top_k": TOP_K, "user_role": args.user_role, "captions": args.captions},
        "variants": results,
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    print(table(results), file=sys.stderr)
    line = json.dumps(out)
    print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
