"""Deep recall's first answer: fusion's first drawer or the vector's, decided by evidence.

Deep recall fuses the vector's order with the words' (``ranking.deep``). Where the two
disagree about rank 1, one of them is usually right, and which one depends on how strong
each side's evidence is for this question: a clear lead in cosine over a note that matched
the question's words (a note asked about in other words: the vector is right), or
look-alike turns of one conversation whose cosines sit together while one holds the
question's rare words (the words are right).

The rule (``choose``): where fusion's first has a full BM25 vote (its score reaches
``text_evidence`` of the question's idf mass), stands alone (continues no predecessor: a
conversation's turn leaves it to the words), no date the question names chose it, and the
vector's first is at least ``margin`` closer in cosine, the vector's first is the first
answer. It was read from the paraphrase questions plain recall answered and deep recall did
not, and kept because the other sets are indifferent to it (BENCHMARKS.md, "Deep recall:
evidence, not rank alone").

``features`` describes a disagreement in terms any palace has (cosines, shares of the
question's idf mass, ranks, flags; never a set's vocabulary), so that a fitted model can be
weighed against the rule: ``bench/first_answer_fit.py`` fits logistic models on them and
chooses among those, this rule and no swap at all by leaving each source of questions out
in turn. It chooses this rule for every held-out source but the paraphrase set (BENCHMARKS.md,
"Deep recall's first answer: a fitted model, measured"): on every other set, a fusion first
that is far in cosine and stands alone is right far more often than the vector's, so no
model fitted on them learns to swap, and the fitted ones lose R@1 on the sets they were not
fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

FEATURES = (
    "cosine_gap",  # vector first's cosine minus fusion first's (-1 when not returned)
    "vector_margin",  # vector first's cosine minus the vector's second's
    "text_share_fused",  # fusion first's BM25 score over the question's idf mass
    "text_share_vector",  # the same for the vector's first (0: no BM25 hit)
    "borrowed_fused",  # fusion first continues its predecessor (a conversation's turn)
    "borrowed_vector",
    "feedback_fused",  # in the feedback list's top ten (the answer's words)
    "feedback_vector",
    "dated_fused",  # among the drawers of a date the question names
    "dated_vector",
    "vector_rank_fused",  # log(1 + fusion first's place in the vector's order)
    "text_rank_vector",  # log(1 + the vector first's place in BM25's order)
    "fused_lead",  # fusion first's fused score minus the vector first's
    "text_reach",  # share of the palace BM25 found a question word in
    "question_rarity",  # the question's idf per word over the rarest a word can be
    "fused_rare_words",  # fusion first's BM25 score in units of the rarest word's idf
)
SHARE_CAP = 2.0  # a share past twice the idf mass says nothing more
FEEDBACK_TOP = 10


@dataclass(frozen=True)
class Evidence:
    """What deep recall knows of its candidates when it settles the first answer."""

    vector_scored: Sequence[tuple[int, float]]  # (label, cosine), best first
    text_shares: dict[int, float]  # BM25 hits: score over the question's idf mass
    text_ranked: Sequence[int] = ()  # BM25 order
    feedback: Sequence[int] = ()
    dated: Sequence[int] = ()
    borrowed: Callable[[int], bool] | None = None  # None: context words off
    palace_size: int = 1
    idf_mass: float = 0.0  # ``ranking.idf_mass`` of the question's words
    # How many of the question's words the palace holds: counted only when ``features``
    # asks (the bench's models read it; the rule does not).
    words: Callable[[], int] = lambda: 0


def cosine_gap(scored: Sequence[tuple[int, float]], label: int) -> float:
    """How much closer the vector's first is than ``label`` (not returned: cosine -1)."""
    return scored[0][1] - dict(scored).get(label, -1.0)


def features(ranked: Sequence[tuple[int, float]], evidence: Evidence) -> list[float] | None:
    """``FEATURES`` for fusion's first against the vector's first; None when they agree
    (or either list is empty): there is nothing to choose."""
    scored = evidence.vector_scored
    if not ranked or not scored:
        return None
    fused_first, vector_first = ranked[0][0], scored[0][0]
    if fused_first == vector_first:
        return None
    best = scored[0][1]
    vector_order = {label: i for i, (label, _) in enumerate(scored)}
    text_order = {label: i for i, label in enumerate(evidence.text_ranked)}
    fused_score = dict(ranked)
    feedback = set(evidence.feedback[:FEEDBACK_TOP])
    dated = set(evidence.dated)
    borrowed = evidence.borrowed or (lambda _label: False)
    shares = evidence.text_shares
    rarest = math.log(max(2, evidence.palace_size) + 0.5) - math.log(1.5)  # one drawer's idf
    return [
        cosine_gap(scored, fused_first),
        best - scored[1][1] if len(scored) > 1 else 0.0,
        min(SHARE_CAP, shares.get(fused_first, 0.0)),
        min(SHARE_CAP, shares.get(vector_first, 0.0)),
        float(borrowed(fused_first)),
        float(borrowed(vector_first)),
        float(fused_first in feedback),
        float(vector_first in feedback),
        float(fused_first in dated),
        float(vector_first in dated),
        math.log1p(vector_order.get(fused_first, len(scored))),
        math.log1p(text_order.get(vector_first, max(len(scored), len(text_order)))),
        ranked[0][1] - fused_score.get(vector_first, 0.0),
        min(1.0, len(evidence.text_ranked) / max(1, evidence.palace_size)),
        evidence.idf_mass / max(1, evidence.words()) / rarest,
        shares.get(fused_first, 0.0) * evidence.idf_mass / rarest,
    ]


def vector_wins(
    gap: float, share: float, borrowed: bool, dated: bool, margin: float, text_evidence: float
) -> bool:
    """The rule (see the module doc), over fusion's first: how much further it is in cosine
    than the vector's first (``gap``), its share of the question's idf mass, whether it
    continues its predecessor and whether a named date chose it."""
    return (
        margin >= 0 and text_evidence > 0 and gap >= margin and share >= text_evidence
    ) and not (borrowed or dated)


def choose(
    ranked: list[tuple[int, float]], evidence: Evidence, margin: float, text_evidence: float
) -> list[tuple[int, float]]:
    """``ranked`` with the vector's first drawer put first where the rule says its evidence
    outweighs fusion's first's (``vector_wins``); it takes the score of the drawer it
    passes, so scores stay best first. Negative ``margin``: off. Only what the rule reads
    is computed (``features`` is for weighing models against it)."""
    scored = evidence.vector_scored
    if margin < 0 or not ranked or not scored or ranked[0][0] == scored[0][0]:
        return ranked
    top, first = ranked[0][0], scored[0][0]
    gap = cosine_gap(scored, top)
    share = evidence.text_shares.get(top, 0.0)
    if gap < margin or share < text_evidence:  # the cheap tests first: no look-up
        return ranked
    borrowed = evidence.borrowed is not None and evidence.borrowed(top)
    if not vector_wins(gap, share, borrowed, top in evidence.dated, margin, text_evidence):
        return ranked
    rest = [item for item in ranked if item[0] != first]
    return [(first, ranked[0][1]), *rest][: len(ranked)]
