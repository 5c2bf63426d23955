"""Hostile stdin for serve and malformed frames for the broker: answered, never fatal.

Covers: client/mcp/stdio.py broker/broker.py common/protocol.py bench/fuzz_cases.py
    bench/reliability.py
"""

from __future__ import annotations

import msgspec
import pytest
import zmq

from bench import fuzz_cases as fc
from tests.engine.test_faults import worker_pid
from tests.mcp.conftest import RawServe
from tests.reliability.conftest import run_part
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory) -> dict:
    return run_part("fuzz", tmp_path_factory.mktemp("fuzz") / "fuzz.json")


@pytest.mark.parametrize("side", ["stdin", "broker_front"])
def test_every_request_is_answered_validly_and_nothing_dies(fuzz_run, side):
    t = fuzz_run[side]
    assert t["sent"] >= 1000
    assert t["crashes"] == 0 and t["hangs"] == 0, t["examples"]
    assert t["invalid"] == 0, t["examples"]
    assert t["answered"] == t["expected"] > 500, t["examples"]


def test_every_fixed_case_kind_was_sent(fuzz_run):
    kinds = set(fuzz_run["stdin"]["kinds"])
    assert {"wrong-type", "nesting", "unicode", "bad-utf8", "huge", "batch", "duplicate-id",
            "notification-with-id", "random-bytes", "truncated", "mutated",
            "surrogate", "bounds", "invisible", "secret"} <= kinds  # fmt: skip
    front = set(fuzz_run["broker_front"]["kinds"])
    assert {"nesting", "wrong-params", "envelope", "huge", "duplicate-id", "multipart",
            "edge-time", "bounds", "invisible"} <= front  # fmt: skip


def test_everything_still_serves_afterwards(fuzz_run):
    assert fuzz_run["stdin"]["checks"]["still_serving_after"]
    assert fuzz_run["stdin"]["exit_codes_on_eof"] == [0, 0, 0, 0]
    assert fuzz_run["broker_front"]["checks"]["broker_pid_unchanged"]
    assert not any(fuzz_run["broker_front"]["worker_restarts"].values())
    assert fuzz_run["checks"]["a_new_session_serves_after"]
    assert fuzz_run["failures"] == []


# The fixed cases that must each get a clear error (``fc.clear_error_*_cases``): the run
# above only asks that every answer be valid JSON-RPC; these read each answer's message.


@pytest.fixture(scope="module")
def fuzz_palace(daemon):
    with Client(daemon.config, autostart=False) as c:
        c.palace_create(fc.PALACE)
        c.remember(fc.PALACE, "a note so the writer is running")
        yield c


def test_each_clear_error_case_on_serves_stdin_names_its_cause(daemon, fuzz_palace):
    session = RawServe(daemon.home)
    try:
        session.initialize()
        for i, (kind, tool, arguments, needles) in enumerate(fc.clear_error_tool_cases()):
            resp = session.tool(i + 1, tool, arguments)
            error = resp.get("error") or {}
            assert error.get("code") == -32603, (kind, resp)
            message = error["message"]
            assert all(n in message for n in needles), (kind, message)
            assert "internal error" not in message and "codec" not in message, (kind, message)
    finally:
        session.kill()
    assert fuzz_palace.palace_info(fc.PALACE).drawer_count == 1


def test_each_clear_error_case_on_the_broker_names_its_cause(daemon, fuzz_palace):
    writer = worker_pid(fuzz_palace, f"palace:{fc.PALACE}")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(daemon.config.frontend)
    try:
        for i, (kind, method, params, needles) in enumerate(fc.clear_error_frame_cases()):
            envelope = {} if method == "embed" else {"palace": fc.PALACE}
            body = {"id": f"clear-{i}", "method": method, "params": params, **envelope}
            sock.send(msgspec.msgpack.encode(body))
            assert sock.poll(30_000), kind
            resp = p.decode_response(sock.recv())
            assert resp.id == f"clear-{i}" and not resp.ok, (kind, resp)
            assert resp.error.code == p.ErrorCode.INVALID_PARAMS, (kind, resp.error)
            assert all(n in resp.error.message for n in needles), (kind, resp.error.message)
    finally:
        sock.close()
    # Nothing was stored, and no case cost the writer its life (a remember's created_at
    # past the calendar's edge made it exit three times in a row).
    assert worker_pid(fuzz_palace, f"palace:{fc.PALACE}") == writer
    info = fuzz_palace.palace_info(fc.PALACE)
    assert (info.drawer_count, info.triple_count) == (1, 0)
