"""Two builds of ``trusty-memory serve`` side by side, their calls interleaved (issue 41).

    .venv/bin/python -m bench.serve_ab --a DIR_A --b DIR_B [--drawers 2000] [--calls 300]

Why: a cut of a millisecond is lost in this machine's noise when the old and the new path
run minutes apart. Here each build gets its own real daemon, in its own throw-away home,
started with ``PYTHONPATH=DIR`` (a build installed by ``pip install --no-deps --target
DIR .``; ``--a ''`` runs the working tree), and its own ``serve --palace`` session through
the official SDK client. Both palaces are filled alike; the SDK is given time to load in
both hosts; then every round asks each build the same new question, in an order that
alternates, with ``memory_recall``, then ``memory_recall_deep``, then stores a note with
``memory_remember``. So both builds see the same load at the same moments.

Prints a table of p50 / p99 per tool and build, and the ratio b / a; ``--out`` also
writes it as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import TOPICS, daemon_process, fill, summary

PALACE = "ab"
TOOLS = ("memory_recall", "memory_recall_deep", "memory_remember")
SDK_SETTLE_S = 12.0  # the MCP host loads its SDK 10 s after it starts (mcp/plain_calls.py)


def build_env(home: Path, pythonpath: str) -> dict[str, str]:
    env = dict(os.environ, TRUSTY_MEMORY_HOME=str(home))
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


@contextlib.contextmanager
def daemon(pythonpath: str) -> Iterator[tuple[Any, dict[str, str]]]:
    """A daemon of one build in a temp home; its config and the environment to reach it."""
    from trusty_memory.common.config import load_config

    home = Path(tempfile.mkdtemp(prefix="tmab-", dir="/tmp"))
    env = build_env(home, pythonpath)
    saved = os.environ.get("TRUSTY_MEMORY_HOME")
    os.environ["TRUSTY_MEMORY_HOME"] = str(home)
    try:
        config = load_config()
    finally:
        if saved is None:
            os.environ.pop("TRUSTY_MEMORY_HOME")
        else:
            os.environ["TRUSTY_MEMORY_HOME"] = saved
    try:
        with daemon_process(config, env):
            yield config, env
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def drive(envs: list[dict[str, str]], calls: int, warmup: int) -> list[dict[str, list]]:
    """Interleaved rounds over one SDK session per build; latencies in ms per tool."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    serve = shutil.which("trusty-memory") or ".venv/bin/trusty-memory"
    times: list[dict[str, list]] = [{tool: [] for tool in TOOLS} for _ in envs]
    async with contextlib.AsyncExitStack() as stack:
        errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 (closed by the stack)
        sessions = []
        for env in envs:
            params = StdioServerParameters(
                command=serve, args=["serve", "--palace", PALACE], env=env
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        for i in range(warmup + calls):
            topic = TOPICS[i % len(TOPICS)]
            question = f"what did we settle about {topic} in review {i} of run {os.getpid()}"
            note = f"Round {i}: {topic} came up again in review {i}, run {os.getpid()}."
            order = range(len(sessions)) if i % 2 else reversed(range(len(sessions)))
            for k in order:
                for tool, arguments in (
                    ("memory_recall", {"query": question, "top_k": 5}),
                    ("memory_recall_deep", {"query": question + " deep", "top_k": 5}),
                    ("memory_remember", {"text": note}),
                ):
                    started = time.perf_counter()
                    result = await sessions[k].call_tool(tool, arguments)
                    if result.is_error:
                        raise RuntimeError(f"{tool} failed: {result.content}")
                    if i >= warmup:
                        times[k][tool].append((time.perf_counter() - started) * 1e3)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="PYTHONPATH of build A ('' = this tree)")
    parser.add_argument("--b", required=True, help="PYTHONPATH of build B")
    parser.add_argument("--drawers", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    load = os.getloadavg()
    with contextlib.ExitStack() as stack:
        started = time.monotonic()
        envs = []
        for path in (args.a, args.b):
            config, env = stack.enter_context(daemon(path))
            from trusty_memory.client.sync import Client

            with Client(config, autostart=False) as client:
                client.palace_create(PALACE)
            fill(config, PALACE, args.drawers)
            envs.append(env)
        time.sleep(max(0.0, SDK_SETTLE_S - (time.monotonic() - started)))
        times = asyncio.run(drive(envs, args.calls, args.warmup))

    report: dict[str, Any] = {
        "a": args.a, "b": args.b, "drawers": args.drawers, "calls": args.calls,
        "load": [round(x, 2) for x in load], "tools": {},
    }  # fmt: skip
    print(f"A = {args.a or 'working tree'}; B = {args.b or 'working tree'}; load {report['load']}")
    print("| tool | A p50 / p99 ms | B p50 / p99 ms | B / A p50 |\n|---|---:|---:|---:|")
    for tool in TOOLS:
        a, b = summary(times[0][tool]), summary(times[1][tool])
        report["tools"][tool] = {"a": a, "b": b}
        ratio = b["p50_ms"] / a["p50_ms"]
        print(
            f"| {tool} | {a['p50_ms']} / {a['p99_ms']} | {b['p50_ms']} / {b['p99_ms']} "
            f"| {ratio:.3f} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
