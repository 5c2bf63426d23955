"""Config comes from the home's config.toml with environment variables on top.

Covers: common/config.py common/logs.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trusty_memory.common.config import load_config


def test_defaults_and_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(tmp_path))
    monkeypatch.delenv("TRUSTY_MEMORY_RUN_DIR", raising=False)
    (tmp_path / "config.toml").write_text("[palace]\nidle_stop_s = 5\n[embedder]\npool_size = 2\n")
    monkeypatch.setenv("TRUSTY_MEMORY_PALACE_MAX_TEXT_BYTES", "1000")
    config = load_config()
    assert config.palace.idle_stop_s == 5.0
    assert config.palace.max_text_bytes == 1000
    assert config.embedder.pool_size == 2
    assert config.run_dir == tmp_path / "run"
    assert config.frontend == f"ipc://{tmp_path}/run/front.sock"
    config.ensure_dirs()
    assert (config.run_dir.stat().st_mode & 0o777) == 0o700


def test_logs_go_to_stderr_as_json_and_respect_rust_log():
    code = (
        "from trusty_memory.common.logs import setup_logging\n"
        "log = setup_logging('t')\n"
        "log.debug('hidden'); log.info('shown', n=1)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"RUST_LOG": "info", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout == ""
    lines = [json.loads(line) for line in out.stderr.splitlines()]
    assert [line["event"] for line in lines] == ["shown"]
    assert lines[0]["actor"] == "t" and lines[0]["level"] == "info"


def test_actors_import_lean_and_still_log_tracebacks():
    # rich (pulled in by transformers) and importlib.metadata would cost every process 7
    # and 2.4 MB for good; an idle palace worker is ~49 MB.
    code = (
        "import sys\n"
        "import trusty_memory.workers.palace, trusty_memory.workers.embedder.worker\n"
        "from trusty_memory.workers.embedder import compiled_model\n"
        "from trusty_memory.common.logs import setup_logging\n"
        "log = setup_logging('t')\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    log.exception('boom')\n"
        "loaded = [m for m in ('rich', 'pygments', 'importlib.metadata') if sys.modules.get(m)]\n"
        "print(loaded, compiled_model.dist_versions(('onnxruntime', 'no-such-dist')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    import onnxruntime

    assert out.stdout.strip() == f"[] {{'onnxruntime': '{onnxruntime.__version__}'}}"
    line = json.loads(out.stderr.splitlines()[-1])
    assert line["event"] == "boom" and "ZeroDivisionError" in line["exception"]


def test_a_home_set_keeps_its_sockets_in_its_run_dir_whatever_xdg_says(tmp_path, monkeypatch):
    """README ("One daemon owns a home"): with TRUSTY_MEMORY_HOME set the sockets are
    always in the home's run/; XDG_RUNTIME_DIR counts only for the default home."""
    monkeypatch.delenv("TRUSTY_MEMORY_RUN_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(tmp_path / "home"))
    assert load_config().run_dir == tmp_path / "home" / "run"
    monkeypatch.delenv("TRUSTY_MEMORY_HOME")
    assert load_config().run_dir == tmp_path / "xdg" / "trusty-memory"
    monkeypatch.setenv("TRUSTY_MEMORY_RUN_DIR", str(tmp_path / "explicit"))
    assert load_config().run_dir == tmp_path / "explicit"
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "with `TRUSTY_MEMORY_HOME` set, always the home's `run/`" in readme
