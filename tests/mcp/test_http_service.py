"""``trusty-memory http``: the MCP-over-HTTP endpoint as a service that stays up.

``serve --http`` ends when its stdin closes (the contract's rule); ``http`` serves the same
endpoint with no stdio at all. Real processes throughout: a starter that spawns the
service and exits at once (its pipe to the service's stdin closing with it), a real daemon
behind the tool calls, and ``serve --http`` beside ``http`` so that their refusals are
compared byte for byte rather than against what either is believed to say.

Covers: client/mcp/http_service.py client/mcp/http.py client/cli/processes.py
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.conftest import INIT_PARAMS, RawServe, tool_json, wait_for
from tests.mcp.test_http import _listening, free_port

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]

# Spawns argv[2:] in a session of its own, its stdin a pipe from here and its output to the
# file argv[1], prints its pid and exits without waiting: the pipe's last writer is gone.
STARTER = """
import subprocess, sys
out = open(sys.argv[1], "ab")
proc = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=out, stderr=out,
                        start_new_session=True)
print(proc.pid)
"""


def started_line(log: Path) -> dict:
    """The JSON object ``http --json`` prints once it listens."""

    def found() -> dict | None:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"url"' in line:
                return json.loads(line)
        return None

    assert wait_for(lambda: found() is not None, 60), log.read_text(errors="replace")
    data = found()
    assert data is not None
    return data


def gone(pid: int) -> bool:
    """No such process, or only its zombie (reaped by whoever adopted it, or not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


async def round_trip(url: str, token: str) -> tuple:
    """initialize, then remember a note in the default palace and list it back."""
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        stored = tool_json(
            await session.call_tool("memory_remember", {"text": "staging DB listens on 5433"})
        )
        listed = tool_json(await session.call_tool("memory_list", {}))
        return init, stored, listed


def test_the_http_service_answers_after_its_starter_exits(daemon, tmp_path):
    log = tmp_path / "http.log"
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(log), *CLI, "http", "--listen", "127.0.0.1:0",
         "--palace", "proj", "--json"],
        stdout=subprocess.PIPE, env=daemon.env,
    )  # fmt: skip
    out, _ = starter.communicate(timeout=30)
    assert starter.returncode == 0
    pid = int(out)
    try:
        started = started_line(log)
        assert started["pid"] == pid and started["default_palace"] == "proj"
        assert started["token_file"] == str(daemon.home / "http-token")
        # Its starter is gone and so is the only writer of its stdin (EOF there), and it
        # was adopted by another process: it still serves, now and a while later.
        assert parent_of(pid) != starter.pid
        time.sleep(1.0)
        assert not gone(pid), log.read_text()
        token = Path(started["token_file"]).read_text().strip()
        assert token not in log.read_text()  # the file is named, the token never printed
        init, stored, listed = asyncio.run(round_trip(started["url"], token))
        assert init.server_info.name == "trusty-memory"
        assert stored["status"] == "stored" and stored["palace"] == "proj"
        assert [d["drawer_id"] for d in listed["drawers"]] == [stored["drawer_id"]]
        # SIGTERM stops it, and the port with it (exit 0: see the test below, where the
        # test is its parent and can read its status)
        port = int(started["url"].rsplit(":", 1)[1].split("/")[0])
        os.kill(pid, signal.SIGTERM)
        assert wait_for(lambda: gone(pid), 10), log.read_text()
        assert not _listening(port)
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def raw(port: int, token: str | None, **headers: str) -> tuple[int, dict, bytes]:
    """An ``initialize`` POST with ``headers`` (Host and Origin among them, as given)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS})
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update({k.replace("_", "-"): v for k, v in headers.items()})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/mcp", body=body, headers=sent)
        response = conn.getresponse()
        kept = {
            k.lower(): v
            for k, v in response.getheaders()
            if k.lower() in ("content-type", "www-authenticate")
        }
        return response.status, kept, response.read()
    finally:
        conn.close()


@pytest.fixture
def both(mcp_home, tmp_path):
    """``serve --http`` (stdin held open) and ``http`` (stdin at EOF from the start), both
    in the shared no-daemon home: the same token file; stopped afterwards."""
    serve_port = free_port()
    serve = RawServe(mcp_home, "--http", f"127.0.0.1:{serve_port}")
    log = tmp_path / "http.log"
    with open(log, "wb") as out:
        service = subprocess.Popen(
            [*CLI, "http", "--listen", "127.0.0.1:0", "--json"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            env={**os.environ, "TRUSTY_MEMORY_HOME": str(mcp_home)},
        )  # fmt: skip
    try:
        serve.initialize()
        assert wait_for(lambda: _listening(serve_port), 30), serve.stderr_text()
        started = started_line(log)
        service_port = int(started["url"].rsplit(":", 1)[1].split("/")[0])
        yield serve_port, service, service_port, log
    finally:
        serve.kill()
        if service.poll() is None:
            service.kill()
            service.wait(5)


def test_the_service_refuses_what_serve_http_refuses_and_stops_on_sigterm(both, mcp_home):
    serve_port, service, port, log = both
    token = (mcp_home / "http-token").read_text().strip()
    cases = {
        "no token": (None, {}),
        "a wrong token": ("not-the-token", {}),
        "another host name": (token, {"Host": "evil.example"}),
        "another host name, same port": (token, {"Host": f"evil.example:{port}"}),
        "another origin": (token, {"Origin": "http://evil.example"}),
    }
    for what, (given, headers) in cases.items():
        status, kept, body = raw(port, given, **headers)
        assert status in (401, 403, 421), (what, status, body)
        # the same refusal as serve --http's, to the byte (the Host header names the port
        # asked, so each server is asked with its own)
        same = {k: v.replace(str(port), str(serve_port)) for k, v in headers.items()}
        assert raw(serve_port, given, **same) == (status, kept, body), what
    assert raw(port, None)[0] == 401 and raw(port, "x")[1]["www-authenticate"].startswith("Bearer")
    # and what both accept: the token, on a loopback name
    for host in ("127.0.0.1", "localhost"):
        status, _, body = raw(port, token, Host=f"{host}:{port}")
        assert status == 200, body
    # stdin was at EOF from the start and it served all along; SIGTERM ends it with 0
    assert service.poll() is None
    t0 = time.monotonic()
    service.send_signal(signal.SIGTERM)
    assert service.wait(10) == 0, log.read_text()
    assert time.monotonic() - t0 < 5.0
    assert not _listening(port)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--listen", "nonsense"], "invalid --listen address"),
        (["--listen", "8.8.8.8:3031"], "--allow-remote"),
        (["--listen", "127.0.0.1:0", "--palace", "../escape"], "invalid palace name"),
    ],
)
def test_bad_flags_exit_2(mcp_home, args, needle):
    done = subprocess.run(
        [*CLI, "http", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, "TRUSTY_MEMORY_HOME": str(mcp_home)},
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("trusty-memory http: ") and needle in done.stderr, done.stderr
