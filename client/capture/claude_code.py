"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Each line is a JSON object; ``type`` ``user`` and ``assistant`` lines carry a ``message``
whose ``content`` is a string or a list of blocks (``text``, ``thinking``, ``tool_use``,
``tool_result``); every such line has ``uuid``, ``timestamp``, ``sessionId``, ``cwd``,
``gitBranch`` and ``isSidechain``. Other lines (``summary``, ``system``, snapshots) carry
no exchange and are read past.

What a drawer keeps: a person's prompt (a ``user`` line with text, not one that only
returns tool results) and everything the assistant said until the next prompt, verbatim.
Thinking is dropped (the model's scratch work, not a decision; signed, bulky); a tool call
becomes one line (``[tool Bash: {"command": "pytest -q"}]``) so a drawer says what ran;
tool results are dropped: they hold logs, file bodies and secrets, bulk a later question
rarely needs. Measured on five real Claude Code 2.1 sessions (15 MB, 9,234 lines; the
public ones ``tests/capture/data`` is trimmed from): of the characters in ``message``
content, tool results are 69 %, tool inputs 23 %, thinking 2.4 %, and the person's and
the assistant's words 5.6 %; keeping tool output would make drawers about 13 times
larger, mostly of file bodies and command output. (Each result is stored twice in the
file: ``toolUseResult`` repeats it beside the message, unread here.) Sub-agent lines
(``isSidechain: true``, and ``agent-*.jsonl`` files) are kept as their own drawers tagged
``sidechain``: their findings are often what the main thread acted on.

What Claude Code writes into ``user`` lines itself is not a person's prompt, and is
neither a drawer nor the start of one (each seen in real transcripts, versions 2.0-2.1):
lines marked ``isMeta`` (a skill's or custom command's expanded body, hook context),
``isCompactSummary`` (the summary a compaction feeds the next context: a copy of what was
mined already), the compaction agent's own file (``agentId`` ``acompact-*``), the
``Warmup`` sub-agent run that 2.0 starts with each session, and text blocks that are
only its markup: ``[Request interrupted by user]``, ``<local-command-stdout>`` and the
other local-command and shell output wrappers, ``<task-notification>``,
``<system-reminder>``. A slash command (``<command-name>/x</command-name>`` with
``<command-args>``) is kept as the person typed it, ``/x ARGS``, when it has arguments;
without them (``/mcp``, ``/clear``) it asks nothing a later session needs.
"""

from __future__ import annotations

import re
from typing import Any

from trusty_memory.client.capture.exchanges import (
    Exchange,
    branch_tag,
    drawer_id,
    room_of,
    str_field,
    tool_line,
)

KIND = "claude-code"


# Text blocks of a ``user`` line that Claude Code wrote, not the person.
_GENERATED = (
    "[Request interrupted by user",
    "<local-command-caveat>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<system-reminder>",
)
_COMMAND_NAME = re.compile(r"<command-name>\s*([^<]*?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
# The sub-agent run Claude Code 2.0 starts at each session to warm its cache.
_WARMUP = "Warmup"


def looks_like(obj: object) -> bool:
    return isinstance(obj, dict) and (
        "sessionId" in obj or obj.get("type") in ("summary", "file-history-snapshot")
    )


def _blocks(message: object) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def generated_line(obj: dict[str, Any]) -> bool:
    """Whether a whole line is Claude Code's own doing (see the module's docstring)."""
    agent = str_field(obj, "agentId") or ""
    return (
        obj.get("isMeta") is True
        or obj.get("isCompactSummary") is True
        or obj.get("isVisibleInTranscriptOnly") is True
        or agent.startswith("acompact")
    )


def person_text(text: str) -> str | None:
    """A user text block as the person's words: None for Claude Code's markup; a slash
    command as ``/name args`` (None without arguments); anything else as it is."""
    head = text.lstrip()
    if head.startswith(_GENERATED):
        return None
    if "<command-name>" in head and (name := _COMMAND_NAME.search(head)):
        args = _COMMAND_ARGS.search(head)
        rest = args.group(1).strip() if args else ""
        return f"{name.group(1)} {rest}" if rest else None
    return text


def _said(blocks: list[Any], keep_tools: bool) -> list[str]:
    parts: list[str] = []
    for block in blocks:
        kind = str_field(block, "type")
        if kind == "text":
            text = str_field(block, "text")
            if text and not keep_tools:
                text = person_text(text)
            if text and text.strip():
                parts.append(text)
        elif kind == "tool_use" and keep_tools:
            parts.append(tool_line(block.get("name"), block.get("input")))
    return parts


class Parser:
    """Feeds on one transcript's lines in order, yields exchanges as they complete.

    An exchange is complete when the next prompt starts; the one still open at the end of
    what was read is given out by ``finish`` (an agent may never write another line). Its
    id is its first line's uuid, and it carries where its first line starts (``start``),
    so that ``mine`` can read it again whole once more reply lines are appended (a hook
    that ran mid-turn, before a compaction) and update that drawer: one exchange, one
    drawer."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.open: dict[str, Any] | None = None
        self.before = (0, "")  # offset and hash just past the last line fed

    def start_at(self, offset: int, digest: str) -> None:
        """Lines fed next start at ``offset``, after bytes whose hash is ``digest``."""
        self.before = (offset, digest)

    def feed(self, obj: object, end: int, digest: str) -> Exchange | None:
        before, self.before = self.before, (end, digest)
        if (
            not isinstance(obj, dict)
            or obj.get("type") not in ("user", "assistant")
            or generated_line(obj)
        ):
            if self.open is not None:
                self.open["end"], self.open["digest"] = end, digest
            return None
        blocks = _blocks(obj.get("message"))
        said = _said(blocks, keep_tools=obj.get("type") == "assistant")
        is_prompt = obj.get("type") == "user" and bool(said)
        done = self.finish() if is_prompt else None
        if self.open is None:
            self.open = {"first": obj, "user": [], "assistant": [], "uuids": [], "at": before}
        role = "user" if obj.get("type") == "user" else "assistant"
        self.open[role].extend(said)
        uid = str_field(obj, "uuid")
        if uid and len(self.open["uuids"]) < 64:
            self.open["uuids"].append(uid[:64])
        self.open["end"], self.open["digest"] = end, digest
        return done

    def finish(self) -> Exchange | None:
        ex, self.open = self.open, None
        if ex is None or not (ex["user"] or ex["assistant"]):
            return None
        first = ex["first"]
        if first.get("isSidechain") is True and ex["user"] == [_WARMUP]:
            return None
        session = str_field(first, "sessionId") or ""
        key = str_field(first, "uuid") or f"{ex['end']}"
        parts = []
        if ex["user"]:
            parts.append("User: " + "\n\n".join(ex["user"]))
        if ex["assistant"]:
            parts.append("Assistant: " + "\n\n".join(ex["assistant"]))
        tags = branch_tag(str_field(first, "gitBranch"))
        if first.get("isSidechain") is True:
            tags.append("sidechain")
        return Exchange(
            key=drawer_id(KIND, session, key),
            content="\n\n".join(parts),
            created_at=str_field(first, "timestamp"),
            room=room_of(str_field(first, "cwd")),
            tags=tags,
            metadata={
                "source": KIND,
                "session_id": session[:100],
                "source_file": self.source,
                "message_uuids": ex["uuids"],
            },
            end=ex["end"],
            digest=ex["digest"],
            start=ex["at"][0],
            start_digest=ex["at"][1],
        )
