"""The data home: which daemon owns it, where its sockets are, and who may read it.

One daemon per home, whatever the environment. The runtime dir (sockets) depends on
``XDG_RUNTIME_DIR``, which MCP hosts often filter out of a server's environment, so
neither the lock nor the knowledge of where the daemon listens can live there: two
clients that disagree about the runtime dir would start two daemons, two writers over one
SQLite file. So both live in the home:

* ``daemon.lock`` - an exclusive ``flock`` the daemon holds for its whole life. The
  kernel drops it when the process dies, however it dies, so a held lock means a live
  daemon, and a ``kill -9`` leaves nothing stale behind.
* ``daemon.json`` - the owner's record: pid, process start time, and the endpoints it
  bound. A client in any environment reads it to find the daemon; the record counts only
  while the lock is held and the pid is still the process that wrote it (a pid reused
  after a crash is never mistaken for the daemon, so ``stop`` never signals a stranger).

Memories hold secrets, so everything here is private to the user: the actors run with
umask 077, and ``tighten`` brings an older, looser home to 0700 directories and 0600
files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

LOCK_NAME = "daemon.lock"
RECORD_NAME = "daemon.json"
START_LOCK_NAME = "start.lock"
# Room kept back so a daemon can start on a full disk (its record, SQLite's shared-memory
# file for reads): released when the record cannot be written, made again at the next
# start that finds room.
RESERVE_NAME = "reserve"
RESERVE_BYTES = 1 << 20

# A client probing the lock holds it (shared) for microseconds; a starting daemon retries
# its exclusive lock for this long before it concludes that another daemon owns the home.
LOCK_RETRY_S = 1.0


class AlreadyRunning(Exception):
    """Another live daemon holds this home."""


@dataclass(frozen=True)
class DaemonRecord:
    pid: int
    started: str  # the process's start time as the kernel tells it ("" where unknown)
    frontend: str
    backend: str
    home: str
    version: str
    mcp: str = ""  # the MCP host's Unix socket (path), where ``serve`` relays sessions
    # Started on demand by a client (exits when idle): a service manager's daemon
    # (``daemon --take-over``) may stop it and take the home over.
    client_started: bool = False


# -- private files ---------------------------------------------------------------------


def make_private() -> None:
    """Every file and directory this process creates from now on is the user's alone."""
    os.umask(0o077)


def tighten(home: Path) -> list[Path]:
    """Make ``home`` and everything below it 0700 (directories) / 0600 (files).

    Returns the paths whose mode changed, so the caller can say so once. Links are left
    alone (their target may not be ours to change), and so are sockets, whose directory
    already keeps others out.
    """
    changed: list[Path] = []
    if not home.is_dir():
        return changed

    def fix(path: Path, want: int) -> None:
        try:
            st = path.lstat()
        except FileNotFoundError:  # removed while we walked (a worker's temp file)
            return
        if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            return
        if stat.S_IMODE(st.st_mode) != want:
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, want)
                changed.append(path)

    fix(home, 0o700)
    for root, dirs, files in os.walk(home):
        for name in dirs:
            fix(Path(root, name), 0o700)
        for name in files:
            fix(Path(root, name), 0o600)
    return changed


# -- the owner's lock and record -----------------------------------------------------------


def hold_lock(home: Path) -> int:
    """Take the home's daemon lock for this process's life; returns the fd to keep open.

    Raises ``AlreadyRunning`` when another daemon holds it.
    """
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    if not flock_within(fd, LOCK_RETRY_S):
        os.close(fd)
        raise AlreadyRunning(f"a daemon already runs for {home}")
    return fd


def flock_within(fd: int, wait_s: float) -> bool:
    """Take an exclusive ``flock`` on ``fd``, retrying for up to ``wait_s``; False if held."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def lock_held(home: Path) -> bool:
    """True while some daemon holds the home's lock."""
    try:
        fd = os.open(home / LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops our shared lock at once
    return False


def write_record(home: Path, record: DaemonRecord) -> bool:
    """Publish where the daemon listens: written whole, then renamed into place.

    On a full disk the home's reserve is released and the write tried once more, so a
    daemon still starts there (reads and ``status`` answer; writes get the documented
    disk-full error). Returns True when the reserve had to be used.
    """
    try:
        _write_record_once(home, record)
        return False
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not release_reserve(home):
            raise
    _write_record_once(home, record)
    return True


def _write_record_once(home: Path, record: DaemonRecord) -> None:
    path = home / RECORD_NAME
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(record), out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # no empty leftovers from a start that found no room
        raise


def ensure_reserve(home: Path) -> bool:
    """Keep ``RESERVE_BYTES`` of the home's disk held in a file of zeros (written, not
    sparse, so the blocks are really taken). False where there is no room for it now: a
    later start tries again. Never raises for a full disk."""
    path = home / RESERVE_NAME
    with contextlib.suppress(OSError):
        if path.stat().st_size >= RESERVE_BYTES:
            return True
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(bytes(RESERVE_BYTES))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        return True
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return False
        raise


def release_reserve(home: Path) -> bool:
    """Give the reserve's room back to the disk; False if there was none to give."""
    try:
        (home / RESERVE_NAME).unlink()
        return True
    except FileNotFoundError:
        return False


def clear_record(home: Path, pid: int) -> None:
    """Remove the record if it is still ours (called on a clean stop)."""
    record = read_record(home)
    if record is not None and record.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            (home / RECORD_NAME).unlink()


def read_record(home: Path) -> DaemonRecord | None:
    try:
        raw = json.loads((home / RECORD_NAME).read_text())
        known = {f.name for f in fields(DaemonRecord)}
        return DaemonRecord(**{k: v for k, v in raw.items() if k in known})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def live_daemon(home: Path) -> DaemonRecord | None:
    """The record of the daemon that owns ``home`` now, or None.

    A record counts only while the lock is held and its pid is still the process that
    wrote it (same kernel start time), so neither a crashed daemon's record nor a pid the
    kernel gave to another program afterwards is taken for a daemon.
    """
    record = read_record(home)
    if record is None or not lock_held(home):
        return None
    if not pid_alive(record.pid):
        return None
    if record.started and process_started(record.pid) not in ("", record.started):
        return None
    return record


PARENT_ENV = "TRUSTY_MEMORY_PARENT_PID"
# Test-only: "forked" makes every palace worker forked from the template die of SIGSEGV
# before it serves anything (the crash seen on a 16-core host, on any machine); "all" makes
# every palace worker do so, however started (a crash loop).
CRASH_TEST_ENV = "TRUSTY_MEMORY_TEST_CRASH_PALACE_WORKERS"


def expected_parent() -> int:
    """The pid of the process that supervises this actor: the daemon (or, for a forked
    palace worker, the template), as it told its children in ``TRUSTY_MEMORY_PARENT_PID``.

    An actor stops when its supervisor is gone. Reading ``os.getppid()`` at start-up
    instead would take init for the parent when the daemon died while the actor was
    still importing (a daemon stopped right after it started), and such an orphan (an
    embedder holding the model, ~180 MB) would then run for ever.
    """
    raw = os.environ.get(PARENT_ENV, "")
    return int(raw) if raw.isdigit() else os.getppid()


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), or "" where unknown.

    With the pid it names one process for good: a reused pid has a later start time.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def tree_size(path: str | os.PathLike[str]) -> int:
    """Bytes of the files under ``path`` (links not followed; unreadable ones skipped), for
    what ``doctor`` and the web page report of a folder's size on disk."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total
