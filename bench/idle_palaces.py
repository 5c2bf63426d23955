"""Idle palaces benchmark: what many open palaces cost, and how fast a sleeping one wakes.

    .venv/bin/python -m bench.idle_palaces [--palaces 100] [--drawers 1000]
                                           [--wake-drawers 10000] [--wakes 10]
                                           [--release-s 5] [--modes forked,kept,fresh]
                                           [--out FILE]

One run per worker start mode, each against a real daemon in a throw-away home:
``forked`` (from the template, ``[palace] fork_workers = true``, the default), ``kept``
(forked, but every index kept loaded: ``idle_release_s = 0``, how idle workers were
before they released it) and ``fresh`` (fresh interpreters, ``fork_workers = false``).

1. ``--palaces`` palaces of ``--drawers`` drawers each, written before the daemon starts
   by the real store code (``PalaceStore``) with vectors that look like real ones
   (``bench/scale.py``'s generator), so setting up costs no model time.
2. The daemon starts with ``TRUSTY_MEMORY_PALACE_IDLE_RELEASE_S`` set to ``--release-s``
   (default 5 s, so that the run is short; a daemon's default is 60 s): a worker with no
   request for that long lets its vector index go. In the forked modes the palaces are
   woken only once the template is ready, so every worker is forked (the broker starts
   one afresh rather than wait for the template).
3. Every palace is woken with ``palace_info`` (its writer opens SQLite and the index),
   then left idle for ``--release-s`` + 3 s; the RSS, PSS and USS (private memory) of
   all palace workers together are read from /proc, and the template's beside them. RSS
   counts shared pages once per process, so it overstates what many processes cost
   together; PSS shares them out; USS is what each one alone holds.
4. Spawn to first answer: a palace of ``--wake-drawers`` drawers is put to sleep (its
   worker stopped) and woken ``--wakes`` times with ``memory_list`` and with
   ``memory_recall`` (the embedder is warm; the query is new each time). In the
   ``forked`` mode, also a live worker's first recall after it let its index go (the
   load from the snapshot included) and the same recall right after, at
   ``--wake-drawers`` and at ``--drawers``; and, before the daemon starts, what the load
   alone costs in the store at both sizes.

Output: JSON (``--out``, default ``bench/results/idle-palaces.json``) and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from bench.harness import running_daemon, summary
from bench.scale import DIM, drawer_chunk
from trusty_memory.client.sync import Client
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.messages import RememberParams
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.write import PalaceStore

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


def index_load_ms(home: Path, name: str, times: int) -> dict:
    """What loading a released index costs in the store itself (snapshot, checksum,
    hnswlib, change-log check), without the daemon: ``release_index`` + ``load_index``."""
    store = ReadStore.open_reader(home / "palaces" / name, name, PalaceSettings())
    try:
        ms = []
        for _ in range(times):
            assert store.release_index()
            t0 = time.perf_counter()
            store.load_index()
            ms.append((time.perf_counter() - t0) * 1000)
        return summary(ms)
    finally:
        store.close()


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


MODES = {  # name: (fork workers, release idle indexes)
    "forked": (True, True),
    "kept": (True, False),
    "fresh": (False, True),
}


def one_mode(args, mode: str, home_template: Path) -> dict:
    fork, release = MODES[mode]
    env = {
        "TRUSTY_MEMORY_PALACE_FORK_WORKERS": "1" if fork else "0",
        "TRUSTY_MEMORY_PALACE_IDLE_RELEASE_S": str(args.release_s if release else 0),
        "TRUSTY_MEMORY_DREAMER_ENABLED": "0",
        "TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S": "120",
    }
    result: dict = {"fork_workers": fork, "idle_release_s": args.release_s if release else 0}
    with running_daemon(env) as config, Client(config, autostart=False) as c:
        # Every mode opens the same palaces, built once (the daemon's palaces dir is empty).
        if config.palaces_dir.exists():
            config.palaces_dir.rmdir()
        config.palaces_dir.symlink_to(home_template / "palaces")
        if fork:
            result["template_ready_s"] = wait_template(c)
        names = sorted(c.palace_list())
        t0 = time.monotonic()
        for name in names:
            c.palace_info(name)
        result["wake_all_s"] = round(time.monotonic() - t0, 2)
        # Idle past the release; on_idle also hands freed memory back.
        time.sleep(args.release_s + IDLE_MARGIN_S)
        result.update(workers_memory(palace_pids(c)))
        if fork:
            result["template"] = memory(c.status()["template"]["pid"])
        c.recall(WAKE, "warm up the embedder for the wake-up figures")
        result.update(wake_figures(c, args.wakes))
        if release and fork:  # the default mode; the other modes load the same way
            result["recall_after_release"] = recall_after_release(c, WAKE, args)
            result["recall_after_release_1k"] = recall_after_release(c, names[0], args)
    return result


IDLE_MARGIN_S = 3.0  # a worker releases within a heartbeat (1 s) of its idle time


def wait_template(client: Client, timeout: float = 60.0) -> float:
    """Seconds until the template forks: palaces asked for sooner start afresh."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if client.status()["template"]["ready"]:
            return round(time.monotonic() - t0, 2)
        time.sleep(0.05)
    raise RuntimeError("the worker template never became ready")


