"""One palace on disk: a directory with its SQLite file, index snapshots and metadata.

::

    <palace_dir>/
        palace.sqlite3           the truth: drawers + vectors, KG triples, change log, FTS5
        index-<seq>.hnsw/.json   newest vector index snapshot and the change-log seq it covers
        palace.json              name, description, created_at (written atomically)
        identity.txt             L0 identity text

``PalaceStore`` is used by exactly one writer process per palace, so it keeps a little
state in memory next to SQLite: the vector index, the labels per room and per tag (the
filter sets of a recall), the L1 snapshot of the most important drawers, and recall hit
counts waiting to be written with the next write transaction (a read never writes).

Crash safety: every write commits to SQLite (one transaction per batch) before the index is
touched and before anyone is told "stored". On open, the newest index snapshot is loaded and
the change log after its seq is replayed; if there is no usable snapshot, or the result does
not hold exactly the drawers SQLite holds, the index is rebuilt from the stored vectors. So a
``kill -9`` at any moment loses no acknowledged write.

Retrieval layers (``RecallHit.layer``):

* 1 - the drawer is in the L1 snapshot (the top ``L1_SIZE`` drawers by importance), which is
  scored exactly against every query. A drawer is named by the first layer that surfaces
  it in the progressive order L1 -> L2, so its layer never depends on whether the
  approximate L2 search happened to find it too.
* 2 - found by the HNSW search only.
* 3 - deep recall: a wider HNSW search fused with FTS5 BM25 (stopwords dropped from the
  query) by reciprocal-rank fusion; the fusion lives in ``retrieval.py``.

Scores are higher-is-better: cosine similarity for layers 1 and 2; for layer 3 the RRF score
scaled so that ranking first in both lists is 1.0 (first in one list only is 0.5).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import msgspec
import numpy as np
import sqlite_utils

from trusty_memory import names
from trusty_memory.config import PalaceSettings
from trusty_memory.logs import get_logger
from trusty_memory.protocol import (
    DrawerSummary,
    ErrorCode,
    ForgetResult,
    KgAssertParams,
    KgQueryResult,
    ListParams,
    PalaceInfo,
    RecallHit,
    RememberParams,
    StoredResult,
    Triple,
    TrustyError,
)
from trusty_memory.workers import maintenance, retrieval
from trusty_memory.workers import store_values as v
from trusty_memory.workers.index import VectorIndex
from trusty_memory.workers.store_schema import connect, storage_error

log = get_logger(__name__)

DB_FILE = "palace.sqlite3"
META_FILE = "palace.json"
IDENTITY_FILE = "identity.txt"
L1_SIZE = 32
LIST_LIMIT_MAX = 1000
REBUILD_CHUNK = 4096
DOC_COUNT_CACHE = 50_000  # FTS terms whose drawer counts a palace keeps for deep recall

P = ParamSpec("P")
R = TypeVar("R")


def storage_errors(
    fn: Callable[Concatenate[PalaceStore, P], R],
) -> Callable[Concatenate[PalaceStore, P], R]:
    """SQLite failures leave a store method as ``STORAGE_ERROR`` naming the cause (a full
    disk and a corrupt file by name, with what to do: ``store_schema.storage_error``)."""

    @functools.wraps(fn)
    def wrapper(self: PalaceStore, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise storage_error(exc, self.palace_dir / DB_FILE, fn.__name__) from exc

    return wrapper


@dataclass
class _NewDrawer:
    """A validated remember request, ready to insert."""

    id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    created_at: str
    vector: np.ndarray
    metadata: str | None


@dataclass
class _L1:
    """The top-importance drawers, held in memory and scored exactly on every recall."""

    labels: list[int]
    matrix: np.ndarray


class PalaceStore:
    """A palace: SQLite is the truth, the vector index follows it. Not thread-safe."""

    def __init__(
        self,
        palace_dir: Path,
        name: str,
        settings: PalaceSettings,
        db: sqlite_utils.Database,
        dim: int,
        description: str | None,
    ) -> None:
        self.palace_dir = palace_dir
        self.name = name
        self.settings = settings
        self.db = db
        self.dim = dim
        self.description = description
        self._conn: sqlite3.Connection = db.conn
        self._room_labels: dict[str, set[int]] = {}
        self._tag_labels: dict[str, set[int]] = {}
        self._labels: set[int] = set()
        self._pending_hits: Counter[int] = Counter()
        self._doc_counts: dict[str, int] = {}  # FTS term -> drawers holding it (capped)
        self._doc_counts_size = 0  # palace size when those counts were taken
        self._last_seq = 0  # newest seq in the change log
        self._applied_seq = 0  # newest seq the index reflects
        self._snapshot_seq = 0  # seq of the newest snapshot on disk
        self._l1 = _L1([], np.zeros((0, dim), dtype=np.float32))
        self.index = self._new_index()
        self._closed = False

    # -- opening -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        palace_dir: Path,
        name: str,
        settings: PalaceSettings,
        dim: int = 384,
        create: bool = True,
        description: str | None = None,
    ) -> PalaceStore:
        """Open the palace in ``palace_dir`` (creating it if ``create``) and ready its index."""
        name = names.validate_palace_name(name)
        palace_dir = Path(palace_dir)
        exists = (palace_dir / DB_FILE).exists() or (palace_dir / META_FILE).exists()
        if not exists and not create:
            raise TrustyError(ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        palace_dir.mkdir(parents=True, exist_ok=True)
        meta = _read_meta(palace_dir)
        if meta is None:
            meta = {"name": name, "description": description, "created_at": v.now_rfc3339()}
            _write_atomic(palace_dir / META_FILE, json.dumps(meta, indent=2).encode())
        identity = palace_dir / IDENTITY_FILE
        if not identity.exists():
            _write_atomic(identity, (description or "").encode())
        synchronous = getattr(settings, "synchronous", "NORMAL")
        db = connect(palace_dir / DB_FILE, synchronous=synchronous)
        store = cls(palace_dir, name, settings, db, dim, meta.get("description"))
        store._load_state()
        return store

    def _new_index(self, capacity: int = 1024) -> VectorIndex:
        return VectorIndex(
            self.dim,
            m=self.settings.hnsw_m,
            ef_construction=self.settings.ef_construction,
            ef_search=self.settings.ef_search,
            capacity=capacity,
            vector_source=self.vectors_for,
        )

    @storage_errors
    def _load_state(self) -> None:
        """Room and tag label sets (the filters), then the index.

        SQLite groups the labels (rooms straight off the ``drawers_room_rank`` index) and
        numpy parses each group: a third of the time of a Python loop over every row,
        which at a million drawers was most of a cold open.
        """
        self._room_labels = _grouped_labels(
            self._conn, "SELECT room, group_concat(label) FROM drawers GROUP BY room"
        )
        self._tag_labels = _grouped_labels(
            self._conn, "SELECT tag, group_concat(label) FROM drawer_tags GROUP BY tag"
        )
        self._labels = set().union(*self._room_labels.values())
        self._last_seq = self._conn.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[
            0
        ]
        self._open_index()
        self._refresh_l1()

    def _open_index(self) -> None:
        """Snapshot + change-log replay when that reproduces SQLite exactly, else rebuild."""
        loaded = VectorIndex.load(
            self.palace_dir,
            self.dim,
            max_seq=self._last_seq,
            m=self.settings.hnsw_m,
            ef_construction=self.settings.ef_construction,
            ef_search=self.settings.ef_search,
            vector_source=self.vectors_for,
        )
        if loaded is not None:
            index, seq = loaded
            try:
                self.index, self._applied_seq, self._snapshot_seq = index, seq, seq
                replayed = self.catch_up()
            except Exception as exc:
                log.warning("index replay failed; rebuilding", palace=self.name, error=str(exc))
            else:
                if self.index.labels() == self._labels:
                    log.info("index loaded", palace=self.name, seq=seq, replayed=replayed)
                    return
                log.warning("index disagrees with sqlite; rebuilding", palace=self.name)
        self.rebuild_index()

    @storage_errors
    def rebuild_index(self) -> None:
        """Build the index from the vectors in SQLite and snapshot it."""
        count = len(self._labels)
        index = self._new_index(capacity=max(1024, int(count * 1.25)))
        labels: list[int] = []
        blobs: list[bytes] = []
        for label, blob in self._conn.execute("SELECT label, vector FROM drawers ORDER BY label"):
            labels.append(label)
            blobs.append(blob)
            if len(labels) >= REBUILD_CHUNK:
                index.add(labels, self._matrix(blobs))
                labels, blobs = [], []
        if labels:
            index.add(labels, self._matrix(blobs))
        self.index = index
        self._applied_seq = self._last_seq
        log.info("index rebuilt", palace=self.name, drawers=count)
        self.maybe_snapshot(force=True)

    @storage_errors
    def catch_up(self) -> int:
        """Apply change-log entries newer than the index; returns how many were read.

        Idempotent: labels are never reused, so the net effect per label is its last op;
        an add whose drawer has since been deleted is skipped (its delete follows).
        """
        rows = self._conn.execute(
            "SELECT seq, op, label FROM changes WHERE seq > ? ORDER BY seq", (self._applied_seq,)
        ).fetchall()
        if not rows:
            return 0
        last_op = {label: op for _, op, label in rows}
        for label, op in last_op.items():
            if op == "delete":
                self.index.delete(label)
        adds = [label for label, op in last_op.items() if op == "add"]
        for start in range(0, len(adds), REBUILD_CHUNK):
            found, matrix = self.vectors_for(adds[start : start + REBUILD_CHUNK])
            if found:
                self.index.add(found, matrix)
        self._adopt_foreign_changes(last_op)
        self._applied_seq = rows[-1][0]
        self._last_seq = max(self._last_seq, self._applied_seq)
        return len(rows)

    def _adopt_foreign_changes(self, last_op: dict[int, str]) -> None:
        """Bring the filter sets (and so ``drawer_count`` and room/tag recall) up to changes
        this process did not make itself.

        One writer per palace is the rule, but a worker orphaned by a ``kill -9`` of the
        broker can still commit the batch it was holding after its replacement opened the
        file (its embedding call reaches the new daemon). Those drawers reached the index
        through the change log but not the sets this process keeps, so the palace counted
        fewer drawers than SQLite held and room and tag filters could never find them. Own
        writes update the sets before the replay, so they cost nothing here.
        """
        gone = {label for label, op in last_op.items() if op == "delete" and label in self._labels}
        new = [label for label, op in last_op.items() if op == "add" and label not in self._labels]
        for label in gone:
            self._labels.discard(label)
            for members in (*self._room_labels.values(), *self._tag_labels.values()):
                members.discard(label)
        if new:
            rows = self._conn.execute(
                "SELECT label, room, tags FROM drawers"
                " WHERE label IN (SELECT value FROM json_each(?))",
                (json.dumps(new),),
            ).fetchall()
            for label, room, tags in rows:
                self._labels.add(label)
                self._room_labels.setdefault(room, set()).add(label)
                for tag in json.loads(tags):
                    self._tag_labels.setdefault(tag, set()).add(label)
        if gone or new:
            log.warning("adopted changes from another writer", palace=self.name,
                        added=len(new), deleted=len(gone))  # fmt: skip
            self._refresh_l1()

    # -- vectors -------------------------------------------------------------------

    def _matrix(self, blobs: Sequence[bytes]) -> np.ndarray:
        return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), self.dim)

    def vectors_for(self, labels: Sequence[int]) -> tuple[list[int], np.ndarray]:
        """The stored vectors of those ``labels`` that exist, in one query."""
        rows = self._conn.execute(
            "SELECT label, vector FROM drawers WHERE label IN (SELECT value FROM json_each(?))",
            (json.dumps(list(labels)),),
        ).fetchall()
        return [r[0] for r in rows], self._matrix([r[1] for r in rows])

    def all_vectors(self) -> Iterable[tuple[list[int], np.ndarray]]:
        """Every stored vector, in chunks of ``(labels, matrix)``: for rebuilds and readers."""
        cursor = self._conn.execute("SELECT label, vector FROM drawers ORDER BY label")
        while rows := cursor.fetchmany(REBUILD_CHUNK):
            yield [r[0] for r in rows], self._matrix([r[1] for r in rows])

    # -- writing -------------------------------------------------------------------

    def _transaction(self):
        """One write transaction; pending recall hits ride along in it."""
        return _WriteTxn(self)

    def _prepare(self, params: RememberParams, vector: object) -> _NewDrawer:
        text = v.check_text(params.text, self.settings.max_text_bytes)
        metadata = None
        if params.metadata is not None:
            if not isinstance(params.metadata, dict):
                raise v.invalid("metadata: must be an object")
            metadata = msgspec.json.encode(params.metadata).decode()
        return _NewDrawer(
            id=v.check_drawer_id(params.drawer_id) if params.drawer_id else str(uuid.uuid4()),
            content=text,
            room=names.normalize_room(params.room),
            tags=v.check_tags(params.tags),
            importance=v.check_unit_interval(params.importance, "importance"),
            created_at=v.check_created_at(params.created_at),
            vector=v.unit_vector(vector, self.dim),
            metadata=metadata,
        )

    def validate_remember(self, params: RememberParams, vector: object) -> None:
        """Raise the error ``remember_batch`` would raise for this item, writing nothing.

        A worker batching requests from many callers checks each one first, so one bad
        request fails alone instead of failing the whole group commit.
        """
        self._prepare(params, vector)

    @storage_errors
    def remember_batch(self, items: Sequence[tuple[RememberParams, object]]) -> list[StoredResult]:
        """Store drawers in ONE transaction, then index them; all or nothing.

        A drawer id that already exists (or repeats within the batch) is an idempotent
        retry: it is reported as stored and not inserted again. A text already stored in
        the same room with the same metadata is a restatement: the existing drawer absorbs
        it (see ``maintenance.absorb_duplicate``) and its id is returned, marked
        ``deduplicated``. Not when ``embed_text`` is given: the caller embedded the text
        in a context of its own, so the two drawers mean different things.
        """
        prepared = [self._prepare(params, vector) for params, vector in items]
        added: list[tuple[int, _NewDrawer]] = []
        absorbed: dict[int, str] = {}  # position in the batch -> the existing drawer's id
        new_tags: list[tuple[int, list[str]]] = []
        with self._transaction() as conn:
            known: set[str] = set()
            for i, d in enumerate(prepared):
                if (
                    d.id in known
                    or conn.execute("SELECT 1 FROM drawers WHERE id = ?", (d.id,)).fetchone()
                ):
                    continue
                content_hash = hashlib.sha256(d.content.encode()).hexdigest()
                twin = None
                if items[i][0].embed_text is None:
                    twin = maintenance.find_exact_duplicate(conn, content_hash, d.room, d.metadata)
                if twin is not None:
                    label, absorbed[i], old_tags = twin
                    tags = maintenance.absorb_duplicate(conn, label, d.tags, old_tags, d.importance)
                    new_tags.append((label, tags))
                    continue
                known.add(d.id)
                label = conn.execute(
                    "INSERT INTO drawers (id, content, room, tags, importance, created_at,"
                    " content_hash, vector, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        d.id,
                        d.content,
                        d.room,
                        json.dumps(d.tags),
                        d.importance,
                        d.created_at,
                        content_hash,
                        d.vector.astype("<f4").tobytes(),
                        d.metadata,
                    ),
                ).lastrowid
                conn.executemany(
                    "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)",
                    [(tag, label) for tag in d.tags],
                )
                conn.execute(
                    "INSERT INTO changes (op, label, drawer_id, at) VALUES ('add', ?, ?, ?)",
                    (label, d.id, v.now_rfc3339()),
                )
                added.append((label, d))
        for label, tags in new_tags:
            for tag in tags:
                self._tag_labels.setdefault(tag, set()).add(label)
        if added:
            self._after_adds(added)
        elif new_tags:
            self._refresh_l1()  # an absorbed duplicate may have gained importance
        return [
            StoredResult(
                drawer_id=absorbed.get(i, d.id),
                palace=self.name,
                status="stored",
                deduplicated=i in absorbed,
            )
            for i, d in enumerate(prepared)
        ]

    def _after_adds(self, added: list[tuple[int, _NewDrawer]]) -> None:
        for label, d in added:
            self._labels.add(label)
            self._room_labels.setdefault(d.room, set()).add(label)
            for tag in d.tags:
                self._tag_labels.setdefault(tag, set()).add(label)
        self._sync_index()
        self._refresh_l1()
        self.maybe_snapshot()

    def _sync_index(self) -> None:
        """Bring the index up to the change log after a commit.

        The write is already durable; if the index fails it is rebuilt rather than the
        caller being told a committed write failed (a retry without a drawer id would then
        store the drawer twice).
        """
        self._last_seq = self._conn.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[
            0
        ]
        try:
            self.catch_up()
        except Exception as exc:
            log.error("index update failed; rebuilding", palace=self.name, error=str(exc))
            self.rebuild_index()

    @storage_errors
    def forget(self, drawer_id: str) -> ForgetResult:
        """Delete a drawer: row, tags, FTS entry (trigger), then the index and L1."""
        v.check_nonempty(drawer_id, "drawer_id")
        try:  # ids are stored in canonical form; accept any spelling of the same UUID
            drawer_id = str(uuid.UUID(drawer_id))
        except ValueError:
            pass  # not a UUID: it cannot exist, and the lookup below says so
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT label, room, tags FROM drawers WHERE id = ?", (drawer_id,)
            ).fetchone()
            if row is None:
                # Pruned: deleted from the archive too. Merged: an error naming the survivor.
                if maintenance.forget_archived(conn, drawer_id):
                    return ForgetResult(status="deleted", drawer_id=drawer_id, palace=self.name)
                raise TrustyError(ErrorCode.DRAWER_NOT_FOUND, f"drawer not found: {drawer_id}")
            label, room, tags = row
            conn.execute("DELETE FROM drawer_tags WHERE label = ?", (label,))
            conn.execute("DELETE FROM drawers WHERE label = ?", (label,))
            conn.execute(
                "INSERT INTO changes (op, label, drawer_id, at) VALUES ('delete', ?, ?, ?)",
                (label, drawer_id, v.now_rfc3339()),
            )
        self._labels.discard(label)
        self._room_labels.get(room, set()).discard(label)
        for tag in json.loads(tags):
            self._tag_labels.get(tag, set()).discard(label)
        self._pending_hits.pop(label, None)
        self._sync_index()
        self._refresh_l1()
        self.maybe_snapshot()
        return ForgetResult(status="deleted", drawer_id=drawer_id, palace=self.name)

    @storage_errors
    def kg_assert(self, params: KgAssertParams) -> dict[str, str]:
        """Close the active (subject, predicate) triple and insert the new one, atomically."""
        subject = v.check_nonempty(params.subject, "subject")
        predicate = v.check_nonempty(params.predicate, "predicate")
        obj = v.check_nonempty(params.object, "object")
        confidence = v.check_unit_interval(params.confidence, "confidence")
        now = v.now_rfc3339()
        with self._transaction() as conn:
            conn.execute(
                "UPDATE triples SET valid_to = ?"
                " WHERE subject = ? AND predicate = ? AND valid_to IS NULL",
                (now, subject, predicate),
            )
            conn.execute(
                "INSERT INTO triples (subject, predicate, object, valid_from, confidence,"
                " provenance) VALUES (?, ?, ?, ?, ?, ?)",
                (subject, predicate, obj, now, confidence, params.provenance),
            )
        return {"status": "asserted"}

    @storage_errors
    @storage_errors
    def flush(self) -> None:
        """Write the recall hit counts gathered since the last write."""
        if self._pending_hits:
            with self._transaction():
                pass

    def maybe_snapshot(self, force: bool = False) -> bool:
        """Save the index if enough changes piled up since the last snapshot (or ``force``)."""
        due = self._applied_seq - self._snapshot_seq >= self.settings.index_save_every
        if not (force or due):
            return False
        try:
            self.index.save(self.palace_dir, self._applied_seq)
        except Exception as exc:  # a failed snapshot only costs a longer next open
            log.warning("index snapshot failed", palace=self.name, error=str(exc))
            return False
        self._snapshot_seq = self._applied_seq
        return True

    def close(self) -> None:
        """Flush hits, snapshot the index, close SQLite. Safe to call twice."""
        if self._closed:
            return
        try:
            self.flush()
            if self._applied_seq != self._snapshot_seq or not any(
                self.palace_dir.glob("index-*.json")
            ):
                self.maybe_snapshot(force=True)
        finally:
            self._closed = True
            self.db.close()

    def __enter__(self) -> PalaceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------

    def _allowed(self, room: str | None, tag: str | None) -> set[int] | None:
        """The labels a room/tag filter lets through, or None for no filter."""
        sets = []
        if room is not None and room.strip():
            sets.append(self._room_labels.get(names.normalize_room(room), set()))
        if tag is not None and tag != "":
            sets.append(self._tag_labels.get(tag, set()))
        if not sets:
            return None
        if len(sets) == 1:
            return sets[0]
        small, large = sorted(sets, key=len)
        return small & large

    def _refresh_l1(self) -> None:
        rows = self._conn.execute(
            "SELECT label, vector FROM drawers"
            " ORDER BY importance DESC, created_at DESC, label DESC LIMIT ?",
            (L1_SIZE,),
        ).fetchall()
        self._l1 = _L1([r[0] for r in rows], self._matrix([r[1] for r in rows]))

    @storage_errors
    def recall(
        self,
        query_text: str,
        query_vec: object,
        top_k: int = 10,
        room: str | None = None,
        tag: str | None = None,
        deep: bool = False,
    ) -> list[RecallHit]:
        """The ``top_k`` drawers most relevant to the query, best first (see module doc)."""
        top_k = v.check_top_k(top_k, self.settings.max_top_k)
        query = v.unit_vector(query_vec, self.dim, "query_vec")
        allowed = self._allowed(room, tag)
        if allowed is not None and not allowed:
            return []
        if deep:
            ranked = self._deep(query_text, query, top_k, allowed, room, tag)
        else:
            ranked = self._shallow(query, top_k, allowed)
        return self._hits(ranked)

    def _shallow(
        self, query: np.ndarray, top_k: int, allowed: set[int] | None
    ) -> list[tuple[int, float, int]]:
        found = {
            label: (score, 2) for label, score in self.index.search(query, top_k, allowed=allowed)
        }
        if self._l1.labels:
            scores = self._l1.matrix @ query
            for label, score in zip(self._l1.labels, scores.tolist(), strict=True):
                if allowed is None or label in allowed:
                    found[label] = (min(1.0, score), 1)
        ranked = sorted(found.items(), key=lambda item: -item[1][0])[:top_k]
        return [(label, score, layer) for label, (score, layer) in ranked]

    def _deep(
        self,
        query_text: str,
        query: np.ndarray,
        top_k: int,
        allowed: set[int] | None,
        room: str | None,
        tag: str | None,
    ) -> list[tuple[int, float, int]]:
        n = max(retrieval.CANDIDATES, 10 * top_k)
        ef = max(n, 4 * self.settings.ef_search)
        vector_ranked = [label for label, _ in self.index.search(query, n, ef=ef, allowed=allowed)]
        text_ranked = self._bm25(query_text, n, room, tag)
        fused = retrieval.rrf(
            [(vector_ranked, retrieval.VECTOR_WEIGHT), (text_ranked, retrieval.TEXT_WEIGHT)],
            len(vector_ranked) + len(text_ranked),
        )
        episodes = self._episodes({label for label, _ in fused})
        ranked = retrieval.smooth_episodes(fused, episodes, top_k)
        return [(label, score, 3) for label, score in ranked]

    def _episodes(self, labels: set[int]) -> Callable[[int, int], bool]:
        """``same_episode(a, b)`` for ``labels`` and their label neighbours: same room,
        written within ``retrieval.EPISODE_WINDOW_S`` of each other."""
        wanted = sorted(labels | {x + d for x in labels for d in (-1, 1)})
        where: dict[int, tuple[str, float | None]] = {
            label: (room, seconds)
            for label, room, seconds in self._conn.execute(
                "SELECT label, room, julianday(created_at) * 86400.0 FROM drawers"
                " WHERE label IN (SELECT value FROM json_each(?))",
                (json.dumps(wanted),),
            )
        }

        def same_episode(a: int, b: int) -> bool:
            ra, ta = where.get(a, ("", None))
            rb, tb = where.get(b, ("", None))
            if ta is None or tb is None or ra != rb:
                return False
            return abs(ta - tb) <= retrieval.EPISODE_WINDOW_S

        return same_episode

    def _bm25(self, query_text: str, n: int, room: str | None, tag: str | None) -> list[int]:
        """Labels ranked by FTS5 BM25 over every query term, with the same filters applied
        inside the query, scoring only drawers that hold one of the rarer terms (see
        ``retrieval.split_terms``)."""
        rare, common = retrieval.split_terms(v.fts_terms(query_text or ""), self._doc_count)
        if not rare:
            return []
        if common:
            r, c = v.fts_or(rare), v.fts_or(common)
            matches = [f"({r}) AND ({c})", f"({r}) NOT ({c})"]
        else:
            matches = [v.fts_or(rare)]
        sql = "SELECT f.rowid, f.rank FROM drawers_fts f"
        where = ["drawers_fts MATCH ?"]
        filters: list[object] = []
        if room is not None and room.strip():
            sql += " JOIN drawers d ON d.label = f.rowid"
            where.append("d.room = ?")
            filters.append(names.normalize_room(room))
        if tag is not None and tag != "":
            where.append("f.rowid IN (SELECT label FROM drawer_tags WHERE tag = ?)")
            filters.append(tag)
        sql += " WHERE " + " AND ".join(where) + " ORDER BY f.rank LIMIT ?"
        rows = [row for m in matches for row in self._conn.execute(sql, [m, *filters, n])]
        rows.sort(key=lambda row: row[1])  # FTS5 rank: lower is better
        return [label for label, _ in rows[:n]]

    def _doc_count(self, term: str) -> int:
        """How many drawers hold ``term``, counted only up to the BM25 budget + 1 and cached
        until the palace has changed size by a tenth (the split needs an order, not a
        census). A zero is never cached: the split drops such a term, and the next write
        may be the first drawer to hold it."""
        size = len(self._labels)
        if abs(size - self._doc_counts_size) > max(100, self._doc_counts_size // 10):
            self._doc_counts.clear()
            self._doc_counts_size = size
        count = self._doc_counts.get(term)
        if not count:
            if len(self._doc_counts) >= DOC_COUNT_CACHE:
                self._doc_counts.clear()
            count = self._conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM drawers_fts WHERE drawers_fts MATCH ?"
                " LIMIT ?)",
                (v.fts_or([term]), retrieval.BM25_POSTINGS_BUDGET + 1),
            ).fetchone()[0]
            if count:
                self._doc_counts[term] = count
        return count

    def _hits(self, ranked: list[tuple[int, float, int]]) -> list[RecallHit]:
        """Fetch the ranked drawers in one query and count a hit for each."""
        if not ranked:
            return []
        rows = {
            row[0]: row
            for row in self._conn.execute(
                "SELECT label, id, content, room, tags, importance, created_at FROM drawers"
                " WHERE label IN (SELECT value FROM json_each(?))",
                (json.dumps([label for label, _, _ in ranked]),),
            )
        }
        hits = []
        for label, score, layer in ranked:
            row = rows.get(label)
            if row is None:
                continue
            self._pending_hits[label] += 1
            hits.append(
                RecallHit(
                    drawer_id=row[1],
                    content=row[2],
                    score=float(score),
                    layer=layer,
                    tags=json.loads(row[4]),
                    importance=row[5],
                    room=row[3],
                    created_at=row[6],
                )
            )
        return hits

    @storage_errors
    def list(self, params: ListParams) -> list[DrawerSummary]:
        """Drawers by importance (then newest first), optionally one room and/or tag."""
        limit = params.limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise v.invalid(f"limit: must be a positive integer, got {limit!r}")
        where, args = [], []
        if params.room is not None and params.room.strip():
            where.append("room = ?")
            args.append(names.normalize_room(params.room))
        if params.tag is not None and params.tag != "":
            where.append("label IN (SELECT label FROM drawer_tags WHERE tag = ?)")
            args.append(params.tag)
        sql = "SELECT id, content, importance, tags, created_at, room FROM drawers"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY importance DESC, created_at DESC, label DESC LIMIT ?"
        args.append(min(limit, LIST_LIMIT_MAX))
        return [
            DrawerSummary(
                drawer_id=r[0],
                content=r[1],
                importance=r[2],
                tags=json.loads(r[3]),
                created_at=r[4],
                room=r[5],
            )
            for r in self._conn.execute(sql, args)
        ]

    @storage_errors
    def kg_query(self, subject: str) -> KgQueryResult:
        """Active triples of ``subject`` in assertion order (the id, not the clock, orders)."""
        v.check_nonempty(subject, "subject")
        rows = self._conn.execute(
            "SELECT subject, predicate, object, valid_from, valid_to, confidence, provenance"
            " FROM triples WHERE subject = ? AND valid_to IS NULL ORDER BY id",
            (subject,),
        )
        triples = [
            Triple(
                subject=r[0],
                predicate=r[1],
                object=r[2],
                valid_from=r[3],
                valid_to=r[4],
                confidence=r[5],
                provenance=r[6],
            )
            for r in rows
        ]
        return KgQueryResult(subject=subject, triples=triples)

    @storage_errors
    def info(self) -> PalaceInfo:
        """Counts and places; ``triple_count`` counts active triples only."""
        triples = self._conn.execute(
            "SELECT count(*) FROM triples WHERE valid_to IS NULL"
        ).fetchone()[0]
        return PalaceInfo(
            id=self.name,
            name=self.name,
            drawer_count=len(self._labels),
            data_dir=str(self.palace_dir),
            description=self.description,
            triple_count=triples,
            last_seq=self._last_seq,
            index_count=self.index.live_count,
            **maintenance.dream_summary(self._conn),
        )

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def identity(self) -> str:
        """The L0 identity text."""
        try:
            return (self.palace_dir / IDENTITY_FILE).read_text()
        except OSError:
            return self.description or ""


class _WriteTxn:
    """``with store._transaction() as conn``: BEGIN IMMEDIATE, flush pending hits, body,
    COMMIT (ROLLBACK on an exception). Not reentrant.

    IMMEDIATE takes the write lock at BEGIN, where SQLite's busy timeout applies. A plain
    (deferred) BEGIN took it at the first write, after the body's reads: if another
    connection committed in between, WAL mode fails the write at once with "database is
    locked" (a stale read snapshot cannot become a writer; no waiting helps). One writer
    per palace makes that rare, but a worker orphaned by a killed broker still commits its
    last batch next to its replacement, and a client saw the error in the kill test.

    Pending hit counts are only forgotten once the transaction that wrote them commits.
    """

    def __init__(self, store: PalaceStore) -> None:
        self.store = store
        self.hits: dict[int, int] = {}

    def __enter__(self) -> sqlite3.Connection:
        conn = self.store._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self.hits = dict(self.store._pending_hits)
            if self.hits:
                conn.executemany(
                    "UPDATE drawers SET hits = hits + ? WHERE label = ?",
                    [(count, label) for label, count in self.hits.items()],
                )
        except BaseException:
            conn.rollback()
            raise
        return conn

    def __exit__(self, exc_type, exc, tb) -> bool:
        conn = self.store._conn
        if exc_type is not None:
            conn.rollback()  # a no-op if the error already ended the transaction
            return False
        try:
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
        self.store._pending_hits.subtract(self.hits)
        self.store._pending_hits = +self.store._pending_hits  # drop zeros
        return False


def _grouped_labels(conn: sqlite3.Connection, sql: str) -> dict[str, set[int]]:
    """``{key: labels}`` from a ``SELECT key, group_concat(label) ... GROUP BY key``."""
    return {
        key: set(np.fromstring(labels, dtype=np.int64, sep=",").tolist())
        for key, labels in conn.execute(sql)
    }


def _read_meta(palace_dir: Path) -> dict | None:
    path = palace_dir / META_FILE
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
        if isinstance(meta, dict):
            return meta
    except (OSError, ValueError) as exc:
        log.warning("palace.json unreadable; keeping it as is", path=str(path), error=str(exc))
    return {}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
