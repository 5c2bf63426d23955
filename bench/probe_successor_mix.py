"""Probe: would a drawer's vector gain from its episode successor's, mixed in once it arrives?

    .venv/bin/python bench/probe_successor_mix.py [--weights 0,0.2,0.35,0.5]
        [--eng-notes FILE ...] [--limit-conversations N]

Not the product. Each drawer's vector is built as the palace builds it (its own text's
vector plus ``context.CONTEXT_WEIGHT`` x its episode predecessor's, unit length) and,
for each weight w, plus w x its episode successor's: what re-embedding a drawer when the
next one arrives would store. Episodes as the product draws them: same LoCoMo session;
for the engineering notes, same room within ``retrieval.EPISODE_WINDOW_S``. The vectors
come from the real daemon's embedder (the product's model), and the vector list alone
is scored by exact cosine: turn R@10 on LoCoMo, R@1 / R@5 / R@10 on each engineering-notes
file. Weight 0 is the palace as it is: its engineering-notes figures are
``memory_recall``'s (``bench/results/eng_notes.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo as lm
from eng_notes import DEFAULT_DATA as ENG_DATA
from locomo_data import LoadReport, load

from trusty_memory.client.sync import Client
from trusty_memory.workers.store import context
from trusty_memory.workers.store import ranking as retrieval


def vectors(own: np.ndarray, before: list[int | None], after: list[int | None], w: float):
    """Each row: own + CONTEXT_WEIGHT x predecessor's own + w x successor's own, unit."""
    out = own.copy()
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if b is not None:
            out[i] += context.CONTEXT_WEIGHT * own[b]
        if a is not None and w:
            out[i] += w * own[a]
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def recall(docs: np.ndarray, queries: np.ndarray, gold: list[list[int]], k: int) -> float:
    top = np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :k]
    return 100 * float(
        np.mean([len(set(g) & set(t)) / len(g) for g, t in zip(gold, top, strict=True)])
    )


def neighbours(same: list[bool]) -> tuple[list[int | None], list[int | None]]:
    """``same[i]``: drawer i+1 is in drawer i's episode -> (predecessor, successor) each."""
    n = len(same) + 1
    before = [i - 1 if i and same[i - 1] else None for i in range(n)]
    after = [i + 1 if i < n - 1 and same[i] else None for i in range(n)]
    return before, after


def locomo(client: Client, convs, weights: list[float]) -> list[float]:
    sums = [0.0] * len(weights)
    count = 0
    for conv in convs:
        turns = conv.turns
        own = lm.embed(client, [lm.turn_line(t, True) for t in turns])
        queries = lm.embed(client, [q.question for q in conv.questions])
        before, after = neighbours([a.session == b.session for a, b in itertools.pairwise(turns)])
        at = {t.dia_id: i for i, t in enumerate(turns)}
        gold = [[at[g] for g in q.gold] for q in conv.questions]
        for j, w in enumerate(weights):
            sums[j] += recall(vectors(own, before, after, w), queries, gold, 10) * len(gold)
        count += len(gold)
    return [s / count for s in sums]


def eng_notes(client: Client, data: dict, weights: list[float]) -> list[tuple[float, ...]]:
    notes = data["drawers"]
    written = [
        context.Written(n["room"], context.seconds_of(n["created_at"]), n["text"]) for n in notes
    ]
    window = retrieval.EPISODE_WINDOW_S
    before, after = neighbours(
        [context.same_episode(a, b, window) for a, b in itertools.pairwise(written)]
    )
    own = lm.embed(client, [n["text"] for n in notes])
    queries = lm.embed(client, [q["question"] for q in data["questions"]])
    at = {n["id"]: i for i, n in enumerate(notes)}
    gold = [[at[g] for g in q["gold"]] for q in data["questions"]]
    return [
        tuple(recall(vectors(own, before, after, w), queries, gold, k) for k in (1, 5, 10))
        for w in weights
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default="0,0.2,0.35,0.5")
    parser.add_argument("--eng-notes", type=Path, nargs="*", default=[ENG_DATA])
    parser.add_argument("--limit-conversations", type=int, default=None)
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",")]
    convs = load(json.loads(Path(lm.DEFAULT_DATA).read_bytes()), LoadReport())
    convs = convs[: args.limit_conversations]
    home = Path(tempfile.mkdtemp(prefix="tml-", dir="/tmp"))
    try:
        with lm.Daemon(home) as daemon, Client(daemon.config, autostart=False) as client:
            turn = locomo(client, convs, weights)
            notes = {p.name: eng_notes(client, json.loads(p.read_text()), weights)
                     for p in args.eng_notes}  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for j, w in enumerate(weights):
        sets = "; ".join(
            f"{name} R@1/5/10 {' / '.join(f'{x:.1f}' for x in figures[j])}"
            for name, figures in notes.items()
        )
        print(f"successor weight {w}: LoCoMo turn R@10 {turn[j]:.1f}; {sets}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
