"""An import of many ~600-character notes while a CPU hog runs beside the daemon.

Issue 36, defect 4: under contention (an agent's build beside the daemon, load ~10 on 2
cores) one import batch kept the palace writer and the embedder busy past ``[broker]
worker_expiry_s``; both were presumed dead and SIGKILLed, twice, and the import stored
nothing. This starts a daemon in a throw-away home with the default settings, loads the
model, starts ``--hog`` busy-looping processes at normal priority, times ``trusty-memory
import`` of ``--notes`` notes, and prints one JSON line: seconds, lines stored, the
import's exit status and last words, whether the daemon log says "presumed dead", and
the load average seen.

    .venv/bin/python -m bench.import_under_load --notes 20000 --hog 8
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = [
    "cache",
    "build",
    "index",
    "vector",
    "palace",
    "writer",
    "embedder",
    "broker",
    "socket",
    "heartbeat",
    "import",
    "batch",
    "thread",
    "queue",
    "deadline",
    "supervisor",
    "restart",
    "kernel",
    "compile",
    "linker",
    "module",
    "test",
    "schema",
    "migration",
    "replica",
    "commit",
    "rollback",
    "latency",
    "throughput",
    "memory",
    "agent",
    "session",
]


def note(rng: random.Random, i: int) -> str:
    """A ~600-character note, unique (the embedder's cache must not answer for it)."""
    words = [f"note {i}:"]
    while sum(len(w) + 1 for w in words) < 600:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:600]


def notes(path: Path, count: int) -> None:
    rng = random.Random(36)
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps({"content": note(rng, i), "room": "Bulk"}) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.import_under_load")
    ap.add_argument("--notes", type=int, default=20_000)
    ap.add_argument("--hog", type=int, default=8, help="busy-looping processes")
    ap.add_argument("--timeout", type=float, default=7200.0)
    args = ap.parse_args(argv)

    from trusty_memory.client.autostart import ping
    from trusty_memory.client.sync import Client
    from trusty_memory.common import protocol as p
    from trusty_memory.common.config import load_config
    from trusty_memory.common.messages import PalaceStats

    home = Path(tempfile.mkdtemp(prefix="tmb-", dir="/tmp"))
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    os.environ["TRUSTY_MEMORY_HOME"] = str(home)
    (home / "config.toml").write_text("[dreamer]\nenabled = false\n")
    source = home / "notes.jsonl"
    notes(source, args.notes)
    log = open(home / "daemon-stderr.log", "ab")  # noqa: SIM115
    daemon = subprocess.Popen([sys.executable, "-m", "trusty_memory.broker"], env=env, stderr=log)
    hog: list[subprocess.Popen] = []
    try:
        config = load_config()
        deadline = time.monotonic() + 120
        while not ping(config, 0.5):
            assert time.monotonic() < deadline and daemon.poll() is None, "daemon did not start"
            time.sleep(0.1)
        with Client(config, autostart=False) as client:
            client.call("embed", {"texts": ["warm up"]}, timeout=120)
        hog = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)
        ]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "trusty_memory.client.cli.main", "import", "bench", str(source)],
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            check=False,
        )
        seconds = time.monotonic() - started
        load = os.getloadavg()
        for proc in hog:
            proc.kill()
        with Client(config, autostart=False) as client:
            try:
                stats = client.call("palace_stats", palace="bench")
                stored = p.convert(stats, PalaceStats).drawer_count
            except p.TrustyError:
                stored = 0  # a failed import that created the palace removes it
        text = ""
        for name in ("logs/daemon.log", "daemon-stderr.log"):
            if (home / name).exists():
                text += (home / name).read_text(errors="replace")
        print(
            json.dumps(
                {
                    "notes": args.notes,
                    "hog": args.hog,
                    "seconds": round(seconds, 1),
                    "stored": stored,
                    "exit": done.returncode,
                    "stderr_tail": done.stderr.strip().splitlines()[-3:],
                    "presumed_dead": text.count("presumed dead"),
                    "loadavg_1m_at_end": round(load[0], 1),
                }
            )
        )
        return 0
    finally:
        for proc in hog:
            proc.kill()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
