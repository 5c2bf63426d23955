"""A full disk refuses writes by name and stops nothing: the daemon's home (palaces, logs,
records, sockets) sits on a small tmpfs that the test fills up.

Covers: common/disk_full.py workers/store/schema.py broker/daemon.py
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, run_cli

PALACE = "full"
SIZE = "48m"


@pytest.fixture
def small_home() -> Iterator[Path]:
    """A home on a fresh 48 MB tmpfs; skipped (with the reason) where mounting is refused."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for a real full disk needs root")
    mnt = Path(tempfile.mkdtemp(prefix="tmfull-", dir="/tmp"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    home = mnt / "home"
    try:
        yield home
    finally:
        with contextlib.suppress(Exception):
            Daemon(home).stop()
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def fill(path: Path) -> None:
    """Write ``path`` until the filesystem is full (ENOSPC), leaving it there."""
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        small = b"\0" * 512
        try:
            while True:
                f.write(small)
        except OSError:
            pass


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess:
    return run_cli(d, "--json", *args, timeout=60)


def test_a_full_disk_refuses_writes_by_name_keeps_serving_reads_and_recovers(small_home):
    """Fill the home's disk under a running daemon: every write answers the documented
    ``disk full: ...`` error (not an internal one), reads and status keep answering, the
    daemon process stays the same, and once the filler is removed writes work again with
    no restart; every acknowledged write is still there."""
    d = Daemon(small_home).start()
    pid = d.pid()
    assert cli(d, "palace", "create", PALACE).returncode == 0
    acknowledged = []
    imported = False
    for i in range(5):
        done = cli(d, "remember", PALACE, f"Acknowledged note number {i} about deploys")
        assert done.returncode == 0, done.stderr
        acknowledged.append(json.loads(done.stdout)["drawer_id"])

    filler = small_home.parent / "filler"
    fill(filler)
    errors = []
    for i in range(15):  # enough writes to need new SQLite pages, change-log rows, logs
        text = f"Written while the disk is full {i} " + "padding words " * 200
        done = cli(d, "remember", PALACE, text)
        if done.returncode == 0:
            acknowledged.append(json.loads(done.stdout)["drawer_id"])
        else:
            errors.append(done.stderr + done.stdout)
    # Every other write path while full: import, update, forget, a KG fact, a new palace.
    source = Path(tempfile.mkdtemp(prefix="tmsrc-", dir="/tmp")) / "import.jsonl"
    lines = [
        {"type": "drawer", "drawer_id": str(uuid.uuid4()), "content": f"imported {i} " * 80}
        for i in range(300)
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    attempts = [
        ("import", PALACE, str(source)),
        ("update", PALACE, acknowledged[0], "--text", "changed while full " * 200),
        ("forget", PALACE, acknowledged[1]),
        ("kg", "assert", PALACE, "db", "host", "db-" + "x" * 2000),
        ("palace", "create", "another"),
    ]
    for args in attempts:
        done = cli(d, *args)
        if done.returncode != 0:
            errors.append(done.stderr + done.stdout)
        elif args[0] == "forget":
            acknowledged.remove(acknowledged[1])
        elif args[0] == "import":
            imported = True
    source.unlink()
    source.parent.rmdir()
    assert errors, "no write was refused: the disk never filled"
    for err in errors:
        assert "disk full: " in err and "Free some space" in err, err
        assert "internal error" not in err and "did not start" not in err, err

    # Reads and status still answer while the disk is full, from the same daemon.
    listed = cli(d, "list", PALACE, "--limit", "100")
    assert listed.returncode == 0, listed.stderr
    assert cli(d, "recall", PALACE, "deploys").returncode == 0
    assert cli(d, "status").returncode == 0
    time.sleep(1.0)  # give a dying loop or restarting worker time to show
    assert d.pid() == pid and d.proc is not None and d.proc.poll() is None

    filler.unlink()
    done = cli(d, "remember", PALACE, "Written after space came back")
    assert done.returncode == 0, done.stderr + done.stdout
    acknowledged.append(json.loads(done.stdout)["drawer_id"])
    assert d.pid() == pid

    if imported:
        acknowledged += [line["drawer_id"] for line in lines]
    for drawer_id in acknowledged:
        got = cli(d, "get", drawer_id, "--palace", PALACE)
        assert got.returncode == 0, (drawer_id, got.stderr)


def test_a_daemon_starts_on_an_already_full_disk_and_writes_resume_when_room_returns(
    small_home,
):
    """The round-four case: the daemon was stopped (idle exit, a reboot) and the disk filled
    meanwhile. The next command starts it as any client would, on the home's reserve: its
    record is written, reads and status answer, a write that finds no room gets the
    documented error, and once space is freed writes work with no restart by hand. Before,
    the record's write raised ENOSPC and every command said the daemon did not start."""
    d = Daemon(small_home).start()
    assert cli(d, "palace", "create", PALACE).returncode == 0
    kept = cli(d, "remember", PALACE, "The billing service listens on port 8443")
    assert kept.returncode == 0, kept.stderr
    drawer_id = json.loads(kept.stdout)["drawer_id"]
    assert (small_home / "reserve").stat().st_size >= 1 << 20
    d.stop()
    assert d.pid() is None

    filler = small_home.parent / "filler"
    fill(filler)
    # No daemon runs: this recall starts one (client-started), on a disk with no room.
    found = cli(d, "recall", PALACE, "which port does billing use")
    assert found.returncode == 0, found.stderr + found.stdout
    assert drawer_id in found.stdout
    assert not list(small_home.glob("daemon.*.tmp")), "a failed start left its temp record"
    assert cli(d, "status").returncode == 0
    listed = cli(d, "list", PALACE)
    assert listed.returncode == 0 and drawer_id in listed.stdout
    pid = d.pid()
    errors = []
    for i in range(40):  # the reserve's megabyte is soon used up by writes
        done = cli(d, "remember", PALACE, f"Written on a full disk {i} " + "words " * 800)
        if done.returncode != 0:
            errors.append(done.stderr + done.stdout)
            break
    assert errors, "no write was refused: the disk never filled"
    assert "disk full: " in errors[0] and "Free some space" in errors[0], errors[0]

    filler.unlink()
    done = cli(d, "remember", PALACE, "Written after space came back")
    assert done.returncode == 0, done.stderr + done.stdout
    assert d.pid() == pid
    d.stop()
    assert Daemon(small_home).start().pid() is not None
    assert (small_home / "reserve").stat().st_size >= 1 << 20, "the reserve was not made again"
