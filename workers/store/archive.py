"""The archive: where a palace keeps the drawers it no longer serves, whole, to bring back.

Run inside a palace's writer process. The dreamer moves drawers here (``pruned``: their
importance faded; ``merged``: folded into another drawer, named by ``merged_into``), and
``memory_update`` keeps each previous version here (``updated``, ``merged_into`` naming its
drawer: ``edit.py``). Every entry keeps the drawer's vector, so ``archive restore`` puts it
back as it was (``edit.archive_restore``: a new label, the same id and vector; its decay
clock restarts), and ``memory_forget`` of an archived id can say where it went.

Functions of the archive table, on the caller's connection and in its transaction; the
listing is a read any palace process answers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from trusty_memory.common import protocol as p
from trusty_memory.common.messages import ArchivedDrawer, ArchiveListParams, ArchiveListResult
from trusty_memory.common.values import check_limit, invalid, now_rfc3339
from trusty_memory.workers.store import rows
from trusty_memory.workers.store.rows import Row

if TYPE_CHECKING:
    import sqlite3

    from trusty_memory.workers.store.read import ReadStore

ARCHIVE_LIMIT_MAX = 1000


def archive_row(
    conn: sqlite3.Connection, row: Row, reason: str, merged_into: str | None, *, delete=True
) -> None:
    """Move one drawer to the archive: copy, then (unless ``delete`` is false) delete."""
    now = now_rfc3339()
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
        rows.delete_row(conn, row.label, row.id)


def archive_list(store: ReadStore, params: ArchiveListParams) -> ArchiveListResult:
    limit = check_limit(params.limit, ARCHIVE_LIMIT_MAX)
    where = ["seq > ?"]
    args: list[str | int] = [params.after]  # the placeholders' values, in order
    if params.reason is not None:
        if params.reason not in ("pruned", "merged", "updated"):
            raise invalid(f"reason: must be 'pruned', 'merged' or 'updated', got {params.reason!r}")
        where.append("reason = ?")
        args.append(params.reason)
    found = store.db.conn.execute(
        "SELECT seq, id, content, room, tags, importance, created_at, archived_at, reason,"
        f" merged_into FROM archive WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
        (*args, limit),
    ).fetchall()
    drawers = [
        ArchivedDrawer(
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
        for r in found
    ]
    next_after = found[-1][0] if len(found) == limit else None
    return ArchiveListResult(palace=store.name, drawers=drawers, next_after=next_after)


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
