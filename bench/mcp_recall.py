"""Recall and deep recall on the notes sets through ``trusty-memory serve``, fed only what an
MCP client can send.

    .venv/bin/python -m bench.mcp_recall [--sets eng,eng7,eng99,history,bursts]
        [--variants on,off] [--out bench/out/mcp_recall.json] [--table]

``bench/replay.py`` and ``bench/eng_notes.py`` store each note with the ``created_at`` of
its set, which the Python client can send and ``memory_remember`` cannot. An agent's notes
are stamped with the moment they arrive, so a set written by an agent in one sitting is,
by the clock, one long burst: every note in a room is in one episode with the notes
written before and after it. That is the case deep recall has to get right, and this is
its measure as an agent meets it.

Per variant, a real daemon in a throw-away home and one session of the official MCP SDK
client with ``trusty-memory serve``; per set, ``palace_create``, every note through
``memory_remember`` (``text``, ``room``, ``tags``: nothing else) one after another as one
agent writes them, then every question through ``memory_recall`` and
``memory_recall_deep`` (``top_k`` 10). R@k is the share of a question's gold notes among
the first k, as the other scripts count it. Beside R@k, per set: the questions where deep
recall ranks the first gold note lower than plain recall does, and higher (``worse`` /
``better``: the issue's "deep ranked the right note lower on 13 questions and higher on
none").

Variants (``--variants``): ``on``, the default configuration; ``off``,
``[palace] context_vectors = false`` (every drawer its own vector and no context words).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay
from eng_notes import recall_at
from locomo import Daemon

TOOLS = {"plain": "memory_recall", "deep": "memory_recall_deep"}
VARIANTS = {"on": "", "off": "[palace]\ncontext_vectors = false\n"}
NOTE_SETS = tuple(replay.NOTE_SETS)
KS = (1, 5, 10)


def first_rank(gold: list[str], ranked: list[str]) -> int:
    """Where the first gold note stands (1-based); one past the list when none is in it."""
    return next((i + 1 for i, r in enumerate(ranked) if r in gold), len(ranked) + 1)


def tool_json(result: Any) -> dict:
    if result.is_error:
        raise RuntimeError(result.content[0].text)
    return json.loads(result.content[0].text)


async def run_set(session: ClientSession, name: str) -> dict:
    """Store set ``name`` in its own palace and ask its questions with both tools."""
    data = replay.note_set(name)
    palace = f"mcp-{name}"

    async def call(tool: str, **args: Any) -> dict:
        return tool_json(await session.call_tool(tool, args))

    await call("palace_create", name=palace, description=f"notes set {name}")
    ids: dict[str, str] = {}
    t0 = time.monotonic()
    for note in data["drawers"]:
        stored = await call(
            "memory_remember", palace=palace, text=note["text"], room=note["room"],
            tags=note["tags"],
        )  # fmt: skip
        ids[stored["drawer_id"]] = note["id"]
    write_s = time.monotonic() - t0
    scores: dict[str, list[dict[int, float]]] = {m: [] for m in TOOLS}
    ranks: dict[str, list[int]] = {m: [] for m in TOOLS}
    ms: dict[str, list[float]] = {m: [] for m in TOOLS}
    for q in data["questions"]:
        for method, tool in TOOLS.items():
            t1 = time.perf_counter()
            hits = (await call(tool, palace=palace, query=q["question"], top_k=10))["results"]
            ms[method].append((time.perf_counter() - t1) * 1000)
            ranked = [ids[h["drawer_id"]] for h in hits]
            scores[method].append({k: recall_at(q["gold"], ranked, k) for k in KS})
            ranks[method].append(first_rank(q["gold"], ranked))
    pairs = list(zip(ranks["plain"], ranks["deep"], strict=True))
    return {
        "notes": len(data["drawers"]),
        "questions": len(data["questions"]),
        "write_s": round(write_s, 1),
        **{
            method: {
                **{f"r{k}": round(100 * sum(s[k] for s in rows) / len(rows), 1) for k in KS},
                "p50_ms": round(statistics.median(ms[method]), 2),
            }
            for method, rows in scores.items()
        },
        "worse": sum(1 for p, d in pairs if d > p),
        "better": sum(1 for p, d in pairs if d < p),
    }


async def run_variant(home: Path, sets: list[str]) -> dict:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "trusty_memory.client.mcp.server"],
        env=dict(os.environ),
    )
    results = {}
    with open(home / "serve-stderr.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for name in sets:
                results[name] = await run_set(session, name)
                print(f"{home.name} {name}: {results[name]}", file=sys.stderr)
    return results


def table(results: dict[str, dict]) -> str:
    variants = list(results)
    head = ["set", "plain recall"] + [f"deep, context {v}" for v in variants]
    head += [f"deep worse / better ({v})" for v in variants]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in next(iter(results.values())):
        first = results[variants[0]][name]
        cells = [name, "/".join(str(first["plain"][f"r{k}"]) for k in KS)]
        cells += ["/".join(str(results[v][name]["deep"][f"r{k}"]) for k in KS) for v in variants]
        cells += [f"{results[v][name]['worse']} / {results[v][name]['better']}" for v in variants]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(NOTE_SETS))
    ap.add_argument("--variants", default="on,off")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    sets = args.sets.split(",")
    results: dict[str, dict] = {}
    for variant in args.variants.split(","):
        home = Path(tempfile.mkdtemp(prefix=f"tmr-{variant}-", dir="/tmp"))
        (home / "config.toml").write_text(VARIANTS[variant])
        try:
            with Daemon(home):
                results[variant] = asyncio.run(run_variant(home, sets))
        finally:
            shutil.rmtree(home, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results) if args.table else json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
