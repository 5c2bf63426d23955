"""The ``trusty-memory`` command line, as a person or a script uses it: real processes.

Covers: client/cli/main.py client/cli/parser.py client/cli/admin.py client/cli/memory.py
    client/cli/palaces.py client/cli/kg.py client/cli/processes.py broker/status_report.py
    common/__init__.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trusty_memory.common import __version__

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]


def run(home, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    return subprocess.run(
        [*CLI, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_version_and_help_for_every_subcommand(tmp_path):
    assert run(tmp_path, "--version").stdout.strip() == f"trusty-memory {__version__}"
    for words in (
        ["palace", "create"],
        ["palace", "info"],
        ["palace", "list"],
        ["palace", "delete"],
        ["palace", "rename"],
        ["palace", "restore"],
        ["import"],
        ["kg", "assert"],
        ["kg", "query"],
        ["archive", "restore"],
        ["config", "show"],
        ["show"],
        ["doctor"],
        ["setup"],
        ["logs"],
        ["scale"],
        ["daemon"],
        ["ui"],
        ["service", "install"],
        ["service", "uninstall"],
    ):
        out = run(tmp_path, *words, "--help")
        assert out.returncode == 0, (words, out.stderr)
        assert out.stdout.startswith(f"usage: trusty-memory {' '.join(words)}")
        assert "--json" in out.stdout


def test_usage_errors_are_json_under_json_before_or_after_the_command(tmp_path):
    for args in (["--json", "recall", "p"], ["recall", "p", "--json"]):
        out = run(tmp_path, *args)
        assert out.returncode == 2
        error = json.loads(out.stdout)["error"]
        assert error["code"] == 2 and "query" in error["message"]


def test_config_show_and_doctor_need_no_daemon(tmp_path):
    env_home = tmp_path / "home"
    shown = json.loads(run(env_home, "config", "show", "--json").stdout)
    assert shown["home"] == str(env_home) and shown["palace"]["readers"] == 0
    assert "[palace]" in run(env_home, "config", "show").stdout
    doctor = run(env_home, "doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert {"python", "libraries", "model cache", "export tools", "daemon", "home"} <= set(checks)
    assert "not running" in checks["daemon"]["detail"]


@pytest.mark.slow
def test_a_session_at_the_command_line(fresh_home):
    home = fresh_home
    try:
        assert run(home, "palace", "create", "notes", "--description", "scratch").returncode == 0
        stored = run(home, "remember", "notes", "-", "--tag", "db", stdin="Staging DB: port 5433\n")
        drawer_id = stored.stdout.strip()
        shown = json.loads(run(home, "show", drawer_id, "--json").stdout)
        assert shown["content"] == "Staging DB: port 5433"
        assert shown["palace"] == "notes" and shown["tags"] == ["db"]
        hits = json.loads(
            run(home, "recall", "notes", "which port is staging on?", "--json").stdout
        )
        assert hits["results"][0]["drawer_id"] == drawer_id
        assert run(home, "kg", "assert", "notes", "auth", "version", "2.4.1").returncode == 0
        facts = json.loads(run(home, "kg", "query", "notes", "auth", "--json").stdout)
        assert [t["object"] for t in facts["triples"]] == ["2.4.1"]
        missing = run(home, "--json", "show", "00000000-0000-0000-0000-000000000000")
        assert missing.returncode == 1
        assert json.loads(missing.stdout)["error"]["code"] == 2002
        status = run(home, "status", "--json")
        [worker] = [
            w
            for s in json.loads(status.stdout)["services"]
            if s["name"] == "palace:notes"
            for w in s["workers"]
        ]
        assert worker["role"] == "writer" and worker["lag"] == 0
        assert "daemon started" in run(home, "logs", "-n", "500").stdout
        doctor = json.loads(run(home, "doctor", "--json").stdout)
        assert doctor["ok"], doctor
    finally:
        run(home, "stop")
