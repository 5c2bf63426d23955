"""The dreamer's work, run inside a palace's writer process: dedup, decay, prune, archive.

The dreamer (``dreamer/``) is a client like any other: it decides *when* and *what*, and
asks the writer to do each step with one ``dream_*`` request. Every function here is one
such step over a bounded batch, and every write is ONE SQLite transaction whose deletes go
through the change log, so the vector index follows SQLite exactly as it does for
``memory_forget``. A ``kill -9`` of the dreamer or of this worker at any moment therefore
leaves either the whole batch or none of it, never a half-merged drawer.

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
  exact rule applies (``find_exact_duplicate``: same text, room and metadata).
* **Merge.** Into the most important drawer (then most hits, then oldest): tags united,
  importance and base importance the max, hits summed, the earliest ``created_at`` kept.
  Its text becomes the newest wording when all the texts differ only in whitespace,
  punctuation and case (``same_fact.wording_key``), else every distinct wording, newest
  first, one per line, so no wording is lost. The vector follows the text: the newest
  wording comes with its own drawer's row and vector, a joined text is embedded into a
  new row, and the survivor (same id) moves there. Each merged drawer is archived whole with
  ``merged_into``, so a later ``memory_forget`` of its id can say where it went and
  ``archive restore`` can bring it back (as it was; the survivor keeps what it got).
* **Decay.** effective = clamp(base * 2^(-age_days / half_life) + min(0.05 * hits, 0.3),
  0.05, 1), always from the base the caller gave (so a second pass changes nothing),
  written to ``importance`` (what list order, L1 and recall report).
* **Prune.** The clamp's floor is 0.05, so "effective < 0.05" is tested on the unclamped
  value: a drawer whose raw score fell below ``prune_below`` and that is older than
  ``prune_min_age_days`` moves to the archive, never destroyed.
* **KG.** Active triples decay the same way: clamp(base * 2^(-age/half_life), 0.05, 1).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from trusty_memory.common import protocol as p
from trusty_memory.workers.store import values as v
from trusty_memory.workers.store.same_fact import same_fact, wording_key

if TYPE_CHECKING:
    import sqlite3

    from trusty_memory.workers.store.write import PalaceStore

FLOOR = 0.05
HIT_WEIGHT = 0.05
HIT_CAP = 0.3
SECONDS_PER_DAY = 86_400.0
CHANGE_EPSILON = 1e-4  # smaller importance changes are not written (nor counted)
ARCHIVE_LIMIT_MAX = 1000
# How far below the dedup threshold an index neighbour may lie and still be compared by
# its own vector: own . mix of a restatement is (cos + w cos_p) / sqrt(1 + w^2 + 2 w cos_p)
# for predecessor cosines cos_p, about 0.85 x cos at w = 0.5 and cos_p = 0.
CONTEXT_MARGIN = 0.15

Embed = Callable[[list[str]], np.ndarray]

_DRAWER_COLUMNS = (
    "label, id, content, room, tags, importance, base_importance, created_at, hits,"
    " content_hash, vector, metadata, decay_from, own_vector, context"
)


# -- the formulas ----------------------------------------------------------------------


def raw_importance(base: float, age_days: float, hits: int, half_life_days: float) -> float:
    """base * 2^(-age/half_life) + min(0.05 * hits, 0.3), before the clamp."""
    age_days = max(0.0, age_days)
    return base * 2.0 ** (-age_days / half_life_days) + min(HIT_WEIGHT * hits, HIT_CAP)


def effective_importance(base: float, age_days: float, hits: int, half_life_days: float) -> float:
    """trusty-memory's decay: the raw score clamped to [0.05, 1]."""
    return min(1.0, max(FLOOR, raw_importance(base, age_days, hits, half_life_days)))


def decayed_confidence(base: float, age_days: float, half_life_days: float) -> float:
    """KG confidence decay, the same shape without hits."""
    return min(1.0, max(FLOOR, base * 2.0 ** (-max(0.0, age_days) / half_life_days)))


def age_days(timestamp: str, now: datetime) -> float:
    return (now - parse_time(timestamp)).total_seconds() / SECONDS_PER_DAY


