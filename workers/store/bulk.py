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

The validation helpers (``check_drawer``, ``check_triple``, ``vector_from``) are shared
with the client (``client/bulk.py``), which runs them on every JSON line before sending a
batch, so both ends agree on what a valid line is.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import numpy as np

from trusty_memory.common import names
from trusty_memory.common import protocol as p
from trusty_memory.workers.store import context, ranking
from trusty_memory.workers.store import values as v
from trusty_memory.workers.store.rows import inserted_label, log_changes
from trusty_memory.workers.store.state import DrawerPlace

if TYPE_CHECKING:
    from trusty_memory.workers.store.write import PalaceStore

EXPORT_LIMIT_MAX = 5000
EMBED_CHUNK = 256  # texts per embedder call: one forward pass batch, bounded latency
# A vector this close to unit length is stored byte for byte as given (so an export
# round-trips exactly); anything further off is normalised.
UNIT_TOLERANCE = 1e-4
HITS_LIMIT = 2**63  # SQLite's integers are signed 64-bit
# The namespace of the ids ``derived_drawer_id`` makes: fixed, so a line gets the same id
# on every run, machine and version.
DERIVED_ID_NAMESPACE = uuid.UUID("5d3c1f0e-8a41-4c2b-9e57-0b6f2a7d91c4")

Embed = Callable[[list[str]], np.ndarray]


@dataclass
class CheckedDrawer:
    """A drawer that passed every check, in the form it is stored."""

    id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    created_at: str
    hits: int
    metadata: str | None
    vector: bytes | None  # little-endian float32, unit length; None: embed ``content``
    own_vector: bytes | None = None  # the drawer's own, when ``vector`` is a context mix
    context: str | None = None  # its episode predecessor's words
    context_given: bool = False  # as an export wrote them; else the palace's rule sets them


@dataclass
class CheckedTriple:
    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None
    confidence: float
    provenance: str | None


# -- checks (shared with the client) -------------------------------------------------


def vector_from(value: object, dim: int) -> bytes:
    """A unit float32 vector as little-endian bytes, from raw bytes or a list of numbers.

    Raises ``INVALID_PARAMS`` naming the problem: wrong dimension, not finite, zero.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) != dim * 4:
            raise v.invalid(f"vector: expected {dim} float32 ({dim * 4} bytes), got {len(raw)}")
        arr = np.frombuffer(raw, dtype="<f4")
    elif isinstance(value, list):
        if len(value) != dim:
            raise v.invalid(f"vector: expected {dim} dimensions, got {len(value)}")
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            raise v.invalid("vector: must be a list of numbers")
        arr = np.asarray(value, dtype="<f4")
        raw = arr.tobytes()
    else:
        raise v.invalid("vector: must be a list of numbers or base64 float32")
    if not np.isfinite(arr).all():
        raise v.invalid("vector: must be finite")
    norm = float(np.linalg.norm(arr.astype(np.float64)))
    if norm == 0.0:
        raise v.invalid("vector: must be non-zero")
    if abs(norm - 1.0) <= UNIT_TOLERANCE:
        return raw
    return (arr / np.float32(norm)).astype("<f4").tobytes()


def derived_drawer_id(content: str, room: str, metadata: str | None) -> str:
    """The id of an imported drawer whose line names none (a file someone wrote or
    converted): a UUID 5 of what makes two writes one drawer to ``memory_remember``'s
    exact-duplicate check, its text, room and metadata, as stored. So the same file
    imported again is skipped line by line, and a line that repeats an earlier one is the
    same drawer (skipped, as an id the palace holds)."""
    key = json.dumps([content, room, metadata], ensure_ascii=False)
    return str(uuid.uuid5(DERIVED_ID_NAMESPACE, key))


class DrawerInput(Protocol):
    """What ``check_drawer`` reads: a ``palace_import`` drawer, or the client's line of a
    file before its vectors are bytes (lists of numbers there: ``vector_from`` takes both)."""

    @property
    def drawer_id(self) -> str | None: ...
    @property
    def content(self) -> str: ...
    @property
    def room(self) -> str | None: ...
    @property
    def tags(self) -> list[str]: ...
    @property
    def importance(self) -> float: ...
    @property
    def created_at(self) -> str | None: ...
    @property
    def hits(self) -> int: ...
    @property
    def metadata(self) -> dict[str, Any] | None: ...
    @property
    def vector(self) -> object: ...
    @property
    def own_vector(self) -> object: ...
    @property
    def context(self) -> object: ...


def check_drawer(d: DrawerInput, dim: int, max_text_bytes: int) -> CheckedDrawer:
    """Every check ``palace_import`` makes on a drawer; raises ``TrustyError``. A drawer
    without an id gets ``derived_drawer_id``."""
    if isinstance(d.hits, bool) or not isinstance(d.hits, int) or d.hits < 0:
        raise v.invalid(f"hits: must be a non-negative integer, got {d.hits!r}")
    if d.hits >= HITS_LIMIT:
        raise v.invalid(f"hits: must be below 2**63, got {d.hits}")
    metadata = None
    if d.metadata is not None:
        metadata = msgspec.json.encode(d.metadata).decode()
    drawer_id = None if d.drawer_id is None else v.check_drawer_id(d.drawer_id)
    content = v.check_text(d.content, max_text_bytes, "content")
    room = names.normalize_room(d.room)
    return CheckedDrawer(
        id=drawer_id or derived_drawer_id(content, room, metadata),
        content=content,
        room=room,
        tags=v.check_tags(d.tags),
        importance=v.check_unit_interval(d.importance, "importance"),
        created_at=v.check_created_at(d.created_at),
        hits=d.hits,
        metadata=metadata,
        vector=None if d.vector is None else vector_from(d.vector, dim),
        own_vector=_own_vector(d, dim),
        context=None if d.context is msgspec.UNSET else _context(d.context, max_text_bytes),
        context_given=d.context is not msgspec.UNSET,
    )


def _context(value: object, max_text_bytes: int) -> str | None:
    """An exported drawer's context words: a string (empty means none), or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise v.invalid(f"context: must be a string or null, got {type(value).__name__}")
    return v.check_text(value, max_text_bytes, "context").strip() or None


