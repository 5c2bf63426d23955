"""ReadStore: a reader's read-only copy of a palace, kept current from the change log.

A small deterministic test embedder (``fake_embed``) stands in for the model: these tests
are about what a reader sees and when, not about recall quality.

Covers: workers/store/read.py workers/store/state.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.test_store import SETTINGS, fake_embed, fill, remember
from trusty_memory.common.messages import ListParams
from trusty_memory.common.protocol import TrustyError
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.write import PalaceStore


@pytest.fixture
def palace_dir(tmp_path: Path) -> Path:
    return tmp_path / "palaces" / "proj"


@pytest.fixture
def writer(palace_dir: Path):
    s = PalaceStore.open(palace_dir, "proj", SETTINGS, description="project memory")
    yield s
    s.close()


def open_reader(palace_dir: Path) -> ReadStore:
    return ReadStore.open_reader(palace_dir, "proj", SETTINGS)


def found(store, text: str, **filters) -> list[str]:
    return [h.content for h in store.recall(text, fake_embed(text), 5, **filters)]


def files(palace_dir: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in palace_dir.iterdir() if "-wal" not in p.name}


def test_a_reader_sees_nothing_new_until_sqlite_says_so_then_everything(writer, palace_dir):
    fill(writer, 20)
    reader = open_reader(palace_dir)
    try:
        assert found(reader, "filler 3")[0] == "filler 3"
        assert not reader.changed()
        remember(writer, "the staging DB is on port 5433", room="Configuration", tags=["db"])
        gone = writer.list(ListParams(limit=100))[-1].drawer_id
        writer.forget(gone)
        # Before catching up, the reader's state is its own (the lag readers allow)...
        assert "the staging DB is on port 5433" not in found(
            reader, "the staging DB is on port 5433"
        )
        # ...and SQLite tells it that someone committed.
        assert reader.changed()
        assert reader.refresh() == 2
        assert reader.last_seq == writer.last_seq
        hit = found(reader, "the staging DB is on port 5433", room="Configuration", tag="db")
        assert hit[0] == "the staging DB is on port 5433"
        assert reader.info().drawer_count == writer.info().drawer_count == 20
        assert reader.index.labels() == writer.index.labels()
    finally:
        reader.close()


def test_tags_added_to_a_live_drawer_reach_the_reader(writer, palace_dir):
    remember(writer, "rotate the API keys monthly", tags=["security"])
    reader = open_reader(palace_dir)
    try:
        # The same text again with another tag: the drawer absorbs it in place.
        remember(writer, "rotate the API keys monthly", tags=["ops"])
        assert found(reader, "rotate the API keys monthly", tag="ops") == []
        reader.refresh()
        assert found(reader, "rotate the API keys monthly", tag="ops") == [
            "rotate the API keys monthly"
        ]
        assert found(reader, "rotate the API keys monthly", tag="security")
    finally:
        reader.close()


def test_a_reader_writes_nothing_and_cannot_write(writer, palace_dir):
    fill(writer, 30)
    writer.maybe_snapshot(force=True)
    before = files(palace_dir)
    reader = open_reader(palace_dir)
    try:
        found(reader, "filler 1")
        reader.refresh()
        with pytest.raises(Exception, match="readonly"):
            reader.db.conn.execute("DELETE FROM drawers")
    finally:
        reader.close()
    assert files(palace_dir) == before


def test_a_missing_snapshot_is_rebuilt_in_memory_and_a_stale_one_caught_up(writer, palace_dir):
    fill(writer, 25)
    writer.maybe_snapshot(force=True)
    fill(writer, 5, prefix="after the snapshot")  # below index_save_every: not in it
    stale = open_reader(palace_dir)
    try:
        assert found(stale, "after the snapshot 4")[0] == "after the snapshot 4"
        assert stale.index.labels() == writer.index.labels()
    finally:
        stale.close()
    for snapshot in palace_dir.glob("index-*"):
        os.remove(snapshot)
    missing = open_reader(palace_dir)
    try:
        assert missing.index.labels() == writer.index.labels()
        assert found(missing, "filler 7")[0] == "filler 7"
        assert not any(palace_dir.glob("index-*"))  # rebuilt in memory only
    finally:
        missing.close()


def test_hits_counted_by_a_reader_are_handed_over_and_written_by_the_writer(writer, palace_dir):
    remember(writer, "the build cache lives in /var/cache/ci")
    reader = open_reader(palace_dir)
    try:
        found(reader, "the build cache lives in /var/cache/ci")
        found(reader, "the build cache lives in /var/cache/ci")
        hits = reader.take_hits()
        assert list(hits.values()) == [2]
        assert reader.take_hits() == {}
    finally:
        reader.close()
    writer.add_hits(sorted(hits.items()))
    writer.flush()
    [row] = writer.db.conn.execute("SELECT hits FROM drawers").fetchall()
    assert row[0] == 2


def test_no_reader_for_a_palace_without_a_database(tmp_path):
    with pytest.raises(TrustyError, match="palace not found"):
        ReadStore.open_reader(tmp_path / "nope", "nope", SETTINGS)
