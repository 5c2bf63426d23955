"""Idle palaces benchmark: what many open palaces cost, and how fast a sleeping one wakes.

    .venv/bin/python -m bench.idle_palaces [--palaces 100] [--drawers 1000]
                                           [--wake-drawers 10000] [--wakes 10] [--out FILE]

One run per worker start mode (forked from the template, ``[palace] fork_workers =
true``, the default; and fresh interpreters, ``false``), each against a real daemon in a
throw-away home:

1. ``--palaces`` palaces of ``--drawers`` drawers each, written before the daemon starts
   by the real store code (``PalaceStore``) with vectors that look like real ones
   (``bench/scale.py``'s generator), so setting up costs no model time.
2. Every palace is woken with ``palace_info`` (its writer opens SQLite and the index),
   then left idle; the RSS, PSS and USS (private memory) of all palace workers together
   are read from /proc. RSS counts shared pages once per process, so it overstates what
   many processes cost together; PSS shares them out; USS is what each one alone holds.
3. Spawn to first answer: a palace of ``--wake-drawers`` drawers is put to sleep (its
   worker stopped) and woken ``--wakes`` times with ``memory_list`` and with
   ``memory_recall`` (the embedder is warm; the query is new each time).

Output: JSON (``--out``, default ``bench/results/idle-palaces.json``) and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from bench.harness import running_daemon, summary
from bench.scale import DIM, drawer_chunk
from trusty_memory.client.sync import Client
from trusty_memory.config import PalaceSettings
from trusty_memory.protocol import RememberParams
from trusty_memory.workers.store import PalaceStore

WAKE = "wake"


def base(n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def build(home: Path, name: str, drawers: int, seed: int, vectors: np.ndarray) -> None:
    """A palace on disk, written by the store as its writer would."""
    palace_dir = home / "palaces" / name
    with PalaceStore.open(palace_dir, name, PalaceSettings(), description=name) as store:
        for start in range(0, drawers, 1000):
            stop = min(drawers, start + 1000)
            vecs, main = drawer_chunk(vectors, seed * 1_000_000 + start, seed * 1_000_000 + stop)
            items = [
                (RememberParams(text=f"{name} note {i} about topic {int(m)}",
                                drawer_id=str(uuid.uuid4()), tags=[f"t{i % 10}"]), vecs[j])
                for j, (i, m) in enumerate(zip(range(start, stop), main, strict=True))
            ]  # fmt: skip
            store.remember_batch(items)


def memory(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private clean + dirty) of one process, in MB."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0].rstrip(":") in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {
        "rss": fields["Rss"],
        "pss": fields["Pss"],
        "uss": fields["Private_Clean"] + fields["Private_Dirty"],
    }


def palace_pids(client: Client) -> list[int]:
    return [
        w["pid"]
        for s in client.status()["services"]
        if s["name"].startswith("palace:")
        for w in s["workers"]
    ]


def wait_asleep(client: Client, palace: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        services = {s["name"]: s for s in client.status()["services"]}
        if not services.get(f"palace:{palace}", {}).get("workers"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{palace} did not go to sleep")


def one_mode(args, fork: bool, home_template: Path) -> dict:
    env = {
        "TRUSTY_MEMORY_PALACE_FORK_WORKERS": "1" if fork else "0",
        "TRUSTY_MEMORY_DREAMER_ENABLED": "0",
        "TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S": "120",
    }
    result: dict = {}
    with running_daemon(env) as config, Client(config, autostart=False) as c:
        # Both modes open the same palaces, built once (the daemon's palaces dir is empty).
        if config.palaces_dir.exists():
            config.palaces_dir.rmdir()
        config.palaces_dir.symlink_to(home_template / "palaces")
        names = sorted(c.palace_list())
        t0 = time.monotonic()
        for name in names:
            c.palace_info(name)
        result["wake_all_s"] = round(time.monotonic() - t0, 2)
        time.sleep(3.0)  # idle: the workers' on_idle runs and hands freed memory back
        pids = palace_pids(c)
        per = [memory(pid) for pid in pids]
        result["workers"] = len(pids)
        for key in ("rss", "pss", "uss"):
            result[f"{key}_total_mb"] = round(sum(m[key] for m in per), 1)
            result[f"{key}_each_mb"] = round(sum(m[key] for m in per) / max(1, len(per)), 2)
        # Spawn to first answer. A worker stopped with SIGTERM while no work waits is what
        # an idle stop leaves: the broker starts it again only for the next request.
        c.recall(WAKE, "warm up the embedder for the wake-up figures")
        lists, recalls = [], []
        for i in range(args.wakes):
            for kind, out in (("list", lists), ("recall", recalls)):
                for pid in palace_pids_of(c, WAKE):
                    os.kill(pid, signal.SIGTERM)
                wait_asleep(c, WAKE)
                t0 = time.perf_counter()
                if kind == "list":
                    c.list(WAKE, limit=10)
                else:
                    c.recall(WAKE, f"wake-up question {i}: which topic came up last?")
                out.append((time.perf_counter() - t0) * 1000)
        result["wake_list"] = summary(lists)
        result["wake_recall"] = summary(recalls)
    return result


def palace_pids_of(client: Client, palace: str) -> list[int]:
    for s in client.status()["services"]:
        if s["name"] == f"palace:{palace}":
            return [w["pid"] for w in s["workers"]]
    return []


def run(args) -> dict:
    vectors = base()
    home = Path(tempfile.mkdtemp(prefix="tmi-", dir="/tmp"))
    t0 = time.monotonic()
    for k in range(args.palaces):
        build(home, f"p{k:03d}", args.drawers, k + 1, vectors)
    build(home, WAKE, args.wake_drawers, 999, vectors)
    result = {
        "palaces": args.palaces,
        "drawers": args.drawers,
        "wake_drawers": args.wake_drawers,
        "build_s": round(time.monotonic() - t0, 1),
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python -m bench.idle_palaces", *sys.argv[1:]]),
        "forked": one_mode(args, True, home),
        "fresh": one_mode(args, False, home),
    }
    return result


def table(r: dict) -> str:
    lines = [
        f"{r['palaces']} idle palaces of {r['drawers']} drawers (+1 of {r['wake_drawers']}):",
        "mode     workers  RSS total  PSS total  USS total  (MB)   wake list p50/p99   "
        "wake recall p50/p99 (ms)",
    ]
    for mode in ("forked", "fresh"):
        x = r[mode]
        lines.append(
            f"{mode:<8} {x['workers']:>7}  {x['rss_total_mb']:>9.0f}  {x['pss_total_mb']:>9.0f}"
            f"  {x['uss_total_mb']:>9.0f}         {x['wake_list']['p50_ms']:6.1f} /"
            f" {x['wake_list']['p99_ms']:6.1f}     {x['wake_recall']['p50_ms']:6.1f} /"
            f" {x['wake_recall']['p99_ms']:6.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--palaces", type=int, default=100)
    parser.add_argument("--drawers", type=int, default=1000)
    parser.add_argument("--wake-drawers", type=int, default=10_000)
    parser.add_argument("--wakes", type=int, default=10)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    result = run(args)
    out = Path(args.out or "bench/results/idle-palaces.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
