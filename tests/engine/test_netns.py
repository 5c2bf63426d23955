"""Client and broker on two hosts: two network namespaces joined by a veth pair.

The daemon runs in one namespace, bound to its veth address (not loopback, so CURVE is
the only way in); clients and a remote palace worker run in the other, each in a home of
its own. Where namespaces cannot be made (no root, a sandbox without ``ip netns``), the
same tests run on distinct loopback addresses (127.0.0.2 for the daemon), except the
network drop, which needs a link to take down.

Covers: common/transport.py common/keys.py workers/remote.py client/sync.py common/caller.py
    client/mcp/direct.py
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import _short_tmp
from tests.engine.test_tcp import RemoteWorker, TeamDaemon, wait_until
from tests.mcp.conftest import tool_json

SUBNET = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"


@dataclass
class Net:
    server_ip: str
    server_prefix: tuple[str, ...] = ()
    client_prefix: tuple[str, ...] = ()
    client_link: str = ""  # the client side's veth (empty: no link to take down)
    namespaces: tuple[str, ...] = ()

    def link(self, up: bool) -> None:
        cmd = [*self.client_prefix, "ip", "link", "set", self.client_link, "up" if up else "down"]
        subprocess.run(cmd, check=True)


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def make_namespaces() -> Net | str:
    """Two namespaces and a veth pair between them; or why they cannot be made."""
    if shutil.which("ip") is None:
        return "no `ip` command"
    tag = f"{os.getpid() % 100000}"
    server, client = f"tm-srv-{tag}", f"tm-cli-{tag}"
    made = _ip("netns", "add", server)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "add", client)
    veth_s, veth_c = f"tms{tag}", f"tmc{tag}"
    steps = [
        ("link", "add", veth_s, "type", "veth", "peer", "name", veth_c),
        ("link", "set", veth_s, "netns", server),
        ("link", "set", veth_c, "netns", client),
        ("-n", server, "addr", "add", f"{SUBNET}.1/24", "dev", veth_s),
        ("-n", client, "addr", "add", f"{SUBNET}.2/24", "dev", veth_c),
        ("-n", server, "link", "set", veth_s, "up"),
        ("-n", client, "link", "set", veth_c, "up"),
        ("-n", server, "link", "set", "lo", "up"),
        ("-n", client, "link", "set", "lo", "up"),
    ]
    for step in steps:
        done = _ip(*step)
        if done.returncode != 0:
            for ns in (server, client):
                _ip("netns", "del", ns)
            return f"ip {' '.join(step)} failed: {done.stderr.strip()}"
    return Net(
        server_ip=f"{SUBNET}.1",
        server_prefix=("ip", "netns", "exec", server),
        client_prefix=("ip", "netns", "exec", client),
        client_link=veth_c,
        namespaces=(server, client),
    )


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    made = make_namespaces()
    if isinstance(made, str):
        print(f"network namespaces unavailable ({made}): using 127.0.0.2", file=sys.stderr)
        made = Net(server_ip="127.0.0.2")
    yield made
    for ns in made.namespaces:
        _ip("netns", "del", ns)


@pytest.fixture(scope="module")
def team(net: Net) -> Iterator[TeamDaemon]:
    team = TeamDaemon(
        _short_tmp("tmn-"),
        f"tcp://{net.server_ip}:7601",
        f"tcp://{net.server_ip}:7602",
        server_prefix=net.server_prefix,
        client_prefix=net.client_prefix,
    ).start()
    yield team
    team.cleanup()


def test_the_other_side_cannot_skip_curve(net, team):
    """The daemon listens on a non-loopback address: its log says CURVE for both sockets."""
    listening = team.log_lines("listening on tcp")
    assert {(e["endpoint"], e["security"]) for e in listening} == {
        (team.frontend, "curve"),
        (team.backend, "curve"),
    }
    if net.namespaces:  # the client's namespace has no route to the daemon but the veth
        routes = subprocess.run(
            [*net.client_prefix, "ip", "route"], capture_output=True, text=True, check=True
        )
        assert f"{SUBNET}.0/24" in routes.stdout


def test_cli_across_the_link(team):
    home = team.client_home
    assert team.client_cli(home, "status").returncode == 0
    assert team.client_cli(home, "palace", "create", "across").returncode == 0
    stored = team.client_cli(home, "remember", "across", "the veth pair carries CURVE")
    assert stored.returncode == 0, stored.stderr
    recalled = team.client_cli(home, "recall", "across", "what does the veth pair carry")
    assert stored.stdout.strip() in recalled.stdout


def test_wrong_and_revoked_keys_are_refused_across_the_link(team):
    stranger = team.new_client(None)
    revoked = team.new_client("soon-revoked")
    try:
        out = team.client_cli(stranger, "palace", "list")
        assert out.returncode == 1 and "refused this client's key" in out.stderr, out.stderr
        assert team.client_cli(revoked, "palace", "list").returncode == 0
        assert team.client_cli(team.home, "keys", "revoke", "soon-revoked").returncode == 0
        out = team.client_cli(revoked, "palace", "list")
        assert out.returncode == 1 and "refused this client's key" in out.stderr, out.stderr
    finally:
        shutil.rmtree(stranger, ignore_errors=True)
        shutil.rmtree(revoked, ignore_errors=True)


def _writes(team: TeamDaemon, palace: str, seconds: float) -> subprocess.Popen:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(team.client_home), **team.client_env()}
    return subprocess.Popen(
        [*team.client_prefix, sys.executable, "-m", "tests.engine.remote_writes", palace,
         str(seconds)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _acknowledged(output: str) -> tuple[list[str], list[str]]:
    """Acknowledged drawer ids, and the errors' messages."""
    lines = output.splitlines()
    ok = [line.split()[1] for line in lines if line.startswith("ok ")]
    return ok, [line.split(" ", 2)[2] for line in lines if line.startswith("err ")]


