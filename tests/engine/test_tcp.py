"""A team daemon over tcp with CURVE: the CLI and ``serve`` (through the MCP SDK) of
another home against it, keys refused and revoked, malformed frames over tcp, plain tcp
refused, and a remote palace worker killed and restarted with nothing acknowledged lost.

Everything is real: the daemon, its sockets on 127.0.0.1, the real model, the keys, a
``trusty-memory worker`` process in a home of its own. ``test_netns.py`` runs the same
kinds of client across two network namespaces.

Covers: common/transport.py common/keys.py workers/remote.py broker/remote_palaces.py
    broker/broker.py client/mcp/direct.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import zmq
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import Daemon, _short_tmp
from tests.mcp.conftest import tool_json
from trusty_memory.client.sync import Client
from trusty_memory.common import palace_dir, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config, PalaceSettings, load_config
from trusty_memory.workers.embedder.embedding import DIM
from trusty_memory.workers.store.write import PalaceStore


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def cli(
    home: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    prefix: tuple[str, ...] = (),
):
    """The real ``trusty-memory`` command in ``home`` (``prefix``: e.g. ``ip netns exec``)."""
    full = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), **(env or {})}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class TeamDaemon(Daemon):
    """A daemon with CURVE on tcp frontend and backend; clients are other homes."""

    def __init__(
        self,
        home: Path,
        frontend: str,
        backend: str,
        server_prefix: tuple[str, ...] = (),
        client_prefix: tuple[str, ...] = (),
    ) -> None:
        super().__init__(home)
        # Commands that run the daemon's side / a client's side (``ip netns exec NS``).
        self.server_prefix, self.client_prefix = server_prefix, client_prefix
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[broker]\nfrontend = "{frontend}"\nbackend = "{backend}"\n'
            "[dreamer]\nenabled = false\n"
        )
        self.frontend, self.backend = frontend, backend
        assert cli(home, "keys", "init").returncode == 0
        self.server_key = cli(home, "keys", "show", "--server").stdout.strip()
        self.client_home = self.new_client("team-laptop")

    def new_client(self, name: str | None) -> Path:
        """A home with its own key pair; allowed in under ``name`` (None: a stranger)."""
        home = _short_tmp("tmc-")
        assert cli(home, "keys", "init").returncode == 0
        if name is not None:
            key = cli(home, "keys", "show", "--client").stdout.strip()
            assert cli(self.home, "keys", "add", name, key).returncode == 0
        return home

    def client_env(self) -> dict[str, str]:
        return {"TRUSTY_MEMORY_DAEMON": self.frontend, "TRUSTY_MEMORY_SERVER_KEY": self.server_key}

    def client_config(self, home: Path | None = None) -> Config:
        """The config of a client in ``home`` (default: the allowed laptop) of this daemon."""
        saved = dict(os.environ)
        os.environ.update(TRUSTY_MEMORY_HOME=str(home or self.client_home), **self.client_env())
        try:
            return load_config()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    @contextlib.contextmanager
    def client(self, home: Path | None = None) -> Iterator[Client]:
        """An in-process client of ``home`` (default: the allowed laptop)."""
        with Client(self.client_config(home)) as client:
            yield client

    def start(self, timeout: float = 90.0) -> TeamDaemon:
        log = open(self.home / "daemon-test.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*self.server_prefix, sys.executable, "-m", "trusty_memory.client.cli.main", "daemon"],
            env=self.env,
            stderr=log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"daemon exited: {self.log_tail()}"
            status = self.client_cli(self.client_home, "status")
            if status.returncode == 0:
                return self
            time.sleep(0.2)
        raise AssertionError(f"daemon did not answer within {timeout}s: {self.log_tail()}")

    def client_cli(self, home: Path, *args: str, env: dict[str, str] | None = None):
        """``trusty-memory`` on the client side, pointed at this daemon."""
        full = {**self.client_env(), **(env or {})}
        return cli(home, *args, env=full, prefix=self.client_prefix)

    def log_lines(self, event: str) -> list[dict]:
        lines = (self.home / "daemon-test.log").read_text(errors="replace").splitlines()
        parsed = []
        for line in lines:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == event:
                    parsed.append(entry)
        return parsed

    def cleanup(self) -> None:
        self.stop()
        for home in (self.home, self.client_home):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def team() -> Iterator[TeamDaemon]:
    frontend = f"tcp://127.0.0.1:{free_port()}"
    backend = f"tcp://127.0.0.1:{free_port()}"
    team = TeamDaemon(_short_tmp("tmt-"), frontend, backend).start()
    yield team
    team.cleanup()


def test_cli_verbs_against_the_team_daemon(team):
    home, flags = team.client_home, ("--daemon", team.frontend, "--server-key", team.server_key)
    status = cli(home, "status", "--json", *flags)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["home"] == str(team.home)  # the daemon's, not ours
    assert cli(home, "palace", "create", "shared", *flags).returncode == 0
    stored = cli(home, "remember", "shared", "staging runs on the blue cluster", *flags)
    assert stored.returncode == 0, stored.stderr
    recalled = cli(home, "recall", "shared", "which cluster is staging on", "--json", *flags)
    hits = json.loads(recalled.stdout)["results"]
    assert hits[0]["drawer_id"] == stored.stdout.strip()
    assert not (home / "palaces" / "shared").exists()  # nothing lands in the client's home
    assert (team.home / "palaces" / "shared").is_dir()
    # The same through the environment a config or an agent's launcher would set.
    listed = cli(home, "palace", "list", "--json", env=team.client_env())
    assert "shared" in json.loads(listed.stdout)["palaces"]


@contextlib.asynccontextmanager
async def serve_session(home: Path, *args: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "trusty_memory.client.cli.main", "serve", *args],
        env={**os.environ, "TRUSTY_MEMORY_HOME": str(home)},
    )
    with open(home / "serve-stderr.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def test_mcp_contract_through_serve_against_the_team_daemon(team):
    """``serve --daemon tcp://... --server-key K``: the tools, end to end, via the SDK."""

    async def go() -> None:
        flags = ("--palace", "mcp-team", "--daemon", team.frontend, "--server-key", team.server_key)
        async with serve_session(team.client_home, *flags) as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            assert len(tools) == 10 and "memory_recall" in tools
            stored = tool_json(
                await s.call_tool("memory_remember", {"text": "the pager rota lives in ops"})
            )
            assert stored["palace"] == "mcp-team" and stored["status"] == "stored"
            recalled = tool_json(await s.call_tool("memory_recall", {"query": "pager rota"}))
            assert recalled["results"][0]["drawer_id"] == stored["drawer_id"]
            fact = {"subject": "staging", "predicate": "runs_on", "object": "blue"}
            tool_json(await s.call_tool("kg_assert", fact))
            triples = tool_json(await s.call_tool("kg_query", {"subject": "staging"}))["triples"]
            assert [t["object"] for t in triples] == ["blue"]
            palaces = tool_json(await s.call_tool("palace_list", {}))["palaces"]
            assert "mcp-team" in palaces

    asyncio.run(go())
    assert not (team.client_home / "palaces" / "mcp-team").exists()


