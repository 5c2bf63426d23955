"""The installed hook command, run exactly as Claude Code runs it (``sh -c`` on the command
``hooks install`` wrote, in the project folder, ``CLAUDE_PROJECT_DIR`` set, the event's
JSON on stdin), against a real daemon: it returns at once with status 0 and says nothing
at ``Stop``; it gives the wake-up context at ``SessionStart`` within a second; and hostile
input makes it do nothing (no process started, nothing read it should not read) while
still exiting 0 in silence: a hook must never break the agent.

Covers: client/capture/hooks.py client/cli/hooks.py client/capture/mine.py client/capture/wake_up.py
    client/spawn.py client/autostart.py
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.capture.claude_code import (
    SESSION,
    hook_input,
    installed_command,
    last_log,
    run_as_claude_code,
    transcript,
    write_transcript,
)
from tests.conftest import Daemon, run_cli, wait_until
from trusty_memory.client.sync import Client

EXCHANGES = [
    ("Which port does the staging database listen on?", "Staging Postgres listens on 5433."),
    ("Who owns the billing service?", "Billing is owned by the payments team (Ines)."),
]


def mine_exists() -> bool:
    from trusty_memory.client.cli.main import build_parser

    parser = build_parser()
    choices = next(a.choices for a in parser._actions if a.dest == "command")
    return "mine" in choices


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("claude") / "settings.json"


@pytest.fixture
def project(tmp_path) -> Path:
    folder = tmp_path / "hooked-project"
    folder.mkdir()
    return folder


def test_stop_returns_at_once_and_the_session_reaches_the_palace(daemon, settings, project):
    stop = installed_command(daemon.home, settings, "Stop")
    sessions = project.parent / "claude-projects" / "-tmp-hooked-project"
    path = write_transcript(
        sessions / f"{SESSION}.jsonl", transcript(SESSION, str(project), EXCHANGES)
    )
    for event in ("Stop", "PreCompact", "SessionEnd"):
        done, took = run_as_claude_code(
            stop, hook_input(event, str(path), str(project)), daemon.home, project
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), event
        assert took.fast(), f"{event} hook took {took}"
        record = last_log(daemon.home)
        assert record["event"] == event and record["palace"] == "hooked-project"
        assert record["transcript"] == str(path) and record["mine_pid"] > 0
    if not mine_exists():
        pytest.skip("`trusty-memory mine` is not there yet: the spawn is checked, not its work")

    def mined() -> bool:
        with Client(daemon.config, autostart=False) as c:
            try:
                drawers = c.list("hooked-project", limit=50).drawers
            except Exception:
                return False
        text = "\n".join(d.content for d in drawers)
        return all(q in text and a in text for q, a in EXCHANGES)

    wait_until(mined, 90, "the session's exchanges in the palace")
    with Client(daemon.config, autostart=False) as c:
        count = c.palace_info("hooked-project").drawer_count
    # Three hooks ran over the same transcript: each exchange is there once.
    assert count == len(EXCHANGES)


def one_session(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A project folder, Claude Code's folder of its sessions, and one session's transcript
    of one exchange in it."""
    project = tmp_path / name
    project.mkdir()
    sessions = tmp_path / "claude-projects" / f"-tmp-{name}"
    main = write_transcript(
        sessions / f"{SESSION}.jsonl", transcript(SESSION, str(project), EXCHANGES[:1])
    )
    return project, sessions, main


def wait_for_sidechain(daemon, palace: str, words: str) -> None:
    """Until a sub-agent's exchange holding ``words`` is in ``palace``, tagged as one."""

    def mined() -> bool:
        with Client(daemon.config, autostart=False) as c:
            try:
                drawers = c.list(palace, limit=50).drawers
            except Exception:
                return False
        return any(words in d.content and "sidechain" in d.tags for d in drawers)

    wait_until(mined, 90, f"the sub-agent's exchange ({words!r}) in {palace}")


