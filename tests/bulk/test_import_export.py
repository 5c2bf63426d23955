"""``trusty-memory export`` / ``import`` against the real daemon: round trip, idempotence,
bad lines, vectors kept byte for byte, triples (closed ones too).

Covers: client/bulk.py client/export.py client/jsonl_format.py client/cli/transfer.py
    workers/store/bulk.py common/import_checks.py
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from trusty_memory.client.sync import Client

DIM = 384


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    yield c
    c.close()


def cli(daemon, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """The real ``trusty-memory`` command against the test daemon, bytes in and out."""
    return run_cli(daemon, *args, stdin=stdin, text=False, timeout=180)


def records(path: Path) -> list[dict]:
    """The drawer and triple lines of an export (the header names the palace)."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert lines[0]["type"] == "header"
    return lines[1:]


def unit(seed: int) -> np.ndarray:
    vec = np.random.default_rng(seed).standard_normal(DIM).astype("<f4")
    return vec / np.linalg.norm(vec)


def drawer_line(i: int, **fields) -> dict:
    line = {
        "type": "drawer",
        "drawer_id": str(uuid.UUID(int=i + 1)),
        "content": f"imported note number {i} about caching",
        "room": "Backend",
        "tags": ["bulk"],
        "importance": 0.5,
        "created_at": "2025-03-01T10:00:00Z",
        "vector": base64.b64encode(unit(i).tobytes()).decode(),
    }
    return {**line, **fields}


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_round_trip_is_exact(client, daemon, tmp_path):
    client.palace_create("src")
    ids = [
        client.remember(
            "src",
            "The API gateway validates JWT tokens with RS256.",
            room="Backend",
            tags=["auth", "jwt"],
            importance=0.9,
        ).drawer_id,
        client.remember(
            "src",
            "We deploy with blue-green releases on Fridays.",
            room="ops",
            created_at="2024-05-06T07:08:09Z",
            metadata={"speaker": "bob"},
        ).drawer_id,
        client.remember("src", "Postgres 16 is the primary database.", tags=["db"]).drawer_id,
        # Right after the previous one in its room: a context-mixed vector and its own.
        client.remember("src", "It replaced MySQL last spring.", tags=["db"]).drawer_id,
    ]
    client.recall("src", "how are tokens validated?")  # hits are exported too
    client.kg_assert("src", "alice", "works_on", "billing", provenance="standup")
    client.kg_assert("src", "alice", "works_on", "search", confidence=0.7)  # closes billing
    exported = tmp_path / "src.jsonl"
    done = cli(daemon, "export", "src", "-o", str(exported))
    assert done.returncode == 0, done.stderr

    done = cli(daemon, "import", "dst", str(exported))
    assert done.returncode == 0, done.stderr
    assert b"imported 4" in done.stdout
    again = tmp_path / "dst.jsonl"
    assert cli(daemon, "export", "dst", "-o", str(again)).returncode == 0

    src, dst = records(exported), records(again)
    assert src == dst  # content, room, tags, importance, created_at, hits, metadata, vectors
    assert [r["drawer_id"] for r in src if "own_vector" in r] == ids[3:]
    # The predecessor's words deep recall reads, on every drawer (null: none).
    drawers = [r for r in src if r["type"] == "drawer"]
    assert [r["context"] is not None for r in drawers] == [False, False, False, True]
    assert "Postgres" in drawers[3]["context"]
    assert {r["drawer_id"] for r in src if r["type"] == "drawer"} == set(ids)
    triples = [r for r in dst if r["type"] == "triple"]
    assert [(t["object"], t["valid_to"] is None) for t in triples] == [
        ("billing", False),
        ("search", True),
    ]
    # The imported palace is searchable and its KG answers like the source.
    top = client.recall("dst", "how are tokens validated?", top_k=1).results[0]
    assert top.drawer_id == ids[0]
    assert [t.object for t in client.kg_query("dst", "alice").triples] == ["search"]


