"""The product folders type-check: mypy, with the settings in pyproject.toml [tool.mypy],
run by ``.ci/typecheck`` (which lays out the folder-by-folder package map mypy cannot
follow by itself).

``.ci/run`` runs this file with the rest of the suite (README's test command), so a type
error fails CI like any test.

Covers: pyproject.toml
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def typecheck(*folders: str) -> subprocess.CompletedProcess:
    """``.ci/typecheck`` with this interpreter's mypy (the test extra installs it)."""
    env = {**os.environ, "MYPY": str(BIN / "mypy"), "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(ROOT / ".ci" / "typecheck"), *folders],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=590,
    )


# Cold (a fresh clone has no .mypy_cache) it reads torch's and transformers' types too:
# about a minute alone, several on a busy machine.
@pytest.mark.timeout(600)
def test_every_product_folder_is_type_clean():
    out = typecheck()
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout
