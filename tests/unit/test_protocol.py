"""The shared protocol: envelopes round-trip, bad frames become typed errors.

Covers: common/protocol.py common/messages.py common/methods.py common/names.py
"""

from __future__ import annotations

import msgspec
import pytest

from trusty_memory.common import protocol as p
from trusty_memory.common.messages import RememberParams
from trusty_memory.common.methods import (
    EMBEDDER_METHODS,
    PALACE_METHODS,
    PARAMS_FOR_METHOD,
    decode_params,
)
from trusty_memory.common.names import normalize_room, validate_palace_name


def test_request_round_trip_keeps_params_raw_until_asked():
    rid, frame = p.encode_request("memory_remember", {"text": "hi", "tags": ["a"]}, palace="x")
    req = p.decode_request(frame)
    assert (req.id, req.method, req.palace) == (rid, "memory_remember", "x")
    params = decode_params(req.method, req.params)
    assert isinstance(params, RememberParams)
    assert (params.text, params.tags, params.importance) == ("hi", ["a"], 0.5)


def test_wrong_types_name_the_field():
    _, frame = p.encode_request("memory_recall", {"query": "q", "top_k": "ten"})
    req = p.decode_request(frame)
    with pytest.raises(p.TrustyError) as err:
        decode_params(req.method, req.params)
    assert err.value.code == p.ErrorCode.INVALID_PARAMS
    assert "$.top_k" in err.value.message


def test_garbage_frames_are_malformed_not_crashes():
    for junk in (b"", b"\xc1", msgspec.msgpack.encode([1, 2]), msgspec.msgpack.encode({"id": 1})):
        with pytest.raises(p.TrustyError) as err:
            p.decode_request(junk)
        assert err.value.code == p.ErrorCode.MALFORMED_FRAME


def _deep_request(depth: int, rid: str = "r-deep") -> bytes:
    """A request whose params hold a map nested ``depth`` levels (a few bytes per level)."""
    deep = b"\x81\xa1a" * depth + b"\xc0"
    params = b"\x82" + msgspec.msgpack.encode("text") + msgspec.msgpack.encode("t")
    params += msgspec.msgpack.encode("metadata") + deep
    head = msgspec.msgpack.encode({"id": rid, "method": "memory_remember"})
    return bytes([head[0] + 1]) + head[1:] + msgspec.msgpack.encode("params") + params


def test_deeply_nested_frames_are_malformed_not_recursion_errors():
    """msgspec raises RecursionError past ~1,000 levels; it escaped every decoder, so the
    broker answered nothing and a palace worker died on a request's params."""
    frame = _deep_request(5000)
    with pytest.raises(p.TrustyError) as err:
        p.decode_request(frame)
    assert err.value.code == p.ErrorCode.MALFORMED_FRAME
    assert err.value.message == "malformed request frame: nested too deeply"
    for decode in (p.decode_response, p.decode_ready):
        with pytest.raises(p.TrustyError):
            decode(b"\x91" * 100_000 + b"\xc0")
    params = b"\x81" + msgspec.msgpack.encode("metadata") + b"\x81\xa1a" * 5000 + b"\xc0"
    with pytest.raises(p.TrustyError) as err:
        decode_params("memory_remember", params)
    assert err.value.message == "memory_remember: undecodable params: nested too deeply"
    assert p.decode_request(_deep_request(50)).id == "r-deep"  # shallow nesting is fine


def test_strings_that_are_not_utf8_are_malformed_not_unicode_errors():
    """msgspec up to 0.22 raised UnicodeDecodeError (not its DecodeError) for such a
    string: the broker answered nothing, and a palace worker died on a request's params.
    0.23 raises DecodeError; the message names the cause the same way for both."""
    _, frame = p.encode_request("memory_list", palace="@@", id="r-utf8")
    with pytest.raises(p.TrustyError) as err:
        p.decode_request(frame.replace(b"\xa2@@", b"\xa2\xc3\x28"))
    assert err.value.code == p.ErrorCode.MALFORMED_FRAME
    assert "not valid UTF-8" in err.value.message
    params = b"\x81\xa4text\xa3\xed\xa0\x80"  # an encoded lone surrogate
    with pytest.raises(p.TrustyError) as err:
        decode_params("memory_remember", params)
    assert err.value.code == p.ErrorCode.MALFORMED_FRAME
    assert err.value.message.startswith("memory_remember: undecodable params: a string is")


def test_the_id_of_an_undecodable_request_is_salvaged():
    assert p.salvage_id(_deep_request(5000, "abc")) == "abc"
    assert p.salvage_id(_deep_request(5000, "x" * 300)) == "x" * 300  # str16 length
    _, frame = p.encode_request("ping", id="whole")
    assert p.salvage_id(frame[:-1]) == "whole"  # truncated after its id
    assert p.salvage_id(msgspec.msgpack.encode({"method": "m", "id": "late"})) == "late"
    for junk in (b"", b"\xc1", b"\x81\xa2id", b"\x81\xa2id\x05", b"\x81\xa3idx\xa1a"):
        assert p.salvage_id(junk) == ""


def test_error_responses_carry_code_and_message():
    resp = p.decode_response(
        p.error_response("r1", p.ErrorCode.PALACE_NOT_FOUND, "palace not found: x")
    )
    with pytest.raises(p.TrustyError) as err:
        p.unwrap(resp)
    assert err.value.code == p.ErrorCode.PALACE_NOT_FOUND
    assert str(err.value) == "[2001] palace not found: x"
    assert p.ErrorCode.TIMEOUT.family == "dispatch"


def test_every_palace_method_has_a_params_struct():
    for method in PALACE_METHODS | EMBEDDER_METHODS | {"palace_create"}:
        assert method in PARAMS_FOR_METHOD


@pytest.mark.parametrize("name", ["my-project", "a", "v1.2_x", "A" * 64])
def test_good_palace_names(name):
    assert validate_palace_name(name) == name


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x\x00", "a b", "A" * 65, 5, None])
def test_bad_palace_names(name):
    with pytest.raises(p.TrustyError) as err:
        validate_palace_name(name)
    assert err.value.code == p.ErrorCode.INVALID_PALACE_NAME


def test_rooms():
    assert normalize_room(None) == "General"
    assert normalize_room("  ") == "General"
    assert normalize_room("backend") == "Backend"
    assert normalize_room("MEETINGS") == "Meetings"
    assert normalize_room("Kitchen") == "Kitchen"