def parse_time(timestamp: str) -> datetime:
    parsed = datetime.fromisoformat(timestamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _now(value: str | None) -> datetime:
    return parse_time(v.check_created_at(value)) if value else datetime.now(UTC)


def _check_half_life(value: float, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise v.invalid(f"{field}: must be a positive number of days, got {value!r}")
    return float(value)


def _check_limit(value: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise v.invalid(f"limit: must be an integer in 1..{high}, got {value!r}")
    return value


# -- rows ------------------------------------------------------------------------------


@dataclass
class Row:
    """One drawer as the maintenance steps see it."""

    label: int
    id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    base_importance: float | None
    created_at: str
    hits: int
    content_hash: str
    vector: bytes
    metadata: str | None
    decay_from: str | None
    own_vector: bytes | None = None  # NULL: ``vector`` is the drawer's own
    context: str | None = None  # its episode predecessor's words (``workers/store/context.py``)

    @property
    def base(self) -> float:
        return self.importance if self.base_importance is None else self.base_importance

    def unit(self, dim: int) -> np.ndarray:
        """The drawer's own vector: what it says, without its episode's context."""
        own = self.vector if self.own_vector is None else self.own_vector
        return np.frombuffer(own, dtype="<f4", count=dim)


def _rows(conn: sqlite3.Connection, where: str, args: Iterable[object]) -> list[Row]:
    sql = f"SELECT {_DRAWER_COLUMNS} FROM drawers WHERE {where}"
    return [
        Row(*r[:4], json.loads(r[4]), *r[5:]) for r in conn.execute(sql, tuple(args)).fetchall()
    ]


def _rows_by_id(conn: sqlite3.Connection, ids: list[str]) -> list[Row]:
    return _rows(conn, "id IN (SELECT value FROM json_each(?))", [json.dumps(ids)])


# -- write-time exact duplicates -----------------------------------------------------------


def find_exact_duplicate(
    conn: sqlite3.Connection, content_hash: str, room: str, metadata: str | None
) -> tuple[int, str, list[str]] | None:
    """``(label, id, tags)`` of a drawer with this content, room and metadata, if any.

    Exact text only (the hash of the whole text): a write never runs the near-duplicate
    rule, so two notes that differ in one number are both stored.
    """
    row = conn.execute(
        "SELECT label, id, tags FROM drawers WHERE content_hash = ? AND room = ?"
        " AND metadata IS ? ORDER BY label LIMIT 1",
        (content_hash, room, metadata),
    ).fetchone()
    return None if row is None else (row[0], row[1], json.loads(row[2]))


def absorb_duplicate(
    conn: sqlite3.Connection, label: int, tags: list[str], old_tags: list[str], importance: float
) -> list[str]:
    """A restated memory: unite tags, keep the higher importance, restart the decay clock.

    Returns the tags that were new to the drawer (the caller updates its tag sets). The
    union stops at ``[limits] max_tags``: restating a text with new tags each time must not
    grow one drawer's tags without end (a remember is held to that bound; its sum is not).
    """
    room = max(0, p.limits().max_tags - len(old_tags))
    added = [t for t in tags if t not in old_tags][:room]
    conn.execute(
        "UPDATE drawers SET tags = ?, importance = max(importance, ?),"
        " base_importance = max(coalesce(base_importance, importance), ?), decay_from = ?"
        " WHERE label = ?",
        (json.dumps(old_tags + added), importance, importance, v.now_rfc3339(), label),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)",
        [(t, label) for t in added],
    )
    if added:
        log_update(conn, label)
    return added


def log_update(conn: sqlite3.Connection, label: int) -> None:
    """Record that a live drawer changed in place (its tags, or its id after a merge) as
    an ``add`` of its label: a replay finds the label already in the index and skips it,
    and a reader re-reads the drawer's room and tags (``ReadStore.refresh``). Vectors never
    change in place (a merge that rewords a survivor moves it to another row)."""
    drawer_id = conn.execute("SELECT id FROM drawers WHERE label = ?", (label,)).fetchone()[0]
    conn.execute(
        "INSERT INTO changes (op, label, drawer_id, at) VALUES ('add', ?, ?, ?)",
        (label, drawer_id, v.now_rfc3339()),
    )


# -- dedup: scan ---------------------------------------------------------------------------


def scan_duplicates(store: PalaceStore, params: p.DreamScanParams) -> p.DreamScanResult:
    """Duplicate pairs among one page of drawers (by label) and the whole palace.

    Near duplicates come from the HNSW index (``neighbours`` nearest, unfiltered), then the
    same-room/metadata rule, the cosine of the two drawers' own vectors, then
    ``same_fact``; the merge re-checks every pair. The index holds context mixes
    (``workers/store/context.py``) where the writer made them, so it only proposes: a
    restatement's mix lies up to ``CONTEXT_MARGIN`` below the threshold from the other's
    own vector, and the own vectors decide. Pairs that pass all but ``same_fact`` come back as
    ``distinct``, with the reason. Exact duplicates come from the content-hash index.
    """
    limit = _check_limit(params.limit, 5000)
    threshold = v.check_unit_interval(params.threshold, "threshold")
    k = max(2, min(int(params.neighbours) + 1, 64))
    conn = store.db.conn
    page = _rows(conn, "label > ? ORDER BY label LIMIT ?", [params.after, limit])
    pairs: dict[tuple[str, str], p.DuplicatePair] = {}
    distinct: dict[tuple[str, str], p.DistinctPair] = {}
    neighbours: dict[int, list[tuple[int, float]]] = {}
    for row in page:
        hits = store.index.search(row.unit(store.dim), k)
        neighbours[row.label] = [(label, s) for label, s in hits if label != row.label]
    floor = threshold - CONTEXT_MARGIN
    wanted = {label for found in neighbours.values() for label, s in found if s >= floor}
    others = {
        r.label: r
        for r in _rows(
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
                distinct[(first.id, second.id)] = p.DistinctPair(
                    a=first.id,
                    b=second.id,
                    similarity=round(float(similarity), 6),
                    reason=verdict.reason,
                )
        for other in _rows(
            conn,
            "content_hash = ? AND room = ? AND metadata IS ? AND label != ?",
            [row.content_hash, row.room, row.metadata, row.label],
        ):
            _add_pair(pairs, row, other, 1.0, True)
    total = conn.execute("SELECT count(*) FROM drawers").fetchone()[0]
    return p.DreamScanResult(
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
    pairs[(first, second)] = p.DuplicatePair(
        a=first, b=second, similarity=round(float(similarity), 6), exact=exact
    )


# -- dedup: merge --------------------------------------------------------------------------


def merge_groups(
    store: PalaceStore, params: p.DreamMergeParams, embed: Embed
) -> p.DreamMergeResult:
    """Merge each proposed group into its most important drawer, all in ONE transaction.

    The proposal is not trusted: members that are gone, in another room, with other
    metadata, less similar to the survivor than ``threshold``, or stating another fact
    than the survivor (``same_fact``) are skipped, and those present are reported in
    ``distinct`` with the reason. ``embed`` gives the vectors of survivors whose new text
    is no drawer's text (several wordings joined); it is called at most once per request,
    before the transaction, never in a dry run.
    """
    threshold = v.check_unit_interval(params.threshold, "threshold")
    if len(params.groups) > 1000:
        raise v.invalid(f"groups: at most 1000 per request, got {len(params.groups)}")
    conn = store.db.conn
    plans: list[_Plan] = []
    distinct: list[p.DistinctPair] = []
    skipped = 0
    seen: set[str] = set()
    for group in params.groups:
        ids = [i for i in dict.fromkeys(group) if isinstance(i, str) and i not in seen]
        rows = _rows_by_id(conn, ids)
        skipped += len(group) - len(rows)
        if len(rows) < 2:
            skipped += len(rows)
            continue
        keep = min(rows, key=lambda r: (-r.importance, -r.hits, r.created_at, r.label))
        members, low = [], 1.0
        for r in rows:
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
                    p.DistinctPair(
                        a=keep.id, b=r.id, similarity=round(similarity, 6), reason=reason
                    )
                )
        if members:
            content = merged_content([keep, *members], store.settings.max_text_bytes)
            plans.append(_Plan(keep, members, low, content))
            seen.update([keep.id, *(m.id for m in members)])
        else:
            skipped += 1
    actions = [
        p.MergeAction(
            keep=plan.keep.id,
            merged=[m.id for m in plan.members],
            min_similarity=round(plan.low, 6),
            content=plan.content if plan.content != plan.keep.content else None,
        )
        for plan in plans
    ]
    merged = sum(len(plan.members) for plan in plans)
    result = p.DreamMergeResult(actions=actions, merged=merged, skipped=skipped, distinct=distinct)
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
            plan.vector = v.unit_vector(vector, store.dim).astype("<f4").tobytes()
    outcomes: list[tuple[int, list[Row], Row, list[str]]] = []
    with store._transaction() as conn:
        for plan in plans:
            # Re-read inside the transaction: pending recall hits were just flushed.
            ids = [plan.keep.id, *(m.id for m in plan.members)]
            fresh = {r.label: r for r in _rows_by_id(conn, ids)}
            keep, members = fresh[plan.keep.label], [fresh[m.label] for m in plan.members]
            label, gone, tags = _merge_into(conn, keep, members, plan.content, plan.vector)
            outcomes.append((label, gone, keep, tags))
    for label, gone, keep, tags in outcomes:
        _forget_in_memory(store, gone)
        store._labels.add(label)
        store._room_labels.setdefault(keep.room, set()).add(label)
        for tag in tags:
            store._tag_labels.setdefault(tag, set()).add(label)
    _after_write(store)
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
    most = max(p.limits().max_tags, len(keep.tags))
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
        _archive(conn, member, "merged", keep.id, delete=member is not source)
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
        _delete_row(conn, keep)
        gone.append(keep)
        if source is not None:
            label = source.label
            conn.execute(
                f"UPDATE drawers SET id = ?, {assignments}, decay_from = ? WHERE label = ?",
                (keep.id, *fields, keep.decay_from, label),
            )
        else:
            label = conn.execute(
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
            ).lastrowid
            conn.execute(
                "INSERT INTO changes (op, label, drawer_id, at) VALUES ('add', ?, ?, ?)",
                (label, keep.id, v.now_rfc3339()),
            )
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)", [(t, label) for t in tags]
    )
    if not moves or source is not None:
        log_update(conn, label)  # an existing row took new tags (and maybe a new id)
    return label, gone, tags


def insert_row(conn: sqlite3.Connection, row: Row) -> int:
    """Write ``row`` as a new drawer (a new label; ``row.label`` is ignored), with its tags
    and the change-log entry the index follows; the content hash is computed from the text.
    Returns the new label."""
    label = conn.execute(
        "INSERT INTO drawers (id, content, room, tags, importance, base_importance, created_at,"
        " hits, content_hash, vector, metadata, decay_from, own_vector, context)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.id,
            row.content,
            row.room,
            json.dumps(row.tags),
            row.importance,
            row.base_importance,
            row.created_at,
            row.hits,
            hashlib.sha256(row.content.encode()).hexdigest(),
            row.vector,
            row.metadata,
            row.decay_from,
            row.own_vector,
            row.context,
        ),
    ).lastrowid
    log_added(conn, label, row.id, row.tags)
    return label


def log_added(conn: sqlite3.Connection, label: int, drawer_id: str, tags: list[str]) -> None:
    """A new drawer row's tag rows and its ``add`` in the change log (what readers and an
    index replay follow), in the caller's transaction."""
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)", [(t, label) for t in tags]
    )
    conn.execute(
        "INSERT INTO changes (op, label, drawer_id, at) VALUES ('add', ?, ?, ?)",
        (label, drawer_id, v.now_rfc3339()),
    )


