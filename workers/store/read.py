"""The read side of a palace: what readers run, and what the writer builds on.

``ReadStore`` answers every read (recall, list, get, a subject's facts, info) over the
in-memory state ``state.PalaceState`` keeps in step with the palace's SQLite file; the
writer's ``write.PalaceStore`` adds the writes. Deep recall's ranking, its rules and their
SQL, is ``ranking.py``'s.

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
import hashlib
import json
import uuid
from pathlib import Path

import numpy as np

from trusty_memory.common import names
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.messages import (
    DrawerDetail,
    DrawerSummary,
    KgQueryResult,
    ListParams,
    PalaceInfo,
    RecallHit,
)
from trusty_memory.common.palace_dir import DB_FILE, IDENTITY_FILE, read_meta
from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.common.values import (
    TRIPLE_COLUMNS,
    check_nonempty,
    check_timestamp,
    check_top_k,
    invalid,
    triple_of,
    unit_vector,
)
from trusty_memory.workers.store import context, dream_log, ranking
from trusty_memory.workers.store.schema import connect_readonly
from trusty_memory.workers.store.state import PalaceState, storage_errors

LIST_LIMIT_MAX = 1000


class ReadStore(PalaceState):
    """The read side of a palace: every read over the filters, index and L1. Not
    thread-safe."""

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

    # -- recall ----------------------------------------------------------------------

    @storage_errors
    def recall(
        self,
        query_text: str,
        query_vec: object,
        top_k: int = 10,
        room: str | None = None,
        tag: str | None = None,
        deep: bool = False,
        count: bool = True,
    ) -> list[RecallHit]:
        """The ``top_k`` drawers most relevant to the query, best first (see module doc);
        with ``count`` each hit adds one to its drawer's recall count."""
        top_k = check_top_k(top_k, self.settings.max_top_k)
        query = unit_vector(query_vec, self.dim, "query_vec")
        self.load_index()  # first: a reader's load may catch its filters up
        allowed = self._allowed(room, tag)
        if allowed is not None and not allowed:
            return []
        if deep:
            ranked = ranking.deep(self, query_text, query, top_k, allowed, room, tag)
        else:
            ranked = self._shallow(query_text, query, top_k, allowed)
        return self._hits(ranked, count)

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

    def _hits(self, ranked: list[tuple[int, float, int]], count: bool = True) -> list[RecallHit]:
        """Fetch the ranked drawers in one query and (with ``count``) count a hit for each."""
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
            if count:
                self._pending_hits[label] += 1
            hits.append(
                RecallHit(
                    drawer_id=row[1],
                    content=row[2],
                    score=round(float(score), 4),  # every output: 4 decimals
                    layer=layer,
                    tags=json.loads(row[4]),
                    importance=row[5],
                    room=row[3],
                    created_at=row[6],
                )
            )
        return hits

    def last_written(self) -> context.Written | None:
        """The newest drawer (highest label): the episode predecessor of the next write."""
        row = self._conn.execute(
            "SELECT room, created_at, content FROM drawers ORDER BY label DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        return context.Written(row[0], context.seconds_of(row[1]), row[2])

    # -- other reads -------------------------------------------------------------------

    @storage_errors
    def list(self, params: ListParams) -> list[DrawerSummary]:
        """Drawers by importance (then newest first), optionally one room and/or tag."""
        limit = params.limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise invalid(f"limit: must be a positive integer, got {limit!r}")
        where: list[str] = []
        args: list[str | int] = []  # the placeholders' values, in order
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
        check_nonempty(drawer_id, "drawer_id")
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
            hits=row[7] + self.pending_hits(row[9]),
            metadata=json.loads(row[8]) if row[8] else None,
        )

    @storage_errors
    def kg_query(self, subject: str, as_of: str | None = None) -> KgQueryResult:
        """Active triples of ``subject`` in assertion order (the id, not the clock, orders);
        with ``as_of`` (RFC 3339), those that were active at that moment instead."""
        check_nonempty(subject, "subject")
        if as_of is None:
            rows = self._conn.execute(
                f"SELECT {TRIPLE_COLUMNS} FROM triples"
                " WHERE subject = ? AND valid_to IS NULL ORDER BY id",
                (subject,),
            )
        else:
            # Timestamps are stored as UTC ``...Z`` at second precision, so text order is
            # time order; a fact closed at T was no longer true at T.
            at = check_timestamp(as_of, "as_of")
            rows = self._conn.execute(
                f"SELECT {TRIPLE_COLUMNS} FROM triples WHERE subject = ?"
                " AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?) ORDER BY id",
                (subject, at, at),
            )
        triples = [triple_of(r) for r in rows]
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
            drawer_count=self.drawer_count,
            data_dir=str(self.palace_dir),
            description=self.description,
            triple_count=triples,
            last_seq=self._last_seq,
            index_count=self.index.live_count,
            **dream_log.dream_summary(self._conn),
        )

    def identity(self) -> str:
        """The L0 identity text."""
        try:
            return (self.palace_dir / IDENTITY_FILE).read_text()
        except OSError:
            return self.description or ""
