"""Palace workers forked from the template: cheaper, and supervised like any other.

Covers: workers/template.py broker/forks.py broker/supervisor.py workers/palace_process.py
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, run_cli
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.home import CRASH_TEST_ENV
from trusty_memory.workers.template import TEMPLATE_DELAY_ENV, TEMPLATE_THREAD_ENV

pytestmark = pytest.mark.slow


def parent_cmdline(pid: int) -> str:
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def palace_workers(client: Client, palace: str) -> list[dict]:
    for s in client.status()["services"]:
        if s["name"] == f"palace:{palace}":
            return s["workers"]
    return []


def wait_workers(client: Client, palace: str, n: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = palace_workers(client, palace)
        if len(workers) == n:
            return workers
        time.sleep(0.05)
    raise AssertionError(f"{palace}: wanted {n} workers, have {palace_workers(client, palace)}")


def template_ready(client: Client, timeout: float = 60.0) -> int:
    """The pid of the template once it forks (palaces asked for sooner wait for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        template = client.status()["template"]
        if template["ready"]:
            return template["pid"]
        time.sleep(0.05)
    raise AssertionError(f"the template never became ready: {client.status()['template']}")


def test_writers_and_readers_are_forked_from_the_template(daemon):
    with Client(daemon.config, autostart=False) as c:
        template_ready(c)
        c.palace_create("forked")
        c.remember("forked", "the template imported everything before this worker existed")
        c.scale("forked", 1)
        for worker in wait_workers(c, "forked", 2):
            assert "trusty_memory.workers.template" in parent_cmdline(worker["pid"])
        c.scale("forked", 0)


def test_a_killed_template_costs_nothing_acknowledged(daemon):
    with Client(daemon.config, autostart=False) as c:
        template = template_ready(c)
        c.palace_create("orphans")
        first = c.remember("orphans", "written before the template died").drawer_id
        [writer] = wait_workers(c, "orphans", 1)
        assert "trusty_memory.workers.template" in parent_cmdline(writer["pid"])
        os.kill(template, signal.SIGKILL)
        # Its workers notice their parent is gone and stop. The next request starts a new
        # template, and a writer the long way while that one imports: nothing waits on it.
        wait_workers(c, "orphans", 0)
        second = c.remember("orphans", "written after the template died").drawer_id
        ids = {d.drawer_id for d in c.list("orphans", limit=10).drawers}
        assert {first, second} <= ids
        assert template_ready(c) != template


def test_a_palace_asked_for_while_the_template_starts_waits_for_it(fresh_home):
    """A cold start's first request comes before the template is ready: its writer waits
    for the template (a fork in milliseconds) rather than import a fresh interpreter,
    whose 0.6 CPU-seconds the first answer waited behind on two cores."""
    d = Daemon(fresh_home, extra_env={TEMPLATE_DELAY_ENV: "2"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            assert not c.status()["template"]["ready"]
            c.palace_create("early")
            c.remember("early", "asked for before the template was ready")
            [writer] = wait_workers(c, "early", 1)
            assert "trusty_memory.workers.template" in parent_cmdline(writer["pid"])
        assert "starting the worker afresh" not in daemon_log(d)
    finally:
        d.stop()


def test_fresh_interpreters_when_forking_is_off(fresh_home):
    d = Daemon(fresh_home, extra_env={"TRUSTY_MEMORY_PALACE_FORK_WORKERS": "false"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            c.palace_create("fresh")
            c.remember("fresh", "started the long way")
            [writer] = wait_workers(c, "fresh", 1)
            assert "trusty_memory.broker" in parent_cmdline(writer["pid"])
    finally:
        d.stop()


# -- a template that must not fork, and forks that die young ----------------------------


def daemon_log(d: Daemon) -> str:
    return (d.home / "daemon-test.log").read_text(errors="replace")


def test_the_template_is_single_threaded_when_it_forks(daemon):
    """numpy's BLAS pool would give it one thread per core; the supervisor caps it first."""
    with Client(daemon.config, autostart=False) as c:
        template_ready(c)
        template = c.status()["template"]
        assert template["threads"] == 1, template
        assert template["forking"] and template["refused_forks"] == 0


def test_a_template_with_a_thread_refuses_to_fork(fresh_home):
    d = Daemon(fresh_home, extra_env={TEMPLATE_THREAD_ENV: "1"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            template_ready(c)
            assert c.status()["template"]["threads"] == 2
            for name in ("threaded-a", "threaded-b"):
                c.palace_create(name)
                c.remember(name, "written by a worker started afresh")
                [writer] = wait_workers(c, name, 1)
                assert "trusty_memory.broker" in parent_cmdline(writer["pid"])
            template = c.status()["template"]
            assert template["refused_forks"] == 2 and not template["forking"], template
        assert daemon_log(d).count("the template refuses to fork while it has threads") == 1
        assert "test-thread" in daemon_log(d)  # the log names the threads it found
    finally:
        d.stop()


def test_forked_workers_that_die_young_turn_forking_off(fresh_home):
    """The 16-core crash, injected: every forked child dies of SIGSEGV before it answers.
    Two in a row and the daemon starts palace workers afresh; the caller only waits."""
    d = Daemon(fresh_home, extra_env={CRASH_TEST_ENV: "forked"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            template_ready(c)
            c.palace_create("crashy")
            started = time.monotonic()
            drawer = c.call(
                "memory_remember", {"text": "kept despite the crashes"}, palace="crashy", timeout=20
            )["drawer_id"]
            assert time.monotonic() - started < 20
            assert [h.drawer_id for h in c.recall("crashy", "kept despite", 1).results] == [drawer]
            status = c.status()
            assert (
                "2 forked palace workers in a row killed by SIGSEGV"
                in (status["template"]["fork_off_reason"])
            )
            crash = status["crashes"]["palace:crashy#0"]
            assert crash["last_exit"] == "killed by SIGSEGV" and crash["forked"]
            [writer] = wait_workers(c, "crashy", 1)
            assert "trusty_memory.broker" in parent_cmdline(writer["pid"])
            # Other palaces start afresh from now on, with no crash of their own.
            c.palace_create("calm")
            c.remember("calm", "no fork, no crash")
            assert "palace:calm#0" not in c.status()["crashes"]
        log = daemon_log(d)
        assert "Fatal Python error: Segmentation fault" in log  # the child's last words
        assert "forking is off until the daemon restarts" in log
        doctor = run_cli(d, "doctor")
        assert "forking off" in doctor.stdout
    finally:
        d.stop()


def test_a_crash_loop_is_reported_within_seconds(fresh_home):
    """A palace whose worker dies however it is started: the waiting request gets an
    error naming the crash in seconds (not a 60 s timeout), and status counts it."""
    d = Daemon(fresh_home, extra_env={CRASH_TEST_ENV: "all"}).start()
    try:
        with Client(d.config, autostart=False) as c:
            template_ready(c)
            c.palace_create("doomed")
            for _ in range(2):  # the second request, too, is answered with the cause
                started = time.monotonic()
                with pytest.raises(p.TrustyError) as caught:
                    c.call("memory_remember", {"text": "never stored"}, palace="doomed")
                assert time.monotonic() - started < 15
                assert caught.value.code == p.ErrorCode.WORKER_CRASHED
                assert "keeps crashing: killed by SIGSEGV" in caught.value.message
            crash = c.status()["crashes"]["palace:doomed#0"]
            assert crash["in_a_row"] >= 3 and crash["last_exit"] == "killed by SIGSEGV"
            assert c.call("ping")["pong"]  # the daemon itself is unharmed
        status = run_cli(d, "status")
        assert "crashed: palace:doomed#0" in status.stdout
    finally:
        d.stop()
