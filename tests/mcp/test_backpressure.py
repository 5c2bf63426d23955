"""Backpressure (issue 36, defect 6): a client that writes requests and never reads the
answers is pushed back through its own pipe, not buffered. ``serve`` and the MCP host
every session shares stay within a few MB of where they started; every request written
is still answered once the client reads; a session that ends leaves the host no bigger;
and the host bounds a connection that floods it directly (a relay gone wrong) the same way.

Real daemon, real host, ``serve`` as a subprocess. Without the bounds these floods grew
``serve`` by 100+ MB and the host by as much (``bench/mcp_backpressure.py``); the limits
below sit far under that and far over what the bounded session holds.

Covers: client/mcp/stdio.py client/mcp/relay.py client/mcp/host.py client/mcp/direct.py
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Daemon, wait_until
from tests.mcp.conftest import INIT_PARAMS, SERVE, RawServe, serve_env, short_tmp, stop_daemon_in
from trusty_memory.client.sync import Client
from trusty_memory.common import home as home_mod

FLOOD = 20_000  # requests written without reading; the host answers each with the tool list
GROWTH_MB = 30.0  # the most serve or the host may grow while a client floods
SETTLE_S = 3.0  # after the writer is stuck (or done): time for what was read to be worked on
# The most requests a pushed-back writer gets written: what the bounds let serve and the
# host hold (MAX_INFLIGHT, MAX_QUEUED_BYTES of answers, the host's MAX_PENDING and
# SDK_BUFFER: a few hundred of these) plus the pipe's and the socket's buffers, with room.
PUSHED_BACK_AT = 2000


@pytest.fixture(scope="module")
def home():
    path = short_tmp("tmbp-")
    Daemon(path).start()
    yield path
    stop_daemon_in(path)


def host_pid(home: Path) -> int:
    with Client(Daemon(home).config) as c:
        return c.status()["mcp_host_pid"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


PAD = "x" * 8192


def forwarded(rid: int) -> bytes:
    """A ``tools/list`` the relay cannot answer itself (it has ``_meta``), 8 KB long: what
    is read and not yet answered costs memory at once, however slowly this machine
    answers, and each answer (the whole tool table) is 12 KB more."""
    params = {"_meta": {"pad": PAD}}
    message = {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": params}
    return (json.dumps(message) + "\n").encode()


class Writer(threading.Thread):
    """Writes ``count`` requests into ``sink`` in blocks, never reading anything; counts
    what got written (a pushed-back write blocks, and the count stops)."""

    def __init__(self, sink: Any, count: int, first_id: int = 1) -> None:
        super().__init__(daemon=True)
        self.sink, self.count, self.first_id = sink, count, first_id
        self.written = 0
        self.stop = threading.Event()  # write no further block

    def run(self) -> None:
        try:
            for start in range(0, self.count, 250):
                if self.stop.is_set():
                    return
                n = min(250, self.count - start)
                block = b"".join(forwarded(self.first_id + start + i) for i in range(n))
                self.sink(block)
                self.written = start + n
        except (OSError, ValueError):
            pass  # the other end was killed or closed: the test is over


class Flooded:
    """A ``serve`` whose stdout nobody reads until :meth:`read_all` (RawServe reads it)."""

    def __init__(self, home: Path, **env: str) -> None:
        self.proc = subprocess.Popen(
            SERVE,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(home / "flooded-serve.log", "ab"),  # noqa: SIM115
            env=serve_env(home, **env),
        )
        self.rpc({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT_PARAMS})
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        self.proc.stdin.write(forwarded(0))  # the host session is up before we measure
        self.proc.stdin.flush()
        assert json.loads(self.proc.stdout.readline())["id"] == 0

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def rpc(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send((json.dumps(message) + "\n").encode())
        return json.loads(self.proc.stdout.readline())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def watch(writer: Writer, pids: list[int], timeout: float) -> list[float]:
    """Sample the processes' RSS until the writer is done or ``timeout``, then SETTLE_S
    more; the peak growth of each over its RSS at the start, in MB."""
    base = [rss_mb(pid) for pid in pids]
    peak = list(base)
    deadline = time.monotonic() + timeout
    settle_until = None
    while settle_until is None or time.monotonic() < settle_until:
        peak = [max(p, rss_mb(pid)) for p, pid in zip(peak, pids, strict=True)]
        if settle_until is None and (not writer.is_alive() or time.monotonic() > deadline):
            settle_until = time.monotonic() + SETTLE_S
        time.sleep(0.1)
    return [p - b for p, b in zip(peak, base, strict=True)]


@pytest.mark.parametrize("mode", ["relay", "direct"])
def test_a_client_that_never_reads_is_pushed_back_and_loses_nothing(home, mode):
    """The client's writes block (``serve`` stops reading stdin) while neither ``serve``
    nor the host grows; once it reads, every request it wrote is answered, once. In both
    of serve's modes: the bounds are the stdio edge's, whoever answers behind it (direct:
    the SDK in ``serve`` itself)."""
    s = Flooded(home, **({"TRUSTY_MEMORY_SERVE_DIRECT": "1"} if mode == "direct" else {}))
    try:
        writer = Writer(s.send, FLOOD)
        writer.start()
        serve_growth, host_growth = watch(writer, [s.proc.pid, host_pid(home)], timeout=8.0)
        assert serve_growth < GROWTH_MB, f"serve grew {serve_growth:.0f} MB"
        assert host_growth < GROWTH_MB, f"the MCP host grew {host_growth:.0f} MB"
        assert writer.is_alive() and writer.written <= PUSHED_BACK_AT, writer.written

        # The client reads at last (and writes no further block): the block it was stuck
        # in goes through, and every request it wrote gets its answer, once.
        writer.stop.set()
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in s.proc.stdout], daemon=True).start()
        seen: set[Any] = set()
        while writer.is_alive() or len(seen) < writer.written:
            answer = json.loads(lines.get(timeout=60))
            assert "result" in answer and answer["id"] not in seen, answer
            seen.add(answer["id"])
        assert seen == set(range(1, writer.written + 1))
        s.send(b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}\n')
        assert json.loads(lines.get(timeout=30)) == {"jsonrpc": "2.0", "id": "after", "result": {}}
    finally:
        s.kill()


def test_a_flooding_session_killed_leaves_the_host_as_it_was(home):
    """Killed at its bound, a flooding session leaves the host within a few MB of where
    it started, and the next session is served at once."""
    host = host_pid(home)
    before = rss_mb(host)
    s = Flooded(home)
    try:
        writer = Writer(s.send, FLOOD)
        writer.start()
        serve_growth, host_growth = watch(writer, [s.proc.pid, host], timeout=4.0)
        assert serve_growth < GROWTH_MB, f"serve grew {serve_growth:.0f} MB"
        assert host_growth < GROWTH_MB, f"the MCP host grew {host_growth:.0f} MB"
        assert writer.is_alive() and writer.written <= PUSHED_BACK_AT, writer.written
    finally:
        s.kill()
    time.sleep(2.0)  # the host notices the closed socket and ends the session
    assert rss_mb(host) - before < 15, f"the host kept {rss_mb(host) - before:.0f} MB"
    fresh = RawServe(home)
    try:
        fresh.initialize()
        assert fresh.call(1, "ping", {"_meta": {}})["result"] == {}
        assert "result" in fresh.tool(2, "palace_list", {}, timeout=60)
    finally:
        fresh.kill()


def test_the_host_bounds_a_connection_that_floods_it(home):
    """A connection that writes requests to the host and never reads (a relay gone wrong)
    is read only while its pending work is under the host's bounds: its writes block, the
    host stays put, and once it closes the host serves the next session."""
    host = host_pid(home)
    path = home_mod.read_record(home).mcp
    wait_until(lambda: Path(path).exists(), 30, "the MCP host's socket")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    hello = {"palace": None, "tools": "contract", "initialize": INIT_PARAMS,
             "initialized": True, "handshake_id": "bp-handshake"}  # fmt: skip
    conn.sendall((json.dumps(hello) + "\n").encode())
    try:
        writer = Writer(conn.sendall, FLOOD)
        writer.start()
        (host_growth,) = watch(writer, [host], timeout=8.0)
        assert host_growth < GROWTH_MB, f"the MCP host grew {host_growth:.0f} MB"
        assert writer.is_alive() and writer.written <= PUSHED_BACK_AT, writer.written
    finally:
        conn.close()
    fresh = RawServe(home)
    try:
        fresh.initialize()
        assert fresh.call(1, "tools/list", {"_meta": {}}, timeout=30)["result"]["tools"]
    finally:
        fresh.kill()


CLIENT = f"""
import json, sys
out = sys.stdout.buffer
out.write(json.dumps({{"jsonrpc": "2.0", "id": "init", "method": "initialize",
                      "params": {INIT_PARAMS!r}}}).encode() + b"\\n")
