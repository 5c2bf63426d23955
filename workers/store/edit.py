"""Changing what a palace already holds: a drawer in place, a fact closed without a successor,
an archived drawer put back.

Run by the palace's writer only (``workers/writer.py``), each change ONE transaction that
goes through the change log, so the vector index and every reader follow it as they follow
a remember or a forget.

``memory_update`` keeps the drawer's id (and ``created_at`` and hits). Its previous
version goes to the archive first, whole (vector included), under a version id of its own
with reason ``updated`` and ``merged_into`` naming the drawer, so nothing an update
replaces is lost: ``archive restore VERSION`` puts that version back (the version it
replaces is archived in turn, so a restore can be undone the same way). A new text gets a
new row and vector (vectors never change in place: ``dedup._merge_into`` says why);
room, tags or importance alone change the row in place and log it as an ``add`` of its
label, which a reader's refresh re-reads.

``archive restore`` (``restore``) puts a version an update archived back into its drawer,
and anything the dreamer archived back as it was (``archive_restore``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from trusty_memory.common import names
from trusty_memory.common import protocol as p
from trusty_memory.common.messages import (
    KgInvalidateParams,
    KgInvalidateResult,
    RestoreResult,
    UpdateParams,
    UpdateResult,
)
from trusty_memory.common.values import (
    canonical_id,
    check_nonempty,
    check_tags,
    check_text,
    check_unit_interval,
    invalid,
    now_rfc3339,
    unit_vector,
)
from trusty_memory.workers.store import archive, rows
from trusty_memory.workers.store.rows import Row
from trusty_memory.workers.store.state import DrawerPlace

if TYPE_CHECKING:
    import sqlite3

    from trusty_memory.workers.store.write import PalaceStore

Embed = Callable[[list[str]], np.ndarray]


def update_drawer(store: PalaceStore, params: UpdateParams, embed: Embed) -> UpdateResult:
    """Change a drawer's text, room, tags and/or importance; archive the previous version."""
    drawer_id = canonical_id(params.drawer_id)
    given = (params.text, params.room, params.tags, params.importance)
    if all(value is None for value in given):
        raise invalid("nothing to update: give text, room, tags or importance")
    text = None
    if params.text is not None:
        text = check_text(params.text, store.settings.max_text_bytes)
    room = names.normalize_room(params.room) if params.room is not None else None
    tags = check_tags(params.tags) if params.tags is not None else None
    importance = None
    if params.importance is not None:
        importance = check_unit_interval(params.importance, "importance")
    current = _live_row(store, drawer_id)
    vector = None
    if text is not None and text != current.content:
        # Embedded before the transaction: the embedder is a round trip through the broker.
        vector = unit_vector(embed([text])[0], store.dim).astype("<f4").tobytes()
    with store.transaction() as conn:
        # Read again: the transaction has just added the pending recall hits to the row. Its
        # text is still ``current``'s (only this process writes), so ``vector`` is the new one.
        row = _live_row(store, drawer_id, conn)
        new = Row(**{**row.__dict__})
        changed = []
        if vector is not None:
            assert text is not None  # ``vector`` is only embedded from a new text
            # The new text's own vector: no episode context mixed in, none kept beside it,
            # and so no predecessor's words beside it in full-text search either.
            new.content, new.vector, new.own_vector, new.context = text, vector, None, None
            changed.append("text")
        if room is not None and room != row.room:
            new.room = room
            changed.append("room")
        if tags is not None and tags != row.tags:
            new.tags = tags
            changed.append("tags")
        # Against both: the dreamer's decay may have moved the effective value off the base.
        if importance is not None and (importance != row.importance or importance != row.base):
            new.importance, new.base_importance = importance, None
            new.decay_from = now_rfc3339()
            changed.append("importance")
        if not changed:
            return UpdateResult(
                drawer_id=drawer_id, palace=store.name, status="unchanged", changed=[]
            )
        version = _archive_version(conn, row)
        label = _replace(conn, row, new)
    _after_replace(store, row, new, label)
    return UpdateResult(
        drawer_id=drawer_id,
        palace=store.name,
        status="updated",
        changed=changed,
        previous_version=version,
    )


