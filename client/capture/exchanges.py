"""What every source turns into: an ``Exchange`` (one drawer's worth), plus the small,
defensive helpers the parsers share. Sources are untrusted files, so every field is read
through ``text_of``/``str_field`` rather than indexed: a wrong type is a missing value,
never an exception."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

# All capture ids live under one namespace, so a mined drawer's id never collides with a
# ``remember``'s random uuid4 and the same source always gives the same id.
NAMESPACE = uuid.UUID("6d1f4c2a-9b3e-5a7d-8c61-2e4f0b9a7c35")
# A tool call is kept as one line saying what ran; its input is cut here.
TOOL_SUMMARY_CHARS = 160
_ROOM_CHARS = re.compile(r"[^A-Za-z0-9._ -]+")


def drawer_id(*parts: str) -> str:
    """The drawer id of a source position: the same parts give the same UUID, always."""
    return str(uuid.uuid5(NAMESPACE, "\x1f".join(parts)))


@dataclass
class Exchange:
    """One drawer: a person's message and the assistant's reply, verbatim, with where it
    came from. ``end`` is the byte offset just past the last line it used (JSONL sources),
    so progress can be saved up to it once the daemon has acknowledged the drawer."""

    key: str
    content: str
    created_at: str | None
    room: str | None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    end: int = 0
    digest: str = ""
    # Where its first line starts, and the hash of the bytes before it (Claude Code): an
    # exchange the file's end left open is read again from there once the file grows.
    start: int = 0
    start_digest: str = ""


def str_field(obj: object, name: str) -> str | None:
    """``obj[name]`` when ``obj`` is a dict and the value a string; None otherwise."""
    if isinstance(obj, dict):
        value = obj.get(name)
        if isinstance(value, str):
            return value
    return None


def room_of(cwd: str | None) -> str | None:
    """A project's room: the last part of its folder, reduced to plain characters. A
    hostile ``cwd`` such as ``../../etc`` gives ``etc``: a room is a label, never a path."""
    if not cwd:
        return None
    parts = [p for p in PurePosixPath(cwd.replace("\\", "/")).parts if p not in ("/", ".", "..")]
    if not parts:
        return None
    name = _ROOM_CHARS.sub("", parts[-1]).strip()[:64]
    return name or None


def branch_tag(branch: str | None) -> list[str]:
    """The git branch as a tag (``branch:main``), bounded, or none."""
    if not branch or not branch.strip():
        return []
    return [f"branch:{branch.strip()[:100]}"]


def tool_line(name: object, payload: object) -> str:
    """What a tool call ran, in one short line: its name and the start of its input.
    Tool output is never kept (see ``claude_code``), only this."""
    import json

    tool = name if isinstance(name, str) else "tool"
    try:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = ""
    text = " ".join(text.split())
    if len(text) > TOOL_SUMMARY_CHARS:
        text = text[: TOOL_SUMMARY_CHARS - 1] + "…"
    return f"[tool {tool[:60]}: {text}]"


def bounded(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes (the daemon's text bound), and whether
    it was cut. Cut at a character boundary, with a marker saying so."""
    raw = text.encode()
    if len(raw) <= limit:
        return text, False
    marker = f"\n[… {len(raw) - limit} more bytes not kept]"
    keep = raw[: max(0, limit - len(marker.encode()))].decode(errors="ignore")
    return keep + marker, True


def export_exchange(
    kind: str, cid: str, group: dict[str, Any], title: str, source: str
) -> Exchange:
    """One exchange of a chat export (ChatGPT's or Claude.ai's): ``group`` holds its first
    message's ``id`` and time (``at``), the ``user`` and ``assistant`` texts, and the
    message ``ids``; the conversation id and title go to metadata."""
    parts = []
    if group["user"]:
        parts.append("User: " + "\n\n".join(group["user"]))
    if group["assistant"]:
        parts.append("Assistant: " + "\n\n".join(group["assistant"]))
    return Exchange(
        key=drawer_id(kind, cid, group["id"]),
        content="\n\n".join(parts),
        created_at=group["at"],
        room=None,
        metadata={
            "source": kind,
            "session_id": cid,
            "title": title,
            "source_file": source,
            "message_uuids": group["ids"][:64],
        },
    )
