"""``trusty-memory mine`` against a real daemon: each source format from fixtures written
to its documented shape, mining twice adds nothing, a grown transcript is read only from
where the last run stopped, a rewritten one from the start without duplicates, a
``kill -9`` mid-run then a re-run stores every exchange exactly once, and hostile input
is counted and skipped, never a crash.

Covers: client/capture/mine.py client/capture/exchanges.py client/capture/claude_code.py
    client/capture/codex.py client/capture/chatgpt.py client/capture/claude_ai.py
    client/capture/markdown.py client/cli/capture.py client/progress.py workers/store/bulk.py
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.capture.claude_code import transcript, write_transcript
from tests.conftest import on_pty, run_cli, wait_until

SESSION = "5e0c1b2a-7d4f-4a1e-9c3b-8f2d6e1a0b97"


def mine(daemon, palace: str, *paths: Path, fmt: str | None = None) -> dict:
    extra = ("--format", fmt) if fmt else ()
    r = run_cli(daemon, "mine", palace, *map(str, paths), *extra, "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def drawers(daemon, palace: str) -> list[dict]:
    r = run_cli(daemon, "export", palace, "--no-vectors", timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    return [x for x in rows if x.get("type") == "drawer"]


def qa(n: int, start: int = 0) -> list[tuple[str, str]]:
    return [
        (f"Question {i}: which port does service {i} use?", f"Service {i} uses port {8000 + i}.")
        for i in range(start, start + n)
    ]


def test_claude_code_exchange_is_one_drawer_without_thinking_or_tool_output(daemon, tmp_path):
    path = write_transcript(
        tmp_path / "proj" / f"{SESSION}.jsonl", transcript(SESSION, "/home/ana/src/billing", qa(3))
    )
    report = mine(daemon, "cc", path)
    assert report["palace_created"] and report["by_format"] == {"claude-code": 1}
    assert (report["exchanges"], report["stored"], report["bad_lines"]) == (3, 3, 0)
    got = sorted(drawers(daemon, "cc"), key=lambda d: d["content"])
    first = got[0]
    assert first["content"].startswith("User: Question 0: which port")
    assert "Service 0 uses port 8000." in first["content"]
    assert '[tool Bash: {"command": "grep -rn port config/"}]' in first["content"]
    assert "Let me look." not in first["content"]  # thinking
    assert "config/x: 1" not in first["content"]  # tool result body
    assert first["room"] == "billing" and "branch:main" in first["tags"]
    assert first["created_at"] == "2026-11-28T06:00:00Z"
    meta = first["metadata"]
    assert meta["source"] == "claude-code" and meta["session_id"] == SESSION
    assert meta["source_file"] == str(path.resolve()) and len(meta["message_uuids"]) == 4


def test_mining_twice_adds_nothing(daemon, tmp_path):
    write_transcript(tmp_path / f"{SESSION}.jsonl", transcript(SESSION, "/w/app", qa(4)))
    notes = tmp_path / "docs"
    notes.mkdir()
    (notes / "adr.md").write_text("# ADR 1\n\nWe use Postgres.\n\n## Why\n\nJoins.\n")
    first = mine(daemon, "twice", tmp_path)
    assert first["stored"] == 6 and first["files"] == 2
    # The progress store forgotten: everything is read again and skipped by id.
    (daemon.home / "capture" / "progress.json").unlink()
    again = mine(daemon, "twice", tmp_path)
    assert (again["exchanges"], again["stored"], again["skipped"]) == (6, 0, 6)
    third = mine(daemon, "twice", tmp_path)
    assert (third["lines_read"], third["exchanges"], third["files_unchanged"]) == (0, 0, 1)
    assert len(drawers(daemon, "twice")) == 6


def test_grown_transcript_reads_only_new_lines(daemon, tmp_path):
    lines = transcript(SESSION, "/w/app", qa(6))
    path = write_transcript(tmp_path / f"{SESSION}.jsonl", lines[:12])  # 3 exchanges
    assert mine(daemon, "grow", path)["stored"] == 3
    with path.open("a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines[12:]))
        f.write('{"type": "user", "partial line being writ')  # a writer mid-line
    report = mine(daemon, "grow", path)
    # The 12 new lines, and the 4 of the exchange the file ended with, read again in case
    # its reply had gone on (it had not: nothing stored or updated for it).
    assert (report["lines_read"], report["stored"], report["skipped"]) == (16, 3, 0)
    assert report["updated"] == 0
    assert len(drawers(daemon, "grow")) == 6


def test_rewritten_and_truncated_transcripts_are_reread_without_duplicates(daemon, tmp_path):
    lines = transcript(SESSION, "/w/app", qa(4))
    path = write_transcript(tmp_path / f"{SESSION}.jsonl", lines)
    mine(daemon, "rewrite", path)
    write_transcript(path, lines[:8])  # truncated (same inode, shorter)
    report = mine(daemon, "rewrite", path)
    assert report["files_reread"] == 1 and report["lines_read"] == 8 and report["stored"] == 0
    new = tmp_path / "new.jsonl"  # rewritten: a new file moved over it (new inode)
    write_transcript(new, lines + transcript(SESSION, "/w/app", qa(1, 10)))
    os.replace(new, path)
    report = mine(daemon, "rewrite", path)
    assert report["lines_read"] == 20 and (report["stored"], report["skipped"]) == (1, 4)
    assert len(drawers(daemon, "rewrite")) == 5


def test_kill_9_mid_run_then_rerun_stores_each_exchange_once(daemon, tmp_path):
    n = 400
    path = write_transcript(tmp_path / f"{SESSION}.jsonl", transcript(SESSION, "/w/app", qa(n)))
    progress = daemon.home / "capture" / "progress.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "mine", "kill", str(path)],
        env=daemon.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    key = str(path.resolve())
    wait_until(lambda: progress.exists() and key in progress.read_text(), 240, "a first batch")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = len(drawers(daemon, "kill"))
    assert 0 < first < n, "killed after the first batch, before the last"
    report = mine(daemon, "kill", path)
    assert report["stored"] + first == n
    got = drawers(daemon, "kill")
    assert len(got) == n and len({d["content"] for d in got}) == n


def test_hostile_transcript_is_counted_and_stored_safely(daemon, tmp_path):
    good = transcript(SESSION, "../../etc", qa(2))
    good[0]["timestamp"] = "not a time"
    hostile = [
        "{not json",
        json.dumps([1, 2, 3]),
        json.dumps({"type": "user", "message": 7, "uuid": 5}),
        json.dumps({"type": "assistant", "message": {"content": [None, 3, {"type": 9}]}}),
        "[" * 100_000 + "]" * 100_000,
        '{"type": "user", "message": {"content": "' + "x" * (9 * 1024 * 1024) + '"}}',
    ]
    text = "\n".join(hostile) + "\n" + "".join(json.dumps(x) + "\n" for x in good)
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_text(text)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    report = mine(daemon, "hostile", path, fifo, fmt="claude-code")
    assert report["bad_lines"] == 4  # not JSON, not an object, too deep, too long
    assert any("pipe.jsonl: not a regular file" in r for r in report["refused"])
    got = drawers(daemon, "hostile")
    assert {d["room"] for d in got} == {"etc"}
    assert report["stored"] == len(got) == 2
    assert (daemon.home.parent / "etc").exists() is False


def test_codex_rollout(daemon, tmp_path):
    def line(kind, payload, t="2026-11-20T10:00:00.000Z"):
        return json.dumps({"timestamp": t, "type": kind, "payload": payload}) + "\n"

    def msg(role, kind, text):
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    path = tmp_path / "2026" / "11" / "20" / "rollout-2026-11-20T10-00-00-abc.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(
        line(
            "session_meta",
            {
                "id": "abc-123",
                "cwd": "/home/ana/src/shop",
                "git": {"branch": "feat/pay"},
                "cli_version": "0.40.0",
            },
        )
        + line(
            "response_item",
            msg("user", "input_text", "<environment_context>cwd</environment_context>"),
        )
        + line("response_item", msg("user", "input_text", "Why is checkout slow?"))
        + line(
            "response_item",
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
        )
        + line(
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["rg","slow"]}',
                "call_id": "c1",
            },
        )
        + line(
            "response_item",
            {"type": "function_call_output", "call_id": "c1", "output": "SECRET LOG"},
        )
        + line("response_item", msg("assistant", "output_text", "An N+1 query in cart."))
    )
    report = mine(daemon, "codex", tmp_path)
    assert report["by_format"] == {"codex": 1} and report["stored"] == 1
    (d,) = drawers(daemon, "codex")
    assert d["content"].startswith("User: Why is checkout slow?")
    assert "[tool shell:" in d["content"] and "An N+1 query in cart." in d["content"]
    assert "SECRET LOG" not in d["content"] and "environment_context" not in d["content"]
    assert d["room"] == "shop" and d["tags"] == ["branch:feat/pay"]
    assert d["metadata"]["session_id"] == "abc-123"


def test_chatgpt_export_follows_current_node_only(daemon, tmp_path):
    def node(nid, parent, role, text, t):
        message = (
            None
            if role is None
            else {
                "id": nid,
                "author": {"role": role},
                "create_time": t,
                "content": {"content_type": "text", "parts": [text]},
            }
        )
        return {"id": nid, "message": message, "parent": parent, "children": []}

    mapping = {
        "root": node("root", None, None, "", None),
        "u1": node("u1", "root", "user", "Pick a database.", 1763630000.0),
        "a1": node("a1", "u1", "assistant", "Use Postgres.", 1763630001.0),
        "u2old": node("u2old", "a1", "user", "Abandoned edit.", 1763630002.0),
        "u2": node("u2", "a1", "user", "Which version?", 1763630003.0),
        "a2": node("a2", "u2", "assistant", "Postgres 16.", 1763630004.0),
    }
    export = tmp_path / "conversations.json"
    export.write_text(
        json.dumps(
            [
                {
                    "title": "DB",
                    "id": "conv-1",
                    "current_node": "a2",
                    "mapping": mapping,
                    "create_time": 1763630000.0,
                }
            ]
        )
    )
    report = mine(daemon, "gpt", export)
    assert report["by_format"] == {"chatgpt": 1} and report["stored"] == 2
    contents = sorted(d["content"] for d in drawers(daemon, "gpt"))
    assert contents == [
        "User: Pick a database.\n\nAssistant: Use Postgres.",
        "User: Which version?\n\nAssistant: Postgres 16.",
    ]


def test_chatgpt_export_skips_what_the_app_does_not_show(daemon, tmp_path):
    """The hidden system and custom-instructions messages, an assistant message addressed
    to a tool (its query), reasoning and a tool's output are neither prompt nor reply."""

    def node(nid, parent, message):
        return {"id": nid, "message": message, "parent": parent, "children": []}

    def msg(nid, role, parts, **more):
        content = {"content_type": more.pop("content_type", "text"), "parts": parts}
        return {
            "id": nid,
            "author": {"role": role},
            "create_time": 1763630000.0,
            "content": content,
            "recipient": "all",
            **more,
        }

    hidden = {"is_visually_hidden_from_conversation": True}
    chain = [
        msg("s", "system", [""], metadata=hidden),
        msg("ctx", "user", ["I am a Go developer."], metadata=hidden),
        msg("u", "user", ["What is the latest Go release?"]),
        msg("q", "assistant", ['search("latest Go release")'], recipient="web.run"),
        msg("t", "tool", ["Go 1.99 released (search result page)"]),
        msg("r", "assistant", ["thinking about it"], channel="analysis"),
        msg("a", "assistant", ["The latest is Go 1.99."]),
    ]
    mapping, parent = {}, None
    for m in chain:
        mapping[m["id"]] = node(m["id"], parent, m)
        parent = m["id"]
    export = tmp_path / "conversations.json"
    export.write_text(
        json.dumps([{"id": "c", "title": "Go", "current_node": "a", "mapping": mapping}])
    )
    report = mine(daemon, "gpt-hidden", export)
    assert report["stored"] == 1
    (d,) = drawers(daemon, "gpt-hidden")
    assert (
        d["content"] == "User: What is the latest Go release?\n\nAssistant: The latest is Go 1.99."
    )


