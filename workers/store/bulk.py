"""Bulk import and export of one palace, run inside its writer process.

``palace_import`` stores a batch of drawers and KG triples exactly as given (drawer id,
``created_at``, hits, metadata, vector) in ONE SQLite transaction: every item is checked
before anything is written, so a bad item fails the whole batch and stores nothing. A
drawer id that is already in the palace (or repeats within the batch) is skipped, and an
identical triple too, so re-importing a file is a no-op. A drawer without an id (a file
written by hand or converted from elsewhere) gets one derived from its text, room and
metadata (``derived_drawer_id``), so the same holds for it. Drawers that come without a
vector are embedded through the embedder pool; those that bring one skip embedding. A
drawer's episode-predecessor words (``drawers.context``) are stored as the line gives
them (an export's, even null); a drawer without them gets them by the palace's own rule.

``palace_export`` pages through the palace by cursor (drawer label, triple id), so the
client can stream a palace of any size without either side holding it in memory.

Index and snapshots: after the commit the vector index catches up from the change log, as
for any write (``PalaceStore.after_write``). Unlike ``memory_remember``, an import does NOT
snapshot the index as it goes: a snapshot rewrites the whole index file, and doing that
every ``index_save_every`` drawers makes a large import quadratic. The snapshot is taken
when the worker next idles or stops; a crash before then costs a replay of the change log
on the next open, never data.

Every item is checked by ``common/import_checks.py`` first, the checks the client runs on
every line of a file before it sends a batch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from trusty_memory.common import protocol as p
from trusty_memory.common.import_checks import (
    CheckedDrawer,
    CheckedTriple,
    check_drawer,
    check_triple,
)
from trusty_memory.common.messages import (
    ExportDrawer,
    ExportParams,
    ExportResult,
    ImportParams,
    ImportResult,
)
from trusty_memory.common.values import TRIPLE_COLUMNS, invalid, triple_of, unit_vector
from trusty_memory.workers.store import context, ranking
from trusty_memory.workers.store.rows import inserted_label, log_changes
from trusty_memory.workers.store.state import DrawerPlace

if TYPE_CHECKING:
    from trusty_memory.workers.store.write import PalaceStore

EXPORT_LIMIT_MAX = 5000
EMBED_CHUNK = 256  # texts per embedder call: one forward pass batch, bounded latency

Embed = Callable[[list[str]], np.ndarray]


def _checked_all(items: list[Any], check: Callable[[Any], Any], kind: str) -> list[Any]:
    """Check every item; the first bad one fails the request, naming its position."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(check(item))
        except p.TrustyError as exc:
            raise p.TrustyError(exc.code, f"palace_import: {kind}[{i}]: {exc.message}") from None
    return out


# -- import --------------------------------------------------------------------------


def _add_context(store: PalaceStore, drawers: list[CheckedDrawer], mix: bool) -> None:
    """Each new drawer's episode predecessor's words, as a remember gets them
    (``workers/store/context.py``): the drawers are written in this order after the palace's
    newest. Only for drawers whose line did not carry its words: an export's do, exactly as
    stored, and its vectors already hold their mixes.

    ``mix`` (``palace_import``'s ``mix_context``): the vectors are the drawers' own texts'
    (``mine`` embeds each exchange alone), so a drawer that continues its predecessor also
    gets the vector a remember would, ``context.mix`` of its own and the predecessor's own
    (its own kept beside, for the dreamer). Mined drawers ranked below the same exchanges
    remembered one by one until they got this (BENCHMARKS.md, capture quality)."""
    written = [
        context.Written(d.room, context.seconds_of(d.created_at), d.content) for d in drawers
    ]
    found = context.contexts_in_order(store.last_written(), written, ranking.EPISODE_WINDOW_S)
    before = _newest_own_vector(store) if mix else None
    for d, text in zip(drawers, found, strict=True):
        d.context = context.words(text, d.content)
        own = d.own_vector or d.vector
        if mix and text is not None and before is not None and own and d.own_vector is None:
            mixed = context.mix(np.frombuffer(own, "<f4"), np.frombuffer(before, "<f4"))
            d.own_vector, d.vector = own, mixed.astype("<f4").tobytes()
        before = own


def _newest_own_vector(store: PalaceStore) -> bytes | None:
    """The own vector of the palace's newest drawer (``last_written``'s): the predecessor
    whose meaning the first drawer of an import may borrow."""
    row = store.db.conn.execute(
        "SELECT coalesce(own_vector, vector) FROM drawers ORDER BY label DESC LIMIT 1"
    ).fetchone()
    return None if row is None else row[0]


