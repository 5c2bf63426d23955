"""Deep recall replayed in this process on every retrieval set: a quick loop for a ranking rule.

    .venv/bin/python bench/replay.py --home DIR
        [--sets locomo,eng,eng7,eng99,history,bursts,paraphrase,reworded]
        [--variants after,before,off] [--set retrieval.NAME=VALUE ...] [--out FILE]
        [--table] [--time retrieval.NAME=A,B]

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

Sets: ``locomo`` (../shared/data/locomo10.json, 1,982 questions: turn R@1 / R@5 / R@10,
strict session R@10, top-10 sessions R@10 as ``locomo.py`` counts them), ``eng`` (the
committed engineering notes), ``eng7`` / ``eng99`` (the same generator, other seeds),
``history`` (``history_notes_data.py``: this project's commit messages), ``bursts``
(``burst_notes_data.py``: notes written in bursts from public changelogs, decision records
and incident write-ups), ``paraphrase`` (``paraphrase_notes_data.py``: standalone notes
of five projects, asked about without their rare words) and ``reworded`` (the same kind,
six other projects, another hand); the last four had their
questions written before any rule was judged on them, and are never to choose a rule with,
only to check one: R@1 / R@5 / R@10, the share of a question's gold notes among the first
k. Every set is asked twice, as
``memory_recall`` (``plain``) and as ``memory_recall_deep`` (``deep``).

Variants (``--variants``), each a copy of the palaces the daemon wrote, read here:

- ``after``: as this code writes them (a drawer borrows its episode predecessor's context
  only when it continues it: ``workers/store/relatedness.py``);
- ``before``: as the code before that rule wrote them: every drawer in an episode (same
  room, within ``retrieval.EPISODE_WINDOW_S`` of its predecessor) given the vector mix and
  the predecessor's words by the same functions (``context.mix``, ``context.words``),
  whatever it says (the figures of the product as it was, to the digit: LoCoMo 77.2 /
  90.3 / 94.3, engineering notes 54.0 / 89.0 / 90.5);
- ``off``: ``[palace] context_vectors = false``: every drawer's own vector, no context
  words. Episode smoothing reads room and time alone, in every variant.

``--table`` prints the markdown table of ``BENCHMARKS.md`` (every set, plain and deep per
variant, R@1 / R@5 / R@10). ``--out`` writes ``results`` (each set's deep recall in the
first variant) and ``variants`` (every method and variant).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import burst_notes_data
import eng_notes_data
import history_notes_data
import locomo as lm
import paraphrase_notes_data
from locomo_data import LoadReport, load, score, turn_recall

from trusty_memory.client.sync import Client
from trusty_memory.common.config import load_config
from trusty_memory.common.palace_dir import DB_FILE
from trusty_memory.workers.store import context
from trusty_memory.workers.store import ranking as retrieval
from trusty_memory.workers.store import schema as store_schema
from trusty_memory.workers.store.index import prune_snapshots
from trusty_memory.workers.store.read import ReadStore

NOTE_SETS = {"eng": None, "eng7": 7, "eng99": 99, "history": "history", "bursts": "bursts",
             "paraphrase": "paraphrase", "reworded": "reworded"}  # fmt: skip
ALL_SETS = ("locomo", *NOTE_SETS)
VARIANTS = ("after", "before", "off")
KS = (1, 5, 10)


# -- loading (once per home) -----------------------------------------------------------------


def note_set(name: str) -> dict:
    seed = NOTE_SETS[name]
    if seed == "history":
        return json.loads(history_notes_data.DEFAULT_OUT.read_text())
    if seed == "bursts":
        return json.loads(burst_notes_data.DEFAULT_OUT.read_text())
    if seed in paraphrase_notes_data.SETS:
        return json.loads(paraphrase_notes_data.SETS[seed].out.read_text())
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


def open_store(home: Path, palace: str, settings, variant: str = "after") -> ReadStore:
    """The palace read-only, after its writer's migrations (as a writer starting first
    would run them on a home loaded by older code), as ``variant`` has it (``rewrite``)."""
    palace_dir = home / "palaces" / palace
    store_schema.connect(palace_dir / DB_FILE).close()
    if variant != "after":
        palace_dir = rewrite(palace_dir, home / "variants" / variant / palace, variant)
    return ReadStore.open_reader(palace_dir, palace, settings)


def copy_palace(source: Path, target: Path) -> None:
    """``target`` made afresh as a copy of the palace at ``source`` (its SQLite file through
    SQLite's backup, so a palace in use copies whole); the index is left to be rebuilt."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in ("palace.json", "identity.txt"):
        if (source / name).exists():
            shutil.copy2(source / name, target / name)
    src = sqlite3.connect(f"file:{source / DB_FILE}?mode=ro", uri=True)
    dst = sqlite3.connect(target / DB_FILE)
    src.backup(dst)
    src.close()
    dst.close()


def rewrite(source: Path, target: Path, variant: str) -> Path:
    """A copy of the palace at ``source`` as the ``before`` or ``off`` variant wrote it
    (see the module doc), made once; its index is rebuilt from SQLite when it is opened."""
    if (target / DB_FILE).exists():
        return target
    copy_palace(source, target)
    db = store_schema.connect(target / DB_FILE)
    rows = db.execute(
        "SELECT label, room, julianday(created_at) * 86400.0, content,"
        " coalesce(own_vector, vector) FROM drawers ORDER BY label"
    ).fetchall()
    updates = []
    before = None
    for label, room, seconds, text, own in rows:
        vector, own_vector, words = own, None, None
        if (
            variant == "before"
            and before is not None
            and before[0] == room
            and abs(seconds - before[1]) <= retrieval.EPISODE_WINDOW_S
        ):
            mine = np.frombuffer(own, dtype=np.float32)
            theirs = np.frombuffer(before[3], dtype=np.float32)
            vector = context.mix(mine, theirs).astype("<f4").tobytes()
            own_vector, words = own, context.words(before[2], text)
        updates.append((vector, own_vector, words, label))
        before = (room, seconds, text, own)
    with db.atomic():
        db.conn.executemany(
            "UPDATE drawers SET vector = ?, own_vector = ?, context = ? WHERE label = ?",
            updates,
        )
    db.close()
    prune_snapshots(target, keep_seq=-1)
    return target


def replay_locomo(home: Path, convs, settings, variant: str = "after", deep: bool = True) -> dict:
    vectors = iter(np.load(home / "locomo-queries.npy"))
    by_id = {lm.drawer_id(t): t.dia_id for c in convs for t in c.turns}
    totals: dict[str, float] = {}
    cats: dict[str, list[float]] = {}
    n = 0
    for conv in convs:
        store = open_store(home, lm.palace_name(conv), settings, variant)
        for q in conv.questions:
            vec = next(vectors)
            ranked = [by_id[h.drawer_id] for h in store.recall(q.question, vec, 10, deep=deep)]
            pooled = [by_id[h.drawer_id] for h in store.recall(q.question, vec, 50, deep=deep)]
            s = score(q, ranked, pooled)
            s["turn_r1"] = turn_recall(q.gold, ranked, 1)
            for k in ("turn_r1", "turn_r5", "turn_r10", "session_r10", "sessions_r10"):
                totals[k] = totals.get(k, 0.0) + s[k]
            cats.setdefault(str(q.category), []).append(s["turn_r10"])
            n += 1
        store.close()
    out = {k: round(100 * v / n, 1) for k, v in totals.items()}
    out["turn_r10_by_category"] = {
        c: round(100 * sum(v) / len(v), 1) for c, v in sorted(cats.items())
    }
    return out


def replay_notes(
    home: Path, name: str, settings, variant: str = "after", deep: bool = True
) -> dict:
    meta = json.loads((home / f"{name}.json").read_text())
    vectors = np.load(home / f"{name}-queries.npy")
    store = open_store(home, meta["palace"], settings, variant)
    rows: list[tuple[str, dict[int, float]]] = []
    for q, vec in zip(meta["questions"], vectors, strict=True):
        hits = store.recall(q["question"], vec, 10, deep=deep)
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


def figures(result: dict) -> list[float]:
    """R@1 / R@5 / R@10 of a set's result (LoCoMo: of turns)."""
    if "all" in result:
        return result["all"]
    return [result["turn_r1"], result["turn_r5"], result["turn_r10"]]


def table(results: dict) -> str:
    """The markdown table of ``BENCHMARKS.md``: every set, plain and deep per variant."""
    columns = [("plain", "after", "`memory_recall`"),
               ("plain", "before", "`memory_recall` before"),
               ("deep", "before", "deep before"),
               ("deep", "after", "**deep after**"),
               ("deep", "off", "deep, context off")]  # fmt: skip
    present = [c for c in columns if f"{c[1]}/{c[0]}" in results]
    lines = ["| set | " + " | ".join(c[2] for c in present) + " |",
             "|---|" + "---:|" * len(present)]  # fmt: skip
    sets = list(next(iter(results.values())))
    for name in sets:
        cells = []
        for method, variant, _ in present:
            result = results[f"{variant}/{method}"][name]
            cell = " / ".join(f"{x:.1f}" for x in figures(result))
            if name == "locomo":
                cell += f" (session {result['session_r10']:.1f})"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def time_rule(home: Path, sets: list[str], settings, assignment: str, rounds: int = 3) -> None:
    """Deep recall's time in this process with a ranking constant at each of two values
    (``retrieval.NAME=A,B``, each set as ``--set`` sets it), alternating question by question
    (the order flipped each round, so drift and warm-up fall on both), over the notes sets
    of ``sets``: p50 / p99 per value."""
    target, values = assignment.split("=", 1)
    pair = [f"{target}={value}" for value in values.split(",")]
    times: dict[str, list[float]] = {setting: [] for setting in pair}
    for set_name in (s for s in sets if s != "locomo"):
        meta = json.loads((home / f"{set_name}.json").read_text())
        store = open_store(home, meta["palace"], settings)
        asked = list(zip(meta["questions"], np.load(home / f"{set_name}-queries.npy"), strict=True))
        for q, vec in asked[:20]:  # warm the caches
            store.recall(q["question"], vec, 10, deep=True, count=False)
        for r in range(rounds):
            for q, vec in asked:
                for setting in pair if r % 2 == 0 else pair[::-1]:
                    apply_sets([setting])
                    t0 = time.perf_counter()
                    store.recall(q["question"], vec, 10, deep=True, count=False)
                    times[setting].append((time.perf_counter() - t0) * 1000)
        store.close()
    for setting, ms in times.items():
        ms.sort()
        print(f"{setting.removeprefix('retrieval.')}: {len(ms)} deep recalls, "
              f"p50 {ms[len(ms) // 2]:.3f} ms, p99 {ms[int(len(ms) * 0.99)]:.3f} ms")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=lm.DEFAULT_DATA)
    parser.add_argument("--sets", default=",".join(ALL_SETS))
    parser.add_argument("--variants", default="after")
    parser.add_argument("--set", dest="assign", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", action="store_true", help="also print the markdown table")
    parser.add_argument(
        "--time", metavar="retrieval.NAME=A,B", help="only time deep recall at A and at B"
    )
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in ALL_SETS]
    if unknown:
        raise SystemExit(f"--sets: unknown {unknown}; known: {', '.join(ALL_SETS)}")
    variants = [v for v in args.variants.split(",") if v]
    if any(v not in VARIANTS for v in variants):
        raise SystemExit(f"--variants: known: {', '.join(VARIANTS)}")
    convs = load(json.loads(args.data.read_bytes()), LoadReport()) if "locomo" in sets else []
    args.home.mkdir(parents=True, exist_ok=True)
    args.home = args.home.resolve()
    os.environ["TRUSTY_MEMORY_HOME"] = str(args.home)
    load_home(args.home, sets, convs)
    apply_sets(args.assign)
    base = load_config().palace
    if args.time:
        time_rule(args.home, sets, dataclasses.replace(base, context_vectors=True), args.time)
        return 0
    results: dict[str, dict] = {}
    for variant in variants:
        settings = dataclasses.replace(base, context_vectors=variant != "off")
        for method in ("plain", "deep"):
            key = f"{variant}/{method}"
            results[key] = {}
            for name in sets:
                t0 = time.monotonic()
                deep = method == "deep"
                if name == "locomo":
                    out = replay_locomo(args.home, convs, settings, variant, deep)
                else:
                    out = replay_notes(args.home, name, settings, variant, deep)
                results[key][name] = out
                print(f"{key} {name} ({time.monotonic() - t0:.0f} s): {json.dumps(out)}",
                      flush=True)  # fmt: skip
    if args.out is not None:
        main_key = f"{variants[0]}/deep"  # "results": deep recall as the first variant has it
        out = {"set": args.assign, "results": results[main_key], "variants": results}
        args.out.write_text(json.dumps(out, indent=1))
    if args.table:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