def test_claude_ai_export(daemon, tmp_path):
    export = tmp_path / "conversations.json"
    export.write_text(
        json.dumps(
            [
                {
                    "uuid": "c-9",
                    "name": "Ports",
                    "chat_messages": [
                        {
                            "uuid": "m1",
                            "sender": "human",
                            "text": "Staging port?",
                            "created_at": "2026-01-02T03:04:05Z",
                            "content": [{"type": "text", "text": "Staging port?"}],
                        },
                        {
                            "uuid": "m2",
                            "sender": "assistant",
                            "text": "5433.",
                            "created_at": "2026-01-02T03:04:09Z",
                        },
                    ],
                }
            ]
        )
    )
    report = mine(daemon, "cai", export)
    assert report["by_format"] == {"claude-ai": 1} and report["stored"] == 1
    (d,) = drawers(daemon, "cai")
    assert d["content"] == "User: Staging port?\n\nAssistant: 5433."
    assert d["created_at"] == "2026-01-02T03:04:05Z" and d["metadata"]["title"] == "Ports"


def test_markdown_split_at_headings_and_bounded(daemon, tmp_path):
    docs = tmp_path / "handbook"
    docs.mkdir()
    big = "\n\n".join(f"Paragraph {i}. " + "word " * 2000 for i in range(10))  # ~100 KB
    (docs / "guide.md").write_text(
        "# Guide\n\nIntro.\n\n## Install\n\n```sh\n# not a heading\n```\n\n### Linux\n\napt.\n\n"
        "## Big\n\n" + big + "\n"
    )
    report = mine(daemon, "md", docs)
    got = drawers(daemon, "md")
    paths = {d["metadata"]["heading_path"] for d in got}
    assert {"Guide", "Guide > Install", "Guide > Install > Linux", "Guide > Big"} == paths
    assert all(len(d["content"].encode()) <= 64 * 1024 for d in got)
    big_parts = [d for d in got if d["metadata"]["heading_path"] == "Guide > Big"]
    assert len(big_parts) == 2 and report["stored"] == len(got) == 5
    assert {d["room"] for d in got} == {"handbook"}
    assert (
        "# not a heading"
        in next(d for d in got if d["metadata"]["heading_path"] == "Guide > Install")["content"]
    )


