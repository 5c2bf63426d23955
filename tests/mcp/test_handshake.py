"""The handshake: answered at once, with the contract's ``serverInfo``, no daemon needed.

Covers: client/mcp/stdio.py client/mcp/server.py common/__init__.py
"""

from __future__ import annotations

import asyncio
import shutil
import time

from tests.mcp.conftest import sdk_session
from trusty_memory.client.mcp.stdio import HANDSHAKE_PROTOCOL_VERSIONS
from trusty_memory.common import __version__


def test_initialize_result_without_palace(raw_serve):
    s = raw_serve()
    resp = s.initialize()
    assert resp == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "trusty-memory", "version": __version__},
        },
    }
    assert "default_palace" not in resp["result"]["serverInfo"]


def test_initialize_result_with_palace(raw_serve):
    s = raw_serve("--palace", "my-project")
    info = s.initialize()["result"]["serverInfo"]
    assert info == {"name": "trusty-memory", "version": __version__, "default_palace": "my-project"}


def test_protocol_version_is_the_clients_when_supported(raw_serve):
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        assert raw_serve().initialize(version)["result"]["protocolVersion"] == version
    # An unknown version gets our latest, as the SDK would answer.
    latest = HANDSHAKE_PROTOCOL_VERSIONS[-1]
    assert raw_serve().initialize("1999-01-01")["result"]["protocolVersion"] == latest


def test_edge_versions_match_the_sdk():
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS as SDK_VERSIONS

    assert tuple(SDK_VERSIONS) == HANDSHAKE_PROTOCOL_VERSIONS


def test_initialized_notification_gets_no_answer_and_ping_works(raw_serve):
    s = raw_serve()
    s.initialize()  # sends notifications/initialized too
    s.write({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}})
    assert s.silent(0.5)
    assert s.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert s.silent(0.3)


def test_sdk_client_handshake_and_ping(mcp_home):
    async def go():
        async with sdk_session(mcp_home, "--palace", "proj") as session:
            await session.send_ping()
            init = session.initialize_result
            assert init is not None
            assert init.server_info.name == "trusty-memory"
            assert init.capabilities.tools is not None

    asyncio.run(go())


def test_initialize_answered_while_daemon_cannot_start(raw_serve, tmp_path):
    """No daemon, and none can start (the frontend points nowhere): handshake is instant."""
    s = raw_serve(
        "--palace",
        "proj",
        TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9",
    )
    t0 = time.perf_counter()
    assert s.initialize()["result"]["serverInfo"]["default_palace"] == "proj"
    assert time.perf_counter() - t0 < 1.0
    assert len(s.call(1, "tools/list")["result"]["tools"]) == 10


def test_serve_without_a_palace_starts_no_daemon_until_a_tool_is_called(raw_serve):
    # It loads the daemon client in the background, for a faster first tool call, but must
    # not connect: an agent that never calls a tool leaves no daemon behind.
    from tests.conftest import Daemon
    from tests.mcp.conftest import short_tmp, stop_daemon_in
    from trusty_memory.client.autostart import daemon_pid

    home = short_tmp("tmn-")
    try:
        s = raw_serve(home=home)
        s.initialize()
        assert s.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
        time.sleep(1.0)
        assert daemon_pid(Daemon(home).config) is None
    finally:
        stop_daemon_in(home)
        shutil.rmtree(home, ignore_errors=True)
