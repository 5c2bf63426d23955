"""What the worker template imports before it forks: nothing that starts a thread.

sqlite-utils imports pandas whenever it is installed; with pyarrow beside it (common in an
agent's Python environment) that starts jemalloc's background thread, and the template,
counting two threads, refuses to fork (seen on a 16-core host). A stand-in ``pandas``
package on the path says whether anything still imports it.

Covers: workers/template.py workers/store/__init__.py
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def test_preload_never_imports_pandas_even_when_installed(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "pandas"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('pandas was imported')\n")
    script = textwrap.dedent(
        """
        import sys
        from trusty_memory.workers import template
        template.preload()
        import sqlite_utils.db
        assert sqlite_utils.db.pd is None, sqlite_utils.db.pd
        count, names = template.threads()
        print(count, names)
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
        "TRUSTY_MEMORY_HOME": str(tmp_path / "home"),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("1 "), out.stdout
