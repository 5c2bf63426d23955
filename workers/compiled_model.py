"""MiniLM compiled once per machine, then served without sentence-transformers in memory.

Why: importing sentence-transformers (and transformers behind it) costs ~190 MB of RSS on
top of torch's ~220 MB, and a long-running embedder would carry it for its whole life
only to tokenise and run one forward pass. So the model is compiled by a short-lived
child process that does load it through ``SentenceTransformer`` (``model_build.py``):
the transformer, mean pooling and normalisation traced and frozen with TorchScript, the
fast tokenizer saved as JSON, and reference vectors of probe texts computed by
``SentenceTransformer.encode``. The embedder then loads only torch, ``tokenizers`` and
those files (~350 MB instead of ~670 MB) and encodes the probes again at every load:
a compiled model that does not reproduce the library's vectors is never served, and
the embedder falls back to sentence-transformers in process.

Frozen TorchScript is also faster than eager PyTorch for the short texts agents send: a
query of ~12 tokens does little arithmetic per operator, so eager dispatch overhead is
most of the time (BENCHMARKS.md, "Embedder": ~4 ms against ~7 ms for one query).

The cache holds one directory per key. The key hashes everything that could change the
result: the model files (names, sizes, mtimes), the versions of torch,
sentence-transformers, transformers and tokenizers, the CPU's flags (oneDNN lays weights
out for the instruction set it finds) and ``FORMAT``. A build writes to a temporary
directory and renames it into place under a file lock, so a crash or two embedders
starting together never leave a half-written model.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np

FORMAT = 1  # bump when the files' layout or the traced module changes
BATCH = 64  # texts per forward pass; sorted by length first, as encode() does
MIN_COSINE = 0.99999
BUILD_TIMEOUT_S = 600
PROBES = [
    "",
    "hi",
    "what did we decide about the billing service?",
    "  Leading and trailing spaces, UNICODE café naïve 東京, and punctuation!?  ",
    "emoji 🎉 and tabs\tand\nnewlines",
    "Melanie: I painted a sunrise over the lake last weekend, my best one yet!",
    " ".join(["a long turn that runs past the model's 256-token limit"] * 40),
]
_VERSIONED = ("torch", "sentence-transformers", "transformers", "tokenizers")


class CompiledModel:
    """Tokenizer + frozen forward pass: texts -> unit-length float32 vectors."""

    def __init__(self, module, tokenizer, dim: int) -> None:
        self.module = module
        self.tokenizer = tokenizer
        self.dim = dim

    @classmethod
    def load(cls, directory: Path) -> CompiledModel:
        import torch
        from tokenizers import Tokenizer

        meta = json.loads((directory / "meta.json").read_text())
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=meta["max_seq_length"])
        tokenizer.enable_padding(pad_id=meta["pad_id"], pad_token=meta["pad_token"])
        with warnings.catch_warnings():
            # TorchScript is deprecated in favour of torch.export, whose CPU compiler needs
            # a C++ toolchain at build time; TorchScript still runs and is verified here.
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(directory / "forward.pt"), map_location="cpu")
        return cls(module, tokenizer, meta["dim"])

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            out[rows] = self._forward([texts[i] for i in rows])
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        import torch

        encodings = self.tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in encodings])
        mask = torch.tensor([e.attention_mask for e in encodings])
        types = torch.tensor([e.type_ids for e in encodings])
        with torch.inference_mode():
            return self.module(ids, mask, types).numpy()

    def worst_cosine(self, texts: list[str], want: np.ndarray) -> float:
        """Lowest cosine to ``want`` over ``texts``, encoded one by one and as a batch."""
        got = np.concatenate([self.encode([t]) for t in texts] + [self.encode(texts)])
        return float((got * np.concatenate([want, want])).sum(axis=1).min())


def default_cache_root() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("trusty-memory", appauthor=False)) / "compiled-models"


def cache_key(model_path: Path) -> str:
    """A digest of everything the compiled files depend on; cheap (no heavy imports)."""
    parts = [f"format={FORMAT}", f"model={model_path.resolve()}"]
    for file in sorted(p for p in model_path.rglob("*") if p.is_file()):
        st = file.stat()
        parts.append(f"{file.relative_to(model_path)}:{st.st_size}:{st.st_mtime_ns}")
    for dist in _VERSIONED:
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}=missing")
    parts.append(f"cpu={_cpu_flags()}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    import platform

    return platform.machine() + " " + platform.processor()


def ensure(model_path: Path, cache_root: Path, log) -> CompiledModel | None:
    """The verified compiled model for ``model_path``, building it first if need be.

    Returns None (the caller serves through sentence-transformers instead) when the build
    fails or the loaded files do not reproduce the reference vectors.
    """
    directory = cache_root / cache_key(model_path)
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
        with open(cache_root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second embedder waits, then finds the files
            if not (directory / "meta.json").exists():
                _build(model_path, directory, log)
        model = CompiledModel.load(directory)
        probes = np.load(directory / "probes.npy")
        worst = model.worst_cosine(PROBES, probes)
    except Exception as exc:  # any failure means the library path, never a dead embedder
        log.warning("compiled model unavailable", directory=str(directory), error=repr(exc))
        return None
    if worst < MIN_COSINE:
        log.warning("compiled model disagrees with its probes", worst_cosine=worst)
        shutil.rmtree(directory, ignore_errors=True)  # rebuilt on the next start
        return None
    log.info("compiled model loaded", directory=str(directory), worst_cosine=round(worst, 7))
    return model


def _build(model_path: Path, directory: Path, log) -> None:
    """Compile in a child process, so sentence-transformers never stays in our memory."""
    log.info("compiling the model (once per machine)", directory=str(directory))
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=directory.parent))
    try:
        subprocess.run(
            [sys.executable, "-m", "trusty_memory.workers.model_build", str(model_path), str(tmp)],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            timeout=BUILD_TIMEOUT_S,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
        shutil.rmtree(directory, ignore_errors=True)  # a leftover without meta.json
        os.rename(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