def restore_version(store: PalaceStore, version_id: str) -> RestoreResult:
    """Put an ``updated`` archive entry back as its drawer's content.

    If the drawer is live, the version replaces it and the replaced content is archived as a
    version in turn; if it is gone (forgotten, merged away), it comes back under its id.
    """
    with store.transaction() as conn:
        found = conn.execute(
            f"SELECT {_ARCHIVE_COLUMNS} FROM archive WHERE id = ?", (version_id,)
        ).fetchone()
        if found is None:
            raise p.TrustyError(
                p.ErrorCode.DRAWER_NOT_FOUND, f"drawer not in the archive: {version_id}"
            )
        drawer_id = found[11] or version_id
        live = _row_or_none(conn, drawer_id)
        new = Row(  # _ARCHIVE_COLUMNS, by name
            label=0,
            id=found[0],
            content=found[1],
            room=found[2],
            tags=json.loads(found[3]),
            importance=found[4],
            base_importance=found[5],
            created_at=found[6],
            hits=found[7],
            content_hash=found[8],
            vector=found[9],
            metadata=found[10],
            decay_from=None,
            own_vector=found[12],
            context=found[13],
        )
        new.id = drawer_id
        new.decay_from = now_rfc3339()
        conn.execute("DELETE FROM archive WHERE id = ?", (version_id,))
        if live is not None:
            new.label, new.hits, new.created_at = live.label, live.hits, live.created_at
            _archive_version(conn, live)
            label = _replace(conn, live, new)
        else:
            label = rows.insert_row(conn, new)
    if live is not None:
        _after_replace(store, live, new, label)
    else:
        store.after_write(added=[DrawerPlace(label, new.room, new.tags)])
    return RestoreResult(drawer_id=drawer_id, palace=store.name, status="restored")


def invalidate_fact(store: PalaceStore, params: KgInvalidateParams) -> KgInvalidateResult:
    """Close the active (subject, predicate) triple now, asserting nothing in its place."""
    subject = check_nonempty(params.subject, "subject")
    predicate = check_nonempty(params.predicate, "predicate")
    obj = None if params.object is None else check_nonempty(params.object, "object")
    now = now_rfc3339()
    with store.transaction() as conn:
        row = conn.execute(
            "SELECT id, object FROM triples"
            " WHERE subject = ? AND predicate = ? AND valid_to IS NULL ORDER BY id DESC LIMIT 1",
            (subject, predicate),
        ).fetchone()
        if row is None or (obj is not None and row[1] != obj):
            what = f"{subject} {predicate}" + (f" {obj}" if obj is not None else "")
            now_is = f" (it is now {row[1]!r})" if row is not None else ""
            raise p.TrustyError(p.ErrorCode.FACT_NOT_FOUND, f"no active fact: {what}{now_is}")
        conn.execute("UPDATE triples SET valid_to = ? WHERE id = ?", (now, row[0]))
    return KgInvalidateResult(
        status="invalidated", subject=subject, predicate=predicate, object=row[1], valid_to=now
    )


def restore(store: PalaceStore, drawer_id: str) -> RestoreResult:
    """``archive_restore``: a version an update archived goes back into its drawer
    (``restore_version``); anything else the dreamer archived comes back as it was."""
    drawer_id = canonical_id(drawer_id)
    reason = store.db.conn.execute(
        "SELECT reason FROM archive WHERE id = ?", (drawer_id,)
    ).fetchone()
    if reason is not None and reason[0] == "updated":
        return restore_version(store, drawer_id)
    return archive_restore(store, drawer_id)


def archive_restore(store: PalaceStore, drawer_id: str) -> RestoreResult:
    """Put an archived drawer back (new label, same id and vector); its decay clock restarts.

    A merged drawer comes back as its own drawer again; the survivor keeps what it got.
    """
    drawer_id = canonical_id(drawer_id)
    with store.transaction() as conn:
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
        back = Row(
            label=0,
            id=row[0],
            content=row[1],
            room=row[2],
            tags=tags,
            importance=base,
            base_importance=base,
            created_at=row[6],
            hits=row[7],
            content_hash=row[8],
            vector=row[9],
            metadata=row[10],
            decay_from=now_rfc3339(),
            own_vector=row[11],
            context=row[12],
        )
        label = rows.insert_row(conn, back)
        conn.execute("DELETE FROM archive WHERE id = ?", (drawer_id,))
    store.after_write(added=[DrawerPlace(label, row[2], tags)])
    return RestoreResult(drawer_id=drawer_id, palace=store.name, status="restored")


# -- rows --------------------------------------------------------------------------------

_ARCHIVE_COLUMNS = (
    "id, content, room, tags, importance, base_importance, created_at, hits, content_hash,"
    " vector, metadata, merged_into, own_vector, context"
)


