"""Names that reach the file system or the contract: palace names and room names.

A palace name becomes a directory under ``$TRUSTY_MEMORY_HOME/palaces``, so it is checked
against a small safe alphabet before anything touches the disk: ``../x``, ``a/b``, empty
strings and NUL bytes never get near ``open()``.
"""

from __future__ import annotations

import re

from trusty_memory.common.protocol import ErrorCode, TrustyError

MAX_PALACE_NAME = 64
_PALACE_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")

# The contract's named rooms; anything else is kept verbatim as a custom room.
NAMED_ROOMS = (
    "Frontend",
    "Backend",
    "Testing",
    "Planning",
    "Documentation",
    "Research",
    "Configuration",
    "Meetings",
    "General",
)
_ROOMS_BY_LOWER = {room.lower(): room for room in NAMED_ROOMS}
DEFAULT_ROOM = "General"


def validate_palace_name(name: object) -> str:
    """Return ``name`` if it is a safe palace name, else raise ``INVALID_PALACE_NAME``."""
    if not isinstance(name, str):
        raise TrustyError(
            ErrorCode.INVALID_PALACE_NAME,
            f"invalid palace name: expected a string, got {type(name).__name__}",
        )
    if not name:
        raise TrustyError(ErrorCode.INVALID_PALACE_NAME, "invalid palace name: empty")
    if len(name) > MAX_PALACE_NAME:
        raise TrustyError(
            ErrorCode.INVALID_PALACE_NAME,
            f"invalid palace name: longer than {MAX_PALACE_NAME} characters",
        )
    if not _PALACE_RE.fullmatch(name):
        raise TrustyError(
            ErrorCode.INVALID_PALACE_NAME,
            f"invalid palace name {name!r}: use letters, digits, '-', '_' and '.', "
            "not starting with '.'",
        )
    return name


def normalize_room(room: str | None) -> str:
    """Named rooms match case-insensitively; empty or missing means ``General``. Outer
    whitespace never counts, so ``" Ops "`` and ``"Ops"`` are one custom room."""
    room = (room or "").strip()
    if not room:
        return DEFAULT_ROOM
    return _ROOMS_BY_LOWER.get(room.lower(), room)
