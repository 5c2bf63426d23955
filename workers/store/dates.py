"""Dates a question names, as time windows over ``created_at`` (deep recall's date list).

"What did we decide in March?", "which version was pinned in May 2024?", "what painting
did Melanie show on October 13, 2023?": a memory's questions often name when, and a
drawer's ``created_at`` says when it was written. ``windows`` reads the absolute dates a
question names and returns the spans of ``created_at`` they mean; deep recall ranks the
drawers written inside them as a list of its own (``ranking.date_ranking``).

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

A drawer's side: ``mentioned`` reads the days a drawer's own text speaks of, relative
ones included, against the time it was written ("Yesterday I met some artists in Boston",
written on October 4, speaks of October 3). The palace keeps them (``drawer_days``,
``schema``), and the date list takes a drawer whose days meet the question's as it
takes one written then.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from trusty_memory.common.values import stored_time

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
        iso_year, iso_month, iso_day = (int(g) for g in match.groups())
        return _day(iso_year, iso_month, iso_day)
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


# -- the days a drawer speaks of ------------------------------------------------------------

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBER = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_COUNT = r"(a|an|one|two|three|four|five|six|\d{1,2})"
_WEEKDAY = "|".join(WEEKDAYS)
_RELATIVE = re.compile(
    r"\b(?i:(yesterday|last night|tomorrow|the other day|a few days ago|a couple of days ago"
    rf"|{_COUNT} (day|week|month)s? ago"
    rf"|(last|this|next) (week|weekend|month|{_WEEKDAY})))\b"
)


def mentioned(text: str, written: datetime) -> list[tuple[str, str]]:
    """The spans of the days ``text`` speaks of, read against ``written`` (its
    ``created_at``): "yesterday", "last Friday", "two weeks ago", "last month", "on
    October 3". A note is mostly written after what it tells ("Yesterday I met some
    artists in Boston"), so a question about October 3 should find a note written on
    the 4th; deep recall's date list reads these beside ``created_at``.

    Same forms as ``windows`` for absolute dates (a date without a year is the one
    nearest before ``written``, or up to half a year after: a plan); relative ones name
    a day, a week, a weekend or a month. "Recently", "last year" and the like are not
    read: they cover too much to single anything out. Sorted, no repeats, in the stored
    form; the day itself (``written``'s own) is not repeated, ``created_at`` covers it.
    """
    written = written.astimezone(UTC)
    day0 = datetime(written.year, written.month, written.day, tzinfo=UTC)
    year_of = functools.partial(_year_near, written)
    found: set[tuple[datetime, datetime]] = set()
    taken: list[tuple[int, int]] = []
    # Each read is given its match alone: what it reads against is bound in already.
    reads: list[tuple[re.Match[str], Callable[[re.Match[str]], list[tuple[datetime, datetime]]]]]
    reads = [(match, functools.partial(_relative, day0=day0)) for match in _RELATIVE.finditer(text)]
    for kind, pattern in _PATTERNS[:4]:  # "in October" alone is too loose in a note
        for match in pattern.finditer(text):
            if not any(start < match.end() and match.start() < end for start, end in taken):
                taken.append(match.span())
                reads.append((match, functools.partial(_absolute, kind, year_of=year_of)))
    for match, read in reads[:MAX_SPANS]:
        # A span past the calendar's edges (a note written in year 1 or 9999) is none.
        with contextlib.suppress(OverflowError, ValueError):
            found.update(read(match))
    with contextlib.suppress(OverflowError):
        found.discard(_days(day0, 1))
    return [(stored_time(s), stored_time(e)) for s, e in sorted(found)]


LONGEST_MENTION = timedelta(days=32)  # no span ``mentioned`` gives is longer (a month)


def earliest_overlap(start: str) -> str:
    """The earliest start (stored form) of a mentioned span that can still reach past
    ``start``: the lower bound that lets the overlap query use ``drawer_days``' index."""
    when = datetime.fromisoformat(start.replace("Z", "+00:00"))
    try:
        return stored_time(when - LONGEST_MENTION)
    except OverflowError:  # within a month of year 1
        return "0000"


def _relative(match: re.Match[str], day0: datetime) -> list[tuple[datetime, datetime]]:
    day = timedelta(days=1)
    phrase = match[1].lower()
    if phrase in ("yesterday", "last night"):
        return [_days(day0 - day, 1)]
    if phrase == "tomorrow":
        return [_days(day0 + day, 1)]
    if phrase in ("the other day", "a few days ago", "a couple of days ago"):
        return [_days(day0 - 4 * day, 3)]
    if match[2] is not None:  # "two weeks ago"
        count = _NUMBER.get(match[2].lower()) or int(match[2])
        unit = match[3].lower()
        if unit == "day":
            return [_days(day0 - count * day, 1)]
        if unit == "week":
            return [_days(day0 - (7 * count + 3) * day, 7)]
        return _months_back(day0, count)
    which, unit = match[4].lower(), match[5].lower()
    step = {"last": -1, "this": 0, "next": 1}[which]
    if unit == "month":
        return _months_back(day0, -step)
    monday = day0 - day0.weekday() * day
    if unit == "week":
        return [_days(monday + 7 * step * day, 7)]
    if unit == "weekend":
        return [_days(monday + (5 + 7 * step) * day, 2)]
    # "last Friday": the latest Friday before the day written, up to a week back;
    # "next Friday", the first after it; "this Friday", the one of its week.
    target = WEEKDAYS.index(unit)
    if step == 0:
        return [_days(monday + target * day, 1)]
    back = (day0.weekday() - target) % 7 or 7
    if step < 0:
        return [_days(day0 - back * day, 1)]
    return [_days(day0 + ((target - day0.weekday()) % 7 or 7) * day, 1)]


def _days(start: datetime, count: int) -> tuple[datetime, datetime]:
    return (start - DAY_SLACK, start + timedelta(days=count) + DAY_SLACK)


def _months_back(day0: datetime, count: int) -> list[tuple[datetime, datetime]]:
    index = day0.year * 12 + day0.month - 1 - count
    return _month(index // 12, index % 12 + 1) if index >= 12 else []


def _year_near(written: datetime, month: int, day: int = 1) -> int:
    """The year of a date named without one: ``written``'s own, unless the date would then
    lie more than half a year after it (then the year before: "the December 20 outage",
    written in January); within half a year after, it is a plan ("the launch on March
    3")."""
    year = written.year
    try:
        when = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return year
    if when - written > timedelta(days=183):
        return year - 1
    return year


def _absolute(
    kind: str, match: re.Match[str], year_of: Callable[..., int]
) -> list[tuple[datetime, datetime]]:
    """An absolute date a drawer names; without a year, the one ``year_of`` picks."""
    if kind in ("iso", "my"):  # these always carry their year
        return _spans(kind, match, lambda: range(0))
    if kind == "mdy":
        month, day = MONTHS.index(match[1]) + 1, int(match[2])
    else:
        day, month = int(match[1]), MONTHS.index(match[2]) + 1
    year = match[3]
    return _day(int(year) if year else year_of(month, day), month, day)
