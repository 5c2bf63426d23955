"""VectorIndex: hnswlib as a cache, with in-search filtering and atomic snapshots.

Covers: workers/store/index.py
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from trusty_memory.workers.store.index import VectorIndex, top_k_exact

DIM = 32


def random_unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    """Test helper: ``n`` random unit vectors (hnswlib's worst case, fine for tests)."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def make_index(vectors: np.ndarray | None = None, **kwargs) -> VectorIndex:
    """Test helper: an index whose vector source serves rows of ``vectors`` by label."""

    def source(labels):
        labels = list(labels)
        return labels, vectors[labels]

    kwargs.setdefault("ef_construction", 64)
    return VectorIndex(DIM, vector_source=source if vectors is not None else None, **kwargs)


def test_search_finds_nearest_and_reports_cosine():
    vecs = random_unit_vectors(500)
    index = make_index(vecs)
    index.add(range(500), vecs)
    hits = index.search(vecs[42], 5)
    assert hits[0][0] == 42
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_empty_index_and_k_clamped_to_live_count():
    vecs = random_unit_vectors(3)
    index = make_index(vecs)
    assert index.search(vecs[0], 10) == []
    index.add([0, 1, 2], vecs)
    index.delete(1)
    hits = index.search(vecs[0], 10)
    assert sorted(label for label, _ in hits) == [0, 2]


def test_delete_is_tolerant_and_hides_label():
    vecs = random_unit_vectors(50)
    index = make_index(vecs)
    index.add(range(50), vecs)
    assert index.delete(7) is True
    assert index.delete(7) is False  # already deleted
    assert index.delete(999) is False  # never existed
    assert 7 not in {label for label, _ in index.search(vecs[7], 10)}
    assert index.live_count == 49


def test_add_is_idempotent_and_revives_deleted_label_without_duplicates():
    vecs = random_unit_vectors(40)
    index = make_index(vecs)
    index.add(range(30), vecs[:30])
    assert index.add(range(30), vecs[:30]) == 0  # replaying adds changes nothing
    index.delete(5)
    index.add([30], vecs[30:31])  # reuses the deleted slot
    index.add([5], vecs[5:6])  # a label coming back must not end up in two slots
    labels = [label for label, _ in index.search(vecs[5], 31)]
    assert len(labels) == len(set(labels)) == 31
    assert index.live_count == 31


def test_resize_beyond_initial_capacity():
    vecs = random_unit_vectors(300)
    index = make_index(vecs, capacity=16)
    for start in range(0, 300, 7):
        index.add(range(start, min(start + 7, 300)), vecs[start : start + 7])
    assert index.live_count == 300
    assert index.capacity >= 300
    assert index.search(vecs[299], 1)[0][0] == 299


@pytest.mark.parametrize("with_source", [True, False])
def test_small_filter_finds_the_one_allowed_label(with_source):
    vecs = random_unit_vectors(2000, seed=1)
    index = make_index(vecs if with_source else None)
    index.add(range(2000), vecs)
    query = vecs[0]  # nearest overall is label 0, but only 1234 is allowed
    hits = index.search(query, 10, allowed={1234})
    assert hits == [(1234, pytest.approx(float(vecs[1234] @ query), abs=1e-5))]


def test_large_filter_runs_inside_hnsw_search():
    vecs = random_unit_vectors(2000, seed=2)
    calls = []

    def source(labels):
        calls.append(len(labels))
        return list(labels), vecs[list(labels)]

    index = VectorIndex(DIM, ef_construction=64, exact_max=100, vector_source=source)
    index.add(range(2000), vecs)
    allowed = set(range(0, 2000, 2))  # 1000 labels > exact_max: hnswlib filter=
    hits = index.search(vecs[1], 10, allowed=allowed)
    assert len(hits) == 10
    assert all(label in allowed for label, _ in hits)
    assert calls == []
    exact = top_k_exact(sorted(allowed), vecs[sorted(allowed)], vecs[1], 10)
    assert {label for label, _ in hits} & {label for label, _ in exact}


def test_filter_ignores_dead_labels():
    vecs = random_unit_vectors(100)
    index = make_index(vecs)
    index.add(range(100), vecs)
    index.delete(3)
    assert index.search(vecs[3], 5, allowed={3, 4}) == [(4, pytest.approx(vecs[4] @ vecs[3]))]
    assert index.search(vecs[3], 5, allowed=set()) == []


def test_snapshot_round_trip_keeps_live_set_and_prunes_older(tmp_path):
    vecs = random_unit_vectors(200)
    index = make_index(vecs)
    index.add(range(100), vecs[:100])
    index.save(tmp_path, 100)
    index.add(range(100, 200), vecs[100:])
    index.delete(10)
    index.save(tmp_path, 201)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["index-000000000201.hnsw", "index-000000000201.json"]

    loaded, seq = VectorIndex.load(tmp_path, DIM)
    assert seq == 201
    assert loaded.labels() == set(range(200)) - {10}
    assert 10 not in {label for label, _ in loaded.search(vecs[10], 20)}
    loaded.delete(10)  # deleting a deleted label after load stays a no-op
    assert loaded.add([10], vecs[10:11]) == 1  # and reviving it works
    assert loaded.search(vecs[10], 1)[0][0] == 10


class CutShort:
    """hnswlib on a full disk: ``save_index`` writes part of the file and reports nothing."""

    def __init__(self, raw) -> None:
        self.raw = raw

    def __getattr__(self, name: str):
        return getattr(self.raw, name)

    def save_index(self, path: str) -> None:
        self.raw.save_index(path)
        os.truncate(path, os.path.getsize(path) * 9 // 10)


def test_a_snapshot_cut_short_by_a_full_disk_is_refused_and_the_good_one_kept(tmp_path):
    vecs = random_unit_vectors(300)
    index = make_index(vecs)
    index.add(range(300), vecs)
    index.save(tmp_path, seq=1)
    index._index = CutShort(index._index)
    with pytest.raises(OSError, match="cut short"):
        index.save(tmp_path, seq=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "index-000000000001.hnsw",
        "index-000000000001.json",
    ]
    loaded, seq = VectorIndex.load(tmp_path, DIM)
    assert seq == 1 and loaded.live_count == 300


def test_load_without_snapshot_returns_none(tmp_path):
    assert VectorIndex.load(tmp_path, DIM) is None
    assert VectorIndex.load(tmp_path / "missing", DIM) is None


@pytest.mark.parametrize("damage", ["truncate", "garbage", "meta", "dim", "missing"])
def test_corrupt_snapshot_means_rebuild_not_crash(tmp_path, damage):
    vecs = random_unit_vectors(100)
    index = make_index(vecs)
    index.add(range(100), vecs)
    data = index.save(tmp_path, 5)
    meta = data.with_suffix(".json")
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:1000])
    elif damage == "garbage":
        raw = bytearray(data.read_bytes())
        raw[100:200] = b"\xff" * 100
        data.write_bytes(bytes(raw))
    elif damage == "meta":
        meta.write_text("{not json")
    elif damage == "missing":
        data.unlink()
    dim = DIM * 2 if damage == "dim" else DIM
    assert VectorIndex.load(tmp_path, dim) is None


def test_load_skips_snapshot_newer_than_change_log(tmp_path):
    vecs = random_unit_vectors(10)
    index = make_index(vecs)
    index.add(range(10), vecs)
    index.save(tmp_path, 50)
    assert VectorIndex.load(tmp_path, DIM, max_seq=49) is None
    assert VectorIndex.load(tmp_path, DIM, max_seq=50)[1] == 50
