"""The MCP-over-HTTP endpoint works inside the sandbox its unit asks for.

``service install --http`` writes ``trusty-memory-http.service``; its sandbox is rebuilt
here from the unit's lines as ``test_service_sandbox.py`` rebuilds the daemon's (same
helper, same limits: no systemd, no user, IPC, PID or cgroup isolation, and no
``IPAddressAllow=``/``IPAddressDeny=``, which systemd applies with cgroup BPF). The unit's
ExecStart runs there (with ``--json`` added, to learn its pid), beside a daemon a client
started outside: it answers MCP over HTTP with tool calls served by that daemon, and
SIGTERM ends it with exit code 0.

Needs root (namespaces), ``unshare``, ``setpriv``, libseccomp and ``systemd-analyze``.

Covers: client/cli/systemd.py client/mcp/http_service.py
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Daemon
from tests.engine.test_service_sandbox import PROBE, sandboxed
from tests.mcp.conftest import tool_json, wait_for
from tests.mcp.test_http import _listening, free_port
from trusty_memory.client.cli import systemd as service
from trusty_memory.common.config import load_config
from trusty_memory.workers.embedder import compiled_model

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]


async def recall(url: str, token: str) -> dict:
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("memory_recall", {"query": "staging port", "top_k": 1})
        return tool_json(result)


def test_the_http_endpoint_serves_inside_its_units_sandbox(monkeypatch):
    cache = compiled_model.default_cache_root()
    if not compiled_model.entries(cache):
        pytest.skip(f"no compiled model in {cache}: the daemon needs one")
    home = Path(tempfile.mkdtemp(prefix=".tm-sbh-", dir=Path.home()))
    work = Path(tempfile.mkdtemp(prefix=".tm-sbh-work-", dir=Path.home()))
    outside_tmp = Path(tempfile.mkdtemp(prefix="tm-sbh-"))
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(home))
    port = free_port()
    endpoint = service.Endpoint(f"127.0.0.1:{port}", palace="notes")
    unit = service.build_unit(load_config(), "system", run_as="root", http=endpoint)
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}

    def cli(*args: str) -> str:
        done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    proc = None
    try:
        # The rules are in force where it runs: as the daemon's, but it may listen on inet.
        probe_cmd = sandboxed(unit.text, work, [sys.executable, "-c", PROBE])
        probe_env = {**os.environ, "OUTSIDE_TMP": str(outside_tmp)}
        probe = subprocess.run(probe_cmd, env=probe_env, capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, probe.stderr
        results = dict(line.split(" ", 1) for line in probe.stdout.splitlines())
        assert results == {
            "wx-mmap": "refused 1", "inet": "allowed", "unix": "allowed", "chroot": "refused 1",
            "write-usr": "refused 30", "write-home": "allowed", "see-tmp-home": "refused 2",
        }, probe.stdout  # fmt: skip
        # A daemon a client started, outside the sandbox, holds a note.
        cli("palace", "create", "notes")
        cli("remember", "notes", "The staging DB is on port 5433", "--room", "Configuration")
        log = work / "http.out"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                sandboxed(unit.text, work, [*unit.command, "--json"]),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        assert wait_for(lambda: '"url"' in log.read_text(), 60), log.read_text()
        started = json.loads(next(x for x in log.read_text().splitlines() if '"url"' in x))
        assert started["url"] == f"http://127.0.0.1:{port}/mcp"
        token = (home / "http-token").read_text().strip()  # made inside, in the home
        found = asyncio.run(recall(started["url"], token))
        assert "5433" in found["results"][0]["content"]
        os.kill(started["pid"], signal.SIGTERM)  # no PID namespace: its pid here too
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert not _listening(port)
        said = log.read_text()
        assert "Traceback" not in said and "not permitted" not in said.lower(), said
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        Daemon(home).stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(outside_tmp, ignore_errors=True)
