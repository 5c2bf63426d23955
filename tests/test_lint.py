"""The code base stays ruff-clean and keeps its import rules (both live in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


def test_ruff_check_is_clean():
    out = subprocess.run(
        [tool("ruff"), "check", "--quiet", str(ROOT)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_import_rules_hold():
    """Each actor imports ``common`` and its own folder (docs/architecture.md): checked by
    import-linter over the installed package, with the contracts in pyproject.toml."""
    out = subprocess.run(
        [tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout
