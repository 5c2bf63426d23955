"""The project-history set (``bench/history_notes_data.py``): committed and sound.

Covers: bench/history_notes_data.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import history_notes_data  # noqa: E402


def test_the_set_is_well_formed():
    data = json.loads(history_notes_data.DEFAULT_OUT.read_text())
    drawers, questions = data["drawers"], data["questions"]
    assert len(drawers) >= 300 and len(questions) >= 150
    ids = {d["id"] for d in drawers}
    assert len(ids) == len(drawers)
    assert max(Counter(d["text"] for d in drawers).values()) == 1
    assert [d["created_at"] for d in drawers] == sorted(d["created_at"] for d in drawers)
    texts = {d["text"].lower() for d in drawers}
    assert len({q["id"] for q in questions}) == len(questions)
    for q in questions:
        assert q["gold"] and set(q["gold"]) <= ids, q
        assert q["question"].lower() not in texts
    assert json.loads(history_notes_data.QUESTIONS.read_text()) == questions


def test_the_committed_file_is_what_the_history_gives():
    """Needs the history up to ``REV`` (a shallow clone lacks it)."""
    have = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{history_notes_data.REV}^{{commit}}"],
        capture_output=True,
    )
    if have.returncode != 0:
        pytest.skip(f"this clone does not hold {history_notes_data.REV[:12]}")
    text = history_notes_data.dumps(history_notes_data.generate(history_notes_data.REV))
    assert text == history_notes_data.DEFAULT_OUT.read_text(), "run bench/history_notes_data.py"
