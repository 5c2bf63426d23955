"""Import for someone moving in (issue 29), through the real ``trusty-memory`` command and
daemon: a file written by hand (no ids, no types) imports and imports again as a no-op;
progress shows without a terminal; Ctrl-C is answered at once; restoring a palace over a
name in use says how to restore it under another.

Covers: client/bulk.py client/jsonl_format.py client/cli/transfer.py client/progress.py
    client/cli/palaces.py
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_cli
from trusty_memory.client.sync import Client


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    yield c
    c.close()


def cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return run_cli(daemon, *args, timeout=180)


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def stored(client: Client, palace: str) -> dict[str, tuple[str, str]]:
    """drawer id -> (content, room) of every drawer in ``palace``."""
    drawers = client.search(palace, limit=1000).drawers
    return {d.drawer_id: (d.content, d.room) for d in drawers}


def test_a_file_without_ids_or_types_imports_and_again_is_a_no_op(client, daemon, tmp_path):
    path = write(tmp_path / "moving-in.jsonl", [
        {"content": "The billing API runs on PostgreSQL 16.", "room": "Backend"},
        {"content": "Deploys go out on Tuesdays.", "tags": ["release"]},
        {"type": "drawer", "content": "Standups are at 09:30.", "room": "Meetings"},
        {"content": "The billing API runs on PostgreSQL 16.", "room": "Backend"},  # a repeat
        {"content": "The billing API runs on PostgreSQL 16.", "room": "Planning"},  # another room
    ])  # fmt: skip
    done = cli(daemon, "--json", "import", "moved-in", str(path))
    assert done.returncode == 0, (done.stdout, done.stderr)
    first = json.loads(done.stdout)
    assert (first["imported"], first["skipped_existing"], first["bad_lines"]) == (4, 1, 0)
    ids = stored(client, "moved-in")
    assert sorted(ids.values()) == sorted([
        ("The billing API runs on PostgreSQL 16.", "Backend"),
        ("Deploys go out on Tuesdays.", "General"),
        ("Standups are at 09:30.", "Meetings"),
        ("The billing API runs on PostgreSQL 16.", "Planning"),
    ])  # fmt: skip
    assert all(uuid.UUID(i).version == 5 for i in ids)  # derived from the content

    # Again: every line is skipped, nothing changes, the ids are the same.
    done = cli(daemon, "--json", "import", "moved-in", str(path))
    assert done.returncode == 0, (done.stdout, done.stderr)
    again = json.loads(done.stdout)
    assert (again["imported"], again["skipped_existing"], again["bad_lines"]) == (0, 5, 0)
    assert stored(client, "moved-in") == ids

    # A line without a type that is no drawer either: a clear error naming what is missing.
    bad = write(tmp_path / "bad.jsonl", [{"text": "wrong field name"}])
    done = cli(daemon, "import", "moved-in", str(bad))
    assert done.returncode == 1
    assert (
        "line 1: Object missing required field `content` (a line without a type is a drawer)"
        in done.stderr
    ), done.stderr


class Reader(threading.Thread):
    """Reads a process's stderr line by line, each with the moment it arrived."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[tuple[float, str]] = []
        self.start()

    def run(self) -> None:
        for raw in self.stream:
            self.lines.append((time.monotonic(), raw.decode().rstrip("\n")))

    def at(self, start: str) -> list[float]:
        """When each line starting with ``start`` arrived."""
        return [at for at, line in list(self.lines) if line.startswith(start)]

    def wait_for(self, text: str, timeout: float) -> float:
        """When a line holding ``text`` arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line:
                    return at
            time.sleep(0.02)
        raise AssertionError(f"no line with {text!r} in {timeout} s: {self.lines}")


def start_import(daemon, palace: str, *args: str) -> subprocess.Popen:
    """``trusty-memory --json import PALACE -`` from a pipe this test writes and closes."""
    return subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "--json", "import", palace, "-",
         *args],
        env=daemon.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def send(proc: subprocess.Popen, lines: list[dict]) -> None:
    proc.stdin.write("".join(json.dumps(x) + "\n" for x in lines).encode())
    proc.stdin.flush()


def finish(proc: subprocess.Popen, reader: Reader) -> dict:
    """Close the input, wait for the command; its JSON summary (stderr is the reader's)."""
    proc.stdin.close()
    out = proc.stdout.read()
    proc.wait(timeout=120)
    reader.join(timeout=10)
    return json.loads(out)


def test_progress_comes_as_lines_without_a_terminal(client, daemon):
    """Under ``--json`` into a pipe: a progress line every few seconds on stderr while the
    import goes on (here it waits for more input), and stdout is the summary alone."""
    proc = start_import(daemon, "progress", "--batch-size", "2")
    reader = Reader(proc.stderr)
    send(proc, [{"content": f"Progress note {i} about the cache."} for i in range(3)])
    deadline = time.monotonic() + 60
    while len(ticks := reader.at("import progress: 3 lines, 2 stored, ")) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, reader.lines
        time.sleep(0.1)
    assert 3.0 <= ticks[1] - ticks[0] <= 10.0, reader.lines  # every few seconds, as lines
    summary = finish(proc, reader)
    assert summary["imported"] == 3 and summary["bad_lines"] == 0
    assert all("\r" not in line for _, line in reader.lines)


@pytest.mark.parametrize("existed", [False, True], ids=["new palace", "existing palace"])
def test_ctrl_c_during_an_import_is_answered_within_a_second(client, daemon, existed):
    """SIGINT while a batch of texts is being embedded and stored: the command says so
    within a second, and ends with 130; a palace it created is taken away, one that was
    there keeps what got in."""
    palace = "ctrl-c-old" if existed else "ctrl-c-new"
    if existed:
        client.palace_create(palace)
    batch = 300
    proc = start_import(daemon, palace, "--batch-size", str(batch))
    reader = Reader(proc.stderr)
    notes = [{"content": f"Note {i}: service s{i} runs {i % 7} workers."} for i in range(2 * batch)]
    send(proc, notes[:batch])
    deadline = time.monotonic() + 120
    while palace not in client.palace_list() or client.palace_info(palace).drawer_count < batch:
        assert time.monotonic() < deadline and proc.poll() is None, reader.lines
        time.sleep(0.05)
    send(proc, notes[batch:])  # the next batch: its texts are being embedded and stored
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    answered = reader.wait_for(f"import {palace}: interrupted", timeout=10)
    assert answered - sent < 1.0, reader.lines
    summary = finish(proc, reader)
    assert proc.returncode == 130 and summary["interrupted"] is True, reader.lines
    said = "\n".join(line for _, line in reader.lines)
    if existed:
        assert "taking away" not in said
        assert client.palace_info(palace).drawer_count >= batch  # what got in stays
    else:
        assert f"taking away palace {palace}, which this import created" in said
        assert palace not in client.palace_list()
        assert palace in [a["name"] for a in client.palace_archived()]  # with what got in


def test_restoring_over_a_name_in_use_says_how_to_restore_under_another(client, daemon):
    client.palace_create("home")
    client.remember("home", "The old home's note.")
    client.palace_delete("home")  # archived, with its note
    client.palace_create("home")
    done = cli(daemon, "palace", "restore", "home")
    assert done.returncode == 1
    assert (
        "palace already exists: home; restore the archived one under another name:"
        " trusty-memory palace restore home --as NEW_NAME" in done.stderr
    ), done.stderr
    done = cli(daemon, "palace", "restore", "home", "--as", "old-home")
    assert done.returncode == 0, done.stderr
    assert client.palace_info("old-home").drawer_count == 1
