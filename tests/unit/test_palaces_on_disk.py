"""Deleting to the archive, renaming and restoring palaces on disk (``broker/palaces.py``).

No daemon here: these are the directory moves the broker makes once a palace's workers
have exited. A real palace store (SQLite, index snapshot) is moved and opened again; the
daemon's side (workers stopped first, requests refused: ``broker/palace_moves.py``) is in
tests/engine/test_palace_moves.py.

Covers: broker/palaces.py
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from trusty_memory.broker import palaces as registry_module
from trusty_memory.broker.palaces import PalaceRegistry, holds_nothing
from trusty_memory.common.config import Config
from trusty_memory.common.messages import KgAssertParams, ListParams
from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.write import PalaceStore

from .test_store import SETTINGS, fake_embed, fill


@pytest.fixture
def registry(tmp_path: Path) -> PalaceRegistry:
    old = os.umask(0o077)  # as every actor runs (home.make_private)
    yield PalaceRegistry(Config(home=tmp_path / "home", run_dir=tmp_path / "run"))
    os.umask(old)


def stored_palace(registry: PalaceRegistry, name: str, drawers: int = 5) -> list[str]:
    """A palace as a writer leaves it: created, drawers and a triple written, closed."""
    registry.create(name, "what it is for")
    with PalaceStore.open(registry.config.palace_dir(name), name, SETTINGS) as store:
        ids = fill(store, drawers, prefix=f"{name} note")
        store.kg_assert(KgAssertParams(subject="svc", predicate="version", object="2"))
    return ids


def opened(registry: PalaceRegistry, name: str) -> ReadStore:
    return ReadStore.open_reader(registry.config.palace_dir(name), name, SETTINGS)


def modes(root: Path) -> set[tuple[str, int]]:
    """(kind, mode) of everything below ``root``, itself included."""
    found = set()
    for path in [root, *root.rglob("*")]:
        kind = "dir" if path.is_dir() else "file"
        found.add((kind, stat.S_IMODE(path.lstat().st_mode)))
    return found


def test_delete_archives_whole_and_restore_brings_it_back(registry):
    ids = stored_palace(registry, "proj")
    before = sorted(os.listdir(registry.config.palace_dir("proj")))
    data = registry.delete("proj")
    assert data["status"] == "archived" and data["entry"].startswith("proj-")
    assert not registry.config.palace_dir("proj").exists()
    assert not registry.exists("proj") and registry.names() == []
    entry = registry.archive_dir / data["entry"]
    assert sorted(os.listdir(entry)) == before  # moved whole, nothing left out
    assert modes(registry.config.home / "archive") <= {("dir", 0o700), ("file", 0o600)}
    meta = json.loads((entry / "palace.json").read_text())
    assert meta["name"] == "proj" and meta["deleted_at"] and meta["description"]
    [listed] = registry.archived()
    assert listed["name"] == "proj" and listed["entry"] == data["entry"]

    restored = registry.restore("proj")
    assert restored == {"palace": "proj", "entry": data["entry"], "status": "restored"}
    assert registry.names() == ["proj"] and registry.archived() == []
    assert "deleted_at" not in json.loads(
        (registry.config.palace_dir("proj") / "palace.json").read_text()
    )
    store = opened(registry, "proj")
    try:
        assert {d.drawer_id for d in store.list(ListParams(limit=100))} == set(ids)
        assert store.info().triple_count == 1
        hits = store.recall("proj note 3", fake_embed("proj note 3"), 1)
        assert hits[0].drawer_id == ids[3]
    finally:
        store.close()


def test_rename_moves_the_directory_and_keeps_ids_and_index(registry, caplog):
    ids = stored_palace(registry, "old", drawers=12)
    data = registry.rename("old", "new")
    assert data == {"palace": "new", "renamed_from": "old", "status": "renamed"}
    assert registry.names() == ["new"] and not registry.exists("old")
    meta = json.loads((registry.config.palace_dir("new") / "palace.json").read_text())
    assert meta["name"] == "new" and meta["renamed_from"] == "old"
    # The snapshot the writer left loads under the new name: no rebuild.
    store = PalaceStore.open(registry.config.palace_dir("new"), "new", SETTINGS, create=False)
    try:
        assert store.index.labels() == store._labels and store._snapshot_seq > 0
        for i in (0, 7, 11):
            hit = store.recall(f"old note {i}", fake_embed(f"old note {i}"), 1)[0]
            assert hit.drawer_id == ids[i]
    finally:
        store.close()


def test_rename_refuses_a_taken_name_and_hostile_names(registry):
    stored_palace(registry, "a", drawers=1)
    registry.create("b", None)
    with pytest.raises(TrustyError) as err:
        registry.rename("a", "b")
    assert err.value.code == ErrorCode.PALACE_EXISTS
    registry.config.palace_dir("stray").mkdir()  # a directory in the way, no palace.json
    with pytest.raises(TrustyError) as err:
        registry.rename("a", "stray")
    assert err.value.code == ErrorCode.PALACE_EXISTS
    for bad in ("../x", "a/b", ".hidden", "", "x" * 65):
        with pytest.raises(TrustyError) as err:
            registry.rename("a", bad)
        assert err.value.code == ErrorCode.INVALID_PALACE_NAME
    with pytest.raises(TrustyError) as err:
        registry.delete("../palaces/a")
    assert err.value.code == ErrorCode.INVALID_PALACE_NAME
    assert registry.names() == ["a", "b"]
    assert os.listdir(registry.config.palace_dir("a"))  # untouched


def test_a_name_starting_with_a_dash_moves_like_any_other(registry):
    stored_palace(registry, "-x", drawers=2)
    registry.rename("-x", "--help")
    assert registry.names() == ["--help"]
    entry = registry.delete("--help")["entry"]
    assert registry.restore("--help")["entry"] == entry


def test_deleting_a_name_twice_keeps_both_and_restore_picks(registry, monkeypatch):
    monkeypatch.setattr(registry_module, "archive_stamp", lambda: "20260101T000000Z")
    first = stored_palace(registry, "p", drawers=1)
    assert registry.delete("p")["entry"] == "p-20260101T000000Z"
    second = stored_palace(registry, "p", drawers=2)
    assert registry.delete("p")["entry"] == "p-20260101T000000Z-2"
    assert [a["entry"] for a in registry.archived()] == [
        "p-20260101T000000Z",
        "p-20260101T000000Z-2",
    ]
    # The newest by default; it cannot come back over a palace of that name.
    registry.create("p", None)
    with pytest.raises(TrustyError) as err:
        registry.restore("p")
    assert err.value.code == ErrorCode.PALACE_EXISTS and "another name" in err.value.message
    assert registry.restore("p", new_name="p2")["entry"] == "p-20260101T000000Z-2"
    assert opened(registry, "p2").info().drawer_count == len(second)
    restored = registry.restore("p", entry="p-20260101T000000Z", new_name="p1")
    assert restored["palace"] == "p1"
    assert opened(registry, "p1").info().drawer_count == len(first)
    assert registry.archived() == []


def test_restore_refuses_what_is_not_in_the_archive(registry):
    stored_palace(registry, "p", drawers=1)
    entry = registry.delete("p")["entry"]
    for name, kw in (
        ("q", {}),
        ("p", {"entry": "../../palaces"}),
        ("p", {"entry": "q-20260101T000000Z"}),
    ):
        with pytest.raises(TrustyError) as err:
            registry.restore(name, **kw)
        assert err.value.code == ErrorCode.PALACE_NOT_FOUND
    for bad in ("../x", "a/b"):
        with pytest.raises(TrustyError) as err:
            registry.restore("p", new_name=bad)
        assert err.value.code == ErrorCode.INVALID_PALACE_NAME
    assert [a["entry"] for a in registry.archived()] == [entry]


def test_discard_empty_removes_only_a_palace_that_holds_nothing(registry):
    registry.create("never-opened", None)  # no database yet
    assert registry.delete("never-opened", discard_empty=True)["status"] == "removed"
    registry.create("opened", None)
    PalaceStore.open(registry.config.palace_dir("opened"), "opened", SETTINGS).close()
    assert holds_nothing(registry.config.palace_dir("opened"))
    assert registry.delete("opened", discard_empty=True)["status"] == "removed"
    stored_palace(registry, "full", drawers=1)
    assert not holds_nothing(registry.config.palace_dir("full"))
    assert registry.delete("full", discard_empty=True)["status"] == "archived"
    registry.create("kg-only", None)
    with PalaceStore.open(registry.config.palace_dir("kg-only"), "kg-only", SETTINGS) as store:
        store.kg_assert(KgAssertParams(subject="s", predicate="p", object="o"))
    assert registry.delete("kg-only", discard_empty=True)["status"] == "archived"
    assert registry.names() == []
    assert sorted(a["name"] for a in registry.archived()) == ["full", "kg-only"]
    assert not (registry.config.palaces_dir / "never-opened").exists()


def test_an_unreadable_database_is_never_discarded(registry):
    registry.create("odd", None)
    (registry.config.palace_dir("odd") / "palace.sqlite3").write_bytes(b"not sqlite" * 100)
    assert not holds_nothing(registry.config.palace_dir("odd"))
    assert registry.delete("odd", discard_empty=True)["status"] == "archived"
