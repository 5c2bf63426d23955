"""Scale benchmark: a palace of N drawers loaded by bulk import, then searched and reopened.

    .venv/bin/python bench/scale.py [--drawers 100000] [--smoke] [--queries 300]
                                    [--ef-construction 200] [--keep]

One run, against a real daemon in a throw-away home:

1. Vectors that look like real ones. Random unit vectors are hnswlib's worst case and no
   memory palace looks like that, so a few thousand real sentences (LoCoMo dialogue turns)
   are embedded once through the daemon's embedder (cached in /tmp), and drawer ``i`` is a
   blend of two of them plus a little Gaussian noise, renormalised (cosine ~0.9 to its main
   sentence). Its content is the main sentence plus a variant number; rooms, tags,
   importance and dates vary.
2. The drawers are written to a JSONL file with base64 vectors and loaded with the real
   ``trusty-memory import`` command: import throughput is drawers / wall second.
3. ``memory_recall`` p50/p99 through the Python client, for real questions (LoCoMo) never
   seen before (each one is embedded: the full cost an agent pays) and for the same
   questions again (the embedder's cache answers: the cost of the search path alone);
   the same two figures for ``memory_recall_deep`` (L3: HNSW at a high ``ef`` + BM25).
4. recall@10 of what ``memory_recall`` returns against exact top-10 by brute force over
   all N vectors (numpy), computed while generating, so memory stays flat.
5. Worker RSS (VmRSS of the palace worker) after the recalls, and worker cold open: the
   daemon is restarted (the worker saves its index on the way down) and the first
   request to the palace is timed: process spawn + imports + SQLite + index load.

Output: ``bench/out/scale-<N>.json`` and a table. The machine is shared: compare figures
from the same run.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.scale
    from harness import rss_mb, summary, worker_pids
except ImportError:
    from bench.harness import rss_mb, summary, worker_pids

from trusty_memory.client.autostart import daemon_pid, ping
from trusty_memory.client.sync import Client
from trusty_memory.common.config import load_config

DIM = 384
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
CACHE = Path(tempfile.gettempdir()) / "trusty-scale-base.npz"
PALACE = "scale"
ROOMS = ["General", "Backend", "Frontend", "Planning", "Ops", "Research", "Personal", "Notes"]
CHUNK = 10_000
NOISE = 0.03
BLEND = 0.35


# -- the data ----------------------------------------------------------------------------


def locomo_texts() -> tuple[list[str], list[str]]:
    """Dialogue turns (drawer content) and questions (queries), deduplicated, in order."""
    data = json.loads(LOCOMO.read_text())
    turns: dict[str, None] = {}
    questions: dict[str, None] = {}
    for conv in data:
        c = conv["conversation"]
        for key, value in c.items():
            if key.startswith("session_") and isinstance(value, list):
                for turn in value:
                    if turn.get("text", "").strip():
                        turns[turn["text"].strip()] = None
        for qa in conv["qa"]:
            questions[qa["question"].strip()] = None
    return list(turns), list(questions)


def embed(client: Client, texts: list[str]) -> np.ndarray:
    out = []
    for start in range(0, len(texts), 128):
        data = client.call("embed", {"texts": texts[start : start + 128]}, timeout=180)
        out.append(np.frombuffer(data["vectors"], dtype=np.float32).reshape(-1, data["dim"]))
    return np.vstack(out)


def base_vectors(client: Client, turns: list[str]) -> np.ndarray:
    """The real sentence embeddings, cached across runs (they cost ~25 s to make)."""
    cache = CACHE.with_name(f"{CACHE.stem}-{len(turns)}.npz")
    if cache.exists():
        return np.load(cache)["vectors"]
    vectors = embed(client, turns)
    np.savez(cache, vectors=vectors)
    return vectors


def drawer_chunk(base: np.ndarray, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of drawers ``start..stop`` and their main sentence; deterministic per chunk."""
    rng = np.random.default_rng(start)
    n = stop - start
    main = (np.arange(start, stop) * 7919) % len(base)
    other = rng.integers(0, len(base), n)
    vecs = base[main] + BLEND * base[other] + NOISE * rng.standard_normal((n, DIM))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype("<f4")
    return vecs, main


