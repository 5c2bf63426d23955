"""``serve --tools extended``: the added tools and resources through the official SDK client
against a real daemon (autostarted in a throw-away home), and the switch itself: without
it the contract's ten stay exactly as they are.

Every result of the session test is checked against the output schema it was listed with,
strictly (no field the schema does not name, at any depth), as test_output_schemas.py does
for the contract's ten.

Covers: client/mcp/tools_extended.py client/mcp/tools_status.py client/mcp/resources.py
    client/mcp/tool_sets.py client/mcp/tool_schema.py client/mcp/relay.py client/mcp/direct.py
"""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp.shared.exceptions import MCPError

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
from tests.mcp.test_http import _http_session, _listening, _token, free_port
from tests.mcp.test_output_schemas import strict
from trusty_memory.client.mcp import tools_extended as ext
from trusty_memory.client.mcp.tool_sets import tool_definitions
from trusty_memory.client.mcp.tools import TOOL_NAMES
from trusty_memory.client.sync import Client

EXTENDED_NAMES = [*TOOL_NAMES, *ext.TOOLS]


def test_the_contract_set_is_untouched_by_the_extended_code():
    contract = tool_definitions()
    assert [t["name"] for t in contract] == list(TOOL_NAMES)
    extended = tool_definitions(tools="extended")
    assert [t["name"] for t in extended] == EXTENDED_NAMES
    by_name = {t["name"]: t for t in extended}
    # The contract's entries are the same but for kg_query's added as_of.
    for tool in contract:
        other = json.loads(json.dumps(by_name[tool["name"]]))
        as_of = other["inputSchema"]["properties"].pop("as_of", None)
        assert (as_of is not None) is (tool["name"] == "kg_query")
        assert other == tool, tool["name"]
    assert "as_of" not in {t["name"]: t for t in contract}["kg_query"]["inputSchema"]["properties"]
    for tool in extended[len(TOOL_NAMES) :]:
        assert tool["outputSchema"]["type"] == "object", tool["name"]
        hints = tool["annotations"]
        assert set(hints) >= {"title", "readOnlyHint", "destructiveHint", "idempotentHint"}
        for prop, sub in tool["inputSchema"]["properties"].items():
            assert sub.get("description"), (tool["name"], prop)
        Draft202012Validator.check_schema(tool["outputSchema"])
    destructive = {t["name"] for t in extended if t["annotations"]["destructiveHint"]}
    assert destructive == {"memory_forget", "kg_invalidate", "palace_delete"}


def test_the_switch_flag_env_and_config(raw_serve, mcp_home):
    """The relay answers tools/list itself: with the set chosen by flag, env or config."""

    def names(*args: str, **env: str) -> list[str]:
        s = raw_serve(*args, **env)
        init = s.initialize()["result"]
        tools = [t["name"] for t in s.call(1, "tools/list")["result"]["tools"]]
        assert ("resources" in init["capabilities"]) is (len(tools) > len(TOOL_NAMES))
        return tools

    assert names() == list(TOOL_NAMES)
    assert names("--tools", "contract", TRUSTY_MEMORY_TOOLS="extended") == list(TOOL_NAMES)
    assert names("--tools", "extended") == EXTENDED_NAMES
    assert names(TRUSTY_MEMORY_TOOLS="extended") == EXTENDED_NAMES
    (mcp_home / "config.toml").write_text('[mcp]\ntools = "extended"\n')
    try:
        assert names() == EXTENDED_NAMES
    finally:
        (mcp_home / "config.toml").unlink()
    bad = raw_serve(TRUSTY_MEMORY_TOOLS="everything")
    assert bad.wait() == 2
    assert "unknown tool set 'everything'" in bad.stderr_text()
    # Without the set, resources are not served: the contract's -32601.
    s = raw_serve()
    s.initialize()
    assert s.call(2, "resources/list")["error"] == {
        "code": -32601,
        "message": "Method not found: resources/list",
    }


