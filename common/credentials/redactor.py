"""A text with every credential replaced by its marker, and the home's key that names them.

The marker's fingerprint is the first six hex digits of HMAC-SHA256 over the secret, keyed
with the home's ``redaction.key`` (32 random bytes, written once, 0600). Keyed, so that a
fingerprint in a drawer, an export or a screenshot cannot be checked against guessed
secrets (an unkeyed hash of a short password can); stable, so that the same secret always
leaves the same marker and a later note or question holding that secret finds the notes
that held it. Another home (a remote worker's) has its own key and so its own markers.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from trusty_memory.common import protocol as p
from trusty_memory.common.credentials import detector, markers
from trusty_memory.common.credentials.detector import Found

KEY_FILE = "redaction.key"
KEY_BYTES = 32

# ``[privacy] secrets``: what a write holding a credential gets.
REDACT = "redact"  # each secret becomes its marker (the default)
REFUSE = "refuse"  # the write fails, naming the kind and where; nothing is stored
KEEP = "keep"  # stored as written
MODES = (REDACT, REFUSE, KEEP)


def home_key(home: Path) -> bytes:
    """The home's redaction key, made on first use: 32 random bytes as hex, 0600.

    Made under a temporary name and linked into place, so two palace workers starting at
    once agree on one key and neither ever reads half of one.
    """
    path = Path(home) / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(KEY_BYTES) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise p.TrustyError(
            p.ErrorCode.STORAGE_ERROR,
            f"{path} is not a redaction key ({KEY_BYTES * 2} hex digits): restore it from a"
            " backup, or remove it to make a new one (markers written with the old key will"
            " no longer match the same secrets)",
        )
    return key


@dataclass
class Redacted:
    """A text with its secrets replaced; ``found`` are their places in the original."""

    text: str
    found: list[Found] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # the values, never stored

    @property
    def count(self) -> int:
        return len(self.found)


class Redactor:
    """Find and replace credentials with one home's key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def fingerprint(self, secret: str) -> str:
        digest = hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return digest.hexdigest()[: markers.FINGERPRINT_HEX]

    def redact(self, text: str, name: str | None = None) -> Redacted:
        """``text`` with its secrets replaced. ``name``: what ``text`` is the value of (a
        triple's predicate over its object), read as ``name=text``, so that ``(db,
        password, Zq8v...)`` is a password though no ``=`` is in sight."""
        if name:
            found = _found_as_value(_NAME_CHARS.sub("_", name.strip()), text)
        else:
            found = detector.find(text)
        if not found:
            return Redacted(text)
        pieces, at, values = [], 0, []
        for f in found:
            value = text[f.start : f.end]
            values.append(value)
            pieces.append(text[at : f.start])
            pieces.append(markers.marker(f.kind, self.fingerprint(value)))
            at = f.end
        pieces.append(text[at:])
        return Redacted("".join(pieces), found, values)


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]+")


def _found_as_value(name: str, value: str) -> list[Found]:
    """The secrets of ``value`` read as the value of ``name`` (positions in ``value``)."""
    shift = len(name) + 1
    found = detector.find(f"{name}={value}") if name else detector.find(value)
    if not name:
        return found
    return [Found(f.kind, max(0, f.start - shift), f.end - shift) for f in found if f.end > shift]


def where(text: str, found: list[Found]) -> str:
    """Where each secret is, for an error message: ``aws-access-key at characters 12-31``
    (1-based, inclusive; with the line when the text has several). Never the secret."""
    parts = []
    for f in found:
        at = f"{f.kind} at characters {f.start + 1}-{f.end}"
        if "\n" in text:
            at += f" (line {text.count(chr(10), 0, f.start) + 1})"
        parts.append(at)
    return ", ".join(parts)
