"""Compile MiniLM for the embedder: run as a child process by ``compiled_model.ensure``.

    python -m trusty_memory.workers.model_build MODEL_DIR OUT_DIR

Loads the model through ``SentenceTransformer`` (the library stays the reference), traces
transformer -> masked mean pooling -> L2 normalisation with TorchScript, freezes and
optimises it for inference, and writes to OUT_DIR:

* ``forward.pt``: the frozen module, inputs ``(input_ids, attention_mask, token_type_ids)``;
* ``tokenizer.json``: the fast tokenizer the library uses, exactly as loaded;
* ``probes.npy``: ``SentenceTransformer.encode`` vectors of ``compiled_model.PROBES``;
* ``meta.json``: dimension, truncation length and padding token.

Before exiting 0 it loads OUT_DIR back the way the embedder will and checks token ids
against the library's own preprocessing and vectors against ``probes.npy``. Tracing
records one path through the model's Python, so models whose modules are not exactly
Transformer -> mean Pooling -> Normalize are refused (exit 1) and stay on the library.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from trusty_memory.logs import setup_logging
from trusty_memory.workers.compiled_model import FORMAT, MIN_COSINE, PROBES, CompiledModel


class MeanPooled(torch.nn.Module):
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


class UnsupportedModel(Exception):
    pass


def build(model_path: Path, out: Path) -> float:
    """Write the compiled model to ``out``; returns the worst probe cosine."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path), device="cpu")
    names = [type(m).__name__ for m in model]
    pooling = model[1].get_config_dict() if len(names) > 1 else {}
    if names != ["Transformer", "Pooling", "Normalize"] or pooling.get("pooling_mode") != "mean":
        raise UnsupportedModel(f"module stack {names} is not Transformer -> mean -> Normalize")

    example = model.preprocess(PROBES[1:3])
    inputs = (example["input_ids"], example["attention_mask"], example["token_type_ids"])
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python
        traced = torch.jit.trace(MeanPooled(model[0].auto_model).eval(), inputs)
        module = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
    torch.jit.save(module, str(out / "forward.pt"))
    model.tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    want = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    np.save(out / "probes.npy", want.astype(np.float32))
    meta = {
        "format": FORMAT,
        "dim": int(pooling["embedding_dimension"]),
        "max_seq_length": int(model.max_seq_length),
        "pad_id": int(model.tokenizer.pad_token_id),
        "pad_token": str(model.tokenizer.pad_token),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))

    compiled = CompiledModel.load(out)
    _check_tokens(compiled, model.preprocess(PROBES))
    return compiled.worst_cosine(PROBES, want)


def _check_tokens(compiled: CompiledModel, features: dict) -> None:
    encodings = compiled.tokenizer.encode_batch(PROBES)
    for field, key in (
        ("ids", "input_ids"),
        ("attention_mask", "attention_mask"),
        ("type_ids", "token_type_ids"),
    ):
        ours = np.array([getattr(e, field) for e in encodings])
        if not np.array_equal(ours, features[key].numpy()):
            raise UnsupportedModel(f"tokenizer disagrees with the library on {key}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    log = setup_logging("model-build", default_level="info")
    if len(args) != 2:
        log.error("usage: python -m trusty_memory.workers.model_build MODEL_DIR OUT_DIR")
        return 2
    try:
        worst = build(Path(args[0]), Path(args[1]))
    except UnsupportedModel as exc:
        log.warning("model not compiled", reason=str(exc))
        return 1
    if worst < MIN_COSINE:
        log.warning("model not compiled: frozen pass disagrees", worst_cosine=worst)
        return 1
    log.info("model compiled", out=args[1], worst_cosine=round(worst, 7))
    return 0


if __name__ == "__main__":
    sys.exit(main())
