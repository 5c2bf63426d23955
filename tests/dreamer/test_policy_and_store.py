"""The dreamer's arithmetic and the writer-side steps, on a real PalaceStore (no daemon).

Vectors are made by hand so similarity is exact and known: these tests pin the policy
(what merges, what survives, what decays, what is archived), the daemon tests pin the
plumbing with the real model.

Covers: dreamer/planner.py workers/store/dedup.py workers/store/decay.py workers/store/archive.py
    workers/store/edit.py
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from trusty_memory.common import protocol as p
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.messages import (
    ArchiveListParams,
    DreamDecayParams,
    DreamKgDecayParams,
    DreamMergeParams,
    DreamScanParams,
    DuplicatePair,
    KgAssertParams,
    ListParams,
    RememberParams,
)
from trusty_memory.dreamer.planner import group_pairs
from trusty_memory.workers.store import archive, context, decay, dedup
from trusty_memory.workers.store import edit as store_edit
from trusty_memory.workers.store import rows as store_rows
from trusty_memory.workers.store.read import ReadStore
from trusty_memory.workers.store.write import PalaceStore

DIM = 384
SETTINGS = PalaceSettings(ef_construction=64, hnsw_m=12, index_save_every=10)


def unit(seed: str) -> np.ndarray:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def near(v: np.ndarray, cosine: float, seed: str) -> np.ndarray:
    """A unit vector at exactly ``cosine`` from ``v``."""
    noise = unit(seed)
    noise -= (noise @ v) * v
    noise /= np.linalg.norm(noise)
    return (cosine * v + math.sqrt(1 - cosine**2) * noise).astype(np.float32)


class Embed:
    """The writer's ``embed`` for these tests: the hashed unit vector of each text."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([unit(t) for t in texts])


def merge(store: PalaceStore, groups: list[list[str]], embed=None, **params):
    return dedup.merge_groups(store, DreamMergeParams(groups=groups, **params), embed or Embed())


def put(store: PalaceStore, text: str, vec: np.ndarray, **fields) -> str:
    [r] = store.remember_batch([(RememberParams(text=text, **fields), vec)])
    return r.drawer_id


@pytest.fixture
def store(tmp_path: Path):
    s = PalaceStore.open(tmp_path / "proj", "proj", SETTINGS)
    yield s
    s.close()


def rows(store: PalaceStore, sql: str, *args):
    conn = sqlite3.connect(store.palace_dir / "palace.sqlite3")
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def assert_in_step(store: PalaceStore) -> None:
    """The writer's in-memory label sets and its index agree with SQLite."""
    labels = {r[0] for r in rows(store, "SELECT label FROM drawers")}
    assert store._labels == labels == store.index.labels()
    by_tag: dict[str, set[int]] = {}
    for tag, label in rows(store, "SELECT tag, label FROM drawer_tags"):
        by_tag.setdefault(tag, set()).add(label)
    assert {t: ls for t, ls in store._tag_labels.items() if ls} == by_tag
    by_room: dict[str, set[int]] = {}
    for room, label in rows(store, "SELECT room, label FROM drawers"):
        by_room.setdefault(room, set()).add(label)
    assert {r: ls for r, ls in store._room_labels.items() if ls} == by_room


# -- the formulas ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "age", "hits", "expected"),
    [
        (0.5, 0, 0, 0.5),
        (0.5, 90, 0, 0.25),  # one half-life
        (0.8, 180, 0, 0.2),  # two
        (0.5, 90, 2, 0.35),  # + 0.05 per hit
        (0.5, 90, 100, 0.55),  # the hit bonus is capped at 0.3
        (1.0, 0, 10, 1.0),  # clamped to 1
        (0.5, 900, 0, 0.05),  # and to the 0.05 floor
        (0.5, -5, 0, 0.5),  # a future timestamp does not inflate importance
    ],
)
def test_effective_importance(base, age, hits, expected):
    assert decay.effective_importance(base, age, hits, 90) == pytest.approx(expected, abs=1e-9)


def test_raw_importance_is_what_pruning_sees_below_the_floor():
    assert decay.raw_importance(0.5, 900, 0, 90) == pytest.approx(0.5 * 2**-10)
    assert decay.effective_importance(0.5, 900, 0, 90) == 0.05


def test_kg_confidence_decay():
    assert decay.decayed_confidence(0.9, 180, 180) == pytest.approx(0.45)
    assert decay.decayed_confidence(0.9, 10_000, 180) == 0.05


