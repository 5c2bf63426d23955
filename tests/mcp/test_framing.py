"""Framing and JSON-RPC errors at the stdio edge (things an SDK client never sends).

Covers: client/mcp/stdio.py
"""

from __future__ import annotations


def test_parse_error_then_keeps_reading(raw_serve):
    s = raw_serve()
    s.initialize()
    s.write(b"this is not json")
    err = s.recv()
    assert err["jsonrpc"] == "2.0" and err["id"] is None
    assert err["error"]["code"] == -32700
    assert err["error"]["message"].startswith("Parse error: ")
    s.write(b'{"jsonrpc": "2.0", "id": 7, "method": "ping"')  # truncated object
    assert s.recv()["error"]["code"] == -32700
    assert s.call(8, "ping") == {"jsonrpc": "2.0", "id": 8, "result": {}}


def test_invalid_utf8_is_a_parse_error(raw_serve):
    s = raw_serve()
    s.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\xff\xfe"}')
    err = s.recv()
    assert err["id"] is None and err["error"]["code"] == -32700
    assert "UTF-8" in err["error"]["message"]
    assert s.initialize()["result"]["serverInfo"]["name"] == "trusty-memory"


def test_parse_error_before_initialize_and_nan(raw_serve):
    s = raw_serve()
    s.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}')
    assert s.recv()["error"]["code"] == -32700


def test_batch_is_rejected_and_not_processed(raw_serve):
    s = raw_serve()
    s.initialize()
    s.write(
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},'
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nope"}}]'
    )
    err = s.recv()
    assert err["id"] is None and err["error"]["code"] == -32600
    assert "batch" in err["error"]["message"]
    assert s.silent(0.7)  # neither element was processed


def test_unknown_method(raw_serve):
    s = raw_serve()
    s.initialize()
    assert s.call(3, "foo") == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32601, "message": "Method not found: foo"},
    }
    # Methods the SDK knows but the contract does not recognise are unknown too.
    for i, method in enumerate(["resources/list", "prompts/list", "server/discover"]):
        resp = s.call(10 + i, method)
        assert resp["error"] == {"code": -32601, "message": f"Method not found: {method}"}


def test_unknown_notifications_get_no_answer(raw_serve):
    s = raw_serve()
    s.initialize()
    s.write({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})
    s.write({"jsonrpc": "2.0", "method": "foo"})
    assert s.silent(0.5)


def test_invalid_requests(raw_serve):
    s = raw_serve()
    s.initialize()
    assert s.call(1, "ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    s.write(b"42")
    assert s.recv()["error"]["code"] == -32600
    s.write({"id": 2, "method": "ping"})  # no "jsonrpc"
    assert s.recv() == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32600, "message": "Invalid Request: 'jsonrpc' must be \"2.0\""},
    }
    s.write({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": "oops"})
    err = s.recv()
    assert err["id"] == 3 and err["error"]["code"] in (-32600, -32602)
    assert s.call(4, "ping")["result"] == {}


def test_string_ids_and_blank_lines(raw_serve):
    s = raw_serve()
    s.write(b"\n   \n")
    s.request("init-1", "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
    assert s.recv()["id"] == "init-1"
    s.write(b"\r\n")
    assert s.call("p-1", "ping") == {"jsonrpc": "2.0", "id": "p-1", "result": {}}


def test_pipelined_requests_before_sdk_loaded(raw_serve):
    """A client may send tools/list right behind initialize, before the SDK is imported."""
    s = raw_serve()
    s.request(1, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {}})
    s.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.request(2, "tools/list")
    s.request(3, "ping")
    answers = [s.recv(), s.recv(), s.recv()]
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert len(answers[1]["result"]["tools"]) == 10
    assert s.silent(0.5)  # the SDK's own initialize reply was dropped


def test_stdout_carries_only_json_rpc(raw_serve):
    s = raw_serve(TRUSTY_MEMORY_LOG="debug")
    s.initialize()
    s.write(b"garbage")
    assert s.recv()["error"]["code"] == -32700
    assert len(s.call(1, "tools/list")["result"]["tools"]) == 10
    assert s.tool(2, "memory_recall", {"query": "x"})["error"]["code"] == -32603
    s.close_stdin()
    assert s.wait() == 0
    # every line we read was JSON (recv parses); nothing else is left on stdout
    assert s.lines.get(timeout=5) is None
    assert s.stderr_text()  # debug logs went to stderr
