"""Drawer rows and the change log: what every write that adds or removes a drawer goes through.

Run by a palace's writer (``write.PalaceStore`` and the modules that change drawers:
``bulk``, ``edit``, ``dedup``, ``decay``, ``archive``), each call inside the caller's
transaction (``PalaceStore.transaction``). A drawer written or deleted here always gets its
entry in the change log (``changes``), which is how the vector index is replayed after a
crash and how readers keep up (``state.PalaceState.refresh``). The caller then hands the
drawers to ``PalaceStore.after_write``, which brings the writer's own filters, index and L1
along.

A text written again (same text, room and metadata) is a restatement: at write time the
existing drawer absorbs it (``find_exact_duplicate``, ``absorb_duplicate``). The dreamer's
wider rule, near duplicates that state the same fact, is ``dedup.py``'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from trusty_memory.common import bounds
from trusty_memory.common.values import now_rfc3339
from trusty_memory.workers.store.state import DrawerPlace

if TYPE_CHECKING:
    import sqlite3

DRAWER_COLUMNS = (
    "label, id, content, room, tags, importance, base_importance, created_at, hits,"
    " content_hash, vector, metadata, decay_from, own_vector, context"
)


@dataclass
class Row:
    """One drawer as the dreamer's steps, the archive and an update see it."""

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

    @property
    def place(self) -> DrawerPlace:
        """Where the drawer sits in the store's filters (``PalaceStore.after_write``)."""
        return DrawerPlace(self.label, self.room, self.tags)

    def unit(self, dim: int) -> np.ndarray:
        """The drawer's own vector: what it says, without its episode's context."""
        own = self.vector if self.own_vector is None else self.own_vector
        return np.frombuffer(own, dtype="<f4", count=dim)


def where(conn: sqlite3.Connection, condition: str, args: Iterable[object]) -> list[Row]:
    """The drawers ``WHERE condition`` (with ``args`` for its placeholders)."""
    sql = f"SELECT {DRAWER_COLUMNS} FROM drawers WHERE {condition}"
    found = conn.execute(sql, tuple(args)).fetchall()
    return [
        Row(label, drawer_id, content, room, json.loads(tags), *rest)
        for label, drawer_id, content, room, tags, *rest in found
    ]


def by_id(conn: sqlite3.Connection, ids: list[str]) -> list[Row]:
    """The live drawers among ``ids``."""
    return where(conn, "id IN (SELECT value FROM json_each(?))", [json.dumps(ids)])


def insert_row(conn: sqlite3.Connection, row: Row) -> int:
    """Write ``row`` as a new drawer (a new label; ``row.label`` is ignored), with its tags
    and the change-log entry the index follows; the content hash is computed from the text.
    Returns the new label."""
    cursor = conn.execute(
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
    )
    label = inserted_label(cursor)
    log_added(conn, label, row.id, row.tags)
    return label


def inserted_label(cursor: sqlite3.Cursor) -> int:
    """The label (rowid) of the drawer an ``INSERT`` of one row has just written."""
    label = cursor.lastrowid
    # sqlite3 sets lastrowid on every one-row INSERT that succeeded (a failed one raised);
    # None is only its value before any.
    assert label is not None
    return label


def delete_row(conn: sqlite3.Connection, label: int, drawer_id: str) -> None:
    """Delete a drawer's row and tags (FTS by trigger) and log the delete for the index."""
    conn.execute("DELETE FROM drawer_tags WHERE label = ?", (label,))
    conn.execute("DELETE FROM drawers WHERE label = ?", (label,))
    log_change(conn, "delete", label, drawer_id)


# -- the change log ------------------------------------------------------------------------


def log_change(
    conn: sqlite3.Connection, op: Literal["add", "delete"], label: int, drawer_id: str
) -> None:
    """One entry of the change log: ``add`` (a new label, or a live one changed in place:
    ``log_update``) or ``delete``."""
    log_changes(conn, op, [(label, drawer_id)])


def log_changes(
    conn: sqlite3.Connection,
    op: Literal["add", "delete"],
    drawers: Iterable[tuple[int, str]],
) -> None:
    """The same entry for each of ``(label, drawer_id)``, at one time (a batch's commit)."""
    at = now_rfc3339()
    conn.executemany(
        "INSERT INTO changes (op, label, drawer_id, at) VALUES (?, ?, ?, ?)",
        [(op, label, drawer_id, at) for label, drawer_id in drawers],
    )


def log_added(conn: sqlite3.Connection, label: int, drawer_id: str, tags: list[str]) -> None:
    """A new drawer row's tag rows and its ``add`` in the change log (what readers and an
    index replay follow), in the caller's transaction."""
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)", [(t, label) for t in tags]
    )
    log_change(conn, "add", label, drawer_id)


def log_update(conn: sqlite3.Connection, label: int) -> None:
    """Record that a live drawer changed in place (its tags, or its id after a merge) as
    an ``add`` of its label: a replay finds the label already in the index and skips it,
    and a reader re-reads the drawer's room and tags (``PalaceState.refresh``). Vectors
    never change in place (a merge that rewords a survivor moves it to another row)."""
    drawer_id = conn.execute("SELECT id FROM drawers WHERE label = ?", (label,)).fetchone()[0]
    log_change(conn, "add", label, drawer_id)


# -- a text stored again (write time) --------------------------------------------------------


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
    room = max(0, bounds.limits().max_tags - len(old_tags))
    added = [t for t in tags if t not in old_tags][:room]
    conn.execute(
        "UPDATE drawers SET tags = ?, importance = max(importance, ?),"
        " base_importance = max(coalesce(base_importance, importance), ?), decay_from = ?"
        " WHERE label = ?",
        (json.dumps(old_tags + added), importance, importance, now_rfc3339(), label),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)",
        [(t, label) for t in added],
    )
    if added:
        log_update(conn, label)
    return added
