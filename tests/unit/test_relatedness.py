"""Which drawer borrows its predecessor's context (``workers/store/relatedness.py``).

Real texts: turns of LoCoMo's dialogs (conversation 1, quoted), the follow-up notes of
the generated engineering notes, the project history and the burst notes (the committed
sets in ``bench/data``). The rule must call a conversation's turns related and notes that
stand alone standalone on every set; ``bench/probe_relatedness.py`` has the same counts
with LoCoMo's 5,610 pairs.

Covers: workers/store/relatedness.py
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from trusty_memory.workers.store import context, relatedness
from trusty_memory.workers.store.ranking import EPISODE_WINDOW_S

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
sys.path.insert(0, str(DATA.parent))

# LoCoMo, conversation 1 (Caroline and Melanie): its first turns, as ``bench/locomo.py``
# stores them.
DIALOG = [
    "Caroline: Hey Mel! Good to see you! How have you been?",
    "Melanie: Hey Caroline! Good to see you! I'm swamped with the kids & work. "
    "What's up with you? Anything new?",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's cool, Caroline! What happened that was so awesome? "
    "Did you hear any inspiring stories?",
    "Caroline: The transgender stories were so inspiring! I was so happy and thankful "
    "for all the support. [shares a photo: a photo of a dog walking past a wall with a "
    "painting of a woman]",
    "Melanie: Wow, love that painting! So cool you found such a helpful group. "
    "What's it done for you?",
    "Caroline: The support group has made me feel accepted and given me courage to embrace myself.",
    "Melanie: That's really cool. You've got guts. What now?",
    "Caroline: Gonna continue my edu and check out career options, which is pretty exciting!",
]


def episode_pairs(name: str) -> list[tuple[dict, dict]]:
    """Neighbouring notes of a committed set that the product puts in one episode."""
    notes = json.loads((DATA / name).read_text())["drawers"]

    def written(note: dict) -> context.Written:
        return context.Written(note["room"], context.seconds_of(note["created_at"]), "")

    return [
        (a, b)
        for a, b in itertools.pairwise(notes)
        if context.same_episode(written(a), written(b), EPISODE_WINDOW_S)
    ]


def test_every_turn_of_a_dialog_continues_the_one_before():
    for before, after in itertools.pairwise(DIALOG):
        assert relatedness.continues(before, after), after


def test_a_follow_up_note_continues_its_incident_note():
    pairs = episode_pairs("eng_notes.json")
    follow = [(a, b) for a, b in pairs if b["text"].startswith("Follow-up from that one")]
    assert len(follow) >= 15
    for a, b in follow:
        assert relatedness.continues(a["text"], b["text"]), b["text"]


@pytest.mark.parametrize(
    ("name", "least"),
    [("eng_notes.json", 1.0), ("history_notes.json", 0.99), ("burst_notes.json", 0.99)],
)
def test_notes_that_stand_alone_do_not_continue_their_neighbours(name, least):
    """Notes written seconds apart in one room, each naming its own subject: almost none
    is called a continuation."""
    pairs = [
        (a, b)
        for a, b in episode_pairs(name)
        if not b["text"].startswith("Follow-up from that one")
    ]
    assert len(pairs) >= 25
    standalone = sum(not relatedness.continues(a["text"], b["text"]) for a, b in pairs)
    assert standalone / len(pairs) >= least, (name, standalone, len(pairs))


def test_notes_about_one_project_in_a_burst_stand_alone():
    """The case of the issue: one project, one room, seconds apart, and no note needs its
    neighbour."""
    notes = [d["text"] for d in json.loads((DATA / "burst_notes.json").read_text())["drawers"]]
    httpx = [t for t in notes if t.startswith("httpx ")]
    assert len(httpx) >= 15
    for before, after in itertools.pairwise(httpx):
        assert not relatedness.continues(before, after), after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Which port does the billing API use now?", "8217 since the move."),
        ("Moved the billing API to port 8217.", "It keeps the old health check path."),
        ("Pinned celery at 5.3.1 in ingest-worker.", "Update: that one broke the beat task."),
        ("Deploy is blocked on review.", "Thanks, I'll take a look."),
        ("Release cut for Friday.", "Great news!"),
        ("Release cut for Friday.", "That sounds early."),  # a demonstrative standing alone
    ],
)
def test_replies_answers_and_back_references_continue(before, after):
    assert relatedness.continues(before, after)


@pytest.mark.parametrize(
    "after",
    [
        "PostgreSQL 16 adds the pg_stat_io view for I/O statistics.",  # "I/O" is not "I"
        "Go 1.22 for loops can range over an integer: for i := range 10.",  # nor "i"
        "The offending WAF pattern contained .*(?:.*=.*), which backtracks.",  # code, no "?"
        "Rust 2021 panic! always takes a format string.",  # a macro, no "!"
        "Clients send read-your-writes tokens with every read.",  # a compound, no "your"
        "Set batch_size = 250 in config/notifier.toml.",
        "That evening the replica fell behind on WAL.",  # a demonstrative naming its noun
        'Error messages suggest "Did you forget to import sys?" now.',  # a quoted question
    ],
)
def test_declarative_third_person_notes_stand_alone(after):
    assert not relatedness.continues("Pinned click at 8.1.7 in export-cli.", after)


def test_readings_are_kept_by_content_hash_and_match_the_rule():
    """Deep recall's kept readings (``Readings``): one reading per text hash, the same
    answer as reading afresh on every pair of the dialog, a changed text read anew, and
    the kept readings start over at their limit."""
    kept = relatedness.Readings(limit=3)
    for before, after in itertools.pairwise(DIALOG):
        got = relatedness.follows(kept.of(f"h-{before}", before), kept.of(f"h-{after}", after))
        assert got == relatedness.continues(before, after)
    question, note = "Where does staging run now?", "Staging runs on ARM since May."
    small = relatedness.Readings(limit=3)
    assert small.of("h1", question).asks and not small.of("h2", note).asks
    assert small.of("h1", note).asks  # the hash names the text: no second reading of it
    assert not small.of("h3", note).asks  # a changed text has a new hash: read afresh
    small.of("h4", question)  # the fourth: the kept readings start over with it
    assert small.of("h4", note).asks  # kept
    assert not small.of("h1", note).asks  # dropped at the start-over: read afresh
