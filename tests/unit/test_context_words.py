"""A drawer's episode predecessor's words in full-text search (``drawers.context``).

Deep recall's BM25 reads them at a low weight, so a reply ("Up the Zugspitze, with my
sister!") is found by the words of the question it answers. Keyword search, the off
switch and every path that writes a drawer row (remember, import, update, archive and
restore, the v6 migration) are covered here; the figures are in ``bench/locomo.py`` and
``bench/eng_notes.py``.

Covers: workers/store/context.py workers/store/ranking.py workers/store/search.py
    workers/store/bulk.py workers/store/edit.py workers/store/schema.py
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import numpy as np
import pytest

from trusty_memory.common import protocol as p
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.import_checks import check_drawer
from trusty_memory.common.messages import (
    ExportParams,
    ImportDrawer,
    ImportParams,
    RememberParams,
    SearchParams,
    UpdateParams,
)
from trusty_memory.workers.store import archive, bulk, context
from trusty_memory.workers.store import rows as store_rows
from trusty_memory.workers.store.edit import archive_restore, restore, update_drawer
from trusty_memory.workers.store.search import search
from trusty_memory.workers.store.write import PalaceStore

from .test_store import DIM, SETTINGS, at_cosine, fake_embed, fill, sql
from .test_store_edit import migrated_file, palace_at_version

QUESTION = "Caroline, where did you go hiking last weekend?"
REPLY = "Up the Zugspitze, with my sister!"
AT = "2026-03-01T10:00:00Z"
LATER = "2026-03-01T10:01:00Z"


def mixed(text: str, before: str) -> context.Mixed:
    """What the writer hands the store for a remember that follows ``before`` (the
    embedder's vectors stood in for by the test helper's deterministic ones)."""
    own = fake_embed(text)
    return context.Mixed(context.mix(own, fake_embed(before)), own, before)


def stored_context(palace_dir: Path, drawer_id: str) -> str | None:
    return sql(palace_dir, "SELECT context FROM drawers WHERE id = ?", drawer_id)[0][0]


def fts_intact(palace_dir: Path) -> None:
    """FTS5's own check that the index matches ``drawers`` (it raises if not)."""
    conn = sqlite3.connect(palace_dir / "palace.sqlite3")
    try:
        conn.execute("INSERT INTO drawers_fts(drawers_fts) VALUES ('integrity-check')")
    finally:
        conn.close()


@pytest.fixture
def palace_dir(tmp_path: Path) -> Path:
    return tmp_path / "palaces" / "proj"


def open_store(palace_dir: Path, on: bool = True) -> PalaceStore:
    settings = PalaceSettings(**{**SETTINGS.__dict__, "context_vectors": on})
    return PalaceStore.open(palace_dir, "proj", settings)


def test_words_keeps_what_the_drawer_lacks_once_and_bounded():
    assert context.words("Where did you go hiking? Hiking, where?", "I went hiking") == (
        "Where did you go"
    )
    assert context.words(None, "x") is None
    assert context.words("the same words", "The same words.") is None
    long = " ".join(f"word{i}" for i in range(200))
    assert len(context.words(long, "") or "") <= context.CONTEXT_CHARS


def test_deep_recall_finds_a_reply_by_the_words_of_its_question(palace_dir):
    """The reply shares no word with the query; its predecessor does. Decoys are closer
    by vector, so only the reply's context words bring it into the top 3, and with the
    switch off it stays out."""
    query = fake_embed("the query")
    store = open_store(palace_dir)
    try:
        fill(store, 60)
        decoys = [  # a day apart: no episodes among them
            (RememberParams(text=f"xq{k} yb{k}", created_at=f"2026-02-{k + 1:02d}T08:00:00Z"),
             at_cosine(query, 0.6 - 0.01 * k, f"decoy {k}"))
            for k in range(12)
        ]  # fmt: skip
        store.remember_batch(decoys)
        q = RememberParams(text=QUESTION, room="chat", created_at=AT)
        reply = RememberParams(text=REPLY, room="chat", created_at=LATER)
        store.remember_batch([(q, fake_embed(QUESTION)), (reply, mixed(REPLY, QUESTION))])
        ask = "Where did Caroline go hiking?"

        def top(s: PalaceStore) -> list[str]:
            return [h.content for h in s.recall(ask, query, 3, deep=True)]

        assert REPLY in top(store)
    finally:
        store.close()
    off = open_store(palace_dir, on=False)
    try:
        assert REPLY not in top(off)  # older drawers' context words are not read either
    finally:
        off.close()


@pytest.fixture
def store(palace_dir: Path):
    s = open_store(palace_dir)
    yield s
    s.close()


def converse(store: PalaceStore) -> tuple[str, str]:
    """Test helper: the question, then the reply written a minute after it (as the writer
    hands them over); returns their drawer ids."""
    q = RememberParams(text=QUESTION, room="chat", created_at=AT)
    reply = RememberParams(text=REPLY, room="chat", created_at=LATER)
    stored = store.remember_batch([(q, fake_embed(QUESTION)), (reply, mixed(REPLY, QUESTION))])
    return stored[0].drawer_id, stored[1].drawer_id