def test_group_pairs_takes_connected_components_biggest_first():
    pairs = [
        DuplicatePair(a="a", b="b", similarity=0.97, exact=False),
        DuplicatePair(a="b", b="c", similarity=0.96, exact=False),
        DuplicatePair(a="x", b="y", similarity=1.0, exact=True),
    ]
    assert group_pairs(pairs) == [["a", "b", "c"], ["x", "y"]]


# -- write-time duplicates ---------------------------------------------------------------


def test_exact_duplicate_at_write_time_returns_the_existing_drawer(store):
    v = unit("a")
    first = put(store, "the build uses make", v, tags=["build"])
    [again] = store.remember_batch(
        [(RememberParams(text="the build uses make", tags=["ci"], importance=0.9), v)]
    )
    assert again.drawer_id == first and again.deduplicated and again.status == "stored"
    assert store.info().drawer_count == 1
    [d] = store.list(ListParams())
    assert d.tags == ["build", "ci"] and d.importance == 0.9
    assert store.recall("x", v, tag="ci")[0].drawer_id == first
    # Another room, other metadata, or an own embedding: distinct drawers.
    assert put(store, "the build uses make", v, room="Ops") != first
    assert put(store, "the build uses make", v, metadata={"turn": 3}) != first
    [own] = store.remember_batch(
        [(RememberParams(text="the build uses make", embed_text="ctx"), unit("ctx"))]
    )
    assert own.drawer_id != first and not own.deduplicated
    assert b"deduplicated" not in p.encode(own)  # omitted when False: the contract's shape


# -- merge ---------------------------------------------------------------------------------


def test_near_duplicates_merge_into_the_most_important(store):
    base = unit("base")
    a = put(
        store,
        "deploys on tuesday",
        base,
        tags=["ops"],
        importance=0.4,
        created_at="2025-01-01T00:00:00Z",
    )
    b = put(store, "Deploys on Tuesday.", near(base, 0.97, "b"), tags=["release"], importance=0.8)
    far = put(store, "unrelated", near(base, 0.90, "c"))
    other_room = put(store, "deploys on tuesday!", near(base, 0.99, "d"), room="Elsewhere")
    store.recall("q", base)  # a pending hit for each, flushed by the merge's transaction
    scan = dedup.scan_duplicates(store, DreamScanParams(threshold=0.95))
    assert {(x.a, x.b) for x in scan.pairs} == {tuple(sorted((a, b)))}
    groups = [*group_pairs(scan.pairs), [b, far, other_room]]
    preview = merge(store, groups, dry_run=True)
    assert store.info().drawer_count == 4  # a preview writes nothing
    result = merge(store, groups)
    assert result.actions == preview.actions
    assert [(x.keep, x.merged) for x in result.actions] == [(b, [a])]
    info = store.info()
    assert info.drawer_count == info.index_count == 3 and info.archived_count == 1
    [(tags, importance, hits, created_at)] = rows(
        store, "SELECT tags, importance, hits, created_at FROM drawers WHERE id = ?", b
    )
    assert tags == '["release", "ops"]' and importance == 0.8
    assert hits == 2 and created_at == "2025-01-01T00:00:00Z"
    assert a not in {h.drawer_id for h in store.recall("q", base, top_k=10)}
    with pytest.raises(p.TrustyError) as err:
        store.forget(a)
    assert (
        err.value.code == p.ErrorCode.DRAWER_NOT_FOUND and f"merged into {b}" in err.value.message
    )