def test_progress_on_a_terminal_is_redrawn_and_ends_at_100_percent(daemon, tmp_path):
    """On a terminal (a real pseudo-terminal as stderr) mine redraws one line with the share
    of the files read, exchanges, stored and rate, ending at 100%; without one (a pipe) it
    writes whole lines and a last one at 100%. A resumed run counts the part already read."""
    lines = transcript(SESSION, "/home/ana/src/api", qa(40))
    path = write_transcript(tmp_path / "proj" / f"{SESSION}.jsonl", lines[:120])  # 30 exchanges
    code, shown, out = on_pty(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "mine", "tty", str(path)],
        daemon.env,
        streams=("stderr",),
        timeout=300,
    )
    assert code == 0, shown
    text = shown.decode()
    assert "\r" in text and "mine tty:" in text, text
    assert "100.0% 30 exchanges, 30 stored" in text, text
    assert b"mined 1 files into tty" in out

    # Grown, without a terminal: the old part counts as read, the end is 100% again.
    with path.open("a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines[120:]))
    r = run_cli(daemon, "mine", "tty", str(path))
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("mine tty:")]
    assert lines and "\r" not in r.stderr, r.stderr
    assert "100.0% 10 exchanges, 10 stored" in lines[-1], r.stderr


def test_codex_run_that_ended_between_a_prompts_two_records_stores_it_once(daemon, tmp_path):
    """Codex writes a prompt as a ``response_item`` then an ``event_msg`` copy; a hook
    can mine in between. The next run knows the copy and stores the prompt once."""

    def line(kind, payload):
        return (
            json.dumps({"timestamp": "2026-11-21T09:00:00.000Z", "type": kind, "payload": payload})
            + "\n"
        )

    def msg(role, kind, text):
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    path = tmp_path / "rollout-2026-11-21T09-00-00-def.jsonl"
    meta = line("session_meta", {"id": "def-456", "cwd": "/home/ana/src/shop"})
    first = line("response_item", msg("user", "input_text", "Which queue do refunds use?"))
    path.write_text(meta + first)
    assert mine(daemon, "codex-split", path)["stored"] == 1
    with path.open("a") as f:
        f.write(
            line("event_msg", {"type": "user_message", "message": "Which queue do refunds use?"})
        )
    assert mine(daemon, "codex-split", path)["stored"] == 0  # nothing new, the copy known
    with path.open("a") as f:
        f.write(line("response_item", msg("assistant", "output_text", "The refunds-v2 queue.")))
        f.write(line("response_item", msg("user", "input_text", "And its owner?")))
        f.write(line("event_msg", {"type": "user_message", "message": "And its owner?"}))
        f.write(line("response_item", msg("assistant", "output_text", "The payments team.")))
    mine(daemon, "codex-split", path)
    contents = sorted(d["content"] for d in drawers(daemon, "codex-split"))
    assert sum("Which queue do refunds use?" in c for c in contents) == 1, contents
    assert sum("And its owner?" in c for c in contents) == 1, contents
    assert any("The refunds-v2 queue." in c for c in contents)
    assert any("And its owner?" in c and "The payments team." in c for c in contents)