def _archive(
    conn: sqlite3.Connection, row: Row, reason: str, merged_into: str | None, *, delete=True
) -> None:
    """Move one drawer to the archive: copy, then (unless ``delete`` is false) delete."""
    now = v.now_rfc3339()
    conn.execute(
        "INSERT OR REPLACE INTO archive (id, content, room, tags, importance, base_importance,"
        " created_at, hits, content_hash, vector, metadata, archived_at, reason, merged_into,"
        " own_vector, context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.id,
            row.content,
            row.room,
            json.dumps(row.tags),
            row.importance,
            row.base_importance,
            row.created_at,
            row.hits,
            row.content_hash,
            row.vector,
            row.metadata,
            now,
            reason,
            merged_into,
            row.own_vector,
            row.context,
        ),
    )
    if delete:
        _delete_row(conn, row)


def _delete_row(conn: sqlite3.Connection, row: Row) -> None:
    """Delete a drawer's row and tags (FTS by trigger) and log the delete for the index."""
    conn.execute("DELETE FROM drawer_tags WHERE label = ?", (row.label,))
    conn.execute("DELETE FROM drawers WHERE label = ?", (row.label,))
    conn.execute(
        "INSERT INTO changes (op, label, drawer_id, at) VALUES ('delete', ?, ?, ?)",
        (row.label, row.id, v.now_rfc3339()),
    )