def test_restatements_with_context_mixed_vectors_are_compared_by_their_own(store):
    """The index holds context mixes (``workers/store/context.py``): two restatements written
    after different predecessors have mixes well below the threshold; their own vectors
    decide, and both the merge and the archive keep each drawer's own vector."""
    base = unit("port")
    own_b = near(base, 0.97, "b")
    mix_a = context.mix(base, unit("standup chatter"))
    mix_b = context.mix(own_b, unit("lunch plans"))
    assert float(mix_a @ mix_b) < 0.9 and float(base @ mix_b) < 0.95  # the index alone: no pair
    a = put(store, "billing listens on port 8081", context.Mixed(mix_a, base), importance=0.9)
    b = put(store, "Billing listens on port 8081 now.", context.Mixed(mix_b, own_b))
    own_c = near(base, 0.9, "c")  # mixed with a's text, it comes close; its own is not
    lone = put(store, "unrelated", context.Mixed(context.mix(own_c, base), own_c))
    [(vector, own)] = rows(store, "SELECT vector, own_vector FROM drawers WHERE id = ?", b)
    assert np.allclose(np.frombuffer(vector, "<f4"), mix_b) and np.allclose(
        np.frombuffer(own, "<f4"), own_b
    )
    scan = dedup.scan_duplicates(store, DreamScanParams(threshold=0.95))
    assert [(x.a, x.b, round(x.similarity, 2)) for x in scan.pairs] == [(*sorted((a, b)), 0.97)]
    assert lone not in {x.a for x in scan.distinct} | {x.b for x in scan.distinct}
    result = merge(store, [[a, b]])
    assert [(x.keep, x.merged) for x in result.actions] == [(a, [b])]
    [(archived_own,)] = rows(store, "SELECT own_vector FROM archive WHERE id = ?", b)
    assert archived_own == own
    store_edit.archive_restore(store, b)
    [(restored_vector, restored_own)] = rows(
        store, "SELECT vector, own_vector FROM drawers WHERE id = ?", b
    )
    assert (restored_vector, restored_own) == (vector, own)
    assert_in_step(store)


def test_a_failing_merge_leaves_no_half_merged_drawer(store, monkeypatch):
    base = unit("base")
    texts = ["The dup note.", "the dup note", "The dup note!"]
    ids = [put(store, text, near(base, 0.99, text)) for text in texts]
    calls = []

    def crash(conn, row, reason, merged_into, **kwargs):
        calls.append(row.id)
        if len(calls) == 2:
            raise RuntimeError("power cut")
        real_archive(conn, row, reason, merged_into, **kwargs)

    real_archive = archive.archive_row
    monkeypatch.setattr(archive, "archive_row", crash)
    with pytest.raises(RuntimeError):
        merge(store, [ids])
    assert rows(store, "SELECT count(*) FROM drawers") == [(3,)]
    assert rows(store, "SELECT count(*) FROM archive") == [(0,)]
    assert rows(store, "SELECT tags, hits FROM drawers WHERE hits != 0 OR tags != '[]'") == []


def test_near_pairs_stating_different_facts_are_not_proposed_nor_merged(store):
    base = unit("limit")
    old = put(store, "The API rate limit is 100 requests per minute", base, importance=0.9)
    new = put(store, "The API rate limit is 1000 requests per minute", near(base, 0.97, "n"))
    twin = put(store, "the API rate limit is 100 requests per minute.", near(base, 0.98, "t"))
    scan = dedup.scan_duplicates(store, DreamScanParams(threshold=0.95))
    assert {(x.a, x.b) for x in scan.pairs} == {tuple(sorted((old, twin)))}
    # Reported once, the reason reading a's values vs b's (``twin`` is at cosine ~0.95
    # from ``new``, under the threshold).
    [distinct] = scan.distinct
    values = ("100", "1000") if distinct.a == old else ("1000", "100")
    assert {distinct.a, distinct.b} == {old, new} and distinct.similarity >= 0.95
    assert distinct.reason == "numbers differ: {} vs {}".format(*values)
    # A proposal is never trusted: the writer re-checks each member against the survivor.
    result = merge(store, [[old, new, twin]])
    assert [(x.keep, x.merged) for x in result.actions] == [(old, [twin])]
    assert result.skipped == 1
    [refused] = result.distinct
    assert (refused.a, refused.b, refused.reason) == (old, new, "numbers differ: 100 vs 1000")
    assert {d.drawer_id for d in store.list(ListParams())} == {old, new}


