"""An actor whose daemon died before it finished starting stops by itself.

A daemon stopped right after it started used to leave its embedder (~180 MB) and dreamer
running for good: they read their parent's pid only once started, by when the daemon was
gone and init had adopted them. Now the daemon names itself in the environment of every
child (``TRUSTY_MEMORY_PARENT_PID``), and each actor watches that pid. Here the named
supervisor is a process that has already exited, as the daemon would have.

Covers: workers/base.py dreamer/scheduler.py client/mcp/host.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import _short_tmp
from trusty_memory.common.home import PARENT_ENV

pytestmark = pytest.mark.slow


def a_dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


@pytest.mark.parametrize(
    ("module", "says"),
    [
        (["trusty_memory.workers.embedder.worker"], "parent gone; stopping"),
        (["trusty_memory.dreamer", "--supervised"], "daemon gone; stopping"),
        (["trusty_memory.client.mcp.host"], "daemon gone; serving the open sessions"),
    ],
)
def test_an_actor_whose_daemon_is_gone_stops(module, says):
    home = _short_tmp("tmo-")
    (home / "run").mkdir(mode=0o700)
    env = {
        **os.environ,
        PARENT_ENV: str(a_dead_pid()),
        "TRUSTY_MEMORY_HOME": str(home),
        "TRUSTY_MEMORY_RUN_DIR": str(home / "run"),
        "TRUSTY_MEMORY_LOG": "info",
        "TRUSTY_MEMORY_BROKER_HEARTBEAT_S": "0.2",
        "TRUSTY_MEMORY_DREAMER_POLL_S": "0.2",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", *module],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr.decode()[-2000:]
        assert says in stderr.decode(), stderr.decode()[-2000:]  # stopped for that reason
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"{module[0]} kept running with its daemon gone")
