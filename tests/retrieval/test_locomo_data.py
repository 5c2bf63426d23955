"""The LoCoMo evidence normaliser and the recall metrics, on tiny synthetic data.

These decide every figure in the LoCoMo benchmark, so they are pinned here: a wrong
normaliser silently drops gold evidence, a wrong metric silently inflates recall.

Covers: bench/locomo_data.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from locomo_data import (
    LoadReport,
    Question,
    aggregate,
    load,
    normalise_evidence,
    recall_curve,
    score,
    session_recall,
    top_sessions_recall,
    turn_recall,
)


@pytest.mark.parametrize(
    ("raw", "ids", "bad"),
    [
        ("D1:3", ["D1:3"], []),
        ("D8:6; D9:17", ["D8:6", "D9:17"], []),
        ("D:11:26", ["D11:26"], []),
        ("D30:05", ["D30:5"], []),
        ("D9:1 D4:4 D4:6", ["D9:1", "D4:4", "D4:6"], []),
        ("D2:1, D2:1", ["D2:1"], []),  # repeats collapse
        ("D", [], ["D"]),
        ("D3:x D3:4", ["D3:4"], ["D3:x"]),
        ("", [], []),
    ],
)
def test_normalise_evidence(raw, ids, bad):
    assert normalise_evidence(raw) == (ids, bad)


def _sample(evidence_lists):
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "hi"},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "hello", "blip_caption": "a cat"},
    ]
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns,
            "session_2_date_time": "10:00 am on 9 May, 2023",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "bye"}],
        },
        "observation": {"leak": "D1:1"},
        "session_summary": {"leak": "D1:1"},
        "qa": [
            {"question": f"q{i}", "answer": "a", "evidence": ev, "category": 1 + i % 5}
            for i, ev in enumerate(evidence_lists)
        ],
    }


def test_load_counts_everything_it_could_not_use():
    report = LoadReport()
    [conv] = load([_sample([["D1:1"], ["D1:02; D2:1"], [], ["D9:9"], ["D", "D2:1"]])], report)
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D2:1"]
    assert conv.turns[1].caption == "a cat" and conv.turns[2].session == 2
    assert conv.turns[0].when.year == 2023
    assert [q.gold for q in conv.questions] == [("D1:1",), ("D1:2", "D2:1"), ("D2:1",)]
    assert conv.questions[1].gold_sessions == {1, 2}
    d = report.as_dict()
    assert d["questions_total"] == 5 and d["questions_used"] == 3
    assert d["questions_skipped"] == {
        "no evidence in the file": 1,
        "no evidence id names a turn of the dialog": 1,
    }
    assert d["malformed_normalised"] == 2  # "D1:02; D2:1" and "D"
    assert d["unparsable_tokens"] == ["conv-x/D"]
    assert d["gold_ids_not_in_dialog"] == ["conv-x/D9:9"]


def test_turn_and_session_recall():
    gold = ["D1:1", "D3:4"]
    ranked = ["D2:1", "D1:1", "D3:9", "D5:5", "D6:6", "D3:4"]
    assert turn_recall(gold, ranked, 5) == 0.5
    assert turn_recall(gold, ranked, 10) == 1.0
    # Session 3 is hit at rank 3 by a turn that is not gold: session recall counts it.
    assert session_recall(gold, ranked, 5) == 1.0
    assert session_recall(gold, ranked[:1], 5) == 0.0
    assert turn_recall(["D1:1"], [], 10) == 0.0
    with pytest.raises(ValueError):
        turn_recall([], ranked, 10)


def test_top_sessions_recall_counts_distinct_sessions():
    gold = ["D1:1", "D6:2"]
    ranked = ["D2:1", "D2:5", "D2:7", "D1:1", "D2:2", "D6:6"]
    # Sessions in rank order: 2, 1, 6. Within the top 2 sessions: session 1 only.
    assert top_sessions_recall(gold, ranked, 2) == 0.5
    assert top_sessions_recall(gold, ranked, 3) == 1.0
    # Stricter: the top 3 turns name session 2 only.
    assert session_recall(gold, ranked, 3) == 0.0
    with pytest.raises(ValueError):
        top_sessions_recall([], ranked, 10)


def test_aggregate_averages_per_question_and_per_category():
    [conv] = load([_sample([["D1:1"], ["D1:1", "D2:1"]])])
    q1, q2 = conv.questions
    rows = [
        (q1.category, score(q1, ["D1:1"], ["D1:1"])),
        (q2.category, score(q2, ["D1:1"], ["D1:1"])),
    ]
    result = aggregate(rows)
    # q1 finds 1/1, q2 finds 1/2: the mean of the per-question fractions is 75%.
    assert result["overall"]["turn_r10"] == 75.0
    assert result["overall"]["session_r10"] == 75.0
    assert result["overall"]["n"] == 2
    assert result["by_category"]["1"]["turn_r5"] == 100.0
    assert result["by_category"]["2"]["turn_r5"] == 50.0
    # A method that ranks sessions, not turns, has session metrics only.
    only = aggregate([(q1.category, score(q1, None, ["D1:1"]))])["overall"]
    assert only == {"sessions_r5": 100.0, "sessions_r10": 100.0, "n": 1}


def test_recall_curve_rises_to_recall_at_10():
    q = Question(conv="c", index=0, question="?", category=1, gold=("D1:1", "D2:4"))
    ranked = ["D1:2", "D1:1", "D3:1", "D2:4"]
    curve = recall_curve([(q, ranked, ranked)])
    assert curve["k"] == list(range(1, 11))
    assert curve["turn"][:4] == [0.0, 50.0, 50.0, 100.0]
    assert curve["session"][0] == 50.0 and curve["session"][3] == 100.0
    assert curve["turn"][9] == 100.0 * turn_recall(q.gold, ranked, 10)
    assert curve["sessions"][:3] == [50.0, 50.0, 100.0]  # sessions in order: 1, 3, 2
