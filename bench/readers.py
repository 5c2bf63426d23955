"""Readers benchmark: one hot palace, 16 sessions, with 0..3 reader processes beside its writer.

    .venv/bin/python -m bench.readers [--drawers 100000] [--sessions 16] [--seconds 20]
                                      [--readers 0,1,2,3] [--out FILE]

One run, against a real daemon in a throw-away home:

1. A palace of N drawers with vectors that look like real ones (``bench/scale.py``'s
   generator: LoCoMo sentences embedded once, blended, loaded by ``trusty-memory import``).
2. For each reader count: ``trusty-memory scale`` to it, then ``sessions`` threads, each its
   own client, call ``memory_recall_deep`` with LoCoMo questions for ``seconds``: calls/s,
   p50/p99, and the CPU each actor spent per call (broker, embedder, writer, readers,
   from /proc), which is what a projection to a bigger host needs. Every question is
   embedded once before the first phase, so each phase finds them in the embedder's cache
   alike: the phases differ only in the palace side, which is what readers scale.
3. ``memory_remember`` throughput of ``sessions`` writers with 0 and with 2 readers up
   (new texts in each phase: each one costs the model).
4. Read-your-writes: while ``sessions`` writers load the palace, one session writes and
   another polls with ``memory_list`` until it sees the write (the lag another session
   waits, p50/p99), and a session's own read right after its write (what the reader's
   catch-up adds to it).

Output: JSON (``--out``, default ``bench/results/readers-<N>.json``) and a table.
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
from bench.scale import base_vectors, locomo_texts, write_jsonl
from trusty_memory.client.sync import Client
from trusty_memory.common.protocol import TrustyError

PALACE = "hot"
LAG_LIMIT_S = 10.0  # a write another session has not seen by then counts as unseen
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def actors(client: Client) -> dict[str, int]:
    """Pid per actor: the broker, the embedder, the palace's writer and readers."""
    status = client.status()
    found = {"broker": status["pid"]}
    for s in status["services"]:
        for i, w in enumerate(s["workers"]):
            if s["name"] == "embedder":
                found[f"embedder{i}"] = w["pid"]
            elif s["name"] == f"palace:{PALACE}":
                found[w["role"] if w["role"] == "writer" else f"reader{w['pid']}"] = w["pid"]
    return found


