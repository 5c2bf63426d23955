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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

RRF_K = 5  # small: see the module doc
CANDIDATES = 100  # per list, at least (30..300 measured the same)
VECTOR_WEIGHT = 1.0
TEXT_WEIGHT = 1.0


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
