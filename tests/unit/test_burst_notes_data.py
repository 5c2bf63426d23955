"""The burst-notes set (``bench/burst_notes_data.py``): committed, current and shaped as
issue 30 asks (at least 300 notes in bursts of 5 to 30, at least 200 questions, each
answered by one note, every burst with its sources).

Covers: bench/burst_notes_data.py
"""

from __future__ import annotations

import itertools
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import burst_notes_data  # noqa: E402


def seconds(note: dict) -> float:
    return datetime.fromisoformat(note["created_at"].replace("Z", "+00:00")).timestamp()


def test_the_committed_file_is_what_the_generator_writes():
    text = burst_notes_data.dumps(burst_notes_data.generate())
    assert text == burst_notes_data.DEFAULT_OUT.read_text(), "run bench/burst_notes_data.py"


def test_the_set_is_well_formed():
    data = json.loads(burst_notes_data.DEFAULT_OUT.read_text())
    drawers, questions = data["drawers"], data["questions"]
    assert len(drawers) >= 300 and len(questions) >= 200
    sizes = Counter(d["burst"] for d in drawers)
    assert all(5 <= n <= 30 for n in sizes.values()), sizes
    assert set(data["sources"]) == set(sizes) and all(data["sources"].values())
    ids = {d["id"] for d in drawers}
    assert len(ids) == len(drawers) and max(Counter(d["text"] for d in drawers).values()) == 1
    texts = {d["text"].lower() for d in drawers}
    for q in questions:
        assert len(q["gold"]) == 1 and q["gold"][0] in ids, q
        assert q["question"].lower() not in texts
    assert max(Counter(q["question"] for q in questions).values()) == 1


def test_bursts_are_seconds_apart_and_hours_from_each_other():
    drawers = json.loads(burst_notes_data.DEFAULT_OUT.read_text())["drawers"]
    for a, b in itertools.pairwise(drawers):
        gap = seconds(b) - seconds(a)
        if a["burst"] == b["burst"]:
            assert 0 < gap <= 120 and a["room"] == b["room"]
        else:
            assert gap >= 3 * 3600
