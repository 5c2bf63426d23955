"""``palace delete | rename | restore`` against the real daemon, its workers and the model.

What must hold: a deleted palace is archived whole and comes back as it was; its workers
are stopped first, every request they held is answered (a result, or PALACE_NOT_FOUND),
none hangs, and no acknowledged write is lost; afterwards the palace is not found. A
renamed palace keeps its drawer ids and its index; the old name is not found.

Covers: broker/palace_moves.py broker/palaces.py client/cli/palaces.py
"""

from __future__ import annotations

import json
import os
import pty
import stat
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.conftest import Daemon, run_cli
from tests.engine.test_readers import wait_for_readers, workers_of
from trusty_memory.client.sync import Client
from trusty_memory.common.protocol import ErrorCode, TrustyError

pytestmark = pytest.mark.slow

NOT_FOUND = int(ErrorCode.PALACE_NOT_FOUND)


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    yield c
    c.close()


cli = run_cli


def error_code(done: subprocess.CompletedProcess) -> int:
    assert done.returncode == 1, (done.stdout, done.stderr)
    return json.loads(done.stdout)["error"]["code"]


def contents(client: Client, palace: str) -> dict:
    """Everything a person would call the palace's contents, by drawer id. Not the usage
    counts: a recall adds hits (and with them importance over base_importance) whenever
    its reader next ships them to the writer, so they may change between two reads."""
    drawers = {}
    for d in client.list(palace, limit=1000).drawers:
        whole = client.call("drawer_get", {"drawer_id": d.drawer_id}, palace=palace)
        for key in ("palace", "hits", "importance"):
            whole.pop(key)
        drawers[d.drawer_id] = whole
    return {"drawers": drawers, "triples": client.kg_query(palace, "auth-service").triples}


def fill(client: Client, palace: str) -> list[str]:
    client.palace_create(palace, "a palace to move")
    ids = [
        client.remember(palace, "The staging database listens on port 5433", room="Backend",
                        tags=["db", "staging"], importance=0.9).drawer_id,
        client.remember(palace, "Deploys go out on Tuesdays after the standup",
                        room="Planning").drawer_id,
        client.remember(palace, "The auth service validates JWTs with RS256",
                        tags=["auth"], metadata={"source": "review"}).drawer_id,
    ]  # fmt: skip
    client.kg_assert(palace, "auth-service", "deployed_version", "2.4.1", confidence=0.9)
    return ids


