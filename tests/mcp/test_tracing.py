"""Spans on demand (issue 41): with ``TRUSTY_MEMORY_TRACE`` set, a recall and a remember
driven through the official SDK client over ``serve`` leave spans from every actor they
cross, joined by the trace id the client put in ``_meta``; unset, nothing is written and
neither the envelope nor the answers change. Real daemon, real workers, real model.

Covers: common/tracing.py common/protocol.py client/mcp/relay.py client/mcp/plain_calls.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest

from tests.conftest import Daemon
from tests.mcp.conftest import sdk_session, short_tmp, stop_daemon_in
from trusty_memory.common import protocol as p
from trusty_memory.common import tracing

# What each actor must have recorded for a traced recall (the palace is "traced").
RECALL_STAGES = {
    "relay.in", "relay.out",  # serve's relay
    "host.decode", "host.dispatch", "host.handler", "host.daemon.send",
    "host.daemon.wait", "host.encode",  # the MCP host (a plain call: mcp/plain_calls.py)
    "broker.route memory_recall", "broker.route embed", "broker.reply embedder",
    "broker.reply palace:traced",  # the broker, both trips
    "worker.decode", "worker.batch", "worker.embed", "worker.run memory_recall",
    "worker.encode", "worker.send",  # the palace worker
    "embedder.decode", "embedder.batch", "embedder.forward", "embedder.send",  # embedder
}  # fmt: skip


REMEMBER_STAGES = {
    "relay.in", "relay.out", "host.handler", "broker.route memory_remember",
    "broker.reply palace:traced", "worker.embed", "embedder.forward",
}  # fmt: skip

# What every traced call leaves, whatever the tool.
CALL_STAGES = {"relay.in", "relay.out", "host.handler", "worker.batch", "worker.send"}

NOTE = ("The staging cluster moved to ARM last week.", "which architecture does staging run on")


async def calls(
    home: Path, trace_env: dict[str, str], meta: bool, note: tuple[str, str] = NOTE
) -> list[dict]:
    """A remember, then a recall of it, through the SDK client; their structured results."""
    out = []
    async with sdk_session(home, "--palace", "traced", **trace_env) as session:
        for tool, args, trace in (
            ("memory_remember", {"text": note[0]}, "rem-1"),
            ("memory_recall", {"query": note[1]}, "rec-1"),
        ):
            extra = {"meta": {tracing.META_KEY: trace}} if meta else {}
            result = await session.call_tool(tool, args, **extra)
            assert not result.is_error, result
            out.append(result.structured_content)
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A daemon whose every process traces into a directory, and that directory."""
    home = short_tmp("tmt-")
    spans = Path(tmp_path_factory.mktemp("spans"))
    Daemon(home, {tracing.ENV: str(spans)}).start()
    yield home, spans
    stop_daemon_in(home)


# Each process writes its spans out every ``tracing.FLUSH_S`` from a thread of its own, so
# the relay's last span can reach its file before the broker's reply span reaches the
# broker's (CI saw it on a loaded host): a reader waits for every stage it will check.
SETTLE_S = 30


