"""``serve`` as a relay to the daemon's MCP host: what it answers itself equals the SDK's
answer, a session that only lists tools starts nothing, and losing the host loses no
request without an answer. Real daemon, real host, real sockets.

Covers: client/mcp/relay.py client/mcp/host.py broker/supervisor.py
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon
from tests.mcp.conftest import INIT_PARAMS, RawServe, short_tmp, stop_daemon_in
from trusty_memory.client.mcp.stdio import HANDSHAKE_PROTOCOL_VERSIONS
from trusty_memory.client.sync import Client
from trusty_memory.common import home as home_mod


@pytest.fixture(scope="module")
def home():
    path = short_tmp("tmr-")
    Daemon(path).start()
    yield path
    stop_daemon_in(path)


def host_pid(home: Path) -> int:
    with Client(Daemon(home).config) as c:
        return c.status()["mcp_host_pid"]


@pytest.mark.parametrize("palace", [(), ("--palace", "relayed")])
def test_local_answers_are_the_sdks_answers(home, palace):
    """A plain tools/list or ping is answered by the relay; the same request with a
    ``_meta`` goes to the SDK in the host. Both answers must be the same, in every
    protocol revision (the SDK shapes results per revision)."""
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        s = RawServe(home, *palace)
        try:
            s.initialize(version)
            local = s.call(1, "tools/list")["result"]
            s.request(2, "tools/list", {"_meta": {"progressToken": "t"}})
            # The first forwarded request may wait a second for the host to start, and
            # its progressToken then earns progress notifications before the answer.
            answer = s.recv(60)
            while "id" not in answer:
                assert answer["method"] == "notifications/progress", answer
                answer = s.recv(60)
            assert answer["id"] == 2 and local == answer["result"], version
            assert s.call(3, "ping")["result"] == s.call(4, "ping", {"_meta": {}})["result"]
        finally:
            s.kill()


def test_a_session_that_only_lists_tools_starts_no_daemon():
    fresh = short_tmp("tmn-")
    try:
        s = RawServe(fresh, "--palace", "lazy")
        try:
            assert s.initialize()["result"]["serverInfo"]["default_palace"] == "lazy"
            assert len(s.call(1, "tools/list")["result"]["tools"]) == 10
            assert s.call(2, "ping")["result"] == {}
            s.close_stdin()
            assert s.wait(10) == 0
        finally:
            s.kill()
        assert home_mod.read_record(fresh) is None
        assert not (fresh / "palaces").exists()
    finally:
        stop_daemon_in(fresh)


def test_a_killed_host_is_restarted_and_the_session_goes_on(home):
    s = RawServe(home, "--palace", "survivor")
    try:
        s.initialize()
        assert "result" in s.tool(1, "memory_remember", {"text": "before the host died"})
        os.kill(host_pid(home), signal.SIGKILL)
        time.sleep(0.2)
        # The next call reconnects (waiting for the supervisor's restart), re-initialises
        # the new host session with the client's handshake, and is served.
        stored = s.tool(2, "memory_remember", {"text": "after the host died"}, timeout=60)
        assert stored["result"]["structuredContent"]["status"] == "stored"
        listed = s.tool(3, "memory_list", {})["result"]["structuredContent"]
        assert {d["content"] for d in listed["drawers"]} >= {
            "before the host died",
            "after the host died",
        }
    finally:
        s.kill()


def test_a_call_in_flight_when_the_host_dies_gets_an_error(home):
    s = RawServe(home)
    try:
        s.initialize()
        assert "result" in s.tool(1, "palace_list", {})
        pid = host_pid(home)
        os.kill(pid, signal.SIGSTOP)  # the call below reaches the host but is not served
        try:
            s.request(2, "tools/call", {"name": "palace_list", "arguments": {}})
            assert s.silent(0.3)
        finally:
            os.kill(pid, signal.SIGKILL)
        lost = s.recv(10)
        assert lost["id"] == 2 and lost["error"]["code"] == -32603
        assert "palace_list: the connection to the daemon was lost" in lost["error"]["message"]
        assert "result" in s.tool(3, "palace_list", {}, timeout=60)  # and it goes on
    finally:
        s.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_cannot_reach_the_host(home):
    socket_path = home_mod.read_record(home).mcp
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({socket_path!r})\n"
        "except OSError as exc:\n"
        "    sys.exit(f'refused: {exc.strerror}')\n"
        "s.sendall(b'{}\\n')\n"
        "sys.exit('served' if s.recv(1) else 'closed')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 1 and "refused: Permission denied" in done.stderr, done.stderr


def test_a_call_that_starts_the_daemon_reports_progress():
    """A call that waits for the daemon hears progress once a second. Another starter
    holds the start lock until the first note arrives, so the call waits at least that
    long however fast this machine starts a daemon (it did so within a second at times,
    and the call then needed no progress)."""
    fresh = short_tmp("tmp-")
    try:
        s = RawServe(fresh)
        try:
            s.initialize()
            fresh.mkdir(parents=True, exist_ok=True)
            with open(fresh / home_mod.START_LOCK_NAME, "a+b") as other_starter:
                fcntl.flock(other_starter, fcntl.LOCK_EX)
                call = {"name": "palace_list", "arguments": {}, "_meta": {"progressToken": "p1"}}
                s.request(1, "tools/call", call)
                seen = [s.recv(120)]  # while the lock is held: progress, never the answer
            while True:
                message = s.recv(120)
                if message.get("id") == 1:
                    break
                seen.append(message)
            assert "result" in message
            assert seen, "no progress while the daemon started"
            for note in seen:
                assert note["method"] == "notifications/progress"
                assert note["params"]["progressToken"] == "p1"
                assert note["params"]["message"].startswith(
                    ("starting the daemon", "waiting for the daemon")
                )
            steps = [n["params"]["progress"] for n in seen]
            assert steps == sorted(steps) and len(set(steps)) == len(steps)
            # stderr said why the first call waits
            assert "starting the daemon" in s.stderr_text()
            # and nothing follows the answer for that token
            assert s.silent(1.5)
        finally:
            s.kill()
    finally:
        stop_daemon_in(fresh)


@pytest.mark.parametrize("daemon_running", [True, False])
def test_a_request_may_reuse_the_handshakes_id(home, daemon_running):
    """The edge answers ``initialize`` itself; whether the host was reachable then (the
    handshake relayed at once) or not (folded into the next hello), the SDK's own reply
    must never swallow a later request that reuses the id."""
    where = home if daemon_running else short_tmp("tmi-")
    try:
        s = RawServe(where)
        try:
            s.call(1, "initialize", {**INIT_PARAMS, "protocolVersion": "2025-06-18"})
            s.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
            answer = s.tool(1, "palace_list", {}, timeout=120)
            assert answer["id"] == 1 and "result" in answer, answer
            again = s.call(2, "initialize", {**INIT_PARAMS, "protocolVersion": "2025-06-18"})
            assert again["result"]["serverInfo"]["name"] == "trusty-memory"
            assert "result" in s.tool(2, "palace_list", {})  # id 2 reused as well
            s.close_stdin()
            assert s.wait(10) == 0  # nothing left in flight
        finally:
            s.kill()
    finally:
        if not daemon_running:
            stop_daemon_in(where)
