"""Autoscale benchmark: what the rule in ``broker/autoscale.py`` does to one hot palace.

    .venv/bin/python -m bench.autoscale [--drawers 20000] [--sessions 16] [--seconds 60]
                                        [--max-readers 3] [--out FILE]

One run, two daemons on the same palace file (``bench/readers.py``'s palace: LoCoMo
sentences embedded once, blended, imported; every question embedded before the first
phase, so the phases differ only in the palace side):

1. **Fixed** (autoscale off): 0, 1, 2 readers set by ``scale``, ``sessions`` threads of
   ``memory_recall_deep`` for 20 s each: calls/s and p50/p99, the yardstick.
2. **Autoscale** (``[palace] max_readers``; the other thresholds at their defaults except
   ``autoscale_idle_s``, 10 s here so the run ends):
   - one session for 20 s: the palace must stay at 0 readers (no pile-up);
   - ``sessions`` sessions for ``seconds``: the readers the rule settles on, when it added
     or gave back each one, calls/s per second and over the last third of the phase;
   - quiet: how long until the added readers are gone.

Output: JSON (``--out``, default ``bench/results/autoscale.json``) and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.harness import running_daemon, summary
from bench.readers import PALACE, load, wait_for_readers
from bench.scale import base_vectors, locomo_texts, write_jsonl
from trusty_memory.client.sync import Client

BASE_ENV = {"TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S": "120", "TRUSTY_MEMORY_DREAMER_ENABLED": "0"}


def prepare(admin: Client, data: Path, questions: list[str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "import", PALACE, str(data)],
        check=True,
        capture_output=True,
    )
    for start in range(0, len(questions), 128):
        admin.call("embed", {"texts": questions[start : start + 128]}, timeout=180)


def palace_readers(admin: Client) -> tuple[int, int]:
    """(live readers, readers added by autoscale) of the bench palace."""
    for s in admin.status()["services"]:
        if s["name"] == f"palace:{PALACE}":
            live = sum(1 for w in s["workers"] if w["role"] == "reader")
            return live, s.get("readers_autoscaled", 0)
    return 0, 0


def timeline(admin: Client, config, sessions: int, seconds: float, call) -> dict:
    """Run a load while sampling, once a second, the readers and the calls answered."""
    done = [0]
    samples: list[dict] = []
    stop = threading.Event()

    def counted(c: Client, i: int) -> None:
        call(c, i)
        done[0] += 1

    def sample() -> None:
        t0, last = time.monotonic(), 0
        while not stop.wait(1.0):
            live, added = palace_readers(admin)
            samples.append({"t": round(time.monotonic() - t0, 1), "readers": live,
                            "added": added, "calls": done[0] - last})  # fmt: skip
            last = done[0]

    sampler = threading.Thread(target=sample)
    sampler.start()
    latencies, errors = load(config, sessions, seconds, counted) if sessions else ([], 0)
    if not sessions:
        time.sleep(seconds)
    stop.set()
    sampler.join()
    tail = samples[len(samples) * 2 // 3 :]
    return {
        "sessions": sessions,
        "errors": errors,
        **(summary(latencies) if latencies else {}),
        "calls_per_s_last_third": round(sum(s["calls"] for s in tail) / max(1, len(tail)), 1),
        "readers_at_end": samples[-1]["readers"] if samples else 0,
        "samples": samples,
    }


def run(args) -> dict:
    turns, questions = locomo_texts()

    def deep(c: Client, i: int) -> None:
        c.recall(PALACE, questions[i % len(questions)], top_k=10, deep=True)

    result: dict = {
        "drawers": args.drawers,
        "sessions": args.sessions,
        "max_readers": args.max_readers,
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python -m bench.autoscale", *sys.argv[1:]]),
        "fixed": {},
    }
    data = Path(tempfile.mkdtemp(prefix="tma-")) / "palace.jsonl"
    with running_daemon(BASE_ENV) as config, Client(config, autostart=False) as admin:
        write_jsonl(data, base_vectors(admin, turns), turns, args.drawers)
        prepare(admin, data, questions)
        for n in (0, 1, 2):
            admin.scale(PALACE, n)
            wait_for_readers(admin, n)
            load(config, args.sessions, 2.0, deep)
            latencies, errors = load(config, args.sessions, 20.0, deep)
            result["fixed"][n] = {"calls_per_s": round(len(latencies) / 20.0, 1),
                                  "errors": errors, **summary(latencies)}  # fmt: skip
            print(f"fixed {n} readers: {result['fixed'][n]}", file=sys.stderr)
    env = {
        **BASE_ENV,
        "TRUSTY_MEMORY_PALACE_MAX_READERS": str(args.max_readers),
        "TRUSTY_MEMORY_PALACE_AUTOSCALE_IDLE_S": "10",
    }
    with running_daemon(env) as config, Client(config, autostart=False) as admin:
        prepare(admin, data, questions)
        load(config, 1, 2.0, deep)
        result["light"] = timeline(admin, config, 1, 20.0, deep)
        print(f"light: {result['light']['readers_at_end']} readers", file=sys.stderr)
        result["heavy"] = timeline(admin, config, args.sessions, args.seconds, deep)
        print(f"heavy: {result['heavy']['readers_at_end']} readers, "
              f"{result['heavy']['calls_per_s_last_third']}/s", file=sys.stderr)  # fmt: skip
        quiet = timeline(admin, config, 0, 40.0, deep)
        gone = next((s["t"] for s in quiet["samples"] if s["readers"] == 0), None)
        result["quiet"] = {"all_added_readers_gone_after_s": gone, "samples": quiet["samples"]}
    data.unlink()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drawers", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-readers", type=int, default=3)
    parser.add_argument("--out", default=str(Path("bench/results/autoscale.json")))
    args = parser.parse_args(argv)
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    heavy = result["heavy"]
    print(
        "fixed readers 0/1/2: "
        + " / ".join(f"{r['calls_per_s']}/s p50 {r['p50_ms']} ms" for r in result["fixed"].values())
        + f"\nautoscale, 1 session: {result['light']['readers_at_end']} readers"
        + f"\nautoscale, {heavy['sessions']} sessions: {heavy['readers_at_end']} readers,"
        + f" {heavy['calls_per_s_last_third']}/s over the last third, p50 {heavy['p50_ms']} ms"
        + f"\nquiet: added readers gone after {result['quiet']['all_added_readers_gone_after_s']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
