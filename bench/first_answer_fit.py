"""Fit and choose deep recall's first-answer model (``workers/store/first_answer.py``),
leaving each source of questions out in turn.

    .venv/bin/python bench/first_answer_fit.py --home DIR [--cases FILE] [--table]
        [--set retrieval.NAME=VALUE ...]

``DIR`` is a ``bench/replay.py`` home (the sets stored once through a real daemon). Every
question of every set is asked as ``memory_recall_deep`` through the product's read path,
in this process, and where fusion's first drawer and the vector's first differ the
features of the two (``first_answer.features``) are kept with what each would give the
question's R@1 (``--cases`` keeps them in a file, and reads them from it next time).

Candidates: no swap at all, the margin rule (``first_answer.vector_wins``) at several
margins, and logistic models over feature subsets and L2 strengths, each fitted on
questions weighted by the R@1 at stake (``|R@1 with the vector's first - with fusion's|``
over the number of its set's questions, so each set counts alike). Nested leave one
source out: for each held-out source, each candidate is scored on the remaining sources
by leaving each of them out in turn (fitted on the rest), the best is fitted on all the
remaining ones and judged on the held-out one, which took no part in either choice. The
engineering notes' three seeds are one generator, so they leave together. Last, the
candidate with the best leave-one-source-out mean over every set is named, and when it is
a model, its weights fitted on every set are printed, to be shipped in ``first_answer.py``
(so far a rule has won: ``first_answer.vector_wins`` at ``MEANING_FIRST_MARGIN``).
``--table`` prints the markdown table of BENCHMARKS.md; ``--set`` changes a ranking
constant first, as ``bench/replay.py`` does (the cases are then those of that setting).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo as lm
import replay
from fusion_loso import FOLDS  # the sources, the eng notes' seeds as one
from locomo_data import LoadReport, load, turn_recall

from trusty_memory.common.config import load_config
from trusty_memory.workers.store import first_answer
from trusty_memory.workers.store import ranking as retrieval

ALL = [s for members in FOLDS.values() for s in members]

# A question: R@1 with fusion's first, R@1 with the vector's first, features (None: agree).
Case = tuple[float, float, list[float] | None]


# -- the cases, asked through the product's read path ------------------------------------------


def ask(store, question: str, vector) -> tuple[list[int], list[float] | None, int | None]:
    """Deep recall's top ten labels as the product ranks them with no swap, the features of
    the disagreement (if any) and the vector's first."""
    seen: dict = {}
    choose = first_answer.choose

    def spy(ranked, evidence, margin, text_evidence):
        seen["x"] = first_answer.features(ranked, evidence)
        seen["vector_first"] = evidence.vector_scored[0][0] if evidence.vector_scored else None
        return ranked  # no swap: fusion's own first

    first_answer.choose = spy
    try:
        hits = store.recall(question, vector, 10, deep=True, count=False)
    finally:
        first_answer.choose = choose
    labels = [store_label(store, h.drawer_id) for h in hits]
    return labels, seen.get("x"), seen.get("vector_first")


def store_label(store, drawer_id: str) -> int:
    row = store.db.conn.execute("SELECT label FROM drawers WHERE id = ?", (drawer_id,)).fetchone()
    return int(row[0])


