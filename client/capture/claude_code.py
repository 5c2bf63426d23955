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
rarely needs (a judgement, not yet measured on real transcripts: none were at hand). Sub-agent lines
(``isSidechain: true``, and ``agent-*.jsonl`` files) are kept as their own drawers tagged
``sidechain``: their findings are often what the main thread acted on.
"""

from __future__ import annotations

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


def looks_like(obj: object) -> bool:
    return isinstance(obj, dict) and (
        "sessionId" in obj or obj.get("type") in ("summary", "file-history-snapshot")
    )


def _blocks(message: object) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _said(blocks: list[Any], keep_tools: bool) -> list[str]:
    parts: list[str] = []
    for block in blocks:
        kind = str_field(block, "type")
        if kind == "text":
            text = str_field(block, "text")
            if text and text.strip():
                parts.append(text)
        elif kind == "tool_use" and keep_tools:
            parts.append(tool_line(block.get("name"), block.get("input")))
    return parts


class Parser:
    """Feeds on one transcript's lines in order, yields exchanges as they complete.

    An exchange is complete when the next prompt starts; the one still open at the end of
    what was read is given out by ``finish`` (an agent may never write another line). Its
    id is its first line's uuid, so a later read that continues it (more reply lines
    appended) makes a second drawer keyed by that continuation's first line: nothing is
    lost and nothing is stored twice."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.open: dict[str, Any] | None = None

    def feed(self, obj: object, end: int, digest: str) -> Exchange | None:
        if not isinstance(obj, dict) or obj.get("type") not in ("user", "assistant"):
            if self.open is not None:
                self.open["end"], self.open["digest"] = end, digest
            return None
        blocks = _blocks(obj.get("message"))
        is_prompt = obj.get("type") == "user" and any(
            str_field(b, "type") == "text" for b in blocks
        )
        done = self.finish() if is_prompt else None
        said = _said(blocks, keep_tools=obj.get("type") == "assistant")
        if self.open is None:
            self.open = {"first": obj, "user": [], "assistant": [], "uuids": []}
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
        )
