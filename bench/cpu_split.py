"""Where the CPU goes while N MCP sessions remember at once: a profile by actor.

    .venv/bin/python -m bench.cpu_split [--sessions 16] [--seconds 10]

Throughput on a 2-core machine is bounded by CPU, so the question behind every
throughput figure is which process spends it. This runs the same load as the remember
sweep in ``bench.mcp_stdio`` (each session one call at a time, as agents do) and reads
each process's user+system CPU time from ``/proc/<pid>/stat`` before and after: the
``serve`` front ends, the broker, the palace worker and the embedder. Output: calls/s,
CPU seconds per actor, and CPU milliseconds per remember for each, as JSON.

For a function-level view of one actor, run py-spy against the pid this prints, e.g.
``py-spy record -d 10 -p PID -f raw -o embedder.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.harness import running_daemon, sentence, worker_pids
from bench.mcp_stdio import Session, concurrent
from trusty_memory.client.sync import Client

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (fields 14 and 15 of /proc/pid/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def actors(client: Client, sessions: list[Session]) -> dict[str, list[int]]:
    status = client.status()
    return {
        "serve (all sessions)": [s.proc.pid for s in sessions],
        "broker": [status["pid"]],
        "embedder": worker_pids(status, "embedder"),
        "palace worker": worker_pids(status, "palace:tput"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    with running_daemon() as config, Client(config, autostart=False) as client:
        client.palace_create("tput")
        client.remember("tput", "warm-up: loads the model and opens the palace")
        sessions = [Session() for _ in range(args.sessions)]

        def remember(s: Session, i: int) -> None:
            s.tool("memory_remember", palace="tput", text=f"session note {i}: {sentence(i)}")

        concurrent(sessions, remember, 2.0, None)  # warm every session's path
        groups = actors(client, sessions)
        before = {name: sum(cpu_s(p) for p in pids) for name, pids in groups.items()}
        t0 = time.monotonic()
        ms, _ = concurrent(sessions, remember, args.seconds, None)
        wall = time.monotonic() - t0
        after = {name: sum(cpu_s(p) for p in pids) for name, pids in groups.items()}
        for s in sessions:
            s.close()
    calls = len(ms)
    used = {name: after[name] - before[name] for name in groups}
    result = {
        "sessions": args.sessions,
        "wall_s": round(wall, 2),
        "remembers": calls,
        "remembers_per_s": round(calls / wall, 1),
        "cores_busy": round(sum(used.values()) / wall, 2),
        "cpu_s": {name: round(v, 2) for name, v in used.items()},
        "cpu_ms_per_remember": {name: round(1000 * v / calls, 2) for name, v in used.items()},
        "pids": groups,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
