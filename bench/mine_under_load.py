"""Agent sessions' latency while ``mine`` runs beside them (issue 39: mining yields).

A hook mines a session's transcript into the palace the agents are using. Sixteen
sessions (threads, each its own connection) remember and recall in that palace at a
steady pace, first alone for ``--seconds``, then again while ``trusty-memory mine`` files
a generated Claude Code transcript of ``--exchanges`` exchanges into the same palace (or
``--mine-palace``). Prints one JSON line: p50/p99 of each operation in both phases, the
p99 ratio (mining / alone), mining's own rate while the sessions ran, and the CPU the
``mine`` process itself used.

    .venv/bin/python -m bench.mine_under_load --exchanges 3000 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import fill, running_daemon, sentence, summary
from tests.capture.claude_code import transcript, write_transcript
from trusty_memory.client.sync import Client

QUESTIONS = [
    "what did we decide about database migrations",
    "who owns the billing service",
    "which port does staging use",
    "why are the integration tests flaky",
    "when do the TLS certificates expire",
]


def sessions(config, palace: str, clients: int, seconds: float, pace_s: float, phase: int) -> dict:
    """``clients`` sessions, each a remember then a recall every ``pace_s``, for
    ``seconds``: their latencies by operation (ms). Each ``phase`` remembers new texts
    (a text seen before would be a hit in the embedder's cache)."""
    lat: dict[str, list[float]] = {"remember": [], "recall": []}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work(k: int) -> None:
        with Client(config, autostart=False) as c:
            i = 0
            next_at = time.monotonic() + (k / clients) * pace_s  # spread the starts
            while time.monotonic() < stop:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += pace_s
                t0 = time.perf_counter()
                note = sentence(phase * 1_000_000 + k * 10_000 + i)
                c.remember(palace, f"phase {phase} session {k} note {i}: {note}")
                t1 = time.perf_counter()
                c.recall(palace, QUESTIONS[(k + i) % len(QUESTIONS)], top_k=5)
                t2 = time.perf_counter()
                with lock:
                    lat["remember"].append((t1 - t0) * 1000)
                    lat["recall"].append((t2 - t1) * 1000)
                i += 1

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {op: summary(ms) for op, ms in lat.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pace", type=float, default=1.0, help="seconds between a session's calls")
    ap.add_argument("--mine-palace", default="project")
    ap.add_argument("--readers", type=int, default=0, help="readers of the sessions' palace")
    args = ap.parse_args()
    with running_daemon() as config:
        home = Path(os.environ["TRUSTY_MEMORY_HOME"])
        with Client(config, autostart=False) as c:
            c.palace_create("project")
            if args.mine_palace != "project":
                c.palace_create(args.mine_palace)
            if args.readers:
                c.scale("project", args.readers)
        fill(config, "project", 300)
        # Replies of a few sentences (~400 characters), as an assistant's usually are.
        qa = [
            (
                f"Question {i}: where does service {i} run, and what did we decide?",
                f"Service {i} runs on h{i}:{i}. " + " ".join(sentence(i + j) for j in range(3)),
            )
            for i in range(args.exchanges)
        ]
        path = home / "t" / f"{uuid.uuid4()}.jsonl"
        write_transcript(path, transcript("s", "/w/b", qa))
        sessions(config, "project", args.clients, 3.0, args.pace, 0)  # warm every path
        alone = sessions(config, "project", args.clients, args.seconds, args.pace, 1)
        cli = [sys.executable, "-m", "trusty_memory.client.cli.main"]
        t0 = time.monotonic()
        miner = subprocess.Popen(
            [*cli, "mine", args.mine_palace, str(path), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        mining = sessions(config, "project", args.clients, args.seconds, args.pace, 2)
        still_mining = miner.poll() is None
        out, _ = miner.communicate(timeout=3600)
        mined_s = time.monotonic() - t0
        # The miner is the only child waited for by now (the daemon still runs): its own
        # CPU (parsing, encoding, sending) is what it takes from the sessions beside the
        # daemon's bulk lane and writer.
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        stored = json.loads(out)["stored"] if out.strip() else 0
    print(
        json.dumps(
            {
                "clients": args.clients,
                "pace_s": args.pace,
                "seconds": args.seconds,
                "exchanges": args.exchanges,
                "readers": args.readers,
                "alone": alone,
                "mining": mining,
                "p99_ratio": {
                    op: round(mining[op]["p99_ms"] / alone[op]["p99_ms"], 2) for op in alone
                },
                "mine_ran_through_window": still_mining,
                "mine_s": round(mined_s, 1),
                "mine_per_s": round(stored / mined_s, 1),
                "mine_cpu_s": round(used.ru_utime + used.ru_stime, 1),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
