"""Context-aware vectors: a drawer that continues its predecessor carries its meaning.

A reply like "Yes, last Tuesday!" or a note like "Follow-up from that one: added an alert on
heap usage" means little alone. A drawer written right after another one in the same room,
within the episode window (``retrieval.EPISODE_WINDOW_S``: the episodes ``smooth_episodes``
uses at recall time), that is shaped as a reply to it or a continuation of it
(``relatedness.continues``: a conversation's turn, an answer to a question, an opening that
points back) is given the vector ``own + CONTEXT_WEIGHT * predecessor``, unit length,
where both are the model's vectors of the drawers' own texts. A note that names its own
subject borrows nothing, however close in time: notes an agent writes in a burst stand
alone, and a neighbour's meaning only pulls each towards the wrong questions
(``BENCHMARKS.md``, burst notes). The stored content and the
duplicate check stay the drawer's own. A drawer whose caller sent ``embed_text`` keeps
that text's vector: the caller chose its context.

The words side. The same drawer keeps the predecessor's words that its own text lacks
(``words``: once each, at most ``CONTEXT_CHARS`` characters) in ``drawers.context``, a
second full-text column that deep recall's BM25 weighs at ``ranking.CONTEXT_TEXT_WEIGHT``
of the drawer's own words (docs/deep-recall.md has the figures); keyword search never reads
it. Only the words the drawer lacks: a word both hold would count twice for a note
written after another on the same subject, and rank it above that note for the note's
own question.

The predecessor's own text was embedded when it was written, so the embedder's cache (or
the same batch) answers it: no extra tokens through the model in the usual case, and at
most one more text per remember when the cache has lost it (a restarted daemon).

On by default; ``[palace] context_vectors = false``
(``TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS=0``) turns off both sides, and deep recall then
reads no drawer's context words, older ones' included. The dreamer finds restatements
by cosine (>= 0.95), and two restatements written after different predecessors have mixes
below that, so the store keeps a mixed drawer's own vector beside the mix (``Mixed``,
``drawers.own_vector``) and the dreamer compares those. Measured through the product
(``bench/locomo.py`` with no ``embed_text``, first 3 conversations, 495 questions;
``bench/eng_notes.py``, 200 questions), ``memory_recall_deep``:

=========================================  ======================  =====================
rule                                       LoCoMo turn R@10 /      eng notes R@1 / R@5 /
                                           strict session R@10     R@10
=========================================  ======================  =====================
off                                        73.4 / 89.9             43.8 / 85.2 / 89.8
predecessor text + own text, 300 chars     76.7 / 90.3             43.2 / 88.0 / 90.2
same, 120 chars                            75.2 / 89.0             42.8 / 84.5 / 89.2
vector mix, weight 0.3                     75.3 / 89.0             44.2 / 88.8 / 89.8
vector mix, weight 0.5 (chosen)            75.7 / 89.0             44.0 / 89.0 / 89.8
vector mix, weight 0.7                     75.6 / 89.0             43.5 / 88.5 / 89.8
vector mix, weight 1.0                     76.6 / 89.0             43.2 / 87.8 / 90.2
=========================================  ======================  =====================

Embedding the texts together is best on LoCoMo but pulls a self-contained note towards an
unrelated predecessor (eng notes: single-note R@1 87.5 -> 82.5, near-duplicate R@1 81.2 ->
68.8) and costs up to ~75 more tokens per remember; the vector mix keeps those (87.5,
81.2) and costs no model time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import numpy as np

from trusty_memory.workers.store import relatedness

CONTEXT_WEIGHT = 0.5  # share of the predecessor's vector (see the module doc)
CONTEXT_CHARS = 300  # of the predecessor's words kept for BM25 (``drawers.context``)


@dataclass(frozen=True)
class Written:
    """What the rule needs of a drawer: its room, when it was written, its own text."""

    room: str
    seconds: float
    text: str


def seconds_of(created_at: str) -> float:
    """RFC 3339 (as the store keeps it, ``...Z``) to epoch seconds."""
    return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()


def same_episode(before: Written, after: Written, window_s: float) -> bool:
    """``after`` continues ``before``'s episode: same room, written within ``window_s``."""
    return before.room == after.room and abs(after.seconds - before.seconds) <= window_s


def context_of(previous: Written | None, drawer: Written, window_s: float) -> str | None:
    """The text whose vector is mixed into ``drawer``'s, given the drawer written just
    before it (None: no predecessor in the same episode, or ``drawer`` does not continue
    it: ``relatedness.continues``)."""
    if previous is None or not same_episode(previous, drawer, window_s):
        return None
    if not previous.text.strip() or not relatedness.continues(previous.text, drawer.text):
        return None
    return previous.text


class Mixed(NamedTuple):
    """A remember's two vectors: the mix the index holds, and the drawer's own.

    The store keeps the own vector beside the mix (``drawers.own_vector``) because the
    dreamer compares drawers by what they say, not by what came before them: two
    restatements written after different predecessors have mixes that fall below its 0.95
    cosine, and their own vectors do not.
    """

    vector: np.ndarray  # own + CONTEXT_WEIGHT * predecessor, unit length
    own: np.ndarray
    context: str | None = None  # the predecessor's text; BM25 keeps ``words`` of it


_WORD = re.compile(r"\w+")


def words(text: str | None, own: str) -> str | None:
    """What ``drawers.context`` keeps of a predecessor's text: the words the drawer's own
    text lacks, once each, up to ``CONTEXT_CHARS`` characters. A word both hold would
    count twice for the drawer after a note on the same subject, and put it above that
    note for the note's own question."""
    if not text:
        return None
    seen = {w.lower() for w in _WORD.findall(own)}
    lacking = []
    for word in _WORD.findall(text):
        if word.lower() not in seen:
            seen.add(word.lower())
            lacking.append(word)
    kept = " ".join(lacking)[:CONTEXT_CHARS].strip()
    return kept or None


def contexts_in_order(
    previous: Written | None, drawers: Iterable[Written], window_s: float
) -> Iterator[str | None]:
    """``context_of`` for each of ``drawers``, written in this order after ``previous``
    (the palace's newest before them)."""
    for drawer in drawers:
        yield context_of(previous, drawer, window_s)
        previous = drawer


def words_in_order(
    previous: Written | None, drawers: Iterable[Written], window_s: float
) -> Iterator[str | None]:
    """``words`` for each of ``drawers``, written in this order after ``previous``: what
    the v6 migration stores."""
    drawers = list(drawers)
    for drawer, text in zip(drawers, contexts_in_order(previous, drawers, window_s), strict=True):
        yield words(text, drawer.text)


def mix(own: np.ndarray, previous: np.ndarray, weight: float = CONTEXT_WEIGHT) -> np.ndarray:
    """``own + weight * previous``, unit length."""
    vec = own.astype(np.float32) + weight * previous.astype(np.float32)
    norm = float(np.linalg.norm(vec))
    return (vec / norm).astype(np.float32) if norm > 0 else own