def _forget_in_memory(store: PalaceStore, removed: list[Row]) -> None:
    for row in removed:
        store._labels.discard(row.label)
        store._room_labels.get(row.room, set()).discard(row.label)
        for tag in row.tags:
            store._tag_labels.get(tag, set()).discard(row.label)
        store._pending_hits.pop(row.label, None)


def _after_write(store: PalaceStore) -> None:
    """The index follows the change log; L1 follows importance.

    No index snapshot here: a snapshot rewrites the whole index file, which would stall
    the foreground requests queued behind this batch. The worker takes it when it next
    idles; a crash before then costs a change-log replay on open, never data.
    """
    store._sync_index()
    store._refresh_l1()


# -- decay and prune -----------------------------------------------------------------------


def decay_page(store: PalaceStore, params: p.DreamDecayParams) -> p.DreamDecayResult:
    """Decay one page of drawers and archive those that decayed away; ONE transaction."""
    limit = _check_limit(params.limit, 10_000)
    half_life = _check_half_life(params.half_life_days, "half_life_days")
    prune_below = v.check_unit_interval(params.prune_below, "prune_below")
    now = _now(params.now)
    conn = store.db.conn
    page = _rows(conn, "label > ? ORDER BY label LIMIT ?", [params.after, limit])
    updates: list[tuple[float, float, int]] = []
    doomed: list[Row] = []
    for row in page:
        hits = row.hits + store._pending_hits.get(row.label, 0)
        age = age_days(row.created_at, now)
        clock = age_days(row.decay_from, now) if row.decay_from else age
        raw = raw_importance(row.base, clock, hits, half_life)
        if params.prune and raw < prune_below and age >= params.prune_min_age_days:
            doomed.append(row)
            continue
        effective = min(1.0, max(FLOOR, raw))
        if abs(effective - row.importance) >= CHANGE_EPSILON:
            updates.append((effective, row.base, row.label))
    total = conn.execute("SELECT count(*) FROM drawers").fetchone()[0]
    result = p.DreamDecayResult(
        scanned=len(page),
        decayed=len(updates),
        archived=[r.id for r in doomed],
        total=total,
        next_after=page[-1].label if len(page) == limit else None,
    )
    if params.dry_run or not (updates or doomed):
        return result
    with store._transaction() as conn:
        conn.executemany(
            "UPDATE drawers SET importance = ?, base_importance = ? WHERE label = ?", updates
        )
        for row in doomed:
            _archive(conn, row, "pruned", None)
    _forget_in_memory(store, doomed)
    _after_write(store)
    return result


