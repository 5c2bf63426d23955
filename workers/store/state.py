"""What a palace process holds in memory over its SQLite file, and how it keeps up.

A palace is served by one writer process and 0..N reader processes
(``workers/palace.py``). Both hold the same in-memory state over the palace's SQLite
file: the vector index, the labels per room and per tag (the filters of a recall), the L1
snapshot of the most important drawers, the FTS term counts of deep recall
(``ranking.TermCounts``) and the recall hits not yet written. ``PalaceState`` is that
state; ``read.ReadStore`` adds every read over it, ``write.PalaceStore`` (the writer only)
the writes, which hand what they changed to ``after_write``.

A reader opens SQLite read-only (WAL lets it read beside the writer's commits) and keeps
up through the change log: ``changed()`` asks SQLite whether anyone committed since the
last look (one pragma), and ``refresh()`` applies the new change-log entries to the
filters and the index and re-reads L1. Recall hits counted by a reader are handed to the
writer (``take_hits``), since only the writer writes.

The index is a cache of SQLite, so an idle worker may let it go (``release_index``): of
the 10.6 MB an idle, forked 1k-drawer worker holds on its own, 4.3 MB is hnswlib's (the
graph and vectors, plus 65,536 label locks it allocates per index whatever its size).
``index`` loads it again, from the newest snapshot plus the change log, the path a
worker's start takes, when a request next needs vectors: ~2 ms at 1k drawers, ~22 ms at
10k, ~0.24 s at 100k (``[palace] idle_release_max_drawers`` keeps bigger indexes
loaded). While it is released the filters, L1 and ``_last_seq`` still follow every
change; only the index waits, at ``_applied_seq``.
"""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, NamedTuple, ParamSpec, TypeVar

import numpy as np
import sqlite_utils

from trusty_memory.common import names
from trusty_memory.common.bounds import limits
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.logs import get_logger
from trusty_memory.common.palace_dir import DB_FILE
from trusty_memory.workers.store import ranking, relatedness
from trusty_memory.workers.store.index import VectorIndex
from trusty_memory.workers.store.schema import storage_error

log = get_logger(__name__)

L1_SIZE = 32
REBUILD_CHUNK = 4096

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="PalaceState")


