"""Probe: could a session-level signal, or query words widened by the model, lift deep
recall's session coverage on LoCoMo?

    .venv/bin/python bench/probe_session_levers.py [--limit-conversations N]
        [--questions-per-conversation N] [--home DIR] [--eng-notes FILE ...]

Not the product. The real daemon stores LoCoMo the agent's way (as ``bench/locomo.py``
does, context vectors on) and answers every question's ``memory_recall_deep`` with
top_k 100; each lever then re-scores that list here, by adding to a drawer's fused
score (whose scale is the product's RRF, first place in both main lists = 1.0):

- ``session-bm25 w``: ``w / (6 + r)``, r the rank of the drawer's session when whole
  sessions are the BM25 documents (FTS5, porter, the question's terms ORed). Sessions
  stand in for the product's episodes, which here are the same thing.
- ``session-mass w``: ``w`` times its session's share of the top 30's summed scores,
  relative to the best session's.
- ``widened-words k tau w``: each question term's ``k`` nearest words of the
  conversation's own vocabulary by MiniLM cosine (at least ``tau``, other stems only)
  become one more BM25 list over the turns, added as ``w / (6 + r)``.

With ``--eng-notes``, the session-BM25 prior is also measured on those engineering-notes
files, over the palace's own episodes (same room within the episode window), as
R@1 / R@5 / R@10 (on stderr).

Reported per lever: turn R@10, strict session R@10 (all gold sessions among the
sessions of the top 10) and top-10 sessions R@10 (from the top 50), as ``locomo.py``
counts them. A lever that cannot move the session figures here cannot in the product.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sqlite3
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo as lm
from locomo_data import (
    Conversation,
    LoadReport,
    load,
    session_of,
    session_recall,
    top_sessions_recall,
    turn_recall,
)

from trusty_memory.client.sync import Client
from trusty_memory.common.values import STOPWORDS, fts_or, fts_terms
from trusty_memory.workers.store import context
from trusty_memory.workers.store import ranking as retrieval

POOL = 100
Hits = list[tuple[str, float]]  # (dia_id, fused score), best first
Lever = Callable[[Conversation, int, Hits], dict[str, float]]  # extra score per dia_id


def deep_pools(config, convs: list[Conversation]) -> dict[tuple[str, int], Hits]:
    """Every question's deep recall, top ``POOL``, with the product's scores."""
    by_id = {lm.drawer_id(t): t.dia_id for conv in convs for t in conv.turns}
    pools: dict[tuple[str, int], Hits] = {}

    def work(client: Client, item: object) -> None:
        conv, q = item
        data = client.call(
            "memory_recall_deep", {"query": q.question, "top_k": POOL}, palace=lm.palace_name(conv)
        )
        pools[(q.conv, q.index)] = [(by_id[h["drawer_id"]], h["score"]) for h in data["results"]]

    items = [(conv, q) for conv in convs for q in conv.questions]
    lm.run_threads(lm.RECALL_THREADS, items, work, config)
    return pools


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z][a-z']+", text.lower()) if len(w) > 2]


class Bm25:
    """One in-memory FTS5 table of ``docs``; ``rank(terms)`` -> {doc number: rank}."""

    def __init__(self, docs: list[str]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61')")
        self.db.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", enumerate(docs))

    def rank(self, terms: list[str]) -> dict[int, int]:
        if not terms:
            return {}
        rows = self.db.execute(
            "SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (fts_or(terms), POOL)
        ).fetchall()
        return {row[0]: r for r, row in enumerate(rows)}


def session_bm25(weight: float) -> Lever:
    tables: dict[str, tuple[Bm25, list[int]]] = {}

    def lever(conv: Conversation, qi: int, hits: Hits) -> dict[str, float]:
        if conv.sample_id not in tables:
            sessions: dict[int, list[str]] = {}
            for t in conv.turns:
                sessions.setdefault(t.session, []).append(lm.turn_line(t, True))
            tables[conv.sample_id] = (
                Bm25(["\n".join(s) for s in sessions.values()]),
                list(sessions),
            )
        table, numbers = tables[conv.sample_id]
        ranks = {
            numbers[i]: r for i, r in table.rank(fts_terms(conv.questions[qi].question)).items()
        }
        return {d: weight / (6 + ranks[session_of(d)]) for d, _ in hits if session_of(d) in ranks}

    return lever


def session_mass(weight: float, top: int = 30) -> Lever:
    def lever(conv: Conversation, qi: int, hits: Hits) -> dict[str, float]:
        mass: dict[int, float] = {}
        for d, score in hits[:top]:
            mass[session_of(d)] = mass.get(session_of(d), 0.0) + score
        best = max(mass.values(), default=1.0) or 1.0
        return {d: weight * mass.get(session_of(d), 0.0) / best for d, _ in hits}

    return lever


def widened_words(vocab: list[str], vectors: np.ndarray, k: int, tau: float, weight: float):
    row = {w: i for i, w in enumerate(vocab)}
    tables: dict[str, tuple[Bm25, np.ndarray]] = {}

    def lever(conv: Conversation, qi: int, hits: Hits) -> dict[str, float]:
        if conv.sample_id not in tables:
            own = {w for t in conv.turns for w in words(lm.turn_line(t, True))}
            tables[conv.sample_id] = (
                Bm25([lm.turn_line(t, True) for t in conv.turns]),
                np.array([w in own for w in vocab]),
            )
        table, mask = tables[conv.sample_id]
        extra: list[str] = []
        for term in dict.fromkeys(
            w for w in words(conv.questions[qi].question) if w not in STOPWORDS
        ):
            sims = np.where(mask, vectors @ vectors[row[term]], -1.0)
            near = [
                vocab[j]
                for j in np.argsort(-sims)[: k + 5]
                if sims[j] >= tau and vocab[j][:4] != term[:4]
            ]
            extra.extend(near[:k])
        ranks = table.rank(list(dict.fromkeys(extra)))
        return {conv.turns[i].dia_id: weight / (6 + r) for i, r in ranks.items()}

    return lever


def measure(convs: list[Conversation], pools: dict, lever: Lever | None) -> str:
    sums = [0.0, 0.0, 0.0]
    n = 0
    for conv in convs:
        for qi, q in enumerate(conv.questions):
            hits = pools[(q.conv, q.index)]
            scores = dict(hits)
            for d, extra in (lever(conv, qi, hits) if lever else {}).items():
                scores[d] = scores.get(d, 0.0) + extra
            ranked = sorted(scores, key=lambda d: -scores[d])  # stable: the product's order
            sums[0] += turn_recall(q.gold, ranked, 10)
            sums[1] += session_recall(q.gold, ranked, 10)
            sums[2] += top_sessions_recall(q.gold, ranked[: lm.SESSION_POOL], 10)
            n += 1
    return " / ".join(f"{100 * s / n:.1f}" for s in sums)


def where_missed(convs: list[Conversation], pools: dict) -> str:
    """Where the gold sessions that deep recall's top-10 sessions miss sit in its order
    of sessions (by best turn, top 100), and the LoCoMo categories of their questions."""
    places: Counter[str] = Counter()
    categories: Counter[int] = Counter()
    for conv in convs:
        for q in conv.questions:
            order = list(dict.fromkeys(session_of(d) for d, _ in pools[(q.conv, q.index)]))
            for gold in q.gold_sessions - set(order[:10]):
                at = order.index(gold) + 1 if gold in order else None
                places["not in the top 100" if at is None else f"{(at - 1) // 5 * 5 + 1}+"] += 1
                categories[q.category] += 1
    return f"{sorted(places.items())}; by category {sorted(categories.items())}"


def eng_notes_prior(config, path: Path, weights: list[float]) -> list[str]:
    """The session-BM25 prior on an engineering-notes file: its notes stored the agent's
    way, each question's deep recall at top_k ``POOL``, episodes by the palace's rule
    (same room within ``retrieval.EPISODE_WINDOW_S``) as the BM25 documents."""
    data = json.loads(path.read_text())
    notes = data["drawers"]
    written = [
        context.Written(n["room"], context.seconds_of(n["created_at"]), n["text"]) for n in notes
    ]
    episode = [0]
    for a, b in itertools.pairwise(written):
        episode.append(episode[-1] + (not context.same_episode(a, b, retrieval.EPISODE_WINDOW_S)))
    of = {n["id"]: e for n, e in zip(notes, episode, strict=True)}
    texts: dict[int, list[str]] = {}
    for n, e in zip(notes, episode, strict=True):
        texts.setdefault(e, []).append(n["text"])
    table = Bm25(["\n".join(texts[e]) for e in sorted(texts)])  # doc number = episode
    palace = f"eng-{path.stem}".replace("_", "-")
    ids: dict[str, str] = {}
    with Client(config, autostart=False) as client:
        if palace in client.palace_list():  # a reused home: start this palace afresh
            client.palace_delete(palace)
        client.palace_create(palace)
        for n in notes:
            params = {k: n[k] for k in ("text", "room", "tags", "created_at")}
            ids[client.call("memory_remember", params, palace=palace)["drawer_id"]] = n["id"]
        pools = [
            [(ids[h["drawer_id"]], h["score"]) for h in client.call(
                "memory_recall_deep", {"query": q["question"], "top_k": POOL}, palace=palace
            )["results"]]
            for q in data["questions"]
        ]  # fmt: skip
    out = []
    for w in weights:
        sums = [0.0, 0.0, 0.0]
        for q, hits in zip(data["questions"], pools, strict=True):
            ranks = table.rank(fts_terms(q["question"]))
            scores = {n: s + (w / (6 + ranks[of[n]]) if of[n] in ranks else 0.0) for n, s in hits}
            ranked = sorted(scores, key=lambda n: -scores[n])
            for j, k in enumerate((1, 5, 10)):
                sums[j] += len(set(q["gold"]) & set(ranked[:k])) / len(q["gold"])
        figures = " / ".join(f"{100 * x / len(pools):.1f}" for x in sums)
        out.append(f"{path.name} ({len(texts)} episodes), session-bm25 {w}: {figures}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument("--questions-per-conversation", type=int, default=None)
    parser.add_argument("--home", type=Path, default=None, help="reuse a loaded daemon home")
    parser.add_argument(
        "--eng-notes",
        type=Path,
        nargs="*",
        default=[],
        help="also: the session-BM25 prior on these engineering-notes files (R@1 / R@5 / R@10)",
    )
    args = parser.parse_args(argv)
    convs = load(json.loads(Path(lm.DEFAULT_DATA).read_bytes()), LoadReport())
    convs = convs[: args.limit_conversations]
    for conv in convs:
        conv.questions = conv.questions[: args.questions_per_conversation]
    vocab = sorted(
        {w for c in convs for t in c.turns for w in words(lm.turn_line(t, True))}
        | {w for c in convs for q in c.questions for w in words(q.question)}
    )
    home = args.home or Path(tempfile.mkdtemp(prefix="tml-", dir="/tmp"))
    try:
        with lm.Daemon(home) as daemon:
            agent = argparse.Namespace(window=0, captions=True, ordered=True)
            lm.ingest(daemon.config, convs, agent)
            pools = deep_pools(daemon.config, convs)
            with Client(daemon.config, autostart=False) as client:
                vectors = lm.embed(client, vocab)
            notes = [line for path in args.eng_notes
                     for line in eng_notes_prior(daemon.config, path, [0.0, 0.1, 0.4])]  # fmt: skip
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)
    print("lever: turn R@10 / strict session R@10 / top-10 sessions R@10")
    print(f"deep recall as it ranks: {measure(convs, pools, None)}")
    for w in (0.1, 0.4):
        print(f"session-bm25 {w}: {measure(convs, pools, session_bm25(w))}")
    for w in (0.05, 0.2):
        print(f"session-mass {w}: {measure(convs, pools, session_mass(w))}")
    for k, tau, w in ((3, 0.5, 0.3), (3, 0.5, 0.5)):
        lever = widened_words(vocab, vectors, k, tau, w)
        print(f"widened-words {k} {tau} {w}: {measure(convs, pools, lever)}")
    for line in notes:
        print(f"engineering notes: {line}", file=sys.stderr)
    print(f"missed gold sessions, by place: {where_missed(convs, pools)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
