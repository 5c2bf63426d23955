"""An idle palace lets its vector index go and loads it again when a request needs it.

The index is a cache of SQLite: released, it must come back answering exactly as before,
and every write made meanwhile must be stored at once and indexed by the load.

Covers: workers/store/state.py workers/store/index.py workers/store/read.py workers/store/write.py
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.unit.test_store import SETTINGS, fake_embed, fill, no_rebuild, remember, sql
from trusty_memory.common.messages import RecallHit
from trusty_memory.workers.store import state as store_state
from trusty_memory.workers.store.index import VectorIndex
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.write import PalaceStore

QUERIES = ["filler 3", "filler 77", "filler 150", "no such drawer at all"]


@pytest.fixture
def palace_dir(tmp_path: Path) -> Path:
    return tmp_path / "palaces" / "proj"


@pytest.fixture
def writer(palace_dir: Path):
    s = PalaceStore.open(palace_dir, "proj", SETTINGS)
    yield s
    s.close()


def answers(store, **filters) -> list[list[tuple[str, float, int]]]:
    """What each query recalls (shallow and deep): ids, scores and layers."""

    def key(hits: list[RecallHit]) -> list[tuple[str, float, int]]:
        return [(h.drawer_id, round(h.score, 5), h.layer) for h in hits]

    return [
        key(store.recall(q, fake_embed(q), 10, deep=deep, **filters))
        for q in QUERIES
        for deep in (False, True)
    ]


def snapshot_seqs(palace_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in palace_dir.glob("index-*.json"))


def sqlite_labels(palace_dir: Path) -> set[int]:
    return {row[0] for row in sql(palace_dir, "SELECT label FROM drawers")}


def test_a_released_index_loads_again_and_answers_the_same_recall(writer, palace_dir, monkeypatch):
    fill(writer, 200, tags=["bulk"])
    fill(writer, 5, prefix="below the snapshot interval")  # 5 < index_save_every: not saved yet
    before, filtered = answers(writer), answers(writer, tag="bulk")
    assert before[0][0][0] == writer.recall("q", fake_embed("filler 3"), 1)[0].drawer_id

    assert writer.release_index()
    assert not writer.index_loaded
    assert snapshot_seqs(palace_dir) == [writer.last_seq]  # saved first: the load replays nothing
    no_rebuild(monkeypatch)
    assert answers(writer) == before
    assert writer.index_loaded
    assert answers(writer, tag="bulk") == filtered
    assert writer.index.labels() == sqlite_labels(palace_dir)


def test_writes_while_released_are_stored_at_once_and_indexed_by_the_load(
    writer, palace_dir, monkeypatch
):
    ids = fill(writer, 30)
    assert writer.release_index()
    saved = snapshot_seqs(palace_dir)
    new = remember(writer, "the staging DB is on port 5433", room="Configuration", tags=["db"])
    writer.forget(ids[4])
    # Committed (another connection sees them) without loading the index or saving one.
    assert sql(palace_dir, "SELECT count(*) FROM drawers WHERE id = ?", new) == [(1,)]
    assert not writer.index_loaded
    assert snapshot_seqs(palace_dir) == saved
    assert writer.list(params_all())[0].drawer_id in {new, *ids}

    no_rebuild(monkeypatch)
    hit = writer.recall("q", fake_embed("the staging DB is on port 5433"), 1, room="Configuration")
    assert [h.drawer_id for h in hit] == [new]
    assert ids[4] not in {h.drawer_id for h in writer.recall("q", fake_embed("filler 4"), 30)}
    assert writer.index.labels() == sqlite_labels(palace_dir)
    info = writer.info()
    assert info.index_count == info.drawer_count == 30


def test_writes_after_a_release_survive_a_restart_before_any_load(palace_dir, monkeypatch):
    with PalaceStore.open(palace_dir, "proj", SETTINGS) as s:
        fill(s, 12)
        assert s.release_index()
        new = remember(s, "written while the index was released")
    no_rebuild(monkeypatch)
    with PalaceStore.open(palace_dir, "proj", SETTINGS, create=False) as s:
        assert (
            s.recall("q", fake_embed("written while the index was released"), 1)[0].drawer_id == new
        )
        assert s.index.labels() == sqlite_labels(palace_dir)


def test_a_released_writer_loads_the_index_when_the_replay_is_due_for_a_snapshot(
    writer, palace_dir
):
    fill(writer, 3)
    assert writer.release_index()
    fill(writer, SETTINGS.index_save_every - 1, prefix="short of")
    assert not writer.index_loaded  # the change log holds them; the next load replays them
    fill(writer, 1, prefix="one more")
    assert writer.index_loaded  # so that the snapshot below bounds the replay again
    assert snapshot_seqs(palace_dir) == [writer.last_seq]


def test_the_index_stays_when_its_snapshot_cannot_be_saved(writer, palace_dir, monkeypatch):
    fill(writer, 5)  # below index_save_every: the snapshot on disk lacks them

    def disk_full(self, directory, seq):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(VectorIndex, "save", disk_full)
    assert not writer.release_index()
    assert writer.index_loaded


def test_an_index_above_the_size_limit_stays(palace_dir):
    settings = dataclasses.replace(SETTINGS, idle_release_max_drawers=10)
    with PalaceStore.open(palace_dir, "proj", settings) as s:
        fill(s, 10)
        assert s.release_index()
        s.load_index()
        fill(s, 1, prefix="one too many")
        assert not s.release_index()
        assert s.index_loaded


def test_a_released_reader_loads_a_snapshot_newer_than_what_it_has_read(
    writer, palace_dir, monkeypatch
):
    fill(writer, 20)
    reader = ReadStore.open_reader(palace_dir, "proj", SETTINGS)
    try:
        assert reader.release_index()
        new = remember(writer, "the build cache lives in /var/cache/ci", room="CI", tags=["cache"])
        writer.forget(writer.recall("q", fake_embed("filler 9"), 1)[0].drawer_id)
        assert writer.release_index()  # the writer saves past the reader's last seq
        assert snapshot_seqs(palace_dir) == [writer.last_seq] != [reader.last_seq]

        monkeypatch.setattr(ReadStore, "rebuild_index", lambda self: pytest.fail("rebuilt"))
        text = "the build cache lives in /var/cache/ci"
        hits = reader.recall(text, fake_embed(text), 1, room="CI", tag="cache")
        assert [h.drawer_id for h in hits] == [new]  # the filters read up to the snapshot
        assert reader.last_seq == writer.last_seq
        assert reader.index.labels() == sqlite_labels(palace_dir)
        assert reader.info().drawer_count == 20
    finally:
        reader.close()


def test_a_released_reader_keeps_its_filters_current_and_loads_on_demand(writer, palace_dir):
    fill(writer, 20)
    reader = ReadStore.open_reader(palace_dir, "proj", SETTINGS)
    try:
        assert reader.release_index()
        new = remember(writer, "rotate the API keys monthly", tags=["security"])
        assert reader.changed() and reader.refresh() == 1
        assert not reader.index_loaded  # a catch-up leaves a released index alone
        assert reader.info().drawer_count == 21  # info loads it (its index_count is real)
        assert reader.index_loaded
        hit = reader.recall("q", fake_embed("rotate the API keys monthly"), 1, tag="security")
        assert [h.drawer_id for h in hit] == [new]
    finally:
        reader.close()


def test_a_commit_between_a_refresh_and_its_index_catch_up_reaches_the_filters(writer, palace_dir):
    """A reader's index never gets ahead of its room and tag filters."""
    fill(writer, 5)
    reader = ReadStore.open_reader(palace_dir, "proj", SETTINGS)
    try:
        remember(writer, "first of two", room="Ops")
        real = ReadStore._changes_since
        committed: list[str] = []

        def then_a_commit(self, *args):
            rows = real(self, *args)
            if not committed:  # the writer commits right after the reader's first read
                committed.append(remember(writer, "second of two", room="Ops"))
            return rows

        reader._changes_since = then_a_commit.__get__(reader)
        reader.refresh()
        assert reader.index.labels() <= reader._labels
        reader.refresh()  # the next catch-up brings the second one, filters included
        text = "second of two"
        assert [h.drawer_id for h in reader.recall(text, fake_embed(text), 1, room="Ops")] == (
            committed
        )
    finally:
        reader.close()


