"""The dreamer against the real daemon, workers, sockets, SQLite and MiniLM model.

Every dream here is run explicitly (``dream_once`` / the CLI), so the daemon's own dreamer
is switched off for this module; ``test_supervised.py`` covers the scheduled one.

Covers: dreamer/__main__.py dreamer/runner.py dreamer/progress.py client/cli/dreaming.py
    workers/store/dedup.py workers/store/archive.py
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.conftest import Daemon, _short_tmp, run_cli
from tests.dreamer.corpus import sentence, twin
from trusty_memory.client.sync import Client
from trusty_memory.common.config import Config
from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.dreamer import progress
from trusty_memory.dreamer.__main__ import dream_once

# Near-duplicates as MiniLM sees them (cosine 0.958 .. 0.99) and distinct notes (< 0.6).
PLANTED = [
    (
        "The staging database runs PostgreSQL 15 on port 5433.",
        "the staging database runs PostgreSQL 15 on port 5433",
    ),
    (
        "The API rate limit is 100 requests per minute per token.",
        "The API rate limit is 100 requests per minute for each token.",
    ),
    (
        "Use ruff for linting and formatting the codebase.",
        "Use ruff for linting and for formatting the codebase.",
    ),
    (
        "Alice prefers tabs over spaces in Python files.",
        "Alice prefers tabs over spaces in Python files",
    ),
]
DISTINCT = [
    "The production database runs MySQL 8 on port 3306.",
    "Our CI pipeline publishes wheels to the internal index.",
    "Frontend components are written in React with TypeScript.",
    "Bob owns the billing service and its on-call rota.",
]


@pytest.fixture(scope="module")
def daemon():
    home = _short_tmp("tmd-")
    d = Daemon(home, {"TRUSTY_MEMORY_DREAMER_ENABLED": "0"}).start()
    yield d
    d.stop()
    import shutil

    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    yield c
    c.close()


def sql(config: Config, palace: str, query: str, *args):
    """Read the palace file directly (a second reader; WAL keeps it consistent)."""
    conn = sqlite3.connect(f"file:{config.palace_dir(palace) / 'palace.sqlite3'}?mode=ro", uri=True)
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def assert_consistent(client: Client, config: Config, palace: str) -> None:
    """The invariants a dream must keep, whatever happened to it."""
    info = client.palace_info(palace)
    assert info.drawer_count == info.index_count
    assert sql(config, palace, "SELECT count(*) FROM drawers") == [(info.drawer_count,)]
    both = "SELECT count(*) FROM archive a JOIN drawers d ON d.id = a.id"
    assert sql(config, palace, both) == [(0,)], "a drawer is both live and archived"
    dangling = (
        "SELECT count(*) FROM archive WHERE reason = 'merged'"
        " AND merged_into NOT IN (SELECT id FROM drawers)"
    )
    assert sql(config, palace, dangling) == [(0,)], "a merged drawer points at nothing"


def test_planted_near_duplicates_merge_and_distinct_notes_stay(client, daemon):
    assert client.status()["dreamer_pid"] is None  # switched off for this module
    client.palace_create("dups")
    ids = {}
    for i, (a, b) in enumerate(PLANTED):
        ids[a] = client.remember("dups", a, tags=[f"first{i}"]).drawer_id
        ids[b] = client.remember("dups", b, tags=[f"second{i}"], importance=0.7).drawer_id
    for text in DISTINCT:
        ids[text] = client.remember("dups", text).drawer_id
    events: list[dict] = []
    [preview] = dream_once(daemon.config, ["dups"], dry_run=True, emit=events.append)
    assert preview.merged == len(PLANTED) and client.palace_info("dups").drawer_count == 12
    planned = {
        (e["target_id"], e["into"])
        for e in events
        if e["type"] == "recommendation" and e["action"] == "merge"
    }
    assert planned == {(ids[a], ids[b]) for a, b in PLANTED}  # into the more important

    [report] = dream_once(daemon.config, ["dups"], emit=events.append)
    assert report.merged == len(PLANTED) and not report.truncated
    info = client.palace_info("dups")
    assert info.drawer_count == 8 and info.dream_merged == 4 and info.last_dream_at
    survivors = {d.drawer_id: d for d in client.list("dups").drawers}
    assert set(survivors) == {ids[b] for _, b in PLANTED} | {ids[t] for t in DISTINCT}
    for i, (_, b) in enumerate(PLANTED):
        assert set(survivors[ids[b]].tags) == {f"first{i}", f"second{i}"}
    assert_consistent(client, daemon.config, "dups")
    # The merged id is answered sensibly.
    a, b = PLANTED[0]
    with pytest.raises(TrustyError) as err:
        client.forget("dups", ids[a])
    assert err.value.code == ErrorCode.DRAWER_NOT_FOUND and ids[b] in err.value.message
    # JSON-lines events in Engram's shapes.
    kinds = {e["type"] for e in events}
    assert {"progress", "metric", "recommendation", "complete"} <= kinds
    assert all(0 <= e["percent"] <= 100 for e in events if e["type"] == "progress")
    # A second pass finds nothing more to merge.
    [again] = dream_once(daemon.config, ["dups"])
    assert again.merged == 0


def test_exact_duplicate_is_caught_at_write_time(client):
    client.palace_create("exact")
    first = client.remember("exact", "Releases are cut from the main branch.", tags=["a"])
    again = client.call(
        "memory_remember",
        {"text": "Releases are cut from the main branch.", "tags": ["b"]},
        palace="exact",
    )
    assert again["drawer_id"] == first.drawer_id and again["status"] == "stored"
    assert again["deduplicated"] is True and not first.deduplicated
    other_room = client.remember("exact", "Releases are cut from the main branch.", room="Ops")
    assert other_room.drawer_id != first.drawer_id
    # Only the exact text is caught at write time: a note that differs in one number (or
    # only in its final period) is stored as its own drawer.
    for text in (
        "Releases are cut from the main branch 2.",
        "Releases are cut from the main branch",
    ):
        stored = client.remember("exact", text)
        assert stored.drawer_id != first.drawer_id and not stored.deduplicated
    assert client.palace_info("exact").drawer_count == 4


# The pairs, then pairs of the same kinds that MiniLM puts above the 0.95 threshold
# (the cosine each had here), so only the same-fact rule keeps them apart.
DIFFERENT_FACTS = [
    (
        "The API rate limit is 100 requests per minute",  # 0.972
        "The API rate limit is 1000 requests per minute",
    ),
    ("The staging DB is on port 5433", "The production DB is on port 5432"),  # 0.829
    ("auth-service deployed version is 2.4.1", "auth-service deployed version is 2.5.0"),  # 0.892
    ("Use Node 18 for the frontend build", "Use Node 20 for the frontend build"),  # 0.887
    ("The staging DB is on port 5433", "The staging DB is on port 5432"),  # 0.976
    (
        "The feature flag dark_mode is enabled in staging",  # 0.987
        "The feature flag dark_mode is disabled in staging",
    ),
    (
        "The lint step is required before merging",  # 0.991
        "The lint step is not required before merging",
    ),
]
ABOVE_THRESHOLD = {
    DIFFERENT_FACTS[0]: "numbers differ",
    DIFFERENT_FACTS[4]: "numbers differ",
    DIFFERENT_FACTS[5]: "polarity differs",
    DIFFERENT_FACTS[6]: "negation differs",
}


def test_notes_that_differ_in_a_fact_are_never_merged(client, daemon):
    client.palace_create("facts")
    ids = {}
    for old, new in DIFFERENT_FACTS:
        ids.setdefault(old, client.remember("facts", old, importance=0.8).drawer_id)
        ids.setdefault(new, client.remember("facts", new).drawer_id)
    twin_a, twin_b = (
        "Releases are cut from the main branch on Tuesdays.",  # cosine 0.990
        "releases are cut from the main branch on tuesdays",
    )
    ids[twin_a] = client.remember("facts", twin_a).drawer_id
    ids[twin_b] = client.remember("facts", twin_b).drawer_id
    dry = run_cli(daemon, "dream", "--palace", "facts", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    events = [json.loads(line) for line in dry.stdout.splitlines()]
    merges = [e for e in events if e["type"] == "recommendation" and e["action"] == "merge"]
    assert [(e["target_id"], e["into"]) for e in merges] == [(ids[twin_b], ids[twin_a])]
    keeps = {
        frozenset((e["target_id"], e["beside"])): e["reasoning"]
        for e in events
        if e["type"] == "recommendation" and e["action"] == "keep"
    }
    for (old, new), why in ABOVE_THRESHOLD.items():
        assert f"but {why}: " in keeps[frozenset((ids[old], ids[new]))]
    # The reason reads the first id's values vs the second's.
    low, high = sorted((ids[DIFFERENT_FACTS[0][0]], ids[DIFFERENT_FACTS[0][1]]))
    values = "100 vs 1000" if low == ids[DIFFERENT_FACTS[0][0]] else "1000 vs 100"
    assert keeps[frozenset((low, high))].endswith(f"but numbers differ: {values}")

    [report] = dream_once(daemon.config, ["facts"])
    assert report.merged == 1 and report.distinct_pairs >= len(ABOVE_THRESHOLD)
    live = {d.drawer_id: d.content for d in client.list("facts", limit=100).drawers}
    assert set(live) == set(ids.values()) - {ids[twin_b]}
    assert live[ids[twin_a]] == twin_b  # the survivor (the older) takes the newest wording
    hits = client.recall("facts", "What is the API rate limit?", top_k=2).results
    assert {h.content for h in hits} == set(DIFFERENT_FACTS[0])
    # The survivor's vector followed its new text: that text finds it at cosine ~1 (the
    # row it took holds twin_b's vector mixed with its predecessor's, twin_a's: 0.999;
    # twin_a's own vector alone is at 0.990).
    [hit] = client.recall("facts", twin_b, top_k=1).results
    assert hit.drawer_id == ids[twin_a] and hit.score > 0.995
    assert_consistent(client, daemon.config, "facts")

    # The merged drawer comes back as it was; the survivor keeps what it got.
    restored = run_cli(daemon, "archive", "restore", "facts", ids[twin_b])
    assert restored.returncode == 0, restored.stderr
    live = {d.drawer_id: d.content for d in client.list("facts", limit=100).drawers}
    assert live[ids[twin_b]] == twin_b and live[ids[twin_a]] == twin_b
    hits = client.recall("facts", twin_b, top_k=2).results
    assert {h.drawer_id for h in hits} == {ids[twin_a], ids[twin_b]}
    assert client.palace_info("facts").archived_count == 0
    assert_consistent(client, daemon.config, "facts")


def test_2000_templated_distinct_notes_lose_nothing(client, daemon):
    """Build and runner numbers make every note its own fact; cosine alone merged about a
    quarter of such notes."""
    client.palace_create("builds")
    texts = [f"build {1000 + i} passed on runner {i % 13}" for i in range(2000)]
    drawers = [{"drawer_id": str(uuid.uuid4()), "content": t} for t in texts]
    for start in range(0, len(drawers), 500):
        client.call(
            "palace_import", {"drawers": drawers[start : start + 500]}, palace="builds", timeout=300
        )
    [preview] = dream_once(daemon.config, ["builds"], dry_run=True)
    assert preview.merged == 0 and preview.duplicate_pairs == 0
    # 508 pairs of these notes are at cosine >= 0.95 (every one found by the scan here):
    # close enough for cosine alone to merge, kept apart by the rule.
    assert preview.distinct_pairs >= 400
    [report] = dream_once(daemon.config, ["builds"])
    assert report.merged == 0
    info = client.palace_info("builds")
    assert info.drawer_count == 2000 and info.archived_count == 0
    assert_consistent(client, daemon.config, "builds")


def test_prune_archive_restore_round_trip_through_the_cli(client, daemon):
    client.palace_create("old")
    keep = client.remember("old", "A note written today about the release checklist.")
    gone = client.remember(
        "old", "A note from long ago about a retired server.", created_at="2021-03-01T10:00:00Z"
    )
    dry = run_cli(daemon, "dream", "--palace", "old", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    lines = [json.loads(line) for line in dry.stdout.splitlines()]
    assert {
        "type": "recommendation",
        "palace": "old",
        "target_id": gone.drawer_id,
        "action": "archive",
    }.items() <= next(x for x in lines if x["type"] == "recommendation").items()
    assert client.palace_info("old").drawer_count == 2  # a dry run changes nothing

    done = run_cli(daemon, "dream", "--palace", "old", "--json")
    complete = json.loads(done.stdout.splitlines()[-1])
    assert complete["type"] == "complete" and complete["archived"] == 1, done.stdout
    info = client.palace_info("old")
    assert info.drawer_count == 1 and info.archived_count == 1 and info.dream_archived == 1
    assert [h.drawer_id for h in client.recall("old", "retired server").results] == [keep.drawer_id]

    listed = run_cli(daemon, "--json", "archive", "list", "old")
    [entry] = json.loads(listed.stdout)["drawers"]
    assert (entry["drawer_id"], entry["reason"]) == (gone.drawer_id, "pruned")
    restored = run_cli(daemon, "archive", "restore", "old", gone.drawer_id)
    assert restored.returncode == 0, restored.stderr
    hits = client.recall("old", "retired server", top_k=1).results
    assert hits[0].drawer_id == gone.drawer_id
    assert client.palace_info("old").archived_count == 0
    # A restored drawer's decay clock restarted: the next pass keeps it.
    dream_once(daemon.config, ["old"])
    assert client.palace_info("old").drawer_count == 2
    assert_consistent(client, daemon.config, "old")


def test_dreaming_while_8_clients_write_loses_nothing(client, daemon):
    client.palace_create("busy")
    texts = [sentence(i) for i in range(100)]
    drawers = [{"drawer_id": str(uuid.uuid4()), "content": t} for t in texts + map_twins(texts)]
    client.call("palace_import", {"drawers": drawers}, palace="busy", timeout=120)
    acked: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        with Client(daemon.config, autostart=False) as c:
            i = 0
            while not stop.is_set():
                r = c.remember("busy", f"writer {n} wrote note {i} on subject {i % 5}")
                with lock:
                    acked.append(r.drawer_id)
                i += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    try:
        while len(acked) < 16:  # every writer is under way
            time.sleep(0.05)
        reports = dream_once(daemon.config, ["busy"])
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert reports[0].merged >= 90 and len(acked) > 50
    live = {row[0] for row in sql(daemon.config, "busy", "SELECT id FROM drawers")}
    merged = dict(sql(daemon.config, "busy", "SELECT id, merged_into FROM archive"))
    lost = [i for i in acked if i not in live and merged.get(i) not in live]
    assert lost == [], f"{len(lost)} acknowledged drawers are neither live nor merged"
    assert_consistent(client, daemon.config, "busy")


def test_kill_9_of_the_dreamer_mid_apply_leaves_a_consistent_palace(client, daemon):
    client.palace_create("crash")
    texts = [sentence(i) for i in range(120)]
    texts += map_twins(texts)
    drawers = [{"drawer_id": str(uuid.uuid4()), "content": t} for t in texts]
    client.call("palace_import", {"drawers": drawers}, palace="crash", timeout=120)
    before = client.palace_info("crash").drawer_count
    env = {**daemon.env, "TRUSTY_MEMORY_DREAMER_MERGE_BATCH": "4"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trusty_memory.client.cli.main",
            "dream",
            "--palace",
            "crash",
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    merging = 0
    for line in proc.stdout:
        event = json.loads(line)
        if event["type"] == "progress" and event["stage"] == "merge":
            merging += 1
            if merging == 3:
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait(timeout=30)
    assert merging == 3, "the dream ended before it could be killed mid-merge"
    time.sleep(0.5)  # let the writer finish the batch it was given
    after = client.palace_info("crash")
    assert 0 < before - after.drawer_count < 100  # some merged, not all
    assert_consistent(client, daemon.config, "crash")
    # The next pass finishes the job.
    dream_once(daemon.config, ["crash"], emit=progress.silent)
    assert_consistent(client, daemon.config, "crash")
    assert client.palace_info("crash").drawer_count <= 130  # ~120 pairs, all merged


def map_twins(texts: list[str]) -> list[str]:
    return [twin(t) for t in texts]
