"""A third retrieval set, from another source: this project's own commit history as notes.

    .venv/bin/python bench/history_notes_data.py [--rev REV] [--out FILE] [--check]

The LoCoMo dialogs and the generated engineering notes (``eng_notes_data.py``) were both
looked at while deep recall's rules were chosen. This set was not: its notes are real
engineering notes written by other hands for another purpose (what each commit did and
why: decisions, measured figures, versions, incidents, fixes), and its questions were
written once, from the notes alone, before any rule was judged on them. It is used to
check rules, never to choose them.

Each commit up to ``REV`` becomes one drawer, as an agent that notes what it did would
store it: ``text`` the commit message (subject and body), ``created_at`` the commit time
(commits come in bursts, so a work session is one episode), ``room`` the contract's room
for the area most of its files are in, ``tags`` the top-level folders it touched. The
questions (``bench/data/history_questions.json``: paraphrased, each with its gold note
ids and a category) are merged in and checked: every gold id must be a note.

Deterministic for a given ``REV``: ``--check`` says whether the committed file is current
(it needs the history up to ``REV``; a shallow clone without it cannot check).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eng_notes_data import dumps, write_or_check

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
DEFAULT_OUT = DATA / "history_notes.json"
QUESTIONS = DATA / "history_questions.json"
REV = "e303a418ee1d0095eafeb29a220789005e9eeb93"  # the history the questions were written on
SEP = "\x1e"  # between commits
FIELD = "\x1f"  # between a commit's fields

PRIORITY = ("Backend", "Frontend", "Configuration", "Research", "Documentation", "Testing")

# Where a file lives -> the contract's room for that kind of work.
ROOMS = {
    "broker": "Backend",
    "workers": "Backend",
    "client": "Backend",
    "common": "Backend",
    "dreamer": "Backend",
    "ui": "Frontend",
    "tests": "Testing",
    "bench": "Research",
    "BENCHMARKS.md": "Research",
    "README.md": "Documentation",
    "docs": "Documentation",
    "deploy": "Configuration",
    "pyproject.toml": "Configuration",
    "dev": "Configuration",
    ".ci": "Configuration",
}


def top_level(path: str) -> str:
    return path.split("/", 1)[0]


def room_of(files: list[str]) -> str:
    """The room of the most central area a commit touched: product code before its
    configuration, benchmarks, documentation and tests (a fix with its test is Backend)."""
    rooms = {ROOMS.get(top_level(f), "General") for f in files}
    return next((room for room in PRIORITY if room in rooms), "General")


def notes(rev: str) -> list[dict]:
    """One note per commit reachable from ``rev``, oldest first (a message repeated word
    for word is one note)."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "log", "--reverse", "--name-only", "--date=iso-strict",
         f"--format={SEP}%h{FIELD}%cd{FIELD}%B{FIELD}", rev],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    drawers = []
    seen: set[str] = set()
    for chunk in out.split(SEP)[1:]:
        short, when, message, names = chunk.split(FIELD)
        if message.strip() in seen:
            continue  # a restatement: the product keeps one drawer of it
        seen.add(message.strip())
        files = [line for line in names.splitlines() if line.strip()]
        folders = sorted({top_level(f).lstrip(".") for f in files if "/" in f})
        drawers.append(
            {
                "id": short,
                "text": message.strip(),
                "room": room_of(files),
                "tags": folders[:4],
                "created_at": when.replace("+00:00", "Z"),
            }
        )
    return drawers


def generate(rev: str) -> dict:
    drawers = notes(rev)
    questions = json.loads(QUESTIONS.read_text()) if QUESTIONS.exists() else []
    known = {d["id"] for d in drawers}
    for q in questions:
        missing = [g for g in q["gold"] if g not in known]
        if missing:
            raise SystemExit(f"{q['id']}: gold {missing} is not a note of {rev[:12]}")
    return {"name": "project-history", "rev": rev, "drawers": drawers, "questions": questions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default=REV)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    args = parser.parse_args(argv)
    return write_or_check(dumps(generate(args.rev)), args.out, args.check)


if __name__ == "__main__":
    sys.exit(main())
