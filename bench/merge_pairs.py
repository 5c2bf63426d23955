"""The dreamer's merge decision measured on labelled pairs: precision and recall.

    .venv/bin/python -m bench.merge_pairs          # both sets, MiniLM in this process
    .venv/bin/python -m bench.merge_pairs --json

The decision is the dreamer's whole one: MiniLM cosine >= the threshold (0.95) AND
``same_fact`` (``workers/store/same_fact.py``). A pair labelled ``same`` that is merged is
correct; a pair labelled ``different`` that is merged is a wrong merge (a fact lost from
recall). Precision is correct merges over all merges, recall correct merges over all
``same`` pairs. The figures of cosine alone (the dreamer before the rule) are reported
beside them, and so are the ``different`` pairs that cosine alone would have merged: the
ones the rule had to refuse.

The sets live in ``tests/dreamer/data``: ``merge_pairs.jsonl`` (written by
``make_merge_pairs.py``; the rule was tuned on it) and ``merge_pairs_heldout.jsonl``
(written by hand before the rule existed, from other templates; never tuned on).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trusty_memory.workers.store.same_fact import same_fact

if TYPE_CHECKING:
    from trusty_memory.client.sync import Client

DATA = Path(__file__).resolve().parents[1] / "tests" / "dreamer" / "data"
SETS = {"labelled": "merge_pairs.jsonl", "held_out": "merge_pairs_heldout.jsonl"}
THRESHOLD = 0.95

Encode = Callable[[list[str]], np.ndarray]


def daemon_encode(client: Client, batch: int = 128) -> Encode:
    """An ``Encode`` through a running daemon's embedder: the very model the product uses."""

    def encode(texts: list[str]) -> np.ndarray:
        blocks = []
        for start in range(0, len(texts), batch):
            data = client.call("embed", {"texts": texts[start : start + batch]}, timeout=300)
            blocks.append(np.frombuffer(data["vectors"], dtype=np.float32).reshape(-1, data["dim"]))
        return np.vstack(blocks)

    return encode


def load(name: str) -> list[dict]:
    """The pairs of one set: dicts with ``a``, ``b``, ``label`` (same/different), ``kind``."""
    with (DATA / SETS[name]).open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def cosines(pairs: list[dict], encode: Encode) -> list[float]:
    """MiniLM cosine of each pair (vectors are unit length), every text embedded once."""
    texts = list(dict.fromkeys(t for pair in pairs for t in (pair["a"], pair["b"])))
    vectors = dict(zip(texts, encode(texts), strict=True))
    return [float(vectors[pair["a"]] @ vectors[pair["b"]]) for pair in pairs]


def evaluate(pairs: list[dict], sims: list[float], threshold: float = THRESHOLD) -> dict:
    """Precision and recall of the merge decision and of cosine alone, with the errors."""
    rule = [
        bool(s >= threshold and same_fact(p["a"], p["b"]).same)
        for p, s in zip(pairs, sims, strict=True)
    ]
    alone = [s >= threshold for s in sims]
    same = [p["label"] == "same" for p in pairs]
    wrong = [
        {**p, "cosine": round(s, 4)}
        for p, s, merged, ok in zip(pairs, sims, rule, same, strict=True)
        if merged and not ok
    ]
    missed = Counter(
        p["kind"] for p, merged, ok in zip(pairs, rule, same, strict=True) if ok and not merged
    )
    return {
        "pairs": len(pairs),
        "same": sum(same),
        "different": len(pairs) - sum(same),
        **_scores(rule, same),
        "different_above_threshold": sum(a and not ok for a, ok in zip(alone, same, strict=True)),
        "same_above_threshold": sum(a and ok for a, ok in zip(alone, same, strict=True)),
        "cosine_alone": _scores(alone, same),
        "wrong_merges": wrong,
        "missed_by_kind": dict(missed.most_common()),
    }


def _scores(merged: list[bool], same: list[bool]) -> dict:
    correct = sum(m and s for m, s in zip(merged, same, strict=True))
    total = sum(merged)
    return {
        "merged": total,
        "correct": correct,
        "precision": round(correct / total, 4) if total else 1.0,
        "recall": round(correct / max(sum(same), 1), 4),
    }


def run(encode: Encode, threshold: float = THRESHOLD) -> dict[str, dict]:
    """Both sets, scored with ``encode``."""
    out = {}
    for name in SETS:
        pairs = load(name)
        out[name] = evaluate(pairs, cosines(pairs, encode), threshold)
    return out


def summary_line(name: str, r: dict) -> str:
    """One line of figures for a set, as both benchmarks print it."""
    alone = r["cosine_alone"]
    return (
        f"{name}: {r['pairs']} pairs ({r['same']} same, {r['different']} different):"
        f" merged {r['merged']}, precision {r['precision']:.4f}, recall {r['recall']:.4f};"
        f" cosine alone: merged {alone['merged']}, precision {alone['precision']:.4f},"
        f" recall {alone['recall']:.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from trusty_memory.common.logs import setup_logging
    from trusty_memory.workers.embedder.embedding import MiniLMEmbedder

    setup_logging("bench")  # model logs to stderr, never into the JSON
    result = run(MiniLMEmbedder().encode, args.threshold)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, r in result.items():
        print(summary_line(name, r))
        for pair in r["wrong_merges"]:
            print(
                f"    wrong merge ({pair['kind']}, {pair['cosine']}): {pair['a']!r} / {pair['b']!r}"
            )


if __name__ == "__main__":
    main()