def test_reimport_is_idempotent_and_stdin_works(client, daemon, tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [drawer_line(i) for i in range(30)])
    first = cli(daemon, "--json", "import", "idem", "-", stdin=path.read_bytes())
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["imported"] == 30
    second = cli(daemon, "--json", "import", "idem", str(path), "--batch-size", "7")
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["imported"] == 0 and summary["skipped_existing"] == 30
    info = client.palace_info("idem")
    assert info.drawer_count == 30 and info.index_count == 30


def test_bad_lines_are_reported_and_their_batch_is_not_imported(client, daemon, tmp_path):
    # Into a palace that existed before: what got in stays (a palace the import created
    # would be taken away again: test_a_failed_import_leaves_no_palace_behind).
    client.palace_create("badlines")
    lines: list = [drawer_line(100 + i) for i in range(15)]
    lines[6] = drawer_line(106, content="")  # line 7
    lines[8] = drawer_line(108, vector=[0.1, 0.2])  # line 9
    lines[12] = "{not json"  # line 13
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    done = cli(daemon, "--json", "import", "badlines", str(path), "--batch-size", "5")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "line 7: content: must be a non-empty string" in err
    assert "line 9: vector: expected 384 dimensions, got 2" in err
    assert "line 13: not JSON" in err
    summary = json.loads(done.stdout)
    assert summary["bad_lines"] == 3 and summary["imported"] == 5
    assert summary["held_back"] == 7  # the good lines of batches 2 and 3
    assert summary["created_palace"] is None
    listed = client.list("badlines", limit=100).drawers
    assert {d.drawer_id for d in listed} == {str(uuid.UUID(int=101 + i)) for i in range(5)}


def test_worker_refuses_a_bad_batch_whole(client):
    """The worker's own check (a client that skipped validation): nothing is written."""
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    client.palace_create("atomic")
    good = {"drawer_id": str(uuid.uuid4()), "content": "fine", "vector": unit(1).tobytes()}
    bad = {"drawer_id": str(uuid.uuid4()), "content": "bad", "vector": b"\x00" * (DIM * 4)}
    with pytest.raises(TrustyError) as err:
        client.call("palace_import", {"drawers": [good, bad]}, palace="atomic")
    assert err.value.code == ErrorCode.INVALID_PARAMS
    assert "drawers[1]" in err.value.message and "non-zero" in err.value.message
    assert client.palace_info("atomic").drawer_count == 0


def test_vectors_are_honoured_not_re_embedded(client, daemon, tmp_path):
    given = unit(7)
    scaled = unit(8) * 3.0  # not unit length: stored normalised
    lines = [
        drawer_line(200, content="totally unrelated words", vector=given.tolist()),
        drawer_line(
            201,
            content="more unrelated words",
            vector=base64.b64encode(scaled.astype("<f4").tobytes()).decode(),
        ),
        drawer_line(202, content="The staging cluster runs Kubernetes 1.30."),
    ]
    del lines[2]["vector"]  # this one is embedded by the daemon
    path = write_jsonl(tmp_path / "v.jsonl", lines)
    assert cli(daemon, "import", "vecs", str(path)).returncode == 0
    out = tmp_path / "v-out.jsonl"
    assert cli(daemon, "export", "vecs", "-o", str(out)).returncode == 0
    vectors = {
        r["drawer_id"]: np.frombuffer(base64.b64decode(r["vector"]), dtype="<f4")
        for r in records(out)
    }
    assert vectors[lines[0]["drawer_id"]].tobytes() == given.astype("<f4").tobytes()
    assert np.allclose(vectors[lines[1]["drawer_id"]], scaled / np.linalg.norm(scaled), atol=1e-6)
    embedded = vectors[lines[2]["drawer_id"]]
    assert abs(float(np.linalg.norm(embedded)) - 1.0) < 1e-4
    # Embedded from its text: a query about it finds it first.
    top = client.recall("vecs", "Which Kubernetes version does staging run?", top_k=1)
    assert top.results[0].drawer_id == lines[2]["drawer_id"]


