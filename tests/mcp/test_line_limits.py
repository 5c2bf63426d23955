"""Every request gets exactly one answer, however long its reply or its own line.

A reply travels as one JSON line through the MCP host, the relay and ``serve``'s stdout,
and each of them reads lines with a limit. Those limits are derived from the largest legal
reply (``line_limits`` in ``mcp/stdio.py``): 45 drawers of 64,000 bytes of emoji made a
17 MB line that the relay's old fixed 16 MiB limit dropped, and the call hung. A reply
longer than the limit (here one set low with ``TRUSTY_MEMORY_MCP_MAX_REPLY_BYTES``) is
answered with an error naming it, by whichever side holds the lower limit, and a request
line over its limit gets an error with its id. Real daemon, real host, the official MCP
client.

Covers: client/mcp/lines.py client/mcp/relay.py client/mcp/host.py client/mcp/stdio.py
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Daemon
from tests.mcp.conftest import RawServe, sdk_session, short_tmp, stop_daemon_in, tool_json
from trusty_memory.client.mcp import lines as mcp_lines
from trusty_memory.client.mcp.lines import (
    MAX_LINE_BYTES,
    IdScanner,
    LineSplitter,
    TooLong,
    line_limits,
)
from trusty_memory.common.config import PalaceSettings

MAX_REPLY_ENV = "TRUSTY_MEMORY_MCP_MAX_REPLY_BYTES"  # [mcp] max_reply_bytes

DEADLINE_S = 60.0  # for a reply of tens of MB on a busy two-core machine
EMOJI = "\U0001f600"  # 4 bytes of UTF-8; 12 as \ud83d\ude00
OLD_LIMIT = 16 * 2**20  # the relay's fixed limit before the limits were derived


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    """A home whose daemon the first ``serve`` starts (the default limits)."""
    path = short_tmp("tmll-")
    yield path
    stop_daemon_in(path)
    shutil.rmtree(path, ignore_errors=True)


async def call(session, tool: str, /, **arguments) -> dict:
    result = await session.call_tool(tool, arguments, read_timeout_seconds=DEADLINE_S)
    return tool_json(result)


def texts_of(n: int, size: int, filler: str) -> list[str]:
    """``n`` different texts of exactly ``size`` bytes of UTF-8, mostly ``filler``."""
    width = len(filler.encode())
    texts = []
    for i in range(n):
        head = f"drawer {i:03d} "
        pad = size - len(head)
        texts.append(head + filler * (pad // width) + "x" * (pad % width))
    assert all(len(t.encode()) == size for t in texts)
    return texts


async def store_all(session, palace: str, texts: list[str]) -> None:
    await call(session, "palace_create", name=palace)
    for text in texts:
        stored = await call(session, "memory_remember", palace=palace, text=text)
        assert stored["status"] == "stored" and "deduplicated" not in stored


def test_replies_of_45_drawers_of_64_000_bytes_of_emoji_arrive(home):
    """The audit's case: ``memory_list`` (its default limit) and ``memory_recall`` with
    ``top_k=45`` both come back, every drawer's text intact."""
    texts = texts_of(45, 64_000, EMOJI)
    # What the host used to write: every emoji as \ud83d\ude00, in both copies of the
    # result (structuredContent and the text content).
    assert OLD_LIMIT < 45 * 64_000 * 6

    async def go():
        async with sdk_session(home) as s:
            await store_all(s, "emoji", texts)
            started = time.monotonic()
            listed = await call(s, "memory_list", palace="emoji")
            assert sorted(d["content"] for d in listed["drawers"]) == texts
            recalled = await call(s, "memory_recall", palace="emoji", query="drawer", top_k=45)
            assert sorted(h["content"] for h in recalled["results"]) == texts
            assert time.monotonic() - started < DEADLINE_S
            assert (await call(s, "palace_info", palace="emoji"))["drawer_count"] == 45

    asyncio.run(go())


def test_a_reply_past_the_old_limit_in_any_encoding_arrives(home):
    """Control characters are the costliest text there is: 6 bytes each as ``\\u0001`` in
    ``structuredContent`` and 7 in the text content (the escape escaped again), so this
    reply is over 16 MiB in UTF-8 as in ASCII: only a raised limit lets it through."""
    texts = texts_of(25, 64_000, "\x01")
    assert OLD_LIMIT < 25 * 64_000 * 13

    async def go():
        async with sdk_session(home) as s:
            await store_all(s, "controls", texts)
            listed = await call(s, "memory_list", palace="controls")
            assert sorted(d["content"] for d in listed["drawers"]) == texts

    asyncio.run(go())


