"""LoCoMo: loading the conversations, normalising the gold evidence, and the recall metrics.

A loader, not a data set: unlike the other ``bench/*_data.py`` files, which write the sets
under ``bench/data/``, it holds no data and writes none: it reads LoCoMo's own file in place
(named below).

Kept apart from ``locomo.py`` (which drives a daemon) so the parts that decide the figures
can be unit-tested on tiny synthetic data (``tests/retrieval/``).

The file is ``snap-research/LoCoMo``'s ``data/locomo10.json`` (see ``../shared/data/README.md``).
Only the dialog turns are read: the ``observation``, ``session_summary`` and
``event_summary`` fields carry the gold dia_ids or paraphrase the answers, so indexing them
would leak the answer. Evidence ids are normalised (``"D8:6; D9:17"`` -> two ids,
``"D:11:26"`` -> ``"D11:26"``, ``"D30:05"`` -> ``"D30:5"``) and everything that could not be
used is counted in a ``LoadReport``, never dropped silently.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


@dataclass(frozen=True)
class Turn:
    conv: str
    dia_id: str
    session: int
    index: int  # position within the session, from 0
    date: str  # the session's date as the file writes it
    speaker: str
    text: str
    caption: str | None = None  # BLIP caption of a photo shared in this turn

    @property
    def when(self) -> datetime | None:
        try:
            return datetime.strptime(self.date, DATE_FORMAT)
        except ValueError:
            return None


@dataclass(frozen=True)
class Question:
    conv: str
    index: int
    question: str
    category: int
    gold: tuple[str, ...]  # normalised dia_ids that exist in the conversation

    @property
    def gold_sessions(self) -> frozenset[int]:
        return frozenset(session_of(d) for d in self.gold)


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]


@dataclass
class LoadReport:
    """What normalisation had to do, and what could not be used (with the reason)."""

    questions_total: int = 0
    evidence_strings: int = 0
    normalised: list[tuple[str, list[str]]] = field(default_factory=list)  # raw -> ids
    unparsable: list[str] = field(default_factory=list)  # tokens that name no dia_id
    missing: list[str] = field(default_factory=list)  # "conv/D4:36": id not in the dialog
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> questions

    def as_dict(self) -> dict:
        return {
            "questions_total": self.questions_total,
            "questions_used": self.questions_total - sum(self.skipped.values()),
            "evidence_strings": self.evidence_strings,
            "malformed_normalised": len(self.normalised),
            "normalised": [{"raw": raw, "ids": ids} for raw, ids in self.normalised],
            "unparsable_tokens": self.unparsable,
            "gold_ids_not_in_dialog": self.missing,
            "questions_skipped": dict(self.skipped),
        }


def session_of(dia_id: str) -> int:
    """``"D12:3"`` -> 12."""
    return int(dia_id[1:].split(":", 1)[0])


def normalise_evidence(raw: str) -> tuple[list[str], list[str]]:
    """One evidence string -> (canonical dia_ids, tokens that are not dia_ids).

    Handles the malformations found in the file: several ids in one string separated by
    ``;``, ``,`` or spaces; a stray colon (``D:11:26``); zero-padded numbers (``D30:05``).
    """
    ids: list[str] = []
    bad: list[str] = []
    for token in _EVIDENCE_SPLIT.split(raw.strip()):
        if not token:
            continue
        match = _EVIDENCE_ID.fullmatch(token)
        if match is None:
            bad.append(token)
        else:
            ids.append(f"D{int(match[1])}:{int(match[2])}")
    return list(dict.fromkeys(ids)), bad


def load(data: list[dict], report: LoadReport | None = None) -> list[Conversation]:
    """Parse the decoded JSON into conversations; fills ``report`` as it goes."""
    report = report if report is not None else LoadReport()
    return [_conversation(sample, report) for sample in data]


def _conversation(sample: dict, report: LoadReport) -> Conversation:
    conv = sample["conversation"]
    sample_id = sample["sample_id"]
    turns: list[Turn] = []
    sessions = sorted(
        (int(m[1]), key) for key in conv if (m := _SESSION_KEY.fullmatch(key)) is not None
    )
    for number, key in sessions:
        date = conv.get(f"{key}_date_time", "")
        for i, t in enumerate(conv[key]):
            turns.append(
                Turn(
                    conv=sample_id,
                    dia_id=t["dia_id"],
                    session=number,
                    index=i,
                    date=date,
                    speaker=t["speaker"],
                    text=t["text"],
                    caption=t.get("blip_caption"),
                )
            )
    known = {t.dia_id for t in turns}
    questions = []
    for qi, qa in enumerate(sample["qa"]):
        report.questions_total += 1
        gold: list[str] = []
        for raw in qa.get("evidence") or []:
            report.evidence_strings += 1
            ids, bad = normalise_evidence(raw)
            if bad or ids != [raw]:
                report.normalised.append((raw, ids))
            report.unparsable.extend(f"{sample_id}/{b}" for b in bad)
            for dia_id in ids:
                if dia_id in known:
                    gold.append(dia_id)
                else:
                    report.missing.append(f"{sample_id}/{dia_id}")
        gold = list(dict.fromkeys(gold))
        if not qa.get("evidence"):
            report.skipped["no evidence in the file"] += 1
            continue
        if not gold:
            report.skipped["no evidence id names a turn of the dialog"] += 1
            continue
        questions.append(Question(sample_id, qi, qa["question"], int(qa["category"]), tuple(gold)))
    return Conversation(sample_id, (conv["speaker_a"], conv["speaker_b"]), turns, questions)


# -- metrics ------------------------------------------------------------------------------


def turn_recall(gold: Sequence[str], ranked: Sequence[str], k: int) -> float:
    """Fraction of the gold dia_ids found among the first ``k`` retrieved."""
    if not gold:
        raise ValueError("a question without gold evidence has no recall")
    top = set(ranked[:k])
    return sum(1 for g in set(gold) if g in top) / len(set(gold))


def session_recall(gold: Sequence[str], ranked: Sequence[str], k: int) -> float:
    """Fraction of the gold sessions with at least one turn among the first ``k``."""
    if not gold:
        raise ValueError("a question without gold evidence has no recall")
    wanted = {session_of(g) for g in gold}
    hit = {session_of(r) for r in ranked[:k]}
    return len(wanted & hit) / len(wanted)


def top_sessions_recall(gold: Sequence[str], ranked: Sequence[str], k: int) -> float:
    """Fraction of the gold sessions among the first ``k`` *distinct* sessions of a ranking.

    This is recall with sessions as the retrieved documents, as MemPalace's session-level
    figures are (one document per session, top-10): a session ranks where its best turn
    ranks, so ``ranked`` must run deep enough to name ``k`` sessions (``SESSION_POOL``).
    ``session_recall`` is the stricter reading: only the sessions of the top-k turns.
    """
    if not gold:
        raise ValueError("a question without gold evidence has no recall")
    wanted = {session_of(g) for g in gold}
    top = list(dict.fromkeys(session_of(r) for r in ranked))[:k]
    return len(wanted & set(top)) / len(wanted)


METRICS = ("turn_r5", "turn_r10", "session_r5", "session_r10", "sessions_r5", "sessions_r10")
CURVE_KS = tuple(range(1, 11))


def recall_curve(
    scored: Iterable[tuple[Question, Sequence[str] | None, Sequence[str]]],
) -> dict[str, list[float]]:
    """Mean recall at k = 1..10 (in %) for the recall@k plots: of turns and of the sessions
    of the top-k turns (from each question's top-10 turns, when the method ranks turns),
    and of the top-k sessions (from the deeper ranking)."""
    rows = list(scored)
    curve: dict[str, list[float]] = {"k": list(CURVE_KS), "turn": [], "session": [], "sessions": []}
    if not rows:
        return curve

    def mean(fn, k: int, deep: bool) -> float:
        total = sum(fn(q.gold, pooled if deep else ranked, k) for q, ranked, pooled in rows)
        return round(100 * total / len(rows), 2)

    if rows[0][1] is not None:
        curve["turn"] = [mean(turn_recall, k, False) for k in CURVE_KS]
        curve["session"] = [mean(session_recall, k, False) for k in CURVE_KS]
    curve["sessions"] = [mean(top_sessions_recall, k, True) for k in CURVE_KS]
    return curve


def score(
    question: Question, ranked: Sequence[str] | None, pooled: Sequence[str]
) -> dict[str, float]:
    """Every metric of one question: from the top-10 turns ``ranked`` (``None`` for a
    method that ranks sessions, not turns) and the deeper ranking ``pooled``."""
    out = {
        "sessions_r5": top_sessions_recall(question.gold, pooled, 5),
        "sessions_r10": top_sessions_recall(question.gold, pooled, 10),
    }
    if ranked is not None:
        out["turn_r5"] = turn_recall(question.gold, ranked, 5)
        out["turn_r10"] = turn_recall(question.gold, ranked, 10)
        out["session_r5"] = session_recall(question.gold, ranked, 5)
        out["session_r10"] = session_recall(question.gold, ranked, 10)
    return out


def aggregate(rows: Iterable[tuple[int, dict[str, float]]]) -> dict:
    """``(category, scores)`` per question -> means overall and per category (in %)."""
    by_cat: dict[str, list[dict[str, float]]] = {}
    every: list[dict[str, float]] = []
    for category, scores in rows:
        by_cat.setdefault(str(category), []).append(scores)
        every.append(scores)

    def mean(group: list[dict[str, float]]) -> dict:
        out = {
            m: round(100 * sum(s[m] for s in group) / len(group), 2)
            for m in METRICS
            if m in group[0]
        }
        return {**out, "n": len(group)}

    return {
        "overall": mean(every) if every else {},
        "by_category": {c: mean(g) for c, g in sorted(by_cat.items())},
    }
