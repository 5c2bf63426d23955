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
