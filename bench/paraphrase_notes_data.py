"""Retrieval sets of standalone notes asked about in other words (``paraphrase``, ``reworded``).

    .venv/bin/python bench/paraphrase_notes_data.py [--set paraphrase|reworded] [--out PATH]
        [--check]

What a user of a memory does most: an agent noted a fact weeks ago in the project's own
words (a table name, a flag, a vendor, a version), and a person asks for it later in
theirs ("what happens to a payment callback that keeps failing?" for a note about Stripe
webhooks and a dead_letter table). The other notes sets mostly ask with the note's rare
words, which BM25 rewards; here every question was written to avoid each word that makes
its note distinctive (names, identifiers, numbers, the note's own verbs where a synonym is
natural), so only meaning connects them, while the notes of one project share its common
words (service, deploy, config, the project's name). Keyword matches on such words are the
incidental evidence deep recall must not trust over meaning (issue: "deep recall that is
never the worse first answer").

Five projects an agent might work on (a Go billing service, a React front end, a Python
data pipeline, the infrastructure, a Rust command-line tool), sixteen notes each, written
as an agent notes at the end of a task: in bursts of a few, seconds to two minutes apart,
in the project's room, every note standing alone. The notes and the questions were
written together, before any ranking rule was measured on this set; it is for judging
rules, never for choosing them. Deterministic: timestamps come from a fixed seed, and
``--check`` says whether the committed file is current.

``reworded`` is a second such set from another hand and other kinds of work (a mobile app,
an ML ranker, an on-call process, a support desk's contracts, sensor firmware, a docs
site; 89 notes, some of two or three sentences, 71 questions, some put as a worry or a
task), authored after the first set's results were known but before any rule was
measured on it, so that a choice made while one of the two is left out still has its kind
of question in training. Same generator, its own seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eng_notes_data import dumps, write_or_check

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class NoteSet:
    """One authored set: its source file (what a person wrote, as data; ``generate`` adds
    the times and ids), where the generated set goes, its seed and first note's time."""

    name: str
    seed: int
    start: datetime
    question_prefix: str

    @property
    def source(self) -> Path:
        return DATA / "sources" / f"{self.name}_notes.json"

    @property
    def out(self) -> Path:
        return DATA / f"{self.name}_notes.json"


SETS = {
    "paraphrase": NoteSet("paraphrase", 20261128, datetime(2026, 3, 2, 10, 12, tzinfo=UTC), "p"),
    "reworded": NoteSet("reworded", 20261129, datetime(2026, 5, 11, 9, 40, tzinfo=UTC), "r"),
}
SEED = SETS["paraphrase"].seed
DEFAULT_OUT = SETS["paraphrase"].out


def projects(name: str = "paraphrase") -> list[dict]:
    """Each project of a set: the prefix of its note ids, its room, tags, the notes in
    writing order (each burst a list of notes), and questions as (note number, question).
    Note numbers count from 1 across the project's bursts."""
    return json.loads(SETS[name].source.read_text(encoding="utf-8"))


def generate(seed: int | None = None, name: str = "paraphrase") -> dict:
    """The drawers in writing order and the questions with their gold note ids. Projects
    interleave by burst, as work moves between them: a burst of one, then of another."""
    spec = SETS[name]
    seed = spec.seed if seed is None else seed
    authored = projects(name)
    rng = random.Random(seed)
    drawers: list[dict] = []
    questions: list[dict] = []
    when = spec.start
    rounds = max(len(p["bursts"]) for p in authored)
    numbers = {p["key"]: 0 for p in authored}
    for r in range(rounds):
        order = list(authored)
        rng.shuffle(order)
        for project in order:
            if r >= len(project["bursts"]):
                continue
            when += timedelta(hours=rng.choice((1, 2, 4, 19, 22, 44)),
                              minutes=rng.randint(0, 59))  # fmt: skip
            for i, text in enumerate(project["bursts"][r]):
                if i:
                    when += timedelta(seconds=rng.randint(10, 120))
                numbers[project["key"]] += 1
                drawers.append(
                    {
                        "id": f"{project['key']}{numbers[project['key']]:02d}",
                        "text": text,
                        "room": project["room"],
                        "tags": list(project["tags"]),
                        "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "burst": f"{project['key']}{r}",
                    }
                )
    ids = {d["id"] for d in drawers}
    for project in authored:
        for n, question in project["questions"]:
            gold = f"{project['key']}{n:02d}"
            if gold not in ids:
                raise SystemExit(f"{project['key']}: no note {n} for {question!r}")
            questions.append({"id": f"{spec.question_prefix}{len(questions):03d}",
                              "question": question, "category": "paraphrase",
                              "gold": [gold]})  # fmt: skip
    return {"name": f"{name}-notes", "seed": seed, "drawers": drawers, "questions": questions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="paraphrase")
    parser.add_argument("--out", type=Path, help="default: bench/data/<set>_notes.json")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    args = parser.parse_args(argv)
    out = args.out or SETS[args.set].out
    return write_or_check(dumps(generate(name=args.set)), out, args.check)


if __name__ == "__main__":
    sys.exit(main())