# --------------------------------------------------------------------------------------
# Past the limit: an error with the request's id, and the session goes on.

BUDGET = 200_000  # a reply limit set low (TRUSTY_MEMORY_MCP_MAX_REPLY_BYTES): three drawers pass it


@pytest.fixture(scope="module")
def budget_home() -> Iterator[Path]:
    """A daemon whose MCP host has the low reply limit."""
    path = short_tmp("tmlb-")
    Daemon(path, {MAX_REPLY_ENV: str(BUDGET)}).start()
    yield path
    stop_daemon_in(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("side", ["host", "relay", "direct"])
def test_a_reply_over_the_limit_is_an_error_and_the_session_goes_on(home, budget_home, side):
    """Whichever side has the lower limit refuses the reply and answers the call with an
    error naming it: the MCP host (it knows the size), the relay (it skips the host's
    line, reading the id from its start) or, in direct mode, the stdio edge."""
    if side == "host":
        where, env = budget_home, {}
    else:
        where, env = home, {MAX_REPLY_ENV: str(BUDGET)}
        if side == "direct":
            env["TRUSTY_MEMORY_SERVE_DIRECT"] = "1"
    palace = f"budget-{side}"
    texts = texts_of(3, 64_000, "y")

    async def go():
        async with sdk_session(where, **env) as s:
            await store_all(s, palace, texts)
            with pytest.raises(MCPError) as info:
                arguments = {"palace": palace}
                await s.call_tool("memory_list", arguments, read_timeout_seconds=DEADLINE_S)
            message = info.value.message
            assert info.value.code == -32603 and message.startswith("memory_list: the reply is ")
            assert f"longer than a line may be ({BUDGET} bytes)" in message
            assert bool(re.search(r"the reply is \d+ bytes,", message)) == (side != "relay")
            one = await call(s, "memory_list", palace=palace, limit=1)
            assert len(one["drawers"]) == 1 and one["drawers"][0]["content"] in texts
            hits = await call(s, "memory_recall", palace=palace, query="drawer 001", top_k=1)
            assert hits["results"][0]["content"] == texts[1]

    asyncio.run(go())


def test_a_request_line_over_the_limit_gets_an_error_with_its_id(home):
    """Wherever the id is in the line, the answer carries it; the session goes on, and
    its next tool call reaches the daemon."""
    s = RawServe(home)
    try:
        s.initialize()
        pad = "x" * (MAX_LINE_BYTES + 1)
        params = {"name": "memory_remember", "arguments": {"palace": "p", "text": pad}}
        id_first = {"jsonrpc": "2.0", "id": "big-1", "method": "tools/call", "params": params}
        id_last = {"jsonrpc": "2.0", "method": "tools/call", "params": params, "id": 7}
        for rid, line in (("big-1", id_first), (7, id_last)):
            s.write(json.dumps(line))
            err = s.recv(DEADLINE_S)
            assert err["id"] == rid and err["error"]["code"] == -32700, err
            assert f"longer than {MAX_LINE_BYTES} bytes" in err["error"]["message"]
            assert s.call(f"after-{rid}", "ping")["result"] == {}
        assert "palaces" in s.tool(9, "palace_list", {})["result"]["structuredContent"]
        assert s.silent(0.5)
    finally:
        s.kill()


def test_a_request_that_grows_on_the_way_to_the_host_is_answered(home):
    """A line within stdin's limit can outgrow the host's once the relay re-encodes it
    (``1e15`` is written ``1000000000000000.0``): the relay answers it itself."""
    s = RawServe(home)
    try:
        s.initialize()
        count = MAX_LINE_BYTES // 5 - 100
        numbers = ",".join(["1e15"] * count)
        s.write(
            '{"jsonrpc":"2.0","id":"grown","method":"tools/call","params":'
            f'{{"name":"palace_list","arguments":{{"n":[{numbers}]}}}}}}'
        )
        err = s.recv(DEADLINE_S)
        assert err["id"] == "grown" and err["error"]["code"] == -32700, err
        assert "once encoded for the daemon" in err["error"]["message"]
        assert "palaces" in s.tool(2, "palace_list", {})["result"]["structuredContent"]
    finally:
        s.kill()


def test_an_endless_line_is_answered_at_once_and_never_held(raw_serve):
    """A client that sends far more than the limit without a newline is answered as soon
    as the line passes the limit (its id came first), and ``serve`` holds at most a
    line's worth of it."""
    s = raw_serve()
    s.initialize()
    assert s.proc.stdin is not None
    s.proc.stdin.write(b'{"jsonrpc":"2.0","id":"endless","method":"ping","params":{"pad":"')
    chunk = b"y" * 2**20
    sent = 0
    while sent < 16 * MAX_LINE_BYTES:  # ~280 MB, no newline
        s.proc.stdin.write(chunk)
        sent += len(chunk)
    s.proc.stdin.flush()
    err = s.recv(DEADLINE_S)
    assert err["id"] == "endless" and err["error"]["code"] == -32700
    status = Path(f"/proc/{s.proc.pid}/status").read_text()
    peak_kb = int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1])
    assert peak_kb * 1024 < 3 * MAX_LINE_BYTES, status
    s.write(b'"}}')  # the line ends: nothing more is owed for it
    assert s.call("after", "ping")["id"] == "after"
    assert s.silent(0.5)
    s.close_stdin()
    assert s.wait(30) == 0


