"""A TorchScript-frozen forward pass for a sentence-transformers mean-pooling model.

Why: a short query through MiniLM is ~12 tokens, so each of the model's ~200 operators
does very little arithmetic and PyTorch's eager dispatch overhead is a large share of
the time. Tracing the forward pass once (transformer, mean pooling, L2 normalisation)
and freezing it lets TorchScript fold constants and fuse ops through oneDNN: the same
fp32 maths, measured on this 2-core machine at about 3.7 ms against 7 ms per single query
and ~10% faster for batches of 16 (BENCHMARKS.md, "Embedder").

Safety: tracing records one path through the model's Python, so ``freeze`` checks the
frozen pass against ``SentenceTransformer.encode`` on probe texts of very different
lengths and batch sizes, and returns None (the caller keeps the eager path) unless
every vector matches to cosine >= ``MIN_COSINE``. Models whose modules are not exactly
Transformer -> mean Pooling -> Normalize are never frozen.
"""

from __future__ import annotations

import warnings

import numpy as np
import structlog
import torch

log = structlog.get_logger(__name__)

MIN_COSINE = 0.99999
BATCH = 64  # texts per forward pass; sorted by length first, as encode() does
PROBES = [
    "hi",
    "what did we decide about the billing service?",
    "  Leading and trailing spaces, UNICODE café naïve 東京, and punctuation!?  ",
    " ".join(["a long turn that runs past the model's 256-token limit"] * 40),
]


class _MeanPooled(torch.nn.Module):
    """Transformer output -> masked mean over tokens -> unit length (what the
    Pooling(mean) and Normalize modules compute)."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2.0, dim=1)


class FrozenForward:
    def __init__(self, model, module: torch.jit.ScriptModule, dim: int) -> None:
        self.model = model  # the SentenceTransformer: its preprocess() tokenises exactly
        self.module = module
        self.dim = dim

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            out[rows] = self._forward([texts[i] for i in rows])
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        features = self.model.preprocess(texts)
        with torch.inference_mode():
            vecs = self.module(
                features["input_ids"], features["attention_mask"], features["token_type_ids"]
            )
        return vecs.numpy()


def freeze(model) -> FrozenForward | None:
    """A verified frozen forward pass for ``model``, or None to keep the eager one."""
    try:
        names = [type(m).__name__ for m in model]
        pooling = model[1].get_config_dict() if len(names) > 1 else {}
        mean = pooling.get("pooling_mode") == "mean"
        if names != ["Transformer", "Pooling", "Normalize"] or not mean:
            log.info("embedder stays eager: unsupported module stack", modules=names)
            return None
        example = model.preprocess(PROBES[:2])
        inputs = (example["input_ids"], example["attention_mask"], example["token_type_ids"])
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python
            traced = torch.jit.trace(_MeanPooled(model[0].auto_model).eval(), inputs)
            module = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
        frozen = FrozenForward(model, module, int(pooling["embedding_dimension"]))
        worst = _worst_cosine(model, frozen)
    except Exception as exc:  # any failure means the eager path, never a dead embedder
        log.warning("embedder stays eager: freezing failed", error=repr(exc))
        return None
    if worst < MIN_COSINE:
        log.warning("embedder stays eager: frozen pass disagrees", worst_cosine=worst)
        return None
    log.info("embedder forward frozen", worst_cosine=round(worst, 7))
    return frozen


def _worst_cosine(model, frozen: FrozenForward) -> float:
    """Lowest cosine between frozen and eager vectors over the probes, alone and batched."""
    want = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    got = np.concatenate([frozen.encode([t]) for t in PROBES] + [frozen.encode(PROBES)])
    return float(((got * np.concatenate([want, want])).sum(axis=1)).min())
