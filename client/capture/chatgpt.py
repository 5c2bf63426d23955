"""A ChatGPT export's ``conversations.json``: a list of conversations, each a ``mapping``
of node id to ``{message, parent, children}`` and a ``current_node``. The conversation a
person last saw is the path from ``current_node`` back to the root; branches left behind
by an edit or a regenerate are not on it and are not mined. A message has ``author.role``,
``create_time`` (epoch seconds) and ``content.parts`` (strings for text).

What the app does not show is not a person's words or a reply either, and is skipped: a
message whose ``metadata.is_visually_hidden_from_conversation`` is true (the system
prompt, custom instructions), an assistant message addressed to a tool (``recipient``
other than ``all``: a search query, a code run) and one on the ``analysis`` channel
(reasoning). Reasoning (``thoughts``, ``reasoning_recap``), code and tool output carry
no text ``parts`` and are skipped with it. There is no official description of the
export; these fields are checked against what independent public readers of real exports
agree on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from trusty_memory.client.capture.exchanges import Exchange, export_exchange, str_field

KIND = "chatgpt"
MAX_PATH = 100_000  # nodes walked back from current_node: a cycle ends here, not in a hang


def looks_like(data: object) -> bool:
    return isinstance(data, list) and any(isinstance(c, dict) and "mapping" in c for c in data[:5])


def _when(value: object) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
        return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")
    return None


def _path(conv: dict[str, Any]) -> list[dict[str, Any]]:
    mapping = conv.get("mapping")
    node = conv.get("current_node")
    if not isinstance(mapping, dict):
        return []
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node, str) and node not in seen and len(path) < MAX_PATH:
        seen.add(node)
        entry = mapping.get(node)
        if not isinstance(entry, dict):
            break
        path.append(entry)
        node = entry.get("parent")
    return path[::-1]


def _shown(message: dict[str, Any]) -> bool:
    """Whether the app shows ``message`` in the conversation (see the module's docstring)."""
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation") is True:
        return False
    if str_field(message, "channel") == "analysis":
        return False
    role = str_field(message.get("author"), "role")
    recipient = message.get("recipient")
    return not (role == "assistant" and isinstance(recipient, str) and recipient != "all")


def _text(message: dict[str, Any]) -> str:
    if not _shown(message):
        return ""
    content = message.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return ""
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip())


def exchanges(data: object, source: str) -> Iterator[Exchange]:
    """Each user message on the current path with the assistant text that follows it."""
    for conv in data if isinstance(data, list) else []:
        if not isinstance(conv, dict):
            continue
        cid = (str_field(conv, "conversation_id") or str_field(conv, "id") or "")[:100]
        title = (str_field(conv, "title") or "")[:200]
        open_: dict[str, Any] | None = None
        for entry in [*_path(conv), None]:
            message = entry.get("message") if isinstance(entry, dict) else None
            role = str_field(message.get("author"), "role") if isinstance(message, dict) else None
            text = _text(message) if isinstance(message, dict) else ""
            if entry is None or (role == "user" and text):
                if open_ and (open_["user"] or open_["assistant"]):
                    yield _exchange(open_, cid, title, source)
                open_ = None
            if entry is None or not text or role not in ("user", "assistant"):
                continue
            if open_ is None:
                open_ = {
                    "id": str_field(message, "id") or "",
                    "at": None,
                    "user": [],
                    "assistant": [],
                    "ids": [],
                }
            open_["at"] = open_["at"] or _when(message.get("create_time"))  # type: ignore[union-attr]
            open_[role].append(text)
            open_["ids"].append((str_field(message, "id") or "")[:64])


def _exchange(ex: dict[str, Any], cid: str, title: str, source: str) -> Exchange:
    return export_exchange(KIND, cid, ex, title, source)
