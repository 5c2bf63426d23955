"""Codex CLI session files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``. ``session_meta`` gives the session's
``id``, ``cwd`` and ``git.branch``; ``response_item`` lines whose payload is a
``message`` carry ``role`` (``user``/``assistant``) and ``content`` blocks
(``input_text``/``output_text``). ``function_call`` payloads become one tool line; their
outputs, reasoning and the environment/instructions messages Codex injects as ``user``
(they start with ``<environment_context>`` or ``<user_instructions>``) are not kept.
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

KIND = "codex"
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md")


def looks_like(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("type") in ("session_meta", "response_item")


class Parser:
    """Same shape as the Claude Code parser: a prompt opens an exchange, the next closes
    it; the id is the session id and the opening line's timestamp and offset (Codex lines
    carry no uuid)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.session = ""
        self.cwd: str | None = None
        self.branch: str | None = None
        self.open: dict[str, Any] | None = None

    def feed(self, obj: object, end: int, digest: str) -> Exchange | None:
        payload = obj.get("payload") if isinstance(obj, dict) else None
        kind = str_field(obj, "type")
        if kind == "session_meta" and isinstance(payload, dict):
            self.session = (str_field(payload, "id") or "")[:100]
            self.cwd = str_field(payload, "cwd")
            self.branch = str_field(payload.get("git"), "branch")
        done = None
        ptype = str_field(payload, "type")
        if kind == "response_item" and ptype == "message":
            role = str_field(payload, "role")
            content = payload.get("content") if isinstance(payload, dict) else None
            texts = [
                t
                for b in (content if isinstance(content, list) else [])
                if (t := str_field(b, "text")) and t.strip()
            ]
            if role == "user":
                texts = [t for t in texts if not t.lstrip().startswith(_INJECTED)]
                if texts:
                    done = self.finish()
                    self._start(obj, end)
                    self.open["user"].extend(texts)  # type: ignore[index]
            elif role == "assistant" and texts:
                self._start(obj, end)
                self.open["assistant"].extend(texts)  # type: ignore[index]
        elif kind == "response_item" and ptype == "function_call" and self.open is not None:
            self.open["assistant"].append(
                tool_line(payload.get("name"), payload.get("arguments"))  # type: ignore[union-attr]
            )
        if self.open is not None:
            self.open["end"], self.open["digest"] = end, digest
        return done

    def _start(self, obj: object, end: int) -> None:
        if self.open is None:
            self.open = {"at": str_field(obj, "timestamp"), "pos": end, "user": [], "assistant": []}

    def finish(self) -> Exchange | None:
        ex, self.open = self.open, None
        if ex is None or not (ex["user"] or ex["assistant"]):
            return None
        parts = []
        if ex["user"]:
            parts.append("User: " + "\n\n".join(ex["user"]))
        if ex["assistant"]:
            parts.append("Assistant: " + "\n\n".join(ex["assistant"]))
        return Exchange(
            key=drawer_id(KIND, self.session, str(ex["at"]), str(ex["pos"])),
            content="\n\n".join(parts),
            created_at=ex["at"],
            room=room_of(self.cwd),
            tags=branch_tag(self.branch),
            metadata={"source": KIND, "session_id": self.session, "source_file": self.source},
            end=ex["end"],
            digest=ex["digest"],
        )