def params_all():
    from trusty_memory.common.messages import ListParams

    return ListParams(limit=1000)


def test_a_reader_opening_beside_a_commit_reads_filters_and_seq_from_one_snapshot(
    writer, palace_dir, monkeypatch
):
    """The filters and the seq they reflect come from one read transaction: a commit
    landing between their queries is neither half-seen (the index would disagree and be
    rebuilt) nor lost by the next catch-up."""
    fill(writer, 5, room="Ops")
    writer.maybe_snapshot(force=True)
    real = store_state._grouped_labels
    committed: list[str] = []

    def then_a_commit(conn, sql):
        groups = real(conn, sql)
        if not committed:  # the writer commits between the reader's rooms and its tags
            committed.append(remember(writer, "written while a reader opened", room="Ops"))
        return groups

    monkeypatch.setattr(store_state, "_grouped_labels", then_a_commit)
    monkeypatch.setattr(ReadStore, "rebuild_index", lambda self: pytest.fail("rebuilt"))
    reader = ReadStore.open_reader(palace_dir, "proj", SETTINGS)
    try:
        assert reader.index.labels() == reader._labels
        reader.refresh()
        text = "written while a reader opened"
        assert [h.drawer_id for h in reader.recall(text, fake_embed(text), 1, room="Ops")] == (
            committed
        )
    finally:
        reader.close()