def import_batch(store: PalaceStore, params: ImportParams, embed: Embed) -> ImportResult:
    """Store one batch in one transaction (all or nothing); see the module doc."""
    max_bytes = store.settings.max_text_bytes
    drawers = _checked_all(
        params.drawers, lambda d: check_drawer(d, store.dim, max_bytes), "drawers"
    )
    triples = _checked_all(params.triples, check_triple, "triples")
    conn = store.db.conn
    existing = {
        row[0]
        for row in conn.execute(
            "SELECT id FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([d.id for d in drawers]),),
        )
    }
    new: dict[str, CheckedDrawer] = {}
    for d in drawers:
        if d.id not in existing and d.id not in new:
            new[d.id] = d
    _embed_missing([d for d in new.values() if d.vector is None], embed, store.dim)
    if store.settings.context_vectors:
        _add_context(store, [d for d in new.values() if not d.context_given], params.mix_context)

    added: list[tuple[int, CheckedDrawer]] = []
    triples_added = 0
    with store.transaction() as conn:  # also writes pending recall hits, like any write
        for d in new.values():
            cursor = conn.execute(
                "INSERT INTO drawers (id, content, room, tags, importance, created_at, hits,"
                " content_hash, vector, metadata, own_vector, context)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    d.id,
                    d.content,
                    d.room,
                    json.dumps(d.tags),
                    d.importance,
                    d.created_at,
                    d.hits,
                    _content_hash(d.content),
                    d.vector,
                    d.metadata,
                    d.own_vector,
                    d.context,
                ),
            )
            added.append((inserted_label(cursor), d))
        conn.executemany(
            "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)",
            [(tag, label) for label, d in added for tag in d.tags],
        )
        log_changes(conn, "add", [(label, d.id) for label, d in added])
        for t in triples:
            if _triple_exists(conn, t):
                continue
            conn.execute(
                "INSERT INTO triples (subject, predicate, object, valid_from, valid_to,"
                " confidence, provenance) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    t.subject,
                    t.predicate,
                    t.object,
                    t.valid_from,
                    t.valid_to,
                    t.confidence,
                    t.provenance,
                ),
            )
            triples_added += 1
    if added:  # no index snapshot: see the module doc
        store.after_write(added=[DrawerPlace(label, d.room, d.tags) for label, d in added])
    return ImportResult(
        imported=len(added),
        skipped=len(drawers) - len(added),
        triples_imported=triples_added,
        triples_skipped=len(triples) - triples_added,
    )


def _embed_missing(drawers: list[CheckedDrawer], embed: Embed, dim: int) -> None:
    for start in range(0, len(drawers), EMBED_CHUNK):
        chunk = drawers[start : start + EMBED_CHUNK]
        block = embed([d.content for d in chunk])
        for d, row in zip(chunk, block, strict=True):
            d.vector = unit_vector(row, dim).astype("<f4").tobytes()


def _content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def _triple_exists(conn, t: CheckedTriple) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM triples WHERE subject = ? AND predicate = ? AND object = ?"
            " AND valid_from = ? AND valid_to IS ?",
            (t.subject, t.predicate, t.object, t.valid_from, t.valid_to),
        ).fetchone()
        is not None
    )


# -- export --------------------------------------------------------------------------


def export_page(store: PalaceStore, params: ExportParams) -> ExportResult:
    """One page of drawers (by label) or triples (by id) after the cursor ``after``."""
    limit = params.limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= EXPORT_LIMIT_MAX:
        raise invalid(f"limit: must be an integer in 1..{EXPORT_LIMIT_MAX}, got {limit!r}")
    if params.kind == "drawers":
        return _export_drawers(store, params.after, limit, params.vectors)
    if params.kind == "triples":
        return _export_triples(store, params.after, limit)
    raise invalid(f"kind: must be 'drawers' or 'triples', got {params.kind!r}")


def _export_drawers(store: PalaceStore, after: int, limit: int, vectors: bool) -> ExportResult:
    vector_cols = "vector, own_vector" if vectors else "NULL, NULL"
    rows = store.db.conn.execute(
        "SELECT label, id, content, room, tags, importance, created_at, hits, metadata,"
        f" {vector_cols}, context FROM drawers WHERE label > ? ORDER BY label LIMIT ?",
        (after, limit),
    ).fetchall()
    pending = store.pending_hits  # recall hits not yet written: part of the truth
    drawers = [
        ExportDrawer(
            drawer_id=r[1],
            content=r[2],
            room=r[3],
            tags=json.loads(r[4]),
            importance=r[5],
            created_at=r[6],
            hits=r[7] + pending(r[0]),
            metadata=None if r[8] is None else json.loads(r[8]),
            vector=r[9],
            own_vector=r[10],
            context=r[11],
        )
        for r in rows
    ]
    next_after = rows[-1][0] if len(rows) == limit else None
    return ExportResult(drawers=drawers, next_after=next_after)


def _export_triples(store: PalaceStore, after: int, limit: int) -> ExportResult:
    rows = store.db.conn.execute(
        f"SELECT id, {TRIPLE_COLUMNS} FROM triples WHERE id > ? ORDER BY id LIMIT ?",
        (after, limit),
    ).fetchall()
    triples = [triple_of(r[1:]) for r in rows]
    next_after = rows[-1][0] if len(rows) == limit else None
    return ExportResult(triples=triples, next_after=next_after)