def test_unknown_key_is_refused_with_one_log_line(team):
    stranger = team.new_client(None)
    try:
        key = cli(stranger, "keys", "show", "--client").stdout.strip()
        for _ in range(3):
            out = cli(stranger, "recall", "shared", "anything", env=team.client_env())
            assert out.returncode == 1
            assert "refused this client's key" in out.stderr, out.stderr
        status = cli(stranger, "status", env=team.client_env())
        assert status.returncode != 0 and "refused this client's key" in status.stdout
        refused = [e for e in team.log_lines("connection refused: key not allowed")
                   if e["client_key"] == key]  # fmt: skip
        assert len(refused) == 1, refused
    finally:
        shutil.rmtree(stranger, ignore_errors=True)


def test_a_revoked_key_is_refused_from_its_next_connection_without_a_restart(team):
    laptop = team.new_client("laptop-to-revoke")
    try:
        pid = team.pid()
        ok = cli(laptop, "palace", "list", env=team.client_env())
        assert ok.returncode == 0, ok.stderr
        assert cli(team.home, "keys", "revoke", "laptop-to-revoke").returncode == 0
        refused = cli(laptop, "palace", "list", env=team.client_env())
        assert refused.returncode == 1 and "refused this client's key" in refused.stderr
        lines = [e for e in team.log_lines("connection refused: key not allowed")
                 if e.get("revoked_name") == "laptop-to-revoke"]  # fmt: skip
        assert len(lines) == 1, lines
        assert team.pid() == pid  # the same daemon throughout
        # Allowed again under the same name: in again, still without a restart.
        key = cli(laptop, "keys", "show", "--client").stdout.strip()
        assert cli(team.home, "keys", "add", "laptop-to-revoke", key).returncode == 0
        assert cli(laptop, "palace", "list", env=team.client_env()).returncode == 0
    finally:
        shutil.rmtree(laptop, ignore_errors=True)


