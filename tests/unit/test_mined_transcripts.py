"""The pure parts of ``bench/mined_transcripts.py``: LoCoMo sessions written as Claude Code
transcripts that ``mine`` groups as the bench expects, and the hit and turn-budget rules.

Covers: bench/mined_transcripts.py client/capture/claude_code.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import mined_transcripts as mt
from locomo_data import Conversation, Turn

from trusty_memory.client.capture import claude_code

DATE = "1:56 pm on 8 May, 2023"


def _conv() -> Conversation:
    # Session 1 opened by A (even), session 2 opened by B and closed by B.
    said = [(1, "Ann", "Hi Bob!"), (1, "Bob", "Hi Ann."), (1, "Ann", "I adopted a cat."),
            (1, "Bob", "Lovely!"), (2, "Bob", "How is the cat?"), (2, "Ann", "Fat."),
            (2, "Bob", "Ha.")]  # fmt: skip
    turns, index = [], {1: 0, 2: 0}
    for session, speaker, text in said:
        i = index[session]
        index[session] += 1
        turns.append(Turn("c1", f"D{session}:{i + 1}", session, i, DATE, speaker, text))
    return Conversation("c1", ("Ann", "Bob"), turns, [])


def test_transcripts_parse_into_the_exchanges_expected(tmp_path: Path) -> None:
    conv = _conv()
    expected = mt.write_conversation(conv, tmp_path, "speaker-a")
    assert [e.dia_ids for e in expected] == [
        ("D1:1", "D1:2"),
        ("D1:3", "D1:4"),
        ("D2:1",),
        ("D2:2", "D2:3"),
    ]
    mined = []  # what mine's parser makes of the files, matched by first line uuid
    for path in sorted(tmp_path.glob("*.jsonl")):
        parser = claude_code.Parser(str(path))
        for line in path.read_text().splitlines():
            if (ex := parser.feed(json.loads(line), 0, "")) is not None:
                mined.append(ex)
        if (ex := parser.finish()) is not None:
            mined.append(ex)
    by_first = {e.uuids[0]: e for e in expected}
    assert len(mined) == len(expected)
    for ex in mined:
        want = by_first[ex.metadata["message_uuids"][0]]
        assert tuple(ex.metadata["message_uuids"]) == want.uuids
        assert ex.content == want.text
        assert ex.created_at == want.created_at
    first = by_first[mt.message_uuid("c1", "D1:1")]
    assert first.text == "User: Ann: Hi Bob!\n\nAssistant: Bob: Hi Ann."
    assert first.created_at == "2023-05-08T13:56:00.000Z"
    # The same files every run: ids and uuids are derived, not random.
    assert mt.write_conversation(conv, tmp_path / "again", "speaker-a") == expected


def test_opener_role_pairs_each_session_from_its_first_turn(tmp_path: Path) -> None:
    expected = mt.write_conversation(_conv(), tmp_path, "opener")
    assert [e.dia_ids for e in expected] == [
        ("D1:1", "D1:2"),
        ("D1:3", "D1:4"),
        ("D2:1", "D2:2"),
        ("D2:3",),
    ]


def test_hit_cover_and_turn_budget() -> None:
    groups = [("D1:1", "D1:2"), ("D2:1",), ("D3:1", "D3:2")]
    assert not mt.hit(["D3:2"], groups, 2) and mt.hit(["D3:2"], groups, 3)
    assert mt.cover(["D1:2", "D3:1"], groups, 2) == 0.5
    assert mt.within_budget(groups, 3) == groups[:2]
    assert mt.within_budget(groups, 4) == groups[:2]  # whole drawers only
    row = mt.score_question(["D2:1"], groups, [10, 5, 7])
    assert row["hit_r1"] == 0.0 and row["hit_r5"] == 1.0
    assert row["turns_returned"] == 5 and row["chars_returned"] == 22
    summary = mt.summarise([row, mt.score_question(["D9:9"], groups, [1, 1, 1])])
    assert summary["hit_r5"] == 50.0 and summary["n"] == 2
