"""Shutdown: EOF -> exit 0; SIGTERM/SIGINT -> stop reading, exit 0 within 2 s.

Covers: client/mcp/stdio.py client/mcp/server.py
"""

from __future__ import annotations

import signal
import time

import pytest

NO_DAEMON = {"TRUSTY_MEMORY_BROKER_FRONTEND": "tcp://127.0.0.1:9"}


def test_eof_exits_zero(raw_serve):
    s = raw_serve()
    s.initialize()
    s.close_stdin()
    assert s.wait(10) == 0


def test_eof_before_anything_exits_zero(raw_serve):
    s = raw_serve()
    s.close_stdin()
    assert s.wait(10) == 0


def test_requests_read_before_eof_are_answered(raw_serve):
    """``printf '...' | trusty-memory serve`` gets every answer before the exit."""
    s = raw_serve()
    s.request(1, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {}})
    s.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.request(2, "tools/list")
    s.request(3, "tools/call", {"name": "nope", "arguments": {}})
    s.close_stdin()
    assert [s.recv()["id"] for _ in range(3)] == [1, 2, 3]
    assert s.wait(10) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_zero_within_2s(raw_serve, sig):
    s = raw_serve()
    s.initialize()
    assert len(s.call(1, "tools/list")["result"]["tools"]) == 10
    t0 = time.monotonic()
    s.proc.send_signal(sig)
    assert s.wait(5) == 0, s.stderr_text()
    assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_startup_exits_zero(raw_serve, sig):
    """A signal while the SDK is still being imported (right after the handshake)."""
    s = raw_serve()
    s.initialize()
    t0 = time.monotonic()
    s.proc.send_signal(sig)
    assert s.wait(5) == 0, s.stderr_text()
    assert time.monotonic() - t0 < 2.0


def test_signal_stops_reading(raw_serve):
    s = raw_serve()
    s.initialize()
    s.call(1, "ping")
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the signal is handled on the event loop; reading stops then
    try:  # the process may already be gone
        s.request(2, "ping")
    except BrokenPipeError:
        pass
    assert s.wait(5) == 0, s.stderr_text()
    assert s.lines.get(timeout=5) is None  # no answer to anything sent after the signal


def test_sigterm_with_a_stuck_call_still_exits_within_2s(raw_serve):
    """A call waiting on an unreachable daemon must not hold the exit past 2 s."""
    s = raw_serve(**NO_DAEMON, TRUSTY_MEMORY_BROKER_REQUEST_TIMEOUT_S="30")
    s.initialize()
    s.request(
        1, "tools/call", {"name": "memory_recall", "arguments": {"palace": "p", "query": "q"}}
    )
    time.sleep(0.3)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait(5) == 0, s.stderr_text()
    assert time.monotonic() - t0 < 2.0
