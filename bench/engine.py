"""Engine benchmarks through the Python client, against a real daemon in a temp home.

    .venv/bin/python -m bench.engine [--drawers 10000] [--out bench/out/engine.json]

Measures, in one run (this machine is noisy: compare figures from the same run):
- the round trip of a ``noop`` through broker -> palace worker -> back;
- ``memory_remember`` and ``memory_recall`` latency p50/p99 with the palace at N drawers;
- ``memory_remember`` throughput with 1 client and with 16 concurrent clients (the ratio
  shows the cross-request batching in the palace worker and the embedder);
- RSS (and PSS) of the daemon + embedder pool + 10 idle palace workers.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from bench.harness import (
    TOPICS,
    fill,
    pss_mb,
    rss_mb,
    running_daemon,
    sentence,
    summary,
    worker_pids,
)
from trusty_memory.client.sync import Client


def throughput(config, palace: str, clients: int, seconds: float) -> float:
    """Remembers per second with ``clients`` threads, each with its own connection."""
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def work(k: int) -> None:
        with Client(config, autostart=False) as c:
            i = 0
            while time.monotonic() < stop:
                c.remember(palace, f"throughput client {k} note {i}: {sentence(k * 100000 + i)}")
                counts[k] += 1
                i += 1

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def timed(fn, samples: int) -> dict:
    ms = []
    for i in range(samples):
        t = time.perf_counter()
        fn(i)
        ms.append((time.perf_counter() - t) * 1000)
    return summary(ms)


def memory(c: Client) -> dict:
    """RSS/PSS of the daemon, the embedders and the workers of the idle palaces."""
    status = c.status()
    groups = {
        "daemon": [status["pid"]],
        "embedders": worker_pids(status, "embedder"),
        "idle_palaces": worker_pids(status, "palace:idle", prefix=True),
    }
    out = {}
    for name, pids in groups.items():
        out[name] = {
            "processes": len(pids),
            "rss_mb": round(sum(rss_mb(p) for p in pids), 1),
            "pss_mb": round(sum(pss_mb(p) for p in pids), 1),
        }
    out["total_rss_mb"] = round(sum(g["rss_mb"] for g in out.values()), 1)
    out["total_pss_mb"] = round(sum(g["pss_mb"] for g in out.values() if isinstance(g, dict)), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drawers", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", default="bench/out/engine.json")
    args = parser.parse_args()

    results: dict = {"drawers": args.drawers}
    with running_daemon() as config, Client(config, autostart=False) as c:
        c.palace_create("bench")
        c.remember("bench", "warm-up")
        results["fill_per_s_16_clients"] = round(fill(config, "bench", args.drawers), 1)
        results["noop_round_trip"] = timed(lambda i: c.call("noop", palace="bench"), 2000)
        results["remember"] = timed(
            lambda i: c.remember("bench", f"latency probe {i}: {sentence(i + 7)}"), args.samples
        )
        results["recall"] = timed(
            lambda i: c.recall("bench", f"what did we decide about {TOPICS[i % 12]} {i}?"),
            args.samples,
        )
        results["recall_deep"] = timed(
            lambda i: c.recall("bench", f"item {i} {TOPICS[i % 12]}", deep=True), args.samples
        )
        c.palace_create("tput")
        c.remember("tput", "warm-up")
        one = throughput(config, "tput", 1, args.seconds)
        sixteen = throughput(config, "tput", 16, args.seconds)
        results["remember_per_s_1_client"] = round(one, 1)
        results["remember_per_s_16_clients"] = round(sixteen, 1)
        results["throughput_ratio_16_vs_1"] = round(sixteen / one, 2)
        for k in range(10):
            c.palace_create(f"idle{k}")
            c.remember(f"idle{k}", f"one drawer in idle palace {k}")
        threading.Event().wait(2.0)
        results["memory"] = memory(c)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
