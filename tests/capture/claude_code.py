"""Claude Code as the hook tests need it: a transcript in its format, its hook input, and
running an installed hook the way Claude Code does (its command through ``sh -c`` in the
project folder, ``CLAUDE_PROJECT_DIR`` set, the event's JSON on stdin)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SESSION = "0f8d3c1e-5b7a-4c2e-9d61-3a2b1c0d9e8f"


def transcript(session: str, cwd: str, exchanges: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A session's lines as Claude Code writes them (``~/.claude/projects/P/SESSION.jsonl``):
    a ``user`` line whose ``message.content`` is a string, an ``assistant`` line of blocks
    (thinking, then text), a tool call and its result between exchanges."""
    lines: list[dict[str, Any]] = []
    parent = None
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session,
        "version": "2.0.14",
        "gitBranch": "main",
    }
    for i, (question, answer) in enumerate(exchanges):
        stamp = f"2026-11-28T06:{i:02d}:00.000Z"
        user_id, tool_id, result_id, reply_id = (str(uuid.uuid4()) for _ in range(4))
        lines.append(
            {
                **base,
                "parentUuid": parent,
                "type": "user",
                "message": {"role": "user", "content": question},
                "uuid": user_id,
                "timestamp": stamp,
            }
        )
        call = f"toolu_{i:02d}"
        lines.append(
            {
                **base,
                "parentUuid": user_id,
                "type": "assistant",
                "message": {
                    "id": f"msg_{i:02d}a",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [
                        {"type": "thinking", "thinking": "Let me look.", "signature": "c2ln"},
                        {
                            "type": "tool_use",
                            "id": call,
                            "name": "Bash",
                            "input": {"command": "grep -rn port config/"},
                        },
                    ],
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                },
                "requestId": f"req_{i:02d}a",
                "uuid": tool_id,
                "timestamp": stamp,
            }
        )
        lines.append(
            {
                **base,
                "parentUuid": tool_id,
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call, "content": "config/x: 1"}
                    ],
                },
                "uuid": result_id,
                "timestamp": stamp,
                "toolUseResult": {"stdout": "config/x: 1", "stderr": "", "interrupted": False},
            }
        )
        lines.append(
            {
                **base,
                "parentUuid": result_id,
                "type": "assistant",
                "message": {
                    "id": f"msg_{i:02d}b",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": answer}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 12, "output_tokens": 9},
                },
                "requestId": f"req_{i:02d}b",
                "uuid": reply_id,
                "timestamp": stamp,
            }
        )
        parent = reply_id
    return lines


def write_transcript(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def hook_input(event: str, transcript_path: str, cwd: str, **extra: Any) -> dict[str, Any]:
    """The JSON Claude Code writes on a hook's stdin."""
    base = {
        "session_id": SESSION,
        "transcript_path": transcript_path,
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": event,
    }
    more = {
        "Stop": {"stop_hook_active": False},
        "SessionEnd": {"reason": "prompt_input_exit"},
        "PreCompact": {"trigger": "auto", "custom_instructions": ""},
        "SessionStart": {"source": "startup", "model": "claude-sonnet-4-5"},
    }.get(event, {})
    return {**base, **more, **extra}


def installed_command(home: Path, settings: Path, event: str, *install_args: str) -> str:
    """``hooks install`` into ``settings`` (real command), then the command it wrote for
    ``event``: what Claude Code will run."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trusty_memory.client.cli.main",
            "hooks",
            "install",
            "--settings",
            str(settings),
            *install_args,
        ],
        env={**os.environ, "TRUSTY_MEMORY_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.returncode == 0, done.stderr
    [group] = json.loads(settings.read_text())["hooks"][event]
    [hook] = group["hooks"]
    return hook["command"]


@dataclass
class Timing:
    """A hook run's wall seconds and the CPU seconds its processes used (the shell and
    the hook; not the detached ``mine``, which is no child of ours once the hook exits)."""

    wall: float
    cpu: float

    def fast(self, wall_s: float = 1.0, cpu_s: float = 0.6) -> bool:
        """Within ``wall_s`` on an idle machine. This suite shares its cores with other
        work, so the wall bound is scaled by the run queue per core (:func:`busy`), and
        the CPU it used is bounded too: a hook that did the mining itself would need
        seconds of CPU whatever the load."""
        return self.wall < wall_s * busy() and self.cpu < cpu_s


def busy() -> float:
    """Runnable processes per core, at least 1: the larger of the last minute's average and
    now (``/proc/loadavg``'s running count: a ``mine`` a hook just started counts at once)."""
    load = os.getloadavg()[0]
    try:
        running = float(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        running = 0.0
    return max(1.0, max(load, running) / (os.cpu_count() or 1))


def run_as_claude_code(
    command: str,
    stdin: bytes | dict[str, Any],
    home: Path,
    project: Path | str,
    env: dict[str, str | None] | None = None,
    timeout: float = 30,
) -> tuple[subprocess.CompletedProcess, Timing]:
    """Run a hook command as Claude Code does; returns the result and its seconds."""
    data = json.dumps(stdin).encode() if isinstance(stdin, dict) else stdin
    full: dict[str, str | None] = {
        **os.environ,
        "TRUSTY_MEMORY_HOME": str(home),
        "CLAUDE_PROJECT_DIR": str(project),
    }
    full.update(env or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        input=data,
        cwd=project if os.path.isdir(project) else "/",
        env={k: v for k, v in full.items() if v is not None},
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    took = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, Timing(took, cpu)


def last_log(home: Path) -> dict[str, Any]:
    """The hook's last decision, from the home's ``logs/hooks.log``."""
    lines = (home / "logs" / "hooks.log").read_text().splitlines()
    records = [json.loads(x) for x in lines if x.startswith("{")]
    return records[-1]
