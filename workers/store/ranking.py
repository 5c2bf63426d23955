"""Deep recall (layer 3): fusing the vector ranking with the BM25 ranking.

One deep recall reads top to bottom here: ``deep`` and the lists it fuses (HNSW with the
filters inside the search, FTS5 BM25 with the same filters in SQL, the feedback and date
lists, the episodes). ``read.ReadStore.recall`` calls ``deep`` with the palace's state
(``Palace``: what it reads of ``state.PalaceState``); ``first_answer.choose`` picks the
first answer from what ``deep`` fused.

The rules, in the order they apply (each constant below names its section of
docs/deep-recall.md, which holds the measurements that chose it and what was tried and
not kept):

* reciprocal rank fusion with a small ``RRF_K``: the top of each list is trusted ("Fusion");
* BM25 scores only the drawers holding the query's rarest terms, within
  ``BM25_POSTINGS_BUDGET`` (``split_terms``), still over all the terms ("Bounded BM25");
* a drawer gains a share of its episode neighbours' scores (``smooth_episodes``, "Episodes");
* a third list of the rarest words of the top drawers the query lacks
  (``feedback_terms``, "Pseudo-relevance feedback");
* a fourth list of the drawers written within, or speaking of, the dates a question names
  (``date_ranking``, "Dates", "The days a drawer speaks of");
* BM25 also reads the predecessor's words a drawer lacks, at ``CONTEXT_TEXT_WEIGHT``
  ("The predecessor's words");
* votes by evidence, not rank alone: the vector's by its cosine's distance from the best,
  a BM25 hit's by the share of the question's idf mass it reaches, and meaning first over
  a clear margin ("Evidence, not rank alone");
* that mass counts the question's words no drawer holds too, so a question put in other
  words gives a note sharing one of its common words a small vote ("Words no drawer holds").

Why the rules live in a document and not here: they are chosen by measurement on sets of
different sources and held out, and the record of those runs (tables, rejected variants)
is longer than the code it explains.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol

from trusty_memory.common import names
from trusty_memory.common.values import fts_or, fts_terms, own_words
from trusty_memory.workers.store import dates, first_answer, relatedness

if TYPE_CHECKING:
    import sqlite3

    import numpy as np
    import sqlite_utils

    from trusty_memory.common.config import PalaceSettings
    from trusty_memory.workers.store.index import VectorIndex

RRF_K = 5  # small: docs/deep-recall.md, "Fusion"
CANDIDATES = 100  # per list, at least (30..300 measured the same)
VECTOR_WEIGHT = 1.0
TEXT_WEIGHT = 1.0
BM25_POSTINGS_BUDGET = 5000  # drawers BM25 may score per deep recall ("Bounded BM25")
EPISODE_WEIGHT = 0.15  # share of an episode neighbour's fused score a drawer gains ("Episodes")
EPISODE_WINDOW_S = 1800.0  # neighbours written further apart than this are not one episode
FEEDBACK_DOCS = 2  # "Pseudo-relevance feedback": terms come from the top fused drawers
FEEDBACK_TERMS = 5  # the rarest of their terms the query lacks
FEEDBACK_WEIGHT = 0.3  # the feedback list's RRF weight (0.5 lowered the engineering notes)
FEEDBACK_POSTINGS_BUDGET = 500  # drawers the feedback terms may hold together
# BM25 weight of the predecessor's words (own words: 1.0), "The predecessor's words"
CONTEXT_TEXT_WEIGHT = 0.3
DATE_WEIGHT = 1.0  # the date list's RRF weight: a named date counts as much as the words ("Dates")
DOC_COUNT_CACHE = 50_000  # FTS terms whose drawer counts a palace keeps for deep recall
# Deep recall is the thorough search, never the worse first answer: where the fused order
# puts another drawer first, the vector's own first stays within the top ``VECTOR_GUARD``
# (0: no guard). Feedback terms come only from fused top drawers the vector ranks within
# its top ``FEEDBACK_VECTOR_RANK`` (0: from any), so a drawer BM25 alone put there cannot
# echo its words. Episode smoothing runs along drawers that continue each other
# (``relatedness.continues``), not every note of a room written in one half hour, when
# ``EPISODES_CONTINUE`` is 1. Integers, so ``bench/replay.py --set`` can switch them.
VECTOR_GUARD = 3
# A BM25 hit's vote counts in full only when it matches a real share of the question's
# rare-word mass: its BM25 score over the score of a drawer holding every query term once
# (the sum of their idfs). Below ``TEXT_EVIDENCE`` of it the vote shrinks in proportion
# (0: every hit votes in full, the rank fusion as it was): a note that shares one word
# most of the palace holds ("service", "deploy") no longer outvotes meaning.
TEXT_EVIDENCE = 0.5
# The vector's vote by how close each drawer's cosine is to the best one's, not by its
# rank alone: ``exp(-(best - cosine) / VECTOR_TEMPERATURE)`` of the first place's vote
# (0: by rank, the rank fusion as it was). A clear margin keeps the best match ahead of a
# drawer that is second by meaning and first by some shared words; among look-alike
# turns of one conversation, whose cosines sit close together, the words still decide.
VECTOR_TEMPERATURE = 0.1
# Where fusion's first drawer was chosen by the words (a full BM25 vote) but the vector's
# first is at least this much closer in cosine, the vector's first is the first answer
# (``first_answer.choose``; negative: off). Chosen leaving each set out ("Evidence, not rank
# alone" and "Words no drawer holds" in docs/deep-recall.md).
MEANING_FIRST_MARGIN = 0.2
# Feedback terms also come from a top drawer with a full BM25 vote (``text_votes``) that the
# vector ranks low: a drawer that matches the question's words is no incidental echo (turns
# of a conversation, found through the words they borrowed). 0: only the vector's top ten.
FEEDBACK_FULL_VOTE = 1
FEEDBACK_VECTOR_RANK = 10
EPISODES_CONTINUE = 1
# 1: a question's words no drawer holds count in ``idf_mass`` at the idf of a word held by
# none, so a hit on its one common word is a small share of a question put in other words
# ("Words no drawer holds"; 0: the mass of the words some drawer holds, as it was).
ABSENT_TERMS = 1


def split_terms(
    terms: Sequence[str], doc_count: Callable[[str], int], budget: int | None = None
) -> tuple[list[str], list[str]]:
    """``(rare, common)``: the rarest terms whose document counts sum to at most ``budget``
    (default ``BM25_POSTINGS_BUDGET``; always at least the rarest one), and the rest.
    Terms in no drawer are dropped."""
    budget = BM25_POSTINGS_BUDGET if budget is None else budget
    counted = sorted((doc_count(t), i, t) for i, t in enumerate(terms))  # ties: query order
    rare: list[str] = []
    common: list[str] = []
    total = 0
    for count, _, term in counted:
        if count == 0:
            continue
        if not rare or (not common and total + count <= budget):
            rare.append(term)
            total += count
        else:
            common.append(term)
    return rare, common


def rrf(
    rankings: Sequence[tuple[Sequence[int], float]],
    top_k: int,
    k: int | None = None,
    full_weight: float | None = None,
    votes: dict[int, float] | None = None,
    closeness: dict[int, float] | None = None,
) -> list[tuple[int, float]]:
    """Weighted reciprocal-rank fusion of ``(labels best first, weight)`` rankings.

    Scores are scaled so that ranking first in lists of ``full_weight`` in all (default:
    every list) is 1.0: higher is better and a caller can compare scores across queries
    roughly. Deep recall passes the vector and BM25 weights, so the feedback list, present
    for some queries only, adds to a score without rescaling it (and may lift it past 1.0,
    which deep recall caps only once the order is settled: capping first would tie the
    best hits). ``votes``: the share of its vote each label gets from the second list (the
    BM25 list: ``text_votes``); a label not in it votes in full. ``closeness``: the first
    list's votes by score instead of by rank (``vector_votes``), as shares of first place's.
    """
    k = RRF_K if k is None else k
    fused: defaultdict[int, float] = defaultdict(float)
    total = 0.0
    for i, (labels, weight) in enumerate(rankings):
        total += weight
        if i == 0 and closeness:
            for label in labels:
                fused[label] += weight * closeness.get(label, 0.0) / (k + 1)
            continue
        share = votes if i == 1 and votes else None
        for rank, label in enumerate(labels, start=1):
            fused[label] += weight * (share.get(label, 1.0) if share else 1.0) / (k + rank)
    if not fused:
        return []
    best = (total if full_weight is None else full_weight) / (k + 1)
    # Best first, ties in the order first seen (what ``Counter.most_common`` does; its
    # counts are typed as whole numbers, these are fractions).
    top = heapq.nlargest(top_k, fused.items(), key=itemgetter(1))
    return [(label, s / best) for label, s in top]


def smooth_episodes(
    fused: Sequence[tuple[int, float]],
    same_episode: Callable[[int, int], bool],
    top_k: int,
    weight: float | None = None,
) -> list[tuple[int, float]]:
    """Re-rank ``fused`` (label, score) giving each drawer ``weight`` times the scores of
    its episode neighbours (labels one below and one above, when ``same_episode``).

    Scores are divided by ``1 + 2 * weight`` so they stay within (0, 1].
    """
    weight = EPISODE_WEIGHT if weight is None else weight
    score = dict(fused)

    def neighbours(label: int) -> float:
        # A neighbour outside ``fused`` adds nothing, so its episode is never looked up.
        near = (n for n in (label - 1, label + 1) if n in score)
        return sum(score[n] for n in near if same_episode(label, n))

    boosted = [(label, (s + weight * neighbours(label)) / (1 + 2 * weight)) for label, s in fused]
    boosted.sort(key=lambda item: -item[1])
    return boosted[:top_k]


def feedback_terms(
    query_terms: Sequence[str],
    documents: Sequence[str],
    terms_of: Callable[[str], list[str]],
    doc_count: Callable[[str], int],
) -> list[str]:
    """The ``FEEDBACK_TERMS`` rarest terms of ``documents`` (the top fused drawers' texts)
    that the query lacks and at least one other drawer holds (a term only the feedback
    drawer holds can find nothing new), rarest first; ties keep the documents' order.

    Together they hold at most ``FEEDBACK_POSTINGS_BUDGET`` drawers: a common word says
    little about the answer, and the budget bounds what the feedback BM25 scores (in a
    palace of look-alike notes, every term but a number is common)."""
    asked = set(query_terms)
    seen: dict[str, int] = {}
    for text in documents:
        for term in terms_of(text):
            if term not in asked and term not in seen:
                seen[term] = len(seen)
    counted = sorted((count, order, term) for term, order in seen.items()
                     if (count := doc_count(term)) >= 2)  # fmt: skip
    chosen: list[str] = []
    total = 0
    for count, _, term in counted[:FEEDBACK_TERMS]:
        if total + count > FEEDBACK_POSTINGS_BUDGET:
            break
        chosen.append(term)
        total += count
    return chosen


# -- the SQL and the index behind the rules --------------------------------------------------


class Palace(Protocol):
    """What deep recall reads of a palace (``state.PalaceState``): its SQLite file, settings,
    vector index, size, and the term counts and drawers' readings it keeps."""

    db: sqlite_utils.Database
    settings: PalaceSettings
    term_counts: TermCounts
    readings: relatedness.Readings

    @property
    def index(self) -> VectorIndex: ...

    @property
    def drawer_count(self) -> int: ...


def deep(
    palace: Palace,
    query_text: str,
    query: np.ndarray,
    top_k: int,
    allowed: set[int] | None,
    room: str | None,
    tag: str | None,
) -> list[tuple[int, float, int]]:
    """Layer 3, ``memory_recall_deep``: the vector list, the BM25 list, the feedback and date
    lists when they fire, fused (``rrf``) and smoothed over episodes; ``(label, score, 3)``
    best first. ``allowed`` is the room/tag filter as labels (None: no filter)."""
    n = max(CANDIDATES, 10 * top_k)
    ef = max(n, 4 * palace.settings.ef_search)
    vector_scored = palace.index.search(query, n, ef=ef, allowed=allowed)
    vector_ranked = [label for label, _ in vector_scored]
    closeness = vector_votes(vector_scored)
    terms = fts_terms(query_text or "")
    text_scored = bm25_scored(palace, terms, n, room, tag)
    text_ranked = [label for label, _ in text_scored]
    ideal = idf_mass(palace, terms)
    votes = text_votes(palace, text_scored, ideal)
    lists = [(vector_ranked, VECTOR_WEIGHT), (text_ranked, TEXT_WEIGHT)]
    fused = rrf(lists, len(vector_ranked) + len(text_ranked), votes=votes, closeness=closeness)
    feedback = feedback_ranking(palace, query_text, fused, n, room, tag, vector_ranked, votes)
    if feedback:
        lists.append((feedback, FEEDBACK_WEIGHT))
    dated = date_ranking(palace, query_text, query, n, allowed)
    if dated:
        lists.append((dated, DATE_WEIGHT))
    if len(lists) > 2:
        size = sum(len(labels) for labels, _ in lists)
        fused = rrf(
            lists, size, full_weight=lists[0][1] + lists[1][1], votes=votes, closeness=closeness
        )
    same_episode = episodes(palace, {label for label, _ in fused})
    # The guard reads the whole order: a drawer it moves to third is no answer to top_k 1.
    smoothed = smooth_episodes(fused, same_episode, len(fused))
    if votes is not None:  # the first answer: fusion's or the vector's (``first_answer``)
        shares = {label: score / ideal for label, score in text_scored}
        evidence = first_answer.Evidence(
            vector_scored, shares, text_ranked, feedback, dated, borrows(palace),
            palace.drawer_count, ideal,
            lambda: sum(1 for term in terms if palace.term_counts.count(term)),
        )  # fmt: skip
        smoothed = first_answer.choose(smoothed, evidence, MEANING_FIRST_MARGIN, TEXT_EVIDENCE)
    ranked = guard_vector_first(smoothed, vector_ranked)[:top_k]
    return [(label, min(1.0, score), 3) for label, score in ranked]  # see ``rrf``


def borrows(palace: Palace) -> Callable[[int], bool] | None:
    """``borrowed(label)``: whether a drawer continues its predecessor (holds its words,
    ``drawers.context``), read only when asked; None with context words off."""
    if not palace.settings.context_vectors:
        return None

    def borrowed(label: int) -> bool:
        row = palace.db.conn.execute(
            "SELECT context IS NOT NULL FROM drawers WHERE label = ?", (label,)
        ).fetchone()
        return bool(row and row[0])

    return borrowed


def guard_vector_first(
    ranked: list[tuple[int, float]], vector_ranked: Sequence[int], guard: int | None = None
) -> list[tuple[int, float]]:
    """``ranked`` with the vector's first drawer moved up to place ``guard`` when fusion
    put it lower (or out): meaning alone is the plain recall's first answer, and the
    thorough search keeps it in sight. It takes the score of the drawer it passes, so the
    scores stay best first."""
    guard = VECTOR_GUARD if guard is None else guard
    if not guard or not vector_ranked or not ranked:
        return ranked
    first = vector_ranked[0]
    labels = [label for label, _ in ranked]
    at = labels.index(first) if first in labels else len(labels)
    place = min(guard, len(ranked)) - 1
    if at <= place:
        return ranked
    rest = [item for item in ranked if item[0] != first]
    moved = (first, ranked[place][1])
    return [*rest[:place], moved, *rest[place:]][: len(ranked)]


def bm25(palace: Palace, query_text: str, n: int, room: str | None, tag: str | None) -> list[int]:
    """Labels ranked by FTS5 BM25 over every query term (see ``bm25_terms``)."""
    return bm25_terms(palace, fts_terms(query_text or ""), n, room, tag)


def bm25_terms(
    palace: Palace, terms: list[str], n: int, room: str | None, tag: str | None
) -> list[int]:
    """Labels ranked by FTS5 BM25 over ``terms`` (``bm25_scored``'s order)."""
    return [label for label, _ in bm25_scored(palace, terms, n, room, tag)]


def vector_votes(scored: Sequence[tuple[int, float]]) -> dict[int, float] | None:
    """Each vector hit's vote as a share of the first's (see ``VECTOR_TEMPERATURE``)."""
    if not VECTOR_TEMPERATURE or not scored:
        return None
    best = scored[0][1]
    return {label: math.exp(-(best - cos) / VECTOR_TEMPERATURE) for label, cos in scored}


def idf_mass(palace: Palace, terms: list[str]) -> float:
    """The BM25 score of a drawer holding every query term once: the sum of their idfs
    (FTS5's, floored as FTS5 floors it; with ``ABSENT_TERMS``, a term no drawer holds at
    the idf of a term held by none). A hit's score over it is the share of the question's
    rare-word mass the hit reaches. With no term held there is no hit to weigh: 0."""
    size = max(1, palace.drawer_count)
    ideal = 0.0
    absent = 0
    for term in terms:
        held = palace.term_counts.count(term)
        if held:
            ideal += max(1e-6, math.log((size - held + 0.5) / (held + 0.5)))
        else:
            absent += 1
    if ABSENT_TERMS and ideal > 0:  # some term is held: each held one adds at least 1e-6
        ideal += absent * math.log((size + 0.5) / 0.5)
    return ideal


def text_votes(
    palace: Palace, scored: Sequence[tuple[int, float]], ideal: float
) -> dict[int, float] | None:
    """Each BM25 hit's share of its vote (see ``TEXT_EVIDENCE``; ``ideal``: ``idf_mass``);
    None: all in full."""
    if not TEXT_EVIDENCE or not scored or ideal <= 0:
        return None
    votes = {label: min(1.0, score / ideal / TEXT_EVIDENCE) for label, score in scored}
    # A drawer that continues its predecessor (a turn of a conversation) is found through
    # the words it borrowed (``drawers.context``, counted at ``CONTEXT_TEXT_WEIGHT``): the
    # check is for notes standing alone, so such a drawer keeps its vote in full.
    weak = [label for label, vote in votes.items() if vote < 1.0]
    if weak and palace.settings.context_vectors:
        for (label,) in palace.db.conn.execute(
            "SELECT label FROM drawers WHERE label IN (SELECT value FROM json_each(?))"
            " AND context IS NOT NULL",
            (json.dumps(weak),),
        ):
            votes[label] = 1.0
    return votes


def bm25_scored(
    palace: Palace, terms: list[str], n: int, room: str | None, tag: str | None
) -> list[tuple[int, float]]:
    """``(label, BM25 score)`` best first, by FTS5 BM25 over ``terms``, with the same
    filters applied inside the query, scoring only drawers that hold one of the rarer
    terms (see ``split_terms``). A drawer's episode predecessor's words
    (``drawers.context``) count at ``CONTEXT_TEXT_WEIGHT`` of its own."""
    rare, common = split_terms(terms, palace.term_counts.count)
    if not rare:
        return []
    if common:
        r, c = fts_or(rare), fts_or(common)
        matches = [f"({r}) AND ({c})", f"({r}) NOT ({c})"]
    else:
        matches = [fts_or(rare)]
    context_weight = CONTEXT_TEXT_WEIGHT if palace.settings.context_vectors else 0.0
    matches = [scoped(palace, m) for m in matches]
    sql = "SELECT f.rowid, f.rank FROM drawers_fts f"
    where = ["drawers_fts MATCH ?", f"f.rank MATCH 'bm25(1.0, {context_weight})'"]
    filters: list[object] = []
    if room is not None and room.strip():
        sql += " JOIN drawers d ON d.label = f.rowid"
        where.append("d.room = ?")
        filters.append(names.normalize_room(room))
    if tag is not None and tag != "":
        where.append("f.rowid IN (SELECT label FROM drawer_tags WHERE tag = ?)")
        filters.append(tag)
    sql += " WHERE " + " AND ".join(where) + " ORDER BY f.rank LIMIT ?"
    rows = [row for m in matches for row in palace.db.conn.execute(sql, [m, *filters, n])]
    rows.sort(key=lambda row: row[1])  # FTS5 rank: lower is better (the score negated)
    return [(label, -rank) for label, rank in rows[:n]]


def scoped(palace: Palace, match: str) -> str:
    """A BM25 match over what deep recall reads: a drawer's own words and its
    predecessor's (``drawers.context``), or its own alone with the switch off, even
    where older drawers kept context words."""
    return match if palace.settings.context_vectors else own_words(match)


def feedback_ranking(
    palace: Palace,
    query_text: str,
    fused: list[tuple[int, float]],
    n: int,
    room: str | None,
    tag: str | None,
    vector_ranked: Sequence[int] = (),
    votes: dict[int, float] | None = None,
) -> list[int]:
    """BM25 over the feedback terms of the top fused drawers (``feedback_terms``): it
    finds drawers that share the answer's words rather than the question's. Only those the
    vector also ranks high give terms (``FEEDBACK_VECTOR_RANK``)."""
    top = [label for label, _ in fused[:FEEDBACK_DOCS]]
    if FEEDBACK_VECTOR_RANK and vector_ranked:
        near = set(vector_ranked[:FEEDBACK_VECTOR_RANK])
        full = (
            {label for label in top if votes.get(label, 0.0) >= 1.0}
            if FEEDBACK_FULL_VOTE and votes is not None
            else set()
        )
        top = [label for label in top if label in near or label in full]
    if not top:
        return []
    content = dict(
        palace.db.conn.execute(
            "SELECT label, content FROM drawers WHERE label IN (SELECT value FROM json_each(?))",
            (json.dumps(top),),
        )
    )
    texts = [content[label] for label in top if label in content]  # best first
    terms = feedback_terms(
        fts_terms(query_text or ""),
        texts,
        fts_terms,
        lambda term: palace.term_counts.count(term, FEEDBACK_POSTINGS_BUDGET),
    )
    return bm25_terms(palace, terms, n, room, tag) if terms else []


def date_ranking(
    palace: Palace, query_text: str, query: np.ndarray, n: int, allowed: set[int] | None
) -> list[int]:
    """The drawers written within the dates the query names (``workers/store/dates.py``),
    or whose text speaks of a day within them (``drawer_days``: "yesterday" in a note
    written the day after), ranked by the query's vector; none when it names no date,
    or when its dates cover half the palace or more (the list would only repeat the
    vector list)."""
    spans = dates.windows(query_text or "", lambda: years(palace.db.conn))
    if not spans:
        return []
    inside: set[int] = set()
    for start, end in spans:
        inside.update(
            row[0]
            for row in palace.db.conn.execute(
                "SELECT label FROM drawers WHERE created_at >= ? AND created_at < ?"
                " UNION SELECT label FROM drawer_days"
                " WHERE start >= ? AND start < ? AND end > ?",
                (start, end, dates.earliest_overlap(start), end, start),
            )
        )
    if allowed is not None:
        inside &= allowed
    if not inside or 2 * len(inside) >= palace.drawer_count:
        return []
    return [label for label, _ in palace.index.search(query, n, allowed=inside)]


def years(conn: sqlite3.Connection) -> range:
    """The years the palace's drawers were written in (for dates without a year)."""
    first, last = conn.execute("SELECT min(created_at), max(created_at) FROM drawers").fetchone()
    if first is None:
        return range(0)
    # The stored form writes year 1 as "1-01-01T...": read the year up to its dash.
    return range(int(first.split("-", 1)[0]), int(last.split("-", 1)[0]) + 1)


def episodes(palace: Palace, labels: set[int]) -> Callable[[int, int], bool]:
    """``same_episode(a, b)`` for two of ``labels`` whose labels are adjacent: same room,
    written within ``EPISODE_WINDOW_S`` of each other, and (``EPISODES_CONTINUE``) the later
    one continuing the earlier (``relatedness.continues``: notes written in a burst stand
    alone, and smoothing across them lifts a neighbour for a question it does not answer).
    Only drawers with a label neighbour among ``labels`` are read: smoothing adds nothing
    for the others (``smooth_episodes``), and a deep recall's ~200 candidates have few
    such pairs."""
    wanted = sorted(x for x in labels if x - 1 in labels or x + 1 in labels)
    where: dict[int, tuple[str, float | None, str, str]] = {
        label: (room, seconds, content, content_hash)
        for label, room, seconds, content, content_hash in palace.db.conn.execute(
            "SELECT label, room, julianday(created_at) * 86400.0, content, content_hash"
            " FROM drawers WHERE label IN (SELECT value FROM json_each(?))",
            (json.dumps(wanted),),
        )
    }

    def same_episode(a: int, b: int) -> bool:
        ra, ta, ca, ha = where.get(a, ("", None, "", ""))
        rb, tb, cb, hb = where.get(b, ("", None, "", ""))
        if ta is None or tb is None or ra != rb or abs(ta - tb) > EPISODE_WINDOW_S:
            return False
        if not EPISODES_CONTINUE:
            return True
        first, second = palace.readings.of(ha, ca), palace.readings.of(hb, cb)
        return relatedness.follows(first, second) if a < b else relatedness.follows(second, first)

    return same_episode


class TermCounts:
    """How many drawers hold each FTS term, the order ``split_terms`` and ``feedback_terms``
    rank terms by: counted in SQLite on first use, kept per palace process
    (``PalaceState.term_counts``) and forgotten when a reader catches up."""

    def __init__(self, palace: Palace) -> None:
        self.palace = palace
        self.counts: dict[str, int] = {}  # FTS term -> drawers holding it (capped)
        self.size = 0  # palace size when those counts were taken
        self.over: dict[str, int] = {}  # FTS term -> a smaller cap it exceeds

    def count(self, term: str, cap: int = BM25_POSTINGS_BUDGET) -> int:
        """How many drawers hold ``term``, counted only up to ``cap`` + 1 (the BM25 budget
        unless the caller needs less: the split needs an order, not a census) and cached
        until the palace has changed size by a tenth. The cache keeps exact counts and
        the BM25 budget's "more"; a term over a smaller cap is remembered apart, so that
        the next full count is still taken. A zero is never cached: the split drops such
        a term, and the next write may be the first drawer to hold it."""
        size = self.palace.drawer_count
        if abs(size - self.size) > max(100, self.size // 10):
            self.forget()
            self.size = size
        count = self.counts.get(term)
        if count:
            return min(count, cap + 1)
        if cap < BM25_POSTINGS_BUDGET and self.over.get(term, -1) >= cap:
            return cap + 1
        if len(self.counts) + len(self.over) >= DOC_COUNT_CACHE:
            self.forget()
        count = self.palace.db.conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM drawers_fts WHERE drawers_fts MATCH ? LIMIT ?)",
            (scoped(self.palace, fts_or([term])), cap + 1),
        ).fetchone()[0]
        if count and (count <= cap or cap >= BM25_POSTINGS_BUDGET):
            self.counts[term] = count
        elif count:
            self.over[term] = cap
        return count

    def forget(self) -> None:
        """Drop every count (a reader that caught up: texts may have changed)."""
        self.counts.clear()
        self.over.clear()