def _answer_times(output: str) -> list[float]:
    return [float(line.split()[2]) for line in output.splitlines() if line.startswith("ok ")]


def _stored_ids(team: TeamDaemon, palace: str) -> set[str]:
    """What the palace holds, asked from the client's side of the link."""
    out = team.client_cli(team.client_home, "list", palace, "--limit", "100000", "--json")
    assert out.returncode == 0, out.stderr
    return {d["drawer_id"] for d in json.loads(out.stdout)["drawers"]}


def test_remote_worker_across_the_link_killed_and_restarted(net, team):
    if not net.namespaces:
        pytest.skip("the loopback fallback runs this as test_tcp.py does")
    worker = RemoteWorker(team, "veth-far").start()
    try:

        def registered() -> bool:
            status = team.client_cli(team.client_home, "status", "--json")
            services = json.loads(status.stdout)["services"] if status.returncode == 0 else []
            return any(
                w["remote"] and w["pid"] == worker.proc.pid
                for s in services
                if s["name"] == "palace:veth-far"
                for w in s["workers"]
            )

        assert wait_until(registered, 90), (worker.home / "worker.log").read_text()[-2000:]
        writes = _writes(team, "veth-far", 14.0)
        time.sleep(4.0)
        worker.kill()
        time.sleep(1.5)
        worker.start()
        out, err = writes.communicate(timeout=120)
        ok, failed = _acknowledged(out)
        assert len(ok) > 20, (out, err)
        assert all("crashed" in m or "timed out" in m for m in failed), failed
        assert wait_until(registered, 60)
        missing = set(ok) - _stored_ids(team, "veth-far")
        assert not missing, f"{len(missing)} acknowledged writes lost"
        assert (worker.home / "palaces" / "veth-far" / "palace.sqlite3").exists()
        assert not (team.home / "palaces" / "veth-far").exists()
    finally:
        worker.stop()


def test_a_client_carries_on_after_the_network_drops(net, team):
    """The link goes down for longer than the heartbeat timeout and comes back: the
    writing client reconnects by itself and what it was waiting for gets answered."""
    if not net.client_link:
        pytest.skip("no link to take down on the loopback fallback")
    assert team.client_cli(team.client_home, "palace", "create", "dropped").returncode == 0
    writes = _writes(team, "dropped", 16.0)
    time.sleep(3.0)
    net.link(up=False)
    time.sleep(7.0)  # past the 5 s heartbeat timeout: both ends drop the connection
    net.link(up=True)
    out, err = writes.communicate(timeout=120)
    ok, failed = _acknowledged(out)
    assert not failed, failed
    assert len(ok) > 20, (out, err)
    # The write waiting while the link was down was answered once it came back (a gap as
    # long as the outage), and writes went on after it to the end of the run.
    times = _answer_times(out)
    gaps = [(b - a, b) for a, b in itertools.pairwise(times)]
    longest, resumed_at = max(gaps)
    assert longest >= 6.0, gaps
    assert times[-1] > resumed_at + 2.0
    missing = set(ok) - _stored_ids(team, "dropped")
    assert not missing, f"{len(missing)} acknowledged writes lost"


def test_mcp_serve_across_the_link_rides_out_a_drop(net, team):
    """``serve --daemon`` in the client's namespace, driven by the MCP SDK: tool calls
    across the link, and one issued while the link is down is answered once it is back."""
    if not net.client_link:
        pytest.skip("no link to take down on the loopback fallback")

    async def go() -> None:
        params = StdioServerParameters(
            command=net.client_prefix[0],
            args=[*net.client_prefix[1:], sys.executable, "-m", "trusty_memory.client.cli.main",
                  "serve",
                  "--palace", "veth-mcp", "--daemon", team.frontend,
                  "--server-key", team.server_key],
            env={**os.environ, "TRUSTY_MEMORY_HOME": str(team.client_home)},
        )  # fmt: skip
        with open(team.client_home / "serve-stderr.log", "a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                stored = tool_json(
                    await s.call_tool("memory_remember", {"text": "the link may drop"})
                )
                await asyncio.to_thread(net.link, False)
                recall = asyncio.create_task(
                    s.call_tool("memory_recall", {"query": "what may drop"})
                )
                await asyncio.sleep(7.0)  # past the heartbeat timeout
                assert not recall.done()
                await asyncio.to_thread(net.link, True)
                hits = tool_json(await asyncio.wait_for(recall, 60))["results"]
                assert hits[0]["drawer_id"] == stored["drawer_id"]
                after = tool_json(await s.call_tool("palace_list", {}))
                assert "veth-mcp" in after["palaces"]

    try:
        asyncio.run(go())
    finally:
        net.link(up=True)
