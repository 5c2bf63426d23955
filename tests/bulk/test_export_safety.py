"""``trusty-memory export -o PATH`` where another local user can reach PATH's folder, and
the ways writing the file can fail: against the real daemon and command, as two users.

The suite runs as root, so the other user is made here when missing (``tm-attacker``, a
system account without a home or a login shell, kept for the next run) and plants its
files and links with ``setpriv`` in a sticky, world-writable folder like ``/tmp``. Root
passes every permission check, so these tests show that the export refuses on its own
account, whatever ``fs.protected_symlinks`` says.

Covers: client/export.py client/cli/transfer.py
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ATTACKER, as_attacker, run_cli

DIM = 384
SECRET = "the staging database password is hunter2"


def cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return run_cli(daemon, *args, timeout=120)


def plant(who: pwd.struct_passwd, script: str, *args: str) -> None:
    proc = as_attacker(who, script, *args, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, f"planting as {ATTACKER} failed: {err}"


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A folder like /tmp: anyone may create files in it; only their owner may remove them."""
    folder = Path(tempfile.mkdtemp(prefix="tm-sticky-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def unit(seed: int) -> np.ndarray:
    vec = np.random.default_rng(seed).standard_normal(DIM).astype("<f4")
    return vec / np.linalg.norm(vec)


@pytest.fixture(scope="module")
def palace(daemon) -> str:
    """A palace worth stealing: 60 drawers with vectors (an export of about 140 KB)."""
    lines = [
        {
            "type": "drawer",
            "drawer_id": str(uuid.UUID(int=9000 + i)),
            "content": f"{SECRET} (note {i})",
            "vector": base64.b64encode(unit(i).tobytes()).decode(),
        }
        for i in range(60)
    ]
    stdin = "".join(json.dumps(x) + "\n" for x in lines)
    done = run_cli(daemon, "import", "secrets", "-", stdin=stdin)
    assert done.returncode == 0, done.stderr
    return "secrets"


def exported(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert rows[0]["type"] == "header"
    return rows[1:]


def assert_refused(done: subprocess.CompletedProcess, path: Path, *why: str) -> None:
    """Exit non-zero with one line on stderr that names ``path`` and the cause."""
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0], lines[0]
    for words in why:
        assert words in lines[0], lines[0]


def owner_and_mode(path: Path) -> tuple[int, str]:
    st = path.lstat()
    return st.st_uid, oct(stat.S_IMODE(st.st_mode))


# -- another user's traps --------------------------------------------------------------


def test_an_export_never_follows_another_users_link(daemon, palace, attacker, sticky, tmp_path):
    victim = tmp_path / "victim.conf"  # root's file, which the other user cannot even read
    victim.write_text("root's own settings\n")
    target = sticky / "out.jsonl"
    plant(attacker, 'ln -s "$1" "$2"', str(victim), str(target))

    done = cli(daemon, "export", palace, "-o", str(target))
    assert_refused(done, target, "symbolic link", f"owned by {ATTACKER}")
    assert victim.read_text() == "root's own settings\n"  # not replaced by the export
    assert target.is_symlink() and os.readlink(target) == str(victim)
    assert sorted(p.name for p in sticky.iterdir()) == ["out.jsonl"]  # no temporary left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.conf"]


def test_my_own_link_to_another_users_file_is_refused(daemon, palace, attacker, sticky):
    theirs = sticky / "theirs.jsonl"
    plant(attacker, 'umask 0; echo planted > "$1"', str(theirs))
    mine = sticky / "out.jsonl"
    mine.symlink_to(theirs)

    done = cli(daemon, "export", palace, "-o", str(mine))
    assert_refused(done, mine, str(theirs), f"owned by {ATTACKER}")
    assert theirs.read_text() == "planted\n"
    assert owner_and_mode(theirs) == (attacker.pw_uid, "0o666")
    assert mine.is_symlink()
    assert sorted(p.name for p in sticky.iterdir()) == ["out.jsonl", "theirs.jsonl"]


def test_my_dangling_link_is_followed_only_into_a_folder_of_mine(
    daemon, palace, attacker, sticky, tmp_path
):
    # Into the other user's folder: they could take the file away, or swap it.
    drop = sticky / "drop"
    plant(attacker, 'mkdir -m 0777 "$1"', str(drop))
    mine = sticky / "out.jsonl"
    mine.symlink_to(drop / "loot.jsonl")
    done = cli(daemon, "export", palace, "-o", str(mine))
    assert_refused(done, mine, str(drop / "loot.jsonl"), f"owned by {ATTACKER}")
    assert list(drop.iterdir()) == []

    # Into a folder of mine: the export appears where the link points, the user's alone.
    mine.unlink()
    mine.symlink_to(tmp_path / "kept.jsonl")
    done = cli(daemon, "export", palace, "-o", str(mine))
    assert done.returncode == 0, done.stderr
    assert mine.is_symlink() and len(exported(tmp_path / "kept.jsonl")) == 60
    assert owner_and_mode(tmp_path / "kept.jsonl") == (os.getuid(), "0o600")


def _next_pids(count: int) -> list[int]:
    """The pids the kernel is about to hand out (it counts up from the last one)."""
    last = Path("/proc/sys/kernel/ns_last_pid")
    if not last.exists():
        return []
    start = int(last.read_text()) + 1
    return list(range(start, start + count))


def test_a_planted_temporary_file_never_receives_the_export(daemon, palace, attacker, sticky):
    """The temporary name is random and created exclusively: files the other user planted
    under the names a pid-numbered scheme would pick (world-writable, theirs) stay empty,
    and the export that lands is the caller's, mode 0600."""
    target = sticky / "out.jsonl"
    names = [str(sticky / f".out.jsonl.{pid}.tmp") for pid in _next_pids(200)]
    if names:
        plant(attacker, 'umask 0; for f; do : > "$f"; done', *names)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trusty_memory.client.cli.main",
            "export",
            palace,
            "-o",
            str(target),
        ],
        env=daemon.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Its own pid too, should the kernel have moved on: the command needs a second to
    # start, long before it opens any file.
    with contextlib.suppress(AssertionError):
        plant(attacker, 'umask 0; set -C; : > "$1"', str(sticky / f".out.jsonl.{proc.pid}.tmp"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err

    assert owner_and_mode(target) == (os.getuid(), "0o600")
    assert len(exported(target)) == 60
    planted = [p for p in sticky.iterdir() if p.name != "out.jsonl"]
    assert planted and all(p.name.endswith(".tmp") for p in planted)
    for p in planted:
        assert owner_and_mode(p) == (attacker.pw_uid, "0o666")
        assert p.stat().st_size == 0, f"{p.name} received the export"


def test_an_export_never_writes_into_another_users_pipe(daemon, palace, attacker, sticky):
    fifo = sticky / "out.jsonl"
    loot = sticky / "loot"
    plant(attacker, 'umask 0; mkfifo "$1" && : > "$2"', str(fifo), str(loot))
    reader = as_attacker(attacker, 'exec cat "$1" >> "$2"', str(fifo), str(loot))
    try:
        done = cli(daemon, "export", palace, "-o", str(fifo))
    finally:
        # Let the reader see the end of its pipe (a writer that opens and closes), or kill it.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        try:
            reader.wait(timeout=10)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
    assert_refused(done, fifo, f"owned by {ATTACKER}")
    assert loot.read_text() == ""
    assert SECRET not in loot.read_text()


# -- writing fails -------------------------------------------------------------------------


def test_an_export_through_a_file_is_a_clear_error(daemon, palace, tmp_path):
    (tmp_path / "somefile").write_text("just a file\n")
    target = tmp_path / "somefile" / "out.jsonl"
    done = cli(daemon, "export", palace, "-o", str(target))
    assert_refused(done, target, "Not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["somefile"]


def test_an_export_onto_a_folder_is_a_clear_error(daemon, palace, tmp_path):
    target = tmp_path / "out.jsonl"
    target.mkdir()
    (target / "inside").write_text("kept\n")
    done = cli(daemon, "export", palace, "-o", str(target))
    assert_refused(done, target, "Is a directory")
    assert (target / "inside").read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_an_export_whose_rename_is_refused_is_a_clear_error(daemon, palace, tmp_path):
    """An immutable file at the target (``chattr +i``): the temporary file is written
    whole, and then the rename onto the target fails even for root."""
    target = tmp_path / "out.jsonl"
    target.write_text("the last good export\n")
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (no chattr, or a filesystem without it)")
    try:
        done = cli(daemon, "export", palace, "-o", str(target))
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    assert_refused(done, target, "Operation not permitted")
    assert target.read_text() == "the last good export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_an_export_onto_a_full_disk_is_a_clear_error(daemon, palace, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        target = disk / "out.jsonl"
        target.write_text("the last good export\n")
        done = cli(daemon, "export", palace, "-o", str(target))  # about 140 KB: too big
        assert_refused(done, target, "No space left on device")
        assert target.read_text() == "the last good export\n"
        assert sorted(p.name for p in disk.iterdir()) == ["out.jsonl"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)
