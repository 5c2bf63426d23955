"""Retrieval on the engineering-notes set, through the product.

    .venv/bin/python bench/eng_notes.py [--data bench/data/eng_notes.json]
        [--context-vectors on|off] [--out bench/out/eng_notes.json] [--ranked FILE]

A real daemon in a throw-away home, the real model; one palace; every note stored with
``memory_remember`` and only what an agent sends (``text``, ``room``, ``tags``,
``created_at``), one after another as one agent writes them; then every question through
``memory_recall`` and ``memory_recall_deep`` (top_k 10). R@k is the share of a question's
gold drawers among the first k results, averaged overall and per category. The set and its
generator: ``bench/eng_notes_data.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eng_notes_data import DEFAULT_OUT as DEFAULT_DATA
from locomo import Daemon

from trusty_memory.client.sync import Client
from trusty_memory.common.config import load_config

REPO = Path(__file__).resolve().parent.parent
PALACE = "eng-notes"
METHODS = ("memory_recall", "memory_recall_deep")
KS = (1, 5, 10)


def recall_at(gold: list[str], ranked: list[str], k: int) -> float:
    return sum(1 for g in gold if g in ranked[:k]) / len(gold)


def summarise(rows: list[tuple[str, dict[int, float]]]) -> dict:
    """``(category, {k: recall})`` per question -> % overall and per category."""

    def mean(group: list[dict[int, float]]) -> dict:
        return {"n": len(group), **{f"r{k}": round(100 * sum(g[k] for g in group) / len(group), 1)
                                    for k in KS}}  # fmt: skip

    cats = sorted({c for c, _ in rows})
    return {
        "overall": mean([r for _, r in rows]),
        "by_category": {c: mean([r for cat, r in rows if cat == c]) for c in cats},
    }


def run(data: dict, config, ranked_out: Path | None = None) -> tuple[dict, dict]:
    """Store the notes, ask the questions; returns (results per method, timings).
    ``ranked_out``: also write each question's top 10 note ids there (JSON lines), to
    compare two runs question by question."""
    ids: dict[str, str] = {}  # product drawer id -> note id
    t0 = time.monotonic()
    with Client(config, autostart=False) as client:
        client.palace_create(PALACE, description="engineering notes")
        for d in data["drawers"]:
            params = {k: d[k] for k in ("text", "room", "tags", "created_at")}
            stored = client.call("memory_remember", params, palace=PALACE)
            ids[stored["drawer_id"]] = d["id"]
        ingest_s = time.monotonic() - t0
        results = {}
        ranked_lines = []
        for method in METHODS:
            rows = []
            for q in data["questions"]:
                hits = client.call(method, {"query": q["question"], "top_k": 10}, palace=PALACE)
                ranked = [ids.get(h["drawer_id"], "?") for h in hits["results"]]
                rows.append((q["category"], {k: recall_at(q["gold"], ranked, k) for k in KS}))
                ranked_lines.append(json.dumps({"method": method, "id": q.get("id"),
                                                "gold": q["gold"], "ranked": ranked}))  # fmt: skip
            results[method] = summarise(rows)
    if ranked_out is not None:
        ranked_out.write_text("\n".join(ranked_lines) + "\n")
    return results, {"drawers": len(ids), "ingest_s": round(ingest_s, 1)}


def markdown(results: dict) -> str:
    lines = ["| method | category | n | R@1 | R@5 | R@10 |", "|---|---|---:|---:|---:|---:|"]
    for method, res in results.items():
        for cat, m in [("**all**", res["overall"]), *res["by_category"].items()]:
            lines.append(f"| {method} | {cat} | {m['n']} | {m['r1']} | {m['r5']} | {m['r10']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "eng_notes.json")
    parser.add_argument("--context-vectors", choices=("on", "off"), default=None)
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    parser.add_argument("--ranked", type=Path, default=None, help="each question's top 10")
    args = parser.parse_args(argv)
    data = json.loads(args.data.read_text())
    if args.limit:
        data["questions"] = data["questions"][: args.limit]
    if args.context_vectors is not None:
        os.environ["TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS"] = (
            "1" if args.context_vectors == "on" else "0"
        )
    home = Path(tempfile.mkdtemp(prefix="tme-", dir="/tmp"))
    try:
        with Daemon(home) as daemon:
            results, timings = run(data, daemon.config, args.ranked)
            context_vectors = load_config().palace.context_vectors
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = {
        "benchmark": "engineering notes (bench/eng_notes_data.py)",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["bench/eng_notes.py", *(argv if argv is not None else sys.argv[1:])]),
        "questions": len(data["questions"]),
        "context_vectors": context_vectors,
        **timings,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"{timings['drawers']} drawers, {len(data['questions'])} questions, "
          f"context_vectors={context_vectors}")  # fmt: skip
    print(markdown(results))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