def test_keyword_search_matches_only_a_drawers_own_words(store, palace_dir):
    _, rid = converse(store)
    assert stored_context(palace_dir, rid) == "Caroline where did you go hiking last weekend"
    found = search(store, SearchParams(query="hiking"))
    assert [h.content for h in found.drawers] == [QUESTION]
    found = search(store, SearchParams(query="Zugspitze"))
    assert [h.content for h in found.drawers] == [REPLY]


def test_update_forget_archive_and_restore_keep_full_text_search_whole(store, palace_dir):
    qid, rid = converse(store)
    words = stored_context(palace_dir, rid)
    # Archived and restored: the words come back with the drawer.
    [row] = store_rows.where(store.db.conn, "id = ?", [rid])
    with store.transaction() as conn:
        archive.archive_row(conn, row, "pruned", None)
    fts_intact(palace_dir)
    archive_restore(store, rid)
    assert stored_context(palace_dir, rid) == words
    fts_intact(palace_dir)
    # A new text is its own vector alone, and so carries no predecessor's words.
    update = UpdateParams(drawer_id=rid, text="Up the Watzmann instead.")
    result = update_drawer(store, update, embed)
    assert stored_context(palace_dir, rid) is None
    fts_intact(palace_dir)
    restore(store, result.previous_version)
    assert stored_context(palace_dir, rid) == words
    store.forget(qid)
    store.forget(rid)
    fts_intact(palace_dir)


def embed(texts: list[str]) -> np.ndarray:
    """Test helper: the embedder as the store's callers get it, deterministic."""
    return np.stack([fake_embed(t) for t in texts])


def test_an_import_gives_each_drawer_its_predecessors_words(store, palace_dir):
    a, b, c = (str(uuid.UUID(int=i)) for i in (1, 2, 3))
    drawers = [
        ImportDrawer(drawer_id=a, content=QUESTION, room="chat", created_at=AT),
        ImportDrawer(drawer_id=b, content=REPLY, room="chat", created_at=LATER),
        ImportDrawer(drawer_id=c, content="Elsewhere.", room="other", created_at=LATER),
    ]
    bulk.import_batch(store, ImportParams(drawers=drawers), embed)
    got = dict(sql(palace_dir, "SELECT id, context FROM drawers"))
    assert got == {a: None, b: context.words(QUESTION, REPLY), c: None}
    fts_intact(palace_dir)


def test_an_export_carries_the_words_and_an_import_keeps_them_exactly(store, palace_dir):
    """A note remembered with ``embed_text`` has no context words, though the palace's
    rule would give it some: the words travel with the export, so an import of it keeps
    what was stored rather than working them out again."""
    converse(store)
    noted = RememberParams(text="Noted.", room="chat", created_at=LATER)
    store.remember_batch([(noted, fake_embed("Noted."))])  # as with embed_text: no mix
    page = bulk.export_page(store, ExportParams(kind="drawers", after=0, limit=10))
    assert [d.context for d in page.drawers] == [None, context.words(QUESTION, REPLY), None]

    other = open_store(palace_dir.parent / "copy")
    try:
        given = [ImportDrawer(**{f: getattr(d, f) for f in d.__struct_fields__})
                 for d in page.drawers]  # fmt: skip
        bulk.import_batch(other, ImportParams(drawers=given), embed)
        got = [c for (c,) in sql(palace_dir.parent / "copy", "SELECT context FROM drawers"
                                 " ORDER BY label")]  # fmt: skip
        assert got == [None, context.words(QUESTION, REPLY), None]
        fts_intact(palace_dir.parent / "copy")
    finally:
        other.close()
    with pytest.raises(p.TrustyError, match="context: must be a string or null"):
        check_drawer(ImportDrawer(drawer_id=str(uuid.UUID(int=9)), content="x",
                                    context=7), DIM, 1000)  # fmt: skip


def test_the_v6_migration_gives_stored_drawers_their_predecessors_words(tmp_path):
    """A v5 palace: the drawer after another in the same room within the episode window
    gets its words; one in another room, or written later, gets none."""
    path = tmp_path / "palace.sqlite3"
    db = palace_at_version(path, 5)
    rows = [
        ("q", QUESTION, "chat", AT),
        ("r", REPLY, "chat", LATER),
        ("x", "A note elsewhere.", "notes", "2026-03-01T10:02:00Z"),
        ("y", "Next day, in chat.", "chat", "2026-03-02T10:00:00Z"),
    ]
    for drawer_id, text, room, at in rows:
        db.execute(
            "INSERT INTO drawers (id, content, room, created_at, content_hash, vector)"
            " VALUES (?, ?, ?, ?, 'h', ?)",
            (drawer_id, text, room, at, np.zeros(DIM, "<f4").tobytes()),
        )
    with migrated_file(db, path) as migrated:
        got = dict(migrated.execute("SELECT id, context FROM drawers").fetchall())
        assert got == {"q": None, "r": context.words(QUESTION, REPLY), "x": None, "y": None}
        migrated.execute("INSERT INTO drawers_fts(drawers_fts) VALUES ('integrity-check')")
        hits = migrated.execute(
            "SELECT d.id FROM drawers_fts f JOIN drawers d ON d.label = f.rowid"
            " WHERE drawers_fts MATCH 'hiking' ORDER BY d.id"
        ).fetchall()
        assert hits == [("q",), ("r",)]  # own words, and the reply by its context
