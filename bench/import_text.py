"""Importing notes that carry no vectors (someone moving in): notes/s, against the model.

    .venv/bin/python -m bench.import_text [--notes 2000] [--out FILE]

A real daemon in a throw-away home. ``--notes`` distinct short notes (``harness.sentence``,
~20 words, as agents' notes are) written as a file someone made by hand or converted:
``content``, ``room`` and ``tags`` only, no ``drawer_id``, no vector. The real
``trusty-memory --json import`` command loads it into a new palace (each batch is embedded
by the daemon's embedder, then stored and indexed); notes/s is notes over its wall time.
The ceiling beside it: the same embedder asked for as many other notes of the same kind
through the daemon's ``embed`` method, 256 at a time (the palace's own chunk), which is
all the model can do here; the import's share of it is what storing and indexing cost.
The progress lines the command wrote (it has no terminal here) are counted too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import running_daemon, sentence
from trusty_memory.client.sync import Client

PALACE = "moved-in"
EMBED_CHUNK = 256  # workers/store/bulk.py's texts per embedder call


def notes(start: int, n: int) -> list[dict]:
    return [
        {"content": sentence(i), "room": "Backend" if i % 3 else "Planning", "tags": [f"t{i % 5}"]}
        for i in range(start, start + n)
    ]


def run(n: int) -> dict:
    out: dict = {
        "benchmark": "text import (no vectors) against the embedder's ceiling",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "notes": n,
    }
    with running_daemon() as config, Client(config, autostart=False) as client:
        client.call("embed", {"texts": ["warm-up"]}, timeout=180)  # the model is loaded
        home = Path(os.environ["TRUSTY_MEMORY_HOME"])
        path = home / "moving-in.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in notes(0, n)))
        cmd = [sys.executable, "-m", "trusty_memory.client.cli.main", "--json", "import"]
        t0 = time.monotonic()
        done = subprocess.run([*cmd, PALACE, str(path)], capture_output=True, env=os.environ)
        import_s = time.monotonic() - t0
        if done.returncode != 0:
            raise RuntimeError(f"import failed: {done.stderr.decode()[-2000:]}")
        report = json.loads(done.stdout)
        assert report["imported"] == n, report
        progress = [x for x in done.stderr.decode().splitlines() if x.startswith("import ")]
        out["import"] = {
            "seconds": round(import_s, 1),
            "notes_per_s": round(n / import_s, 1),
            "progress_lines": len(progress),
            "last_progress_line": progress[-1] if progress else None,
        }
        # Re-running the same file: every line skipped by its derived id, nothing embedded.
        t0 = time.monotonic()
        again = subprocess.run([*cmd, PALACE, str(path)], capture_output=True, env=os.environ)
        report = json.loads(again.stdout)
        assert report["imported"] == 0 and report["skipped_existing"] == n, report
        out["reimport_s"] = round(time.monotonic() - t0, 1)
        texts = [x["content"] for x in notes(n, n)]  # others: the embedder's cache is cold
        t0 = time.monotonic()
        for start in range(0, n, EMBED_CHUNK):
            client.call("embed", {"texts": texts[start : start + EMBED_CHUNK]}, timeout=300)
        embed_s = time.monotonic() - t0
        out["embedder"] = {"seconds": round(embed_s, 1), "texts_per_s": round(n / embed_s, 1)}
        out["share_of_ceiling"] = round(out["import"]["notes_per_s"] / (n / embed_s), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.import_text", description=__doc__.split("\n")[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("bench/results/import-text.json"))
    args = parser.parse_args(argv)
    result = run(args.notes)
    result["command"] = " ".join(["bench.import_text", *(argv or sys.argv[1:])])
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
