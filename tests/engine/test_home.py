"""One daemon per data home, whatever the environment; a home private to its user.

The clients here are real ``trusty-memory`` CLI processes, each with its own environment,
the way agents' MCP hosts start servers: some with ``XDG_RUNTIME_DIR``, some without, some
with another runtime dir, one naming the home explicitly. They all share one home.

Covers: common/home.py broker/daemon.py client/autostart.py client/cli/processes.py common/names.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import Daemon, _short_tmp
from trusty_memory.client.sync import Client
from trusty_memory.common import home as h

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]


def _compiled_dir() -> str:
    """The machine's compiled-model cache, so a test HOME does not compile the model again."""
    from trusty_memory.workers.embedder.compiled_model import default_cache_root

    return str(default_cache_root())


def _base_env(user_home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRUSTY_MEMORY_", "XDG_")) and k != "RUST_LOG"
    }
    env.update(HOME=str(user_home), TRUSTY_MEMORY_EMBEDDER_COMPILED_DIR=_compiled_dir())
    return env


def _environments(user_home: Path, data_home: Path) -> list[dict[str, str]]:
    """Five ways an MCP host may start us, all meaning the same data home."""
    base = _base_env(user_home)
    runtime_a, runtime_b, run_c = (user_home / n for n in ("xdg-a", "xdg-b", "run-c"))
    for d in (runtime_a, runtime_b):
        d.mkdir(mode=0o700, exist_ok=True)
    return [
        base,  # a filtered environment: no XDG_RUNTIME_DIR
        {**base, "XDG_RUNTIME_DIR": str(runtime_a)},
        {**base, "XDG_RUNTIME_DIR": str(runtime_b)},
        {**base, "TRUSTY_MEMORY_RUN_DIR": str(run_c)},
        {**base, "TRUSTY_MEMORY_HOME": str(data_home)},
    ]


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _daemon_pids(user_home: Path, data_home: Path) -> list[int]:
    """Every live broker process for ``data_home``, found through /proc (a count of log
    lines would miss a second daemon that never logged)."""
    mine = (f"HOME={user_home}".encode(), f"TRUSTY_MEMORY_HOME={data_home}".encode())
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"trusty_memory.broker" not in cmdline:
            continue
        if any(entry in mine for entry in env):
            pids.append(int(proc.name))
    return pids


@pytest.fixture
def user_home():
    """A throw-away $HOME whose default data home is ``~/.local/share/trusty-memory``."""
    path = _short_tmp("tmh-")
    yield path
    record = h.read_record(path / ".local/share/trusty-memory")
    if record is not None and h.pid_alive(record.pid):
        os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and h.pid_alive(record.pid):
            time.sleep(0.05)
    shutil.rmtree(path, ignore_errors=True)


def test_fifty_clients_in_mixed_environments_start_one_daemon_and_see_every_write(user_home):
    data_home = user_home / ".local/share/trusty-memory"
    envs = _environments(user_home, data_home)
    assert _cli(envs[0], "palace", "create", "shared").returncode == 0
    # That start may have settled things; stop it, so the fifty race from nothing.
    assert _cli(envs[1], "stop").returncode == 0
    assert h.live_daemon(data_home) is None

    def start(i: int) -> subprocess.CompletedProcess:
        return _cli(envs[i % len(envs)], "remember", "shared", f"note {i} from client {i}")

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(start, range(50)))
    failed = [r.stderr for r in results if r.returncode != 0]
    assert not failed, failed[:3]
    ids = {r.stdout.strip() for r in results}
    assert len(ids) == 50

    assert len(_daemon_pids(user_home, data_home)) == 1
    started = (data_home / "logs/daemon.log").read_text().count('"daemon started"')
    assert started == 2  # the first one (stopped above) and exactly one for the fifty

    # Every client, in every environment, sees every write.
    for env in envs:
        listed = _cli(env, "--json", "list", "shared", "--limit", "100")
        assert listed.returncode == 0, listed.stderr
        seen = {d["drawer_id"] for d in json.loads(listed.stdout)["drawers"]}
        assert ids <= seen
        status = json.loads(_cli(env, "--json", "status").stdout)
        assert status["pid"] == h.live_daemon(data_home).pid


def test_a_second_daemon_in_another_environment_refuses_the_home(user_home):
    data_home = user_home / ".local/share/trusty-memory"
    envs = _environments(user_home, data_home)
    assert _cli(envs[1], "palace", "create", "p").returncode == 0
    owner = h.live_daemon(data_home)
    assert owner is not None
    second = subprocess.run(
        [*CLI, "daemon"], env=envs[0], capture_output=True, text=True, timeout=60, check=False
    )
    assert second.returncode == 1
    assert "already runs" in second.stderr
    assert h.live_daemon(data_home) == owner


