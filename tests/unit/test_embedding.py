"""The embedders: the real MiniLM from its package, and the test-only hashed one."""

from __future__ import annotations

import numpy as np

from trusty_memory.workers.embedder import VectorCache
from trusty_memory.workers.embedding import DeterministicTestEmbedder, MiniLMEmbedder


def test_minilm_loads_offline_and_gives_unit_vectors():
    model = MiniLMEmbedder()
    vecs = model.encode(
        ["The cat sat on the mat.", "A kitten rested on a rug.", "Stock prices fell."]
    )
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


def test_frozen_forward_matches_sentence_transformers_encode():
    """The frozen pass is the default only because it gives the eager model's vectors:
    checked here on texts the load-time probes never saw, in mixed-length batches."""
    model = MiniLMEmbedder()
    model.load()
    assert model.mode == "frozen"
    texts = [
        "x",
        "When did Caroline go to the LGBTQ support group?",
        "Melanie: I painted a sunrise over the lake last weekend, my best one yet!",
        "   ",
        "emoji 🎉 and tabs\tand\nnewlines",
        " ".join(f"word{i}" for i in range(400)),  # past the 256-token limit
    ] * 12  # 72 texts: more than one internal batch
    want = model._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    got = model.encode(texts)
    assert got.shape == want.shape and got.dtype == np.float32
    assert float((got * want).sum(axis=1).min()) > 0.99999
    single = np.stack([model.encode([t])[0] for t in texts[:6]])
    assert float((single * want[:6]).sum(axis=1).min()) > 0.99999


def test_eager_mode_can_be_chosen():
    model = MiniLMEmbedder(frozen=False)
    model.load()
    assert model.mode == "eager"
    assert model.encode(["eager still works"]).shape == (1, 384)


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