def test_the_survivor_takes_the_newest_wording_when_texts_differ_only_in_punctuation(store):
    base = unit("port")
    keep = put(store, "staging db is on port 5433", base, importance=0.9, tags=["db"],
               created_at="2025-01-01T00:00:00Z")  # fmt: skip
    newer = put(store, "Staging DB is on port 5433.", near(base, 0.99, "n"), tags=["ops"],
                importance=0.3, created_at="2025-03-01T00:00:00Z")  # fmt: skip
    [(newer_vector,)] = rows(store, "SELECT vector FROM drawers WHERE id = ?", newer)
    embed = Embed()
    preview = merge(store, [[keep, newer]], embed, dry_run=True)
    assert preview.actions[0].content == "Staging DB is on port 5433." and embed.calls == []
    result = merge(store, [[keep, newer]], embed)
    assert [(x.keep, x.merged) for x in result.actions] == [(keep, [newer])]
    assert embed.calls == []  # the newest wording brings the vector made for it
    [(label, content, content_hash, vector, tags, importance, created_at)] = rows(
        store,
        "SELECT label, content, content_hash, vector, tags, importance, created_at FROM drawers"
        " WHERE id = ?",
        keep,
    )
    assert content == "Staging DB is on port 5433." and vector == newer_vector
    found = np.frombuffer(newer_vector, dtype="<f4")
    assert store.index.search(found, 1) == [(label, pytest.approx(1.0, abs=1e-5))]
    assert_in_step(store)
    for tag in ("db", "ops"):  # the survivor moved to the newer drawer's row, tags and all
        assert [h.drawer_id for h in store.recall("x", found, tag=tag, top_k=1)] == [keep]
    assert content_hash == hashlib.sha256(content.encode()).hexdigest()
    assert json.loads(tags) == ["db", "ops"] and importance == 0.9
    assert created_at == "2025-01-01T00:00:00Z"  # the earliest


def test_the_survivor_keeps_both_wordings_and_its_vector_follows_the_new_text(store):
    base = unit("deploy")
    keep = put(store, "Deploys to production happen on Tuesdays.", base, importance=0.9,
               created_at="2025-01-01T00:00:00Z")  # fmt: skip
    newer = put(store, "On Tuesdays, deploys to production happen.", near(base, 0.97, "n"),
                created_at="2025-02-01T00:00:00Z")  # fmt: skip
    filler = [put(store, f"filler note {i}", unit(f"f{i}")) for i in range(20)]
    store.maybe_snapshot(force=True)  # the index on disk predates the merge
    embed = Embed()
    result = merge(store, [[keep, newer]], embed)
    merged = "On Tuesdays, deploys to production happen.\nDeploys to production happen on Tuesdays."
    assert result.actions[0].content == merged and embed.calls == [[merged]]
    [(content, vector)] = rows(store, "SELECT content, vector FROM drawers WHERE id = ?", keep)
    assert content == merged
    assert np.allclose(np.frombuffer(vector, dtype="<f4"), unit(merged), atol=1e-6)
    # The index holds the new vector under the survivor's label, not the old one.
    [(label,)] = rows(store, "SELECT label FROM drawers WHERE id = ?", keep)
    assert store.index.search(unit(merged), 1) == [(label, pytest.approx(1.0, abs=1e-5))]
    assert store.index.search(base, 1)[0][1] < 0.5
    assert_in_step(store)
    # Recall and full-text search see the new text.
    assert store.recall("x", unit(merged), top_k=1)[0].content == merged
    assert [h.drawer_id for h in store.recall("happen Tuesdays", unit("q"), deep=True)][:1] == [
        keep
    ]
    # Another process opening the palace (snapshot + change-log replay, as a reader does
    # and as a writer does after kill -9) finds the new vector too.
    reopened = ReadStore.open_reader(store.palace_dir, "proj", SETTINGS)
    try:
        assert reopened.index.search(unit(merged), 1)[0][0] == label
        assert reopened.index.live_count == 22 - 1 == len(filler) + 1
    finally:
        reopened.close()


def test_restore_brings_a_merged_drawer_back_after_the_survivor_was_rewritten(store):
    base = unit("owner")
    keep = put(store, "Alice owns the billing service.", base, importance=0.9)
    gone = put(store, "The billing service: Alice owns it.", near(base, 0.97, "g"),
               tags=["people"], created_at="2020-01-01T00:00:00Z")  # fmt: skip
    [(old_vector,)] = rows(store, "SELECT vector FROM drawers WHERE id = ?", gone)
    result = merge(store, [[keep, gone]])
    assert [(x.keep, x.merged) for x in result.actions] == [(keep, [gone])]
    [entry] = archive.archive_list(store, ArchiveListParams(reason="merged")).drawers
    assert (entry.drawer_id, entry.merged_into) == (gone, keep)
    store_edit.archive_restore(store, gone)
    [(content, tags, vector)] = rows(
        store, "SELECT content, tags, vector FROM drawers WHERE id = ?", gone
    )
    assert json.loads(tags) == ["people"] and vector == old_vector
    assert content == "The billing service: Alice owns it."
    # The survivor keeps what it got: both wordings (they differ beyond punctuation).
    [(survivor,)] = rows(store, "SELECT content FROM drawers WHERE id = ?", keep)
    assert survivor == "Alice owns the billing service.\nThe billing service: Alice owns it."
    assert store.info().drawer_count == store.info().index_count == 2
    assert store.recall("x", np.frombuffer(old_vector, dtype="<f4"), top_k=1)[0].drawer_id == gone
    assert_in_step(store)


