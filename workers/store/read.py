"""The read side of a palace: what readers run, and what the writer builds on.

A palace is served by one writer process and 0..N reader processes
(``workers/palace.py``). Both hold the same in-memory state over the palace's SQLite
file: the vector index, the labels per room and per tag (the filters of a recall), the L1
snapshot of the most important drawers and the FTS term counts of deep recall. This module
is that state and every read over it; ``store.py`` (the writer only) adds the writes.

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

Retrieval layers (``RecallHit.layer``):

* 1 - the drawer is in the L1 snapshot (the top ``L1_SIZE`` drawers by importance), which is
  scored exactly against every query. A drawer is named by the first layer that surfaces
  it in the progressive order L1 -> L2, so its layer never depends on whether the
  approximate L2 search happened to find it too.
* 2 - found by the HNSW search, or the drawer whose text is the query word for word: an
  approximate search can pass over one vector in a crowd of near-identical ones (one
  exact recall did, in a run of about 15,000 over look-alike notes:
  ``bench/reliability.py``'s kill test), and a text given back word for word must always
  find what was stored under it. One indexed lookup of the text's hash; the drawer is
  scored by its cosine like any other.
* 3 - deep recall: a wider HNSW search fused with FTS5 BM25 (stopwords dropped from the
  query) by reciprocal-rank fusion; the fusion lives in ``store/ranking.py``.

Scores are higher-is-better: cosine similarity for layers 1 and 2; for layer 3 the RRF score
scaled so that ranking first in both lists is 1.0 (first in one list only is 0.5).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import numpy as np
import sqlite_utils

from trusty_memory.common import names
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.logs import get_logger
from trusty_memory.common.palace_dir import DB_FILE, IDENTITY_FILE, read_meta
from trusty_memory.common.protocol import (
    DrawerDetail,
    DrawerSummary,
    ErrorCode,
    KgQueryResult,
    ListParams,
    PalaceInfo,
    RecallHit,
    TrustyError,
    limits,
)
from trusty_memory.workers.store import context, dates, maintenance
from trusty_memory.workers.store import ranking as retrieval
from trusty_memory.workers.store import values as v
from trusty_memory.workers.store.index import VectorIndex
from trusty_memory.workers.store.schema import connect_readonly, storage_error

log = get_logger(__name__)

L1_SIZE = 32
LIST_LIMIT_MAX = 1000
REBUILD_CHUNK = 4096
DOC_COUNT_CACHE = 50_000  # FTS terms whose drawer counts a palace keeps for deep recall

P = ParamSpec("P")
R = TypeVar("R")


def storage_errors(
    fn: Callable[Concatenate[ReadStore, P], R],
) -> Callable[Concatenate[ReadStore, P], R]:
    """SQLite failures leave a store method as ``STORAGE_ERROR`` naming the cause (a full
    disk and a corrupt file by name, with what to do: ``store_schema.storage_error``)."""

    @functools.wraps(fn)
    def wrapper(self: ReadStore, *args: P.args, **kwargs: P.kwargs) -> R:
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


class ReadStore:
    """The read side of a palace: filters, index and L1 over SQLite. Not thread-safe."""

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
        self._doc_counts_over: dict[str, int] = {}  # FTS term -> a smaller cap it exceeds
        self._last_seq = 0  # newest seq in the change log (and in the filters)
        self._applied_seq = 0  # newest seq the index reflects
        self._snapshot_seq = 0  # seq of the newest snapshot on disk
        self._l1 = _L1([], np.zeros((0, dim), dtype=np.float32))
        self._index: VectorIndex | None = None  # None: released, or not opened yet
        self._closed = False
        self._data_version = -1  # SQLite's count of other connections' commits

    # -- opening -------------------------------------------------------------------

    @classmethod
    def open_reader(
        cls, palace_dir: Path, name: str, settings: PalaceSettings, dim: int = 384
    ) -> ReadStore:
        """Open an existing palace read-only, beside its writer (WAL lets both run).

        The index comes from the writer's newest snapshot plus the change log, or is
        rebuilt in memory from SQLite; a reader never writes a file.
        """
        name = names.validate_palace_name(name)
        palace_dir = Path(palace_dir)
        if not (palace_dir / DB_FILE).exists():
            raise TrustyError(ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        meta = read_meta(palace_dir) or {}
        store = cls(palace_dir, name, settings, connect_readonly(palace_dir / DB_FILE), dim,
                    meta.get("description"))  # fmt: skip
        store._load_state()
        store.changed()  # the state just loaded is the baseline
        return store

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
        self._refresh_l1()

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
        self._apply_changes(rows)
        return len(rows)

    def _apply_changes(self, rows: list[tuple[int, str, int]]) -> None:
        """Apply change-log entries to the index, which then reflects ``_last_seq``.

        Idempotent: labels are never reused, so the net effect per label is its last op;
        an add whose drawer has since been deleted is skipped (its delete follows), and an
        add of a label the index holds (a drawer changed in place, ``log_update``) too.
        """
        index = self._index
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
            self._apply_changes(rows)
        self._refresh_l1()
        self._forget_doc_counts()
        return len(rows)

    def _forget_label(self, label: int) -> None:
        """Drop ``label`` from the in-memory filter sets (its row is re-read if it lives)."""
        self._labels.discard(label)
        for labels in self._room_labels.values():
            labels.discard(label)
        for labels in self._tag_labels.values():
            labels.discard(label)

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
        self.load_index()  # first: a reader's load may catch its filters up
        allowed = self._allowed(room, tag)
        if allowed is not None and not allowed:
            return []
        if deep:
            ranked = self._deep(query_text, query, top_k, allowed, room, tag)
        else:
            ranked = self._shallow(query_text, query, top_k, allowed)
        return self._hits(ranked)

    def _shallow(
        self, query_text: str, query: np.ndarray, top_k: int, allowed: set[int] | None
    ) -> list[tuple[int, float, int]]:
        found = {
            label: (score, 2) for label, score in self.index.search(query, top_k, allowed=allowed)
        }
        for label, vector in self._conn.execute(
            "SELECT label, vector FROM drawers WHERE content_hash = ?",
            # "surrogatepass": a lone surrogate in a query finds nothing, never raises.
            (hashlib.sha256((query_text or "").encode("utf-8", "surrogatepass")).hexdigest(),),
        ):
            # A reader behind its writer knows only the labels it has caught up to.
            if (
                label in self._labels
                and label not in found
                and (allowed is None or label in allowed)
            ):
                found[label] = (min(1.0, float(self._matrix([vector])[0] @ query)), 2)
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
        lists = [(vector_ranked, retrieval.VECTOR_WEIGHT), (text_ranked, retrieval.TEXT_WEIGHT)]
        fused = retrieval.rrf(lists, len(vector_ranked) + len(text_ranked))
        feedback = self._feedback_ranking(query_text, fused, n, room, tag)
        if feedback:
            lists.append((feedback, retrieval.FEEDBACK_WEIGHT))
        dated = self._date_ranking(query_text, query, n, allowed)
        if dated:
            lists.append((dated, retrieval.DATE_WEIGHT))
        if len(lists) > 2:
            size = sum(len(labels) for labels, _ in lists)
            fused = retrieval.rrf(lists, size, full_weight=lists[0][1] + lists[1][1])
        episodes = self._episodes({label for label, _ in fused})
        ranked = retrieval.smooth_episodes(fused, episodes, top_k)
        return [(label, min(1.0, score), 3) for label, score in ranked]  # see retrieval.rrf

    def last_written(self) -> context.Written | None:
        """The newest drawer (highest label): the episode predecessor of the next write."""
        row = self._conn.execute(
            "SELECT room, created_at, content FROM drawers ORDER BY label DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return context.Written(row[0], context.seconds_of(row[1]), row[2])

    def _episodes(self, labels: set[int]) -> Callable[[int, int], bool]:
        """``same_episode(a, b)`` for two of ``labels`` whose labels are adjacent: same
        room, written within ``retrieval.EPISODE_WINDOW_S`` of each other. Only drawers
        with a label neighbour among ``labels`` are read: smoothing adds nothing for the
        others (``retrieval.smooth_episodes``), and a deep recall's ~200 candidates have
        few such pairs."""
        wanted = sorted(x for x in labels if x - 1 in labels or x + 1 in labels)
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

    def _date_ranking(
        self, query_text: str, query: np.ndarray, n: int, allowed: set[int] | None
    ) -> list[int]:
        """The drawers written within the dates the query names (``workers/store/dates.py``),
        or whose text speaks of a day within them (``drawer_days``: "yesterday" in a note
        written the day after), ranked by the query's vector; none when it names no date,
        or when its dates cover half the palace or more (the list would only repeat the
        vector list)."""
        spans = dates.windows(query_text or "", self._years)
        if not spans:
            return []
        inside: set[int] = set()
        for start, end in spans:
            inside.update(
                row[0]
                for row in self._conn.execute(
                    "SELECT label FROM drawers WHERE created_at >= ? AND created_at < ?"
                    " UNION SELECT label FROM drawer_days"
                    " WHERE start >= ? AND start < ? AND end > ?",
                    (start, end, dates.earliest_overlap(start), end, start),
                )
            )
        if allowed is not None:
            inside &= allowed
        if not inside or 2 * len(inside) >= len(self._labels):
            return []
        return [label for label, _ in self.index.search(query, n, allowed=inside)]

    def _years(self) -> range:
        """The years the palace's drawers were written in (for dates without a year)."""
        first, last = self._conn.execute(
            "SELECT min(created_at), max(created_at) FROM drawers"
        ).fetchone()
        if first is None:
            return range(0)
        # The stored form writes year 1 as "1-01-01T...": read the year up to its dash.
        return range(int(first.split("-", 1)[0]), int(last.split("-", 1)[0]) + 1)

    def _feedback_ranking(
        self,
        query_text: str,
        fused: list[tuple[int, float]],
        n: int,
        room: str | None,
        tag: str | None,
    ) -> list[int]:
        """BM25 over the feedback terms of the top fused drawers
        (``retrieval.feedback_terms``): it finds drawers that share the answer's words
        rather than the question's."""
        top = [label for label, _ in fused[: retrieval.FEEDBACK_DOCS]]
        if not top:
            return []
        content = dict(
            self._conn.execute(
                "SELECT label, content FROM drawers"
                " WHERE label IN (SELECT value FROM json_each(?))",
                (json.dumps(top),),
            )
        )
        texts = [content[label] for label in top if label in content]  # best first
        terms = retrieval.feedback_terms(
            v.fts_terms(query_text or ""),
            texts,
            v.fts_terms,
            lambda term: self._doc_count(term, retrieval.FEEDBACK_POSTINGS_BUDGET),
        )
        return self._bm25_terms(terms, n, room, tag) if terms else []

    def _bm25(self, query_text: str, n: int, room: str | None, tag: str | None) -> list[int]:
        """Labels ranked by FTS5 BM25 over every query term (see ``_bm25_terms``)."""
        return self._bm25_terms(v.fts_terms(query_text or ""), n, room, tag)

    def _bm25_terms(self, terms: list[str], n: int, room: str | None, tag: str | None) -> list[int]:
        """Labels ranked by FTS5 BM25 over ``terms``, with the same filters applied inside
        the query, scoring only drawers that hold one of the rarer terms (see
        ``retrieval.split_terms``). A drawer's episode predecessor's words
        (``drawers.context``) count at ``retrieval.CONTEXT_TEXT_WEIGHT`` of its own."""
        rare, common = retrieval.split_terms(terms, self._doc_count)
        if not rare:
            return []
        if common:
            r, c = v.fts_or(rare), v.fts_or(common)
            matches = [f"({r}) AND ({c})", f"({r}) NOT ({c})"]
        else:
            matches = [v.fts_or(rare)]
        context_weight = retrieval.CONTEXT_TEXT_WEIGHT if self.settings.context_vectors else 0.0
        matches = [self._scoped(m) for m in matches]
        sql = "SELECT f.rowid, f.rank FROM drawers_fts f"
        where = ["drawers_fts MATCH ?", f"f.rank MATCH 'bm25(1.0, {context_weight})'"]
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

    def _doc_count(self, term: str, cap: int = retrieval.BM25_POSTINGS_BUDGET) -> int:
        """How many drawers hold ``term``, counted only up to ``cap`` + 1 (the BM25 budget
        unless the caller needs less: the split needs an order, not a census) and cached
        until the palace has changed size by a tenth. The cache keeps exact counts and
        the BM25 budget's "more"; a term over a smaller cap is remembered apart, so that
        the next full count is still taken. A zero is never cached: the split drops such
        a term, and the next write may be the first drawer to hold it."""
        size = len(self._labels)
        if abs(size - self._doc_counts_size) > max(100, self._doc_counts_size // 10):
            self._forget_doc_counts()
            self._doc_counts_size = size
        count = self._doc_counts.get(term)
        if count:
            return min(count, cap + 1)
        if cap < retrieval.BM25_POSTINGS_BUDGET and self._doc_counts_over.get(term, -1) >= cap:
            return cap + 1
        if len(self._doc_counts) + len(self._doc_counts_over) >= DOC_COUNT_CACHE:
            self._forget_doc_counts()
        count = self._conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM drawers_fts WHERE drawers_fts MATCH ? LIMIT ?)",
            (self._scoped(v.fts_or([term])), cap + 1),
        ).fetchone()[0]
        if count and (count <= cap or cap >= retrieval.BM25_POSTINGS_BUDGET):
            self._doc_counts[term] = count
        elif count:
            self._doc_counts_over[term] = cap
        return count

    def _scoped(self, match: str) -> str:
        """A BM25 match over what deep recall reads: a drawer's own words and its
        predecessor's (``drawers.context``), or its own alone with the switch off, even
        where older drawers kept context words."""
        return match if self.settings.context_vectors else v.own_words(match)

    def _forget_doc_counts(self) -> None:
        self._doc_counts.clear()
        self._doc_counts_over.clear()

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
    def get(self, drawer_id: str) -> DrawerDetail:
        """One whole drawer by id (any spelling of its UUID)."""
        v.check_nonempty(drawer_id, "drawer_id")
        with contextlib.suppress(ValueError):
            drawer_id = str(uuid.UUID(drawer_id))
        row = self._conn.execute(
            "SELECT id, content, room, tags, importance, base_importance, created_at, hits,"
            " metadata, label FROM drawers WHERE id = ?",
            (drawer_id,),
        ).fetchone()
        if row is None:
            archived = self._conn.execute(
                "SELECT reason, merged_into FROM archive WHERE id = ?", (drawer_id,)
            ).fetchone()
            why = ""
            if archived is not None:
                why = f" (in the archive: {archived[0]}"
                why += f" into {archived[1]})" if archived[1] else ")"
            raise TrustyError(ErrorCode.DRAWER_NOT_FOUND, f"drawer not found: {drawer_id}{why}")
        return DrawerDetail(
            drawer_id=row[0],
            palace=self.name,
            content=row[1],
            room=row[2],
            tags=json.loads(row[3]),
            importance=row[4],
            base_importance=row[5],
            created_at=row[6],
            hits=row[7] + self._pending_hits.get(row[9], 0),
            metadata=json.loads(row[8]) if row[8] else None,
        )

    @storage_errors
    def kg_query(self, subject: str, as_of: str | None = None) -> KgQueryResult:
        """Active triples of ``subject`` in assertion order (the id, not the clock, orders);
        with ``as_of`` (RFC 3339), those that were active at that moment instead."""
        v.check_nonempty(subject, "subject")
        if as_of is None:
            rows = self._conn.execute(
                f"SELECT {v.TRIPLE_COLUMNS} FROM triples"
                " WHERE subject = ? AND valid_to IS NULL ORDER BY id",
                (subject,),
            )
        else:
            # Timestamps are stored as UTC ``...Z`` at second precision, so text order is
            # time order; a fact closed at T was no longer true at T.
            at = v.check_timestamp(as_of, "as_of")
            rows = self._conn.execute(
                f"SELECT {v.TRIPLE_COLUMNS} FROM triples WHERE subject = ?"
                " AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?) ORDER BY id",
                (subject, at, at),
            )
        triples = [v.triple_of(r) for r in rows]
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