def test_a_wrong_server_key_never_reaches_the_daemon(team):
    """A client that names another daemon's key cannot talk to this one (nor be fooled
    by it): the handshake fails and the client says it cannot reach the daemon."""
    other = team.new_client(None)
    try:
        wrong = cli(other, "keys", "show", "--server").stdout.strip()
        env = {**team.client_env(), "TRUSTY_MEMORY_SERVER_KEY": wrong}
        out = cli(team.client_home, "palace", "list", env=env)
        assert out.returncode == 1 and "tcp://" in out.stderr
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_malformed_frames_over_tcp_get_errors_and_the_daemon_keeps_serving(team):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    transport.secure_connect(sock, team.frontend, team.client_config())
    sock.connect(team.frontend)
    try:
        for garbage in (b"", b"\xc1", b"\x81\xa2id\xa1x", b"\xff" * 4096):
            sock.send(garbage)
            assert sock.poll(10_000), f"no answer to {garbage[:8]!r}"
            resp = p.decode_response(sock.recv())
            assert not resp.ok and resp.error.code in (
                p.ErrorCode.MALFORMED_FRAME,
                p.ErrorCode.INVALID_PARAMS,
            ), resp
        sock.send_multipart([b"one", b"two", b"three"])  # bad framing: dropped, logged
        with team.client() as client:
            assert client.ping()["pong"] is True
    finally:
        sock.close(linger=0)


def test_plain_tcp_is_refused_unless_loopback_and_insecure(tmp_path):
    home = _short_tmp("tmp-")
    try:
        for endpoint, flags in (
            (f"tcp://0.0.0.0:{free_port()}", ["--insecure"]),
            (f"tcp://127.0.0.1:{free_port()}", []),  # CURVE, but no keys yet
        ):
            env = {"TRUSTY_MEMORY_BROKER_FRONTEND": endpoint}
            out = cli(home, "daemon", *flags, env=env, timeout=60)
            assert out.returncode == 2, out.stderr
            expected = "plain tcp refused" if flags else "keys init"
            assert expected in out.stderr, out.stderr
        # Loopback and --insecure: plain tcp, for tests; a client without a key gets in.
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        env = {"TRUSTY_MEMORY_BROKER_FRONTEND": endpoint, "TRUSTY_MEMORY_DREAMER_ENABLED": "0"}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "trusty_memory.client.cli.main", "daemon", "--insecure"],
            env={**os.environ, "TRUSTY_MEMORY_HOME": str(home), **env},
            stderr=subprocess.DEVNULL,
        )
        try:
            client_home = tmp_path / "client"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                status = cli(client_home, "status", "--daemon", endpoint)
                if status.returncode == 0:
                    break
                time.sleep(0.2)
            assert status.returncode == 0, status.stdout
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    finally:
        shutil.rmtree(home, ignore_errors=True)


# -- remote palace workers -------------------------------------------------------------


class RemoteWorker:
    """``trusty-memory worker`` in a home of its own (the palace's files live there)."""

    def __init__(self, team: TeamDaemon, palace: str, reader: bool = False) -> None:
        self.team, self.palace, self.reader = team, palace, reader
        self.home = team.new_client(f"worker-{palace}{'-r' if reader else ''}")
        self.proc: subprocess.Popen | None = None

    def start(self) -> RemoteWorker:
        args = ["--broker", self.team.backend, "--server-key", self.team.server_key]
        args += ["--palace", self.palace] + (["--reader"] if self.reader else [])
        log = open(self.home / "worker.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                *self.team.client_prefix,
                sys.executable,
                "-m",
                "trusty_memory.client.cli.main",
                "worker",
                *args,
            ],
            env={**os.environ, "TRUSTY_MEMORY_HOME": str(self.home)},
            stderr=log,
        )
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.home, ignore_errors=True)


