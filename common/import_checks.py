"""The checks a drawer or a KG triple passes before it is imported, in one place for both
ends: ``trusty-memory import`` and ``mine`` run them on every line of a file before
sending a batch (``client/bulk.py``), and the palace's writer runs them again on every
item of ``palace_import`` before it writes anything (``workers/store/bulk.py``), so the
two agree on what a valid line is and a bad line is named before any of its batch is sent.

Each check raises ``TrustyError`` (``INVALID_PARAMS``) naming the field; a drawer that
passes comes back as a ``CheckedDrawer``, in the form it is stored.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from trusty_memory.common import names
from trusty_memory.common import protocol as p
from trusty_memory.common.messages import ImportTriple
from trusty_memory.common.values import (
    check_created_at,
    check_drawer_id,
    check_nonempty,
    check_tags,
    check_text,
    check_timestamp,
    check_unit_interval,
    invalid,
)

# A vector this close to unit length is stored byte for byte as given (so an export
# round-trips exactly); anything further off is normalised.
UNIT_TOLERANCE = 1e-4
HITS_LIMIT = 2**63  # SQLite's integers are signed 64-bit
# The namespace of the ids ``derived_drawer_id`` makes: fixed, so a line gets the same id
# on every run, machine and version.
DERIVED_ID_NAMESPACE = uuid.UUID("5d3c1f0e-8a41-4c2b-9e57-0b6f2a7d91c4")


@dataclass
class CheckedDrawer:
    """A drawer that passed every check, in the form it is stored."""

    id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    created_at: str
    hits: int
    metadata: str | None
    vector: bytes | None  # little-endian float32, unit length; None: embed ``content``
    own_vector: bytes | None = None  # the drawer's own, when ``vector`` is a context mix
    context: str | None = None  # its episode predecessor's words
    context_given: bool = False  # as an export wrote them; else the palace's rule sets them


@dataclass
class CheckedTriple:
    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None
    confidence: float
    provenance: str | None


def vector_from(value: object, dim: int) -> bytes:
    """A unit float32 vector as little-endian bytes, from raw bytes or a list of numbers.

    Raises ``INVALID_PARAMS`` naming the problem: wrong dimension, not finite, zero.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) != dim * 4:
            raise invalid(f"vector: expected {dim} float32 ({dim * 4} bytes), got {len(raw)}")
        arr = np.frombuffer(raw, dtype="<f4")
    elif isinstance(value, list):
        if len(value) != dim:
            raise invalid(f"vector: expected {dim} dimensions, got {len(value)}")
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
            raise invalid("vector: must be a list of numbers")
        arr = np.asarray(value, dtype="<f4")
        raw = arr.tobytes()
    else:
        raise invalid("vector: must be a list of numbers or base64 float32")
    if not np.isfinite(arr).all():
        raise invalid("vector: must be finite")
    norm = float(np.linalg.norm(arr.astype(np.float64)))
    if norm == 0.0:
        raise invalid("vector: must be non-zero")
    if abs(norm - 1.0) <= UNIT_TOLERANCE:
        return raw
    return (arr / np.float32(norm)).astype("<f4").tobytes()


def derived_drawer_id(content: str, room: str, metadata: str | None) -> str:
    """The id of an imported drawer whose line names none (a file someone wrote or
    converted): a UUID 5 of what makes two writes one drawer to ``memory_remember``'s
    exact-duplicate check, its text, room and metadata, as stored. So the same file
    imported again is skipped line by line, and a line that repeats an earlier one is the
    same drawer (skipped, as an id the palace holds)."""
    key = json.dumps([content, room, metadata], ensure_ascii=False)
    return str(uuid.uuid5(DERIVED_ID_NAMESPACE, key))


class DrawerInput(Protocol):
    """What ``check_drawer`` reads: a ``palace_import`` drawer, or the client's line of a
    file before its vectors are bytes (lists of numbers there: ``vector_from`` takes both)."""

    @property
    def drawer_id(self) -> str | None: ...
    @property
    def content(self) -> str: ...
    @property
    def room(self) -> str | None: ...
    @property
    def tags(self) -> list[str]: ...
    @property
    def importance(self) -> float: ...
    @property
    def created_at(self) -> str | None: ...
    @property
    def hits(self) -> int: ...
    @property
    def metadata(self) -> dict[str, Any] | None: ...
    @property
    def vector(self) -> object: ...
    @property
    def own_vector(self) -> object: ...
    @property
    def context(self) -> object: ...


def check_drawer(d: DrawerInput, dim: int, max_text_bytes: int) -> CheckedDrawer:
    """Every check ``palace_import`` makes on a drawer; raises ``TrustyError``. A drawer
    without an id gets ``derived_drawer_id``."""
    if isinstance(d.hits, bool) or not isinstance(d.hits, int) or d.hits < 0:
        raise invalid(f"hits: must be a non-negative integer, got {d.hits!r}")
    if d.hits >= HITS_LIMIT:
        raise invalid(f"hits: must be below 2**63, got {d.hits}")
    metadata = None
    if d.metadata is not None:
        metadata = msgspec.json.encode(d.metadata).decode()
    drawer_id = None if d.drawer_id is None else check_drawer_id(d.drawer_id)
    content = check_text(d.content, max_text_bytes, "content")
    room = names.normalize_room(d.room)
    return CheckedDrawer(
        id=drawer_id or derived_drawer_id(content, room, metadata),
        content=content,
        room=room,
        tags=check_tags(d.tags),
        importance=check_unit_interval(d.importance, "importance"),
        created_at=check_created_at(d.created_at),
        hits=d.hits,
        metadata=metadata,
        vector=None if d.vector is None else vector_from(d.vector, dim),
        own_vector=_own_vector(d, dim),
        context=None if d.context is msgspec.UNSET else _context(d.context, max_text_bytes),
        context_given=d.context is not msgspec.UNSET,
    )


def _context(value: object, max_text_bytes: int) -> str | None:
    """An exported drawer's context words: a string (empty means none), or None."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise invalid(f"context: must be a string or null, got {type(value).__name__}")
    return check_text(value, max_text_bytes, "context").strip() or None


def _own_vector(d: DrawerInput, dim: int) -> bytes | None:
    if d.own_vector is None:
        return None
    if d.vector is None:
        raise invalid("own_vector: only beside a vector (it is that vector's own text's)")
    try:
        return vector_from(d.own_vector, dim)
    except p.TrustyError as exc:
        raise invalid(f"own_{exc.message}") from None


def check_triple(t: ImportTriple) -> CheckedTriple:
    """Every check ``palace_import`` makes on a triple; raises ``TrustyError``."""
    valid_to = None if t.valid_to is None else check_timestamp(t.valid_to, "valid_to")
    return CheckedTriple(
        subject=check_nonempty(t.subject, "subject"),
        predicate=check_nonempty(t.predicate, "predicate"),
        object=check_nonempty(t.object, "object"),
        valid_from=check_timestamp(t.valid_from, "valid_from"),
        valid_to=valid_to,
        confidence=check_unit_interval(t.confidence, "confidence"),
        provenance=t.provenance,
    )
