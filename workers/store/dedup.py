"""The dreamer's duplicate steps, run inside a palace's writer process: find, then merge.

The dreamer (``dreamer/``) decides *when* and *what*, and asks the writer for each step
with one ``dream_*`` request over a bounded batch; every write is ONE SQLite transaction
whose deletes go through the change log (``rows.py``), so the vector index follows SQLite
exactly as it does for ``memory_forget``. A ``kill -9`` of the dreamer or of this worker at
any moment therefore leaves either the whole batch or none of it, never a half-merged
drawer. Decay and prune are ``decay.py``'s.

Policy, in one place:

* **Duplicates.** Two drawers are duplicates when they are in the same room, carry the same
  metadata, and either have the same content hash (exact) or have a cosine similarity >=
  the threshold AND state the same fact (near): ``same_fact.same_fact`` finds no differing
  number, version, date, time, identifier, path, URL, email, name or quoted string, no
  flipped negation or polarity, and no other differing word. Cosine alone is not enough:
  MiniLM puts "rate limit 100 requests per minute" and "... 1000 ..." at 0.97, and a
  merge would make the newer fact disappear from recall. Rooms partition a palace for its
  users (a recall filtered by room must still find the memory), and metadata marks a
  drawer as a distinct record (a conversation turn, an imported row), so neither is ever
  merged across. Tags may differ: the survivor gets their union. At write time only the
  exact rule applies (``rows.find_exact_duplicate``: same text, room and metadata).
* **Merge.** Into the most important drawer (then most hits, then oldest): tags united,
  importance and base importance the max, hits summed, the earliest ``created_at`` kept.
  Its text becomes the newest wording when all the texts differ only in whitespace,
  punctuation and case (``same_fact.wording_key``), else every distinct wording, newest
  first, one per line, so no wording is lost. The vector follows the text: the newest
  wording comes with its own drawer's row and vector, a joined text is embedded into a
  new row, and the survivor (same id) moves there. Each merged drawer is archived whole with
  ``merged_into``, so a later ``memory_forget`` of its id can say where it went and
  ``archive restore`` can bring it back (as it was; the survivor keeps what it got).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trusty_memory.common import bounds
from trusty_memory.common.messages import (
    DistinctPair,
    DreamMergeParams,
    DreamMergeResult,
    DreamScanParams,
    DreamScanResult,
    DuplicatePair,
    MergeAction,
)
from trusty_memory.common.values import check_limit, check_unit_interval, invalid, unit_vector
from trusty_memory.workers.store import archive, rows
from trusty_memory.workers.store.rows import Row
from trusty_memory.workers.store.same_fact import same_fact, wording_key
from trusty_memory.workers.store.state import DrawerPlace

if TYPE_CHECKING:
    import sqlite3

    from trusty_memory.workers.store.write import PalaceStore

# How far below the dedup threshold an index neighbour may lie and still be compared by
# its own vector: own . mix of a restatement is (cos + w cos_p) / sqrt(1 + w^2 + 2 w cos_p)
# for predecessor cosines cos_p, about 0.85 x cos at w = 0.5 and cos_p = 0.
CONTEXT_MARGIN = 0.15

Embed = Callable[[list[str]], np.ndarray]


# -- scan ------------------------------------------------------------------------------------


def scan_duplicates(store: PalaceStore, params: DreamScanParams) -> DreamScanResult:
    """Duplicate pairs among one page of drawers (by label) and the whole palace.

    Near duplicates come from the HNSW index (``neighbours`` nearest, unfiltered), then the
    same-room/metadata rule, the cosine of the two drawers' own vectors, then
    ``same_fact``; the merge re-checks every pair. The index holds context mixes
    (``workers/store/context.py``) where the writer made them, so it only proposes: a
    restatement's mix lies up to ``CONTEXT_MARGIN`` below the threshold from the other's
    own vector, and the own vectors decide. Pairs that pass all but ``same_fact`` come back as
    ``distinct``, with the reason. Exact duplicates come from the content-hash index.
    """
    limit = check_limit(params.limit, 5000)
    threshold = check_unit_interval(params.threshold, "threshold")
    k = max(2, min(int(params.neighbours) + 1, 64))
    conn = store.db.conn
    page = rows.where(conn, "label > ? ORDER BY label LIMIT ?", [params.after, limit])
    pairs: dict[tuple[str, str], DuplicatePair] = {}
    distinct: dict[tuple[str, str], DistinctPair] = {}
    neighbours: dict[int, list[tuple[int, float]]] = {}
    for row in page:
        hits = store.index.search(row.unit(store.dim), k)
        neighbours[row.label] = [(label, s) for label, s in hits if label != row.label]
    floor = threshold - CONTEXT_MARGIN
    wanted = {label for found in neighbours.values() for label, s in found if s >= floor}
    others = {
        r.label: r
        for r in rows.where(
            conn, "label IN (SELECT value FROM json_each(?))", [json.dumps(sorted(wanted))]
        )
    }
    for row in page:
        for label, _ in neighbours[row.label]:
            other = others.get(label)
            if other is None or not _mergeable(row, other):
                continue
            similarity = (
                1.0 if row.content_hash == other.content_hash else _cosine(row, other, store)
            )
            if similarity < threshold:
                continue
            exact = row.content_hash == other.content_hash
            first, second = sorted((row, other), key=lambda r: r.id)  # the reason reads a vs b
            verdict = None if exact else same_fact(first.content, second.content)
            if verdict is None or verdict.same:
                _add_pair(pairs, row, other, similarity, exact)
            else:
                distinct[(first.id, second.id)] = DistinctPair(
                    a=first.id,
                    b=second.id,
                    similarity=round(float(similarity), 6),
                    reason=verdict.reason,
                )
        for other in rows.where(
            conn,
            "content_hash = ? AND room = ? AND metadata IS ? AND label != ?",
            [row.content_hash, row.room, row.metadata, row.label],
        ):
            _add_pair(pairs, row, other, 1.0, True)
    total = conn.execute("SELECT count(*) FROM drawers").fetchone()[0]
    return DreamScanResult(
        pairs=list(pairs.values()),
        distinct=list(distinct.values()),
        scanned=len(page),
        total=total,
        next_after=page[-1].label if len(page) == limit else None,
    )


def _mergeable(a: Row, b: Row) -> bool:
    return a.room == b.room and a.metadata == b.metadata


def _add_pair(pairs: dict, a: Row, b: Row, similarity: float, exact: bool) -> None:
    first, second = sorted((a.id, b.id))
    pairs[(first, second)] = DuplicatePair(
        a=first, b=second, similarity=round(float(similarity), 6), exact=exact
    )


# -- merge -----------------------------------------------------------------------------------


def merge_groups(store: PalaceStore, params: DreamMergeParams, embed: Embed) -> DreamMergeResult:
    """Merge each proposed group into its most important drawer, all in ONE transaction.

    The proposal is not trusted: members that are gone, in another room, with other
    metadata, less similar to the survivor than ``threshold``, or stating another fact
    than the survivor (``same_fact``) are skipped, and those present are reported in
    ``distinct`` with the reason. ``embed`` gives the vectors of survivors whose new text
    is no drawer's text (several wordings joined); it is called at most once per request,
    before the transaction, never in a dry run.
    """
    threshold = check_unit_interval(params.threshold, "threshold")
    if len(params.groups) > 1000:
        raise invalid(f"groups: at most 1000 per request, got {len(params.groups)}")
    conn = store.db.conn
    plans: list[_Plan] = []
    distinct: list[DistinctPair] = []
    skipped = 0
    seen: set[str] = set()
    for group in params.groups:
        ids = [i for i in dict.fromkeys(group) if isinstance(i, str) and i not in seen]
        found = rows.by_id(conn, ids)
        skipped += len(group) - len(found)
        if len(found) < 2:
            skipped += len(found)
            continue
        keep = min(found, key=lambda r: (-r.importance, -r.hits, r.created_at, r.label))
        members, low = [], 1.0
        for r in found:
            if r is keep:
                continue
            similarity = 1.0 if r.content_hash == keep.content_hash else _cosine(r, keep, store)
            reason = _refusal(keep, r, similarity, threshold)
            if reason is None:
                members.append(r)
                low = min(low, similarity)
            else:
                skipped += 1
                distinct.append(
                    DistinctPair(a=keep.id, b=r.id, similarity=round(similarity, 6), reason=reason)
                )
        if members:
            content = merged_content([keep, *members], store.settings.max_text_bytes)
            plans.append(_Plan(keep, members, low, content))
            seen.update([keep.id, *(m.id for m in members)])
        else:
            skipped += 1
    actions = [
        MergeAction(
            keep=plan.keep.id,
            merged=[m.id for m in plan.members],
            min_similarity=round(plan.low, 6),
            content=plan.content if plan.content != plan.keep.content else None,
        )
        for plan in plans
    ]
    merged = sum(len(plan.members) for plan in plans)
    result = DreamMergeResult(actions=actions, merged=merged, skipped=skipped, distinct=distinct)
    if params.dry_run or not plans:
        return result
    # A survivor that takes a member's wording takes that member's row, vector included
    # (``_merge_into``); only a text joined from several wordings is new, and embedded.
    joined = [
        plan
        for plan in plans
        if plan.content not in {r.content for r in (plan.keep, *plan.members)}
    ]
    if joined:
        vectors = embed([plan.content for plan in joined])
        for plan, vector in zip(joined, vectors, strict=True):
            plan.vector = unit_vector(vector, store.dim).astype("<f4").tobytes()
    outcomes: list[tuple[int, list[Row], Row, list[str]]] = []
    with store.transaction() as conn:
        for plan in plans:
            # Re-read inside the transaction: pending recall hits were just flushed.
            ids = [plan.keep.id, *(m.id for m in plan.members)]
            fresh = {r.label: r for r in rows.by_id(conn, ids)}
            keep, members = fresh[plan.keep.label], [fresh[m.label] for m in plan.members]
            label, gone, tags = _merge_into(conn, keep, members, plan.content, plan.vector)
            outcomes.append((label, gone, keep, tags))
    # No index snapshot after it: see ``decay.decay_page``.
    store.after_write(
        removed=[row.place for _, gone, _, _ in outcomes for row in gone],
        added=[DrawerPlace(label, keep.room, tags) for label, _, keep, tags in outcomes],
    )
    return result


@dataclass
class _Plan:
    """One survivor, the members merged into it, and its text after the merge."""

    keep: Row
    members: list[Row]
    low: float  # the lowest member-to-survivor cosine
    content: str
    vector: bytes | None = None  # a joined text's vector, once embedded


def _refusal(keep: Row, member: Row, similarity: float, threshold: float) -> str | None:
    """Why ``member`` must not be merged into ``keep``; None when it may."""
    if member.room != keep.room:
        return "another room"
    if member.metadata != keep.metadata:
        return "other metadata"
    if member.content_hash == keep.content_hash:
        return None
    if similarity < threshold:
        return f"cosine {similarity:.3f} < {threshold}"
    verdict = same_fact(keep.content, member.content)
    return None if verdict.same else verdict.reason


def merged_content(rows: list[Row], most_bytes: int | None = None) -> str:
    """The survivor's text: the newest wording, or every distinct wording, newest first.

    Texts that differ only in whitespace, punctuation and case are one wording, and the
    newest spelling of it is kept (the writer's latest say). Texts that differ beyond that
    (reordered, paraphrased) are each kept, one per line, so the merge loses no wording:
    as many as fit in ``most_bytes`` (``[palace] max_text_bytes``), the newest always. A
    joined text past it would be a drawer no write could make, which the embedder refuses
    to embed and no update could restate; every member stays whole in the archive.
    """
    newest_first = sorted(rows, key=lambda r: (r.created_at, r.label), reverse=True)
    wordings: dict[str, str] = {}
    for row in newest_first:
        wordings.setdefault(wording_key(row.content), row.content)
    kept: list[str] = []
    size = -1  # the joins: one newline fewer than wordings
    for text in wordings.values():
        size += len(text.encode("utf-8")) + 1
        if kept and most_bytes is not None and size > most_bytes:
            break
        kept.append(text)
    return "\n".join(kept)


def _cosine(a: Row, b: Row, store: PalaceStore) -> float:
    return float(np.dot(a.unit(store.dim), b.unit(store.dim)))


def _merge_into(
    conn: sqlite3.Connection, keep: Row, members: list[Row], content: str, vector: bytes | None
) -> tuple[int, list[Row], list[str]]:
    """Fold ``members`` into ``keep`` and archive them; ``keep`` ends up holding ``content``.

    Returns the survivor's label, the rows whose labels are gone, and the survivor's tags.
    When the text stays, the survivor's row is updated in place. When it changes, the
    survivor moves to a row that already holds the new text and its vector: the member's
    whose wording it takes, or a new row for a joined text (``vector``); its old row is
    deleted. The index then only marks labels deleted and adds at most one: rewriting a
    vector in place makes hnswlib re-link the point's neighbours, about 13 ms per drawer
    at 10k drawers (measured), which a merge batch of 16 would make foreground requests
    wait for.
    """
    everyone = [keep, *members]
    # United up to ``[limits] max_tags`` (the survivor's own always stay): a group of
    # drawers tagged apart must not make one drawer with all their tags.
    most = max(bounds.limits().max_tags, len(keep.tags))
    tags = list(dict.fromkeys(t for r in everyone for t in r.tags))[:most]
    fields = (
        json.dumps(tags),
        max(r.importance for r in everyone),
        max(r.base for r in everyone),
        sum(r.hits for r in everyone),
        min(r.created_at for r in everyone),
    )
    moves = content != keep.content
    source = next((m for m in members if m.content == content), None) if moves else None
    gone = [m for m in members if m is not source]
    for member in members:
        archive.archive_row(conn, member, "merged", keep.id, delete=member is not source)
        # Drawers merged into this member earlier now point at the survivor.
        # (Versions an update archived keep naming their own drawer.)
        conn.execute(
            "UPDATE archive SET merged_into = ? WHERE merged_into = ? AND reason = 'merged'",
            (keep.id, member.id),
        )
    assignments = "tags = ?, importance = ?, base_importance = ?, hits = ?, created_at = ?"
    if not moves:
        label = keep.label
        conn.execute(f"UPDATE drawers SET {assignments} WHERE label = ?", (*fields, label))
    else:
        rows.delete_row(conn, keep.label, keep.id)
        gone.append(keep)
        if source is not None:
            label = source.label
            conn.execute(
                f"UPDATE drawers SET id = ?, {assignments}, decay_from = ? WHERE label = ?",
                (keep.id, *fields, keep.decay_from, label),
            )
        else:
            cursor = conn.execute(
                "INSERT INTO drawers (id, content, room, tags, importance, base_importance,"
                " hits, created_at, content_hash, vector, metadata, decay_from)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    keep.id,
                    content,
                    keep.room,
                    *fields,
                    hashlib.sha256(content.encode()).hexdigest(),
                    vector,
                    keep.metadata,
                    keep.decay_from,
                ),
            )
            label = rows.inserted_label(cursor)
            rows.log_change(conn, "add", label, keep.id)
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)", [(t, label) for t in tags]
    )
    if not moves or source is not None:
        rows.log_update(conn, label)  # an existing row took new tags (and maybe a new id)
    return label, gone, tags