def test_stop_mines_the_sessions_sub_agents_too_but_not_through_a_link(daemon, settings, tmp_path):
    """Claude Code 2.1 keeps each sub-agent's conversation in ``<session>/subagents/``
    beside the session's file, which ``transcript_path`` does not name: the hook mines
    that folder as well, unless it (or the session folder) is a link."""
    stop = installed_command(daemon.home, settings, "Stop")
    project, sessions, main = one_session(tmp_path, "agents-project")
    task = [("Find where the retry limit is set.", "The retry limit is 7, in config/retry.toml.")]
    side = [
        {**line, "isSidechain": True, "agentId": "a1b2c3d"}
        for line in transcript(SESSION, str(project), task)
    ]
    folder = sessions / SESSION / "subagents"
    write_transcript(folder / "agent-a1b2c3d.jsonl", side)
    for path in (sessions / SESSION, folder):
        path.chmod(0o700)
    done, took = run_as_claude_code(
        stop, hook_input("Stop", str(main), str(project)), daemon.home, project
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert took.fast(), f"Stop hook took {took}"
    record = last_log(daemon.home)
    assert record["subagents"] == str(folder) and record["mine_pid"] > 0

    wait_for_sidechain(daemon, "agents-project", "retry limit is 7")

    # The session folder swapped for a link to somewhere else: only the transcript is mined.
    elsewhere = tmp_path / "elsewhere"
    (sessions / SESSION).rename(elsewhere)
    (sessions / SESSION).symlink_to(elsewhere)
    run_as_claude_code(stop, hook_input("Stop", str(main), str(project)), daemon.home, project)
    record = last_log(daemon.home)
    assert record["mine_pid"] > 0 and "subagents" not in record


def test_session_start_gives_the_wake_up_context_within_a_second(daemon, settings, project):
    start = installed_command(daemon.home, settings, "SessionStart")
    palace = "wake-hooked"
    with Client(daemon.config) as c:
        c.palace_create(palace, description="The shop's checkout service, in Go.")
        c.remember(palace, "Deploys go out on Tuesdays only.", importance=0.9)
        kept = c.remember(palace, "The staging DB listens on port 5433.", importance=0.8)
        hits = c.get(palace, kept.drawer_id).hits
    folder = project.parent / palace
    folder.mkdir()
    event = hook_input("SessionStart", "/nonexistent/x.jsonl", str(folder / "src"))
    done, took = run_as_claude_code(start, event, daemon.home, folder)
    assert done.returncode == 0 and done.stderr == b""
    assert took.fast(cpu_s=1.0), f"SessionStart took {took}"
    answer = json.loads(done.stdout)
    out = answer["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart"
    context = out["additionalContext"]
    assert "The shop's checkout service, in Go." in context
    assert context.index("Tuesdays only") < context.index("port 5433")  # importance first
    with Client(daemon.config) as c:
        assert c.get(palace, kept.drawer_id).hits == hits  # showing it is not recalling it


def test_session_start_for_a_palace_that_does_not_exist_says_nothing(daemon, settings, tmp_path):
    start = installed_command(daemon.home, settings, "SessionStart")
    folder = tmp_path / "never-made"
    folder.mkdir()
    event = hook_input("SessionStart", "/x.jsonl", str(folder))
    done, took = run_as_claude_code(start, event, daemon.home, folder)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert took.fast(cpu_s=1.0)
    assert "never-made" not in Client(daemon.config, autostart=False).palace_list()


def test_session_start_for_a_palace_with_nothing_to_say_says_nothing(daemon, settings, tmp_path):
    start = installed_command(daemon.home, settings, "SessionStart")
    with Client(daemon.config) as c:
        c.palace_create("quiet-palace")
    folder = tmp_path / "quiet-palace"
    folder.mkdir()
    event = hook_input("SessionStart", "/x.jsonl", str(folder))
    done, _ = run_as_claude_code(start, event, daemon.home, folder)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert last_log(daemon.home)["context_chars"] == 0


def test_without_a_daemon_session_start_answers_at_once_and_starts_one_behind(fresh_home, tmp_path):
    """No daemon: the hook says nothing, returns at once, and leaves a daemon starting, so
    the agent's first tool call finds it up. A client that asks while it starts (a
    ``serve``'s first call, a second session's hook) waits for that daemon: one daemon,
    the one the hook started."""
    settings = tmp_path / "settings.json"
    start = installed_command(fresh_home, settings, "SessionStart")
    event = hook_input("SessionStart", "/x.jsonl", str(tmp_path))
    done, took = run_as_claude_code(start, event, fresh_home, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert took.fast(cpu_s=1.0)
    started = last_log(fresh_home)["daemon_started"]
    assert isinstance(started, int), last_log(fresh_home)
    again, _ = run_as_claude_code(start, event, fresh_home, tmp_path)  # a second session
    assert (again.returncode, again.stdout, again.stderr) == (0, b"", b"")
    assert last_log(fresh_home).get("daemon_started") is None, last_log(fresh_home)
    daemon = Daemon(fresh_home)
    created = run_cli(daemon, "palace", "create", "behind")  # starts none of its own
    assert created.returncode == 0, created.stderr
    assert daemon.pid() == started
    log = (fresh_home / "logs" / "daemon.log").read_text()
    assert "a daemon already runs" not in log, log[-2000:]


def test_a_client_that_asks_while_the_hooks_daemon_starts_waits_for_that_one(fresh_home):
    """The race above, without the seconds between: a client asks the instant the hook
    has spawned the daemon (its record not written yet). The start lock went to the
    daemon, so the client waits for it rather than starting a second one."""
    from trusty_memory.client.autostart import daemon_pid, ensure_daemon
    from trusty_memory.client.spawn import start_daemon_behind

    config = Daemon(fresh_home).config
    started = start_daemon_behind(config)
    assert isinstance(started, int)
    ensure_daemon(config, timeout_s=120)
    assert daemon_pid(config) == started
    assert start_daemon_behind(config) is None  # it runs: nothing more to start
    log = (fresh_home / "logs" / "daemon.log").read_text()
    assert "a daemon already runs" not in log, log[-2000:]


# -- hostile input ---------------------------------------------------------------------

PWNED = Path("/tmp/trusty-hook-pwned")


@pytest.fixture
def hostile(daemon, settings, tmp_path):
    """(run, folder): ``run(stdin, **env)`` runs the Stop hook; a valid transcript is in
    ``folder/good.jsonl`` to point links at."""
    command = installed_command(daemon.home, settings, "Stop")
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o700)
    write_transcript(folder / "good.jsonl", transcript(SESSION, str(tmp_path), EXCHANGES[:1]))
    PWNED.unlink(missing_ok=True)

    def run(stdin, env=None, timeout=30):
        log = daemon.home / "logs" / "hooks.log"
        before = log.read_text() if log.exists() else ""
        done, took = run_as_claude_code(command, stdin, daemon.home, tmp_path, env, timeout)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
        assert not PWNED.exists()
        after = log.read_text()
        assert after.startswith(before) and len(after) > len(before), "no decision logged"
        return last_log(daemon.home), took

    return run, folder


def stop(path: str, **extra) -> dict:
    return hook_input("Stop", path, "/home/me/project", **extra)


def refused(record: dict, why: str) -> None:
    assert "mine_pid" not in record, record
    assert why in record.get("refused", ""), record


def test_paths_that_are_not_this_users_transcripts_are_not_read(hostile, tmp_path):
    run, folder = hostile
    link = folder / "link.jsonl"
    link.symlink_to(folder / "good.jsonl")
    passwd = folder / "passwd.jsonl"
    passwd.symlink_to("/etc/passwd")
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    notes = folder / "notes.jsonl"
    notes.write_text("just some text\n")
    empty = folder / "empty.jsonl"
    empty.write_text("")
    cases = [
        ("/etc/passwd", "not an absolute .jsonl path"),
        ("/etc/shadow.jsonl", "No such file"),
        ("relative/x.jsonl", "not an absolute .jsonl path"),
        (str(link), "not a regular file"),
        (str(passwd), "not a regular file"),
        (str(fifo), "not a regular file"),  # opening it would block: never opened
        (str(folder), "not an absolute .jsonl path"),
        (str(notes), "does not start like a transcript"),
        (str(empty), "does not start like a transcript"),
        (str(folder / "good.jsonl") + "\0.jsonl", "not a path"),
        ("x" * 5000 + ".jsonl", "not a path"),
    ]
    for path, why in cases:
        record, took = run(stop(path))
        refused(record, why)
        assert took.fast(cpu_s=1.0)
    record, _ = run(stop(["/etc/passwd"]))
    refused(record, "not a path")


def test_a_transcript_others_could_write_or_swap_is_not_read(hostile, tmp_path):
    run, folder = hostile
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "t.jsonl").write_text((folder / "good.jsonl").read_text())
    refused(run(stop(str(shared / "t.jsonl")))[0], "writable by others")
    if os.geteuid() == 0:  # a file of another user: only root can make one here
        theirs = folder / "theirs.jsonl"
        theirs.write_text((folder / "good.jsonl").read_text())
        os.chown(theirs, 65534, 65534)
        refused(run(stop(str(theirs)))[0], "not this user's")


def test_shell_words_in_a_path_stay_a_path(hostile, daemon):
    """A real transcript whose name is made of shell: it is mined (it is the user's own
    file), and the name reaches ``mine`` as one argument, never a shell."""
    run, folder = hostile
    started = []
    marker = "pwned-marker"  # a name has no '/': the shell would make it in its folder
    for name in (
        f"$(touch {marker}).jsonl",
        f"; touch {marker}; rm -rf x; .jsonl",
        f"`touch {marker}`.jsonl",
        f"' && touch {marker} && '.jsonl",
    ):
        path = folder / name
        path.write_text((folder / "good.jsonl").read_text())
        record, _ = run(stop(str(path)))
        assert record["transcript"] == str(path) and record["mine_pid"] > 0
        started.append(record["mine_pid"])
        # The argv the hook starts is a list: the child sees the name verbatim.
        cmdline = Path(f"/proc/{record['mine_pid']}/cmdline")
        with contextlib.suppress(OSError):
            words = cmdline.read_bytes().split(b"\0")
            if b"mine" in words:
                assert os.fsencode(str(path)) in words
    # Whatever the children did, they are done (reaped by init: no zombie left) and
    # none of them ran the name.
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in started), 90, "mine to end")
    for where in (folder, folder.parent, daemon.home, Path.cwd(), Path.home(), Path("/")):
        assert not (where / marker).exists(), where


