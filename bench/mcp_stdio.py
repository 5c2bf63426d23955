"""MCP benchmarks: ``trusty-memory serve`` driven over stdio, as agents drive it.

    .venv/bin/python -m bench.mcp_stdio [--drawers 10000] [--out bench/out/mcp.json]

With a daemon already running (in a temp home), measures in one run:
- spawn of ``trusty-memory serve`` to the ``initialize`` result (p50 of 20 spawns);
- per session, in both ways ``serve`` can run (relayed to the daemon's MCP host, the
  default, and direct, the SDK in each ``serve``: ``TRUSTY_MEMORY_SERVE_DIRECT=1``):
  spawn to the ``tools/list`` answer, the first ``tools/call`` sent right after
  ``initialize`` (write to answer), and the memory of 8 live sessions (RSS and PSS of
  each ``serve``, and of the MCP host they share);
- ``tools/call memory_recall`` and ``memory_recall_deep`` round trips through stdio at N
  drawers, from 1 session and from 16 concurrent sessions;
- ``memory_remember`` throughput with 1 session and with 16 concurrent sessions on one
  palace (each session sends one call at a time and waits, as an agent does);
- with ``--readers N``: the 16-session recall figures again once the palace has N
  readers beside its writer (``trusty-memory scale``), with new questions;
- with ``--compare-direct``: the recall and remember figures also with the SDK in every
  ``serve`` (``TRUSTY_MEMORY_SERVE_DIRECT=1``), the way ``serve`` ran before the relay.

Sessions speak raw newline-delimited JSON-RPC, so the figures are the server's, not a
client library's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from bench.harness import TOPICS, fill, running_daemon, sentence, summary
from trusty_memory.client.sync import Client

SERVE = [shutil.which("trusty-memory") or ".venv/bin/trusty-memory", "serve"]
INIT = {
    "protocolVersion": "2024-11-05",
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"},
}


class Session:
    """One ``serve`` process and a blocking JSON-RPC conversation with it."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.ids = itertools.count(1)
        self.request("initialize", INIT)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        # The edge answers initialize before the SDK has loaded; ping goes through the
        # SDK, so a session is measured only once it is fully up.
        self.request("ping", {})

    def send(self, msg: dict) -> None:
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        rid = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            msg = json.loads(self.proc.stdout.readline())
            if msg.get("id") == rid:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg["result"]

    def tool(self, name: str, **arguments) -> dict:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        return json.loads(result["content"][0]["text"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def spawn_to_initialize(n: int) -> dict:
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}) + "\n"
    ms = []
    for _ in range(n + 1):
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        proc.stdin.write(line.encode())
        proc.stdin.flush()
        proc.stdout.readline()
        ms.append((time.perf_counter() - t0) * 1000)
        proc.stdin.close()
        proc.wait(timeout=10)
    return summary(ms[1:])  # the first spawn warms the page cache


MODES = {"relay": {}, "direct": {"TRUSTY_MEMORY_SERVE_DIRECT": "1"}}


