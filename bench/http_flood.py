"""An authorised request's latency while another local user floods ``serve --http``.

    .venv/bin/python -m bench.http_flood [--attackers 2000] [--requests 200]
                                         [--nofile 1024] [--out FILE]

One ``serve --http 127.0.0.1:PORT`` (direct mode, no daemon: ``initialize`` is answered
by the SDK in ``serve`` itself) started under ``RLIMIT_NOFILE`` = ``--nofile`` (1024 is
the usual soft limit). ``--requests`` sequential authorised ``initialize`` POSTs, each on
a fresh connection, are timed twice: alone, then while an attacker process keeps
``--attackers`` slowloris connections (half a request line, one header every second; a
closed one is opened again at once) against the same port. A request that gets no
answer within ``TIMEOUT_S`` counts as failed and is not in the percentiles.

:class:`SlowFlood` is also what the tests (``tests/mcp/test_http_flood.py``,
``tests/ui/test_flood.py``) attack with.

Output: JSON (``--out``, default ``bench/results/http_flood.json``) and a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bench.harness import summary

PARTIAL = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # never ends: no blank line
TRICKLE = b"X-Slow: 1\r\n"
TIMEOUT_S = 10.0
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


class SlowFlood:
    """``n`` connections to ``127.0.0.1:port`` that each send half a request head and
    then one header line per :meth:`trickle`: a slowloris, as another local user runs it."""

    def __init__(self, port: int, n: int, connect_timeout_s: float = 2.0) -> None:
        self.port = port
        self.n = n
        self.connect_timeout_s = connect_timeout_s
        self.socks: list[socket.socket] = []
        self.refused = 0  # connects that failed or timed out

    def open(self, within_s: float = 5.0) -> SlowFlood:
        """Open connections until ``n`` are held (each connect tried once), for
        ``within_s`` at most: a server that stopped accepting must not stall the caller."""
        deadline = time.monotonic() + within_s
        for _ in range(self.n - len(self.socks)):
            if time.monotonic() > deadline:
                break
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), self.connect_timeout_s)
                sock.sendall(PARTIAL)
                sock.setblocking(False)  # a timeout socket polls before recv, flags or not
            except OSError:
                self.refused += 1
                continue
            self.socks.append(sock)
        return self

    def trickle(self) -> None:
        """One more header line on each connection; drop the ones the server closed."""
        for sock in list(self.socks):
            try:
                sock.send(TRICKLE, socket.MSG_DONTWAIT)
            except OSError:
                self._drop(sock)
        self.prune()

    def prune(self) -> int:
        """Drop the connections the server has closed; how many are still open."""
        for sock in list(self.socks):
            try:
                if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                    self._drop(sock)
            except BlockingIOError:
                pass  # open, nothing sent back: what a slowloris wants
            except OSError:
                self._drop(sock)
        return len(self.socks)

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks.clear()

    def _drop(self, sock: socket.socket) -> None:
        sock.close()
        self.socks.remove(sock)


def authorised_initialize(port: int, token: str, timeout_s: float = TIMEOUT_S) -> dict:
    """One authorised ``initialize`` POST on a fresh connection: the JSON-RPC reply."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {token}",
    }
    body = json.dumps(INIT).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        text = response.read().decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads(next(d for d in data if d))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve_http(home: Path, port: int, nofile: int, stderr_path: Path) -> Iterator[str]:
    """``serve --http`` under ``RLIMIT_NOFILE`` = ``nofile``; yields its bearer token."""
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    env["TRUSTY_MEMORY_BROKER_FRONTEND"] = "tcp://127.0.0.1:9"  # direct mode, no daemon
    command = [sys.executable, "-m", "trusty_memory.client.mcp.server"]
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [*command, "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)),
        )
    try:
        token_file = home / "http-token"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            token_file.exists() and b"MCP over HTTP" in stderr_path.read_bytes()
        ):
            time.sleep(0.1)
        yield token_file.read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def timed_requests(port: int, token: str, count: int) -> tuple[list[float], int]:
    """``count`` authorised requests in a row: latencies (ms) of the answered, failures."""
    times, failed = [], 0
    for _ in range(count):
        t0 = time.perf_counter()
        try:
            authorised_initialize(port, token)
        except (OSError, urllib.error.URLError):
            failed += 1
            continue
        times.append((time.perf_counter() - t0) * 1000)
    return times, failed


def attack(port: int, n: int, seconds: float) -> None:
    """The attacker process: keep ``n`` slow connections, one header a second each."""
    flood = SlowFlood(port, n, connect_timeout_s=1.0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        flood.open()
        time.sleep(1.0)
        flood.trickle()
    flood.close()


def run(attackers: int, requests: int, nofile: int) -> dict:
    home = Path(tempfile.mkdtemp(prefix="tmhf-"))
    port = free_port()
    result: dict = {"attackers": attackers, "requests": requests, "nofile": nofile}
    with serve_http(home, port, nofile, home / "stderr") as token:
        timed_requests(port, token, 10)  # warm-up
        result["alone"] = _phase(*timed_requests(port, token, requests))
        flood = subprocess.Popen(
            [sys.executable, "-m", "bench.http_flood", "--attack", str(port), str(attackers)]
        )
        try:
            time.sleep(5.0)  # the flood at full strength
            result["flooded"] = _phase(*timed_requests(port, token, requests))
        finally:
            flood.kill()
            flood.wait()
    result["stderr_bytes"] = (home / "stderr").stat().st_size
    shutil.rmtree(home, ignore_errors=True)  # unguarded, that stderr ran to hundreds of MB
    return result


def _phase(times: list[float], failed: int) -> dict:
    return {**summary(times), "failed": failed} if times else {"failed": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attackers", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--out", default="bench/results/http_flood.json")
    parser.add_argument("--attack", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        attack(args.attack[0], args.attack[1], seconds=600)
        return
    result = run(args.attackers, args.requests, args.nofile)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'phase':<10} {'p50 ms':>8} {'p99 ms':>8} {'failed':>7}")
    for phase in ("alone", "flooded"):
        row = result[phase]
        p50, p99 = row.get("p50_ms", 0), row.get("p99_ms", 0)
        print(f"{phase:<10} {p50:>8.1f} {p99:>8.1f} {row['failed']:>7}")
    print(f"serve's stderr: {result['stderr_bytes']} bytes")


if __name__ == "__main__":
    main()