def test_input_that_is_not_a_hook_event_is_ignored(hostile, tmp_path):
    run, folder = hostile
    good = str(folder / "good.jsonl")
    cases = [
        (b"not json at all", "not JSON"),
        (b"", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'"Stop"', "not a JSON object"),
        (stop(good, hook_event_name="PreToolUse"), "not an event we handle"),
        (stop(good, hook_event_name=None), "not an event we handle"),
        (stop(good, session_id="../../x"), "session_id"),
        (stop(good, session_id="a b"), "session_id"),
        (stop(good, session_id=7), "session_id"),
        (stop(good, session_id="x" * 500), "session_id"),
    ]
    for stdin, why in cases:
        refused(run(stdin)[0], why)
    huge, took = run(b'{"hook_event_name": "Stop", "x": "' + b"A" * (8 << 20) + b'"}')
    refused(huge, "larger than")
    assert took.fast(cpu_s=1.0)


def test_a_project_folder_that_names_no_palace_is_ignored(hostile):
    run, folder = hostile
    good = str(folder / "good.jsonl")
    for cwd in ("../..", "/", "..", "relative"):
        event = hook_input("Stop", good, cwd)
        refused(run(event, env={"CLAUDE_PROJECT_DIR": None})[0], "palace")
    refused(run(stop(good), env={"CLAUDE_PROJECT_DIR": "/"})[0], "no palace name")


