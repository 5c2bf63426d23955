"""The command line as a person meets it, against a real daemon that a command started
(as a person's first command does, so it logs to ``logs/daemon.log``): ``serve`` on a
terminal says what it is; the palace comes first in every verb, the old spellings still
work with a hint, and a mistyped verb gets a suggestion; output for people (no Python
reprs, '…' where text was cut, scores to 4 decimals everywhere, MCP included, readable
logs on a terminal, uptime in words); ``dream --dry-run`` explains what decay did.

Covers: client/cli/main.py client/cli/output.py client/cli/memory.py client/cli/admin.py
    client/cli/dreaming.py client/mcp/stdio.py common/human.py ui/views.py workers/store/read.py
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.conftest import Daemon, _short_tmp, on_pty, run_cli
from trusty_memory.client.mcp.stdio import TERMINAL_NOTICE

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]
LONG_NOTE = (
    "The staging database listens on port 5433 behind the bastion host; connect through"
    " the SSH tunnel that ops documented in the runbook, never directly from a laptop."
)


@pytest.fixture(scope="module")
def started() -> Iterator[Daemon]:
    home = _short_tmp("tmp-")
    d = Daemon(home)
    created = run_cli(d, "palace", "create", "notes", "--description", "scratch notes")
    assert created.returncode == 0, created.stderr
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def ok(d: Daemon, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = run_cli(d, *args, stdin=stdin)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def on_a_terminal(d: Daemon, *args: str, timeout: float = 120) -> tuple[int, str]:
    """Run the command with stdin and stdout on a pseudo-terminal: its exit status and
    what it wrote there."""
    code, shown, _ = on_pty([*CLI, *args], d.env, streams=("stdin", "stdout"), timeout=timeout)
    return code, shown.decode().replace("\r\n", "\n")


def test_serve_on_a_terminal_says_what_it_is_and_a_pipe_changes_nothing(started):
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "serve", "--palace", "notes"],
        env=started.env,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    said: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            said.append(line.decode())

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("Ctrl-D" in x for x in said):
            time.sleep(0.05)
        notice = [x for x in said if x in TERMINAL_NOTICE]
        assert "".join(notice) == TERMINAL_NOTICE, said  # two lines, as they are
        assert "waits for an MCP client on stdin" in notice[0]
        assert "Using it from an agent" in notice[1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == b""  # stdout stays MCP's
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    piped = subprocess.run(
        [*CLI, "serve"], env=started.env, input=b"", capture_output=True, timeout=60
    )
    assert piped.returncode == 0
    assert b"waits for an MCP client" not in piped.stderr and piped.stdout == b""


def test_the_palace_comes_first_and_the_old_order_still_works(started):
    drawer = ok(started, "remember", "notes", "Alice leads the payments team", "--tag",
                "people").stdout.strip()  # fmt: skip
    new = ok(started, "show", "notes", drawer)
    assert "Alice leads" in new.stdout and "hint" not in new.stderr
    assert "Alice leads" in ok(started, "show", drawer).stdout  # no palace: every palace
    for verb in ("show", "get"):
        old = ok(started, verb, drawer, "--palace", "notes")
        assert "Alice leads" in old.stdout
        assert f"`{verb} notes {drawer}`" in old.stderr and "next release" in old.stderr
    both = run_cli(started, "show", "notes", drawer, "--palace", "other")
    assert both.returncode == 1 and "two palaces given" in both.stderr

    dream = ok(started, "dream", "notes", "--dry-run")
    assert "notes: would change" in dream.stdout and "hint" not in dream.stderr
    old = ok(started, "dream", "--palace", "notes", "--dry-run")
    assert "notes: would change" in old.stdout
    assert "`dream notes --dry-run`" in old.stderr

    typo = run_cli(started, "remeber", "notes", "x")
    assert typo.returncode == 2 and "did you mean remember?" in typo.stderr
    typo = run_cli(started, "palace", "creat", "x")
    assert typo.returncode == 2 and "did you mean create?" in typo.stderr
    far = run_cli(started, "zzzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr


def test_output_for_people_and_json_for_scripts(started):
    drawer = ok(started, "remember", "notes", LONG_NOTE, "--tag", "db", "--tag", "ops").stdout
    drawer = drawer.strip()
    shown = ok(started, "show", "notes", drawer).stdout
    fields, text = shown.split("\n\n", 1)
    assert re.search(r"^Tags:\s+db, ops$", fields, re.M), fields
    assert re.search(r"^Palace:\s+notes$", fields, re.M)
    assert "[" not in fields and "None" not in fields and text.strip() == LONG_NOTE
    as_json = json.loads(ok(started, "show", "notes", drawer, "--json").stdout)
    assert as_json["tags"] == ["db", "ops"] and "base_importance" in as_json

    recall = ok(started, "recall", "notes", "which port does staging listen on?").stdout
    [line] = [x for x in recall.splitlines() if drawer in x]
    assert re.match(rf"^\d\.\d{{4}}  L\d  {drawer}  The staging database", line), line
    assert line.endswith("…") and len(line.split("  ", 3)[3]) == 100
    hits = json.loads(ok(started, "recall", "notes", "staging port", "--json").stdout)
    assert all(h["score"] == round(h["score"], 4) for h in hits["results"])

    info = ok(started, "palace", "info", "notes").stdout
    assert re.search(r"^Description:\s+scratch notes$", info, re.M), info
    assert re.search(r"^Last dream:\s+", info, re.M)

    status = ok(started, "status").stdout
    assert re.search(r", up \d+ (s|min \d+ s|min)(, |$)", status.splitlines()[0]), status

    help_text = ok(started, "--help").stdout
    assert help_text.split("\n\n")[1].startswith("trusty-memory: long-term memory for coding")
    assert "thin layer" not in help_text and "a first session" in help_text


def test_logs_read_on_a_terminal_and_stay_json_through_a_pipe(started):
    rc, seen = on_a_terminal(started, "logs", "-n", "200")
    assert rc == 0
    lines = [x for x in seen.splitlines() if x.strip()]
    assert lines and not any(x.lstrip().startswith("{") for x in lines), seen[:2000]
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  info\s+daemon\[\d+\]\s+daemon started",
                     seen, re.M), seen[:2000]  # fmt: skip
    piped = ok(started, "logs", "-n", "200").stdout.splitlines()
    assert any(json.loads(x).get("event") == "daemon started" for x in piped)


def test_scores_have_4_decimals_in_mcp_results_too(started):
    from tests.mcp.conftest import sdk_session, tool_json

    async def go() -> tuple[list[float], list[float]]:
        async with sdk_session(started.home, "--palace", "notes", "--tools", "extended") as s:
            recall = tool_json(await s.call_tool("memory_recall", {"query": "staging port"}))
            deep = tool_json(
                await s.call_tool("memory_recall_deep", {"query": "staging database port"})
            )
            search = tool_json(await s.call_tool("memory_search", {"query": "staging"}))
        return [h["score"] for h in recall["results"] + deep["results"]], [
            d["score"] for d in search["drawers"]
        ]

    recalled, searched = asyncio.run(go())
    assert recalled and searched
    for score in recalled + searched:
        assert isinstance(score, float) and score == round(score, 4), score


def test_dream_dry_run_says_what_decay_is(started):
    ok(started, "palace", "create", "fresh")
    for i in range(20):
        ok(started, "remember", "fresh", f"Fresh note {i}: build {i} deployed to staging")
    for query in ("which build went to staging?", "deployed builds", "staging deploys"):
        ok(started, "recall", "fresh", query, "--top-k", "8")
    dry = ok(started, "dream", "fresh", "--dry-run").stdout
    decayed = int(re.search(r"fresh: would change: merged \d+, decayed (\d+)", dry).group(1))
    assert decayed > 0, dry  # minutes old, but recalled: their importance goes up
    assert "decay: importance = what it was given x 2^(-age / 90 days)" in dry
    assert "up with recalls" in dry and "decay deletes nothing" in dry
    lines = ok(started, "dream", "fresh", "--dry-run", "--json").stdout.splitlines()
    assert all(isinstance(json.loads(x), dict) for x in lines)  # no prose under --json


def test_the_daemon_page_says_its_uptime_in_words(started):
    from tests.ui.conftest import Ui, start_ui, stop_ui
    from trusty_memory.ui.security import cookie_name

    time.sleep(max(0.0, 61 - _uptime(started)))  # past a minute: "1 min 1 s", not "61 s"
    proc, url = start_ui(started)
    try:
        parts = urlsplit(url)
        token = parts.query.removeprefix("token=")
        base = f"{parts.scheme}://{parts.netloc}"
        ui = Ui(base=base, token=token, daemon=started, proc=proc, old_drawer="")
        cookie = {"Cookie": f"{cookie_name(parts.port)}={token}"}
        status, body = ui.request("GET", "/daemon", headers=cookie)
        assert status == 200
        summary = re.search(r'id="daemon-summary">([^<]*)<', body).group(1)
        assert re.search(r" · up \d+ (min|h)( \d+ (s|min))? · ", summary), summary
    finally:
        stop_ui(proc)


def _uptime(d: Daemon) -> float:
    return json.loads(ok(d, "status", "--json").stdout)["uptime_s"]