def storage_errors(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """SQLite failures leave a store method as ``STORAGE_ERROR`` naming the cause (a full
    disk and a corrupt file by name, with what to do: ``schema.storage_error``)."""

    @functools.wraps(fn)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise storage_error(exc, self.palace_dir / DB_FILE, fn.__name__) from exc

    return wrapper


@dataclass
class _L1:
    """The top-importance drawers, held in memory and scored exactly on every recall."""

    labels: list[int]
    matrix: np.ndarray


class DrawerPlace(NamedTuple):
    """Where a drawer sits in the filters: its label, its room, its tags. A write hands the
    drawers it added and removed to ``PalaceStore.after_write`` as these."""

    label: int
    room: str
    tags: Sequence[str]


class PalaceState:
    """A palace's in-memory state over SQLite: filters, index, L1, term counts, hits.
    Not thread-safe."""

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
        self.term_counts = ranking.TermCounts(self)  # deep recall's, per FTS term
        self.readings = relatedness.Readings()  # deep recall's episodes, per drawer text
        self._last_seq = 0  # newest seq in the change log (and in the filters)
        self._applied_seq = 0  # newest seq the index reflects
        self._snapshot_seq = 0  # seq of the newest snapshot on disk
        self._l1 = _L1([], np.zeros((0, dim), dtype=np.float32))
        self._index: VectorIndex | None = None  # None: released, or not opened yet
        self._closed = False
        self._data_version = -1  # SQLite's count of other connections' commits

    # -- opening and closing -------------------------------------------------------

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.db.close()

    def _new_index(self, capacity: int = 1024) -> VectorIndex:
        return VectorIndex(self.dim, capacity=capacity, **self._index_settings())

    def _index_settings(self) -> dict:
        return {
            "m": self.settings.hnsw_m,
            "ef_construction": self.settings.ef_construction,
            "ef_search": self.settings.ef_search,
            "vector_source": self.vectors_for,
        }

    # -- the index: loaded at open, released when idle, loaded again on demand --------

    @property
    def index(self) -> VectorIndex:
        """The vector index, loaded again first if it was released."""
        return self.load_index()

    def load_index(self) -> VectorIndex:
        """The index, loaded from the snapshot and the change log if it was released."""
        if self._index is None:
            self._open_index()
        # _open_index leaves an index or raises: the snapshot's, else rebuild_index's.
        assert self._index is not None
        return self._index

    @property
    def index_loaded(self) -> bool:
        return self._index is not None

    def release_index(self) -> bool:
        """Let the index go, if a load can bring it back cheaply (see the module doc).

        Kept when it holds more than ``[palace] idle_release_max_drawers`` drawers, or
        when no snapshot on disk would bring it back (``_release_ready``): a rebuild from
        SQLite costs ~0.4 ms per drawer. Returns whether it was released; the caller
        hands the freed memory back to the OS.
        """
        if self._index is None or self._closed:
            return False
        if self._index.live_count > self.settings.idle_release_max_drawers:
            return False
        if not self._release_ready():
            return False
        self._index = None
        return True

    def _release_ready(self) -> bool:
        """A reader's index comes back from the writer's snapshot and the change log."""
        return self._has_snapshot()

    def _has_snapshot(self) -> bool:
        return any(self.palace_dir.glob("index-*.json"))

    @storage_errors
    def _load_state(self) -> None:
        """Room and tag label sets (the filters) and the seq they reflect, then the index.

        SQLite groups the labels (rooms straight off the ``drawers_room_rank`` index) and
        numpy parses each group: a third of the time of a Python loop over every row,
        which at a million drawers was most of a cold open. The three reads share one
        read transaction: a reader opening beside a writer that commits between them
        would otherwise hold filters its seq does not explain (its index then disagrees
        and is rebuilt, or a catch-up skips the commit).
        """
        self._conn.execute("BEGIN")
        try:
            self._room_labels = _grouped_labels(
                self._conn, "SELECT room, group_concat(label) FROM drawers GROUP BY room"
            )
            self._tag_labels = _grouped_labels(
                self._conn, "SELECT tag, group_concat(label) FROM drawer_tags GROUP BY tag"
            )
            self._last_seq = self._conn.execute(
                "SELECT coalesce(max(seq), 0) FROM changes"
            ).fetchone()[0]
        finally:
            self._conn.execute("COMMIT")
        self._labels = set().union(*self._room_labels.values())
        self._open_index()
        self.refresh_l1()

    def _open_index(self) -> None:
        """Snapshot + change-log replay when that reproduces SQLite exactly, else rebuild.

        Run at open and whenever a released index is needed again.
        """
        started = time.perf_counter()
        loaded = self._load_snapshot()
        if loaded is not None:
            index, seq = loaded
            try:
                self._index, self._applied_seq, self._snapshot_seq = index, seq, seq
                replayed = self.catch_up()
            except Exception as exc:
                log.warning("index replay failed; rebuilding", palace=self.name, error=str(exc))
            else:
                if index.labels() == self._labels:
                    ms = round((time.perf_counter() - started) * 1000, 1)
                    log.info("index loaded", palace=self.name, seq=seq, replayed=replayed, ms=ms)
                    return
                log.warning("index disagrees with sqlite; rebuilding", palace=self.name)
        self.rebuild_index()

    def _load_snapshot(self) -> tuple[VectorIndex, int] | None:
        """The writer's newest snapshot, and the seq it covers.

        A reader takes it even when it is newer than the change log the reader has read
        (the writer saved it since, e.g. as it released its own index): the reader reads
        up to it first, so that its filters know every label the snapshot holds.
        """
        loaded = VectorIndex.load(self.palace_dir, self.dim, **self._index_settings())
        if loaded is not None and loaded[1] > self._last_seq:
            self.refresh()
            if loaded[1] > self._last_seq:  # the change log lost entries: rebuild
                return None
        return loaded

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
        self._index = index
        self._applied_seq = self._last_seq
        log.info("index rebuilt", palace=self.name, drawers=count)
        self._after_rebuild()

    def _after_rebuild(self) -> None:
        """The writer snapshots a rebuilt index; a reader never writes files."""

    @storage_errors
    def catch_up(self) -> int:
        """Bring the index up to ``_last_seq`` from the change log; returns how many
        entries were read. A released index is left as it is: its next load replays them.

        Never past ``_last_seq``, the seq the filters reflect: a reader's index must not
        hold a label its room and tag sets have not seen (a commit landing between
        ``refresh``'s read of the log and this one used to do just that).
        """
        if self._index is None:
            return 0
        rows = self._changes_since(self._applied_seq, until=self._last_seq)
        self._apply_changes(self._index, rows)
        return len(rows)

    def _apply_changes(self, index: VectorIndex, rows: list[tuple[int, str, int]]) -> None:
        """Apply change-log entries to ``index`` (the loaded one), which then reflects
        ``_last_seq``.

        Idempotent: labels are never reused, so the net effect per label is its last op;
        an add whose drawer has since been deleted is skipped (its delete follows), and an
        add of a label the index holds (a drawer changed in place, ``log_update``) too.
        """
        last_op = {label: op for _, op, label in rows}
        for label, op in last_op.items():
            if op == "delete":
                index.delete(label)
        adds = [label for label, op in last_op.items() if op == "add"]
        for start in range(0, len(adds), REBUILD_CHUNK):
            found, matrix = self.vectors_for(adds[start : start + REBUILD_CHUNK])
            if found:
                index.add(found, matrix)
        self._applied_seq = self._last_seq

    def _changes_since(self, seq: int, until: int | None = None) -> list[tuple[int, str, int]]:
        if until is None:
            return self._conn.execute(
                "SELECT seq, op, label FROM changes WHERE seq > ? ORDER BY seq", (seq,)
            ).fetchall()
        return self._conn.execute(
            "SELECT seq, op, label FROM changes WHERE seq > ? AND seq <= ? ORDER BY seq",
            (seq, until),
        ).fetchall()

    # -- keeping up with the writer (readers) ---------------------------------------

    @storage_errors
    def changed(self) -> bool:
        """True if another connection committed since the last call (cheap: one pragma)."""
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        changed, self._data_version = version != self._data_version, version
        return changed

    @storage_errors
    def refresh(self) -> int:
        """Bring a reader up to the writer: filters and index from the change log, then L1
        and the term counts (importance and text may change without a new label). A
        released index stays released (its next load replays the entries).

        Returns how many change-log entries were read.
        """
        rows = self._changes_since(self._last_seq)
        touched = {label for _, _, label in rows}
        for label in touched:
            self._forget_label(label)
        live = self._conn.execute(
            "SELECT label, room, tags FROM drawers WHERE label IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(touched)),),
        ).fetchall()
        for label, room, tags in live:
            self._labels.add(label)
            self._room_labels.setdefault(room, set()).add(label)
            for tag in json.loads(tags):
                self._tag_labels.setdefault(tag, set()).add(label)
        self._last_seq = max(self._last_seq, rows[-1][0]) if rows else self._last_seq
        if self._index is not None:
            self._apply_changes(self._index, rows)
        self.refresh_l1()
        self.term_counts.forget()
        return len(rows)

    def _forget_label(self, label: int) -> None:
        """Drop ``label`` from the in-memory filter sets (its row is re-read if it lives)."""
        self._labels.discard(label)
        for labels in self._room_labels.values():
            labels.discard(label)
        for labels in self._tag_labels.values():
            labels.discard(label)

    def _place(self, drawer: DrawerPlace) -> None:
        """Add a drawer to the filters."""
        self._labels.add(drawer.label)
        self._room_labels.setdefault(drawer.room, set()).add(drawer.label)
        for tag in drawer.tags:
            self._tag_labels.setdefault(tag, set()).add(drawer.label)

    def _unplace(self, drawer: DrawerPlace) -> None:
        """Drop a drawer from the filters and forget its unwritten hits."""
        self._labels.discard(drawer.label)
        self._room_labels.get(drawer.room, set()).discard(drawer.label)
        for tag in drawer.tags:
            self._tag_labels.get(tag, set()).discard(drawer.label)
        self._pending_hits.pop(drawer.label, None)

    # -- vectors, filters, L1 -------------------------------------------------------

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

    def refresh_l1(self) -> None:
        """L1 follows importance: the top ``L1_SIZE`` drawers, read again (after a write
        that may have moved importance, and at the end of a dream pass)."""
        rows = self._conn.execute(
            "SELECT label, vector FROM drawers"
            " ORDER BY importance DESC, created_at DESC, label DESC LIMIT ?",
            (L1_SIZE,),
        ).fetchall()
        self._l1 = _L1([r[0] for r in rows], self._matrix([r[1] for r in rows]))

    # -- counts and pending hits ---------------------------------------------------

    @property
    def drawer_count(self) -> int:
        """Live drawers, as the filters hold them (no query)."""
        return len(self._labels)

    def room_counts(self) -> dict[str, int]:
        """Drawers per room, rooms in name order; empty rooms left out."""
        return {room: len(ls) for room, ls in sorted(self._room_labels.items()) if ls}

    def tag_count(self) -> int:
        """Tags that at least one drawer carries."""
        return sum(1 for ls in self._tag_labels.values() if ls)

    @property
    def index_seq(self) -> int:
        """The newest change-log seq the index reflects (``last_seq`` when it is caught up)."""
        return self._applied_seq

    def pending_hits(self, label: int) -> int:
        """Recall hits of ``label`` counted here and not yet written: part of the truth."""
        return self._pending_hits.get(label, 0)

    def keep_hits(self, hits: dict[int, int]) -> None:
        """Hits ``take_hits`` gave out that did not reach the writer: kept for the next
        hand-over."""
        for label, count in hits.items():
            self._pending_hits[label] += count

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def shrink_memory(self) -> None:
        """Free SQLite's page cache (an idle palace keeps only what it needs to answer)."""
        try:
            self._conn.execute("PRAGMA shrink_memory")
        except sqlite3.Error:
            pass

    def take_hits(self) -> dict[int, int]:
        """The recall hits counted since the last call (a reader hands them to the writer),
        at most ``[limits] max_batch_items`` labels: ``palace_hits`` is held to that bound,
        so more wait for the next call rather than fail together."""
        most = limits().max_batch_items
        if len(self._pending_hits) <= most:
            hits, self._pending_hits = dict(self._pending_hits), Counter()
            return hits
        hits = dict(itertools.islice(self._pending_hits.items(), most))
        for label in hits:
            del self._pending_hits[label]
        return hits


def _grouped_labels(conn: sqlite3.Connection, sql: str) -> dict[str, set[int]]:
    """``{key: labels}`` from a ``SELECT key, group_concat(label) ... GROUP BY key``."""
    return {
        key: set(np.fromstring(labels, dtype=np.int64, sep=",").tolist())
        for key, labels in conn.execute(sql)
    }