def test_extended_tools_and_resources_through_the_sdk():
    home = short_tmp("tmx-")

    async def go() -> None:
        async with sdk_session(home, "--tools", "extended") as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert list(listed) == EXTENDED_NAMES
            seen: dict[str, list[dict[str, Any]]] = {}

            async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                data = tool_json(await session.call_tool(name, arguments))  # SDK validates
                seen.setdefault(name, []).append(data)
                return data

            async def refused(name: str, arguments: dict[str, Any]) -> str:
                return tool_error(await session.call_tool(name, arguments))  # isError

            p = "ext"
            await call("palace_create", {"name": p})
            stored = await call(
                "memory_remember",
                {"palace": p, "text": "The staging DB listens on port 5433.", "room": "Backend"},
            )
            did = stored["drawer_id"]

            # memory_update: same id, new text found by recall, the old kept in the archive
            got = await call("memory_get", {"palace": p, "drawer_id": did})
            assert got["content"] == "The staging DB listens on port 5433." and got["hits"] == 0
            updated = await call(
                "memory_update",
                {"palace": p, "drawer_id": did, "text": "The staging DB moved to port 6543.",
                 "tags": ["db"], "importance": 0.8},
            )  # fmt: skip
            assert updated["status"] == "updated"
            assert updated["changed"] == ["text", "tags", "importance"]
            got = await call("memory_get", {"palace": p, "drawer_id": did})
            assert (got["content"], got["tags"], got["importance"], got["room"]) == (
                "The staging DB moved to port 6543.",
                ["db"],
                0.8,
                "Backend",
            )
            hits = await call("memory_recall", {"palace": p, "query": "staging database port"})
            assert hits["results"][0]["content"] == "The staging DB moved to port 6543."
            again = await call("memory_update", {"palace": p, "drawer_id": did, "tags": ["db"]})
            assert again == {"drawer_id": did, "palace": p, "status": "unchanged",
                             "changed": [], "previous_version": None}  # fmt: skip
            assert await refused("memory_update", {"palace": p, "drawer_id": did}) == (
                "memory_update: nothing to update: give text, room, tags or importance"
            )
            assert await refused(
                "memory_update", {"palace": p, "drawer_id": did, "importance": 3}
            ) == ("memory_update: 'importance' must be between 0.0 and 1.0, got 3")
            big = "x" * 70_000  # over the default 64 KiB: refused before it costs an embedding
            assert await refused("memory_update", {"palace": p, "drawer_id": did, "text": big}) == (
                "memory_update: text is 70000 bytes; the limit is 65536"
            )
            assert await refused("memory_get", {"palace": p}) == "missing 'drawer_id'"
            missing = "00000000-0000-4000-8000-000000000000"
            assert await refused("memory_get", {"palace": p, "drawer_id": missing}) == (
                f"drawer not found: {missing}"
            )
            # the latest revision is also told how to make the palace
            assert await refused("memory_get", {"palace": "nope", "drawer_id": did}) == (
                "palace not found: nope. To create 'nope', call the palace_create tool with"
                ' {"name": "nope"}.'
            )

            # memory_search: pages through more than one page, with a filter and a phrase
            for i in range(12):
                text = f"Sprint {i} goal: ship the search page"
                await call("memory_remember", {"palace": p, "room": "Planning", "text": text})
            pages, cursor, ids, first_cursor = 0, None, [], None
            while True:
                args = {"palace": p, "query": "sprint goal", "room": "planning", "limit": 5}
                page = await call(
                    "memory_search", {**args, **({"cursor": cursor} if cursor else {})}
                )
                pages += 1
                ids += [d["drawer_id"] for d in page["drawers"]]
                first_cursor = first_cursor or page["next_cursor"]
                if (cursor := page["next_cursor"]) is None:
                    break
            assert pages == 3 and len(set(ids)) == 12
            phrase = await call("memory_search", {"palace": p, "query": '"port 6543"'})
            assert [d["drawer_id"] for d in phrase["drawers"]] == [did]
            listing = await call("memory_search", {"palace": p, "limit": 20})
            assert listing["query"] is None and len(listing["drawers"]) == 13
            assert listing["drawers"][-1]["drawer_id"] == did  # last written first: 12 came after
            assert all(d["score"] is None for d in listing["drawers"])
            future = await call("memory_search", {"palace": p, "since": "2999-01-01"})
            assert future["drawers"] == [] and future["next_cursor"] is None
            assert "it belongs to another query or other filters" in await refused(
                "memory_search", {"palace": p, "query": "ship", "cursor": first_cursor}
            )
            assert await refused("memory_search", {"palace": p, "limit": 0}) == (
                "memory_search: 'limit' must be a positive integer, got 0"
            )

            # the knowledge graph over time
            fact = {"palace": p, "subject": "api", "predicate": "version"}
            await call("kg_assert", {**fact, "object": "1.0"})
            first = (await call("kg_query", {"palace": p, "subject": "api"}))["triples"][0]
            await asyncio.sleep(1.1)  # timestamps have second precision
            await call("kg_assert", {**fact, "object": "2.0"})
            history = await call("kg_history", {"palace": p, "subject": "api"})
            assert [(t["object"], t["valid_to"] is None) for t in history["triples"]] == [
                ("1.0", False),
                ("2.0", True),
            ]
            then = await call(
                "kg_query", {"palace": p, "subject": "api", "as_of": first["valid_from"]}
            )
            assert [t["object"] for t in then["triples"]] == ["1.0"]
            assert await refused("kg_query", {"palace": p, "subject": "api", "as_of": "soon"}) == (
                "as_of: not an RFC 3339 timestamp: 'soon'"
            )
            closed = await call("kg_invalidate", {**fact})
            assert (closed["status"], closed["object"]) == ("invalidated", "2.0")
            assert (await call("kg_query", {"palace": p, "subject": "api"}))["triples"] == []
            assert await refused("kg_invalidate", fact) == "no active fact: api version"

            # stats and health
            stats = await call("memory_stats", {"palace": p})
            assert stats["drawer_count"] == 13 and stats["archived_count"] == 1
            assert stats["room_counts"] == {"Backend": 1, "Planning": 12}
            assert stats["triple_total"] == 2 and stats["triple_count"] == 0
            assert stats["db_bytes"] > 0
            health = await call("health", {})
            assert health["embedder"]["ok"] is True and health["embedder"]["embed_ms"] > 0
            assert health["status"] == "ok" and health["dreamer"]["running"] is True
            assert p in [x["palace"] for x in health["palaces"]]

            # resources
            listed_resources = await session.list_resources()
            uris = [r.uri for r in listed_resources.resources]
            assert f"trusty-memory://palace/{p}" in uris  # palaces only: listing wakes none
            read = await session.read_resource(f"trusty-memory://palace/{p}/drawer/{did}")
            drawer = json.loads(read.contents[0].text)
            assert drawer["content"] == "The staging DB moved to port 6543."
            info = json.loads(
                (await session.read_resource(f"trusty-memory://palace/{p}")).contents[0].text
            )
            assert info["drawer_count"] == 13
            templates = (await session.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == [
                "trusty-memory://palace/{palace}",
                "trusty-memory://palace/{palace}/drawer/{drawer_id}",
                "trusty-memory://palace/{palace}/wake-up",
            ]
            with pytest.raises(MCPError) as info_err:
                await session.read_resource(f"trusty-memory://palace/{p}/drawer/{missing}")
            assert info_err.value.code == -32002 and missing in info_err.value.message
            with pytest.raises(MCPError) as info_err:
                await session.read_resource("https://example.com/x")
            assert info_err.value.code == -32602

            # palace_delete needs confirm: true
            assert await refused("palace_delete", {"name": p}) == (
                f"palace_delete: 'confirm' must be true to delete palace {p} (got missing);"
                f" it moves to the archive, from where `trusty-memory palace restore {p}`"
                " brings it back"
            )
            deleted = await call("palace_delete", {"name": p, "confirm": True})
            assert deleted["status"] == "archived" and deleted["palace"] == p
            assert p not in (await call("palace_list", {}))["palaces"]

        assert set(seen) >= set(ext.TOOLS), set(ext.TOOLS) - set(seen)
        for name, results in seen.items():
            validator = Draft202012Validator(strict(listed[name].output_schema))
            for data in results:
                errors = [e.message for e in validator.iter_errors(data)]
                assert not errors, (name, errors, data)

    try:
        asyncio.run(go())
    finally:
        stop_daemon_in(home)
        shutil.rmtree(home, ignore_errors=True)


def test_update_and_reads_on_a_palace_with_readers_and_the_archive_restore():
    """Reads the extended set adds are served by readers too, and a session reads its own
    update at once (read-your-writes); the archived version comes back with the CLI."""
    home = short_tmp("tmr-")
    daemon = Daemon(home)

    async def go() -> None:
        async with sdk_session(home, "--tools", "extended", "--palace", "hot") as session:
            stored = tool_json(
                await session.call_tool("memory_remember", {"text": "Cache TTL is 60s."})
            )
            did = stored["drawer_id"]
            with Client(daemon.config) as client:
                client.scale("hot", 2)
            for i in range(8):
                text = f"Cache TTL is {100 + i}s."
                result = await session.call_tool("memory_update", {"drawer_id": did, "text": text})
                assert tool_json(result)["status"] == "updated"
                got = tool_json(await session.call_tool("memory_get", {"drawer_id": did}))
                assert got["content"] == text
                found = tool_json(
                    await session.call_tool("memory_search", {"query": f"{100 + i}s"})
                )
                assert [d["drawer_id"] for d in found["drawers"]] == [did]
            stats = tool_json(await session.call_tool("memory_stats", {}))
            assert stats["archived_count"] == 8

    try:
        asyncio.run(go())
        with Client(daemon.config) as client:
            versions = client.call("archive_list", {"reason": "updated"}, palace="hot")["drawers"]
            assert len(versions) == 8 and versions[0]["content"] == "Cache TTL is 60s."
            restored = client.call(
                "archive_restore", {"drawer_id": versions[0]["drawer_id"]}, palace="hot"
            )
            assert restored["drawer_id"] == versions[0]["merged_into"]
            assert client.get("hot", restored["drawer_id"]).content == "Cache TTL is 60s."
    finally:
        stop_daemon_in(home)
        shutil.rmtree(home, ignore_errors=True)


def test_the_relays_own_answer_is_the_hosts_with_the_extended_set():
    """The relay answers a plain tools/list from the table; the host's SDK session, told
    the set in the relay's hello, must answer the same."""
    home = short_tmp("tmh-")
    Daemon(home).start()
    try:
        for version in ("2024-11-05", "2025-11-25"):
            s = RawServe(home, "--tools", "extended", "--palace", "dflt")
            try:
                s.initialize(version)
                local = s.call(1, "tools/list")["result"]
                s.request(2, "tools/list", {"_meta": {"progressToken": "t"}})
                answer = s.recv(60)
                while "id" not in answer:
                    answer = s.recv(60)
                assert answer["id"] == 2 and local == answer["result"], version
                assert len(local["tools"]) == len(EXTENDED_NAMES)
                templates = s.call(3, "resources/templates/list")["result"]
                assert len(templates["resourceTemplates"]) == 3
            finally:
                s.kill()
    finally:
        stop_daemon_in(home)
        shutil.rmtree(home, ignore_errors=True)


def test_direct_mode_and_http_serve_the_extended_set(raw_serve, mcp_home):
    """``--http`` runs the SDK in the serve process (direct mode): both its stdio and its
    HTTP endpoint list the extended set, and serve resource templates without a daemon."""
    port = free_port()
    s = raw_serve(
        "--http",
        f"127.0.0.1:{port}",
        "--tools",
        "extended",
        TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9",
    )
    assert "resources" in s.initialize()["result"]["capabilities"]
    assert wait_for(lambda: _listening(port), 10)
    init, tools, error = asyncio.run(
        _http_session(f"http://127.0.0.1:{port}/mcp", _token(mcp_home))
    )
    assert [t.name for t in tools.tools] == EXTENDED_NAMES
    assert init.capabilities.resources is not None
    assert tool_error(error) == "memory_recall: missing 'palace' (no --palace default configured)"
    stdio_tools = s.call(1, "tools/list", {"_meta": {}})["result"]["tools"]
    assert [t["name"] for t in stdio_tools] == EXTENDED_NAMES
    templates = s.call(2, "resources/templates/list")["result"]["resourceTemplates"]
    assert [t["name"] for t in templates] == ["palace", "drawer", "wake-up"]
    refused = s.call(3, "tools/call", {"name": "palace_delete", "arguments": {"name": "x"}})
    assert refused["error"]["code"] == -32603
    assert refused["error"]["message"].startswith("palace_delete: 'confirm' must be true")
    s.close_stdin()
    assert s.wait(10) == 0, s.stderr_text()


MUST_BE = "must be a"
BAD_ARGUMENTS = [
    ("memory_get", {"palace": "p"}, "missing 'drawer_id'"),
    ("memory_get", {"palace": "p", "drawer_id": 7},
     f"memory_get: 'drawer_id' {MUST_BE} string, got number"),
    ("memory_update", {"palace": "p", "drawer_id": "d", "tags": "x"},
     f"memory_update: 'tags' {MUST_BE}n array of strings"),
    ("memory_update", {"palace": "p", "drawer_id": "d", "importance": "high"},
     f"memory_update: 'importance' {MUST_BE} number, got string"),
    ("memory_search", {"palace": "p", "limit": True},
     f"memory_search: 'limit' {MUST_BE}n integer, got boolean"),
    ("memory_search", {"palace": "p", "limit": 2**40},
     f"memory_search: 'limit' is too large: {2**40}"),
    ("memory_search", {"palace": "p", "cursor": ["x"]},
     f"memory_search: 'cursor' {MUST_BE} string, got array"),
    ("memory_search", {}, "memory_search: missing 'palace' (no --palace default configured)"),
    ("kg_history", {"palace": "p"}, "missing 'subject'"),
    ("kg_invalidate", {"palace": "p", "subject": "s"}, "missing 'predicate'"),
    ("kg_query", {"palace": "p", "subject": "s", "as_of": 5},
     f"kg_query: 'as_of' {MUST_BE} string, got number"),
    ("palace_delete", {"name": "../x", "confirm": True},
     "palace_delete: invalid palace name '../x': use letters, digits, '-', '_' and '.',"
     " not starting with '.'"),
    ("palace_delete", {"name": "p", "confirm": "yes"},
     "palace_delete: 'confirm' must be true to delete palace p (got 'yes'); it moves to the"
     " archive, from where `trusty-memory palace restore p` brings it back"),
    ("memory_stats", {"palace": "bad name"}, None),
]  # fmt: skip


def test_bad_arguments_fail_fast_with_the_cause_and_the_server_goes_on(raw_serve):
    """Argument errors are found before the daemon is asked (none runs here), in the
    contract's words; the same session then serves the next request."""
    s = raw_serve("--tools", "extended", TRUSTY_MEMORY_BROKER_FRONTEND="tcp://127.0.0.1:9")
    s.initialize()
    for rid, (name, arguments, message) in enumerate(BAD_ARGUMENTS, start=1):
        answer = s.tool(rid, name, arguments, timeout=30)
        assert answer["error"]["code"] == -32603, (name, answer)
        if message is not None:
            assert answer["error"]["message"] == message, (name, answer)
        else:
            assert answer["error"]["message"].startswith(f"{name}: invalid palace name"), answer
    assert s.call(99, "ping")["result"] == {}


def test_the_contract_set_neither_knows_nor_passes_the_extended_arguments():
    """With the set off, the extended names are unknown tools and kg_query's as_of is an
    unknown argument, ignored as any other is: the daemon gets the contract's request."""
    from trusty_memory.client.mcp.tool_record import ToolError
    from trusty_memory.client.mcp.tool_sets import plan_call

    for name in ext.TOOLS:
        with pytest.raises(ToolError, match=f"^unknown tool: {name}$"):
            plan_call(name, {"palace": "p", "drawer_id": "d", "name": "p"}, None)
    args = {"palace": "p", "subject": "s", "as_of": "2026-01-01"}
    assert plan_call("kg_query", args, None).params == {"subject": "s"}
    assert plan_call("kg_query", args, None, "extended").params == {
        "subject": "s",
        "as_of": "2026-01-01",
    }
    plan = plan_call("memory_get", {"drawer_id": "d"}, "dflt", "extended")
    assert (plan.method, plan.palace, plan.params) == ("drawer_get", "dflt", {"drawer_id": "d"})


def test_resources_page_through_the_palaces_without_waking_them():
    """resources/list: every palace once, PAGE at a time, described from its summary; no
    palace process starts for it (a home of thousands of palaces stays asleep)."""
    import mcp.types as types

    from trusty_memory.client.mcp.resources import PAGE

    home = short_tmp("tmp-")
    daemon = Daemon(home)

    async def go() -> None:
        async with sdk_session(home, "--tools", "extended") as session:
            names = [f"p{i:03}" for i in range(PAGE + 30)]
            await session.call_tool("palace_create", {"name": names[0]})  # starts the daemon
            with Client(daemon.config, autostart=False) as client:
                for name in names[1:]:
                    client.palace_create(name)
            uris, pages, cursor = [], 0, None
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await session.list_resources(params=params)
                pages += 1
                uris += [r.uri for r in page.resources]
                if (cursor := page.next_cursor) is None:
                    break
            assert pages == 2
            assert uris == [f"trusty-memory://palace/{name}" for name in names]
            with Client(daemon.config, autostart=False) as client:
                status = client.status()
            assert status["palace_processes"] == 0, status["services"]
            with pytest.raises(MCPError) as info:
                await session.list_resources(params=types.PaginatedRequestParams(cursor="x!"))
            assert info.value.code == -32602 and "not a cursor" in info.value.message

    try:
        asyncio.run(go())
    finally:
        stop_daemon_in(home)
        shutil.rmtree(home, ignore_errors=True)