def test_mined_exchange_that_continues_the_last_gets_a_remembers_mixed_vector(daemon, tmp_path):
    """A remember that continues its predecessor gets ``own + 0.5 * predecessor``; mined
    exchanges get the same (they used to keep their own vector only, and ranked below
    the same exchanges remembered one by one), with their own vector kept beside."""
    import base64

    import numpy as np

    path = write_transcript(
        tmp_path / "p" / f"{SESSION}.jsonl", transcript(SESSION, "/home/ana/src/mix", qa(3))
    )
    mine(daemon, "mixed", path)
    r = run_cli(daemon, "export", "mixed", timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    got = sorted((x for x in rows if x.get("type") == "drawer"), key=lambda d: d["created_at"])

    def vec(value) -> np.ndarray:
        return np.frombuffer(base64.b64decode(value), dtype="<f4")

    assert len(got) == 3 and "own_vector" not in got[0]  # the first has no predecessor
    for before, after in itertools.pairwise(got):
        own, prev_own = vec(after["own_vector"]), vec(before.get("own_vector", before["vector"]))
        want = own + 0.5 * prev_own
        assert np.allclose(vec(after["vector"]), want / np.linalg.norm(want), atol=1e-5)
        assert after["context"]  # the predecessor's words, for deep recall


def test_exchange_cut_by_the_files_end_is_completed_in_its_own_drawer(daemon, tmp_path):
    """A hook can mine mid-turn (before a compaction): the last exchange then has only
    part of its reply. Once the reply goes on, the next run reads that exchange again from
    its first line and updates its drawer: one drawer per exchange, none holding a reply
    without its question; an unchanged file is still not read again."""

    def append(path: Path, rows: list[dict]) -> None:
        with path.open("a") as f:
            f.write("".join(json.dumps(x) + "\n" for x in rows))

    lines = transcript(SESSION, "/w/app", qa(3))
    path = write_transcript(tmp_path / f"{SESSION}.jsonl", lines[:10])  # third: no reply yet
    assert mine(daemon, "cut", path)["stored"] == 3
    again = mine(daemon, "cut", path)
    assert (again["lines_read"], again["stored"], again["updated"]) == (0, 0, 0)
    append(path, lines[10:] + transcript(SESSION, "/w/app", qa(1, 5)))
    grown = mine(daemon, "cut", path)
    assert (grown["stored"], grown["updated"], grown["skipped"]) == (1, 1, 0)
    contents = [d["content"] for d in drawers(daemon, "cut")]
    assert len(contents) == 4 and not [c for c in contents if c.startswith("Assistant:")]
    (third,) = [c for c in contents if "Question 2:" in c]
    assert "[tool Bash" in third and "Service 2 uses port 8002." in third
    last = mine(daemon, "cut", path)
    assert (last["stored"], last["updated"]) == (0, 0)

    # The same when the open exchange is the file's first line (offset 0).
    first = write_transcript(tmp_path / "first.jsonl", lines[:2])
    assert mine(daemon, "cut-first", first)["stored"] == 1
    append(first, lines[2:4])
    assert mine(daemon, "cut-first", first)["updated"] == 1
    (only,) = [d["content"] for d in drawers(daemon, "cut-first")]
    assert "Question 0:" in only and "Service 0 uses port 8000." in only