def test_delete_archives_and_restore_brings_back_everything(client, daemon):
    ids = fill(client, "to-archive")
    before = contents(client, "to-archive")
    assert set(before["drawers"]) == set(ids)

    done = cli(daemon, "palace", "delete", "to-archive", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    deleted = json.loads(done.stdout)
    assert deleted["status"] == "archived" and deleted["palace"] == "to-archive"
    entry = daemon.home / "archive" / "palaces" / deleted["entry"]
    assert (entry / "palace.sqlite3").is_file()
    assert not (daemon.home / "palaces" / "to-archive").exists()
    for path in [daemon.home / "archive", *(daemon.home / "archive").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    # Its workers are gone, and it is not found by anything.
    assert workers_of(client, "to-archive") == []
    assert "to-archive" not in client.palace_list()
    for call in (
        lambda: client.recall("to-archive", "staging port"),
        lambda: client.remember("to-archive", "one more"),
        lambda: client.palace_info("to-archive"),
        lambda: client.palace_delete("to-archive"),
        lambda: client.palace_rename("to-archive", "elsewhere"),
    ):
        with pytest.raises(TrustyError) as err:
            call()
        assert err.value.code == ErrorCode.PALACE_NOT_FOUND
    assert error_code(cli(daemon, "--json", "recall", "to-archive", "port")) == NOT_FOUND
    archived = json.loads(cli(daemon, "palace", "list", "--archived", "--json").stdout)
    assert deleted["entry"] in [a["entry"] for a in archived["archived"]]

    done = cli(daemon, "palace", "restore", "to-archive", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entry"] == deleted["entry"]
    assert contents(client, "to-archive") == before
    hits = client.recall("to-archive", "which port does staging use?", top_k=1).results
    assert hits[0].drawer_id == ids[0]
    client.remember("to-archive", "writes work again after the restore")


def test_delete_asks_on_a_terminal_and_refuses_without_one(client, daemon):
    client.palace_create("asked")
    done = cli(daemon, "palace", "delete", "asked", stdin="y\n")  # a pipe: no terminal
    assert done.returncode == 1 and "pass --yes" in done.stderr
    assert error_code(cli(daemon, "--json", "palace", "delete", "asked")) == 1001
    assert "asked" in client.palace_list()
    assert on_a_terminal(daemon, "n\n", "palace", "delete", "asked")[0] == 1
    assert "asked" in client.palace_list()
    code, prompt = on_a_terminal(daemon, "y\n", "palace", "delete", "asked")
    assert code == 0 and "palace restore asked" in prompt
    assert "asked" not in client.palace_list()


def on_a_terminal(daemon: Daemon, answer: str, *args: str) -> tuple[int, str]:
    """Run the CLI with stdin and stderr on a pseudo-terminal; returns (exit code, stderr)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env=daemon.env,
        stdin=follower,
        stderr=follower,
        stdout=subprocess.DEVNULL,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        seen += os.read(leader, 4096)
    os.write(leader, answer.encode())
    code = proc.wait(timeout=60)
    try:
        while chunk := os.read(leader, 4096):
            seen += chunk
    except OSError:  # the terminal closed with the process
        pass
    os.close(leader)
    return code, seen.decode(errors="replace")


def test_delete_while_others_read_and_write(client, daemon):
    """Two writers and two readers hammer a palace (one writer, one reader process) and a
    bulk import is in flight when it is deleted: every call gets an answer, a result or
    PALACE_NOT_FOUND, none hangs or times out, and every acknowledged write is in the
    archived palace."""
    client.palace_create("busy")
    client.remember("busy", "warm up the writer and the embedder")
    client.scale("busy", 1)
    wait_for_readers(client, "busy", 1)
    stop = threading.Event()
    acked: list[str] = []
    calls: list[tuple[float, float, int | None]] = []  # (start, end, error code or None)
    lock = threading.Lock()

    def hammer(kind: str, n: int) -> None:
        with Client(daemon.config, autostart=False) as c:
            i = 0
            while not stop.is_set():
                started, code = time.monotonic(), None
                try:
                    if kind == "write":
                        stored = c.remember("busy", f"writer {n} note {i} about topic {i % 7}")
                        with lock:
                            acked.append(stored.drawer_id)
                    else:
                        c.recall("busy", f"what about topic {i % 7}?", top_k=3)
                except TrustyError as exc:
                    code = int(exc.code)
                with lock:
                    calls.append((started, time.monotonic(), code))
                i += 1

    imported: dict = {}
    import_ids = [str(uuid.uuid4()) for _ in range(200)]
    sending = threading.Event()

    def bulk_import() -> None:
        drawers = [{"drawer_id": d, "content": f"imported line {k} about the database"}
                   for k, d in enumerate(import_ids)]  # fmt: skip
        with Client(daemon.config, autostart=False) as c:
            started = time.monotonic()
            sending.set()
            try:
                imported["ok"] = c.call("palace_import", {"drawers": drawers}, palace="busy")
            except TrustyError as exc:
                imported["error"] = exc
            imported["seconds"] = time.monotonic() - started

    threads = [threading.Thread(target=hammer, args=(k, n)) for k in ("write", "read")
               for n in range(2)]  # fmt: skip
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 20
    importer = threading.Thread(target=bulk_import)
    importer.start()
    assert sending.wait(10)
    time.sleep(0.3)  # the import batch is with the writer now
    started = time.monotonic()
    deleted = client.palace_delete("busy")
    answered = time.monotonic()
    time.sleep(1.0)  # the hammering goes on against a deleted palace
    stop.set()
    for t in [*threads, importer]:
        t.join(timeout=60)
        assert not t.is_alive(), "a call never returned"

    assert deleted["status"] == "archived"
    assert answered - started < 15, "the delete waited for the whole grace period"
    codes = {code for _, _, code in calls if code is not None}
    assert codes <= {NOT_FOUND}, codes  # no timeouts, no crashes: results or not found
    assert all(end - start < 15 for start, end, _ in calls)
    after = [code for start, _, code in calls if start > answered]
    assert after and set(after) == {NOT_FOUND}  # once deleted, never served
    assert any(code is None for _, _, code in calls)
    # The import was with the writer when the delete came: it was finished and answered.
    assert "ok" in imported, imported
    assert imported["seconds"] < 15
    print(f"delete {answered - started:.2f}s, {len(calls)} calls, {len(after)} after it,"
          f" {len(acked)} writes acknowledged, import {imported['seconds']:.2f}s")  # fmt: skip

    client.palace_restore("busy")
    kept = {d.drawer_id for d in client.list("busy", limit=100_000).drawers}
    assert set(acked) <= kept  # every acknowledged write survived the delete
    assert imported["ok"]["imported"] == len(import_ids)
    assert set(import_ids) <= kept


def test_rename_keeps_drawers_and_index_and_frees_the_old_name(client, daemon):
    ids = fill(client, "before")
    client.scale("before", 1)
    wait_for_readers(client, "before", 1)
    old = contents(client, "before")
    done = cli(daemon, "palace", "rename", "before", "after", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "palace": "after",
        "renamed_from": "before",
        "status": "renamed",
    }
    assert contents(client, "after") == old
    hits = client.recall("after", "how are JWTs validated?", top_k=1).results
    assert hits[0].drawer_id == ids[2]
    meta = json.loads((daemon.home / "palaces" / "after" / "palace.json").read_text())
    assert meta["name"] == "after" and meta["readers"] == 1  # its settings went with it
    wait_for_readers(client, "after", 1)
    loaded = [
        json.loads(line)
        for line in (daemon.home / "daemon-test.log").read_text().splitlines()
        if '"after"' in line and '"index' in line
    ]
    assert loaded and all(e["event"] == "index loaded" for e in loaded), loaded  # no rebuild
    assert "before" not in client.palace_list()
    assert workers_of(client, "before") == []
    assert error_code(cli(daemon, "--json", "recall", "before", "jwt")) == NOT_FOUND
    assert error_code(cli(daemon, "--json", "list", "before")) == NOT_FOUND
    # The old name is free again, and a new palace there starts empty.
    client.palace_create("before")
    assert client.list("before").drawers == []
    # A taken name is refused, and both palaces stay as they were.
    assert error_code(cli(daemon, "--json", "palace", "rename", "after", "before")) == 3001
    assert contents(client, "after") == old


def tree(root) -> set[str]:
    """Every directory below ``root``."""
    return {str(p) for p in root.rglob("*") if p.is_dir()}


def test_hostile_names_are_refused(client, daemon):
    client.palace_create("-x")
    client.remember("-x", "a palace whose name looks like an option")
    client.palace_create("plain")
    # Without '--' the name is an unknown option: a usage error, and nothing happens.
    for args in (["palace", "delete", "-x", "--yes"], ["palace", "rename", "-x", "y"]):
        assert cli(daemon, *args).returncode == 2
    assert "-x" in client.palace_list()
    assert cli(daemon, "palace", "rename", "--", "-x", "--y").returncode == 0
    done = cli(daemon, "palace", "delete", "--yes", "--json", "--", "--y")
    assert json.loads(done.stdout)["status"] == "archived"
    before = tree(daemon.home)
    for args in (
        ["palace", "delete", "../palaces/plain", "--yes"],
        ["palace", "delete", "a/b", "--yes"],
        ["palace", "rename", "plain", "../plain2"],
        ["palace", "rename", "plain", "."],
        ["palace", "restore", "../archive/palaces/x"],
        ["palace", "restore", "--as", "../y", "--", "--y"],
        ["palace", "create", ".hidden"],
    ):
        assert error_code(cli(daemon, "--json", *args)) == 1002, args
    done = cli(daemon, "--json", "palace", "restore", "--entry", "../../palaces/plain", "--", "--y")
    assert error_code(done) == NOT_FOUND
    assert tree(daemon.home) == before  # nothing moved, nothing made
    # The name went through every step intact.
    assert cli(daemon, "palace", "restore", "--", "--y").returncode == 0
    assert "--y" in client.palace_list() and "plain" in client.palace_list()
    assert "option" in client.recall("--y", "option-like name").results[0].content


def test_a_stuck_worker_is_killed_after_the_grace_and_its_request_answered(fresh_home):
    """A writer busy with a long import does not stop when asked: after ``close_grace_s``
    it is killed; the import gets PALACE_NOT_FOUND at once, not its deadline, and the
    palace is archived with everything acknowledged before."""
    grace = {"TRUSTY_MEMORY_BROKER_CLOSE_GRACE_S": "0.5"}
    d = Daemon(fresh_home, extra_env=grace).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.palace_create("stuck")
            kept = c.remember("stuck", "acknowledged before the delete").drawer_id
            result: dict = {}

            def bulk_import() -> None:
                texts = [{"drawer_id": str(uuid.uuid4()),
                          "content": f"line {k}: a long text to embed about topic {k % 50} " * 8}
                         for k in range(6000)]  # fmt: skip
                with Client(d.config, autostart=False) as other:
                    started = time.monotonic()
                    try:
                        result["ok"] = other.call(
                            "palace_import", {"drawers": texts}, palace="stuck", timeout=300
                        )
                    except TrustyError as exc:
                        result["error"] = exc
                    result["seconds"] = time.monotonic() - started

            importer = threading.Thread(target=bulk_import)
            importer.start()
            time.sleep(1.0)
            started = time.monotonic()
            assert c.palace_delete("stuck")["status"] == "archived"
            assert time.monotonic() - started < 5
            importer.join(timeout=30)
            assert not importer.is_alive()
            assert result["error"].code == ErrorCode.PALACE_NOT_FOUND, result
            assert result["seconds"] < 10
            assert "killing them" in d.log_tail(200)
            c.palace_restore("stuck")
            drawers = {x.drawer_id for x in c.list("stuck", limit=10_000).drawers}
            assert kept in drawers and len(drawers) in (1, 6001)  # one transaction: all or none
    finally:
        d.stop()
