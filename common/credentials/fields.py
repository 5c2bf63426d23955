"""Every string of a write, as ``[privacy] secrets`` asks: redacted, refused, or kept.

A credential reaches a palace in any string a person or an agent can give it, not only in
a note's text: a room (``--room "GITHUB_TOKEN=ghp_..."``), a palace's description, a
metadata value whose key names it (``{"aws_secret_access_key": "wJalr..."}``, with no
prefix to know it by), a metadata key, an id. So every actor that keeps a string asks this
module first: the palace worker for drawers, rooms, tags, metadata and facts
(``workers/secrets_guard.py``), the broker for a palace's name and description
(``common/palace_dir.create``), and ``scrub`` for what older versions kept.

Three kinds of string, three answers:

* **text** (a note, a room, a tag, a description, a fact): each secret becomes its marker;
  with ``refuse`` the write fails naming the field, the kind and where.
* **a metadata tree**: keys are texts; a string value is read as the value of its key, so a
  key that names a secret (``password``, ``aws_secret_access_key``) makes its value one.
* **an identifier** (a palace name, a drawer id): a marker is no name a caller could use
  again, so one that holds a secret is refused in both ``redact`` and ``refuse`` modes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trusty_memory.common import protocol as p
from trusty_memory.common.credentials import redactor as r

# (where, text, name it is the value of) -> the text to keep, or None when it held nothing.
Replace = Callable[[str, str, str | None], str | None]


def map_tree(replace: Replace, where: str, value: Any, name: str | None = None) -> Any:
    """``value`` (JSON: dicts, lists, strings, numbers) with each string through
    ``replace``: a key as a text, a string as the value of the key above it (lists pass
    their key down). Nesting is bounded before a value gets here (``[limits]``), so the
    recursion is too."""
    if isinstance(value, str):
        new = replace(where, value, name)
        return value if new is None else new
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            # A key's own place says "a key of", never the key: it may be the secret.
            new_key = replace(f"a key of {where}", key, None) if isinstance(key, str) else None
            kept = key if new_key is None else new_key
            out[kept] = map_tree(
                replace, f"{where}.{kept}", item, key if isinstance(key, str) else None
            )
        return out
    if isinstance(value, list):
        return [map_tree(replace, f"{where}[{i}]", item, name) for i, item in enumerate(value)]
    return value


class FieldGuard:
    """One write request's strings under one mode; ``count`` and ``secrets`` are what it
    replaced (the values, to drop their words from context; never stored)."""

    def __init__(self, mode: str, redactor: Callable[[], r.Redactor], method: str) -> None:
        self.mode = mode
        self._redactor = redactor  # read lazily: a write with no string to check reads no key
        self.method = method
        self.count = 0
        self.secrets: list[str] = []

    def text(self, where: str, value: str, name: str | None = None) -> str:
        new = self._replace(where, value, name)
        return value if new is None else new

    def maybe(self, where: str, value: str | None, name: str | None = None) -> str | None:
        return self.text(where, value, name) if isinstance(value, str) else value

    def tags(self, where: str, values: list[str] | None) -> list[str] | None:
        if values is None:
            return None
        return [self.text(f"{where}[{i}]", t) if isinstance(t, str) else t
                for i, t in enumerate(values)]  # fmt: skip

    def tree(self, where: str, value: Any) -> Any:
        """A metadata value with its keys and strings redacted (see the module doc)."""
        return map_tree(self._replace, where, value)

    def identifier(
        self, where: str, value: str | None, code: p.ErrorCode = p.ErrorCode.INVALID_PARAMS
    ) -> None:
        """Refuse an id or a name that holds a secret (unless the mode is ``keep``)."""
        if self.mode == r.KEEP or not isinstance(value, str):
            return
        done = self._redactor().redact(value)
        if done.count:
            raise p.TrustyError(
                code,
                f"{self.method}: '{where}' holds {_many(done.count)}"
                f" ({r.where(value, done.found)}); a name or id is kept as given, so it"
                " cannot be redacted: choose another",
            )

    def _replace(self, where: str, value: str, name: str | None) -> str | None:
        if self.mode == r.KEEP:
            return None
        done = self._redactor().redact(value, name)
        if not done.count:
            return None
        if self.mode == r.REFUSE:
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS,
                f"{self.method}: '{where}' holds {_many(done.count)}"
                f" ({r.where(value, done.found)}); nothing was stored"
                ' ([privacy] secrets = "refuse")',
            )
        self.count += done.count
        self.secrets += done.secrets
        return done.text


def _many(count: int) -> str:
    return "a secret" if count == 1 else f"{count} secrets"
