"""Every tool against the real daemon, every result field checked against the contract.

The ``serve`` process starts the daemon itself (the client's autostart) in a throw-away
home; the fixture stops it afterwards. These tests need the engine; they fail without it.

Covers: client/mcp/tools.py client/mcp/session.py client/mcp/relay.py client/mcp/host.py
    client/mcp/server.py client/aio.py
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from pathlib import Path

import pytest

from tests.conftest import Daemon
from tests.mcp.conftest import (
    RawServe,
    sdk_session,
    short_tmp,
    stop_daemon_in,
    tool_error,
    tool_json,
    wait_for,
)
from trusty_memory.client.sync import Client

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
HIT_KEYS = ["drawer_id", "content", "score", "layer", "tags", "importance"]
DRAWER_KEYS = ["drawer_id", "content", "importance", "tags", "created_at", "room"]  # + room
TRIPLE_KEYS = [
    "subject",
    "predicate",
    "object",
    "valid_from",
    "valid_to",
    "confidence",
    "provenance",
]


@pytest.fixture(scope="module")
def home():
    path = short_tmp("tmd-")
    yield path
    stop_daemon_in(path)


def check_hit(hit):
    assert list(hit) == HIT_KEYS
    uuid.UUID(hit["drawer_id"])
    assert isinstance(hit["content"], str)
    assert isinstance(hit["score"], float)
    assert isinstance(hit["layer"], int) and 0 <= hit["layer"] <= 3
    assert isinstance(hit["tags"], list) and all(isinstance(t, str) for t in hit["tags"])
    assert isinstance(hit["importance"], float) and 0.0 <= hit["importance"] <= 1.0


def check_drawer(drawer):
    assert list(drawer) == DRAWER_KEYS
    uuid.UUID(drawer["drawer_id"])
    assert isinstance(drawer["content"], str)
    assert 0.0 <= drawer["importance"] <= 1.0
    assert isinstance(drawer["tags"], list)
    assert RFC3339.match(drawer["created_at"]), drawer["created_at"]
    assert isinstance(drawer["room"], str)


async def call(session, tool, /, **arguments):
    return tool_json(await session.call_tool(tool, arguments, read_timeout_seconds=120))


async def fails(session, tool, /, **arguments) -> str:
    """A failed call's message: an ``isError`` result (the SDK client's latest revision)."""
    return tool_error(await session.call_tool(tool, arguments, read_timeout_seconds=120))


def test_all_tools_against_the_daemon(home):
    async def go():
        async with sdk_session(home) as s:
            created = await call(s, "palace_create", name="client-acme", description="Acme")
            assert created == {"palace_id": "client-acme", "status": "created"}
            assert "client-acme" in await fails(s, "palace_create", name="client-acme")
            listed = await call(s, "palace_list")
            assert list(listed) == ["palaces"] and "client-acme" in listed["palaces"]
            assert "nowhere" in await fails(s, "memory_recall", palace="nowhere", query="q")

            text = "The API gateway validates JWT tokens using RS256."
            stored = await call(
                s,
                "memory_remember",
                palace="client-acme",
                text=text,
                room="Backend",
                tags=["auth", "jwt", "api-gateway"],
            )
            assert list(stored) == ["drawer_id", "palace", "status"]
            assert stored["palace"] == "client-acme" and stored["status"] == "stored"
            assert uuid.UUID(stored["drawer_id"]).version == 4
            drawer_id = stored["drawer_id"]

            for tool in ("memory_recall", "memory_recall_deep"):
                recalled = await call(
                    s,
                    tool,
                    palace="client-acme",
                    query="How does token validation work?",
                    top_k=5,
                )
                assert list(recalled) == ["palace", "query", "results"]
                assert recalled["palace"] == "client-acme"
                assert recalled["query"] == "How does token validation work?"
                assert 1 <= len(recalled["results"]) <= 5
                for hit in recalled["results"]:
                    check_hit(hit)
                mine = next(h for h in recalled["results"] if h["drawer_id"] == drawer_id)
                assert mine["content"] == text
                assert mine["tags"] == ["auth", "jwt", "api-gateway"]
            assert recalled["results"][0]["layer"] == 3  # deep search says so

            listing = await call(s, "memory_list", palace="client-acme", room="backend", tag="auth")
            assert list(listing) == ["palace", "drawers"] and listing["palace"] == "client-acme"
            assert [d["drawer_id"] for d in listing["drawers"]] == [drawer_id]
            for drawer in listing["drawers"]:
                check_drawer(drawer)
            assert listing["drawers"][0]["room"] == "Backend"  # as remembered
            assert (await call(s, "memory_list", palace="client-acme", tag="nope"))["drawers"] == []

            asserted = await call(
                s,
                "kg_assert",
                palace="client-acme",
                subject="auth-service",
                predicate="deployed_version",
                object="2.4.1",
                confidence=0.95,
                provenance="deploy-log-2026-05-10",
            )
            assert asserted == {"status": "asserted"}
            triples = await call(s, "kg_query", palace="client-acme", subject="auth-service")
            assert list(triples) == ["subject", "triples"]
            assert triples["subject"] == "auth-service"
            (triple,) = triples["triples"]
            assert list(triple) == TRIPLE_KEYS
            assert triple["object"] == "2.4.1" and triple["valid_to"] is None
            assert triple["confidence"] == 0.95
            assert triple["provenance"] == "deploy-log-2026-05-10"
            assert RFC3339.match(triple["valid_from"])
            await call(
                s,
                "kg_assert",
                palace="client-acme",
                subject="auth-service",
                predicate="deployed_version",
                object="2.5.0",
            )
            (triple,) = (await call(s, "kg_query", palace="client-acme", subject="auth-service"))[
                "triples"
            ]
            assert triple["object"] == "2.5.0" and triple["confidence"] == 1.0
            assert triple["provenance"] is None

            info = await call(s, "palace_info", palace="client-acme")
            assert list(info) == ["id", "name", "drawer_count", "data_dir"]
            assert info["id"] == info["name"] == "client-acme"
            assert info["drawer_count"] == 1
            assert Path(info["data_dir"]).is_dir()

            forgotten = await call(s, "memory_forget", palace="client-acme", drawer_id=drawer_id)
            assert forgotten == {
                "status": "deleted",
                "drawer_id": drawer_id,
                "palace": "client-acme",
            }
            assert drawer_id in await fails(
                s, "memory_forget", palace="client-acme", drawer_id=drawer_id
            )
            assert (await call(s, "memory_list", palace="client-acme"))["drawers"] == []
            assert (await call(s, "palace_info", palace="client-acme"))["drawer_count"] == 0

    asyncio.run(go())


def test_palace_not_found_and_unknown_arguments_by_protocol_version(home):
    """Relayed sessions, errors by the revision each negotiated. The latest (the SDK
    client's) is told how to create a missing palace and which existing one is near, and
    a call with an argument the tool does not declare is refused, naming the nearest known
    one, with nothing stored. A 2024-11-05 session gets the contract's -32603 with the
    daemon's own message, byte for byte, and an undeclared argument ignored, as always."""

    async def go():
        async with sdk_session(home) as s:
            await call(s, "palace_create", name="notes")
            assert await fails(s, "memory_recall", palace="notez", query="q") == (
                "palace not found: notez; did you mean 'notes'? To create 'notez', call the"
                ' palace_create tool with {"name": "notez"}.'
            )
            assert await fails(s, "palace_info", palace="qqqqqqqq") == (
                "palace not found: qqqqqqqq. To create 'qqqqqqqq', call the palace_create"
                ' tool with {"name": "qqqqqqqq"}.'
            )
            typo = await fails(s, "memory_remember", palace="notes", text="typo", tgas=["x"])
            assert typo == "memory_remember: unknown argument 'tgas' (did you mean 'tags'?)"
            assert (await call(s, "memory_list", palace="notes"))["drawers"] == []

    asyncio.run(go())
    raw = RawServe(home)
    try:
        raw.initialize("2024-11-05")
        raw.request(1, "tools/call", {"name": "memory_recall",
                                      "arguments": {"palace": "notez", "query": "q"}})  # fmt: skip
        assert raw.lines.get(timeout=120) == (
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"palace not found:'
            b' notez"}}\n'
        )
        stored = raw.tool(2, "memory_remember", {"palace": "notes", "text": "t", "tgas": ["x"]})
        assert stored["result"]["structuredContent"]["status"] == "stored"
    finally:
        raw.kill()


def test_rooms(home):
    async def go():
        async with sdk_session(home) as s:
            await call(s, "palace_create", name="rooms")
            ids = {}
            for label, room in [
                ("none", None),
                ("empty", ""),
                ("lower", "frontend"),
                ("custom", "Ops-Team"),
            ]:
                args = {"palace": "rooms", "text": f"room test {label}"}
                if room is not None:
                    args["room"] = room
                ids[label] = (await call(s, "memory_remember", **args))["drawer_id"]

            async def in_room(room):
                listing = await call(s, "memory_list", palace="rooms", room=room)
                return {d["drawer_id"] for d in listing["drawers"]}

            assert await in_room("General") == {ids["none"], ids["empty"]}
            assert await in_room("Frontend") == {ids["lower"]}
            assert await in_room("FRONTEND") == {ids["lower"]}
            assert await in_room("Ops-Team") == {ids["custom"]}

    asyncio.run(go())


def test_default_palace_is_created_and_used(home):
    async def go():
        async with sdk_session(home, "--palace", "my-project") as s:
            assert "my-project" in (await call(s, "palace_list"))["palaces"]
            stored = await call(s, "memory_remember", text="defaults work")
            assert stored["palace"] == "my-project"
            recalled = await call(s, "memory_recall", query="defaults work")
            assert recalled["palace"] == "my-project"
            assert stored["drawer_id"] in [h["drawer_id"] for h in recalled["results"]]
            # an explicit palace argument still wins
            await call(s, "palace_create", name="elsewhere")
            assert (await call(s, "palace_info", palace="elsewhere"))["drawer_count"] == 0
        # a second session on an existing default palace: PALACE_EXISTS is ignored
        async with sdk_session(home, "--palace", "my-project") as s:
            assert (await call(s, "palace_info"))["drawer_count"] == 1

    asyncio.run(go())


def test_no_torch_in_the_serve_process(home, tmp_path):
    modules_file = tmp_path / "modules.txt"
    s = RawServe(home, "--palace", "torchless", TRUSTY_MEMORY_SERVE_DEBUG_MODULES=str(modules_file))
    try:
        s.initialize()
        assert "result" in s.tool(1, "memory_remember", {"text": "embeddings happen elsewhere"})
        assert "result" in s.tool(2, "memory_recall", {"query": "embeddings"})
        maps = Path(f"/proc/{s.proc.pid}/maps").read_text()
        assert "libtorch" not in maps and "onnxruntime" not in maps
        s.close_stdin()
        assert s.wait(30) == 0
    finally:
        s.kill()
    modules = set(modules_file.read_text().split())
    assert "trusty_memory.client.mcp.relay" in modules  # the hook saw a relayed session
    # The relay is the standard library: the SDK, pydantic and ZeroMQ live in the daemon's
    # MCP host, and the model stack in its embedders.
    for heavy in ("mcp", "pydantic", "zmq", "asyncio", "torch", "sentence_transformers",
                  "transformers", "hnswlib", "numpy"):  # fmt: skip
        assert heavy not in modules, heavy


def test_the_mcp_host_holds_the_sdk_but_not_the_model(home):
    with Client(Daemon(home).config) as c:
        host_pid = c.status()["mcp_host_pid"]
    assert host_pid

    def maps() -> str:
        return Path(f"/proc/{host_pid}/maps").read_text()

    # the SDK's validation runs here, loaded after start-up (mcp/plain_calls.py)
    assert wait_for(lambda: "pydantic_core" in maps(), 60)
    assert "libtorch" not in maps() and "onnxruntime" not in maps()


def test_autostart_in_a_fresh_home_answers_initialize_at_once():
    fresh = short_tmp("tmf-")
    try:
        s = RawServe(fresh, "--palace", "cold")
        try:
            resp = s.initialize()
            assert resp["result"]["serverInfo"]["default_palace"] == "cold"
            stored = s.tool(1, "memory_remember", {"text": "first words"}, timeout=180)
            assert stored["result"]["structuredContent"]["palace"] == "cold"
            s.close_stdin()
            assert s.wait(30) == 0
        finally:
            s.kill()
        assert (fresh / "palaces" / "cold").is_dir()
    finally:
        stop_daemon_in(fresh)
        os.system(f"rm -rf {fresh}")