def workers_memory(pids: list[int]) -> dict:
    per = [memory(pid) for pid in pids]
    result: dict = {"workers": len(pids)}
    for key in ("rss", "pss", "uss"):
        result[f"{key}_total_mb"] = round(sum(m[key] for m in per), 1)
        result[f"{key}_each_mb"] = round(sum(m[key] for m in per) / max(1, len(per)), 2)
    return result


def wake_figures(client: Client, wakes: int) -> dict:
    """Spawn to first answer. A worker stopped with SIGTERM while no work waits is what
    an idle stop leaves: the broker starts it again only for the next request."""
    lists, recalls = [], []
    for i in range(wakes):
        for kind, out in (("list", lists), ("recall", recalls)):
            for pid in palace_pids_of(client, WAKE):
                os.kill(pid, signal.SIGTERM)
            wait_asleep(client, WAKE)
            t0 = time.perf_counter()
            if kind == "list":
                client.list(WAKE, limit=10)
            else:
                client.recall(WAKE, f"wake-up question {i}: which topic came up last?")
            out.append((time.perf_counter() - t0) * 1000)
    return {"wake_list": summary(lists), "wake_recall": summary(recalls)}


def recall_after_release(client: Client, palace: str, args) -> dict:
    """A live worker's first recall once its index is released, against the same recall
    right after it (index loaded): the difference is what the load costs a request.

    Each question is asked once before the release, so that the embedder's cache answers
    it both times: the embedder idles through the release too, and its first request
    after a pause is slower whether or not a palace released anything. The worker's RSS
    before and after the release shows that the index went.
    """
    [pid] = palace_pids_of(client, palace)
    first, again, rss_loaded, rss_released = [], [], [], []
    for i in range(args.wakes):
        question = f"after the release, question {i}: which topic came up last?"
        client.recall(palace, question)
        rss_loaded.append(memory(pid)["rss"])
        time.sleep(args.release_s + IDLE_MARGIN_S)
        rss_released.append(memory(pid)["rss"])
        for out in (first, again):
            t0 = time.perf_counter()
            client.recall(palace, question)
            out.append((time.perf_counter() - t0) * 1000)
    return {
        **summary(first),
        "loaded": summary(again),
        "load": summary([a - b for a, b in zip(first, again, strict=True)]),
        "rss_loaded_mb": round(statistics.median(rss_loaded), 1),
        "rss_released_mb": round(statistics.median(rss_released), 1),
    }


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
        "release_s": args.release_s,
        "index_load_ms": {
            str(args.drawers): index_load_ms(home, "p000", args.wakes),
            str(args.wake_drawers): index_load_ms(home, WAKE, args.wakes),
        },
    }
    try:
        for mode in args.modes.split(","):
            result[mode] = one_mode(args, mode, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return result


def table(r: dict) -> str:
    lines = [
        f"{r['palaces']} idle palaces of {r['drawers']} drawers (+1 of {r['wake_drawers']});"
        f" indexes released after {r['release_s']} s idle where the mode releases them",
        "mode     workers  RSS total  PSS total  USS total  USS each (MB)   wake list p50/p99"
        "   wake recall p50/p99   recall after release p50/p99 (ms)",
    ]
    for mode in (m for m in MODES if m in r):
        x = r[mode]
        after = x.get("recall_after_release")
        lines.append(
            f"{mode:<8} {x['workers']:>7}  {x['rss_total_mb']:>9.0f}  {x['pss_total_mb']:>9.0f}"
            f"  {x['uss_total_mb']:>9.0f}  {x['uss_each_mb']:>8.2f}"
            f"        {x['wake_list']['p50_ms']:6.1f} / {x['wake_list']['p99_ms']:6.1f}"
            f"     {x['wake_recall']['p50_ms']:6.1f} / {x['wake_recall']['p99_ms']:6.1f}"
            + (f"     {after['p50_ms']:6.1f} / {after['p99_ms']:6.1f}" if after else "")
        )
        if "recall_after_release_1k" in x:
            for size, key in ((r["wake_drawers"], "recall_after_release"),
                              (r["drawers"], "recall_after_release_1k")):  # fmt: skip
                k = x[key]
                lines.append(
                    f"         {size} drawers: recall after release {k['p50_ms']:.1f} /"
                    f" {k['p99_ms']:.1f} ms, loaded {k['loaded']['p50_ms']:.1f} /"
                    f" {k['loaded']['p99_ms']:.1f} ms, difference {k['load']['p50_ms']:.1f} /"
                    f" {k['load']['p99_ms']:.1f} ms"
                )
        if "template" in x:
            t = x["template"]
            lines.append(
                f"         template: RSS {t['rss']:.0f}, PSS {t['pss']:.0f}, USS {t['uss']:.0f} MB"
            )
    loads = ", ".join(
        f"{n} drawers {v['p50_ms']:.1f} / {v['p99_ms']:.1f} ms"
        for n, v in r["index_load_ms"].items()
    )
    lines.append(f"index load in the store, p50 / p99: {loads}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--palaces", type=int, default=100)
    parser.add_argument("--drawers", type=int, default=1000)
    parser.add_argument("--wake-drawers", type=int, default=10_000)
    parser.add_argument("--wakes", type=int, default=10)
    parser.add_argument(
        "--release-s",
        type=float,
        default=5.0,
        help="[palace] idle_release_s for the run (a daemon's default is 60)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="of: " + ", ".join(MODES))
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
