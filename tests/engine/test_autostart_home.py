"""A client started with another home's config starts the daemon of that home.

Covers: client/spawn.py client/autostart.py common/daemon_address.py
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import Daemon


def test_a_client_given_a_home_starts_that_homes_daemon(fresh_home, tmp_path):
    """The process's environment names no home (a script that builds its config itself):
    the daemon it starts must serve the config's home, not the default one, where nobody
    would answer the client and a stray daemon would stay behind."""
    env = {k: v for k, v in os.environ.items() if k != "TRUSTY_MEMORY_HOME"}
    env["XDG_DATA_HOME"] = str(tmp_path / "default-data")  # where the default home would be
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dataclasses import replace\n"
        "from trusty_memory.common.config import load_config\n"
        "from trusty_memory.client.sync import Client\n"
        "config = replace(load_config(), home=Path(sys.argv[1]))\n"
        "config = replace(config, run_dir=config.home / 'run')\n"
        "with Client(config) as c:\n"
        "    c.palace_create('started-here')\n"
        "    print(c.status()['home'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(fresh_home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(fresh_home)
    assert (fresh_home / "palaces" / "started-here").is_dir()
    assert not (tmp_path / "default-data").exists()
    assert Daemon(fresh_home).pid() is not None  # stopped by the fixture