out.write(b'{{"jsonrpc": "2.0", "method": "notifications/initialized"}}\\n')
for i in range(1, {FLOOD} + 1):
    out.write(json.dumps({{"jsonrpc": "2.0", "id": i, "method": "tools/list",
                          "params": {{"_meta": {{}}}}}}).encode() + b"\\n")
out.flush()
"""


def test_a_pushed_back_client_that_closes_stdin_still_sees_serve_exit(home):
    """EOF is heard even while ``serve`` waits for room: a client process that floods,
    never reads and dies (its end of stdin closes) gets ``serve`` to exit 0, the
    contract's EOF, rather than a ``serve`` parked forever on a pipe nobody reads."""
    read_end, write_end = os.pipe()
    serve = subprocess.Popen(
        SERVE,
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=open(home / "eof-serve.log", "ab"),  # noqa: SIM115
        env=serve_env(home),
    )
    os.close(read_end)
    client = subprocess.Popen([sys.executable, "-c", CLIENT], stdout=write_end)
    os.close(write_end)  # the client's copy is now the only writer
    try:
        time.sleep(3.0)
        assert client.poll() is None, "the client was never pushed back"
        client.kill()  # its end of serve's stdin closes with it
        client.wait(10)
        assert serve.wait(30) == 0  # while its stdout is still never read
    finally:
        for proc in (client, serve):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert serve.stdout is not None
        serve.stdout.close()