def remote_writer(team: TeamDaemon, palace: str) -> dict | None:
    with team.client() as client:
        for service in client.status()["services"]:
            if service["name"] == f"palace:{palace}":
                return next((w for w in service["workers"] if w["role"] == "writer"), None)
    return None


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_remote_worker_killed_and_restarted_loses_nothing_acknowledged(team):
    worker = RemoteWorker(team, "far").start()
    try:
        assert wait_until(lambda: remote_writer(team, "far") is not None, 60)
        writer = remote_writer(team, "far")
        assert writer["remote"] is True and writer["host"] == socket.gethostname()
        assert writer["pid"] == worker.proc.pid
        status = cli(team.client_home, "status", env=team.client_env())
        assert "(remote)" in status.stdout

        acknowledged: list[str] = []
        failed: list[str] = []
        stop = threading.Event()

        def write_loop() -> None:
            with team.client() as client:
                i = 0
                while not stop.is_set():
                    try:
                        stored = client.remember("far", f"remote note number {i}")
                        acknowledged.append(stored.drawer_id)
                    except p.TrustyError as exc:  # answered, never hanging
                        failed.append(exc.message)
                    i += 1

        writer_thread = threading.Thread(target=write_loop)
        writer_thread.start()
        assert wait_until(lambda: len(acknowledged) >= 10, 60)
        worker.kill()  # kill -9 while writes stream in
        time.sleep(2.0)
        before_restart = len(acknowledged)
        worker.start()
        assert wait_until(lambda: len(acknowledged) >= before_restart + 10, 60), failed
        stop.set()
        writer_thread.join(timeout=60)
        assert not writer_thread.is_alive()

        # Every failure was an answer naming its cause (the loop went on: none hung).
        assert all("crashed" in m or "timed out" in m for m in failed), failed
        with team.client() as client:
            listing = client.list("far", limit=10_000)
            stored_ids = {d.drawer_id for d in listing.drawers}
            missing = set(acknowledged) - stored_ids
            assert not missing, f"{len(missing)} acknowledged writes lost"
            assert len(stored_ids) >= len(acknowledged)
            # Served from the worker's home, not the broker's.
            assert not (team.home / "palaces" / "far").exists()
            assert (worker.home / "palaces" / "far" / "palace.sqlite3").exists()
            assert "far" in client.palace_list()
        assert remote_writer(team, "far")["pid"] == worker.proc.pid  # the restarted one
        spawned = [e for e in team.log_lines("spawned") if e.get("service") == "palace:far"]
        assert spawned == [], "the broker started a local worker for a remote writer's palace"
    finally:
        worker.stop()


def test_remote_reader_serves_reads_beside_a_remote_writer(team):
    """A reader on the writer's host (it reads the same files) registers remotely too."""
    writer = RemoteWorker(team, "near").start()
    reader = None
    try:
        assert wait_until(lambda: remote_writer(team, "near") is not None, 60)
        with team.client() as client:
            stored = client.remember("near", "the reader answers this recall")
        reader = RemoteWorker(team, "near", reader=True)
        shutil.rmtree(reader.home)
        reader.home = writer.home  # same host, same palace files
        reader.start()

        def has_reader() -> bool:
            with team.client() as client:
                for service in client.status()["services"]:
                    if service["name"] == "palace:near":
                        return any(w["role"] == "reader" for w in service["workers"])
            return False

        assert wait_until(has_reader, 60)
        with team.client() as client:
            for _ in range(5):
                hits = client.recall("near", "which process answers this recall").results
                assert hits[0].drawer_id == stored.drawer_id
    finally:
        if reader is not None and reader.proc is not None:
            reader.proc.terminate()
            reader.proc.wait(timeout=20)
        writer.stop()


def test_without_local_workers_palaces_wait_for_remote_ones():
    """``TRUSTY_MEMORY_LOCAL_WORKERS=0`` (the Kubernetes layout): the broker starts no palace
    worker; a request waits for a remote writer (its deadline answers it if none comes),
    and one that registers serves it."""
    frontend = f"tcp://127.0.0.1:{free_port()}"
    backend = f"tcp://127.0.0.1:{free_port()}"
    team = TeamDaemon(_short_tmp("tmk-"), frontend, backend)
    team.env["TRUSTY_MEMORY_LOCAL_WORKERS"] = "0"
    team.start()
    worker = None
    try:
        with team.client() as client:
            with pytest.raises(p.TrustyError) as waited:
                client.call("memory_list", {}, palace="pod-palace", timeout=1.5)
            assert waited.value.code == p.ErrorCode.TIMEOUT
            assert "palace:pod-palace" in waited.value.message
        worker = RemoteWorker(team, "pod-palace").start()
        assert wait_until(lambda: remote_writer(team, "pod-palace") is not None, 60)
        with team.client() as client:
            stored = client.remember("pod-palace", "served from the worker's pod")
            assert client.recall("pod-palace", "which pod").results[0].drawer_id == (
                stored.drawer_id
            )
            assert client.palace_list() == ["pod-palace"]
        spawned = [e for e in team.log_lines("spawned") if e["service"].startswith("palace:")]
        assert spawned == []
    finally:
        if worker is not None:
            worker.stop()
        team.cleanup()