def wait_for_readers(client: Client, n: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        roles = [k for k in actors(client) if k.startswith("reader")]
        if len(roles) == n:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{n} readers did not come up")


def load(config, sessions: int, seconds: float, call) -> tuple[list[float], int]:
    """``sessions`` threads running ``call(client, i)`` for ``seconds``: latencies and errors."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def session(k: int) -> None:
        mine = []
        with Client(config, autostart=False) as c:
            i = k
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    call(c, i)
                    mine.append((time.perf_counter() - t0) * 1000)
                except TrustyError:
                    with lock:
                        errors[0] += 1
                i += sessions
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=session, args=(k,)) for k in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors[0]


def measured(client: Client, config, sessions: int, seconds: float, call) -> dict:
    """Run a load and report calls/s, latency and CPU ms per call per actor."""
    pids = actors(client)
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    own = os.times()
    t0 = time.monotonic()
    latencies, errors = load(config, sessions, seconds, call)
    wall = time.monotonic() - t0
    own_after = os.times()
    calls = max(1, len(latencies))
    cpu = {name: (cpu_s(pid) - before[name]) * 1000 / calls for name, pid in pids.items()}
    cpu["clients"] = (own_after.user - own.user + own_after.system - own.system) * 1000 / calls
    readers_cpu = sum(v for k, v in cpu.items() if k.startswith("reader"))
    cpu = {k: round(v, 3) for k, v in cpu.items() if not k.startswith("reader")}
    cpu["readers"] = round(readers_cpu, 3)
    return {
        "calls_per_s": round(len(latencies) / wall, 1),
        "errors": errors,
        **summary(latencies),
        "cpu_ms_per_call": cpu,
    }


def read_your_writes(config, sessions: int, seconds: float) -> dict:
    """Lag for another session to see a write, and a session's own read after its write,
    while ``sessions`` writers keep the palace busy."""
    stop = threading.Event()

    def background(k: int) -> None:
        with Client(config, autostart=False) as c:
            i = 0
            while not stop.is_set():
                c.remember(PALACE, f"background note {k}-{i} about the build farm")
                i += 1

    threads = [threading.Thread(target=background, args=(k,)) for k in range(sessions)]
    for t in threads:
        t.start()
    other_lag, own_read, unseen = [], [], 0
    end = time.monotonic() + seconds
    with Client(config, autostart=False) as me, Client(config, autostart=False) as other:
        i = 0
        while time.monotonic() < end:
            stored = me.remember(PALACE, f"marker {i}: deploy window moved", tags=[f"m{i}"])
            acked = time.perf_counter()
            t0 = time.perf_counter()
            me.list(PALACE, tag=f"m{i}", limit=1)
            own_read.append((time.perf_counter() - t0) * 1000)
            give_up = time.monotonic() + LAG_LIMIT_S
            while time.monotonic() < give_up:
                drawers = other.list(PALACE, tag=f"m{i}", limit=1).drawers
                if drawers and drawers[0].drawer_id == stored.drawer_id:
                    other_lag.append((time.perf_counter() - acked) * 1000)
                    break
            else:
                unseen += 1
            i += 1
    stop.set()
    for t in threads:
        t.join()
    return {
        "other_session_lag": summary(other_lag),
        "own_read_after_write": summary(own_read),
        "unseen_after_limit": unseen,
    }


def run(args) -> dict:
    turns, questions = locomo_texts()
    readers = [int(x) for x in args.readers.split(",")]
    result: dict = {
        "drawers": args.drawers,
        "sessions": args.sessions,
        "seconds": args.seconds,
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python -m bench.readers", *sys.argv[1:]]),
        "recall_deep": {},
        "remember": {},
    }
    env = {"TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S": "120", "TRUSTY_MEMORY_DREAMER_ENABLED": "0"}
    with running_daemon(env) as config, Client(config, autostart=False) as admin:
        base = base_vectors(admin, turns)
        data = Path(tempfile.mkdtemp(prefix="tmr-")) / "palace.jsonl"
        write_jsonl(data, base, turns, args.drawers)
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "trusty_memory.client.cli.main", "import", PALACE, str(data)],
            check=True,
            capture_output=True,
        )
        result["import_s"] = round(time.monotonic() - t0, 1)
        data.unlink()

        def deep(c: Client, i: int) -> None:
            c.recall(PALACE, questions[i % len(questions)], top_k=10, deep=True)

        for start in range(0, len(questions), 128):  # see the module doc, step 2
            admin.call("embed", {"texts": questions[start : start + 128]}, timeout=180)

        for n in readers:
            admin.scale(PALACE, n)
            wait_for_readers(admin, n)
            load(config, args.sessions, 2.0, deep)  # warm every worker's caches
            result["recall_deep"][n] = measured(admin, config, args.sessions, args.seconds, deep)
            print(f"readers {n}: {result['recall_deep'][n]}", file=sys.stderr)
        for n in (0, 2):
            admin.scale(PALACE, n)
            wait_for_readers(admin, n)

            def remember(c: Client, i: int, n: int = n) -> None:
                c.remember(PALACE, f"session note {i} with {n} readers: build {i} passed")

            result["remember"][n] = measured(admin, config, args.sessions, args.seconds, remember)
            print(f"remember, readers {n}: {result['remember'][n]}", file=sys.stderr)
        result["read_your_writes"] = read_your_writes(config, args.sessions, args.seconds)
        admin.scale(PALACE, 0)
    deep_rates = {n: r["calls_per_s"] for n, r in result["recall_deep"].items()}
    if 0 in deep_rates and 2 in deep_rates:
        result["deep_ratio_2_vs_0"] = round(deep_rates[2] / deep_rates[0], 2)
    if len(result["remember"]) == 2:
        r = result["remember"]
        result["remember_ratio_2_vs_0"] = round(r[2]["calls_per_s"] / r[0]["calls_per_s"], 2)
    return result


def table(r: dict) -> str:
    lines = [
        f"readers bench: {r['drawers']} drawers, {r['sessions']} sessions, {r['machine']}",
        "recall_deep   readers  calls/s   p50 ms   p99 ms   CPU ms/call (writer, readers, "
        "embedder, broker, clients)",
    ]
    for n, x in r["recall_deep"].items():
        c = x["cpu_ms_per_call"]
        lines.append(
            f"              {n:>7}  {x['calls_per_s']:7.1f}  {x['p50_ms']:7.1f}  {x['p99_ms']:7.1f}"
            f"   {c.get('writer', 0):.2f}, {c['readers']:.2f}, {c.get('embedder0', 0):.2f},"
            f" {c['broker']:.2f}, {c['clients']:.2f}"
        )
    for n, x in r["remember"].items():
        lines.append(f"remember      {n:>7}  {x['calls_per_s']:7.1f}  {x['p50_ms']:7.1f}  "
                     f"{x['p99_ms']:7.1f}")  # fmt: skip
    ryw = r["read_your_writes"]
    lines.append(
        f"another session sees a write after p50 {ryw['other_session_lag']['p50_ms']:.1f} ms,"
        f" p99 {ryw['other_session_lag']['p99_ms']:.1f} ms; own read after write"
        f" p50 {ryw['own_read_after_write']['p50_ms']:.1f} ms"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drawers", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--readers", default="0,1,2,3")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    result = run(args)
    out = Path(args.out or f"bench/results/readers-{args.drawers}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
