"""A fourth retrieval set: self-contained notes written in bursts, from public sources.

    .venv/bin/python bench/burst_notes_data.py [--out bench/data/burst_notes.json] [--check]

How a coding agent writes notes at the end of a task: several in a row, each standing
alone (a decision, a version, a setting, a date, a cause), about one project or one
incident, a few seconds to two minutes apart in one room. The other notes sets were not
written this way (the generated engineering notes mix topics within a session, the project
history is one commit at a time), and deep recall's episode rules (a note written within
30 minutes after another in the same room borrows its context) meet this shape at every
note: every pair of neighbours is an episode, and no note needs its neighbour to be
understood.

Source. Each burst is the facts of one public document (a changelog, release notes, an
architecture decision record, an incident write-up; ``SOURCES`` names them), kept as facts
and written as an agent would note them, never the document's own sentences. The
questions were written with the notes, as a user asks (paraphrased: the note's rare
words are avoided where a user would not know them), each with the one note that answers
it, before any ranking rule was measured on this set; it is for judging rules, never for
choosing them (``bench/replay.py --sets bursts``).

Deterministic: timestamps come from a fixed seed (seconds to two minutes within a burst,
hours to days between bursts), and ``--check`` says whether the committed file is current.
Every note of this set is an independent note: ``bench/probe_relatedness.py`` labels every
neighbouring pair of it "not a conversation".
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eng_notes_data import dumps, write_or_check

SEED = 20261130
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "burst_notes.json"
# The authored set: what a person wrote, as data (generate() adds the times and ids).
SOURCE = Path(__file__).resolve().parent / "data" / "sources" / "burst_notes.json"
START = datetime(2026, 2, 2, 9, 5, tzinfo=UTC)

# Each burst: the prefix of its note ids, the room an agent would use, tags, where the
# facts came from, the notes in writing order, and questions as (note number, question,
# category). Categories: what (a fact), how (what to do), version (which release),
# when (a date or time), why (a cause or reason), number (a figure).
BURSTS: list[dict] = json.loads(SOURCE.read_text(encoding="utf-8"))


def generate(seed: int = SEED) -> dict:
    """The drawers in writing order (bursts a few seconds apart inside, hours to days
    between) and the questions with their gold note ids."""
    rng = random.Random(seed)
    drawers: list[dict] = []
    questions: list[dict] = []
    when = START
    for number, burst in enumerate(BURSTS):
        if number:
            when += timedelta(hours=rng.choice((3, 5, 20, 26, 49, 73)),
                              minutes=rng.randint(0, 59))  # fmt: skip
        for i, text in enumerate(burst["notes"], start=1):
            if i > 1:
                when += timedelta(seconds=rng.randint(15, 120))
            drawers.append(
                {
                    "id": f"{burst['key']}{i:02d}",
                    "text": text,
                    "room": burst["room"],
                    "tags": list(burst["tags"]),
                    "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "burst": burst["key"],
                }
            )
        for i, question, category in burst["questions"]:
            if not 1 <= i <= len(burst["notes"]):
                raise SystemExit(f"{burst['key']}: no note {i} for {question!r}")
            questions.append(
                {
                    "id": f"b{len(questions):03d}",
                    "question": question,
                    "category": category,
                    "gold": [f"{burst['key']}{i:02d}"],
                }
            )
    sources = {b["key"]: b["sources"] for b in BURSTS}
    return {"name": "burst-notes", "seed": seed, "sources": sources, "drawers": drawers,
            "questions": questions}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    args = parser.parse_args(argv)
    return write_or_check(dumps(generate()), args.out, args.check)


if __name__ == "__main__":
    sys.exit(main())
