"""The extended tools' storage: update with versions in the archive, search with cursors,
a subject's fact history and its state at a past moment, closing a fact, stats; and a
reader that follows all of it from the change log.

Covers: workers/store/edit.py workers/store/search.py workers/store/archive.py
    workers/store/decay.py workers/store/dream_log.py workers/store/schema.py workers/store/state.py
    common/palace_dir.py
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlite_utils

from tests.unit.test_store import SETTINGS, fake_embed, remember, sql
from trusty_memory.common.messages import (
    ArchiveListParams,
    DreamDecayParams,
    KgAssertParams,
    KgHistoryParams,
    KgInvalidateParams,
    SearchParams,
    UpdateParams,
)
from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.common.values import check_timestamp
from trusty_memory.workers.store import archive, decay, search
from trusty_memory.workers.store.edit import invalidate_fact, restore, update_drawer
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.schema import MIGRATIONS, SCHEMA_VERSION, connect, user_version
from trusty_memory.workers.store.write import PalaceStore


def embed(texts: list[str]) -> np.ndarray:
    return np.stack([fake_embed(t) for t in texts])


@pytest.fixture
def palace_dir(tmp_path):
    return tmp_path / "palaces" / "proj"


@pytest.fixture
def store(palace_dir):
    s = PalaceStore.open(palace_dir, "proj", SETTINGS, description="project memory")
    yield s
    s.close()


def update(store, drawer_id, **fields):
    return update_drawer(store, UpdateParams(drawer_id=drawer_id, **fields), embed)


def test_update_text_keeps_the_id_and_archives_the_previous_version(store, palace_dir):
    did = remember(store, "The deploy key lives in vault path ops/deploy.", tags=["ops"])
    before = store.get(did)
    result = update(store, did, text="The deploy key moved to vault path ops/keys/deploy.")
    assert result.status == "updated" and result.changed == ["text"]
    after = store.get(did)
    assert after.content.startswith("The deploy key moved")
    assert (after.created_at, after.tags, after.room) == (
        before.created_at,
        before.tags,
        before.room,
    )
    # The new text is what recall and search find; the old one only in the archive.
    hits = store.recall("vault keys", fake_embed(after.content), top_k=1)
    assert hits[0].drawer_id == did and hits[0].content == after.content
    found = search.search(store, SearchParams(query="moved"))
    assert [h.drawer_id for h in found.drawers] == [did]
    assert search.search(store, SearchParams(query='"vault path ops deploy"')).drawers == []
    archived = archive.archive_list(store, ArchiveListParams(reason="updated")).drawers
    assert [(a.drawer_id, a.merged_into, a.content) for a in archived] == [
        (result.previous_version, did, before.content)
    ]
    assert sql(palace_dir, "SELECT count(*) FROM drawers") == [(1,)]


def test_restoring_a_version_puts_it_back_and_archives_what_it_replaces(store):
    did = remember(store, "Standup is at 9:30.")
    first = update(store, did, text="Standup is at 10:00.", importance=0.9)
    restored = restore(store, first.previous_version)
    assert (restored.drawer_id, restored.status) == (did, "restored")
    back = store.get(did)
    assert back.content == "Standup is at 9:30." and back.importance == 0.5
    versions = archive.archive_list(store, ArchiveListParams(reason="updated")).drawers
    assert [v.content for v in versions] == ["Standup is at 10:00."]
    # The restore is undone the same way.
    restore(store, versions[0].drawer_id)
    assert store.get(did).content == "Standup is at 10:00."


def test_a_context_mixed_drawer_updated_and_restored_keeps_its_own_vector(store, palace_dir):
    """A drawer the writer mixed with its episode (``context.Mixed``) keeps its own vector
    beside the mix; a new text is its own vector alone; the version restored brings both."""
    from trusty_memory.common.messages import RememberParams
    from trusty_memory.workers.store import context

    own = fake_embed("The cache TTL is 60 s.")
    mixed = context.mix(own, fake_embed("Standup notes, Tuesday."))
    [stored] = store.remember_batch(
        [(RememberParams(text="The cache TTL is 60 s."), context.Mixed(mixed, own))]
    )
    did = stored.drawer_id
    query = "SELECT vector, own_vector FROM drawers WHERE id = ?"
    [(vector, own_vector)] = sql(palace_dir, query, did)
    assert own_vector is not None and vector != own_vector
    first = update(store, did, text="The cache TTL is 300 s.")
    [(new_vector, new_own)] = sql(palace_dir, query, did)
    assert new_own is None
    assert np.allclose(np.frombuffer(new_vector, "<f4"), fake_embed("The cache TTL is 300 s."))
    restore(store, first.previous_version)
    assert sql(palace_dir, query, did) == [(vector, own_vector)]


def test_update_in_place_moves_room_and_tags_for_filters(store):
    did = remember(store, "Use ruff for lint.", room="Backend", tags=["tooling"])
    result = update(store, did, room="Testing", tags=["lint", "ci"])
    assert result.changed == ["room", "tags"]
    vec = fake_embed("Use ruff for lint.")
    assert [h.drawer_id for h in store.recall("q", vec, room="Testing")] == [did]
    assert store.recall("q", vec, room="Backend") == []
    assert store.recall("q", vec, tag="tooling") == []
    assert [h.drawer_id for h in store.recall("q", vec, tag="ci")] == [did]


def test_update_refusals_name_the_cause(store):
    did = remember(store, "A note.")
    with pytest.raises(TrustyError, match="nothing to update"):
        update(store, did)
    with pytest.raises(TrustyError, match="importance: must be in"):
        update(store, did, importance=2.0)
    with pytest.raises(TrustyError) as exc:
        update(store, "9f1c2d3e-0000-4000-8000-000000000000", text="x")
    assert exc.value.code == ErrorCode.DRAWER_NOT_FOUND
    assert update(store, did, text="A note.").status == "unchanged"


def test_forget_takes_the_versions_with_it(store, palace_dir):
    did = remember(store, "Secret: hunter2.")
    update(store, did, text="Secret rotated.")
    store.forget(did)
    assert sql(palace_dir, "SELECT count(*) FROM archive") == [(0,)]


def test_search_pages_with_a_cursor_and_filters(store):
    ids = [remember(store, f"release note {i} about the parser", room="Planning") for i in range(5)]
    lexer = remember(store, "release note about the lexer", room="Backend")
    seen, cursor = [], None
    while True:
        page = search.search(
            store, SearchParams(query="release parser", room="Planning", limit=2, cursor=cursor)
        )
        seen += [h.drawer_id for h in page.drawers]
        assert all(h.score is not None for h in page.drawers)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    # Listing (no query): last written first, a cursor by label, so a drawer written between
    # pages neither shifts the next page nor appears in it, and none is repeated or skipped.
    first = search.search(store, SearchParams(limit=4))
    remember(store, "written between pages")
    second = search.search(store, SearchParams(limit=4, cursor=first.next_cursor))
    listed = [h.drawer_id for h in first.drawers + second.drawers]
    assert listed == [lexer, *reversed(ids)] and second.next_cursor is None


def test_search_phrases_times_and_bad_cursors(store):
    a = remember(
        store, "the rate limit is 100 requests per minute", created_at="2026-01-05T10:00:00Z"
    )
    remember(store, "limit the rate of retries", created_at="2026-03-01T10:00:00Z")
    assert [h.drawer_id for h in search.search(
        store, SearchParams(query='"rate limit"')).drawers] == [a]  # fmt: skip
    march = search.search(store, SearchParams(query="rate limit", since="2026-02-01"))
    assert [h.content for h in march.drawers] == ["limit the rate of retries"]
    january = search.search(store, SearchParams(until="2026-02-01T00:00:00+00:00"))
    assert [h.drawer_id for h in january.drawers] == [a]
    page = search.search(store, SearchParams(query="rate", limit=1))
    with pytest.raises(TrustyError, match="another query"):
        search.search(store, SearchParams(query="limit", limit=1, cursor=page.next_cursor))
    with pytest.raises(TrustyError, match="not a cursor"):
        search.search(store, SearchParams(query="rate", cursor="garbage!"))
    with pytest.raises(TrustyError, match="no words"):
        search.search(store, SearchParams(query='"" !!'))
    with pytest.raises(TrustyError, match="since: not an RFC 3339"):
        search.search(store, SearchParams(since="last week"))


def test_fact_history_as_of_and_invalidate(store):
    store.kg_assert(KgAssertParams(subject="svc", predicate="owner", object="alice"))
    time.sleep(1.1)  # timestamps have second precision
    between = sql(store.palace_dir, "SELECT strftime('%Y-%m-%dT%H:%M:%SZ', 'now')")[0][0]
    time.sleep(1.1)
    store.kg_assert(KgAssertParams(subject="svc", predicate="owner", object="bob"))
    assert [t.object for t in store.kg_query("svc").triples] == ["bob"]
    assert [t.object for t in store.kg_query("svc", as_of=between).triples] == ["alice"]
    assert store.kg_query("svc", as_of="2000-01-01").triples == []
    history = search.kg_history(store, KgHistoryParams(subject="svc"))
    assert [(t.object, t.valid_to is None) for t in history.triples] == [
        ("alice", False),
        ("bob", True),
    ]
    with pytest.raises(TrustyError, match="it is now 'bob'"):
        invalidate_fact(store, KgInvalidateParams(subject="svc", predicate="owner", object="alice"))
    closed = invalidate_fact(store, KgInvalidateParams(subject="svc", predicate="owner"))
    assert (closed.status, closed.object) == ("invalidated", "bob")
    assert store.kg_query("svc").triples == []
    with pytest.raises(TrustyError) as exc:
        invalidate_fact(store, KgInvalidateParams(subject="svc", predicate="owner"))
    assert exc.value.code == ErrorCode.FACT_NOT_FOUND


def test_a_reader_follows_updates_and_answers_the_new_reads(store, palace_dir):
    did = remember(store, "The cache TTL is 60s.", room="Backend")
    reader = ReadStore.open_reader(palace_dir, "proj", SETTINGS)
    try:
        update(store, did, text="The cache TTL is 300s.", room="Configuration")
        reader.refresh()
        assert reader.get(did).content == "The cache TTL is 300s."
        assert [h.drawer_id for h in search.search(
            reader, SearchParams(query="300s", room="Configuration")).drawers] == [did]  # fmt: skip
        vec = fake_embed("The cache TTL is 300s.")
        assert [h.drawer_id for h in reader.recall("q", vec, room="Configuration")] == [did]
        assert reader.recall("q", vec, room="Backend") == []
        stats = search.stats(reader, "reader")
        assert stats.drawer_count == 1 and stats.room_counts == {"Configuration": 1}
        assert stats.archived_count == 1 and stats.index_lag == 0 and stats.db_bytes > 0
    finally:
        reader.close()


def test_setting_importance_undoes_the_dreamers_decay(store, palace_dir):
    did = remember(
        store, "An old but still true note.", importance=0.6, created_at="2025-01-01T00:00:00Z"
    )
    decay.decay_page(store, DreamDecayParams(prune=False, now="2026-01-01T00:00:00Z"))
    decayed = store.get(did)
    assert decayed.importance < 0.6 and decayed.base_importance == 0.6
    result = update(store, did, importance=0.6)
    assert result.changed == ["importance"]
    assert sql(palace_dir, "SELECT importance, base_importance FROM drawers") == [(0.6, None)]


def palace_at_version(path: Path, version: int) -> sqlite_utils.Database:
    """Test helper: a palace file as release ``version`` of the schema left it."""
    db = sqlite_utils.Database(sqlite3.connect(str(path)))
    for at, migration in enumerate(MIGRATIONS[:version], start=1):
        migration(db)
        db.execute(f"PRAGMA user_version = {at}")
    return db


@contextlib.contextmanager
def migrated_file(db: sqlite_utils.Database, path: Path) -> Iterator[sqlite_utils.Database]:
    """Test helper: commit and close ``db`` (an old palace file), then open ``path`` as the
    program does, which migrates it to this schema version."""
    db.conn.commit()
    db.close()
    migrated = connect(path)
    try:
        assert user_version(migrated) == SCHEMA_VERSION
        yield migrated
    finally:
        migrated.close()


def test_a_version_2_palace_keeps_its_archive_through_the_migration(tmp_path):
    """Schema v3 copies the archive into a table that allows reason 'updated'."""
    path = tmp_path / "palace.sqlite3"
    db = palace_at_version(path, 2)
    db.execute(
        "INSERT INTO archive (id, content, room, tags, importance, created_at, hits,"
        " content_hash, vector, archived_at, reason) VALUES"
        " ('a', 'pruned note', 'General', '[]', 0.1, '2025-01-01T00:00:00Z', 0, 'h', x'00',"
        " '2026-01-01T00:00:00Z', 'pruned')"
    )
    with migrated_file(db, path) as migrated:
        rows = migrated.execute("SELECT seq, id, content, reason FROM archive").fetchall()
        assert rows == [(1, "a", "pruned note", "pruned")]
        migrated.execute(
            "INSERT INTO archive (id, content, room, tags, importance, created_at, hits,"
            " content_hash, vector, archived_at, reason, merged_into) VALUES"
            " ('b', 'v1', 'General', '[]', 0.5, '2025-01-01T00:00:00Z', 0, 'h', x'00',"
            " '2026-01-01T00:00:00Z', 'updated', 'a')"
        )
        with pytest.raises(sqlite3.IntegrityError):
            migrated.execute(
                "INSERT INTO archive (id, content, room, tags, importance, created_at, hits,"
                " content_hash, vector, archived_at, reason) VALUES"
                " ('c', 'x', 'General', '[]', 0.5, '2025-01-01T00:00:00Z', 0, 'h', x'00',"
                " '2026-01-01T00:00:00Z', 'lost')"
            )


def test_stats_list_the_dreamers_last_passes_newest_first(store):
    from trusty_memory.common.messages import DreamFinishParams

    assert search.stats(store, "writer").dream_passes == []
    for merged in range(12):
        decay.finish(
            store, DreamFinishParams(duration_s=0.5, merged=merged, truncated=merged == 11)
        )
    passes = search.stats(store, "writer").dream_passes
    assert [r.merged for r in passes] == list(range(11, 1, -1))  # the last ten
    assert passes[0].truncated and not passes[1].truncated and passes[0].duration_s == 0.5


def test_the_summary_follows_writes_only(store, palace_dir):
    import json as _json

    from trusty_memory.common.palace_dir import SUMMARY_FILE

    assert store.write_summary() is True  # the first one after open
    assert store.write_summary() is False  # nothing committed since
    remember(store, "The staging database runs on port 5433.")
    store.kg_assert(KgAssertParams(subject="staging", predicate="port", object="5433"))
    assert store.write_summary() is True
    summary = _json.loads((palace_dir / SUMMARY_FILE).read_text())
    assert (summary["drawer_count"], summary["triple_count"], summary["archived_count"]) == (
        1,
        1,
        0,
    )
    assert summary["last_write_at"] and summary["last_dream_at"] is None
    assert store.write_summary() is False


def test_times_before_year_1000_are_stored_with_four_digits_and_order_as_text(store):
    """``strftime('%Y')`` writes year 5 as ``5``, which sorts after ``2026`` as text:
    every stored time, and every date span deep recall asks for, has four digits."""
    old = remember(store, "a note dated in antiquity", created_at="0005-01-02T03:04:05Z")
    remember(store, "a note of this century", created_at="2026-01-05T10:00:00Z")
    assert sql(store.palace_dir, "SELECT created_at FROM drawers ORDER BY created_at") == [
        ("0005-01-02T03:04:05Z",),
        ("2026-01-05T10:00:00Z",),
    ]
    until = search.search(store, SearchParams(until="1000-01-01")).drawers
    assert [h.drawer_id for h in until] == [old]
    assert check_timestamp("0753-04-21", "valid_from") == "0753-04-21T00:00:00Z"  # imports


def test_the_v7_migration_gives_old_short_years_their_zeros(tmp_path):
    path = tmp_path / "palace.sqlite3"
    db = palace_at_version(path, 6)
    db.execute(
        "INSERT INTO drawers (id, content, room, created_at, content_hash, vector, decay_from)"
        " VALUES ('a', 'old', 'General', '5-01-02T00:00:00Z', 'h', x'00', '99-01-01T00:00:00Z'),"
        " ('b', 'new', 'General', '2026-01-02T00:00:00Z', 'h', x'00', NULL)"
    )
    db.execute(
        "INSERT INTO triples (subject, predicate, object, valid_from, valid_to, confidence)"
        " VALUES ('s', 'p', 'o', '753-04-21T00:00:00Z', '2026-01-01T00:00:00Z', 1.0)"
    )
    with migrated_file(db, path) as migrated:
        assert migrated.execute(
            "SELECT id, created_at, decay_from FROM drawers ORDER BY created_at"
        ).fetchall() == [
            ("a", "0005-01-02T00:00:00Z", "0099-01-01T00:00:00Z"),
            ("b", "2026-01-02T00:00:00Z", None),
        ]
        assert migrated.execute("SELECT valid_from, valid_to FROM triples").fetchall() == [
            ("0753-04-21T00:00:00Z", "2026-01-01T00:00:00Z")
        ]


def test_the_v8_migration_reads_the_days_stored_drawers_speak_of(tmp_path):
    path = tmp_path / "palace.sqlite3"
    db = palace_at_version(path, 7)
    db.execute(
        "INSERT INTO drawers (id, content, room, created_at, content_hash, vector) VALUES"
        " ('a', 'Yesterday I met artists in Boston', 'General', '2023-10-04T14:00:00Z', 'h',"
        " x'00'), ('b', 'nothing dated', 'General', '2023-10-04T14:00:00Z', 'h', x'00'),"
        " ('c', 'last Friday, says a note of year 1', 'General', '0001-01-01T00:00:00Z', 'h',"
        " x'00')"
    )
    with migrated_file(db, path) as migrated:
        assert migrated.execute(
            "SELECT d.id, start, end FROM drawer_days JOIN drawers d USING (label)"
        ).fetchall() == [("a", "2023-10-02T12:00:00Z", "2023-10-04T12:00:00Z")]


def test_search_text_is_never_fts_syntax(store):
    """Whatever a person types is read as words, phrases, ``word*`` and an upper-case AND
    or OR: FTS5's own syntax (columns, NEAR, ^, -, parentheses, a lone quote) is text."""
    a = remember(store, "NEAR the column: price ^ (rate) - limit")
    for query in ("content: price", "NEAR(rate limit)", "^price", "-limit", '"rate', "(rate",
                  "rate OR", "AND price", "price AND", "* rate", "pri*", "NOT price"):  # fmt: skip
        hits = search.search(store, SearchParams(query=query)).drawers
        assert [h.drawer_id for h in hits] == [a], query