def test_export_without_vectors_and_dry_run(client, daemon, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [drawer_line(300 + i) for i in range(4)])
    done = cli(daemon, "--json", "import", "dry", str(path), "--dry-run")
    assert done.returncode == 0 and json.loads(done.stdout)["imported"] == 0
    assert json.loads(done.stdout)["would_import"] == 4
    said = cli(daemon, "import", "dry", str(path), "--dry-run").stdout.decode()
    assert said.startswith("would import 4 drawers")
    assert "dry" not in client.palace_list()  # a dry run creates nothing
    assert cli(daemon, "import", "slim", str(path)).returncode == 0
    done = cli(daemon, "export", "slim", "--no-vectors")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in done.stdout.decode().splitlines()][1:]
    assert len(rows) == 4 and all(r["vector"] is None for r in rows)


def test_a_failed_import_leaves_no_palace_behind(client, daemon, tmp_path):
    # Nothing got in (a file of bad lines): the palace the import created is removed.
    bad = write_jsonl(tmp_path / "bad.jsonl", ["{not json", "[1, 2]", drawer_line(1, content="")])
    done = cli(daemon, "--json", "import", "nothing-in", str(bad))
    assert done.returncode == 1
    assert json.loads(done.stdout)["created_palace"] == {
        "palace": "nothing-in",
        "status": "removed",
    }
    assert "removed palace nothing-in" in done.stderr.decode()
    assert "nothing-in" not in client.palace_list()
    assert "nothing-in" not in [a["name"] for a in client.palace_archived()]
    assert not (daemon.home / "palaces" / "nothing-in").exists()
    # A file that cannot be read: a clear error, and no palace was ever made.
    done = cli(daemon, "--json", "import", "no-file", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["code"] == 1001 and "cannot read" in error["message"]
    assert "no-file" not in client.palace_list()
    # Batches got in around a bad one (lines 1-5 and 12; 6-11 held back with line 8):
    # archived with what got in, and restorable; the same import then resumes.
    lines = [drawer_line(400 + i) for i in range(12)]
    path = write_jsonl(tmp_path / "half.jsonl", [*lines[:7], "{not json", *lines[8:]])
    done = cli(daemon, "--json", "import", "half-in", str(path), "--batch-size", "5")
    assert done.returncode == 1
    gone = json.loads(done.stdout)["created_palace"]
    assert gone["status"] == "archived" and gone["entry"].startswith("half-in-")
    assert "palace restore half-in" in done.stderr.decode()
    assert "half-in" not in client.palace_list()
    client.palace_restore("half-in")
    assert client.palace_info("half-in").drawer_count == 6
    fixed = write_jsonl(tmp_path / "fixed.jsonl", lines)
    done = cli(daemon, "--json", "import", "half-in", str(fixed), "--batch-size", "5")
    assert done.returncode == 0
    assert json.loads(done.stdout)["skipped_existing"] == 6
    assert client.palace_info("half-in").drawer_count == 12


def interrupted_import(daemon, client, palace: str, lines: list, sig: int, wait_for: int):
    """Start an import from a pipe that stays open, send ``lines``, wait until
    ``wait_for`` drawers are in, then send ``sig``; returns the finished process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "--json", "import", palace, "-",
         "--batch-size", "2"],
        env=daemon.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdin.write("".join(json.dumps(x) + "\n" for x in lines).encode())
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if palace in client.palace_list() and (
            wait_for == 0 or client.palace_info(palace).drawer_count >= wait_for
        ):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError(f"{palace}: the import did not get going")
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    return proc


def test_an_interrupted_import_leaves_no_palace_behind(client, daemon):
    proc = interrupted_import(daemon, client, "cut-early", [], signal.SIGINT, wait_for=0)
    assert proc.returncode == 130
    assert "cut-early" not in client.palace_list()
    assert "cut-early" not in [a["name"] for a in client.palace_archived()]

    lines = [drawer_line(500 + i) for i in range(2)]
    proc = interrupted_import(daemon, client, "cut-late", lines, signal.SIGTERM, wait_for=2)
    assert proc.returncode == 130
    assert "cut-late" not in client.palace_list()
    [archived] = [a for a in client.palace_archived() if a["name"] == "cut-late"]
    client.palace_restore("cut-late", entry=archived["entry"])
    assert client.palace_info("cut-late").drawer_count == 2

    # Into a palace that existed before: interrupted, it stays, with what got in.
    lines = [drawer_line(600 + i) for i in range(2)]
    proc = interrupted_import(daemon, client, "cut-late", lines, signal.SIGINT, wait_for=4)
    assert proc.returncode == 130
    assert client.palace_info("cut-late").drawer_count == 4


class InterruptedOnCreate(Client):
    """The real client, with a Ctrl-C landing just as the daemon answers palace_create:
    the moment the palace exists but the import has not yet heard so."""

    def palace_create(self, name: str, description: str | None = None) -> dict:
        answer = super().palace_create(name, description)
        os.kill(os.getpid(), signal.SIGINT)
        return answer


def test_a_ctrl_c_while_the_palace_is_created_still_takes_it_away(daemon):
    from trusty_memory.client import bulk

    c = InterruptedOnCreate(daemon.config, autostart=False)
    try:
        stream = io.BytesIO(json.dumps(drawer_line(700)).encode() + b"\n")
        summary = bulk.import_file(c, "cut-at-create", stream, max_text_bytes=65536)
        assert summary.interrupted and summary.imported == 0
        assert summary.created_palace["status"] == "removed"
        assert "cut-at-create" not in c.palace_list()
    finally:
        c.close()


def test_held_interrupts_raise_once_the_block_is_done_or_at_a_second_signal():
    from trusty_memory.client.bulk import held_interrupts

    reached = []
    with pytest.raises(KeyboardInterrupt), held_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        reached.append("past the first")
    assert reached == ["past the first"]
    # A second signal is not held: whoever presses Ctrl-C twice means it.
    with pytest.raises(KeyboardInterrupt), held_interrupts():
        os.kill(os.getpid(), signal.SIGINT)
        reached.append("past the first")
        os.kill(os.getpid(), signal.SIGINT)
        reached.append("past the second")
    assert reached == ["past the first", "past the first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


class FailsMidExport(Client):
    """The real client, with the daemon's answer lost after the first page of an export."""

    pages = 0

    def call(self, method: str, params=None, **kwargs):
        if method == "palace_export":
            self.pages += 1
            if self.pages > 1:
                raise ConnectionError("the daemon went away")
        return super().call(method, params, **kwargs)


def test_an_export_that_fails_leaves_the_last_good_file_alone(client, daemon, tmp_path):
    from trusty_memory.client import export

    client.palace_create("half-out")
    for i in range(3):
        client.remember("half-out", f"note {i} on the release train")
    backup = tmp_path / "backup.jsonl"
    done = cli(daemon, "export", "half-out", "-o", str(backup))
    assert done.returncode == 0, done.stderr
    good = backup.read_bytes()
    assert oct(backup.stat().st_mode & 0o777) == "0o600"

    failing = FailsMidExport(daemon.config, autostart=False)
    try:
        with pytest.raises(ConnectionError):
            export.export_file(failing, "half-out", backup, page_size=1)
    finally:
        failing.close()
    assert backup.read_bytes() == good  # not truncated, not replaced
    assert [p.name for p in tmp_path.iterdir()] == ["backup.jsonl"]  # no temporary left

    latest = tmp_path / "latest.jsonl"
    latest.symlink_to(backup)
    assert cli(daemon, "export", "half-out", "-o", str(latest)).returncode == 0
    assert latest.is_symlink() and backup.read_bytes() == good  # written through the link

    done = cli(daemon, "export", "half-out", "-o", str(tmp_path / "nowhere" / "x.jsonl"))
    assert done.returncode != 0 and b"Traceback" not in done.stderr
    assert f"export: cannot write {tmp_path}/nowhere/x.jsonl".encode() in done.stderr
