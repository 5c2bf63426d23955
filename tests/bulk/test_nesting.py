"""Deeply nested metadata sent to ``memory_remember`` (the library and MCP), against the
real daemon: a clear ``INVALID_PARAMS`` naming the field, never a crash. Import lines
have their own tests (``test_import_limits.py``).

Covers: common/bounds.py client/mcp/stdio.py
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Daemon, _short_tmp
from tests.mcp.conftest import RawServe
from trusty_memory.client.mcp.stdio import MAX_NESTING, NESTING_TOO_DEEP
from trusty_memory.client.sync import Client
from trusty_memory.common import bounds
from trusty_memory.common import protocol as p


def nested(depth: int) -> list:
    """``[[[...]]]``, ``depth`` arrays deep, built without recursion."""
    top: list = []
    cur = top
    for _ in range(depth - 1):
        cur.append([])
        cur = cur[0]
    return top


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    yield c
    c.close()


def test_metadata_at_the_bound_is_stored(client):
    client.palace_create("nest-ok")
    inner = bounds.MAX_METADATA_DEPTH - 1  # the metadata object is the first level
    client.remember("nest-ok", "nested at the bound", metadata={"a": nested(inner)})
    assert client.palace_info("nest-ok").drawer_count == 1


@pytest.mark.parametrize("depth", [bounds.MAX_METADATA_DEPTH, 500])
def test_deeper_metadata_is_invalid_params_naming_the_field(client, depth):
    client.palace_create(f"nest-{depth}")
    with pytest.raises(p.TrustyError) as caught:
        client.remember(f"nest-{depth}", "too deep", metadata={"a": nested(depth)})
    assert caught.value.code == p.ErrorCode.INVALID_PARAMS, caught.value
    assert "metadata: nested more than" in caught.value.message, caught.value.message
    assert client.palace_info(f"nest-{depth}").drawer_count == 0


def test_a_request_may_nest_as_deep_as_metadata_may():
    # The envelope, params and arguments sit above a drawer's metadata.
    assert MAX_NESTING >= bounds.MAX_METADATA_DEPTH + 3


@pytest.mark.parametrize("depth", [200, 5_000, 100_000])
def test_deep_metadata_over_mcp_is_a_clear_error(depth):
    home = _short_tmp("tmn-")
    s = RawServe(home, "--palace", "agent")
    try:
        s.initialize()
        deep = "[" * depth + "]" * depth
        raw = (
            '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"memory_remember",'
            f'"arguments":{{"text":"too deep","metadata":{{"a":{deep}}}}}}}}}\n'
        )
        s.write(raw.encode())
        reply = s.recv(timeout=120)
        said = json.dumps(reply)
        assert "RecursionError" not in said and "Traceback" not in s.stderr_text(), said
        error = reply.get("error") or {}
        result = reply.get("result") or {}
        assert error or result.get("isError"), said
        # The same answer on every Python: 3.11's decoder gives up near 1,000 levels,
        # 3.13's parses far deeper, so the edge measures the bytes first.
        assert error.get("message") == f"Parse error: {NESTING_TOO_DEEP}", said
        assert reply["id"] == 7, said  # the id is read from the line it refused
        listed = s.tool(8, "memory_list", {})["result"]["structuredContent"]
        assert listed["drawers"] == []  # nothing stored, and the session still serves
    finally:
        s.kill()
        Daemon(home).stop()
