"""Bad input of every kind gets an error naming its cause, and everything keeps serving.

Covers: broker/broker.py common/protocol.py common/names.py workers/palace.py
"""

from __future__ import annotations

import os

import msgspec
import pytest
import zmq

from tests.engine.test_faults import worker_pid
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.protocol import ErrorCode, TrustyError


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    c.palace_create("good")
    c.remember("good", "a drawer so the worker is running")
    yield c
    c.close()


def raw_call(config, frames: list[bytes], timeout_ms: int = 5000) -> bytes | None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(config.frontend)
    try:
        sock.send_multipart(frames)
        if sock.poll(timeout_ms):
            return sock.recv()
        return None
    finally:
        sock.close()


@pytest.mark.parametrize("name", ["../x", "a/b", "", "x\x00y", ".hidden", "a" * 65, "sp ace"])
def test_hostile_palace_names_are_refused_and_touch_nothing(client, daemon, name):
    before = sorted(os.listdir(daemon.home / "palaces"))
    with pytest.raises(TrustyError) as err:
        client.palace_create(name)
    assert err.value.code == ErrorCode.INVALID_PALACE_NAME
    assert "invalid palace name" in err.value.message
    with pytest.raises(TrustyError) as err:
        client.remember(name, "text")
    assert err.value.code == ErrorCode.INVALID_PALACE_NAME
    assert sorted(os.listdir(daemon.home / "palaces")) == before
    assert not (daemon.home / "x").exists()


def test_unknown_palace(client):
    with pytest.raises(TrustyError) as err:
        client.recall("no-such-palace", "anything")
    assert err.value.code == ErrorCode.PALACE_NOT_FOUND
    assert "no-such-palace" in err.value.message


def test_malformed_frames_on_the_frontend_get_errors(client, daemon):
    for junk in ([b"\xc1\xc1 not msgpack"], [msgspec.msgpack.encode({"id": "x"})]):
        resp = p.decode_response(raw_call(daemon.config, junk))
        assert not resp.ok and resp.error.code == ErrorCode.MALFORMED_FRAME
    # too many frames: dropped with a log line, never a crash
    assert raw_call(daemon.config, [b"a", b"b", b"c", b"d"], timeout_ms=300) is None
    assert client.ping()["pong"] is True
    assert client.recall("good", "drawer").results


def test_a_deeply_nested_request_is_answered_by_its_id(client, daemon):
    """~5,000 levels of MessagePack (15 KB) made the broker's decoder raise RecursionError:
    no answer at all, so the caller waited out its own timeout."""
    deep = b"\x81\xa1a" * 5000 + b"\xc0"
    params = b"\x82" + msgspec.msgpack.encode("text") + msgspec.msgpack.encode("t")
    params += msgspec.msgpack.encode("metadata") + deep
    head = msgspec.msgpack.encode({"id": "deep-1", "method": "memory_remember", "palace": "good"})
    frame = bytes([head[0] + 1]) + head[1:] + msgspec.msgpack.encode("params") + params
    resp = p.decode_response(raw_call(daemon.config, [frame]))
    assert resp.id == "deep-1" and not resp.ok
    # Python 3.11's decoder hits its recursion limit; 3.13's goes deeper, and then the
    # metadata's own bound ([limits] max_metadata_bytes) refuses it. Either way: answered.
    refusals = {
        ErrorCode.MALFORMED_FRAME: "nested too deeply",
        ErrorCode.INVALID_PARAMS: "metadata: ",
    }
    assert resp.error.code in refusals, resp.error
    assert refusals[ErrorCode(resp.error.code)] in resp.error.message
    assert client.remember("good", "still writing after a deep frame").status == "stored"


def test_params_that_are_not_utf8_cost_one_error_not_the_worker(client, daemon):
    """The broker passes params on undecoded; the palace worker's decoder raised
    UnicodeDecodeError, which killed it, and the retry on a new worker killed that one."""
    before = worker_pid(client, "palace:good")
    _, frame = p.encode_request("memory_remember", {"text": "@@"}, palace="good", id="u-1")
    resp = p.decode_response(raw_call(daemon.config, [frame.replace(b"\xa2@@", b"\xa2\xc3\x28")]))
    assert (resp.id, resp.ok, resp.error.code) == ("u-1", False, ErrorCode.MALFORMED_FRAME)
    assert "not valid UTF-8" in resp.error.message
    _, frame = p.encode_request("memory_list", palace="@@", id="u-2")
    resp = p.decode_response(raw_call(daemon.config, [frame.replace(b"\xa2@@", b"\xa2\xc3\x28")]))
    assert (resp.id, resp.error.code) == ("u-2", ErrorCode.MALFORMED_FRAME)
    assert worker_pid(client, "palace:good") == before
    assert client.remember("good", "written after bad UTF-8").status == "stored"


def test_a_duplicate_request_id_in_flight_is_answered_too(client, daemon):
    """The broker kept one entry per (client, id): three requests with one id in flight got
    one answer between them, and the other two callers waited out their timeouts."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(daemon.config.frontend)
    _, frame = p.encode_request("memory_recall_deep", {"query": "dup"}, palace="good", id="dup")
    for _ in range(3):
        sock.send(frame)
    replies = []
    while len(replies) < 3 and sock.poll(10_000):
        replies.append(p.decode_response(sock.recv()))
    sock.close()
    assert [r.id for r in replies] == ["dup"] * 3
    refused = [r.error.message for r in replies if not r.ok]
    assert all(m == "request id 'dup' is already in flight" for m in refused), refused
    assert client.recall("good", "drawer").results


def test_malformed_frames_on_the_backend_are_survived(client, daemon):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(daemon.config.backend)
    sock.send_multipart([p.W_READY, b"\xc1garbage"])
    sock.send_multipart([b"\x99", b"what"])
    sock.send_multipart([p.W_REPLY, b"nobody", b"id", b"x"])
    sock.send(b"")
    sock.close()
    assert client.ping()["pong"] is True
    assert client.recall("good", "drawer").results


def test_unknown_method(client):
    with pytest.raises(TrustyError) as err:
        client.call("memory_teleport", palace="good")
    assert err.value.code == ErrorCode.UNKNOWN_METHOD
    assert "memory_teleport" in err.value.message


@pytest.mark.parametrize(
    ("params", "field"),
    [({"text": 42}, "$.text"), ({"text": "x", "tags": "notalist"}, "$.tags"), ({}, "text")],
)
def test_wrong_param_types_name_the_field(client, params, field):
    with pytest.raises(TrustyError) as err:
        client.call("memory_remember", params, palace="good")
    assert err.value.code == ErrorCode.INVALID_PARAMS
    assert field in err.value.message
    assert client.recall("good", "drawer").results


def test_oversized_text_is_refused(client):
    with pytest.raises(TrustyError) as err:
        client.remember("good", "x" * (64 * 1024 + 1))
    assert err.value.code == ErrorCode.TEXT_TOO_LARGE
    assert "65537 bytes" in err.value.message and "65536" in err.value.message
    client.remember("good", "y" * (64 * 1024 - 10))  # just under the limit is fine


def test_a_request_deadline_answers_with_a_timeout(client):
    client.palace_create("cold")
    with pytest.raises(TrustyError) as err:
        # 1 ms cannot cover spawning a worker: the broker must answer, not hang.
        client.call("memory_list", {}, palace="cold", timeout=0.001)
    assert err.value.code == ErrorCode.TIMEOUT
    assert "timed out" in err.value.message
    assert client.list("cold").drawers == []