def by_trace(directory: Path, *, wait_for: dict[str, set[str]]) -> dict[str, dict[str, set[int]]]:
    """stage -> pids that recorded it, per trace id, once each trace in ``wait_for`` has
    every stage named for it (or :data:`SETTLE_S` has passed; the caller's assert says
    what is missing)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        traces = _read(directory)
        if all(stages <= traces.get(t, {}).keys() for t, stages in wait_for.items()):
            return traces
        if time.monotonic() > deadline:
            return traces
        time.sleep(tracing.FLUSH_S)


def _read(directory: Path) -> dict[str, dict[str, set[int]]]:
    out: dict[str, dict[str, set[int]]] = {}
    for span in tracing.read_spans(str(directory)):
        assert span["b"] >= span["a"], span
        out.setdefault(span["t"], {}).setdefault(span["s"], set()).add(span["p"])
    return out


def test_tracing_on_yields_spans_from_every_hop(traced):
    home, spans = traced
    results = asyncio.run(calls(home, {tracing.ENV: str(spans)}, meta=True))
    assert results[1]["results"][0]["content"].startswith("The staging cluster")
    traces = by_trace(spans, wait_for={"rem-1": REMEMBER_STAGES, "rec-1": RECALL_STAGES})
    recall = traces["rec-1"]
    assert recall.keys() >= RECALL_STAGES, RECALL_STAGES - recall.keys()
    pids = {stage.split(".")[0]: pids for stage, pids in recall.items()}
    # five processes: relay, host, broker, palace worker, embedder
    assert len(set().union(*recall.values())) == 5, recall
    assert len({frozenset(v) for v in pids.values()}) == 5, pids
    remember = traces["rem-1"]
    assert remember.keys() >= REMEMBER_STAGES, REMEMBER_STAGES - remember.keys()


def test_a_traced_call_without_a_trace_id_gets_one_from_the_relay(traced):
    home, spans = traced
    before = set(by_trace(spans, wait_for={"rem-1": REMEMBER_STAGES, "rec-1": RECALL_STAGES}))
    asyncio.run(calls(home, {tracing.ENV: str(spans)}, meta=False))
    deadline = time.monotonic() + SETTLE_S
    while True:
        new = {t: stages for t, stages in _read(spans).items() if t not in before}
        if (len(new) == 2 and all(v.keys() >= CALL_STAGES for v in new.values())) or (
            time.monotonic() > deadline
        ):
            break
        time.sleep(tracing.FLUSH_S)
    assert len(new) == 2, new  # one trace per call, named by the relay
    for stages in new.values():
        assert stages.keys() >= CALL_STAGES, CALL_STAGES - stages.keys()


def test_tracing_off_writes_nothing_and_changes_nothing(traced, tmp_path):
    """Off: a trace id the client sends is ignored, the envelope carries no trace field,
    and the answers are those of a traced daemon."""
    note = ("The billing export runs at 02:00 UTC every night.", "when does billing export")
    home = short_tmp("tmu-")
    Daemon(home).start()
    try:
        plain = asyncio.run(calls(home, {}, meta=True, note=note))
    finally:
        stop_daemon_in(home)
    on = asyncio.run(calls(traced[0], {tracing.ENV: str(traced[1])}, meta=True, note=note))
    assert plain[0].keys() == on[0].keys()
    assert {k: v for k, v in plain[0].items() if k != "drawer_id"} == {
        k: v for k, v in on[0].items() if k != "drawer_id"
    }
    assert plain[1]["results"][0]["content"] == on[1]["results"][0]["content"] == note[0]
    assert not any(path.name.startswith("spans-") for path in home.rglob("*"))

    assert not tracing.ON  # this process traces nothing: its envelope is the old one
    token = tracing.current.set("some-trace")
    try:
        _, frame = p.encode_request("memory_recall", {"query": "q"}, palace="x", id="r1")
    finally:
        tracing.current.reset(token)
    assert "trace" not in msgspec.msgpack.decode(frame)


def test_a_traced_envelope_is_read_by_a_receiver_that_predates_it():
    """The field is an addition: a Request without it (an older actor's) decodes a traced
    frame, and a traced one decodes an older frame with an empty trace."""

    class OldRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
        id: str
        method: str
        palace: str | None = None
        params: msgspec.Raw = msgspec.Raw(b"\x80")

    traced_frame = msgspec.msgpack.encode(p.Request(id="a", method="ping", trace="t-1"))
    old = msgspec.msgpack.decode(traced_frame, type=OldRequest)
    assert (old.id, old.method) == ("a", "ping")
    new = p.decode_request(msgspec.msgpack.encode(OldRequest(id="b", method="ping")))
    assert (new.id, new.trace) == ("b", "")