def kg_decay_page(store: PalaceStore, params: p.DreamKgDecayParams) -> p.DreamKgDecayResult:
    """Decay the confidence of one page of active triples; ONE transaction."""
    limit = _check_limit(params.limit, 10_000)
    half_life = _check_half_life(params.half_life_days, "half_life_days")
    now = _now(params.now)
    rows = store.db.conn.execute(
        "SELECT id, confidence, coalesce(base_confidence, confidence), valid_from FROM triples"
        " WHERE id > ? AND valid_to IS NULL ORDER BY id LIMIT ?",
        (params.after, limit),
    ).fetchall()
    updates = []
    for triple_id, confidence, base, valid_from in rows:
        decayed = decayed_confidence(base, age_days(valid_from, now), half_life)
        if abs(decayed - confidence) >= CHANGE_EPSILON:
            updates.append((decayed, base, triple_id))
    if updates and not params.dry_run:
        with store._transaction() as conn:
            conn.executemany(
                "UPDATE triples SET confidence = ?, base_confidence = ? WHERE id = ?", updates
            )
    return p.DreamKgDecayResult(
        scanned=len(rows),
        decayed=len(updates),
        next_after=rows[-1][0] if len(rows) == limit else None,
    )


def finish(store: PalaceStore, params: p.DreamFinishParams) -> p.PalaceInfo:
    """Record an applied pass and refresh L1; answers ``palace_info``."""
    with store._transaction() as conn:
        conn.execute(
            "INSERT INTO dream_log (finished_at, duration_s, merged, decayed, archived,"
            " kg_decayed, truncated) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                v.now_rfc3339(),
                float(params.duration_s),
                int(params.merged),
                int(params.decayed),
                int(params.archived),
                int(params.kg_decayed),
                int(bool(params.truncated)),
            ),
        )
    store._refresh_l1()
    return store.info()