def write_jsonl(path: Path, base: np.ndarray, turns: list[str], n: int) -> None:
    """Write a header and N drawer lines with base64 vectors."""
    with path.open("wb") as out:
        out.write(b'{"type":"header","format":"trusty-memory/1","dim":384}\n')
        for start in range(0, n, CHUNK):
            stop = min(n, start + CHUNK)
            vecs, main = drawer_chunk(base, start, stop)
            lines = []
            for j, i in enumerate(range(start, stop)):
                line = {
                    "type": "drawer",
                    "drawer_id": str(uuid.UUID(int=i + 1)),
                    "content": f"{turns[main[j]]} (variant {i})",
                    "room": ROOMS[i % len(ROOMS)],
                    "tags": [f"t{i % 20}"],
                    "importance": round(0.2 + 0.6 * ((i * 37) % 100) / 100, 2),
                    "created_at": time.strftime(
                        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + i * 31)
                    ),
                    "vector": base64.b64encode(vecs[j].tobytes()).decode(),
                }
                lines.append(json.dumps(line))
            out.write(("\n".join(lines) + "\n").encode())


def exact_top_k(base: np.ndarray, n: int, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """Exact top-``k`` drawer indices per query by brute force, chunk by chunk (flat memory)."""
    best_idx = np.zeros((len(queries), 0), dtype=np.int64)
    best_score = np.zeros((len(queries), 0), dtype=np.float32)
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        vecs, _ = drawer_chunk(base, start, stop)
        scores = queries @ vecs.T
        idx = np.hstack([best_idx, np.arange(start, stop)[None, :].repeat(len(queries), 0)])
        score = np.hstack([best_score, scores])
        top = np.argsort(-score, axis=1)[:, :k]
        best_idx = np.take_along_axis(idx, top, 1)
        best_score = np.take_along_axis(score, top, 1)
    return best_idx


# -- the daemon --------------------------------------------------------------------------


class Daemon:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = {**os.environ, **env, "TRUSTY_MEMORY_HOME": str(home)}
        os.environ["TRUSTY_MEMORY_HOME"] = str(home)
        self.config = load_config()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.home / "daemon-bench.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trusty_memory.broker"], env=self.env, stderr=log
        )
        deadline = time.monotonic() + 60
        while not ping(self.config, 0.5):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("daemon did not start")
            time.sleep(0.05)

    def stop(self) -> float:
        """SIGTERM and wait; returns the seconds it took (workers save their index)."""
        started = time.monotonic()
        pid = daemon_pid(self.config)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        if self.proc is not None:
            self.proc.wait(timeout=600)
        return time.monotonic() - started


@contextmanager
def temp_home(keep: bool):
    home = Path(tempfile.mkdtemp(prefix="tms-", dir="/tmp"))
    try:
        yield home
    finally:
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


def worker_pid(client: Client) -> int:
    pids = worker_pids(client.status(), f"palace:{PALACE}")
    if not pids:
        raise RuntimeError("no palace worker")
    return pids[0]


# -- the run -----------------------------------------------------------------------------


