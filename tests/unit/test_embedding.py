"""The embedders: the real MiniLM from its package, and the test-only hashed one.

Covers: workers/embedder/embedding.py workers/embedder/compiled_model.py workers/embedder/worker.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trusty_memory.workers.embedder import compiled_model
from trusty_memory.workers.embedder.embedding import DeterministicTestEmbedder, MiniLMEmbedder
from trusty_memory.workers.embedder.worker import VectorCache


def test_minilm_loads_offline_and_gives_unit_vectors():
    model = MiniLMEmbedder()
    vecs = model.encode(
        ["The cat sat on the mat.", "A kitten rested on a rug.", "Stock prices fell."]
    )
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


TEXTS = [
    "x",
    "When did Caroline go to the LGBTQ support group?",
    "Melanie: I painted a sunrise over the lake last weekend, my best one yet!",
    "   ",
    "emoji 🎉 and tabs\tand\nnewlines",
    " ".join(f"word{i}" for i in range(400)),  # past the 256-token limit
] * 12  # 72 texts: more than one internal batch


@pytest.fixture(scope="module")
def compiled_root(tmp_path_factory) -> Path:
    """A cache built from scratch for this module (the build runs in a child process)."""
    return tmp_path_factory.mktemp("compiled")


def test_compiled_model_matches_sentence_transformers_encode(compiled_root):
    """The compiled model is the default only because it gives the library's vectors:
    checked here against a fresh SentenceTransformer, on texts the probes never saw,
    in mixed-length batches and one by one."""
    model = MiniLMEmbedder(cache_root=compiled_root)
    model.load()
    assert model.mode == "compiled"
    library = MiniLMEmbedder(compiled=False)
    want = library.encode(TEXTS)
    assert library.mode == "library"
    got = model.encode(TEXTS)
    assert got.shape == want.shape and got.dtype == np.float32
    assert float((got * want).sum(axis=1).min()) > 0.99999
    single = np.stack([model.encode([t])[0] for t in TEXTS[:6]])
    assert float((single * want[:6]).sum(axis=1).min()) > 0.99999


def test_compiled_cache_is_reused_and_keyed(compiled_root):
    key = compiled_model.cache_key()
    assert key == compiled_model.cache_key()
    directory = compiled_root / key
    MiniLMEmbedder(cache_root=compiled_root).load()
    built = (directory / "model.onnx").stat().st_mtime_ns
    assert sorted(p.name for p in directory.iterdir()) == [
        "meta.json",
        "model.onnx",
        "probes.npy",
        "tokenizer.json",
    ]
    again = MiniLMEmbedder(cache_root=compiled_root)
    again.load()
    assert again.mode == "compiled"
    assert (directory / "model.onnx").stat().st_mtime_ns == built  # loaded, not rebuilt
    assert not [p for p in compiled_root.iterdir() if p.name.startswith(".build-")]


def test_unused_cache_entries_are_pruned(compiled_root):
    import os
    import time

    stale, recent, crashed = (compiled_root / n for n in ("0" * 24, "1" * 24, ".build-x"))
    for d in (stale, recent, crashed):
        d.mkdir()
        (d / "model.onnx").write_bytes(b"old")
    month_ago = time.time() - compiled_model.STALE_AFTER_S - 3600
    os.utime(stale, (month_ago, month_ago))  # the crashed build is removed however young
    model = MiniLMEmbedder(cache_root=compiled_root)
    model.load()
    assert model.mode == "compiled"
    assert recent.exists() and not stale.exists() and not crashed.exists()


def test_compiled_model_that_disagrees_is_never_served(compiled_root):
    """Wrong reference vectors (a corrupt or foreign cache) send the embedder back to the
    library, and the bad directory is removed so the next start rebuilds it."""
    directory = compiled_root / compiled_model.cache_key()
    MiniLMEmbedder(cache_root=compiled_root).load()
    probes = np.load(directory / "probes.npy")
    np.save(directory / "probes.npy", -probes)
    model = MiniLMEmbedder(cache_root=compiled_root)
    model.load()
    assert model.mode == "library"
    assert not directory.exists()
    assert model.encode(["still embeds"]).shape == (1, 384)


def test_unwritable_cache_falls_back_to_the_library(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model = MiniLMEmbedder(cache_root=blocker / "cache")
    model.load()
    assert model.mode == "library"
    assert model.encode(["still embeds"]).shape == (1, 384)


def test_forward_passes_group_texts_of_similar_length():
    groups = compiled_model._groups
    assert groups([]) == []
    assert groups([28, 27, 29, 28]) == [[1, 0, 3, 2]]  # a burst of similar notes: one pass
    mixed = groups([3, 40, 4, 41, 200])
    assert mixed == [[0, 2], [1, 3], [4]]  # padding never exceeds a quarter of real tokens
    many = groups([10] * 150)
    assert [len(g) for g in many] == [64, 64, 22]
    assert sorted(i for g in many for i in g) == list(range(150))


def test_deterministic_test_embedder_is_deterministic():
    e = DeterministicTestEmbedder()
    a, b = e.encode(["red apple pie", "red apple pie"])
    assert np.array_equal(a, b)
    c = e.encode(["apple pie recipe"])[0]
    d = e.encode(["quantum chromodynamics"])[0]
    assert a @ c > a @ d


def test_vector_cache_is_bounded_lru():
    cache = VectorCache(2)
    k1, k2, k3 = (VectorCache.key(t) for t in "abc")
    cache.put(k1, np.ones(2))
    cache.put(k2, np.ones(2))
    assert cache.get(k1) is not None  # k1 is now most recent
    cache.put(k3, np.ones(2))
    assert cache.get(k2) is None and cache.get(k1) is not None
