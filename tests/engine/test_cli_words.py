"""How the command line words things for people (``common/human.py``) and how it
answers a mistyped verb (``client/cli/parser.py``): pure functions, checked directly.

Covers: common/human.py client/cli/parser.py
"""

from __future__ import annotations

from trusty_memory.client.cli.main import build_parser
from trusty_memory.client.cli.parser import suggest
from trusty_memory.common.human import clip, describe, duration, score


def test_durations_in_words():
    assert [duration(s) for s in (0, 42, 60, 558, 3600, 3 * 3600 + 300, 2 * 86400 + 4 * 3600)] == [
        "0 s", "42 s", "1 min", "9 min 18 s", "1 h", "3 h 5 min", "2 d 4 h",
    ]  # fmt: skip


def test_clipped_text_says_it_was_cut():
    assert clip("short\n  note", 100) == "short note"
    cut = clip("x" * 150, 100)
    assert len(cut) == 100 and cut.endswith("…")


def test_records_read_like_describe_not_python():
    text = describe([("Tags", ["people", "db"]), ("Importance", None), ("Meta", {"k": 1})])
    assert text.splitlines() == ["Tags:        people, db", "Importance:  -", "Meta:        k=1"]
    assert score(0.123456789) == "0.1235" and score(None) == "-"


def test_a_mistyped_verb_gets_the_nearest_one():
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices  # what argparse would list
    listed = ", ".join(map(repr, verbs))
    message = f"argument COMMAND: invalid choice: 'remeber' (choose from {listed})"
    assert suggest(message) == "argument COMMAND: invalid choice: 'remeber': did you mean remember?"
    far = message.replace("'remeber'", "'zzzz'")
    assert suggest(far) == far
