"""A Claude.ai data export's ``conversations.json``: a list of conversations
(``uuid``, ``name``, ``chat_messages``), each message with ``uuid``, ``sender``
(``human``/``assistant``), ``created_at`` and ``text`` (newer exports also ``content``
blocks of ``type: text``). Messages are in order; a human message opens an exchange."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trusty_memory.client.capture.exchanges import Exchange, export_exchange, str_field

KIND = "claude-ai"


def looks_like(data: object) -> bool:
    return isinstance(data, list) and any(
        isinstance(c, dict) and "chat_messages" in c for c in data[:5]
    )


def _text(message: dict[str, Any]) -> str:
    blocks = message.get("content")
    if isinstance(blocks, list):
        texts = [
            t for b in blocks if str_field(b, "type") == "text" and (t := str_field(b, "text"))
        ]
        if texts:
            return "\n\n".join(texts)
    return str_field(message, "text") or ""


def exchanges(data: object, source: str) -> Iterator[Exchange]:
    for conv in data if isinstance(data, list) else []:
        messages = conv.get("chat_messages") if isinstance(conv, dict) else None
        if not isinstance(messages, list):
            continue
        cid = (str_field(conv, "uuid") or "")[:100]
        title = (str_field(conv, "name") or "")[:200]
        groups: list[dict[str, Any]] = []
        for m in messages:
            if not isinstance(m, dict) or not (text := _text(m)).strip():
                continue
            role = {"human": "user", "assistant": "assistant"}.get(str_field(m, "sender") or "")
            if role is None:
                continue
            if role == "user" or not groups:
                groups.append(
                    {
                        "id": str_field(m, "uuid") or "",
                        "at": str_field(m, "created_at"),
                        "user": [],
                        "assistant": [],
                        "ids": [],
                    }
                )
            groups[-1][role].append(text)
            groups[-1]["ids"].append((str_field(m, "uuid") or "")[:64])
        for g in groups:
            yield export_exchange(KIND, cid, g, title, source)