def _own_vector(d: DrawerInput, dim: int) -> bytes | None:
    if d.own_vector is None:
        return None
    if d.vector is None:
        raise v.invalid("own_vector: only beside a vector (it is that vector's own text's)")
    try:
        return vector_from(d.own_vector, dim)
    except p.TrustyError as exc:
        raise v.invalid(f"own_{exc.message}") from None


def check_triple(t: p.ImportTriple) -> CheckedTriple:
    """Every check ``palace_import`` makes on a triple; raises ``TrustyError``."""
    valid_to = None if t.valid_to is None else v.check_timestamp(t.valid_to, "valid_to")
    return CheckedTriple(
        subject=v.check_nonempty(t.subject, "subject"),
        predicate=v.check_nonempty(t.predicate, "predicate"),
        object=v.check_nonempty(t.object, "object"),
        valid_from=v.check_timestamp(t.valid_from, "valid_from"),
        valid_to=valid_to,
        confidence=v.check_unit_interval(t.confidence, "confidence"),
        provenance=t.provenance,
    )


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


def import_batch(store: PalaceStore, params: p.ImportParams, embed: Embed) -> p.ImportResult:
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
    return p.ImportResult(
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
            d.vector = v.unit_vector(row, dim).astype("<f4").tobytes()


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


def export_page(store: PalaceStore, params: p.ExportParams) -> p.ExportResult:
    """One page of drawers (by label) or triples (by id) after the cursor ``after``."""
    limit = params.limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= EXPORT_LIMIT_MAX:
        raise v.invalid(f"limit: must be an integer in 1..{EXPORT_LIMIT_MAX}, got {limit!r}")
    if params.kind == "drawers":
        return _export_drawers(store, params.after, limit, params.vectors)
    if params.kind == "triples":
        return _export_triples(store, params.after, limit)
    raise v.invalid(f"kind: must be 'drawers' or 'triples', got {params.kind!r}")


def _export_drawers(store: PalaceStore, after: int, limit: int, vectors: bool) -> p.ExportResult:
    vector_cols = "vector, own_vector" if vectors else "NULL, NULL"
    rows = store.db.conn.execute(
        "SELECT label, id, content, room, tags, importance, created_at, hits, metadata,"
        f" {vector_cols}, context FROM drawers WHERE label > ? ORDER BY label LIMIT ?",
        (after, limit),
    ).fetchall()
    pending = store.pending_hits  # recall hits not yet written: part of the truth
    drawers = [
        p.ExportDrawer(
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
    return p.ExportResult(drawers=drawers, next_after=next_after)


def _export_triples(store: PalaceStore, after: int, limit: int) -> p.ExportResult:
    rows = store.db.conn.execute(
        f"SELECT id, {v.TRIPLE_COLUMNS} FROM triples WHERE id > ? ORDER BY id LIMIT ?",
        (after, limit),
    ).fetchall()
    triples = [v.triple_of(r[1:]) for r in rows]
    next_after = rows[-1][0] if len(rows) == limit else None
    return p.ExportResult(triples=triples, next_after=next_after)
