"""The engineering-notes set (``bench/eng_notes_data.py``): deterministic, committed, sound.

Covers: bench/eng_notes_data.py
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import eng_notes_data  # noqa: E402


def test_generation_is_deterministic_and_the_committed_file_is_current():
    text = eng_notes_data.dumps(eng_notes_data.generate())
    assert text == eng_notes_data.dumps(eng_notes_data.generate())
    assert text == eng_notes_data.DEFAULT_OUT.read_text(), "run bench/eng_notes_data.py"
    assert eng_notes_data.dumps(eng_notes_data.generate(seed=1)) != text


def test_the_set_is_well_formed():
    data = json.loads(eng_notes_data.DEFAULT_OUT.read_text())
    drawers, questions = data["drawers"], data["questions"]
    assert len(questions) >= 150
    ids = {d["id"] for d in drawers}
    assert len(ids) == len(drawers)
    # No two notes alike (the product would merge an exact restatement into one drawer).
    assert max(Counter(d["text"] for d in drawers).values()) == 1
    assert [d["created_at"] for d in drawers] == sorted(d["created_at"] for d in drawers)
    texts = {d["text"].lower() for d in drawers}
    cats = Counter(q["category"] for q in questions)
    assert set(cats) == {"single", "distractor", "multi_hop", "temporal", "follow_up"}
    for q in questions:
        assert q["gold"] and set(q["gold"]) <= ids, q
        assert q["question"].lower() not in texts  # paraphrased, never a note's text
        assert (len(q["gold"]) == 2) == (q["category"] == "multi_hop"), q
    assert len({q["question"] for q in questions}) == len(questions)
