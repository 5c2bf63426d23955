"""Schema v10: drawers that took their episode predecessor's context without continuing it
get their own vector and words back (``schema._v10_context_by_content``), as a remember
now stores them (``context.context_of``, ``relatedness.continues``).

Covers: workers/store/schema.py workers/store/context.py
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import sqlite_utils

from trusty_memory.workers.store import context
from trusty_memory.workers.store.schema import MIGRATIONS, mentioned_days

from .test_store import fake_embed
from .test_store_edit import migrated_file

T = "2026-03-01T10:00:{:02d}Z"


def palace_at_version(path: Path, version: int) -> sqlite_utils.Database:
    """A palace file as release ``version`` of the schema left it (with the SQL function
    its triggers call, as ``schema.connect`` registers it)."""
    conn = sqlite3.connect(str(path))
    conn.create_function("trusty_days", 2, mentioned_days)
    db = sqlite_utils.Database(conn)
    for at, migration in enumerate(MIGRATIONS[:version], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {at}")
    return db


def blob(vector: np.ndarray) -> bytes:
    return vector.astype("<f4").tobytes()


def insert(db, text: str, second: int, vector: bytes, own: bytes | None, words: str | None):
    db.execute(
        "INSERT INTO drawers (id, content, room, created_at, content_hash, vector, own_vector,"
        " context) VALUES (?, ?, 'General', ?, ?, ?, ?, ?)",
        [text[:12], text, T.format(second), text, vector, own, words],
    )


def test_standalone_notes_get_their_own_context_back_and_replies_keep_theirs(tmp_path: Path):
    """A v9 palace mixed every episode neighbour. After the migration the note that stood
    alone has its own vector and no borrowed words; the question (a conversation's turn)
    and its answer keep theirs; the index snapshot is dropped so that the index is rebuilt
    from the vectors SQLite now holds."""
    path = tmp_path / "palace.sqlite3"
    db = palace_at_version(path, 9)
    texts = [
        "httpx 0.25.0 dropped Python 3.7.",
        "httpx 0.26.0 added the proxy argument.",
        "Which port does the billing API use?",
        "8217 since the move.",
    ]
    own = [fake_embed(t) for t in texts]
    insert(db, texts[0], 0, blob(own[0]), None, None)
    for i in (1, 2, 3):  # the old writer: every drawer in the episode borrowed
        words = context.words(texts[i - 1], texts[i])
        insert(db, texts[i], 10 * i, blob(context.mix(own[i], own[i - 1])), blob(own[i]), words)
    snapshot = tmp_path / "index-000000000004.json"
    snapshot.write_text("{}")
    with migrated_file(db, path) as migrated:
        rows = migrated.execute(
            "SELECT vector, own_vector, context FROM drawers ORDER BY label"
        ).fetchall()
    assert rows[0] == (blob(own[0]), None, None)
    assert rows[1] == (blob(own[1]), None, None)  # stood alone: its own again
    for i in (2, 3):  # a question, and the answer to it: still borrowed
        assert rows[i] == (
            blob(context.mix(own[i], own[i - 1])),
            blob(own[i]),
            context.words(texts[i - 1], texts[i]),
        )
    assert not snapshot.exists()


def test_a_palace_that_needs_nothing_keeps_its_index_snapshot(tmp_path: Path):
    path = tmp_path / "palace.sqlite3"
    db = palace_at_version(path, 9)
    insert(db, "Caroline: Do you still climb?", 0, blob(fake_embed("a")), None, None)
    reply = "Melanie: Yes, every Sunday!"
    mixed = context.mix(fake_embed(reply), fake_embed("a"))
    insert(db, reply, 5, blob(mixed), blob(fake_embed(reply)), "Caroline Do still climb")
    snapshot = tmp_path / "index-000000000002.json"
    snapshot.write_text("{}")
    with migrated_file(db, path) as migrated:
        kept = migrated.execute("SELECT own_vector IS NOT NULL, context FROM drawers").fetchall()
    assert kept == [(0, None), (1, "Caroline Do still climb")]
    assert snapshot.exists()
