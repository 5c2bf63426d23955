"""Micro-benchmark of the palace store alone (no embedder, no sockets).

Fills a palace with N drawers of random unit vectors (hnswlib's worst case: real sentence
embeddings cluster and search faster), then times ``remember_batch`` throughput and the
store time of ``recall``, ``recall(deep)`` and filtered recalls. Run::

    .venv/bin/python bench/store_micro.py [--drawers 10000] [--queries 500]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import structlog

from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.messages import RememberParams
from trusty_memory.workers.store.write import PalaceStore

DIM = 384
WORDS = [
    "auth",
    "token",
    "cache",
    "deploy",
    "schema",
    "index",
    "query",
    "worker",
    "broker",
    "socket",
    "retry",
    "palace",
]


def word(i: int) -> str:
    return WORDS[i % len(WORDS)]


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p50 = statistics.median(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"p50 {p50:7.3f} ms   p99 {p99:7.3f} ms"


def timed(fn, args_list) -> list[float]:
    out = []
    for args in args_list:
        t = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drawers", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rng = np.random.default_rng(7)
    settings = PalaceSettings()
    with tempfile.TemporaryDirectory() as tmp:
        store = PalaceStore.open(Path(tmp) / "bench", "bench", settings)
        vectors = unit_rows(rng, args.drawers)
        rooms = ["Backend", "Frontend", "Testing", "Planning"]
        t0 = time.perf_counter()
        batch_times = []
        for start in range(0, args.drawers, args.batch):
            items = [
                (
                    RememberParams(
                        text=f"drawer {i} about {word(i)} {word(i * 7)}",
                        room=rooms[i % 4],
                        tags=[f"t{i % 50}"] + (["rare"] if i % 1000 == 0 else []),
                        importance=float(rng.random()),
                    ),
                    vectors[i],
                )
                for i in range(start, min(start + args.batch, args.drawers))
            ]
            t = time.perf_counter()
            store.remember_batch(items)
            batch_times.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        print(
            f"drawers {args.drawers}, dim {DIM}, M {settings.hnsw_m}, "
            f"ef_construction {settings.ef_construction}, ef_search {settings.ef_search}"
        )
        print(
            f"remember_batch x{args.batch}: {args.drawers / total:8.0f} drawers/s overall "
            f"(incl. snapshots every {settings.index_save_every} changes); "
            f"per batch {percentiles(batch_times)}"
        )

        queries = [
            (f"{WORDS[i % len(WORDS)]} question", q)
            for i, q in enumerate(unit_rows(rng, args.queries))
        ]
        cases = {
            "recall top_k=10": lambda t, q: store.recall(t, q, 10),
            "recall deep top_k=10": lambda t, q: store.recall(t, q, 10, deep=True),
            "recall room (25%)": lambda t, q: store.recall(t, q, 10, room="Backend"),
            "recall tag (2%, exact scan)": lambda t, q: store.recall(t, q, 10, tag="t3"),
            "recall tag (0.1%, exact scan)": lambda t, q: store.recall(t, q, 10, tag="rare"),
        }
        for name, fn in cases.items():
            timed(fn, queries[:20])  # warm up
            print(f"{name:32s} {percentiles(timed(fn, queries))}")

        t = time.perf_counter()
        store.close()
        print(f"close (flush + snapshot): {(time.perf_counter() - t) * 1000:.0f} ms")
        t = time.perf_counter()
        PalaceStore.open(Path(tmp) / "bench", "bench", settings).close()
        print(f"reopen from snapshot: {(time.perf_counter() - t) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