# --------------------------------------------------------------------------------------
# The limits and the id scanner, without processes.


def test_the_limits_follow_the_settings_and_the_workers_caps():
    from trusty_memory.workers.store.archive import ARCHIVE_LIMIT_MAX
    from trusty_memory.workers.store.read import LIST_LIMIT_MAX
    from trusty_memory.workers.store.search import SEARCH_LIMIT_MAX

    assert PalaceSettings().max_text_bytes == mcp_lines.DEFAULT_MAX_TEXT_BYTES
    assert PalaceSettings().max_top_k == mcp_lines.DEFAULT_MAX_TOP_K
    assert max(LIST_LIMIT_MAX, SEARCH_LIMIT_MAX, ARCHIVE_LIMIT_MAX) == mcp_lines.MAX_LISTED
    limits = line_limits()
    assert MAX_LINE_BYTES == limits.request > OLD_LIMIT  # nothing accepted before is refused
    # 1,000 drawers and the query, each 64 KiB of control characters in both copies.
    assert limits.reply > 1001 * 65536 * 13
    assert line_limits(max_text_bytes=2**20).reply > 12 * limits.reply
    assert line_limits(max_top_k=5000).reply > 4 * limits.reply


def scan(line: bytes, step: int) -> IdScanner:
    scanner = IdScanner()
    for at in range(0, len(line), step):
        scanner.feed(line[at : at + step])
    return scanner


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_the_scanner_finds_the_top_level_id_in_any_chunking(step):
    cases = [
        (b'{"jsonrpc":"2.0","id":5,"method":"x","params":{}}', 5, {"method"}),
        (b'{"method":"x","params":{"id":1,"s":"\\"id\\":2"},"id":"a\\"b"}', 'a"b', {"method"}),
        (b'{ "id" : -12 , "result" : {"id": 3} }', -12, {"result"}),
        (b'{"error":{},"id":"\\u00e9\\\\"}', "\u00e9\\", {"error"}),
        (b'{"id":1,"id":2,"method":"m"}', 2, {"method"}),  # the last one, as json.loads
        (b'{"id":true,"method":"m"}', None, {"method"}),  # not a valid id
        (b'{"id":1.5,"method":"m"}', None, {"method"}),
        (b'{"id":{"x":1},"method":"m"}', None, {"method"}),
        (b'[{"id":1,"method":"m"}]', None, set()),  # a batch has no top-level id
        (b'{"pad":"' + b"\\\\" * 50 + b'","id":8}', 8, set()),
    ]
    for line, rid, keys in cases:
        scanner = scan(line, step)
        assert (scanner.id, scanner.keys) == (rid, keys), line


def test_the_splitter_drops_long_lines_and_keeps_the_rest():
    splitter = LineSplitter(limit=10)
    got = splitter.feed(b'ok\n{"id":1,"method":"m","pad":"' + b"z" * 50)
    assert got[0] == b"ok\n" and isinstance(got[1], TooLong) and len(got) == 2
    assert (got[1].id, got[1].is_request) == (1, True)  # answered before the line ends
    assert splitter.feed(b'"}\nnext\n') == [b"next\n"]
    assert splitter.feed(b'{"pad":"' + b"z" * 20 + b'","id":"late"}') == []
    last = splitter.end()
    assert len(last) == 1 and (last[0].id, last[0].is_request) == ("late", False)
    assert LineSplitter(limit=10).feed(b"0123456789\n") == [b"0123456789\n"]
