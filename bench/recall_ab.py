"""Plain and deep recall through the Python client, to compare two builds back to back.

    PYTHONPATH=DIR .venv/bin/python -m bench.recall_ab LABEL [--drawers 2000] [--queries 300]

A real daemon in a throw-away home (``harness.running_daemon``), a palace filled with
``--drawers`` look-alike notes by 8 writers, 20 warm-up deep recalls, then ``--queries``
new questions asked one at a time with ``memory_recall`` and again with
``memory_recall_deep``. Prints one JSON line: LABEL and each kind's p50/p99/mean.

For a refactor, install each commit with ``pip install --no-deps --target DIR .`` and run
them in turns (old, new, old, new, ...) with ``PYTHONPATH=DIR`` in front: this machine's
noise moves a single run by 20%, so a difference counts only if it holds in every turn.
"""

from __future__ import annotations

import argparse
import json
import time

from bench.harness import TOPICS, fill, running_daemon, summary
from trusty_memory.client.sync import Client

PALACE = "bench"


def measure(drawers: int, queries: int) -> dict[str, dict]:
    with running_daemon() as config:
        with Client(config, autostart=False) as client:
            client.palace_create(PALACE)
        fill(config, PALACE, drawers, clients=8)
        with Client(config, autostart=False) as client:
            for i in range(20):
                client.recall(PALACE, f"warm {i}", deep=True)
            out = {}
            for deep in (False, True):
                ms = []
                for i in range(queries):
                    topic = TOPICS[i % len(TOPICS)]
                    question = f"what did we decide about {topic} item {i * 13 % 1000}"
                    t0 = time.perf_counter()
                    client.recall(PALACE, question, deep=deep)
                    ms.append((time.perf_counter() - t0) * 1000)
                out["deep" if deep else "plain"] = summary(ms)
            return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label")
    parser.add_argument("--drawers", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps({"label": args.label, **measure(args.drawers, args.queries)}))


if __name__ == "__main__":
    main()
