"""The extended tools' costs on one palace, through the Python client (the ops the MCP
tools call), against a real daemon in a throw-away home.

    .venv/bin/python -m bench.extended [--drawers 10000] [--calls 200] [--out FILE]

The palace is loaded with ``palace_import`` and vectors given (random unit vectors: these
ops never rank by vector), so loading costs no model time; ``memory_update`` of a text
does embed, as it must. Measured, one call at a time: ``memory_search`` for a word in a
twelfth of the drawers, for one in all of them, for a question (its words ORed, ranked by
BM25), and for a phrase with a room filter and a
time range; the next page through a cursor; listing the whole palace with cursors, 1,000
at a time; ``drawer_get``; ``memory_update`` (tags only, and a new text); ``kg_history`` of
a subject with 50 facts; ``kg_query`` with ``as_of``; ``palace_stats``.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path

import numpy as np

from bench.harness import TOPICS, running_daemon, sentence, summary
from trusty_memory.client.sync import Client

PALACE = "ext"
DIM = 384


def load(client: Client, n: int) -> list[str]:
    rng = np.random.default_rng(7)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(n)]
    for start in range(0, n, 500):
        batch = []
        for i in range(start, min(n, start + 500)):
            vec = rng.standard_normal(DIM).astype("<f4")
            vec /= np.linalg.norm(vec)
            day = 1 + i * 28 // n
            batch.append(
                {
                    "drawer_id": ids[i],
                    "content": sentence(i),
                    "room": "Backend" if i % 3 else "Planning",
                    "tags": [f"t{i % 5}"],
                    "created_at": f"2026-02-{day:02d}T12:00:00Z",
                    "vector": vec.tobytes(),
                }
            )
        client.call("palace_import", {"drawers": batch}, palace=PALACE, timeout=120)
    return ids


def timed(fn, calls: int) -> dict:
    ms = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn(i)
        ms.append((time.perf_counter() - t0) * 1e3)
    return summary(ms)


def run(drawers: int, calls: int) -> dict:
    out: dict = {"drawers": drawers, "calls": calls}
    with running_daemon() as config, Client(config, autostart=False) as c:
        c.palace_create(PALACE)
        t0 = time.perf_counter()
        ids = load(c, drawers)
        out["load_s"] = round(time.perf_counter() - t0, 2)
        c.search(PALACE, "warm", limit=1)
        word = TOPICS[3].split()[-1]  # "staging": in a twelfth of the drawers
        out["search_word"] = timed(lambda i: c.search(PALACE, word, limit=20), calls)
        # "note" is in every drawer: FTS5 ranks every match before it can return a page.
        out["search_word_in_all"] = timed(lambda i: c.search(PALACE, "note", limit=20), calls)
        # A question as typed: its words ORed (prefixes too), "decided" in every drawer.
        question = "what did we decide about deployment to staging"
        out["search_question"] = timed(lambda i: c.search(PALACE, question, limit=20), calls)
        out["search_phrase_room_time"] = timed(
            lambda i: c.search(PALACE, f'"{TOPICS[5]}"', room="Backend",
                               since="2026-02-10", until="2026-02-20", limit=20),
            calls,
        )  # fmt: skip
        first = c.search(PALACE, word, limit=20)
        out["search_next_page"] = timed(
            lambda i: c.search(PALACE, word, limit=20, cursor=first.next_cursor), calls
        )
        t0 = time.perf_counter()
        pages, seen, cursor = 0, 0, None
        while True:
            page = c.search(PALACE, limit=1000, cursor=cursor)
            pages, seen = pages + 1, seen + len(page.drawers)
            if (cursor := page.next_cursor) is None:
                break
        out["list_all"] = {"pages": pages, "drawers": seen,
                           "ms": round((time.perf_counter() - t0) * 1e3, 1)}  # fmt: skip
        out["get"] = timed(lambda i: c.get(PALACE, ids[i * 37 % drawers]), calls)
        out["update_tags"] = timed(
            lambda i: c.update(PALACE, ids[i * 41 % drawers], tags=[f"u{i}"]), calls
        )
        out["update_text"] = timed(
            lambda i: c.update(PALACE, ids[i * 43 % drawers], text=f"Corrected note {i}."),
            min(calls, 50),
        )
        for i in range(50):
            c.kg_assert(PALACE, "api", "version", f"1.{i}")
        out["kg_history_50"] = timed(lambda i: c.kg_history(PALACE, "api"), calls)
        out["kg_query_as_of"] = timed(
            lambda i: c.kg_query(PALACE, "api", as_of="2026-01-01T00:00:00Z"), calls
        )
        out["stats"] = timed(lambda i: c.palace_stats(PALACE), calls)
        out["archived_after"] = c.palace_stats(PALACE).archived_count
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.extended", description=__doc__.split("\n")[0])
    parser.add_argument("--drawers", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = run(args.drawers, args.calls)
    out = args.out or Path(f"bench/results/extended-{args.drawers}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in result.items():
        print(f"{key:26} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
