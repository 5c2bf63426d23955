"""Deep recall replayed in this process on every retrieval set: a quick loop for a ranking rule.

    .venv/bin/python bench/replay.py --home DIR [--sets locomo,eng,eng7,eng99,history]
        [--set retrieval.NAME=VALUE ...] [--out FILE]

A rule is judged through the product (``bench/locomo.py``, ``bench/eng_notes.py``); this
is how to find which rules are worth that. The first run stores every set through a real
daemon in ``DIR``, exactly as those two scripts do (LoCoMo one palace per conversation,
written in order; each notes set in one palace, ``text``, ``room``, ``tags``,
``created_at`` only), and keeps the questions' vectors from the daemon's embedder. Every
run then opens the palaces read-only here (``ReadStore.open_reader``, the product's read
path: the same index, SQLite file and ranking code a reader worker runs) and asks every
question as ``memory_recall_deep`` would, so a change to ``workers/`` or a ``--set`` of a
``retrieval`` constant is measured on ~2,800 questions in about a minute. It differs from
the product only in what ranking never reads: no sockets, no L1 (deep recall has none).

Sets: ``locomo`` (../shared/data/locomo10.json, 1,982 questions: turn R@10, strict
session R@10, top-10 sessions R@10 as ``locomo.py`` counts them), ``eng`` (the committed
engineering notes), ``eng7`` / ``eng99`` (the same generator, other seeds) and
``history`` (``history_notes_data.py``: this project's commit messages, questions written
before any rule was judged on them; never to choose a rule with, only to check one):
R@1 / R@5 / R@10, the share of a question's gold notes among the first k.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eng_notes_data
import history_notes_data
import locomo as lm
from locomo_data import LoadReport, load, score

from trusty_memory.client.sync import Client
from trusty_memory.common.config import load_config
from trusty_memory.common.palace_dir import DB_FILE
from trusty_memory.workers.store import ranking as retrieval
from trusty_memory.workers.store import schema as store_schema
from trusty_memory.workers.store.read import ReadStore

NOTE_SETS = {"eng": None, "eng7": 7, "eng99": 99, "history": "history"}
ALL_SETS = ("locomo", *NOTE_SETS)
KS = (1, 5, 10)


# -- loading (once per home) -----------------------------------------------------------------


def note_set(name: str) -> dict:
    seed = NOTE_SETS[name]
    if seed == "history":
        return json.loads(history_notes_data.DEFAULT_OUT.read_text())
    if seed is None:
        return json.loads(eng_notes_data.DEFAULT_OUT.read_text())
    return json.loads(eng_notes_data.dumps(eng_notes_data.generate(seed)))


def load_home(home: Path, sets: list[str], convs) -> None:
    """Store whatever set ``home`` lacks, through a real daemon, and cache query vectors."""
    missing = [s for s in sets if not (home / f"{s}.json").exists()]
    if not missing:
        return
    with lm.Daemon(home) as daemon, Client(daemon.config, autostart=False) as client:
        for name in missing:
            t0 = time.monotonic()
            if name == "locomo":
                args = argparse.Namespace(captions=True, window=0, ordered=True)
                lm.ingest(daemon.config, convs, args)
                questions = [q.question for c in convs for q in c.questions]
                meta: dict = {}
            else:
                data = note_set(name)
                palace = f"notes-{name}"
                client.palace_create(palace, description=name)
                ids = {}
                for d in data["drawers"]:
                    params = {k: d[k] for k in ("text", "room", "tags", "created_at")}
                    ids[client.call("memory_remember", params, palace=palace)["drawer_id"]] = d[
                        "id"
                    ]
                questions = [q["question"] for q in data["questions"]]
                meta = {"palace": palace, "ids": ids, "questions": data["questions"]}
            np.save(home / f"{name}-queries.npy", lm.embed(client, questions))
            (home / f"{name}.json").write_text(json.dumps(meta))
            print(f"loaded {name} in {time.monotonic() - t0:.0f} s", file=sys.stderr)


# -- replay ----------------------------------------------------------------------------------


def open_store(home: Path, palace: str, settings) -> ReadStore:
    """The palace read-only, after its writer's migrations (as a writer starting first
    would run them on a home loaded by older code)."""
    palace_dir = home / "palaces" / palace
    store_schema.connect(palace_dir / DB_FILE).close()
    return ReadStore.open_reader(palace_dir, palace, settings)


def replay_locomo(home: Path, convs, settings) -> dict:
    vectors = iter(np.load(home / "locomo-queries.npy"))
    by_id = {lm.drawer_id(t): t.dia_id for c in convs for t in c.turns}
    totals: dict[str, float] = {}
    cats: dict[str, list[float]] = {}
    n = 0
    for conv in convs:
        store = open_store(home, lm.palace_name(conv), settings)
        for q in conv.questions:
            vec = next(vectors)
            ranked = [by_id[h.drawer_id] for h in store.recall(q.question, vec, 10, deep=True)]
            pooled = [by_id[h.drawer_id] for h in store.recall(q.question, vec, 50, deep=True)]
            s = score(q, ranked, pooled)
            for k in ("turn_r10", "session_r10", "sessions_r10"):
                totals[k] = totals.get(k, 0.0) + s[k]
            cats.setdefault(str(q.category), []).append(s["turn_r10"])
            n += 1
        store.close()
    out = {k: round(100 * v / n, 1) for k, v in totals.items()}
    out["turn_r10_by_category"] = {
        c: round(100 * sum(v) / len(v), 1) for c, v in sorted(cats.items())
    }
    return out


def replay_notes(home: Path, name: str, settings) -> dict:
    meta = json.loads((home / f"{name}.json").read_text())
    vectors = np.load(home / f"{name}-queries.npy")
    store = open_store(home, meta["palace"], settings)
    rows: list[tuple[str, dict[int, float]]] = []
    for q, vec in zip(meta["questions"], vectors, strict=True):
        hits = store.recall(q["question"], vec, 10, deep=True)
        ranked = [meta["ids"].get(h.drawer_id, "?") for h in hits]
        gold = q["gold"]
        rows.append(
            (q["category"], {k: sum(g in ranked[:k] for g in gold) / len(gold) for k in KS})
        )
    store.close()

    def mean(group: list[dict[int, float]]) -> list[float]:
        return [round(100 * sum(g[k] for g in group) / len(group), 1) for k in KS]

    return {
        "all": mean([r for _, r in rows]),
        **{c: mean([r for cat, r in rows if cat == c]) for c in sorted({c for c, _ in rows})},
    }


def apply_sets(assignments: list[str]) -> None:
    """``retrieval.NAME=VALUE``: set a ranking constant for this run."""
    for item in assignments:
        target, value = item.split("=", 1)
        module, name = target.split(".", 1)
        if module != "retrieval" or not hasattr(retrieval, name):
            raise SystemExit(f"--set: no constant {target}")
        kind = type(getattr(retrieval, name))
        setattr(retrieval, name, kind(value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=lm.DEFAULT_DATA)
    parser.add_argument("--sets", default=",".join(ALL_SETS))
    parser.add_argument("--set", dest="assign", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in ALL_SETS]
    if unknown:
        raise SystemExit(f"--sets: unknown {unknown}; known: {', '.join(ALL_SETS)}")
    convs = load(json.loads(args.data.read_bytes()), LoadReport()) if "locomo" in sets else []
    args.home.mkdir(parents=True, exist_ok=True)
    args.home = args.home.resolve()
    os.environ["TRUSTY_MEMORY_HOME"] = str(args.home)
    load_home(args.home, sets, convs)
    apply_sets(args.assign)
    settings = load_config().palace
    results = {}
    for name in sets:
        t0 = time.monotonic()
        if name == "locomo":
            results[name] = replay_locomo(args.home, convs, settings)
        else:
            results[name] = replay_notes(args.home, name, settings)
        print(f"{name} ({time.monotonic() - t0:.0f} s): {json.dumps(results[name])}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"set": args.assign, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
