"""The CI-sized reliability suite: ``bench/reliability.py --quick`` against the real daemon.

Each part runs once per module as the script a person runs (a subprocess, its own
throw-away home and daemon), and the tests read its JSON: the hard properties are
asserted one by one, so a failure names the victim or the fault.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_part(part: str, out: Path, *args: str, timeout: float = 600) -> dict:
    """Run one part of the reliability script (quick sizes); its JSON."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.reliability", part, "--quick", "--out", str(out), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=timeout,
    )
    assert out.exists(), done.stderr.decode()[-3000:]
    return json.loads(out.read_text())