def test_a_hook_left_waiting_on_stdin_gives_up(daemon, settings, tmp_path):
    """Run by hand on a terminal, or by a caller that never closes stdin: it leaves."""
    command = installed_command(daemon.home, settings, "Stop")
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TRUSTY_MEMORY_HOME": str(daemon.home)},
    )
    assert proc.stdin and proc.stdout and proc.stderr
    try:
        proc.wait(timeout=10)  # stdin: a pipe left open, never written
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        proc.stdin.close()
    assert (proc.returncode, proc.stdout.read(), proc.stderr.read()) == (0, b"", b"")
    refused(last_log(daemon.home), "not closed within")


def test_an_unknown_agent_or_bad_palace_is_silent_too(daemon, tmp_path):
    event = json.dumps(stop(str(tmp_path / "x.jsonl"))).encode()
    for args in (
        ["hook", "cursor"],
        ["hook", "claude-code", "--palace", "../x"],
        ["hook", "claude-code", "--palace=-rf"],
    ):
        done = run_cli(daemon, *args, stdin=event, text=False)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), args
        assert "refused" in last_log(daemon.home)
    # What argparse itself refuses exits 2; the installed command's `|| true` makes it 0.
    line = f"{sys.executable} -P -m trusty_memory.client.cli.main hook --bogus || true"
    done = subprocess.run(["/bin/sh", "-c", line], input=event, capture_output=True, check=False)
    assert done.returncode == 0


