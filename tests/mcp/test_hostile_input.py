"""Hostile input at the stdio edge: every bad line gets an answer and the server reads on.

Each case here once stopped a real server from reading stdin (a reader thread that died)
or from writing stdout (a writer that could not encode an echoed string).

Covers: client/mcp/stdio.py client/mcp/lines.py client/mcp/server.py
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from trusty_memory.client.mcp.lines import MAX_LINE_BYTES
from trusty_memory.client.mcp.stdio import NESTING_TOO_DEEP

NO_DAEMON = {"TRUSTY_MEMORY_BROKER_FRONTEND": "tcp://127.0.0.1:9"}


def _with_a_stuck_call(raw_serve, timeout_s: str):
    """A session with one recall in flight that waits on an unreachable daemon."""
    s = raw_serve(**NO_DAEMON, TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S=timeout_s)
    s.initialize()
    call = {"name": "memory_recall", "arguments": {"palace": "p", "query": "q"}}
    s.request(1, "tools/call", call)
    time.sleep(0.3)
    return s


def _still_serving(s, rid: int = 99) -> None:
    assert s.call(rid, "ping") == {"jsonrpc": "2.0", "id": rid, "result": {}}


def test_deep_nesting_is_a_parse_error(raw_serve):
    s = raw_serve()
    s.initialize()
    s.write(b"[" * 100_000)
    err = s.recv()
    assert err["id"] is None and err["error"]["code"] == -32700
    assert err["error"]["message"] == f"Parse error: {NESTING_TOO_DEEP}"
    _still_serving(s)


def test_deep_notifications_and_responses_get_no_answer_and_requests_keep_their_id(raw_serve):
    # Measured on the bytes (the same on every Python), then answered by what the line
    # says of itself, as a decoded line would be.
    s = raw_serve()
    s.initialize()
    deep = "[" * 500 + "]" * 500
    s.write(f'{{"jsonrpc":"2.0","method":"notifications/x","params":{deep}}}\n'.encode())
    s.write(f'{{"jsonrpc":"2.0","id":41,"result":{deep}}}\n'.encode())
    s.write(f'{{"jsonrpc":"2.0","id":42,"method":"ping","params":{{"x":{deep}}}}}\n'.encode())
    s.write(f'{{"jsonrpc":"2.0","id":{deep},"method":"ping"}}\n'.encode())
    first, second = s.recv(), s.recv()
    assert first["id"] == 42 and first["error"]["code"] == -32700, first
    assert first["error"]["message"] == f"Parse error: {NESTING_TOO_DEEP}"
    assert second["id"] is None and second["error"]["code"] == -32700, second
    _still_serving(s)  # the next answer is the ping's: nothing else was sent


def test_lone_surrogates_echoed_back_stay_valid_json(raw_serve):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    # in the method name (echoed by -32601) ...
    s.write(b'{"jsonrpc":"2.0","id":1,"method":"x\\ud800"}')
    err = s.recv()
    assert err["error"] == {"code": -32601, "message": "Method not found: x\ud800"}
    # ... in a tool name (echoed by the SDK's pump) ...
    s.write(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t\\udfff"}}')
    assert s.recv()["error"] == {"code": -32603, "message": "unknown tool: t\udfff"}
    # ... and in the id itself
    s.write(b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}')
    assert s.recv() == {"jsonrpc": "2.0", "id": "\ud800", "result": {}}
    _still_serving(s)
    s.close_stdin()
    assert s.wait() == 0


def test_overlong_line_is_refused_without_being_held(raw_serve):
    s = raw_serve()
    s.initialize()
    s.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","pad":"' + b"x" * MAX_LINE_BYTES + b'"}')
    err = s.recv()
    assert err["id"] == 1 and err["error"]["code"] == -32700  # the id, read from the line
    assert f"longer than {MAX_LINE_BYTES} bytes" in err["error"]["message"]
    _still_serving(s)


def test_tools_call_params_of_the_wrong_shape_name_the_cause(raw_serve):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    cases = [
        (
            {"name": "memory_recall", "arguments": "x"},
            "memory_recall: 'arguments' must be an object",
        ),
        (
            {"name": "memory_recall", "arguments": [1]},
            "memory_recall: 'arguments' must be an object",
        ),
        ({"arguments": {}}, "tools/call: missing 'name'"),
        ({"name": 5}, "tools/call: 'name' must be a string"),
    ]
    for i, (params, message) in enumerate(cases):
        resp = s.call(i, "tools/call", params)
        assert resp["error"] == {"code": -32603, "message": message}, resp
    _still_serving(s)


def test_huge_integers_are_refused_by_name(raw_serve):
    s = raw_serve(**NO_DAEMON)
    s.initialize()
    for i, value in enumerate([10**30, 2**31]):
        resp = s.tool(i, "memory_recall", {"palace": "p", "query": "q", "top_k": value})
        assert resp["error"]["code"] == -32603
        assert resp["error"]["message"] == f"memory_recall: 'top_k' is too large: {value}"
    resp = s.tool(5, "memory_list", {"palace": "p", "limit": 1e300})
    assert resp["error"]["message"].startswith("memory_list: 'limit' is too large")
    _still_serving(s)


def test_late_signals_during_shutdown_still_exit_zero(raw_serve):
    """SIGTERM, then more of them while shutting down: always exit 0, within 2 s."""
    s = _with_a_stuck_call(raw_serve, "30")
    t0 = time.monotonic()
    for _ in range(6):
        if s.proc.poll() is not None:
            break
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.25)
    assert s.wait(5) == 0, s.stderr_text()
    assert time.monotonic() - t0 < 2.2


def test_signal_during_eof_drain_exits_within_2s(raw_serve):
    """EOF lets in-flight calls finish (up to minutes); a signal then cuts that to 2 s."""
    s = _with_a_stuck_call(raw_serve, "60")
    s.close_stdin()
    time.sleep(0.5)
    assert s.proc.poll() is None  # still draining the call
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait(5) == 0, s.stderr_text()
    assert time.monotonic() - t0 < 2.0


def test_a_signal_that_a_library_rewraps_during_start_up_still_exits_zero(tmp_path):
    """The SIGTERM raised inside the SDK's import was caught by pydantic and re-raised as a
    SchemaError; start-up must still end as a shutdown: exit 0, no traceback."""
    code = (
        "import os, signal, sys\n"
        "from trusty_memory.client.mcp import server as mcp_server\n"
        "async def interrupted(*args):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    except BaseException as exc:\n"
        "        raise RuntimeError('a library wrapped it') from exc\n"
        "mcp_server._serve = interrupted\n"
        "sys.exit(mcp_server.run_serve())\n"
    )
    env = {"PATH": "/usr/bin:/bin", "TRUSTY_MEMORY_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], input="", capture_output=True, text=True, env=env, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
