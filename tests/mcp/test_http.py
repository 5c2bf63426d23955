"""``--http ADDR``: the SDK's streamable-HTTP endpoint beside stdio.

Covers: client/mcp/http.py client/mcp/direct.py common/listening.py
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.conftest import INIT_PARAMS, SERVE, serve_env, tool_error, wait_for
from trusty_memory.client.mcp.http import TOKEN_FILE


def free_port() -> int:
    """A port free on every address: one free on 127.0.0.1 alone can still be held on
    another loopback address (a flood test's connections from 127.0.0.2 in TIME_WAIT),
    and then ``--http 0.0.0.0:PORT`` cannot bind it."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def run_fails(home, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SERVE, *args], input=b"", capture_output=True, env=serve_env(home), timeout=30
    )


@pytest.mark.parametrize(
    ("addr", "needle"),
    [
        ("nonsense", "expected HOST:PORT"),
        ("127.0.0.1:99999", "port must be"),
        ("127.0.0.1:http", "port must be"),
        ("::1:3031", "[::1]:PORT"),
        ("no-such-host.invalid:3031", "refusing"),
        ("8.8.8.8:3031", "refusing"),
        ("0.0.0.0:3031", "--allow-remote"),
    ],
)
def test_bad_addresses_exit_2(mcp_home, addr, needle):
    out = run_fails(mcp_home, "--http", addr)
    assert out.returncode == 2
    assert out.stdout == b""
    err = out.stderr.decode()
    assert "--http" in err and needle in err, err


def test_port_in_use_exits_2(mcp_home):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        out = run_fails(mcp_home, "--http", f"127.0.0.1:{busy.getsockname()[1]}")
    assert out.returncode == 2
    assert "cannot listen" in out.stderr.decode()


def test_bad_palace_name_exits_2(mcp_home):
    out = run_fails(mcp_home, "--palace", "../escape")
    assert out.returncode == 2
    assert "invalid palace name" in out.stderr.decode()


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp spells them) listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, hexport = local.split(":")
                if state == "0A" and int(hexport, 16) == port:
                    found.append(addr)
    return found


def _token(home) -> str:
    path = home / TOKEN_FILE
    assert wait_for(path.exists, 10)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # only the user may read it
    return path.read_text().strip()


async def _http_session(url: str, token: str):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        init = await s.initialize()
        tools = await s.list_tools()
        # a failing call: the client negotiates the latest revision, so an isError result
        return init, tools, await s.call_tool("memory_recall", {})


def _raw_initialize(port: int, token: str | None) -> dict:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS}
    ).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads(next(d for d in data if d))


def test_http_companion_serves_the_same_tools(raw_serve, mcp_home):
    port = free_port()
    s = raw_serve(
        "--http",
        f"127.0.0.1:{port}",
        "--palace",
        "proj",
        TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9",
    )
    assert s.initialize()["result"]["serverInfo"]["default_palace"] == "proj"
    assert wait_for(lambda: _listening(port), 10)
    assert _listening(port) == ["0100007F"]  # bound to 127.0.0.1 only
    token = _token(mcp_home)
    # printed at start (the file is written just before the line reaches stderr)
    assert wait_for(lambda: f"Bearer {token}" in s.stderr_text(), 10), s.stderr_text()
    init, tools, error = asyncio.run(_http_session(f"http://127.0.0.1:{port}/mcp", token))
    assert init.server_info.name == "trusty-memory"
    # the SDK client model drops unknown fields: look at the wire for default_palace
    assert _raw_initialize(port, token)["result"]["serverInfo"]["default_palace"] == "proj"
    assert len(tools.tools) == 10
    assert tool_error(error) == "missing 'query'"
    # stdio still works beside it
    assert len(s.call(1, "tools/list")["result"]["tools"]) == 10
    # stdin EOF stops the HTTP side too
    s.close_stdin()
    assert s.wait(10) == 0, s.stderr_text()
    assert not _listening(port)


def test_http_stops_on_sigterm_within_2s(raw_serve):
    port = free_port()
    s = raw_serve("--http", f"127.0.0.1:{port}")
    s.initialize()
    assert wait_for(lambda: _listening(port), 10)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait(5) == 0, s.stderr_text()
    assert time.monotonic() - t0 < 2.0
    assert not _listening(port)


def test_http_refuses_requests_without_the_token_loopback_included(raw_serve, mcp_home):
    port = free_port()
    s = raw_serve("--http", f"127.0.0.1:{port}")
    s.initialize()
    assert wait_for(lambda: _listening(port), 10)
    token = _token(mcp_home)
    for given in (None, "not-the-token", token[:-1]):
        with pytest.raises(urllib.error.HTTPError) as info:
            _raw_initialize(port, given)
        assert info.value.code == 401
        assert info.value.headers["WWW-Authenticate"].startswith("Bearer")
        error = json.loads(info.value.read())["error"]
        assert error["message"].startswith("Unauthorized:") and "Bearer" in error["message"]
    assert _raw_initialize(port, token)["result"]["serverInfo"]["name"] == "trusty-memory"
    # the same token next time: clients configured once keep working
    s.close_stdin()
    assert s.wait(10) == 0
    again = raw_serve("--http", f"127.0.0.1:{port}")
    again.initialize()
    assert wait_for(lambda: _listening(port), 10)
    assert _raw_initialize(port, token)["result"]["serverInfo"]["name"] == "trusty-memory"


def test_allow_remote_warns(raw_serve):
    port = free_port()
    s = raw_serve("--http", f"0.0.0.0:{port}", "--allow-remote")
    s.initialize()
    assert wait_for(lambda: "unencrypted" in s.stderr_text(), 10), s.stderr_text()
    assert _listening(port) == ["00000000"]
    s.close_stdin()
    assert s.wait(10) == 0, s.stderr_text()
