"""Probe: which measure on two neighbouring drawers' own texts tells a conversation's turns
from notes that stand alone?

    .venv/bin/python bench/probe_relatedness.py [--cache DIR]

Not the product: the rule it measures decides, at write time, whether a drawer borrows its
episode predecessor's context (``workers/store/relatedness.py``). Pairs are drawn as the
product draws episodes: two drawers written one after the other in the same room within
``retrieval.EPISODE_WINDOW_S``. Labels, from what each set is, never from recall:

- LoCoMo (all 10 conversations): every pair is a conversation's two turns: *related*;
- engineering notes (``eng_notes_data.py``, seeds as committed, 7 and 99): a follow-up
  note ("Follow-up from that one: ...") and the incident note before it are *related*,
  every other pair is two notes that stand alone;
- project history (``history_notes_data.py``) and burst notes (``burst_notes_data.py``):
  every pair is two notes that stand alone.

For each candidate it prints, per set, the share of related pairs it calls related and the
share of standalone pairs it calls standalone, so a rule can be kept only if it separates
on every set. Vectors are the product's model (MiniLM, in this process), cached in
``--cache``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import burst_notes_data
import eng_notes_data
import history_notes_data
import locomo as lm
from locomo_data import LoadReport, load

from trusty_memory.workers.embedder.embedding import make_embedder
from trusty_memory.workers.store import context, relatedness
from trusty_memory.workers.store import ranking as retrieval

_WORD = re.compile(r"\w+")


class Pair:
    """Two neighbouring drawers of one episode, with what a rule may read of them."""

    def __init__(self, before: str, after: str, related: bool, cos: float, idf: dict) -> None:
        self.before, self.after, self.related, self.cos = before, after, related, cos
        self.shared_idf = sum(idf.get(w, 0.0) for w in _words(before) & _words(after))


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if len(w) > 2}


def notes_pairs(data: dict, related: Callable[[dict, dict], bool]) -> list[tuple[dict, dict, bool]]:
    notes = data["drawers"]
    window = retrieval.EPISODE_WINDOW_S
    out = []
    for a, b in itertools.pairwise(notes):
        wa = context.Written(a.get("room") or "General", context.seconds_of(a["created_at"]), "")
        wb = context.Written(b.get("room") or "General", context.seconds_of(b["created_at"]), "")
        if context.same_episode(wa, wb, window):
            out.append((a, b, related(a, b)))
    return out


def sets() -> dict[str, list[tuple[str, str, bool]]]:
    """Each set's episode pairs as (text before, text after, related)."""
    out: dict[str, list[tuple[str, str, bool]]] = {}
    convs = load(json.loads(Path(lm.DEFAULT_DATA).read_bytes()), LoadReport())
    out["locomo"] = [
        (lm.turn_line(a, True), lm.turn_line(b, True), True)
        for conv in convs
        for a, b in itertools.pairwise(conv.turns)
        if a.session == b.session
    ]
    for name, seed in (("eng", None), ("eng7", 7), ("eng99", 99)):
        data = (json.loads(eng_notes_data.DEFAULT_OUT.read_text()) if seed is None
                else json.loads(eng_notes_data.dumps(eng_notes_data.generate(seed))))  # fmt: skip
        follow = lambda a, b: b["text"].startswith("Follow-up from that one")  # noqa: E731
        out[name] = [(a["text"], b["text"], r) for a, b, r in notes_pairs(data, follow)]
    for name, path in (("history", history_notes_data.DEFAULT_OUT),
                       ("bursts", burst_notes_data.DEFAULT_OUT)):  # fmt: skip
        data = json.loads(path.read_text())
        out[name] = [(a["text"], b["text"], r) for a, b, r in
                     notes_pairs(data, lambda a, b: False)]  # fmt: skip
    return out


def vectors(texts: list[str], cache: Path) -> dict[str, np.ndarray]:
    key = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    path = cache / f"vectors-{key}.npy"
    if path.exists():
        block = np.load(path)
    else:
        embedder = make_embedder("minilm")
        block = np.vstack([embedder.encode(texts[i : i + 256]) for i in range(0, len(texts), 256)])
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, block)
    return dict(zip(texts, block, strict=True))


def idf_of(texts: list[str]) -> dict[str, float]:
    counts = Counter(w for t in texts for w in _words(t))
    n = len(texts)
    return {w: math.log(n / c) for w, c in counts.items()}


CANDIDATES: dict[str, Callable[[Pair], bool]] = {
    **{f"cosine >= {t}": (lambda p, t=t: p.cos >= t) for t in (0.2, 0.3, 0.4, 0.5)},
    **{
        f"shared rare words (idf sum) >= {t}": (lambda p, t=t: p.shared_idf >= t)
        for t in (4, 8, 12)
    },
    "reply shape: conversational register of the later": lambda p: relatedness.conversational(
        p.after
    ),
    "reply shape: the earlier asks (?)": lambda p: relatedness.asks(p.before),
    "reply shape: the later points back": lambda p: relatedness.points_back(p.after),
    "reply shape, all three (relatedness.continues, kept)": lambda p: relatedness.continues(
        p.before, p.after
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/tml-relatedness"))
    args = parser.parse_args(argv)
    raw = sets()
    texts = sorted({t for pairs in raw.values() for a, b, _ in pairs for t in (a, b)})
    vec = vectors(texts, args.cache)
    table: dict[str, dict[str, str]] = {name: {} for name in CANDIDATES}
    for name, triples in raw.items():
        idf = idf_of(sorted({t for a, b, _ in triples for t in (a, b)}))
        pairs = [Pair(a, b, r, float(vec[a] @ vec[b]), idf) for a, b, r in triples]
        rel = [p for p in pairs if p.related]
        alone = [p for p in pairs if not p.related]
        for rule, fn in CANDIDATES.items():
            cells = []
            if rel:
                cells.append(f"{100 * sum(fn(p) for p in rel) / len(rel):.1f}% of {len(rel)}")
            else:
                cells.append("-")
            if alone:
                share = 100 * sum(not fn(p) for p in alone) / len(alone)
                cells.append(f"{share:.1f}% of {len(alone)}")
            else:
                cells.append("-")
            table[rule][name] = " / ".join(cells)
    names = list(raw)
    print("rule | " + " | ".join(names))
    print("(each set: related pairs called related / standalone pairs called standalone)")
    for rule, row in table.items():
        print(f"{rule} | " + " | ".join(row[n] for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
