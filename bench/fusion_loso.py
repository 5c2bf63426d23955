"""Leave-one-set-out choice of deep recall's fusion settings, from ``bench/replay.py`` runs.

    .venv/bin/python bench/replay.py --home DIR --variants after \\
        --set retrieval.VECTOR_TEMPERATURE=T --set retrieval.TEXT_EVIDENCE=E --out RUN.json
    .venv/bin/python bench/fusion_loso.py RUN.json [RUN.json ...] [--table]
        [--shipped RUN.json]

A setting tuned on the sets it is then judged on says little about sets nobody has. So each
source of questions is left out in turn: the setting is chosen on all the others (the one
with the best mean of deep R@1 and R@10 over them, each set counted once), and judged on
the one left out, whose figures were never looked at to choose it (settings the others
score alike are each reported: a tie is not broken by the held-out set). The engineering notes and
their two seeds come from one generator, so they leave together. A setting is a replay run
(its ``--set`` assignments); ``--table`` prints the markdown table of ``BENCHMARKS.md``:
per held-out source, the setting chosen without it, and plain and deep R@1 / R@5 / R@10 on
it (LoCoMo: turn figures); with ``--shipped``, also that run's deep R@1 (the figure a
held-out set had before), so a fold can be checked against "no worse than shipped".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Sources of questions: the engineering notes' seeds are one generator, so one fold.
FOLDS = {
    "locomo": ("locomo",),
    "eng notes (3 seeds)": ("eng", "eng7", "eng99"),
    "history": ("history",),
    "bursts": ("bursts",),
    "paraphrase": ("paraphrase",),
    "reworded": ("reworded",),
}


def figures(result: dict) -> list[float]:
    """R@1 / R@5 / R@10 of one set's result (LoCoMo: of turns)."""
    if "all" in result:
        return list(result["all"])
    return [result["turn_r1"], result["turn_r5"], result["turn_r10"]]


def load(path: Path) -> tuple[str, dict, dict]:
    """A run's name (its settings), deep figures by set, plain figures by set."""
    run = json.loads(path.read_text())
    name = ", ".join(s.removeprefix("retrieval.") for s in run.get("set", [])) or "as shipped"
    deep = {s: figures(r) for s, r in run["variants"]["after/deep"].items()}
    plain = {s: figures(r) for s, r in run["variants"]["after/plain"].items()}
    return name, deep, plain


def objective(deep: dict[str, list[float]], sets: list[str]) -> float:
    """Mean over ``sets`` of (R@1 + R@10) / 2: the first answer and the top ten alike."""
    return sum((deep[s][0] + deep[s][2]) / 2 for s in sets) / len(sets)


def loso(runs: list[tuple[str, dict, dict]]) -> list[dict]:
    """For each fold: the run chosen on the other folds, and its figures on the fold."""
    rows = []
    present = set.intersection(*(set(deep) for _, deep, _ in runs))
    for fold, members in FOLDS.items():
        held = [s for s in members if s in present]
        if not held:
            continue
        others = sorted(s for s in present if s not in members)
        best = max(objective(run[1], others) for run in runs)
        # Settings the other sets cannot tell apart (a rule only the held-out set exercises)
        # are all chosen: each gets a row, so a tie is never broken in the held-out set's favour.
        tied = [run for run in runs if objective(run[1], others) >= best - 1e-9]
        for chosen in tied:
            for s in held:
                rows.append({"fold": fold, "set": s, "chosen": chosen[0], "tied": len(tied),
                             "plain": chosen[2][s], "deep": chosen[1][s]})  # fmt: skip
    return rows


def table(rows: list[dict], shipped: dict[str, list[float]] | None = None) -> str:
    head = "| held out | setting chosen on the other sets | `memory_recall` |"
    rule = "|---|---|---:|"
    if shipped is not None:
        head, rule = head + " shipped deep R@1 |", rule + "---:|"
    lines = [head + " deep (held out) |", rule + "---:|"]
    for r in rows:
        plain = " / ".join(f"{x:.1f}" for x in r["plain"])
        deep = " / ".join(f"{x:.1f}" for x in r["deep"])
        cells = [r["set"], r["chosen"], plain]
        if shipped is not None:
            cells.append(f"{shipped[r['set']][0]:.1f}")
        lines.append("| " + " | ".join([*cells, deep]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="bench/replay.py --out files")
    parser.add_argument("--table", action="store_true", help="print the markdown table")
    parser.add_argument("--shipped", type=Path, help="the run of the code as it was shipped")
    args = parser.parse_args(argv)
    runs = [load(path) for path in args.runs]
    rows = loso(runs)
    if args.table:
        print(table(rows, load(args.shipped)[1] if args.shipped else None))
    else:
        print(json.dumps(rows, indent=2))
    for run in runs:
        everywhere = sorted(set(run[1]))
        print(f"{run[0]}: mean (R@1 + R@10) / 2 over every set {objective(run[1], everywhere):.2f}",
              file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
