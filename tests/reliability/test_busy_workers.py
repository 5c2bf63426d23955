"""Busy workers are not dead workers (issue 36, defect 4).

Under CPU contention (an agent's build beside the daemon: load ~10 on 2 cores) one
import batch kept the palace writer and the embedder busy for longer than
``[broker] worker_expiry_s``; both sent nothing while they worked, so the broker logged
"worker silent; presumed dead", the supervisor SIGKILLed them, twice, and the import
ended with 0 stored and "worker crashed". A worker now heartbeats from a thread of its
own while its main thread works on a batch (``workers/base.py``), and a worker the
supervisor kills as unresponsive is reported as that, not as a crash.

The real daemon, the real model and real processes throughout: the contention is a CPU
hog of busy-looping processes, and the expiry is lowered to a few seconds in the test
home so the old behaviour fails within a minute (one embedder call of 256 texts takes
longer than that under the hog) while the test stays short.

Covers: workers/base.py broker/supervisor.py broker/broker.py
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from bench.import_under_load import note
from tests.conftest import Daemon, run_cli, wait_until
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.messages import PalaceStats

EXPIRY_S = 3  # [broker] worker_expiry_s in the test home (the default is 60)
NOTES = 500  # one import batch: two embedder calls of 256 and 244 texts


@contextlib.contextmanager
def cpu_hog(per_core: int = 2) -> Iterator[list[subprocess.Popen]]:
    """``per_core`` busy-looping processes per core at normal priority: a load of about
    ``per_core * nproc`` for as long as the block runs, as a parallel build makes."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(per_core * (os.cpu_count() or 1))
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def busy_home(home, expiry_s: float = EXPIRY_S) -> Daemon:
    """A daemon whose broker presumes a worker dead after ``expiry_s`` of silence."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[broker]\nworker_expiry_s = {expiry_s}\n[dreamer]\nenabled = false\n"
    )
    return Daemon(home).start(timeout=120)


def daemon_log(d: Daemon) -> str:
    path = d.home / "logs" / "daemon.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return text + d.log_tail(10_000)


def test_import_under_a_cpu_hog_stores_every_note_and_kills_no_worker(fresh_home, tmp_path):
    """Embedding and storing a batch takes many times ``worker_expiry_s`` under the hog:
    the workers must stay alive through it and the import must store every line."""
    d = busy_home(fresh_home)
    rng = random.Random(36)
    lines = [json.dumps({"content": note(rng, i), "room": "Bulk"}) for i in range(NOTES)]
    source = tmp_path / "notes.jsonl"
    source.write_text("\n".join(lines) + "\n")
    with Client(d.config, autostart=False) as client:
        client.call("embed", {"texts": ["warm up"]}, timeout=120)  # the model is loaded
        with cpu_hog():
            started = time.monotonic()
            done = run_cli(d, "import", "busy", str(source), timeout=600)
            took = time.monotonic() - started
        log = daemon_log(d)
        assert done.returncode == 0, f"{done.stderr[-2000:]}\n{log[-3000:]}"
        stats = p.convert(client.call("palace_stats", palace="busy"), PalaceStats)
    assert stats.drawer_count == NOTES, (stats.drawer_count, done.stderr[-2000:])
    assert "presumed dead" not in log, log[-3000:]
    assert "worker crashed" not in done.stderr
    print(f"imported {NOTES} notes under the hog in {took:.1f} s")


def embedder_pids(client: Client) -> list[int]:
    """The pids of the registered embedders, from ``status``."""
    services = client.call("status")["services"]
    return [w["pid"] for s in services if s["name"] == p.EMBEDDER_SERVICE for w in s["workers"]]


def test_a_worker_the_supervisor_kills_is_reported_as_unresponsive_not_crashed(fresh_home):
    """A worker that truly stops (SIGSTOP: no thread of it runs, its pulse neither) is
    still found silent and killed, and what it held is answered with what happened.

    Two embedders are frozen and two embeds sent at once, one to each (the least loaded
    gets the next). The first embedder found silent is killed and its request goes to the
    other, still registered and frozen, which is killed in turn: that request has had its
    two attempts and its error must say "stopped by the supervisor as unresponsive", not
    "crashed". The exits are kept as the supervisor's kills, not as crashes."""
    home = fresh_home
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        "[broker]\nworker_expiry_s = 2\n[embedder]\npool_size = 2\n[dreamer]\nenabled = false\n"
    )
    d = Daemon(home).start(timeout=120)
    with Client(d.config, autostart=False) as client:
        pids = wait_until(lambda: len(embedder_pids(client)) == 2 and embedder_pids(client),
                          120, "two embedders")  # fmt: skip
        outcomes: list[object] = []

        def embed(text: str) -> None:
            with Client(d.config, autostart=False) as own:
                try:
                    outcomes.append(own.call("embed", {"texts": [text]}, timeout=60))
                except p.TrustyError as exc:
                    outcomes.append(exc)

        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            threads = [threading.Thread(target=embed, args=(f"frozen {i}",)) for i in (1, 2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(90)
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        # The broker answers what a killed worker held before the supervisor reaps it, so
        # the exit's record can lag the last answer by a loop turn: wait for both.
        slots = ("embedder#0", "embedder#1")
        crashes = wait_until(
            lambda: (c := client.call("status")["crashes"]) and all(s in c for s in slots) and c,
            30, "both kills recorded",
        )  # fmt: skip
    errors = [o for o in outcomes if isinstance(o, p.TrustyError)]
    log = daemon_log(d)
    assert len(outcomes) == 2 and errors, (outcomes, log[-3000:])
    for error in errors:
        assert "stopped by the supervisor as unresponsive" in error.message, error.message
        assert "(2 attempts)" in error.message and "crashed" not in error.message
    assert "presumed dead" in log
    assert "killed by the supervisor: unresponsive" in log
    for slot in slots:
        assert crashes[slot]["last_exit"].startswith("killed by the supervisor: unresponsive")


def test_a_worker_busy_past_worker_busy_max_s_falls_silent_and_is_restarted(fresh_home):
    """The pulse covers one piece of work for ``worker_busy_max_s`` at most, so a main
    thread that never returns is still restarted in the end. Here the cap is 1 s and the
    work real: one embed of 400 long texts (seconds of model time on 2 cores). The
    embedder says why it went quiet, is killed as unresponsive, and the embed is answered
    with that after its second try."""
    home = fresh_home
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        "[broker]\nworker_expiry_s = 2\nworker_busy_max_s = 1\n[dreamer]\nenabled = false\n"
    )
    d = Daemon(home).start(timeout=120)
    rng = random.Random(4)
    texts = [note(rng, i) for i in range(400)]
    with Client(d.config, autostart=False) as client:
        client.call("embed", {"texts": ["warm up"]}, timeout=120)
        with pytest.raises(p.TrustyError) as caught:
            client.call("embed", {"texts": texts}, timeout=240)
    assert "stopped by the supervisor as unresponsive" in caught.value.message
    log = daemon_log(d)
    assert "busy past worker_busy_max_s" in log, log[-3000:]
