"""Mining speed: notes/s of ``trusty-memory mine`` on a generated Claude Code transcript,
against a fresh home's daemon, beside the embedder's own batch ceiling measured in the
same run (``palace_import`` of the same texts, pre-batched, no parsing), and the bulk
lane's (``embed_bulk`` alone, where mine embeds): mining is embedding-bound, so the
ratios say what the capture layer costs.

    .venv/bin/python bench/mine.py --exchanges 10000 [--reply-sentences 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import sentence
from tests.capture.claude_code import transcript, write_transcript


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exchanges", type=int, default=2000)
    ap.add_argument("--reply-sentences", type=int, default=3)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tmb-"))
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    # Each reply: a line, then --reply-sentences sentences of a note (~90 characters
    # each). 0 gives one-line exchanges, where the model is cheapest and what the capture
    # layer costs shows most; an assistant's replies usually run to a few sentences.
    qa = [
        (
            f"Question {i}: where is service {i}?",
            " ".join(
                [f"Service {i} runs on host h{i}, port {i}."]
                + [sentence(i + j) for j in range(args.reply_sentences)]
            ),
        )
        for i in range(args.exchanges)
    ]
    path = write_transcript(home / "t" / f"{uuid.uuid4()}.jsonl", transcript("s", "/w/b", qa))
    cli = [sys.executable, "-m", "trusty_memory.client.cli.main"]
    from trusty_memory.client.sync import Client  # after the env: the home is read on use

    os.environ["TRUSTY_MEMORY_HOME"] = str(home)
    drawers = [{"content": f"User: {q}\n\nAssistant: {a}"} for q, a in qa]
    with Client() as c:
        c.palace_create("ceiling")
        t0 = time.monotonic()
        for i in range(0, len(drawers), 100):
            c.call(
                "palace_import",
                {"drawers": drawers[i : i + 100], "triples": []},
                palace="ceiling",
                timeout=600,
            )
        ceiling = len(drawers) / (time.monotonic() - t0)
        # The bulk lane's own ceiling: mine embeds there (niced), so this is the embedder
        # rate mining can reach. Other texts of the same shape: the lane caches vectors.
        t0 = time.monotonic()
        for i in range(0, len(drawers), 100):
            texts = ["Ceiling " + d["content"] for d in drawers[i : i + 100]]
            c.call("embed_bulk", {"texts": texts}, timeout=600)
        bulk_ceiling = len(drawers) / (time.monotonic() - t0)
    t0 = time.monotonic()
    r = subprocess.run(
        [*cli, "mine", "bench", str(path), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    mined = time.monotonic() - t0
    report = json.loads(r.stdout)
    rate = report["stored"] / mined
    print(
        json.dumps(
            {
                "exchanges": args.exchanges,
                "reply_sentences": args.reply_sentences,
                "mine_s": round(mined, 2),
                "mine_per_s": round(rate, 1),
                "ceiling_per_s": round(ceiling, 1),
                "ratio": round(rate / ceiling, 3),
                "bulk_lane_ceiling_per_s": round(bulk_ceiling, 1),
                "ratio_to_bulk_lane": round(rate / bulk_ceiling, 3),
                "load": round(os.getloadavg()[0], 1),
            }
        )
    )
    subprocess.run([*cli, "stop"], env=env, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