def memory_mb(pid: int) -> dict[str, float]:
    """RSS and PSS of one process, in MB (PSS shares shared pages out among their users)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in ("Rss:", "Pss:"):
            fields[parts[0][:-1].lower()] = int(parts[1]) / 1024
    return fields


def first_calls(n: int, env: dict[str, str]) -> dict:
    """Spawn -> tools/list answer, and the first tools/call sent right after initialize."""
    to_list, first = [], []
    for i in range(n + 1):
        t0 = time.perf_counter()
        proc = subprocess.Popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env={**os.environ, **env})  # fmt: skip

        def rpc(msg: dict, proc=proc) -> dict:
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            proc.stdin.flush()
            return json.loads(proc.stdout.readline()) if "id" in msg else {}

        rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        t1 = time.perf_counter()
        call = {
            "name": "memory_recall",
            "arguments": {"palace": "bench", "query": f"first call {i} {env}"},
        }
        answer = rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        assert "result" in answer, answer
        first.append((time.perf_counter() - t1) * 1000)
        rpc({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        proc.stdin.close()
        proc.wait(timeout=10)
        # spawn -> tools/list on a fresh process (initialize first, as clients do)
        t0 = time.perf_counter()
        proc = subprocess.Popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env={**os.environ, **env})  # fmt: skip
        rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}, proc)
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"}, proc)
        rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, proc)
        to_list.append((time.perf_counter() - t0) * 1000)
        proc.stdin.close()
        proc.wait(timeout=10)
    return {"spawn_to_tools_list": summary(to_list[1:]), "first_call": summary(first[1:])}


def session_memory(k: int, env: dict[str, str], config) -> dict:
    """RSS/PSS of ``k`` live sessions that each made one call, and of their MCP host."""
    sessions = [Session(env=env) for _ in range(k)]
    try:
        for s in sessions:
            s.tool("memory_recall", palace="bench", query="memory per session")
        time.sleep(1.0)
        each = [memory_mb(s.proc.pid) for s in sessions]
        with Client(config, autostart=False) as c:
            host_pid = c.status().get("mcp_host_pid")
        host = memory_mb(host_pid) if host_pid and not env else {"rss": 0.0, "pss": 0.0}
    finally:
        for s in sessions:
            s.close()
    out = {"sessions": k}
    for key in ("rss", "pss"):
        out[f"serve_{key}_each_mb"] = round(sum(m[key] for m in each) / k, 1)
        out[f"host_{key}_mb"] = round(host[key], 1)
        out[f"total_{key}_mb"] = round(sum(m[key] for m in each) + host[key], 1)
    return out


def wait_for_readers(client: Client, palace: str, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in client.status()["services"]:
            readers = sum(w.get("role") == "reader" for w in s["workers"])
            if s["name"] == f"palace:{palace}" and readers >= n:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{palace}: {n} readers did not come up")


def concurrent(sessions: list[Session], per_session, seconds: float | None, count: int | None):
    """Run ``per_session(session, i)`` in every session at once; returns latencies (ms)."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + (seconds or 1e9)

    def work(k: int, s: Session) -> None:
        i = 0
        mine = []
        while time.monotonic() < stop and (count is None or i < count):
            t = time.perf_counter()
            per_session(s, k * 1_000_000 + i)
            mine.append((time.perf_counter() - t) * 1000)
            i += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=(k, s)) for k, s in enumerate(sessions)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drawers", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--out", default="bench/out/mcp.json")
    parser.add_argument("--first-calls", type=int, default=20)
    parser.add_argument(
        "--readers",
        type=int,
        default=0,
        help="then scale the palace to N readers and run the 16-session recall figures again",
    )
    parser.add_argument(
        "--compare-direct",
        action="store_true",
        help="also run the recall and remember figures with the SDK in every serve",
    )
    args = parser.parse_args()

    results: dict = {"drawers": args.drawers}
    with running_daemon() as config:
        with Client(config, autostart=False) as c:
            c.palace_create("bench")
            fill(config, "bench", args.drawers)
        results["spawn_to_initialize"] = spawn_to_initialize(args.spawns)
        for mode, env in MODES.items():
            results[f"{mode}_sessions"] = {
                **first_calls(args.first_calls, env),
                "memory": session_memory(8, env, config),
            }

        # Every mode asks its own questions and stores its own texts: the daemon caches
        # query vectors and refuses exact duplicates, so a repeat would flatter the second.
        salt = {"mode": ""}

        def recall(s: Session, i: int) -> None:
            query = f"what about {TOPICS[i % 12]} {i}{salt['mode']}?"
            s.tool("memory_recall", palace="bench", query=query)

        def recall_deep(s: Session, i: int) -> None:
            query = f"item {i % 997} {TOPICS[i % 12]} {i}{salt['mode']}"
            s.tool("memory_recall_deep", palace="bench", query=query)

        def remember(s: Session, i: int) -> None:
            text = f"session note {i}{salt['mode']}: {sentence(i)}"
            s.tool("memory_remember", palace="tput", text=text)

        with Client(config, autostart=False) as c:
            c.palace_create("tput")
        modes = list(MODES) if args.compare_direct else ["relay"]
        for mode in modes:
            prefix = "" if mode == "relay" else "direct_"
            salt["mode"] = "" if mode == "relay" else f" ({mode})"
            one = [Session(env=MODES[mode])]
            sixteen = [Session(env=MODES[mode]) for _ in range(16)]
            recall(one[0], 0)  # warm the path
            for name, fn in (("recall", recall), ("recall_deep", recall_deep)):
                ms, _ = concurrent(one, fn, None, args.samples)
                results[f"{prefix}{name}_1_session"] = summary(ms)
                ms, _ = concurrent(sixteen, fn, None, max(args.samples // 16, 20))
                results[f"{prefix}{name}_16_sessions"] = summary(ms)
            by_sessions = {}
            for n in (1, 2, 4, 8, 16):
                ms, elapsed = concurrent(sixteen[:n], remember, args.seconds, None)
                by_sessions[n] = round(len(ms) / elapsed, 1)
                if n == 16:
                    results[f"{prefix}remember_16_sessions_latency"] = summary(ms)
            results[f"{prefix}remember_per_s_by_sessions"] = by_sessions
            results[f"{prefix}remember_ratio_16_vs_1"] = round(by_sessions[16] / by_sessions[1], 2)
            for s in one + sixteen:
                s.close()
        if args.readers:
            # The same 16-session reads with the palace's reads spread over N readers
            # beside its writer (new questions again: nothing is served from a cache).
            with Client(config, autostart=False) as c:
                c.scale("bench", args.readers)
                wait_for_readers(c, "bench", args.readers)
            salt["mode"] = f" (readers {args.readers})"
            sixteen = [Session() for _ in range(16)]
            for name, fn in (("recall", recall), ("recall_deep", recall_deep)):
                ms, elapsed = concurrent(sixteen, fn, None, max(args.samples // 16, 20))
                results[f"readers_{args.readers}_{name}_16_sessions"] = {
                    **summary(ms),
                    "calls_per_s": round(len(ms) / elapsed, 1),
                }
            for s in sixteen:
                s.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
