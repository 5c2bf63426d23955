"""Dates a question names, as time windows over ``created_at`` (deep recall's date list).

"What did we decide in March?", "which version was pinned in May 2024?", "what painting
did Melanie show on October 13, 2023?": a memory's questions often name when, and a
drawer's ``created_at`` says when it was written. ``windows`` reads the absolute dates a
question names and returns the spans of ``created_at`` they mean; deep recall ranks the
drawers written inside them as a list of its own (``store_read.ReadStore._date_ranking``).

Only dates a reader cannot mistake are taken:

- a day: "October 13, 2023", "13 October 2023", "1 February, 2023", "2023-10-13", or
  "October 13" / "13 October" (any year the palace spans);
- a month: "October 2023", or "in / during / since / early / late / mid / by / of
  October" (any year the palace spans);
- a year alone is not taken: "in 2023" covers most of a palace as often as not.

Month names count only capitalised and only beside a day, a year or one of the words
above ("May I ask" names no month). Relative dates ("last week", "yesterday") are not
read: the time a question is asked is not the time its answer was written.

A day's window reaches 12 hours either side of the calendar day (UTC), so that a note
written late in the evening somewhere west of Greenwich, or early in the morning east
of it, still falls inside its own day.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from trusty_memory.workers.store_values import stored_time

MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip
_MONTH = "|".join(MONTHS)
_ORD = r"(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_LEAD = r"(?i:in|during|since|early|late|mid|by|of|until|before|after|throughout)"
DAY_SLACK = timedelta(hours=12)
MAX_YEARS = 50  # a date without a year means it in the palace's last 50 years at most
MAX_SPANS = 200  # a question naming more spans than this gets no date list at all

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")),
    # October 13, 2023 / October 13th 2023 / October 13
    ("mdy", re.compile(rf"\b({_MONTH})\s+(\d{{1,2}}){_ORD}\b(?!\d)(?:,?\s+{_YEAR}\b)?")),
    # 13 October 2023 / 1 February, 2023 / 13th of October
    ("dmy", re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_MONTH})\b(?:,?\s+{_YEAR}\b)?")),
    # October 2023
    ("my", re.compile(rf"\b({_MONTH}),?\s+{_YEAR}\b")),
    # in October
    ("m", re.compile(rf"\b{_LEAD}\s+(?:the\s+)?(?:month\s+of\s+)?({_MONTH})\b")),
]


def windows(text: str, years: Callable[[], range]) -> list[tuple[str, str]]:
    """The ``created_at`` spans (start inclusive, end exclusive, in the stored form) of
    the dates ``text`` names; a date without a year gives one span per year of
    ``years()`` (the years the palace's drawers were written in, asked for only then).
    Sorted, no repeats; none past ``MAX_SPANS``, which bounds the queries one question
    can cost (a palace may hold drawers dated from year 1 to 9999)."""
    recent_years = functools.cache(lambda: years()[-MAX_YEARS:])  # asked for once, if at all
    found: set[tuple[datetime, datetime]] = set()
    taken: list[tuple[int, int]] = []  # text spans already read, so "October 13, 2023"
    for kind, pattern in _PATTERNS:  # is not read again as "in October"
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            spans = _spans(kind, match, recent_years)
            if spans:
                taken.append(match.span())
                found.update(spans)
            if len(found) > MAX_SPANS:
                return []
    return [(stored_time(start), stored_time(end)) for start, end in sorted(found)]


def _spans(
    kind: str, match: re.Match[str], years: Callable[[], range]
) -> list[tuple[datetime, datetime]]:
    if kind == "iso":
        year, month, day = (int(g) for g in match.groups())
        return _day(year, month, day)
    if kind == "mdy":
        month, day, year = MONTHS.index(match[1]) + 1, int(match[2]), match[3]
    elif kind == "dmy":
        day, month, year = int(match[1]), MONTHS.index(match[2]) + 1, match[3]
    elif kind == "my":
        return _month(int(match[2]), MONTHS.index(match[1]) + 1)
    else:
        month = MONTHS.index(match[1]) + 1
        return [span for y in years() for span in _month(y, month)]
    if year is not None:
        return _day(int(year), month, day)
    return [span for y in years() for span in _day(y, month, day)]


def _day(year: int, month: int, day: int) -> list[tuple[datetime, datetime]]:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
        return [(start - DAY_SLACK, start + timedelta(days=1) + DAY_SLACK)]
    except (ValueError, OverflowError):  # "February 30"; the edges of year 1 and 9999
        return []


def _month(year: int, month: int) -> list[tuple[datetime, datetime]]:
    try:
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    except ValueError:  # December 9999 ends past what a datetime holds
        return []
    return [(start, end)]