def test_write_time_dedup_is_exact_text_only(store):
    v = unit("limit")
    first = put(store, "The API rate limit is 100 requests per minute", v)
    [again] = store.remember_batch(
        [(RememberParams(text="The API rate limit is 1000 requests per minute"), v)]
    )
    assert again.drawer_id != first and not again.deduplicated
    [case] = store.remember_batch(
        [(RememberParams(text="the API rate limit is 100 requests per minute"), v)]
    )
    assert case.drawer_id != first and not case.deduplicated  # not even case is folded
    assert store.info().drawer_count == 3
    conn = store.db.conn
    digest = hashlib.sha256(b"The API rate limit is 100 requests per minute").hexdigest()
    assert store_rows.find_exact_duplicate(conn, digest, "General", None)[1] == first
    other = hashlib.sha256(b"The API rate limit is 100 requests per minute.").hexdigest()
    assert store_rows.find_exact_duplicate(conn, other, "General", None) is None


# -- decay, prune, archive -------------------------------------------------------------------


def test_decay_prune_and_restore_round_trip(store):
    fresh = put(store, "fresh", unit("f"), importance=0.5)
    old = put(store, "old and used", unit("o"), importance=0.5, created_at="2025-01-01T00:00:00Z")
    gone = put(
        store, "old and forgotten", unit("g"), importance=0.5, created_at="2020-01-01T00:00:00Z"
    )
    now = "2025-04-01T00:00:00Z"  # 90 days after ``old``: one half-life
    params = DreamDecayParams(now=now, half_life_days=90)
    preview = decay.decay_page(store, DreamDecayParams(now=now, dry_run=True))
    result = decay.decay_page(store, params)
    assert preview == result and result.archived == [gone]
    assert dict(rows(store, "SELECT id, importance FROM drawers")) == {
        fresh: 0.5,  # created "now" by the wall clock: in the future of ``now``
        old: pytest.approx(0.25),
    }
    again = decay.decay_page(store, params)
    assert again.decayed == 0 and again.archived == []  # recomputed from the base: stable
    info = store.info()
    assert info.drawer_count == info.index_count == 2 and info.archived_count == 1
    listed = archive.archive_list(store, ArchiveListParams())
    assert [(d.drawer_id, d.reason, d.content) for d in listed.drawers] == [
        (gone, "pruned", "old and forgotten")
    ]
    store_edit.archive_restore(store, gone)
    assert store.info().drawer_count == store.info().index_count == 3
    assert store.recall("q", unit("g"), top_k=1)[0].drawer_id == gone
    # Restoring restarted its decay clock: the next pass (by the real clock) keeps it.
    assert gone not in decay.decay_page(store, DreamDecayParams()).archived
    with pytest.raises(p.TrustyError) as err:
        store_edit.archive_restore(store, gone)
    assert err.value.code == p.ErrorCode.DRAWER_NOT_FOUND


def test_forget_of_a_pruned_drawer_deletes_it_from_the_archive(store):
    gone = put(store, "ancient", unit("a"), created_at="2019-01-01T00:00:00Z")
    assert decay.decay_page(store, DreamDecayParams()).archived == [gone]
    assert store.forget(gone).status == "deleted"
    assert archive.archive_list(store, ArchiveListParams()).drawers == []


def test_hits_keep_an_old_drawer(store):
    kept = put(store, "old but used", unit("u"), created_at="2020-01-01T00:00:00Z")
    for _ in range(2):
        store.recall("q", unit("u"), top_k=1)
    result = decay.decay_page(store, DreamDecayParams())
    assert result.archived == []
    [(importance,)] = rows(store, "SELECT importance FROM drawers WHERE id = ?", kept)
    assert importance == pytest.approx(0.1, abs=1e-6)  # 2 hits: 0.1 over a decayed base


def test_kg_decay(store):
    store.kg_assert(KgAssertParams(subject="svc", predicate="uses", object="pg", confidence=0.8))
    far_future = "2030-01-01T00:00:00Z"
    result = decay.kg_decay_page(store, DreamKgDecayParams(now=far_future, half_life_days=180))
    assert result.decayed == 1
    [triple] = store.kg_query("svc").triples
    assert 0.05 <= triple.confidence < 0.8