def run(args) -> dict:
    n = args.drawers
    turns, questions = locomo_texts()
    questions = questions[: args.queries]
    env = {
        "TRUSTY_MEMORY_PALACE_EF_CONSTRUCTION": str(args.ef_construction),
        "TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S": "120",
    }
    result: dict = {
        "drawers": n,
        "queries": len(questions),
        "ef_construction": args.ef_construction,
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}, {os.uname().release}",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["bench/scale.py", *sys.argv[1:]]),
    }
    with temp_home(args.keep) as home:
        daemon = Daemon(home, env)
        daemon.start()
        try:
            client = Client(daemon.config, autostart=False)
            t0 = time.monotonic()
            base = base_vectors(client, turns[: args.base])
            result["embed_base_s"] = round(time.monotonic() - t0, 1)

            t0 = time.monotonic()
            jsonl = home / "drawers.jsonl"
            write_jsonl(jsonl, base, turns, n)
            result["generate_s"] = round(time.monotonic() - t0, 1)
            result["jsonl_mb"] = round(jsonl.stat().st_size / 2**20, 1)

            t0 = time.monotonic()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trusty_memory.client.cli.main",
                    "--json",
                    "import",
                    PALACE,
                    str(jsonl),
                ],
                env=daemon.env,
                capture_output=True,
            )
            import_s = time.monotonic() - t0
            if done.returncode != 0:
                raise RuntimeError(f"import failed: {done.stderr.decode()[-2000:]}")
            report = json.loads(done.stdout)
            result["import"] = {
                **report,
                "seconds": round(import_s, 1),
                "drawers_per_s": round(n / import_s, 1),
            }
            jsonl.unlink()
            info = client.palace_info(PALACE)
            assert info.drawer_count == n and info.index_count == n, info

            client.recall(PALACE, "warm-up question")
            cold_ms, warm_ms, hits = [], [], []
            for q in questions:  # never embedded before: the embedder runs for each
                t = time.perf_counter()
                client.recall(PALACE, q, top_k=10)
                cold_ms.append((time.perf_counter() - t) * 1000)
            for q in questions:  # the same texts: the embedder's cache answers
                t = time.perf_counter()
                found = client.recall(PALACE, q, top_k=10)
                warm_ms.append((time.perf_counter() - t) * 1000)
                hits.append([uuid.UUID(h.drawer_id).int - 1 for h in found.results])
            deep_new_ms, deep_warm_ms = [], []
            for q in questions:  # L3 for a text not embedded before, then the same again
                for texts, into in ((f"Details: {q}", deep_new_ms), (q, deep_warm_ms)):
                    t = time.perf_counter()
                    client.recall(PALACE, texts, top_k=10, deep=True)
                    into.append((time.perf_counter() - t) * 1000)
            truth = exact_top_k(base, n, embed(client, questions))
            result["recall_new_queries"] = summary(cold_ms)
            result["recall_repeated_queries"] = summary(warm_ms)
            result["recall_deep_new_queries"] = summary(deep_new_ms)
            result["recall_deep_repeated_queries"] = summary(deep_warm_ms)
            result["recall_at_10_vs_exact"] = round(
                statistics.fmean(
                    len(set(h) & set(t.tolist())) / 10 for h, t in zip(hits, truth, strict=True)
                ),
                4,
            )
            pid = worker_pid(client)
            result["worker_rss_mb_after_import"] = round(rss_mb(pid), 1)
            result["palace_disk_mb"] = round(
                sum(f.stat().st_size for f in (home / "palaces" / PALACE).iterdir()) / 2**20, 1
            )
            client.close()
        finally:
            result["daemon_stop_s"] = round(daemon.stop(), 1)

        daemon.start()
        try:
            client = Client(daemon.config, autostart=False)
            t0 = time.monotonic()
            client.call("noop", palace=PALACE, timeout=300)
            result["worker_cold_open_s"] = round(time.monotonic() - t0, 2)
            pid = worker_pid(client)
            result["worker_rss_mb_after_cold_open"] = round(rss_mb(pid), 1)
            client.recall(PALACE, questions[0])  # model load, so the next figure is search
            t0 = time.perf_counter()
            client.recall(PALACE, questions[1])
            result["first_recall_after_open_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            result["worker_rss_mb_after_recall"] = round(rss_mb(pid), 1)
            client.close()
        finally:
            daemon.stop()
    return result


def table(r: dict) -> str:
    rows = [
        ("drawers", f"{r['drawers']:,}"),
        ("import (drawers/s)", f"{r['import']['drawers_per_s']:,}  ({r['import']['seconds']} s)"),
        ("recall p50 / p99, new queries (ms)", _pp(r["recall_new_queries"])),
        ("recall p50 / p99, repeated queries (ms)", _pp(r["recall_repeated_queries"])),
        ("recall_deep p50 / p99, new queries (ms)", _pp(r["recall_deep_new_queries"])),
        ("recall_deep p50 / p99, repeated (ms)", _pp(r["recall_deep_repeated_queries"])),
        ("recall@10 vs exact", f"{r['recall_at_10_vs_exact']:.3f}"),
        ("worker RSS after import (MB)", f"{r['worker_rss_mb_after_import']:,}"),
        ("worker RSS after cold open + recall (MB)", f"{r['worker_rss_mb_after_recall']:,}"),
        ("worker cold open (s)", f"{r['worker_cold_open_s']}"),
        ("palace on disk (MB)", f"{r['palace_disk_mb']:,}"),
        ("daemon stop incl. index save (s)", f"{r['daemon_stop_s']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _pp(lat: dict) -> str:
    return f"{lat['p50_ms']} / {lat['p99_ms']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drawers", type=int, default=100_000)
    parser.add_argument("--smoke", action="store_true", help="5,000 drawers, 50 queries (CI)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--base", type=int, default=3000, help="real sentences to embed")
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the temp home")
    parser.add_argument("--out", help="default: bench/out/scale-<N>.json")
    args = parser.parse_args(argv)
    if args.smoke:
        args.drawers, args.queries, args.base = 5_000, 50, 300
    result = run(args)
    out = Path(args.out or Path(__file__).parent / "out" / f"scale-{args.drawers}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
