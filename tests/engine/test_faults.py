"""Crashes and restarts: nothing acknowledged is lost, nobody has to be restarted by hand.

Covers: broker/supervisor.py broker/broker.py client/sync.py common/caller.py client/autostart.py
    common/daemon_address.py workers/writer.py
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, wait_until
from trusty_memory.client.autostart import daemon_pid
from trusty_memory.client.sync import Client
from trusty_memory.common.protocol import ErrorCode, TrustyError


def worker_pid(client: Client, service: str) -> int:
    for s in client.status()["services"]:
        if s["name"] == service and s["workers"]:
            return s["workers"][0]["pid"]
    raise AssertionError(f"no worker for {service}")


def wait_for_worker(client: Client, service: str, not_pid: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid = worker_pid(client, service)
            if pid != not_pid:
                return pid
        except AssertionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{service} was not restarted")


def test_kill_9_palace_worker_while_8_clients_write_loses_nothing_acknowledged(daemon):
    admin = Client(daemon.config, autostart=False)
    admin.palace_create("crashy")
    admin.remember("crashy", "warm up the worker")
    acked: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        c = Client(daemon.config, autostart=False)
        i = 0
        while not stop.is_set():
            try:
                r = c.remember("crashy", f"writer {n} note {i} about topic {i % 7}")
                with lock:
                    acked.append(r.drawer_id)
            except TrustyError as exc:  # allowed: an error, never a silent loss
                with lock:
                    errors.append(exc.message)
            i += 1
        c.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    victim = worker_pid(admin, "palace:crashy")
    os.kill(victim, signal.SIGKILL)
    wait_for_worker(admin, "palace:crashy", victim)
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert len(acked) > 50, (len(acked), errors[:3])
    # Read the palace's SQLite file itself (memory_list stops at 1,000 drawers).
    db = sqlite3.connect(daemon.config.palace_dir("crashy") / "palace.sqlite3")
    listed = {row[0] for row in db.execute("SELECT id FROM drawers")}
    db.close()
    missing = set(acked) - listed
    assert not missing, f"{len(missing)} acknowledged writes lost"
    info = admin.palace_info("crashy")
    assert info.drawer_count == len(listed) == len(set(acked)) + 1
    assert info.index_count == info.drawer_count  # the index agrees with SQLite
    admin.close()


def test_kill_9_embedder_recovers(daemon):
    client = Client(daemon.config, autostart=False)
    client.palace_create("embedcrash")
    client.remember("embedcrash", "before the crash")
    victim = worker_pid(client, "embedder")
    results: list[object] = []

    def recall() -> None:
        try:
            results.append(client_b.recall("embedcrash", "crash", top_k=1))
        except TrustyError as exc:
            results.append(exc)

    client_b = Client(daemon.config, autostart=False)
    os.kill(victim, signal.SIGKILL)
    t = threading.Thread(target=recall)
    t.start()
    t.join(timeout=120)
    assert results, "the pending request neither answered nor failed"
    wait_for_worker(client, "embedder", victim)
    stored = client.remember("embedcrash", "after the crash")
    assert stored.status == "stored"
    assert client.recall("embedcrash", "after the crash", top_k=1).results
    client.close()
    client_b.close()


def test_clients_reconnect_after_daemon_restart(fresh_home):
    d = Daemon(fresh_home).start()
    client = Client(d.config, autostart=False)
    client.palace_create("survivor")
    first = client.remember("survivor", "written before the restart")
    d.stop()
    assert daemon_pid(d.config) is None
    restarted = threading.Timer(1.0, Daemon(fresh_home).start)
    restarted.start()
    # The same client object, never restarted itself, keeps working.
    hits = client.recall("survivor", "before the restart", top_k=1).results
    restarted.join()
    assert hits[0].drawer_id == first.drawer_id
    client.close()
    Daemon(fresh_home).stop()


def test_fifty_concurrent_starters_make_one_daemon(fresh_home):
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(fresh_home)}
    code = "from trusty_memory.client.sync import Client; print(Client().ping()['pid'])"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(50)
    ]
    pids = {proc.communicate(timeout=180)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert len(pids) == 1, pids
    winner = pids.pop()

    def daemons() -> list[str]:
        out = subprocess.run(
            ["pgrep", "-f", "trusty_memory.broker"], capture_output=True, text=True
        )
        found = []
        for pid in out.stdout.split():
            with contextlib.suppress(OSError):  # one that just exited
                if str(fresh_home) in Path(f"/proc/{pid}/environ").read_bytes().decode(
                    errors="replace"
                ):
                    found.append(pid)
        return found

    # One owns the home; any other started in a race finds it taken and exits at once.
    wait_until(lambda: daemons() == [winner], 15, "one daemon for the home", interval=0.1)


def test_idle_palace_worker_stops_and_comes_back(fresh_home):
    d = Daemon(fresh_home, {"TRUSTY_MEMORY_PALACE_IDLE_STOP_S": "1"}).start()
    client = Client(d.config, autostart=False)
    client.palace_create("sleepy")
    stored = client.remember("sleepy", "remember me after a nap")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        services = {s["name"]: s for s in client.status()["services"]}
        if not services["palace:sleepy"]["workers"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("idle worker was not stopped")
    assert client.recall("sleepy", "nap", top_k=1).results[0].drawer_id == stored.drawer_id
    client.close()
    d.stop()


def test_a_corrupt_palace_file_fails_fast_by_name_and_the_others_keep_serving(fresh_home):
    """The worker used to exit at open: the broker restarted it in a loop (11 times in 3 s)
    while every caller waited out the 30 s deadline for 'timed out waiting for palace'."""
    d = Daemon(fresh_home).start()
    with Client(d.config, autostart=False) as c:
        for name in ("broken", "fine"):
            c.palace_create(name)
            c.remember(name, f"a note in the {name} palace")
    d.stop()
    db = d.config.palace_dir("broken") / "palace.sqlite3"
    good = db.read_bytes()
    with db.open("r+b") as fh:
        fh.write(b"\xff" * 100)  # SQLite's header
    d = Daemon(fresh_home).start()
    with Client(d.config, autostart=False) as c:
        for call in (lambda: c.recall("broken", "note"), lambda: c.remember("broken", "new")):
            t0 = time.monotonic()
            with pytest.raises(TrustyError) as err:
                call()
            assert time.monotonic() - t0 < 5
            assert err.value.code == ErrorCode.STORAGE_ERROR
            assert err.value.message.startswith(f"palace file is corrupt: {db}")
            assert "Restore it from a backup" in err.value.message
        assert c.recall("fine", "note", top_k=1).results
        time.sleep(2.5)
        assert c.status()["restarts"]["palace:broken#0"] == 0
        db.write_bytes(good)  # restored from a backup: served again without a restart
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                hits = c.recall("broken", "a note in the broken palace", top_k=1).results
                break
            except TrustyError:
                time.sleep(0.5)
        assert hits and hits[0].content == "a note in the broken palace"
    d.stop()