def test_a_palace_given_at_install_wins_over_the_project(daemon, tmp_path, project):
    settings = tmp_path / "pinned.json"
    command = installed_command(daemon.home, settings, "Stop", "--palace", "pinned-palace")
    path = write_transcript(
        tmp_path / "t" / f"{SESSION}.jsonl", transcript(SESSION, str(project), EXCHANGES[:1])
    )
    done, took = run_as_claude_code(
        command, hook_input("Stop", str(path), str(project)), daemon.home, project
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert took.fast()
    record = last_log(daemon.home)
    assert record["palace"] == "pinned-palace" and record["mine_pid"] > 0


def test_stop_mines_older_claude_codes_agent_files_of_this_session_only(daemon, settings, tmp_path):
    """Claude Code before 2.1 wrote sub-agent transcripts as ``agent-<id>.jsonl`` beside
    every session's file, naming the session inside: the hook mines this session's, not
    another session's, nor one reached through a link."""
    stop = installed_command(daemon.home, settings, "Stop")
    project, sessions, main = one_session(tmp_path, "old-layout")

    def agent(name: str, session: str, answer: str) -> Path:
        task = [(f"Task for {name}.", answer)]
        lines = [
            {**line, "isSidechain": True, "agentId": name}
            for line in transcript(session, str(project), task)
        ]
        return write_transcript(sessions / f"agent-{name}.jsonl", lines)

    ours = agent("0a1b2c3d", SESSION, "The cache TTL is 42 seconds.")
    agent("9f8e7d6c", "00000000-1111-2222-3333-444444444444", "Another session's answer.")
    linked = agent("5e5e5e5e", SESSION, "Read through a link.")
    outside = tmp_path / "outside.jsonl"
    linked.rename(outside)
    linked.symlink_to(outside)
    done, took = run_as_claude_code(
        stop, hook_input("Stop", str(main), str(project)), daemon.home, project
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert took.fast(), f"Stop hook took {took}"
    record = last_log(daemon.home)
    assert record["sidechains"] == [str(ours)] and record["mine_pid"] > 0

    wait_for_sidechain(daemon, "old-layout", "cache TTL is 42")
    with Client(daemon.config, autostart=False) as c:
        text = "\n".join(d.content for d in c.list("old-layout", limit=50).drawers)
    assert "Another session's answer." not in text and "through a link" not in text