def collect(home: Path, data: Path) -> dict[str, list[Case]]:
    """Every set's cases (see ``Case``)."""
    settings = dataclasses.replace(load_config().palace, context_vectors=True)
    cases: dict[str, list[Case]] = {}
    convs = load(json.loads(data.read_bytes()), LoadReport())
    replay.load_home(home, ALL, convs)
    vectors = iter(np.load(home / "locomo-queries.npy"))
    cases["locomo"] = []
    for conv in convs:
        store = replay.open_store(home, lm.palace_name(conv), settings)
        dia = {
            label: lm_id
            for label, lm_id in (
                (int(label), {lm.drawer_id(t): t.dia_id for t in conv.turns}.get(did))
                for label, did in store.db.conn.execute("SELECT label, id FROM drawers")
            )
        }
        for q in conv.questions:
            labels, x, vfirst = ask(store, q.question, next(vectors))
            keep = turn_recall(q.gold, [dia.get(labels[0])], 1) if labels else 0.0
            swap = turn_recall(q.gold, [dia.get(vfirst)], 1) if x is not None else keep
            cases["locomo"].append((keep, swap, x))
        store.close()
    for name in ALL[1:]:
        meta = json.loads((home / f"{name}.json").read_text())
        store = replay.open_store(home, meta["palace"], settings)
        ids = {
            int(label): meta["ids"].get(did)
            for label, did in store.db.conn.execute("SELECT label, id FROM drawers")
        }
        cases[name] = []
        for q, vec in zip(meta["questions"], np.load(home / f"{name}-queries.npy"), strict=True):
            labels, x, vfirst = ask(store, q["question"], vec)
            gold = q["gold"]
            keep = (ids.get(labels[0]) in gold) / len(gold) if labels else 0.0
            swap = (ids.get(vfirst) in gold) / len(gold) if x is not None else keep
            cases[name].append((keep, swap, x))
        store.close()
    return cases


# -- candidates --------------------------------------------------------------------------------

F = {name: i for i, name in enumerate(first_answer.FEATURES)}
SUBSETS = {
    "all": list(first_answer.FEATURES),
    "cosine, shares, turns": ["cosine_gap", "vector_margin", "text_share_fused",
                              "text_share_vector", "borrowed_fused", "borrowed_vector"],
    "no ranks": [f for f in first_answer.FEATURES
                 if f not in ("vector_rank_fused", "text_rank_vector", "fused_lead")],
}  # fmt: skip
STRENGTHS = (0.001, 0.01, 0.1)


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    subset: tuple[str, ...] = ()  # empty: a rule, not fitted
    strength: float = 0.0
    rule: Callable[[list[float]], bool] | None = None


def margin_rule(margin: float) -> Callable[[list[float]], bool]:
    """The rule (``first_answer.vector_wins``) at ``margin``."""

    def rule(x: list[float]) -> bool:
        return first_answer.vector_wins(
            x[F["cosine_gap"]], x[F["text_share_fused"]], bool(x[F["borrowed_fused"]]),
            bool(x[F["dated_fused"]]), margin, retrieval.TEXT_EVIDENCE,
        )  # fmt: skip

    return rule


MARGINS = (0.06, 0.1, 0.15, 0.2, 0.3)  # 0.2: ``ranking.MEANING_FIRST_MARGIN`` as shipped


CANDIDATES = [
    Candidate("no swap", rule=lambda x: False),
    *(Candidate(f"margin rule {m}", rule=margin_rule(m)) for m in MARGINS),
    *(
        Candidate(f"logistic, {s}, L2 {c}", tuple(SUBSETS[s]), c)
        for s in SUBSETS
        for c in STRENGTHS
    ),
]


@dataclasses.dataclass(frozen=True)
class Model:
    """A fitted logistic model over the raw ``first_answer.features``."""

    bias: float
    weights: tuple[float, ...]  # one per ``first_answer.FEATURES``

    def swap(self, x: list[float]) -> bool:
        return self.bias + sum(w * f for w, f in zip(self.weights, x, strict=True)) > 0


def training(cases: dict[str, list[Case]], sets: Sequence[str]):
    """Disagreements where one side is right: features, label (1: the vector's first),
    weight (R@1 at stake over the set's size, so every set counts alike)."""
    xs, ys, ws = [], [], []
    for s in sets:
        n = len(cases[s])
        for keep, swap, x in cases[s]:
            if x is None or keep == swap:
                continue
            xs.append(x)
            ys.append(1.0 if swap > keep else 0.0)
            ws.append(abs(swap - keep) / n)
    return np.array(xs), np.array(ys), np.array(ws)


