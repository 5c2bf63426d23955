"""Dreamer benchmark: a full pass over N drawers with 5% planted near-duplicates.

Reports the pass time, the merge's precision and recall against the planted pairs, and
``memory_recall`` p99 while the pass runs vs idle, as a ratio from one run (one client
recalling in a loop during the pass; the idle figure is half measured before the pass and
half after, so a machine whose load drifts skews both sides alike).

    .venv/bin/python -m bench.dream               # 10,000 drawers + 500 near-duplicates
    .venv/bin/python -m bench.dream --drawers 2000 --json

The corpus: sentence ``i`` draws each of five word slots from a list of its own, the list
lengths pairwise coprime, so two sentences share at most three slots and no two base
sentences are near-duplicates of each other. 5% of them get a planted twin made by one of
a few light rewrites (case, punctuation, a filler word, a prefix); some rewrites land
below the 0.95 threshold, and two of them add a word ("the old printer", "over in
Berlin") that the same-fact rule refuses by design (an added word may be an added fact):
recall counts both as misses. A merge counts as correct when it joins a planted pair;
precision is correct merges over all merges.

Beside them, the merge decision (cosine >= the threshold AND ``same_fact``) on the
labelled pairs of ``tests/dreamer/data``, embedded by the same daemon: precision and
recall on the set the rule was tuned on and on the held-out set (``bench/merge_pairs.py``).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import uuid

from bench import merge_pairs
from bench.harness import pct, running_daemon, summary
from trusty_memory.client.sync import Client
from trusty_memory.dreamer.runner import DreamPass

PEOPLE = [
    "Alice",
    "Bob",
    "Carol",
    "Dmitri",
    "Erin",
    "Farah",
    "Gustav",
    "Hana",
    "Ivan",
    "Julia",
    "Kenji",
    "Lena",
    "Marco",
    "Nadia",
    "Omar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tara",
    "Umar",
    "Vera",
    "Wim",
    "Xena",
    "Yusuf",
    "Zoe",
    "Anton",
    "Bea",
    "Chen",
]  # 29
ACTIONS = [
    "repaired",
    "painted",
    "archived",
    "benchmarked",
    "deployed",
    "rewrote",
    "audited",
    "migrated",
    "documented",
    "profiled",
    "refactored",
    "tested",
    "packaged",
    "monitored",
    "translated",
    "simplified",
    "encrypted",
    "indexed",
    "cached",
    "reviewed",
    "sketched",
    "measured",
    "replaced",
]  # 23
THINGS = [
    "printer",
    "fence",
    "invoice",
    "parser",
    "dashboard",
    "firewall",
    "kernel",
    "playlist",
    "garden",
    "telescope",
    "compiler",
    "budget",
    "recipe",
    "bicycle",
    "thermostat",
    "newsletter",
    "database",
    "spreadsheet",
    "drone",
]  # 19
PLACES = [
    "Berlin",
    "Tokyo",
    "Lagos",
    "Lima",
    "Oslo",
    "Perth",
    "Quito",
    "Seoul",
    "Tunis",
    "Dakar",
    "Hanoi",
    "Porto",
    "Riga",
    "Cairo",
    "Delhi",
    "Sofia",
    "Havana",
]  # 17
WHEN = """at dawn|before lunch|after the outage|during the audit|on Friday night|in the spring
|last winter|before the launch|after the offsite|during the storm|on a Sunday|at midnight
|before the review""".replace("\n", "").split("|")  # 13
REWRITES = [
    lambda s: s.lower().rstrip("."),
    lambda s: s.rstrip(".") + "!",
    lambda s: "Note: " + s,
    lambda s: s.replace(" the ", " the old ", 1),
    lambda s: s.replace(" in ", " over in ", 1),
]


def sentence(i: int) -> str:
    return (
        f"{PEOPLE[i % 29]} {ACTIONS[i % 23]} the {THINGS[i % 19]} in {PLACES[i % 17]}"
        f" {WHEN[i % 13].strip()}."
    )


def corpus(n: int, dup_fraction: float, seed: int = 7) -> tuple[list[dict], set[frozenset]]:
    """Drawers to import and the planted pairs (as frozensets of drawer ids)."""
    rng = random.Random(seed)
    drawers = [{"drawer_id": str(uuid.uuid4()), "content": sentence(i)} for i in range(n)]
    planted = set()
    for k, base in enumerate(rng.sample(drawers, int(n * dup_fraction))):
        twin = {
            "drawer_id": str(uuid.uuid4()),
            "content": REWRITES[k % len(REWRITES)](base["content"]),
        }
        drawers.append(twin)
        planted.add(frozenset((base["drawer_id"], twin["drawer_id"])))
    rng.shuffle(drawers)
    return drawers, planted


def query(phase: int, i: int) -> str:
    """A query text of its own per phase, none in the corpus: every recall embeds (the
    embedder caches by text, so reusing queries across phases would compare cache hits
    against misses)."""
    return sentence(1_000_000 * (phase + 1) + i)


def recall_latencies(client: Client, palace: str, stop: threading.Event, out: list[float]):
    i = 0
    while not stop.is_set():
        t0 = time.perf_counter()
        client.recall(palace, query(1, i), top_k=10)
        out.append((time.perf_counter() - t0) * 1000)
        i += 1


def idle_latencies(client: Client, n: int, phase: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        client.recall("dream", query(phase, i), top_k=10)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def merged_pairs(client: Client, palace: str) -> list[frozenset]:
    pairs, after = [], 0
    while after is not None:
        page = client.call(
            "archive_list", {"after": after, "limit": 1000, "reason": "merged"}, palace=palace
        )
        pairs += [frozenset((d["drawer_id"], d["merged_into"])) for d in page["drawers"]]
        after = page["next_after"]
    return pairs


def run(n: int, dup_fraction: float, idle_queries: int) -> dict:
    env = {"TRUSTY_MEMORY_DREAMER_ENABLED": "0"}  # this run dreams explicitly
    with running_daemon(env) as config:
        client = Client(config, autostart=False)
        client.palace_create("dream")
        drawers, planted = corpus(n, dup_fraction)
        t0 = time.monotonic()
        for start in range(0, len(drawers), 500):
            client.call(
                "palace_import",
                {"drawers": drawers[start : start + 500]},
                palace="dream",
                timeout=300,
            )
        import_s = time.monotonic() - t0
        for i in range(20):  # warm up
            client.recall("dream", sentence(i))
        idle = idle_latencies(client, idle_queries // 2, 0)  # half before the pass, half after

        during: list[float] = []
        stop = threading.Event()
        reader = Client(config, autostart=False)
        thread = threading.Thread(target=recall_latencies, args=(reader, "dream", stop, during))
        thread.start()
        with Client(config, autostart=False) as dreamer_client:
            report = DreamPass(dreamer_client, "dream", config.dreamer).run()
        stop.set()
        thread.join()
        reader.close()

        idle += idle_latencies(client, idle_queries - idle_queries // 2, 2)
        merges = merged_pairs(client, "dream")
        correct = sum(1 for pair in merges if pair in planted)
        info = client.palace_info("dream")
        threshold = config.dreamer.duplicate_threshold
        labelled = merge_pairs.run(merge_pairs.daemon_encode(client), threshold)
        client.close()
    return {
        "drawers": len(drawers),
        "planted_pairs": len(planted),
        "import_s": round(import_s, 1),
        "pass_s": round(report.duration_s, 2),
        "duplicate_pairs_found": report.duplicate_pairs,
        "merged": report.merged,
        "precision": round(correct / max(len(merges), 1), 4),
        "recall": round(correct / max(len(planted), 1), 4),
        "decayed": report.decayed,
        "archived": report.archived,
        "drawers_after": info.drawer_count,
        "index_after": info.index_count,
        "recall_idle": summary(idle),
        "recall_during_pass": summary(during),
        "p99_ratio_during_vs_idle": round(pct(during, 0.99) / pct(idle, 0.99), 2),
        "slowest_batch_ms": {k: round(v, 1) for k, v in report.slowest_ms.items()},
        "distinct_pairs_kept": report.distinct_pairs,
        "merge_decision_labelled_pairs": labelled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drawers", type=int, default=10_000)
    parser.add_argument("--dup-fraction", type=float, default=0.05)
    parser.add_argument("--idle-queries", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.drawers, args.dup_fraction, args.idle_queries)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    labelled = result.pop("merge_decision_labelled_pairs")
    for key, value in result.items():
        print(f"{key:28s} {value}")
    print("merge decision on labelled pairs (cosine >= threshold AND same_fact):")
    for name, r in labelled.items():
        print("  " + merge_pairs.summary_line(name, r))
        for pair in r["wrong_merges"]:
            print(f"    wrong merge ({pair['kind']}): {pair['a']!r} / {pair['b']!r}")


if __name__ == "__main__":
    main()
