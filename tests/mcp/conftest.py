"""Drive ``trusty-memory serve`` as a subprocess, the way agents do.

Two ways in: :class:`RawServe` writes raw JSON lines (for framing and error cases an SDK
client would never send) and :func:`sdk_session` speaks through the official SDK client
(for happy paths). Every test session gets its own ``TRUSTY_MEMORY_HOME``; a daemon that
any ``serve`` started there is stopped at the end, so nothing outlives the run.

Tests that reach storage use the real daemon (``trusty-memory daemon``), started by the
``serve`` process itself through the client's autostart, or by the ``daemon`` fixture of
``tests/conftest.py``. They fail, never skip, when the engine is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

SERVE = [sys.executable, "-m", "trusty_memory.client.mcp.server"]

INIT_PARAMS = {
    "protocolVersion": "2024-11-05",
    "capabilities": {},
    "clientInfo": {"name": "open-mpm", "version": "1.0.0"},
}


def short_tmp(prefix: str) -> Path:
    # ipc socket paths must stay under ~100 bytes: keep homes short.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def stop_daemon_in(home: Path) -> None:
    """Stop a daemon some ``serve`` autostarted in ``home`` (by its pid file)."""
    from tests.conftest import Daemon

    Daemon(home).stop()


@pytest.fixture(scope="session")
def mcp_home() -> Iterator[Path]:
    """A home for tests that never reach the daemon (and a guard in case one does)."""
    home = short_tmp("tmc-")
    yield home
    stop_daemon_in(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def serve_home() -> Iterator[Path]:
    """A fresh home whose daemon ``serve`` will autostart; stopped afterwards."""
    home = short_tmp("tms-")
    yield home
    stop_daemon_in(home)
    shutil.rmtree(home, ignore_errors=True)


def serve_env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), **extra}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


class RawServe:
    """A ``serve`` subprocess fed raw bytes; stdout lines are parsed as they arrive."""

    def __init__(self, home: Path, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=serve_env(home, **env),
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr = bytearray()
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for chunk in self.proc.stderr:
            self.stderr.extend(chunk)

    def write(self, data: bytes | str | dict[str, Any]) -> None:
        if isinstance(data, dict):
            data = json.dumps(data)
        if isinstance(data, str):
            data = data.encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(data if data.endswith(b"\n") else data + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: Any, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.write(msg)

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        """The next stdout line, which must be one JSON object."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no answer within {timeout}s; stderr: {self.stderr_text()}"
            ) from None
        assert line is not None, f"stdout closed; stderr: {self.stderr_text()}"
        assert line.endswith(b"\n")
        return json.loads(line)

    def silent(self, wait: float = 0.5) -> bool:
        """True if nothing arrives on stdout within ``wait`` seconds."""
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            return True
        self.lines.put(line)
        return False

    def call(self, rid: Any, method: str, params: Any = None, timeout: float = 60.0) -> dict:
        self.request(rid, method, params)
        return self.recv(timeout)

    def initialize(self, version: str = "2024-11-05") -> dict[str, Any]:
        resp = self.call(0, "initialize", {**INIT_PARAMS, "protocolVersion": version}, 30)
        self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return resp

    def tool(self, rid: Any, name: str, arguments: dict[str, Any], timeout: float = 120) -> dict:
        return self.call(rid, "tools/call", {"name": name, "arguments": arguments}, timeout)

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout)

    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.close_stdin()  # closed here, not by the collector (which warns of the pipe)


@pytest.fixture
def raw_serve(mcp_home: Path) -> Iterator[Any]:
    """Start raw ``serve`` processes in the shared no-daemon home; killed afterwards."""
    started: list[RawServe] = []

    def start(*args: str, home: Path | None = None, **env: str) -> RawServe:
        proc = RawServe(home or mcp_home, *args, **env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def tool_json(result: Any) -> dict[str, Any]:
    """The parsed ``content[0].text`` of a successful SDK ``CallToolResult``; also checks
    that ``structuredContent`` carries the same object."""
    assert not result.is_error, result
    assert len(result.content) == 1 and result.content[0].type == "text"
    data = json.loads(result.content[0].text)
    assert result.structured_content == data
    return data


def tool_error(result: Any) -> str:
    """The message of a failed SDK ``CallToolResult``. The SDK client negotiates the latest
    protocol revision, and sessions of 2025-06-18 and later get a tool's own failure as a
    result: ``isError``, the message as its one text content, no ``structuredContent``
    (the contract's 2024-11-05 sessions get JSON-RPC -32603 with the same message)."""
    assert result.is_error, result
    assert len(result.content) == 1 and result.content[0].type == "text", result
    assert result.structured_content is None, result
    return result.content[0].text


@contextlib.asynccontextmanager
async def sdk_session(home: Path, *args: str, **env: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with a ``serve`` subprocess."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "trusty_memory.client.mcp.server", *args],
        env=serve_env(home, **env),
    )
    with open(home / "serve-stderr.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
