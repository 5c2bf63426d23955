"""The dates a question names, as spans of ``created_at`` (``workers/store/dates.py``).

Covers: workers/store/dates.py
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trusty_memory.common.values import check_timestamp, stored_time
from trusty_memory.workers.store.dates import mentioned, windows

YEARS = range(2022, 2024)


def spans(text: str) -> list[tuple[str, str]]:
    return windows(text, lambda: YEARS)


@pytest.mark.parametrize(
    "question",
    [
        "What painting did Melanie show to Caroline on October 13, 2023?",
        "what happened on 13 October 2023",
        "what happened on the 13th of October, 2023?",
        "the release notes of 2023-10-13",
        "October 13th 2023: who was on call?",
    ],
)
def test_a_day_is_its_calendar_day_with_half_a_day_either_side(question):
    assert spans(question) == [("2023-10-12T12:00:00Z", "2023-10-14T12:00:00Z")]


def test_a_month_with_a_year_is_that_month():
    assert spans("What setback did Melanie face in October 2023?") == [
        ("2023-10-01T00:00:00Z", "2023-11-01T00:00:00Z")
    ]
    assert spans("the December, 2022 incident") == [
        ("2022-12-01T00:00:00Z", "2023-01-01T00:00:00Z")
    ]


def test_a_date_without_a_year_means_it_in_every_year_the_palace_spans():
    asked = []

    def years() -> range:
        asked.append(True)
        return YEARS

    assert windows("In March, which envoy version did the gateway get?", years) == [
        ("2022-03-01T00:00:00Z", "2022-04-01T00:00:00Z"),
        ("2023-03-01T00:00:00Z", "2023-04-01T00:00:00Z"),
    ]
    assert spans("what did we ship on May 3?") == [
        ("2022-05-02T12:00:00Z", "2022-05-04T12:00:00Z"),
        ("2023-05-02T12:00:00Z", "2023-05-04T12:00:00Z"),
    ]
    assert asked == [True]
    assert windows("when was the pgx upgrade?", years) == [] and asked == [True]  # not asked


@pytest.mark.parametrize(
    "question",
    [
        "May I ask what we decided about the cache?",  # a verb, not a month
        "we may march on in june",  # lower case: never a month
        "How many times has Melanie gone to the beach in 2023?",  # a year alone
        "what changed last week?",  # relative: not read
        "which version is pinned on February 30, 2023?",  # no such day
        "the port moved from 2023 to 8080",
    ],
)
def test_what_is_not_a_date(question):
    assert spans(question) == []


def test_a_day_is_not_also_read_as_its_month():
    both = spans("what happened in October, on October 13, 2023?")
    assert both == [
        ("2022-10-01T00:00:00Z", "2022-11-01T00:00:00Z"),
        ("2023-10-01T00:00:00Z", "2023-11-01T00:00:00Z"),
        ("2023-10-12T12:00:00Z", "2023-10-14T12:00:00Z"),
    ]
    assert spans("on October 13, 2023") == [("2023-10-12T12:00:00Z", "2023-10-14T12:00:00Z")]


def test_the_edges_of_the_calendar_give_no_span_and_no_error():
    """A palace may hold a drawer dated 0001 or 9999 (any RFC 3339 time is accepted)."""
    edges = lambda: range(9999, 10000)  # noqa: E731
    assert windows("what happened in December?", edges) == []
    assert windows("what happened on December 31?", edges) == []
    assert windows("what happened on January 1?", lambda: range(1, 2)) == []
    # Spans are in the store's own form, whatever it makes of year 1.
    stored = [check_timestamp(t, "t") for t in ("0001-01-01T00:00:00Z", "0001-02-01T00:00:00Z")]
    assert windows("in January", lambda: range(1, 2)) == [tuple(stored)]


def test_what_one_question_can_cost_is_bounded():
    """Drawers dated from year 1 to 9999 and a question that lists dates without years:
    at most MAX_YEARS years each, and no list at all past MAX_SPANS spans."""
    from trusty_memory.workers.store.dates import MAX_SPANS, MAX_YEARS

    wide = lambda: range(1, 10000)  # noqa: E731
    assert len(windows("in March", wide)) == MAX_YEARS
    assert windows("in March", wide)[-1][0].startswith("9999-03")
    many = " ".join(f"on March {d}," for d in range(1, 32))
    assert len(windows(many, lambda: range(2020, 2026))) == 31 * 6 <= MAX_SPANS
    assert windows(many, wide) == []


# -- the days a drawer speaks of (``mentioned``) -------------------------------------------

WRITTEN = datetime(2023, 10, 4, 14, 0, tzinfo=UTC)  # a Wednesday


def day(d: str) -> tuple[str, str]:
    """The span ``mentioned`` gives one calendar day: half a day either side."""
    start = datetime.fromisoformat(d).replace(tzinfo=UTC)
    return (stored_time(start - timedelta(hours=12)), stored_time(start + timedelta(hours=36)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yesterday I met some artists in Boston", [day("2023-10-03")]),
        ("Twisted my knee last night", [day("2023-10-03")]),
        ("Last Friday I went to the car show", [day("2023-09-29")]),
        ("I fly out next Monday", [day("2023-10-09")]),
        ("we ship tomorrow", [day("2023-10-05")]),
        ("Two days ago the gateway went down", [day("2023-10-02")]),
        ("3 days ago", [day("2023-10-01")]),
        ("on October 13 we meet again", [day("2023-10-13")]),
        ("born on 3 May 1990", [day("1990-05-03")]),
    ],
)
def test_a_drawer_speaks_of_the_days_it_names_read_against_when_it_was_written(text, expected):
    assert mentioned(text, WRITTEN) == expected


def test_weeks_weekends_and_months_are_spans_of_their_own():
    assert mentioned("last week was rough", WRITTEN) == [
        (stored_time(datetime(2023, 9, 24, 12, tzinfo=UTC)),
         stored_time(datetime(2023, 10, 2, 12, tzinfo=UTC)))
    ]  # fmt: skip
    assert mentioned("last weekend we hiked", WRITTEN) == [
        (stored_time(datetime(2023, 9, 29, 12, tzinfo=UTC)),
         stored_time(datetime(2023, 10, 2, 12, tzinfo=UTC)))
    ]  # fmt: skip
    assert mentioned("Last month the bill doubled", WRITTEN) == [
        ("2023-09-01T00:00:00Z", "2023-10-01T00:00:00Z")
    ]
    assert mentioned("I'm moving next month", WRITTEN) == [
        ("2023-11-01T00:00:00Z", "2023-12-01T00:00:00Z")
    ]


def test_last_weekday_on_that_weekday_is_a_week_back():
    friday = datetime(2023, 9, 29, 9, tzinfo=UTC)
    assert mentioned("last Friday", friday) == [day("2023-09-22")]


def test_a_date_without_a_year_is_the_one_nearest_before_or_a_plan_within_half_a_year():
    january = datetime(2024, 1, 10, tzinfo=UTC)
    assert mentioned("the December 20 outage", january) == [day("2023-12-20")]
    assert mentioned("the launch on March 3", january) == [day("2024-03-03")]


@pytest.mark.parametrize(
    "text",
    [
        "today was long",  # the day it was written: created_at says so already
        "recently I started running",
        "last year was hard",
        "May I ask what you think?",
        "in March we met",  # a month alone in a note is too loose
        "no dates here",
    ],
)
def test_what_names_no_day_of_its_own(text):
    assert mentioned(text, WRITTEN) == []


def test_a_note_written_at_the_edges_of_the_calendar_speaks_of_no_day():
    assert mentioned("yesterday and last month", datetime(1, 1, 1, tzinfo=UTC)) == []
    assert mentioned("tomorrow and next month", datetime(9999, 12, 31, tzinfo=UTC)) == []
