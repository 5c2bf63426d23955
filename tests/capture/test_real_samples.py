"""``trusty-memory mine`` on transcripts the agents really wrote (``data/README.md`` names
each source and its license), against a real daemon: every line type they hold is read
without a bad line, each person's prompt is one drawer with the assistant's words kept and
thinking and tool output gone, and what the agent wrote into the conversation itself
(interrupt markers, slash-command output, hook reminders, compaction summaries, the
compaction and warm-up sub-agents, a prompt's second record) is not taken for a prompt.

Covers: client/capture/claude_code.py client/capture/codex.py client/capture/mine.py
"""

from __future__ import annotations

from pathlib import Path

from tests.capture.test_mine import drawers, mine

DATA = Path(__file__).parent / "data"

# Claude Code's own markup and generated turns: none of it is a person's words.
NOT_A_PROMPT = (
    "[Request interrupted by user",
    "<local-command",
    "<command-name>",
    "<command-message>",
    "This session is being continued from a previous conversation",
    "<task-notification>",
    "<system-reminder>",
    "Your task is to create a detailed summary",
    "Create beads (epic + tasks + dependencies)",  # a skill's expanded body (isMeta)
    "User: Warmup",
)


def by_prompt(got: list[dict]) -> dict[str, dict]:
    return {d["content"].split("\n", 1)[0]: d for d in got}


def test_real_claude_code_sessions(daemon):
    report = mine(daemon, "real-cc", DATA / "claude-code")
    assert report["by_format"] == {"claude-code": 7}
    assert report["bad_lines"] == 0  # progress, system, queue-operation, snapshots: all valid
    assert (report["exchanges"], report["stored"]) == (8, 8)
    got = drawers(daemon, "real-cc")
    prompts = by_prompt(got)
    assert all(p.startswith("User: ") for p in prompts), sorted(prompts)
    for d in got:
        for marker in NOT_A_PROMPT:
            assert marker not in d["content"], (marker, d["content"][:200])

    phoenix = prompts["User: start phoenix in background"]
    assert "Phoenix server is starting in the background." in phoenix["content"]
    assert '[tool Bash: {"command": "mix phx.server"' in phoenix["content"]
    assert "Command running in background with ID" not in phoenix["content"]  # tool output
    assert phoenix["room"] == "spotter" and phoenix["tags"] == ["branch:master"]
    assert phoenix["created_at"].startswith("2026-02-10T22:57:54")
    xterm = next(d for p, d in prompts.items() if p.startswith("User: scrolling back in xterm"))
    assert "research why scrolling" not in xterm["content"]  # thinking
    assert "Web search results for query" not in xterm["content"]  # a tool result
    assert "[tool WebSearch:" in xterm["content"]

    # A slash command with arguments is what the person asked, as typed.
    command = next(d for p, d in prompts.items() if p.startswith("User: /handgemacht:create-beads"))
    assert "websearch to learn how to fastest setup credo" in command["content"]
    assert "I'll research the setup options" in command["content"]

    # After a compaction the assistant carries on the turn it was in; the summary of the
    # turns before it is not stored again as a prompt.
    carry_on = prompts["User: continue"]
    assert "Continuing with spotter-dov.3." in carry_on["content"]
    assert "Background task completed successfully" in carry_on["content"]
    assert carry_on["room"] == "spotter-dov" and "branch:spotter-dov" in carry_on["tags"]

    # A sub-agent's task and findings are their own drawer; the compaction agent's and
    # the 2.0 warm-up run's are none.
    (side,) = [d for d in got if "sidechain" in d["tags"]]
    assert side["content"].startswith("User: Very thorough exploration.")
    assert "Perfect! Now I have all the information needed." in side["content"]
    assert "defmodule SpotterWeb.SessionLive" not in side["content"]  # a file it read

    agent = next(d for p, d in prompts.items() if "solution-architect" in p)
    assert (
        "The user is asking me to analyze" not in agent["content"]
        and "## Summary" in agent["content"]
    )
    assert "Perfect! Now I have a c" not in agent["content"]  # a list-shaped tool result
    assert agent["room"] == "codemie-code"
    assert agent["metadata"]["session_id"] == "e9fb405b-169f-40eb-9396-7e75076f045d"

    again = mine(daemon, "real-cc", DATA / "claude-code")
    assert (again["lines_read"], again["stored"]) == (0, 0)


def test_real_codex_rollouts(daemon):
    report = mine(daemon, "real-codex", DATA / "codex")
    assert report["by_format"] == {"codex": 2} and report["bad_lines"] == 0
    assert (report["exchanges"], report["stored"]) == (5, 5)
    got = drawers(daemon, "real-codex")
    prompts = by_prompt(got)
    assert all(p.startswith("User: ") for p in prompts), sorted(prompts)
    for d in got:
        for injected in ("AGENTS.md instructions", "<environment_context>", "<permissions"):
            assert injected not in d["content"]
        assert "Chunk ID:" not in d["content"]  # function output
        assert "gAAAAAB" not in d["content"]  # encrypted reasoning

    # Each prompt once, though the rollout records it twice (response_item, event_msg).
    show = prompts["User: show tools"]
    assert show["content"].count("show tools") == 1
    assert "Available tool groups in this session:" in show["content"]
    assert "[tool exec_command:" in show["content"]
    update = next(d for p, d in prompts.items() if "context compart to 90" in p)
    assert "Implemented the default context compaction setting" in update["content"]
    assert "[tool apply_patch: *** Begin Patch" in update["content"]  # a custom_tool_call
    assert update["room"] == "codemie-code"
    assert update["tags"] == ["branch:feat/codex-agent-plugin"]
    assert update["metadata"]["session_id"] == "019e1625-789d-76c0-80ab-3724b5ddb799"

    # A Desktop rollout that records prompts only as event_msg user_message.
    desktop = [d for d in got if d["room"] == "naya"]
    assert len(desktop) == 3
    demo = next(d for d in desktop if "draft demo scenario" in d["content"])
    assert "The transcript clearly assigns User to draft the demo" in demo["content"]

    again = mine(daemon, "real-codex", DATA / "codex")
    assert (again["lines_read"], again["stored"]) == (0, 0)
