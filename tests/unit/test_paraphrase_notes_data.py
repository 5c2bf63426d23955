"""The two sets of notes asked in other words (``bench/paraphrase_notes_data.py``:
``paraphrase`` and ``reworded``): committed, current, and asked in other words: no
question holds a rare word of the note that answers it (a word at most two notes of the
set hold, stop words aside), so only meaning connects them.

Covers: bench/paraphrase_notes_data.py
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import paraphrase_notes_data as data_module  # noqa: E402
import pytest  # noqa: E402

from trusty_memory.common.values import STOPWORDS  # noqa: E402

_WORD = re.compile(r"[a-z0-9]+")
# Words a question needs to be a question, rare here only because notes are statements.
_QUESTION_WORDS = {"same", "if", "must", "against", "before", "need", "only", "come"}


def words(text: str) -> set[str]:
    """Lowercased words, a plural's s cut (a crude stem, enough to see a shared word)."""
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in _WORD.findall(text.lower())}


# set: (bursts, fewest notes in a burst)
SHAPES = {"paraphrase": (20, 3), "reworded": (29, 2)}


@pytest.mark.parametrize("name", sorted(data_module.SETS))
def test_the_committed_file_is_what_the_generator_writes(name):
    text = data_module.dumps(data_module.generate(name=name))
    assert text == data_module.SETS[name].out.read_text(), (
        f"run bench/paraphrase_notes_data.py --set {name}"
    )


def test_the_default_is_the_first_set_as_before():
    assert data_module.generate() == data_module.generate(data_module.SEED, "paraphrase")
    assert data_module.SETS["paraphrase"].out == data_module.DEFAULT_OUT


@pytest.mark.parametrize("name", sorted(data_module.SETS))
def test_questions_avoid_the_rare_words_of_their_note(name):
    data = json.loads(data_module.SETS[name].out.read_text())
    notes = {d["id"]: d for d in data["drawers"]}
    assert len(notes) == len(data["drawers"]) >= 80 and len(data["questions"]) >= 70
    df = Counter(w for d in data["drawers"] for w in words(d["text"]))
    for q in data["questions"]:
        (gold,) = q["gold"]
        shared = words(q["question"]) & words(notes[gold]["text"])
        rare = {w for w in shared if df[w] <= 2} - STOPWORDS - _QUESTION_WORDS
        assert not rare, (q["question"], gold, rare)


@pytest.mark.parametrize("name", sorted(data_module.SETS))
def test_bursts_stand_in_one_room_seconds_apart(name):
    drawers = json.loads(data_module.SETS[name].out.read_text())["drawers"]
    bursts = Counter(d["burst"] for d in drawers)
    count, fewest = SHAPES[name]
    assert len(bursts) == count and all(fewest <= n <= 5 for n in bursts.values())
    assert len({(d["burst"], d["room"]) for d in drawers}) == len(bursts)