def test_a_remote_palace_is_never_served_here_after_a_restart():
    """A palace a remote writer served stays that worker's across a daemon restart. The home
    holds an old copy of it (it moved to the worker's host): until the worker reconnects,
    its requests wait and say for whom, ``palace_create`` refuses the name, and no local
    writer starts, so no write is acknowledged into a copy that is not served. ``palace
    forget-remote`` gives it back to local workers, and is refused while the worker serves."""
    frontend = f"tcp://127.0.0.1:{free_port()}"
    backend = f"tcp://127.0.0.1:{free_port()}"
    team = TeamDaemon(_short_tmp("tmr-"), frontend, backend)
    palace_dir.create(team.client_config(team.home), "moved", "the copy left behind")
    worker = RemoteWorker(team, "moved")
    try:
        team.start()
        worker.start()
        assert wait_until(lambda: remote_writer(team, "moved") is not None, 60)
        with team.client() as client:
            before = client.remember("moved", "the release train leaves on Thursdays")
        worker.proc.terminate()  # its files stay in its home, on "its host"
        worker.proc.wait(timeout=20)
        team.stop()
        assert json.loads((team.home / "remote_palaces.json").read_text())["palaces"]["moved"]

        team.start()
        with team.client() as client:
            with pytest.raises(p.TrustyError) as waited:
                client.call("memory_remember", {"text": "lost?"}, palace="moved", timeout=2.0)
            assert waited.value.code == p.ErrorCode.TIMEOUT
            assert "served by a remote worker on" in waited.value.message
            assert "not connected" in waited.value.message
            with pytest.raises(p.TrustyError) as taken:
                client.palace_create("moved")
            assert taken.value.code == p.ErrorCode.PALACE_EXISTS
            assert "remote worker" in taken.value.message
            assert client.status()["remote_palaces"]["moved"]["connected"] is False
        status = team.client_cli(team.client_home, "status")
        assert "waiting: palace moved is served by a remote worker" in status.stdout
        spawned = [e for e in team.log_lines("spawned") if e.get("service") == "palace:moved"]
        assert spawned == [], "a local writer started for a remote writer's palace"

        worker.start()  # back: it serves what it held, the note from before the restart
        assert wait_until(lambda: remote_writer(team, "moved") is not None, 60)
        with team.client() as client:
            hits = client.recall("moved", "when does the release train leave").results
            assert hits[0].drawer_id == before.drawer_id
        refused = team.client_cli(team.client_home, "palace", "forget-remote", "moved")
        assert refused.returncode != 0 and "stop it first" in refused.stderr

        worker.proc.terminate()
        worker.proc.wait(timeout=20)
        assert wait_until(lambda: remote_writer(team, "moved") is None, 30)
        given = team.client_cli(team.client_home, "palace", "forget-remote", "moved", "--json")
        assert given.returncode == 0, given.stderr
        assert json.loads(given.stdout)["local_copy"] is True
        with team.client() as client:  # local workers serve the home's copy now
            client.remember("moved", "served from the daemon's home again")
            assert client.status()["remote_palaces"] == {}
        spawned = [e for e in team.log_lines("spawned") if e.get("service") == "palace:moved"]
        assert spawned
        assert "moved" not in json.loads((team.home / "remote_palaces.json").read_text())["palaces"]
    finally:
        worker.stop()
        team.cleanup()


def test_a_remote_reader_of_a_palace_served_here_is_refused(team):
    with team.client() as client:
        client.palace_create("served-here")
        client.remember("served-here", "a local writer holds this")
    reader = RemoteWorker(team, "served-here", reader=True)
    # A copy of the palace in the reader's home (what a reader opens), made by the store.
    directory = reader.home / "palaces" / "served-here"
    directory.mkdir(parents=True)
    (directory / "palace.json").write_text('{"name": "served-here"}')
    PalaceStore.open(directory, "served-here", PalaceSettings(), dim=DIM).close()
    reader.start()
    try:
        assert wait_until(
            lambda: any(
                e["service"] == "palace:served-here"
                for e in team.log_lines("remote reader refused: the palace is served here")
            ),
            60,
        )
        with team.client() as client:
            services = {s["name"]: s for s in client.status()["services"]}
        assert not any(w["remote"] for w in services["palace:served-here"]["workers"])
    finally:
        reader.stop()
