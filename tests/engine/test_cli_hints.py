"""What the command line says when something typed is wrong: a mistyped option is answered
by its verb, with the nearest option; a palace that is not there gets how to create it
and the nearest palace there is (issue 40). Real processes, as a person meets them.

Covers: client/cli/parser.py client/cli/main.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import run_cli

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]


def run(home, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_mistyped_option_gets_the_verbs_usage_and_the_nearest_option(tmp_path):
    typo = run(tmp_path, "list", "demo", "--limt", "3")
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr.startswith("usage: trusty-memory list "), typo.stderr
    assert "COMMAND" not in typo.stderr  # not the top-level usage
    assert typo.stderr.rstrip().endswith(
        "trusty-memory list: error: unrecognized arguments: --limt 3: did you mean --limit?"
    ), typo.stderr

    nested = run(tmp_path, "palace", "create", "x", "--descripton=y")
    assert nested.returncode == 2
    assert nested.stderr.startswith("usage: trusty-memory palace create "), nested.stderr
    assert "did you mean --description?" in nested.stderr

    far = run(tmp_path, "list", "demo", "--zzzzzz")
    assert far.returncode == 2 and "unrecognized arguments: --zzzzzz" in far.stderr
    assert "did you mean" not in far.stderr
    extra = run(tmp_path, "list", "demo", "surplus")
    assert extra.returncode == 2 and "trusty-memory list: error: unrecognized" in extra.stderr

    scripted = run(tmp_path, "list", "demo", "--limt", "3", "--json")
    assert scripted.returncode == 2
    assert json.loads(scripted.stdout) == {
        "error": {
            "code": 2,
            "message": "trusty-memory list: unrecognized arguments: --limt 3:"
            " did you mean --limit?",
        }
    }


def test_a_missing_palace_says_how_to_create_it_and_the_nearest_one(daemon):
    assert run_cli(daemon, "palace", "create", "demo").returncode == 0
    near = run_cli(daemon, "remember", "dmeo", "a note")
    assert near.returncode == 1 and near.stdout == ""
    assert near.stderr.splitlines() == [
        "trusty-memory: error 2001: palace not found: dmeo",  # the daemon's words, as they were
        "trusty-memory: hint: did you mean demo? (`trusty-memory palace create dmeo` creates it)",
    ]
    far = run_cli(daemon, "list", "nosuch")
    assert far.returncode == 1
    assert far.stderr.splitlines()[1:] == [
        "trusty-memory: hint: `trusty-memory palace create nosuch` creates it"
    ]
    scripted = run_cli(daemon, "remember", "dmeo", "a note", "--json")
    assert scripted.returncode == 1 and scripted.stderr == ""
    assert json.loads(scripted.stdout) == {
        "error": {
            "code": 2001,
            "message": "palace not found: dmeo",
            "hint": "did you mean demo? (`trusty-memory palace create dmeo` creates it)",
        }
    }
    other = run_cli(daemon, "show", "demo", "no-such-drawer")
    assert other.returncode == 1 and "hint" not in other.stderr


def test_serve_offers_no_json_and_the_other_verbs_still_do(tmp_path):
    serve = run(tmp_path, "serve", "--help")
    assert serve.returncode == 0 and serve.stdout.startswith("usage: trusty-memory serve")
    assert "--json" not in serve.stdout  # its stdout is MCP: there is no report to shape
    for words in (["list"], ["palace", "create"], ["ui"], ["status"]):
        shown = run(tmp_path, *words, "--help")
        assert shown.returncode == 0 and "--json" in shown.stdout, words
    refused = run(tmp_path, "serve", "--jsn")
    assert refused.returncode == 2 and "trusty-memory serve: error" in refused.stderr
