"""The write side of a palace: run by its writer process only (``workers/palace.py``).

::

    <palace_dir>/
        palace.sqlite3           the truth: drawers + vectors, KG triples, change log, FTS5
        index-<seq>.hnsw/.json   newest vector index snapshot and the change-log seq it covers
        palace.json              name, description, created_at (written atomically)
        identity.txt             L0 identity text

``PalaceStore`` is the read side (``read.ReadStore``: filters, index, L1, every read) plus
the writes. Exactly one process per palace writes, so it keeps its in-memory state in step
with each commit itself, and it holds the recall hit counts (its own and those readers
hand it) until the next write transaction carries them (a read never writes). Every change
to a drawer goes through the change log (``rows.py``), which is how the index is replayed
after a crash and how readers keep up.

Its API for the modules that change drawers (``bulk``, ``edit``, ``dedup``, ``decay``):
``transaction()`` is one write transaction, ``after_write(added=..., removed=...)`` brings
the filters, the index and L1 along once it has committed.

Crash safety: every write commits to SQLite (one transaction per batch) before the index is
touched and before anyone is told "stored". On open, the newest index snapshot is loaded and
the change log after its seq is replayed; if there is no usable snapshot, or the result does
not hold exactly the drawers SQLite holds, the index is rebuilt from the stored vectors. So a
``kill -9`` at any moment loses no acknowledged write.

An idle writer may release its index (``ReadStore.release_index``): it saves a snapshot
first if the index holds changes the newest one lacks, and writes that arrive meanwhile
commit as always and wait in the change log; the next load (a recall, ``palace_info``, a
dream pass) replays them. Only when that replay would grow past ``index_save_every``
entries does a write load the index itself, so that a snapshot bounds it as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from trusty_memory.common import names
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.home import flock_within
from trusty_memory.common.logs import get_logger
from trusty_memory.common.messages import ForgetResult, KgAssertParams, RememberParams, StoredResult
from trusty_memory.common.palace_dir import (
    DB_FILE,
    IDENTITY_FILE,
    META_FILE,
    SUMMARY_FILE,
    read_meta,
    write_atomic,
)
from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.common.values import (
    check_created_at,
    check_drawer_id,
    check_nonempty,
    check_tags,
    check_text,
    check_unit_interval,
    invalid,
    now_rfc3339,
    unit_vector,
)
from trusty_memory.workers.store import archive, context, dream_log, rows
from trusty_memory.workers.store.index import VectorIndex
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.schema import connect
from trusty_memory.workers.store.state import DrawerPlace, storage_errors

log = get_logger(__name__)


WRITER_LOCK = "writer.lock"


def hold_writer_lock(palace_dir: Path, name: str, wait_s: float) -> int:
    """Become the palace's one writer: an ``flock`` on ``writer.lock``, held until close.

    A writer that lost its broker (a ``kill -9`` of the daemon) lives on for up to a
    heartbeat before it notices, and may still commit what it was doing; its replacement
    waits here until it is gone, so two processes never write one palace at once. Returns
    the fd to keep open; raises ``STORAGE_ERROR`` if the lock is still held after ``wait_s``.
    """
    fd = os.open(palace_dir / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    if not flock_within(fd, wait_s):
        os.close(fd)
        raise TrustyError(
            ErrorCode.STORAGE_ERROR,
            f"palace {name}: another process still writes it (holds"
            f" {palace_dir / WRITER_LOCK}) after {wait_s:.0f}s",
        )
    return fd


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
    own_vector: np.ndarray | None = None  # its own text's vector, when ``vector`` is a mix
    context: str | None = None  # the predecessor's words, when ``vector`` is a mix


class PalaceStore(ReadStore):
    """A palace's writer: the read side plus every write. One process per palace."""

    _writer_lock: int | None = None  # the fd of writer.lock, held from open to close
    _commits = 0  # write transactions committed since open: what summary.json follows
    _summary_at: int | None = None  # ``_commits`` when summary.json was last written

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
        lock = hold_writer_lock(palace_dir, name, settings.writer_lock_wait_s)
        try:
            store = cls._open_locked(palace_dir, name, settings, dim, description)
        except BaseException:
            os.close(lock)
            raise
        store._writer_lock = lock
        return store

    @classmethod
    def _open_locked(
        cls,
        palace_dir: Path,
        name: str,
        settings: PalaceSettings,
        dim: int,
        description: str | None,
    ) -> PalaceStore:
        meta = read_meta(palace_dir)
        if meta is None:
            meta = {"name": name, "description": description, "created_at": now_rfc3339()}
            write_atomic(palace_dir / META_FILE, json.dumps(meta, indent=2).encode())
        identity = palace_dir / IDENTITY_FILE
        if not identity.exists():
            write_atomic(identity, (description or "").encode())
        synchronous = getattr(settings, "synchronous", "FULL")
        db = connect(palace_dir / DB_FILE, synchronous=synchronous)
        store = cls(palace_dir, name, settings, db, dim, meta.get("description"))
        store._load_state()
        return store

    def _after_rebuild(self) -> None:
        self.maybe_snapshot(force=True)

    def _load_snapshot(self) -> tuple[VectorIndex, int] | None:
        """The newest snapshot at most ``_last_seq``: one past the change log means the
        palace file was replaced (say, by an older backup) and is skipped."""
        return VectorIndex.load(
            self.palace_dir, self.dim, max_seq=self._last_seq, **self._index_settings()
        )

    def _release_ready(self) -> bool:
        """Saved first, so that the load is a snapshot and no replay (False if saving
        fails: on a full disk the index stays rather than make its load a long replay)."""
        if self._applied_seq == self._snapshot_seq and self._has_snapshot():
            return True
        return self.maybe_snapshot(force=True)

    # -- writing -------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``with store.transaction() as conn``: one write transaction. BEGIN IMMEDIATE,
        the pending recall hits, the body, COMMIT (ROLLBACK on an exception). Not reentrant.

        IMMEDIATE takes the write lock at BEGIN, where SQLite's busy timeout applies. A plain
        (deferred) BEGIN took it at the first write, after the body's reads: if another
        connection committed in between, WAL mode fails the write at once with "database is
        locked" (a stale read snapshot cannot become a writer; no waiting helps). One writer
        per palace makes that rare, but a worker orphaned by a killed broker still commits
        its last batch next to its replacement, and a client saw the error in the kill test.

        Pending hit counts are only forgotten once the transaction that wrote them commits.
        """
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            hits = dict(self._pending_hits)
            if hits:
                conn.executemany(
                    "UPDATE drawers SET hits = hits + ? WHERE label = ?",
                    [(count, label) for label, count in hits.items()],
                )
        except BaseException:
            conn.rollback()
            raise
        try:
            yield conn
        except BaseException:
            conn.rollback()  # a no-op if the error already ended the transaction
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
        self._pending_hits.subtract(hits)
        self._pending_hits = +self._pending_hits  # drop zeros
        self._commits += 1

    def after_write(
        self,
        added: Iterable[DrawerPlace] = (),
        removed: Iterable[DrawerPlace] = (),
        *,
        snapshot: bool = False,
    ) -> None:
        """After a commit: the drawers ``removed`` leave the filters (their unwritten hits
        with them), those ``added`` join them, the index follows the change log and L1
        follows importance. A drawer changed in place is both, removed first.

        ``snapshot``: also save the index if enough changes piled up (``maybe_snapshot``),
        as a remember or a forget does. Batch work (an import, the dreamer's steps) leaves
        it to the worker's next idle moment: a snapshot rewrites the whole index file,
        which would stall the requests queued behind the batch, and a crash before then
        costs a change-log replay on open, never data.
        """
        for drawer in removed:
            self._unplace(drawer)
        for drawer in added:
            self._place(drawer)
        self._sync_index()
        self.refresh_l1()
        if snapshot:
            self.maybe_snapshot()

    def _prepare(self, params: RememberParams, vector: object) -> _NewDrawer:
        """``vector`` is the model's vector, or a ``context.Mixed`` pair (the index's mix
        and the drawer's own vector, both kept)."""
        own = words = None
        if isinstance(vector, context.Mixed):
            words = context.words(vector.context, params.text)
            own = unit_vector(vector.own, self.dim)
            vector = vector.vector
        text = check_text(params.text, self.settings.max_text_bytes)
        metadata = None
        if params.metadata is not None:
            if not isinstance(params.metadata, dict):
                raise invalid("metadata: must be an object")
            metadata = msgspec.json.encode(params.metadata).decode()
        return _NewDrawer(
            id=check_drawer_id(params.drawer_id) if params.drawer_id else str(uuid.uuid4()),
            content=text,
            room=names.normalize_room(params.room),
            tags=check_tags(params.tags),
            importance=check_unit_interval(params.importance, "importance"),
            created_at=check_created_at(params.created_at),
            vector=unit_vector(vector, self.dim),
            metadata=metadata,
            own_vector=own,
            context=words,
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
        it (see ``rows.absorb_duplicate``) and its id is returned, marked
        ``deduplicated``. Not when ``embed_text`` is given: the caller embedded the text
        in a context of its own, so the two drawers mean different things.
        """
        prepared = [self._prepare(params, vector) for params, vector in items]
        added: list[tuple[int, _NewDrawer]] = []
        absorbed: dict[int, str] = {}  # position in the batch -> the existing drawer's id
        new_tags: list[tuple[int, list[str]]] = []
        with self.transaction() as conn:
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
                    twin = rows.find_exact_duplicate(conn, content_hash, d.room, d.metadata)
                if twin is not None:
                    label, absorbed[i], old_tags = twin
                    tags = rows.absorb_duplicate(conn, label, d.tags, old_tags, d.importance)
                    new_tags.append((label, tags))
                    continue
                known.add(d.id)
                cursor = conn.execute(
                    "INSERT INTO drawers (id, content, room, tags, importance, created_at,"
                    " content_hash, vector, metadata, own_vector, context)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                        None if d.own_vector is None else d.own_vector.astype("<f4").tobytes(),
                        d.context,
                    ),
                )
                label = rows.inserted_label(cursor)
                rows.log_added(conn, label, d.id, d.tags)
                added.append((label, d))
        for label, tags in new_tags:
            for tag in tags:
                self._tag_labels.setdefault(tag, set()).add(label)
        if added:
            placed = [DrawerPlace(label, d.room, d.tags) for label, d in added]
            self.after_write(added=placed, snapshot=True)
        elif new_tags:
            self.refresh_l1()  # an absorbed duplicate may have gained importance
        return [
            StoredResult(
                drawer_id=absorbed.get(i, d.id),
                palace=self.name,
                status="stored",
                deduplicated=i in absorbed,
            )
            for i, d in enumerate(prepared)
        ]

    def _sync_index(self) -> None:
        """Bring the index up to the change log after a commit (a released one waits for
        its next load, unless the replay is due for a snapshot).

        The write is already durable; if the index fails it is rebuilt rather than the
        caller being told a committed write failed (a retry without a drawer id would then
        store the drawer twice).
        """
        self._last_seq = self._conn.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[
            0
        ]
        try:
            if self._index is None and self._replay_due():
                self._open_index()  # so that the next snapshot bounds the replay again
            self.catch_up()
        except Exception as exc:
            log.error("index update failed; rebuilding", palace=self.name, error=str(exc))
            self.rebuild_index()

    def _replay_due(self) -> bool:
        """Enough changes since the last snapshot to take a new one (``maybe_snapshot``)."""
        return self._last_seq - self._snapshot_seq >= self.settings.index_save_every

    @storage_errors
    def forget(self, drawer_id: str) -> ForgetResult:
        """Delete a drawer: row, tags, FTS entry (trigger), then the index and L1."""
        check_nonempty(drawer_id, "drawer_id")
        try:  # ids are stored in canonical form; accept any spelling of the same UUID
            drawer_id = str(uuid.UUID(drawer_id))
        except ValueError:
            pass  # not a UUID: it cannot exist, and the lookup below says so
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT label, room, tags FROM drawers WHERE id = ?", (drawer_id,)
            ).fetchone()
            if row is None:
                # Pruned: deleted from the archive too. Merged: an error naming the survivor.
                if archive.forget_archived(conn, drawer_id):
                    return ForgetResult(status="deleted", drawer_id=drawer_id, palace=self.name)
                raise TrustyError(ErrorCode.DRAWER_NOT_FOUND, f"drawer not found: {drawer_id}")
            label, room, tags = row
            # Forgetting a drawer forgets the versions its updates archived, too.
            conn.execute(
                "DELETE FROM archive WHERE reason = 'updated' AND merged_into = ?", (drawer_id,)
            )
            rows.delete_row(conn, label, drawer_id)
        self.after_write(removed=[DrawerPlace(label, room, json.loads(tags))], snapshot=True)
        return ForgetResult(status="deleted", drawer_id=drawer_id, palace=self.name)

    @storage_errors
    def kg_assert(self, params: KgAssertParams) -> dict[str, str]:
        """Close the active (subject, predicate) triple and insert the new one, atomically."""
        subject = check_nonempty(params.subject, "subject")
        predicate = check_nonempty(params.predicate, "predicate")
        obj = check_nonempty(params.object, "object")
        confidence = check_unit_interval(params.confidence, "confidence")
        now = now_rfc3339()
        with self.transaction() as conn:
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

    def add_hits(self, hits: Sequence[tuple[int, int]]) -> None:
        """Recall hits a reader counted; written with the next write transaction."""
        for label, count in hits:
            if label in self._labels and isinstance(count, int) and count > 0:
                self._pending_hits[label] += count

    @storage_errors
    def flush(self) -> None:
        """Write the recall hit counts gathered since the last write."""
        if self._pending_hits:
            with self.transaction():
                pass

    def maybe_snapshot(self, force: bool = False) -> bool:
        """Save the index if enough changes piled up since the last snapshot (or ``force``)."""
        if self._index is None:  # released: nothing newer than the disk is held
            return False
        due = self._applied_seq - self._snapshot_seq >= self.settings.index_save_every
        if not (force or due):
            return False
        try:
            self._index.save(self.palace_dir, self._applied_seq)
        except Exception as exc:  # a failed snapshot only costs a longer next open
            log.warning("index snapshot failed", palace=self.name, error=str(exc))
            return False
        self._snapshot_seq = self._applied_seq
        return True

    def write_summary(self) -> bool:
        """Write ``summary.json`` if a write committed since the last one (the first time
        after open, always); True if written.

        Counts come from memory and a few small queries: no index load, so an idle worker
        that let its index go keeps it gone. Read by the broker (``palace_summaries``).
        """
        if self._summary_at == self._commits:
            return False
        dream = dream_log.dream_summary(self._conn)
        last_write = self._conn.execute("SELECT max(at) FROM changes").fetchone()[0]
        triples = self._conn.execute(
            "SELECT count(*) FROM triples WHERE valid_to IS NULL"
        ).fetchone()[0]
        summary = {
            "drawer_count": len(self._labels),
            "triple_count": triples,
            "archived_count": dream["archived_count"],
            "last_write_at": last_write,
            "last_dream_at": dream["last_dream_at"],
            "dream_merged": dream["dream_merged"],
            "dream_decayed": dream["dream_decayed"],
            "dream_archived": dream["dream_archived"],
            "last_seq": self._last_seq,
            "written_at": now_rfc3339(),
        }
        write_atomic(self.palace_dir / SUMMARY_FILE, json.dumps(summary, indent=2).encode())
        self._summary_at = self._commits
        return True

    def close(self) -> None:
        """Flush hits, snapshot the index, write the summary, close SQLite. Safe to call
        twice."""
        if self._closed:
            return
        try:
            self.flush()
            try:
                self.write_summary()
            except OSError as exc:  # a full disk: only the palace list's view goes stale
                log.warning("summary not written", palace=self.name, error=str(exc))
            if self._applied_seq != self._snapshot_seq or not any(
                self.palace_dir.glob("index-*.json")
            ):
                self.maybe_snapshot(force=True)
        finally:
            self._closed = True
            self.db.close()
            if self._writer_lock is not None:
                os.close(self._writer_lock)
                self._writer_lock = None

    def __enter__(self) -> PalaceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