def dream_summary(conn: sqlite3.Connection) -> dict[str, object]:
    """The ``PalaceInfo`` fields that describe the dreamer's work."""
    last, merged, decayed, archived = conn.execute(
        "SELECT max(finished_at), coalesce(sum(merged), 0), coalesce(sum(decayed), 0),"
        " coalesce(sum(archived), 0) FROM dream_log"
    ).fetchone()
    count = conn.execute("SELECT count(*) FROM archive").fetchone()[0]
    return {
        "last_dream_at": last,
        "dream_merged": merged,
        "dream_decayed": decayed,
        "dream_archived": archived,
        "archived_count": count,
    }


# -- the archive ---------------------------------------------------------------------------


def archive_list(store: PalaceStore, params: p.ArchiveListParams) -> p.ArchiveListResult:
    limit = _check_limit(params.limit, ARCHIVE_LIMIT_MAX)
    where, args = ["seq > ?"], [params.after]
    if params.reason is not None:
        if params.reason not in ("pruned", "merged", "updated"):
            raise v.invalid(
                f"reason: must be 'pruned', 'merged' or 'updated', got {params.reason!r}"
            )
        where.append("reason = ?")
        args.append(params.reason)
    rows = store.db.conn.execute(
        "SELECT seq, id, content, room, tags, importance, created_at, archived_at, reason,"
        f" merged_into FROM archive WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
        (*args, limit),
    ).fetchall()
    drawers = [
        p.ArchivedDrawer(
            seq=r[0],
            drawer_id=r[1],
            content=r[2],
            room=r[3],
            tags=json.loads(r[4]),
            importance=r[5],
            created_at=r[6],
            archived_at=r[7],
            reason=r[8],
            merged_into=r[9],
        )
        for r in rows
    ]
    next_after = rows[-1][0] if len(rows) == limit else None
    return p.ArchiveListResult(palace=store.name, drawers=drawers, next_after=next_after)


def archive_restore(store: PalaceStore, drawer_id: str) -> p.RestoreResult:
    """Put an archived drawer back (new label, same id and vector); its decay clock restarts.

    A merged drawer comes back as its own drawer again; the survivor keeps what it got.
    """
    drawer_id = _canonical(v.check_nonempty(drawer_id, "drawer_id"))
    with store._transaction() as conn:
        row = conn.execute(
            "SELECT id, content, room, tags, importance, base_importance, created_at, hits,"
            " content_hash, vector, metadata, own_vector, context FROM archive WHERE id = ?",
            (drawer_id,),
        ).fetchone()
        if row is None:
            raise p.TrustyError(
                p.ErrorCode.DRAWER_NOT_FOUND, f"drawer not in the archive: {drawer_id}"
            )
        if conn.execute("SELECT 1 FROM drawers WHERE id = ?", (drawer_id,)).fetchone():
            raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"drawer already live: {drawer_id}")
        base = row[4] if row[5] is None else row[5]
        tags = json.loads(row[3])
        back = Row(0, *row[:3], tags, base, base, *row[6:11], v.now_rfc3339(), *row[11:13])
        label = insert_row(conn, back)
        conn.execute("DELETE FROM archive WHERE id = ?", (drawer_id,))
    store._labels.add(label)
    store._room_labels.setdefault(row[2], set()).add(label)
    for tag in tags:
        store._tag_labels.setdefault(tag, set()).add(label)
    _after_write(store)
    return p.RestoreResult(drawer_id=drawer_id, palace=store.name, status="restored")


def forget_archived(conn: sqlite3.Connection, drawer_id: str) -> bool:
    """``memory_forget`` of an id that is not live: True if it was a pruned drawer (now
    deleted from the archive); raises naming the survivor if it was merged; else False."""
    row = conn.execute(
        "SELECT reason, merged_into FROM archive WHERE id = ?", (drawer_id,)
    ).fetchone()
    if row is None:
        return False
    reason, merged_into = row
    if reason == "merged":
        raise p.TrustyError(
            p.ErrorCode.DRAWER_NOT_FOUND,
            f"drawer not found: {drawer_id} was merged into {merged_into} by the dreamer;"
            f" forget {merged_into} to delete its content",
        )
    conn.execute("DELETE FROM archive WHERE id = ?", (drawer_id,))
    return True


def _canonical(drawer_id: str) -> str:
    try:
        return str(uuid.UUID(drawer_id))
    except ValueError:
        return drawer_id
