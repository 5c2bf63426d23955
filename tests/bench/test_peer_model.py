"""bench/peer_mempalace.py gives MemPalace our own MiniLM, made offline: the six files that
chromadb's ``ONNXMiniLM_L6_V2`` looks for, whose vectors (pooled and normalised as chromadb
does) are the ones our embedder makes. Without this the side-by-side figures could compare
two different models, or a download that this machine cannot make. MemPalace itself is not
needed here: the run that installs it is the benchmark's.

Covers: bench/peer_mempalace.py
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.peer_mempalace import CHROMA_FILES, chroma_model
from trusty_memory.workers.embedder.embedding import make_embedder

pytestmark = pytest.mark.slow

TEXTS = [
    "what did we decide about the billing service",
    "Note 12: we discussed TLS certificates and decided to revisit item 84 next sprint.",
    "short",
]


def _chromadb_forward(directory, texts: list[str]) -> np.ndarray:
    """chromadb's ``_forward``: tokens padded to 256, last hidden state, masked mean, unit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=256)
    encoded = [tokenizer.encode(t) for t in texts]
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
    session = ort.InferenceSession(str(directory / "model.onnx"))
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    hidden = session.run(None, feed)[0]
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_the_peer_gets_our_minilm_offline(tmp_path):
    directory = chroma_model(tmp_path)
    assert directory == tmp_path / ".cache/chroma/onnx_models/all-MiniLM-L6-v2/onnx"
    assert sorted(p.name for p in directory.iterdir()) == sorted(CHROMA_FILES)
    ours = make_embedder("minilm")
    ours.load()
    want = ours.encode(TEXTS)
    got = _chromadb_forward(directory, TEXTS)
    assert float((got * want).sum(axis=1).min()) > 0.9999
    assert chroma_model(tmp_path) == directory  # made once, then found
