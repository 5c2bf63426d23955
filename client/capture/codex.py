"""Codex CLI session files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``. ``session_meta`` gives the session's
``id``, ``cwd`` and ``git.branch``; ``response_item`` lines whose payload is a
``message`` carry ``role`` (``user``/``assistant``) and ``content`` blocks
(``input_text``/``output_text``). ``function_call`` payloads become one tool line; their
outputs, reasoning and the environment/instructions messages Codex injects as ``user``
(they start with ``<environment_context>``, ``<user_instructions>`` or ``# AGENTS.md``)
are not kept, nor a ``!`` shell command's record (``<user_shell_command>``, its output).

A prompt is recorded twice, as a ``response_item`` message and as an ``event_msg``
``user_message``, one after the other; some rollouts hold only the second (seen in a
Codex Desktop session, 0.128). Either opens an exchange, and the copy that follows at once
(same text, no reply between) is not a second prompt. ``custom_tool_call`` (``apply_patch``)
is a tool call like ``function_call``; ``event_msg`` ``agent_message`` repeats the
assistant's ``response_item`` text and is not read.

A run can end between a prompt's two records (a hook mines while Codex writes): the
prompt is stored as an exchange of its own, and the progress kept for the file says so
(``resume_state``), so the run that reads on knows the copy that comes first for what it
is (``resume``) and does not store the prompt a second time.
"""

from __future__ import annotations

import hashlib
import json
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
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<user_shell_command>")


# Tool calls kept as one line each, and the payload field holding their input.
_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}


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
        # A prompt already stored without a reply: its first record was the file's last
        # line at the previous run, and its copy may open this one.
        self.stored_prompt = ""
        self.last_prompt_only = ""  # the same, for the exchange ``finish`` just returned

    def resume(self, saved: dict[str, Any]) -> None:
        """Continue from the progress a previous run left (see the module doc)."""
        value = saved.get("codex_prompt")
        self.stored_prompt = value if isinstance(value, str) else ""

    def resume_state(self) -> dict[str, Any]:
        """What the next run needs beside the offset: the prompt stored without a reply
        at the end of the file, if that is how it ended."""
        pending = self.last_prompt_only or self.stored_prompt  # the latter: nothing read since
        return {"codex_prompt": pending} if pending else {}

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
                done = self._prompt(obj, end, texts)
            elif role == "assistant" and texts:
                self._start(obj, end)
                self.open["assistant"].extend(texts)  # type: ignore[index]
        elif kind == "event_msg" and ptype == "user_message":
            text = str_field(payload, "message")
            done = self._prompt(obj, end, [text] if text and text.strip() else [])
        elif kind == "response_item" and ptype in _CALLS and self.open is not None:
            args = payload.get(_CALLS[ptype])  # type: ignore[union-attr]
            self.open["assistant"].append(tool_line(payload.get("name"), args))  # type: ignore[union-attr]
        if self.open is not None:
            self.open["end"], self.open["digest"] = end, digest
        return done

    def _prompt(self, obj: object, end: int, texts: list[str]) -> Exchange | None:
        """A person's message: the previous exchange is done and this one opens, unless
        it is the second record of the prompt just opened."""
        texts = [t for t in texts if not t.lstrip().startswith(_INJECTED)]
        if not texts:
            return None
        ex = self.open
        stripped = [t.strip() for t in texts]
        if (
            ex
            and not ex["assistant"]
            and [t.strip() for t in ex["user"][-len(texts) :]] == stripped
        ):
            return None
        if ex is None and self.stored_prompt and self.stored_prompt == _prompt_key(stripped):
            self.stored_prompt = ""
            return None  # the copy of the prompt the previous run stored
        done = self.finish()
        self._start(obj, end)
        self.open["user"].extend(texts)  # type: ignore[index]
        return done

    def _start(self, obj: object, end: int) -> None:
        self.stored_prompt = ""
        if self.open is None:
            self.open = {"at": str_field(obj, "timestamp"), "pos": end, "user": [], "assistant": []}

    def finish(self) -> Exchange | None:
        ex, self.open = self.open, None
        self.last_prompt_only = ""
        if ex is None or not (ex["user"] or ex["assistant"]):
            return None
        if not ex["assistant"]:
            self.last_prompt_only = _prompt_key([t.strip() for t in ex["user"]])
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


def _prompt_key(stripped: list[str]) -> str:
    """A prompt's texts as a short key for the progress store (no prompt text kept there)."""
    return hashlib.sha256(json.dumps(stripped).encode()).hexdigest()[:32]
