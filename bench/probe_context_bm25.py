"""Probe: would BM25 find more if each drawer's index held its episode predecessor's words?

    .venv/bin/python bench/probe_context_bm25.py [--weights 0,0.2,0.4]

Not the product: an in-memory SQLite FTS5 table per set, one row per drawer, its own text
in one column and its predecessor's (the drawer before it in the same LoCoMo session, or
in the same room within the episode window for the engineering notes; cut to 300
characters) in a second column ranked at ``weight`` (0: the column is left empty). Each
question's terms are ORed, as deep recall does, and the BM25 list alone is scored: turn
R@10 on LoCoMo, R@1 / R@5 / R@10 on the engineering notes. It measures what a
context-aware BM25 list could give deep recall before anything is built: the fused
figures are what would decide. The product has done it since (schema v6,
``drawers.context``: the words a drawer lacks, at 0.3; ``workers/store/ranking.py``); this
probe stays to measure the BM25 list alone.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo as lm
from eng_notes import DEFAULT_DATA as ENG_DATA
from locomo_data import LoadReport, load

from trusty_memory.common.values import fts_or, fts_terms
from trusty_memory.workers.store import ranking as retrieval

CONTEXT_CHARS = 300


def ranked(rows: list[tuple[str, str]], questions: list[str], weight: float) -> list[list[int]]:
    """Row numbers (0-based) of the top 10 by BM25 for each question."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(own, ctx, tokenize='porter unicode61')")
    db.executemany(
        "INSERT INTO t(rowid, own, ctx) VALUES (?, ?, ?)",
        [(i + 1, own, ctx[:CONTEXT_CHARS] if weight else "") for i, (own, ctx) in enumerate(rows)],
    )
    out = []
    for question in questions:
        terms = fts_terms(question)
        found = db.execute(
            f"SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t, 1.0, {weight or 1e-4}) LIMIT 10",
            (fts_or(terms),),
        ).fetchall() if terms else []  # fmt: skip
        out.append([r[0] - 1 for r in found])
    return out


def locomo(weight: float) -> float:
    convs = load(json.loads(Path(lm.DEFAULT_DATA).read_bytes()), LoadReport())
    shares = []
    for conv in convs:
        turns = conv.turns
        rows = [
            (lm.turn_line(t, True),
             lm.turn_line(turns[i - 1], True) if i and turns[i - 1].session == t.session else "")
            for i, t in enumerate(turns)
        ]  # fmt: skip
        for q, top in zip(conv.questions, ranked(rows, [q.question for q in conv.questions],
                                                 weight), strict=True):  # fmt: skip
            got = {turns[i].dia_id for i in top}
            shares.append(len(set(q.gold) & got) / len(q.gold) if q.gold else 0.0)
    return 100 * sum(shares) / len(shares)


def eng_notes(weight: float) -> tuple[float, float, float]:
    data = json.loads(ENG_DATA.read_text())
    drawers = data["drawers"]
    rows = []
    for i, d in enumerate(drawers):
        prev = drawers[i - 1] if i else None
        near = (
            prev is not None
            and prev["room"] == d["room"]
            and (
                _seconds(d["created_at"]) - _seconds(prev["created_at"])
                <= retrieval.EPISODE_WINDOW_S
            )
        )
        rows.append((d["text"], prev["text"] if near else ""))
    questions = data["questions"]
    tops = ranked(rows, [q["question"] for q in questions], weight)
    result = []
    for k in (1, 5, 10):
        shares = [
            len(set(q["gold"]) & {drawers[i]["id"] for i in top[:k]}) / len(q["gold"])
            for q, top in zip(questions, tops, strict=True)
        ]
        result.append(100 * sum(shares) / len(shares))
    return result[0], result[1], result[2]


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default="0,0.2,0.4")
    args = parser.parse_args(argv)
    for weight in (float(w) for w in args.weights.split(",")):
        r1, r5, r10 = eng_notes(weight)
        print(
            f"predecessor column weight {weight}: LoCoMo BM25 turn R@10 {locomo(weight):.1f};"
            f" engineering notes BM25 R@1 / R@5 / R@10 {r1:.1f} / {r5:.1f} / {r10:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
