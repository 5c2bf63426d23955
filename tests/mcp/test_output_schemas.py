"""Every tool's ``structuredContent`` matches the ``outputSchema`` it lists, through the SDK.

One session of the official SDK client against ``serve`` with a real daemon (autostarted
in a throw-away home) calls each of the ten tools for real. The client itself checks each
successful result against the schema it was listed with (``ClientSession.call_tool``
raises on a mismatch); the test checks again, more strictly: no field the schema does not
name, at any depth, and date-time fields parse as RFC 3339 (the client treats ``format``
as an annotation).

The same session checks that the input bounds changed nothing: values at the bounds are
served, values past them get the server's own error, as before there were bounds (neither
the SDK's server nor its client checks arguments against ``inputSchema``).

Covers: client/mcp/tools.py client/mcp/tool_schema.py client/mcp/tool_record.py
    client/mcp/session.py
"""

from __future__ import annotations

import asyncio
import copy
import shutil
from datetime import datetime
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.mcp.conftest import sdk_session, short_tmp, stop_daemon_in, tool_error, tool_json
from trusty_memory.client.mcp.tools import TOOL_NAMES

pytestmark = pytest.mark.slow


def strict(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object schema in it."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def date_times(schema: dict[str, Any], data: Any) -> list[str]:
    """The values in ``data`` that ``schema`` marks ``format: date-time``."""
    if schema.get("format") == "date-time" and isinstance(data, str):
        return [data]
    found: list[str] = []
    if isinstance(data, dict):
        for key, sub in schema.get("properties", {}).items():
            found += date_times(sub, data.get(key))
    elif isinstance(data, list) and "items" in schema:
        for item in data:
            found += date_times(schema["items"], item)
    return found


def test_every_tool_result_matches_its_output_schema():
    home = short_tmp("tmo-")

    async def go() -> None:
        async with sdk_session(home) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert set(listed) == set(TOOL_NAMES)
            assert all(t.output_schema is not None for t in listed.values())
            seen: dict[str, list[dict[str, Any]]] = {name: [] for name in TOOL_NAMES}

            async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                result = await session.call_tool(name, arguments)  # the SDK validates
                data = tool_json(result)  # content[0].text == structuredContent
                seen[name].append(data)
                return data

            async def refused(name: str, arguments: dict[str, Any]) -> str:
                return tool_error(await session.call_tool(name, arguments))  # isError

            p = "schemas"
            assert (await call("palace_create", {"name": p, "description": "checks"}))[
                "status"
            ] == "created"
            assert p in (await call("palace_list", {}))["palaces"]
            stored = await call(
                "memory_remember",
                {
                    "palace": p,
                    "text": "The API gateway validates JWT tokens using RS256.",
                    "room": "Backend",
                    "tags": ["auth", "jwt"],
                },
            )
            await call("memory_remember", {"palace": p, "text": "Staging DB is on port 5433."})
            q = "How does token validation work?"
            # top_k at its lower bound is served
            hits = await call("memory_recall", {"palace": p, "query": q, "top_k": 1})
            assert [h["drawer_id"] for h in hits["results"]] == [stored["drawer_id"]]
            deep = await call("memory_recall_deep", {"palace": p, "query": q, "top_k": 5})
            assert deep["results"]
            assert len((await call("memory_list", {"palace": p}))["drawers"]) == 2
            # confidence at both bounds is served; the second closes the first
            fact = {"palace": p, "subject": "auth-service", "predicate": "deployed_version"}
            await call("kg_assert", {**fact, "object": "2.4.0", "confidence": 0.0})
            await call(
                "kg_assert",
                {**fact, "object": "2.4.1", "confidence": 1.0, "provenance": "deploy-log"},
            )
            await call("kg_assert", {**fact, "predicate": "owner", "object": "platform-team"})
            triples = (await call("kg_query", {"palace": p, "subject": "auth-service"}))["triples"]
            assert sorted((t["object"], t["confidence"], t["provenance"]) for t in triples) == [
                ("2.4.1", 1.0, "deploy-log"),
                ("platform-team", 1.0, None),
            ]
            assert (await call("palace_info", {"palace": p}))["drawer_count"] == 2
            forgotten = await call("memory_forget", {"palace": p, "drawer_id": stored["drawer_id"]})
            assert forgotten["status"] == "deleted"

            # past the bounds: the server's own messages, unchanged
            assert await refused("memory_recall", {"palace": p, "query": q, "top_k": 0}) == (
                "memory_recall: 'top_k' must be a positive integer, got 0"
            )
            assert await refused("memory_recall_deep", {"palace": p, "query": q, "top_k": -3}) == (
                "memory_recall_deep: 'top_k' must be a positive integer, got -3"
            )
            for bad in (-0.1, 1.5):
                assert await refused("kg_assert", {**fact, "object": "x", "confidence": bad}) == (
                    f"kg_assert: 'confidence' must be between 0.0 and 1.0, got {bad}"
                )

        assert all(seen.values()), [name for name, results in seen.items() if not results]
        for name, results in seen.items():
            schema = listed[name].output_schema
            validator = Draft202012Validator(strict(schema))
            for data in results:
                errors = [e.message for e in validator.iter_errors(data)]
                assert not errors, (name, errors, data)
                for stamp in date_times(schema, data):
                    assert datetime.fromisoformat(stamp).tzinfo is not None, (name, stamp)

    try:
        asyncio.run(go())
    finally:
        stop_daemon_in(home)
        shutil.rmtree(home, ignore_errors=True)


def test_the_strict_check_catches_extra_and_missing_fields():
    """The checks above must fail on results that do not match."""
    from trusty_memory.client.mcp.tool_sets import tool_definitions

    schemas = {t["name"]: t["outputSchema"] for t in tool_definitions()}
    recall = strict(schemas["memory_recall"])
    hit = {
        "drawer_id": "d",
        "content": "c",
        "score": 0.5,
        "layer": 2,
        "tags": [],
        "importance": 0.5,
    }
    good = {"palace": "p", "query": "q", "results": [hit]}
    assert Draft202012Validator(recall).is_valid(good)
    assert not Draft202012Validator(recall).is_valid({**good, "extra": 1})
    assert not Draft202012Validator(recall).is_valid({**good, "results": [{**hit, "room": "x"}]})
    assert not Draft202012Validator(recall).is_valid({**good, "results": [{**hit, "layer": 4}]})
    no_score = {k: v for k, v in hit.items() if k != "score"}
    assert not Draft202012Validator(recall).is_valid({**good, "results": [no_score]})
    triple = {
        "subject": "s",
        "predicate": "p",
        "object": "o",
        "valid_from": "2026-05-10T14:32:00Z",
        "valid_to": None,
        "confidence": 0.95,
        "provenance": None,
    }
    kg = strict(schemas["kg_query"])
    assert Draft202012Validator(kg).is_valid({"subject": "s", "triples": [triple]})
    assert not Draft202012Validator(kg).is_valid(
        {"subject": "s", "triples": [{**triple, "confidence": None}]}
    )
    assert date_times(schemas["kg_query"], {"subject": "s", "triples": [triple]}) == [
        "2026-05-10T14:32:00Z"
    ]
    assert not Draft202012Validator(strict(schemas["memory_remember"])).is_valid(
        {"drawer_id": "d", "palace": "p", "status": "duplicate"}
    )