def _row_or_none(conn: sqlite3.Connection, drawer_id: str) -> Row | None:
    found = rows.where(conn, "id = ?", [drawer_id])
    return found[0] if found else None


def _live_row(store: PalaceStore, drawer_id: str, conn: sqlite3.Connection | None = None) -> Row:
    conn = conn or store.db.conn
    row = _row_or_none(conn, drawer_id)
    if row is None:
        gone = _why_gone(conn, drawer_id)
        if gone is not None:
            raise p.TrustyError(p.ErrorCode.DRAWER_NOT_FOUND, gone)
        store.get(drawer_id)  # raises DRAWER_NOT_FOUND
    # The branch above raised: store.get reads the same drawers table, which has no such id.
    assert row is not None
    return row


def _why_gone(conn: sqlite3.Connection, drawer_id: str) -> str | None:
    """What became of a drawer the archive holds, and what to update instead; None when the
    archive does not hold it. A bare "not found" left an agent that kept a drawer's id
    nowhere to go once the dreamer had merged that drawer into another."""
    found = conn.execute(
        "SELECT reason, merged_into, archived_at FROM archive WHERE id = ?", (drawer_id,)
    ).fetchone()
    if found is None:
        return None
    reason, into, at = found
    if reason == "merged" and into:
        # Merges re-point what was merged into a drawer that is merged in turn
        # (``dedup._merge_into``), so ``into`` is the survivor.
        said = f"drawer {drawer_id} was merged into {into} by the dreamer on {at}"
        return said + _survivor_advice(conn, into)
    if reason == "updated" and into:
        return (
            f"{drawer_id} is an earlier version of drawer {into}, archived by memory_update on"
            f" {at}; update {into}, or bring this version back with {_restore(drawer_id)}"
        )
    if reason == "pruned":
        said = f"was archived by the dreamer on {at} (pruned: its importance had faded)"
    else:
        said = f"is in the archive ({reason}, since {at})"
    return f"drawer {drawer_id} {said}; {_restore(drawer_id)} brings it back, then update it"


def _restore(archived_id: str) -> str:
    """How a person brings an archive entry back (the tools' descriptions say the same)."""
    return f"`trusty-memory archive restore {archived_id}`"


def _survivor_advice(conn: sqlite3.Connection, survivor: str) -> str:
    """``; update Y``, or where Y went when it is no longer live either."""
    if _row_or_none(conn, survivor) is not None:
        return f"; update {survivor}"
    later = conn.execute(
        "SELECT reason, archived_at FROM archive WHERE id = ?", (survivor,)
    ).fetchone()
    if later is None:
        return f"; {survivor} has since been forgotten"
    return (
        f"; {survivor} has since been archived ({later[0]}, on {later[1]}):"
        f" {_restore(survivor)} brings it back, then update it"
    )


def _archive_version(conn: sqlite3.Connection, row: Row) -> str:
    """Copy ``row`` to the archive as a version of itself; returns the version's id."""
    version = Row(**{**row.__dict__})
    version.id = str(uuid.uuid4())
    archive.archive_row(conn, version, "updated", row.id, delete=False)
    return version.id


def _replace(conn: sqlite3.Connection, old: Row, new: Row) -> int:
    """Write ``new`` over ``old`` (same id); returns the label that now holds it."""
    if new.content != old.content or new.vector != old.vector:
        rows.delete_row(conn, old.label, old.id)
        return rows.insert_row(conn, new)
    conn.execute(
        "UPDATE drawers SET room = ?, tags = ?, importance = ?, base_importance = ?,"
        " decay_from = ? WHERE label = ?",
        (new.room, json.dumps(new.tags), new.importance, new.base_importance, new.decay_from,
         old.label),
    )  # fmt: skip
    conn.execute("DELETE FROM drawer_tags WHERE label = ?", (old.label,))
    conn.executemany(
        "INSERT OR IGNORE INTO drawer_tags (tag, label) VALUES (?, ?)",
        [(t, old.label) for t in new.tags],
    )
    rows.log_update(conn, old.label)
    return old.label


def _after_replace(store: PalaceStore, old: Row, new: Row, label: int) -> None:
    """The writer's filters, index and L1 follow the committed change (recall hits not
    yet written stay with the drawer, whatever row now holds it)."""
    hits = store.pending_hits(old.label)
    store.after_write(removed=[old.place], added=[DrawerPlace(label, new.room, new.tags)])
    if hits:
        store.add_hits([(label, hits)])