def fit(cases: dict[str, list[Case]], sets: Sequence[str], cand: Candidate) -> Model | None:
    """Weighted L2 logistic regression on ``cand``'s features (standardised), by Newton's
    method; the result mapped back to raw features. None for a rule."""
    if cand.rule is not None:
        return None
    x, y, w = training(cases, sets)
    cols = [F[name] for name in cand.subset]
    z = x[:, cols]
    mean, std = z.mean(axis=0), z.std(axis=0)
    std[std == 0] = 1.0
    z = np.hstack([np.ones((len(z), 1)), (z - mean) / std])
    w = w / w.sum()
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], cand.strength)
    penalty[0] = 0.0  # the bias is not shrunk
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ beta)))
        grad = z.T @ (w * (p - y)) + penalty * beta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    weights = [0.0] * len(first_answer.FEATURES)
    for j, col in enumerate(cols):
        weights[col] = float(beta[1 + j] / std[j])
    bias = float(beta[0] - sum(beta[1 + j] * mean[j] / std[j] for j in range(len(cols))))
    return Model(bias, tuple(weights))


def r1(cases: list[Case], decide: Callable[[list[float]], bool]) -> float:
    """A set's R@1 (percent) with ``decide`` choosing where the two firsts differ."""
    total = sum(swap if x is not None and decide(x) else keep for keep, swap, x in cases)
    return 100 * total / len(cases)


def decider(cases, sets, cand: Candidate) -> Callable[[list[float]], bool]:
    if cand.rule is not None:
        return cand.rule
    model = fit(cases, sets, cand)
    assert model is not None
    return model.swap


def held_out_scores(cases, folds: Sequence[str], cand: Candidate) -> dict[str, float]:
    """Each set of ``folds``' R@1 with ``cand`` fitted on the other ones of ``folds``."""
    out = {}
    for fold in folds:
        train = [s for f in folds if f != fold for s in FOLDS[f]]
        decide = decider(cases, train, cand)
        for s in FOLDS[fold]:
            out[s] = r1(cases[s], decide)
    return out


def nested(cases) -> list[dict]:
    rows = []
    for held in FOLDS:
        rest = [f for f in FOLDS if f != held]
        inner = {
            c.name: np.mean(list(held_out_scores(cases, rest, c).values())) for c in CANDIDATES
        }
        best = max(CANDIDATES, key=lambda c: inner[c.name])  # ties: the simpler, listed first
        decide = decider(cases, [s for f in rest for s in FOLDS[f]], best)
        for s in FOLDS[held]:
            rows.append({"set": s, "chosen": best.name, "inner": round(inner[best.name], 2),
                         "no_swap": r1(cases[s], lambda x: False),
                         "deep": r1(cases[s], decide)})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=lm.DEFAULT_DATA)
    parser.add_argument("--cases", type=Path, help="keep the cases here (read if present)")
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="retrieval.NAME=VALUE")
    args = parser.parse_args(argv)
    replay.apply_sets(args.set)
    args.home = args.home.resolve()
    os.environ["TRUSTY_MEMORY_HOME"] = str(args.home)
    if args.cases and args.cases.exists():
        cases = {s: [tuple(c) for c in v] for s, v in json.loads(args.cases.read_text()).items()}
    else:
        cases = collect(args.home, args.data)
        if args.cases:
            args.cases.write_text(json.dumps(cases))
    for s in ALL:
        n = sum(x is not None for _, _, x in cases[s])
        print(f"{s}: {len(cases[s])} questions, {n} disagreements", file=sys.stderr)
    print("every candidate, each source held out in turn (R@1):", file=sys.stderr)
    overall = {}
    for cand in CANDIDATES:
        scores = held_out_scores(cases, list(FOLDS), cand)
        overall[cand.name] = float(np.mean(list(scores.values())))
        cells = " ".join(f"{s} {scores[s]:.1f}" for s in ALL)
        print(f"  {cand.name}: mean {overall[cand.name]:.2f} | {cells}", file=sys.stderr)
    rows = nested(cases)
    for r in rows:
        print(json.dumps(r))
    chosen = max(CANDIDATES, key=lambda c: overall[c.name])
    model = fit(cases, ALL, chosen)
    print(f"shipped: {chosen.name}")
    if model is not None:
        print(f"BIAS = {model.bias!r}")
        print("WEIGHTS = (" + ", ".join(f"{w:.6g}" for w in model.weights) + ")")
    if args.table:
        print("| held out | chosen on the other sources | no swap | deep (held out) |")
        print("|---|---|---:|---:|")
        for r in rows:
            print(f"| {r['set']} | {r['chosen']} | {r['no_swap']:.1f} | {r['deep']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