def test_stop_never_signals_a_process_that_reused_a_dead_daemons_pid(fresh_home):
    """A record left by a kill -9'd daemon names a pid; once that pid is reused, ``stop``
    must leave the new process alone."""
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(fresh_home)}
    d = Daemon(fresh_home).start()
    os.kill(d.pid(), signal.SIGKILL)
    d.proc.wait(timeout=10)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        record = json.loads((fresh_home / h.RECORD_NAME).read_text())
        record["pid"] = stranger.pid  # as if the kernel had reused it
        (fresh_home / h.RECORD_NAME).write_text(json.dumps(record))
        out = subprocess.run(
            [*CLI, "stop"], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert out.returncode == 0 and "not running" in out.stdout
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_live_lock_holder_with_a_different_start_time_is_not_the_daemon(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from trusty_memory.common import home; "
         "home.hold_lock(__import__('pathlib').Path(sys.argv[1])); print('held', flush=True); "
         "sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        real = h.DaemonRecord(holder.pid, h.process_started(holder.pid), "ipc://x", "", "", "")
        h.write_record(tmp_path, real)
        assert h.live_daemon(tmp_path) == real
        h.write_record(tmp_path, h.DaemonRecord(holder.pid, "1", "ipc://x", "", "", ""))
        assert h.live_daemon(tmp_path) is None
    finally:
        holder.kill()
        holder.wait()
    h.write_record(tmp_path, real)
    assert h.live_daemon(tmp_path) is None  # the lock died with its holder


# -- private files -----------------------------------------------------------------------


def _modes(root: Path) -> dict[str, int]:
    modes = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        st = path.lstat()
        if not stat.S_ISSOCK(st.st_mode):
            modes[str(path.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return modes


def test_a_fresh_home_below_an_open_parent_is_private(tmp_path):
    parent = _short_tmp("tmp-")
    try:
        os.chmod(parent, 0o755)
        data_home = parent / "home"
        env = {**os.environ, "TRUSTY_MEMORY_HOME": str(data_home)}
        for args in (
            ["palace", "create", "secrets"],
            ["remember", "secrets", "The staging DB password is hunter2"],
            ["--json", "recall", "secrets", "staging password"],
            ["export", "secrets", "-o", str(data_home / "export.jsonl")],
            ["dream", "--palace", "secrets"],
            ["stop"],  # the index snapshot and L1 files are written on the way out
        ):
            # umask 022: what a user's shell usually has
            out = subprocess.run(
                [*CLI, *args], env=env, capture_output=True, timeout=120, umask=0o022
            )
            assert out.returncode == 0, out.stderr
        modes = _modes(data_home)
        assert any(name.endswith("palace.sqlite3") for name in modes)
        assert any(name.endswith("daemon.log") for name in modes)
        loose = {
            name: oct(mode)
            for name, mode in modes.items()
            if mode != (0o700 if (data_home / name).is_dir() else 0o600)
        }
        assert not loose
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_an_existing_loose_home_is_tightened_on_start_with_one_log_line(fresh_home):
    palace = fresh_home / "palaces" / "old"
    palace.mkdir(parents=True)
    (palace / "palace.json").write_text('{"name": "old", "description": null}')
    for path in (fresh_home, fresh_home / "palaces", palace):
        os.chmod(path, 0o755)
    os.chmod(palace / "palace.json", 0o644)
    d = Daemon(fresh_home).start()
    try:
        with Client(d.config, autostart=False) as c:
            assert "old" in c.palace_list()
        assert stat.S_IMODE(fresh_home.stat().st_mode) == 0o700
        assert stat.S_IMODE(palace.stat().st_mode) == 0o700
        assert stat.S_IMODE((palace / "palace.json").stat().st_mode) == 0o600
        lines = [line for line in d.log_tail(400).splitlines() if "tightened file modes" in line]
        assert len(lines) == 1
    finally:
        d.stop()


# -- hostile palace names ----------------------------------------------------------------


NAMES = ["-x", "--help", "-rf", "-", "a.b", "_", "9", "a-", "x" * 64, "Mixed_Case.v2"]


def test_every_accepted_palace_name_works_end_to_end(daemon):
    with Client(daemon.config, autostart=False) as c:
        for name in NAMES:
            c.palace_create(name)
            stored = c.remember(name, f"a note kept in the palace called {name}")
            hits = c.recall(name, f"note kept in {name}", top_k=1).results
            assert [hit.drawer_id for hit in hits] == [stored.drawer_id], name
        assert set(NAMES) <= set(c.palace_list())
