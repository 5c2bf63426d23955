"""Deep recall is hybrid, through the real daemon and the real MiniLM model.

Each case is built so that one half of the fusion alone would miss it: a made-up keyword
that only BM25 can match, a paraphrase that shares no word with its query (only the vector
can match it), and a reply whose meaning lives in the turn before it (findable through a
caller's ``embed_text``, or through the context vector the palace gives a drawer written
right after another in the same room; not when written hours later).

Covers: workers/store/ranking.py workers/store/context.py workers/store/relatedness.py
"""

from __future__ import annotations

import shutil
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import Daemon, _short_tmp
from trusty_memory.client.sync import Client

pytestmark = pytest.mark.slow

DISTRACTORS = [
    "We moved the staging database to the new cluster on Monday.",
    "The login page shows a spinner forever when the token expires.",
    "Flaky integration tests were traced to a shared temp directory.",
    "Release notes for version 2.4 still need a security section.",
    "The billing service retries failed card payments three times.",
    "Our API rate limit is 600 requests per minute per key.",
    "Cache invalidation on product updates is handled by events.",
    "The search index is rebuilt nightly at two in the morning.",
    "On-call rotation switches every Wednesday at noon.",
    "Memory usage of the worker grows when images are resized.",
    "TLS certificates renew automatically thirty days before expiry.",
    "I baked sourdough bread over the weekend and it came out great.",
    "We hiked up the ridge trail and saw three deer near the lake.",
    "My sister is visiting from Lisbon next month for a week.",
    "The team lunch moved to the Thai place across the street.",
]
KEYWORD = "Remember: the feature flag for the new scheduler is called quokkaflip."
PARAPHRASE = "My daughter began taking violin lessons last week."


QUESTION = "Do you still go bouldering at the climbing gym?"
REPLY = "Yes, every Saturday morning!"


@pytest.fixture(scope="module")
def daemon():
    """This module's daemon has context vectors on (``[palace] context_vectors``)."""
    home = _short_tmp("tm-")
    d = Daemon(home, extra_env={"TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS": "1"}).start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def palace(daemon):
    """Palace ``hybrid`` stores the reply with its context window; ``plain`` without it,
    right after the question (as an agent would); ``apart`` three hours after it."""
    later = (datetime.now(UTC) + timedelta(hours=3)).isoformat()
    with Client(daemon.config, autostart=False) as client:
        for name in ("hybrid", "plain", "apart"):
            client.palace_create(name)
            for text in [*DISTRACTORS, KEYWORD, PARAPHRASE, QUESTION]:
                client.remember(name, text)
        client.remember("hybrid", REPLY, embed_text=f"{QUESTION}\n{REPLY}", tags=["Ann"])
        client.remember("plain", REPLY, tags=["Ann"])
        client.remember("apart", REPLY, tags=["Ann"], created_at=later)
        yield client


def contents(result, k: int = 3) -> list[str]:
    return [hit.content for hit in result.results[:k]]


def test_deep_recall_finds_a_keyword_only_match(palace):
    deep = palace.recall("hybrid", "what is quokkaflip?", deep=True)
    assert KEYWORD in contents(deep)
    assert all(hit.layer == 3 for hit in deep.results)
    scores = [hit.score for hit in deep.results]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1


def test_deep_recall_finds_a_paraphrase_with_no_shared_word(palace):
    query = "Which musical instrument is the kid studying?"
    assert not set(query.lower().split()) & set(PARAPHRASE.lower().split())
    assert PARAPHRASE in contents(palace.recall("hybrid", query, deep=True))


def test_embed_text_puts_a_reply_in_its_context_and_stores_the_turn_itself(palace):
    query = "How often does Ann go climbing?"
    for deep in (False, True):
        assert REPLY in contents(palace.recall("hybrid", query, deep=deep)), deep
    [hit] = palace.recall("hybrid", query, deep=True, tag="Ann").results
    assert hit.content == REPLY


def test_a_reply_written_right_after_its_question_is_found_without_client_help(palace):
    query = "How often does Ann go climbing?"
    # The palace mixed the question's vector into the reply's (``workers/store/context.py``).
    for deep in (False, True):
        assert REPLY in contents(palace.recall("plain", query, deep=deep)), deep
    [hit] = palace.recall("plain", query, deep=True, tag="Ann").results
    assert hit.content == REPLY  # stored as written
    # The control: the same reply written hours later is not found by its vector alone.
    assert REPLY not in contents(palace.recall("apart", query))


def test_the_reply_keeps_the_question_words_it_lacks_for_full_text_search(daemon, palace):
    """The words side of the same rule, read from the palace file the writer wrote: the
    reply written right after its question keeps the question's words it lacks; the one
    written hours later, and the one whose caller sent ``embed_text``, keep none."""

    def kept(name: str) -> str | None:
        path = daemon.config.palace_dir(name) / "palace.sqlite3"
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            query = "SELECT context FROM drawers WHERE content = ?"
            return conn.execute(query, (REPLY,)).fetchone()[0]
        finally:
            conn.close()

    assert kept("plain") == "Do you still go bouldering at the climbing gym"
    assert kept("apart") is None
    assert kept("hybrid") is None


def test_deep_recall_returns_no_duplicates(palace):
    result = palace.recall("hybrid", "violin lessons for my daughter", top_k=10, deep=True)
    ids = [hit.drawer_id for hit in result.results]
    assert len(ids) == len(set(ids)) == 10
