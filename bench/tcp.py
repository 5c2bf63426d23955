"""Recall over tcp with CURVE against ipc: what the team daemon's transport costs a call.

    .venv/bin/python -m bench.tcp [--drawers 1000] [--recalls 300]
                                  [--modes ipc,tcp,tcp+curve] [--out FILE]

One home, one palace of ``--drawers`` drawers (written once, through the daemon), then
the same daemon home started three times, once per frontend:

* ``ipc`` - the default, a Unix socket;
* ``tcp`` - plain tcp on 127.0.0.1 (``daemon --insecure``: what CURVE's share is);
* ``tcp+curve`` - tcp on 127.0.0.1 with CURVE, the client a home of its own whose key the
  daemon allows (``keys add``), as a laptop of a team daemon would be.

In each, one client makes ``--recalls`` sequential ``memory_recall`` calls (top 10) with
queries it has not asked before in that daemon (every daemon starts with an empty
embedder cache, and the query list is the same for the three), after 20 warm-up calls.
Latency is the client's wall time per call: embedding, search and both transport hops.
Loopback takes the network itself out: over a real link add its round trip.

Output: JSON (``--out``, default ``bench/results/tcp.json``) and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import fill, sentence, summary
from trusty_memory.client.autostart import daemon_pid, ping
from trusty_memory.client.sync import Client
from trusty_memory.common.config import Config, load_config

PALACE = "bench-tcp"
WARMUP = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(home: Path, *args: str) -> str:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def client_config(home: Path, env: dict[str, str]) -> Config:
    saved = dict(os.environ)
    os.environ.update(TRUSTY_MEMORY_HOME=str(home), **env)
    try:
        return load_config()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_mode(server: Path, laptop: Path, mode: str, queries: list[str]) -> dict:
    """Start the server home's daemon with ``mode``'s frontend; time the recalls."""
    env = {"TRUSTY_MEMORY_HOME": str(server), "TRUSTY_MEMORY_DREAMER_ENABLED": "0"}
    args = ["daemon"]
    client_env: dict[str, str] = {}
    if mode != "ipc":
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        env["TRUSTY_MEMORY_BROKER_FRONTEND"] = endpoint
        client_env["TRUSTY_MEMORY_DAEMON"] = endpoint
        if mode == "tcp":
            args.append("--insecure")
        else:
            client_env["TRUSTY_MEMORY_SERVER_KEY"] = cli(server, "keys", "show", "--server")
    home = laptop if mode == "tcp+curve" else server
    config = client_config(home, client_env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env={**os.environ, **env},
        stderr=subprocess.DEVNULL,
    )
    try:
        while not ping(config, 0.5):
            if proc.poll() is not None:
                raise RuntimeError(f"{mode}: daemon exited at start")
            time.sleep(0.1)
        with Client(config, autostart=False) as client:
            for q in queries[:WARMUP]:
                client.recall(PALACE, q)
            ms = []
            for q in queries[WARMUP:]:
                t0 = time.perf_counter()
                client.recall(PALACE, q)
                ms.append((time.perf_counter() - t0) * 1000)
        return {"mode": mode, **summary(ms)}
    finally:
        pid = daemon_pid(client_config(server, {}))
        if pid:
            os.kill(pid, signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drawers", type=int, default=1000)
    parser.add_argument("--recalls", type=int, default=300)
    parser.add_argument("--modes", default="ipc,tcp,tcp+curve", help="in this order")
    parser.add_argument("--out", default="bench/results/tcp.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    server = Path(tempfile.mkdtemp(prefix="tmb-", dir="/tmp"))
    laptop = Path(tempfile.mkdtemp(prefix="tmb-", dir="/tmp"))
    # A daemon this process starts (the seeding one) must belong to the server home.
    os.environ["TRUSTY_MEMORY_HOME"] = str(server)
    started = time.monotonic()
    try:
        cli(server, "keys", "init")
        cli(laptop, "keys", "init")
        cli(server, "keys", "add", "laptop", cli(laptop, "keys", "show", "--client"))
        seed = client_config(server, {})
        with Client(seed) as client:  # starts the home's daemon (ipc) to write the palace
            client.palace_create(PALACE)
        fill(seed, PALACE, args.drawers)
        os.kill(daemon_pid(seed), signal.SIGTERM)
        while daemon_pid(seed) is not None:
            time.sleep(0.1)
        queries = [
            f"what did we decide about {sentence(10_000 + i)[8:60]}"
            for i in range(WARMUP + args.recalls)
        ]
        rows = [run_mode(server, laptop, mode, queries) for mode in args.modes.split(",")]
    finally:
        shutil.rmtree(server, ignore_errors=True)
        shutil.rmtree(laptop, ignore_errors=True)
    result = {
        "drawers": args.drawers,
        "recalls": args.recalls,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'transport':<10} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for row in rows:
        print(
            f"{row['mode']:<10} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['mean_ms']:>8.2f}"
        )
    print(f"({args.drawers} drawers, {args.recalls} recalls each, {result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
