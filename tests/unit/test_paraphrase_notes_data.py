"""The paraphrase set (``bench/paraphrase_notes_data.py``): committed, current, and asked
in other words: no question holds a rare word of the note that answers it (a word at most
two notes of the set hold, stop words aside), so only meaning connects them.

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

from trusty_memory.common.values import STOPWORDS  # noqa: E402

_WORD = re.compile(r"[a-z0-9]+")
# Words a question needs to be a question, rare here only because notes are statements.
_QUESTION_WORDS = {"same", "if", "must", "against", "before", "need", "only", "come"}


def words(text: str) -> set[str]:
    """Lowercased words, a plural's s cut (a crude stem, enough to see a shared word)."""
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in _WORD.findall(text.lower())}


def test_the_committed_file_is_what_the_generator_writes():
    text = data_module.dumps(data_module.generate())
    assert text == data_module.DEFAULT_OUT.read_text(), "run bench/paraphrase_notes_data.py"


def test_questions_avoid_the_rare_words_of_their_note():
    data = json.loads(data_module.DEFAULT_OUT.read_text())
    notes = {d["id"]: d for d in data["drawers"]}
    assert len(notes) == len(data["drawers"]) >= 80 and len(data["questions"]) >= 70
    df = Counter(w for d in data["drawers"] for w in words(d["text"]))
    for q in data["questions"]:
        (gold,) = q["gold"]
        shared = words(q["question"]) & words(notes[gold]["text"])
        rare = {w for w in shared if df[w] <= 2} - STOPWORDS - _QUESTION_WORDS
        assert not rare, (q["question"], gold, rare)


def test_bursts_stand_in_one_room_seconds_apart():
    drawers = json.loads(data_module.DEFAULT_OUT.read_text())["drawers"]
    bursts = Counter(d["burst"] for d in drawers)
    assert len(bursts) == 20 and all(3 <= n <= 5 for n in bursts.values())
    assert len({(d["burst"], d["room"]) for d in drawers}) == len(bursts)
