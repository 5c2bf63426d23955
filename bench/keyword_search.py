"""Keyword search (``memory_search``) on the notes sets: does what a person types find the note?

    .venv/bin/python bench/keyword_search.py --home DIR [--sets eng,history] [--out FILE]

Each set's notes are stored once in ``DIR`` through a real daemon, exactly as
``bench/replay.py`` stores them (one palace per set, ``memory_remember`` with ``text``,
``room``, ``tags``, ``created_at`` only; a home ``replay.py`` loaded serves as is). Every
run then opens each palace read-only here (``ReadStore.open_reader``, the palace's read
path) and asks every question of the set as typed, through ``search.search``: the code
a reader worker runs for ``memory_search``, so a change to ``workers/store/search.py`` is
measured without restarting anything.

Per set: hit@1 / hit@5 / hit@20 (the share of questions with a gold note among the first
k drawers), and "answered", the share of questions that return any drawer at all (a
search that requires every word of a question answers few). ``--query`` asks one query of
every set and prints the first hits, to look at a case by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay

from trusty_memory.common.config import load_config
from trusty_memory.common.messages import SearchParams
from trusty_memory.workers.store import search

SETS = tuple(replay.NOTE_SETS)  # eng, eng7, eng99, history, bursts
KS = (1, 5, 20)


def measure(store, questions: list[dict], ids: dict[str, str]) -> dict:
    """hit@k and the share answered over ``questions``; also the p50/p99 of one search."""
    hits = {k: 0 for k in KS}
    answered = 0
    times = []
    for q in questions:
        t0 = time.perf_counter()
        result = search.search(store, SearchParams(query=q["question"], limit=max(KS)))
        times.append(time.perf_counter() - t0)
        ranked = [ids.get(d.drawer_id, "?") for d in result.drawers]
        answered += bool(ranked)
        for k in KS:
            hits[k] += any(g in ranked[:k] for g in q["gold"])
    n = len(questions)
    times.sort()
    return {
        "n": n,
        **{f"hit{k}": round(100 * hits[k] / n, 1) for k in KS},
        "answered": round(100 * answered / n, 1),
        "p50_ms": round(1000 * times[n // 2], 2),
        "p99_ms": round(1000 * times[min(n - 1, int(n * 0.99))], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--query", default=None, help="one query, its first hits printed")
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise SystemExit(f"--sets: unknown {unknown}; known: {', '.join(SETS)}")
    args.home.mkdir(parents=True, exist_ok=True)
    args.home = args.home.resolve()
    os.environ["TRUSTY_MEMORY_HOME"] = str(args.home)
    replay.load_home(args.home, sets, [])
    settings = load_config().palace
    results = {}
    for name in sets:
        meta = json.loads((args.home / f"{name}.json").read_text())
        store = replay.open_store(args.home, meta["palace"], settings)
        try:
            if args.query is not None:
                found = search.search(store, SearchParams(query=args.query, limit=5))
                for d in found.drawers:
                    print(
                        f"{name} {meta['ids'].get(d.drawer_id, '?')} {d.score:.2f} {d.content[:90]}"
                    )
                continue
            results[name] = measure(store, meta["questions"], meta["ids"])
        finally:
            store.close()
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    if args.out is not None and results:
        out = {
            "benchmark": "keyword search (memory_search) on the notes sets",
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["bench/keyword_search.py", *(argv or sys.argv[1:])]),
            "results": results,
        }
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
