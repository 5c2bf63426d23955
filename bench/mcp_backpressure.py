"""Memory of ``serve`` and the MCP host under a client that never reads stdout.

    .venv/bin/python -m bench.mcp_backpressure [--requests 200000] [--seconds 60]
        [--out bench/out/mcp_backpressure.json]

``--requests 0``: the well-behaved round trips only (to compare latency before and after).

With a daemon in a temp home, in one run:

- a well-behaved session's round trips first (one request at a time, reading each
  answer): ``ping`` (answered by ``serve`` itself), ``tools/list`` with ``_meta`` (answered
  by the MCP host's SDK) and ``tools/call palace_list`` (through the daemon), p50/p99;
- then a second session whose client writes ``--requests`` requests into ``serve``'s stdin
  from a thread and never reads stdout (a third each of the three kinds above, in turn),
  for at most ``--seconds``: the peak RSS of that ``serve`` and of the MCP host (sampled
  every 0.2 s; ``serve``'s from its ``VmHWM``), and how many requests it managed to write;
- that ``serve`` killed: the host's RSS 5 s later, and a fresh session's first answers.

Why: a client that pipes requests without reading answers must be pushed back through the
pipe (its writes block), not buffered without limit in ``serve`` and in the host shared by
every session (issue 36, defect 6).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from bench.harness import running_daemon, summary
from trusty_memory.client.sync import Client

SERVE = [shutil.which("trusty-memory") or ".venv/bin/trusty-memory", "serve"]
INIT = {
    "protocolVersion": "2024-11-05",
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"},
}
KINDS = {
    "ping": ("ping", {}),
    "tools_list_host": ("tools/list", {"_meta": {}}),  # not the plain form: the SDK answers
    "palace_list": ("tools/call", {"name": "palace_list", "arguments": {}}),
}


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def spawn() -> subprocess.Popen:
    proc = subprocess.Popen(
        SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    rpc(proc, {"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": INIT})
    rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc


def rpc(proc: subprocess.Popen, msg: dict) -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()
    if "id" not in msg:
        return {}
    while True:
        answer = json.loads(proc.stdout.readline())
        if answer.get("id") == msg["id"]:
            assert "result" in answer, answer
            return answer


def round_trips(samples: int) -> dict:
    proc = spawn()
    out = {}
    try:
        for kind, (method, params) in KINDS.items():
            ms = []
            for i in range(samples + 5):
                t0 = time.perf_counter()
                rpc(proc, {"jsonrpc": "2.0", "id": i, "method": method, "params": params})
                ms.append((time.perf_counter() - t0) * 1000)
            out[kind] = summary(ms[5:])
    finally:
        proc.stdin.close()
        proc.wait(10)
    return out


def flood(requests: int, seconds: float, host_pid: int) -> dict:
    proc = spawn()
    rpc(proc, {"jsonrpc": "2.0", "id": "warm", "method": "tools/list", "params": {"_meta": {}}})
    base = {"serve_rss_mb": rss_mb(proc.pid), "host_rss_mb": rss_mb(host_pid)}
    written = [0]
    kinds = itertools.cycle(KINDS.values())

    def write() -> None:
        assert proc.stdin is not None
        try:
            for start in range(0, requests, 500):
                block = bytearray()
                for i in range(start, min(requests, start + 500)):
                    method, params = next(kinds)
                    msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
                    block += (json.dumps(msg) + "\n").encode()
                proc.stdin.write(block)
                proc.stdin.flush()
                written[0] = min(requests, start + 500)
        except (BrokenPipeError, ValueError, OSError):
            pass  # serve was killed at the end of the run

    writer = threading.Thread(target=write, daemon=True)
    started = time.monotonic()
    writer.start()
    serve_peak = host_peak = 0.0
    while time.monotonic() - started < seconds:
        serve_peak = max(serve_peak, rss_mb(proc.pid))
        host_peak = max(host_peak, rss_mb(host_pid))
        if not writer.is_alive():
            break
        time.sleep(0.2)
    for _ in range(25):  # what was read keeps being worked on for a while
        serve_peak = max(serve_peak, rss_mb(proc.pid))
        host_peak = max(host_peak, rss_mb(host_pid))
        time.sleep(0.2)
    result = {
        "requests_written": written[0],
        "all_written": not writer.is_alive(),
        "elapsed_s": round(time.monotonic() - started, 1),
        "serve_base_rss_mb": round(base["serve_rss_mb"], 1),
        "serve_peak_rss_mb": round(max(serve_peak, rss_mb(proc.pid, "VmHWM")), 1),
        "host_base_rss_mb": round(base["host_rss_mb"], 1),
        "host_peak_rss_mb": round(host_peak, 1),
    }
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    time.sleep(5.0)
    result["host_rss_5s_after_kill_mb"] = round(rss_mb(host_pid), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out", default="bench/out/mcp_backpressure.json")
    args = parser.parse_args()
    results: dict = {"requests": args.requests}
    with running_daemon() as config:
        results["round_trips"] = round_trips(args.samples)
        if not args.requests:  # the round trips alone (an A/B of latency)
            print(json.dumps(results, indent=2))
            return
        with Client(config, autostart=False) as c:
            host_pid = c.status()["mcp_host_pid"]
        results["non_reading_client"] = flood(args.requests, args.seconds, host_pid)
        t0 = time.perf_counter()
        proc = spawn()
        rpc(
            proc,
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": KINDS["palace_list"][1]},
        )
        results["next_session_first_call_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        proc.stdin.close()
        proc.wait(10)
        results["host_rss_end_mb"] = round(rss_mb(host_pid), 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
