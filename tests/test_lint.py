"""The code base stays ruff-clean (lint rules live in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    out = subprocess.run([ruff, "check", "--quiet", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
