"""Deep recall (layer 3): fusing the vector ranking with the BM25 ranking.

Kept out of ``store.py`` so the ranking rules can be read and tuned in one place; the store
fetches the two candidate lists (HNSW with the filters inside the search, FTS5 with the same
filters in SQL) and this module decides the order.

Tuned on LoCoMo (``bench/locomo.py``; 5,882 turns, 1,982 questions; turn-level R@10 of
``memory_recall_deep``, turns embedded with one neighbour each side):

==============================  ==========  =============
fusion                          turn R@10   session R@10
==============================  ==========  =============
RRF k=60, weights 1:1 (before)  59.3        85.1
RRF k=60, vector:text 1:2       64.5        88.7
RRF k=10, 1:1                   69.1        90.1
RRF k=5, 1:1 (kept)             69.5        90.1
RRF k=2, 1:1                    69.2        90.1
RRF k=10, 1:1.5                 68.1        90.5
RRF k=20, 1.5:1                 60.4        84.5
==============================  ==========  =============

A small ``k`` trusts the top of each list: the usual k=60 flattens ranks so much that a
drawer ranked 30th by both lists beats one ranked 1st by one list, and in a memory the
best keyword hit and the best semantic hit are each usually right. Candidate list sizes
from 30 to 300 changed nothing measurable.

Bounded BM25. FTS5 answers ``MATCH ... ORDER BY rank LIMIT n`` by scoring *every* drawer
that holds any query term, so one common word ("go", the "s" of "Caroline's") in a big
palace means tens of thousands of BM25 scores: 25 ms p50 and 130 ms p99 at 100k drawers.
``split_terms`` keeps the rarest terms whose document counts fit ``BM25_POSTINGS_BUDGET``
and the store ranks only the drawers holding one of those, still scored by BM25 over *all*
the terms (two queries, ``rare AND common`` and ``rare NOT common``, whose scores are
comparable because FTS5's BM25 is a plain sum over the query's phrases). A drawer that
holds only common words is the one thing given up. Measured (``bench/scale.py``'s palace
and LoCoMo's 5,882 turns in one table):

=========================  ===========================  ==========================
budget (drawers scored)    100k: BM25+vector p50 / p99  top-10 vs unbounded
=========================  ===========================  ==========================
unbounded                  22.6 / 127 ms                -
5,000 (kept)               9.1 / 20 ms                  99.9% the same
2,000                      5.7 / 12 ms                  95.9%
=========================  ===========================  ==========================

Episodes. Drawers written one after another in the same room within
``EPISODE_WINDOW_S`` are one episode (a conversation, a debugging session), and a drawer
whose neighbour in its episode is relevant is likelier to be relevant too: a reply is
found through the question it answers. ``smooth_episodes`` adds ``EPISODE_WEIGHT`` times
the fused score of each episode neighbour (the drawers with the next lower and higher
label). On LoCoMo (``bench/locomo.py``; in-process sweep over the same drawers):

======================  ==========  =============
episode weight          turn R@10   session R@10
======================  ==========  =============
0 (before)              69.5        90.1
0.1                     71.3        89.6
0.25 (kept)             73.2        88.9
0.4                     73.8        87.7
0.6                     73.2        85.3
======================  ==========  =============

It trades a little session coverage (a hit's neighbours take places another session's
turn had) for finding the evidence itself more often, which is what an agent reads.
Capping drawers per episode in the top-k, or MMR over the vectors, bought back at most
0.7 points of session R@10 and cost up to 6 of turn R@10, so neither is used.

On LoCoMo-in-one-table, dropping the common *terms* outright (instead of only their
drawers) cost up to 13 points of BM25 turn R@10; bounding the drawers cost at most 0.6 at
a budget of 150 and nothing from 300 up. Palaces under the budget are never affected.

Pseudo-relevance feedback, tried and not kept: a third RRF list (weight 0.3), BM25 over the
5 rarest terms of the top 3 fused drawers that the query lacks and another drawer holds.
With context vectors on, LoCoMo through the agent's path (all 1,982 questions) went from
72.4 to 73.4 turn R@10 (every category up), strict session R@10 88.4 -> 88.2, top-10
sessions 92.8 both; the engineering-notes set (``bench/eng_notes.py``) R@1 / R@5 / R@10
44.0 / 89.0 / 89.8 -> 45.5 / 89.0 / 90.2. But deep recall at 10k drawers went from 8.2 to
11.6-13.1 ms p50 (``bench/engine.py``, back to back; the document counts of the feedback
terms are new for every query), which the 16 ms target via MCP cannot absorb.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

RRF_K = 5  # small: see the module doc
CANDIDATES = 100  # per list, at least (30..300 measured the same)
VECTOR_WEIGHT = 1.0
TEXT_WEIGHT = 1.0
BM25_POSTINGS_BUDGET = 5000  # drawers BM25 may score per deep recall (see the module doc)
EPISODE_WEIGHT = 0.25  # share of an episode neighbour's fused score a drawer gains
EPISODE_WINDOW_S = 1800.0  # neighbours written further apart than this are not one episode


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
    rankings: Sequence[tuple[Sequence[int], float]], top_k: int, k: int | None = None
) -> list[tuple[int, float]]:
    """Weighted reciprocal-rank fusion of ``(labels best first, weight)`` rankings.

    Scores are scaled so that ranking first in every list is 1.0: higher is better and a
    caller can compare scores across queries roughly.
    """
    k = RRF_K if k is None else k
    fused: Counter[int] = Counter()
    total = 0.0
    for labels, weight in rankings:
        total += weight
        for rank, label in enumerate(labels, start=1):
            fused[label] += weight / (k + rank)
    if not fused:
        return []
    best = total / (k + 1)
    return [(label, s / best) for label, s in fused.most_common(top_k)]


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
        return sum(score.get(n, 0.0) for n in (label - 1, label + 1) if same_episode(label, n))

    boosted = [(label, (s + weight * neighbours(label)) / (1 + 2 * weight)) for label, s in fused]
    boosted.sort(key=lambda item: -item[1])
    return boosted[:top_k]
