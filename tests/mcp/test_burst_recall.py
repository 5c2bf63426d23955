"""Deep recall on notes an agent writes in a burst, through ``trusty-memory serve``.

An agent stores one project's notes one after the other in one room (``serve`` stamps
each with the time it arrives), each naming its own subject (the PostgreSQL 16 burst of
``bench/data/burst_notes.json``: facts from the release notes), then asks paraphrased
questions. Notes that stand alone borrow nothing from their neighbours
(``workers/store/relatedness.py``), so the deeper tool is not the worse first answer: it
puts the right note first for every question (when every note borrowed its neighbour's
meaning and words, it did for 9 of the 12, ``bench/replay.py``'s ``before``). Real
``serve``, real daemon, real model.

Covers: workers/store/relatedness.py workers/store/context.py workers/store/ranking.py
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.mcp.conftest import sdk_session, short_tmp, stop_daemon_in, tool_json

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "burst_notes.json"
PALACE = "pg16-notes"


@pytest.fixture
def home():
    path = short_tmp("tmb-")
    yield path
    stop_daemon_in(path)


def burst(key: str) -> tuple[list[dict], list[dict]]:
    data = json.loads(DATA.read_text())
    notes = [d for d in data["drawers"] if d["burst"] == key]
    ids = {d["id"] for d in notes}
    return notes, [q for q in data["questions"] if q["gold"][0] in ids]


def test_deep_recall_puts_the_right_note_first_for_a_burst_of_notes(home):
    notes, questions = burst("pg")
    assert len(notes) >= 15 and len(questions) >= 12

    async def go() -> dict[str, list[bool]]:
        async with sdk_session(home) as s:

            async def call(tool: str, **args):
                return tool_json(await s.call_tool(tool, args))

            await call("palace_create", name=PALACE, description="PostgreSQL 16 upgrade")
            ids = {}
            for note in notes:
                stored = await call(
                    "memory_remember",
                    palace=PALACE,
                    text=note["text"],
                    room=note["room"],
                    tags=note["tags"],
                )
                ids[stored["drawer_id"]] = note["id"]
            first: dict[str, list[bool]] = {"memory_recall": [], "memory_recall_deep": []}
            for q in questions:
                for tool in first:
                    hits = (await call(tool, palace=PALACE, query=q["question"], top_k=5))[
                        "results"
                    ]
                    first[tool].append(bool(hits) and ids[hits[0]["drawer_id"]] == q["gold"][0])
            return first

    first = asyncio.run(go())
    plain, deep = first["memory_recall"], first["memory_recall_deep"]
    missed = [q["question"] for q, hit in zip(questions, deep, strict=True) if not hit]
    assert not missed, missed
    assert sum(deep) >= sum(plain)
