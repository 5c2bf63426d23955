"""``trusty-memory hooks install|uninstall`` on Claude Code settings files: merged into
what is there, idempotent, taken out exactly, and never written over a file that is not
JSON. Each test runs the real command on a settings file in a throw-away folder.

Covers: client/capture/hooks.py client/cli/hooks.py
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trusty_memory.client.capture import hooks

EVENTS = ("Stop", "SessionEnd", "PreCompact", "SessionStart")

# A user's settings as Claude Code keeps them: options, permissions and hooks of their own,
# including one on an event we also use.
THEIRS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm run lint)"], "deny": ["Read(./.env)"]},
    "env": {"FOO": "bär"},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/check.sh"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 3}]}],
    },
    "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
}


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env={**os.environ, "TRUSTY_MEMORY_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write(path: Path, settings: object) -> bytes:
    data = (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode()
    path.write_bytes(data)
    return data


def ours(settings: dict, event: str) -> list[dict]:
    return [
        h
        for group in settings.get("hooks", {}).get(event, [])
        for h in group.get("hooks", [])
        if hooks.is_ours(h.get("command"))
    ]


def test_install_merges_is_idempotent_and_uninstall_restores(tmp_path):
    settings = tmp_path / "settings.json"
    original = write(settings, THEIRS)
    os.chmod(settings, 0o640)

    done = cli(tmp_path, "hooks", "install", "--agent", "claude-code", "--settings", str(settings))
    assert done.returncode == 0, done.stderr
    assert "hooks installed" in done.stdout
    after = json.loads(settings.read_bytes())
    for key in ("model", "permissions", "env", "statusLine"):
        assert after[key] == THEIRS[key]
    assert after["hooks"]["PreToolUse"] == THEIRS["hooks"]["PreToolUse"]
    assert after["hooks"]["Stop"][0] == THEIRS["hooks"]["Stop"][0]  # theirs first, untouched
    for event in EVENTS:
        [hook] = ours(after, event)
        assert hook["type"] == "command" and "hook claude-code" in hook["command"]
        assert "--palace" not in hook["command"]  # each project's own palace
    assert ours(after, "SessionStart")[0]["timeout"] <= 10
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640  # the file's mode is kept
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    # Twice: nothing changes, not even the bytes.
    first = settings.read_bytes()
    again = cli(tmp_path, "hooks", "install", "--settings", str(settings))
    assert again.returncode == 0 and "nothing changed" in again.stdout
    assert settings.read_bytes() == first

    # A palace given later replaces ours in place: still one entry per event.
    pinned = cli(tmp_path, "hooks", "install", "--settings", str(settings), "--palace", "team")
    assert pinned.returncode == 0, pinned.stderr
    now = json.loads(settings.read_bytes())
    for event in EVENTS:
        [hook] = ours(now, event)
        assert hook["command"].split()[-4:] == ["--palace", "team", "||", "true"]
    assert list(now["hooks"]) == list(after["hooks"])

    gone = cli(tmp_path, "hooks", "uninstall", "--settings", str(settings))
    assert gone.returncode == 0 and "removed" in gone.stdout
    assert settings.read_bytes() == original  # exactly what was there
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640
    nothing = cli(tmp_path, "hooks", "uninstall", "--settings", str(settings))
    assert nothing.returncode == 0 and "nothing changed" in nothing.stdout
    assert settings.read_bytes() == original


def test_install_into_a_missing_file_and_out_again(tmp_path):
    settings = tmp_path / "claude" / "settings.json"
    done = cli(tmp_path, "--json", "hooks", "install", "--settings", str(settings))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"settings": str(settings), "changed": True}
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    assert sorted(json.loads(settings.read_text())["hooks"]) == sorted(EVENTS)
    assert cli(tmp_path, "hooks", "uninstall", "--settings", str(settings)).returncode == 0
    assert json.loads(settings.read_text()) == {}


@pytest.mark.parametrize(
    "content, why",
    [
        ('{"model": "opus",, }', "is not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"hooks": []}', '"hooks" is not an object'),
        ('{"hooks": {"Stop": {"command": "x"}}}', "hooks.Stop is not a list"),
        (b"\xff\xfe{}", "is not valid JSON"),
    ],
)
def test_a_file_we_cannot_read_as_settings_is_refused_not_overwritten(tmp_path, content, why):
    settings = tmp_path / "settings.json"
    raw = content if isinstance(content, bytes) else content.encode()
    settings.write_bytes(raw)
    for verb in ("install", "uninstall"):
        refused = cli(tmp_path, "hooks", verb, "--settings", str(settings))
        assert refused.returncode == 1
        assert why in refused.stderr and "left as it is" in refused.stderr
        assert settings.read_bytes() == raw
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_a_linked_settings_file_stays_a_link(tmp_path):
    """Dotfile managers link ~/.claude/settings.json to a repository: the target is
    rewritten, the link kept."""
    target = tmp_path / "dotfiles" / "settings.json"
    target.parent.mkdir()
    original = write(target, {"model": "sonnet"})
    link = tmp_path / "settings.json"
    link.symlink_to(target)
    assert cli(tmp_path, "hooks", "install", "--settings", str(link)).returncode == 0
    assert link.is_symlink() and "SessionStart" in json.loads(target.read_text())["hooks"]
    assert cli(tmp_path, "hooks", "uninstall", "--settings", str(link)).returncode == 0
    assert link.is_symlink() and target.read_bytes() == original


def test_print_shows_the_entries_and_writes_nothing(tmp_path):
    settings = tmp_path / "settings.json"
    shown = cli(
        tmp_path, "hooks", "install", "--print", "--palace", "p1", "--settings", str(settings)
    )
    assert shown.returncode == 0, shown.stderr
    add = json.loads(shown.stdout)
    assert add == hooks.fragment("p1")
    assert sorted(add["hooks"]) == sorted(EVENTS)
    assert str(settings) in shown.stderr and "nothing was written" in shown.stderr
    assert not settings.exists()
    codex = cli(tmp_path, "hooks", "install", "--agent", "codex", "--palace", "p1")
    assert codex.returncode == 0 and "mine p1" in codex.stdout and ".codex/sessions" in codex.stdout
    bad = cli(tmp_path, "hooks", "install", "--palace", "../x", "--settings", str(settings))
    assert bad.returncode == 1 and not settings.exists()


def test_ours_is_recognised_by_its_command_and_nothing_else():
    assert hooks.is_ours(hooks.hook_command())
    assert hooks.is_ours(hooks.hook_command("p"))
    assert hooks.is_ours(
        "/opt/old/venv/bin/python -P -m trusty_memory.client.cli.main hook claude-code"
    )
    assert hooks.is_ours("'/home/me/my bin/trusty-memory' hook claude-code --palace x || true")
    for other in (
        "notify-send done",
        "trusty-memory mine p ~/x",
        "my-hook claude-code",
        "echo trusty_memory.client.cli.main hook",
        "unbalanced 'quote",
        None,
        42,
    ):
        assert not hooks.is_ours(other)
    # The command quotes the interpreter's path: a space in it stays one word.
    assert hooks.hook_argv("p")[1:] == [
        "-P",
        "-m",
        "trusty_memory.client.cli.main",
        "hook",
        "claude-code",
        "--palace",
        "p",
    ]


@pytest.mark.parametrize(
    "directory, palace",
    [
        ("/home/me/src/trusty-memory", "trusty-memory"),
        ("/home/me/src/My Project (old)", "My-Project-old"),
        ("/home/me/src/projét", "proj-t"),
        ("/home/me/.dotfiles", "dotfiles"),
        ("/home/me/--help", "help"),
        ("/home/me/src/app/", "app"),
        ("/srv/" + "x" * 100, "x" * 64),
        ("/tmp/$(touch pwned)", "touch-pwned"),
        ("/", None),
        ("/home/..", None),
        ("../..", None),
        ("relative/dir", None),
        ("/a/..\0b", None),
        ("", None),
        (None, None),
        (["/x"], None),
    ],
)
def test_a_project_maps_to_a_palace_name(directory, palace):
    assert hooks.palace_for(directory) == palace


def test_hooks_palace_prints_the_name_serve_should_use(tmp_path):
    project = tmp_path / "Shop Front"
    project.mkdir()
    shown = cli(tmp_path, "hooks", "palace", str(project))
    assert shown.returncode == 0 and shown.stdout.strip() == "Shop-Front"
