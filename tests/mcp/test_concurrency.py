"""Sixteen agent sessions at once on one palace: every write lands, every session recalls.

Each session is its own ``serve`` process (as with sixteen agents); they race to start
the one daemon, remember, and recall. Needs the engine.

Covers: client/mcp/server.py client/mcp/relay.py client/autostart.py
"""

from __future__ import annotations

import asyncio

import pytest

from tests.mcp.conftest import sdk_session, short_tmp, stop_daemon_in, tool_json

SESSIONS = 16
NOTES = 5
TOPICS = ["postgres", "kubernetes", "react", "oauth", "kafka", "terraform", "redis", "graphql"]


@pytest.mark.slow
def test_16_sessions_remember_and_recall_without_lost_writes():
    home = short_tmp("tmx-")

    async def agent(n: int) -> list[str]:
        async with sdk_session(home, "--palace", "shared") as s:
            ids = []
            for j in range(NOTES):
                topic = TOPICS[(n + j) % len(TOPICS)]
                text = f"agent {n} note {j}: decision about {topic} number {n * 100 + j}"
                result = await s.call_tool(
                    "memory_remember", {"text": text, "tags": [f"a{n}"]}, read_timeout_seconds=180
                )
                ids.append(tool_json(result)["drawer_id"])
            recalled = tool_json(
                await s.call_tool(
                    "memory_recall",
                    {"query": f"agent {n} note 0 decision", "top_k": 50},
                    read_timeout_seconds=180,
                )
            )
            assert recalled["results"], recalled
            mine = tool_json(await s.call_tool("memory_list", {"tag": f"a{n}", "limit": 100}))
            assert sorted(d["drawer_id"] for d in mine["drawers"]) == sorted(ids)
            return ids

    async def go():
        all_ids = await asyncio.gather(*(agent(n) for n in range(SESSIONS)))
        async with sdk_session(home, "--palace", "shared") as s:
            info = tool_json(await s.call_tool("palace_info", {}))
            listing = tool_json(await s.call_tool("memory_list", {"limit": 1000}))
        return all_ids, info, listing

    try:
        all_ids, info, listing = asyncio.run(go())
        flat = [i for ids in all_ids for i in ids]
        assert len(set(flat)) == SESSIONS * NOTES
        assert info["drawer_count"] == SESSIONS * NOTES
        assert {d["drawer_id"] for d in listing["drawers"]} == set(flat)
    finally:
        stop_daemon_in(home)
