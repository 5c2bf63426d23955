"""The JSON lines a palace is exported to and imported from (``export.py``, ``bulk.py``).

The file format, one JSON object per line (``type`` says which)::

    {"type": "header", "format": "trusty-memory/1", "palace": "...", "dim": 384}   optional
    {"type": "drawer", "drawer_id": "<uuid>", "content": "...", "room": "General",
     "tags": [], "importance": 0.5, "created_at": "2026-01-01T00:00:00Z", "hits": 0,
     "metadata": {...}, "vector": "<base64 float32>" | [384 numbers]}    vector optional
     (only "content" is required: a file written by hand or converted from elsewhere may
     leave out "type" and "drawer_id" too; a drawer without an id gets one derived from
     its text, room and metadata, ``derived_drawer_id``, so importing it again skips what
     is in, and a line that repeats an earlier one is one drawer)
     (plus "own_vector", the same, beside a vector the palace mixed with its episode's
     context: the drawer's own text's vector, which the dreamer compares; and "context",
     the words of its episode predecessor that deep recall's BM25 reads, or null. Export
     writes it on every drawer, so an import stores exactly those words; a line without
     it gets them by the palace's own rule, as a remember in that order would)
    {"type": "triple", "subject": "...", "predicate": "...", "object": "...",
     "valid_from": "...", "valid_to": null, "confidence": 1.0, "provenance": null}
"""

from __future__ import annotations

from typing import Any

import msgspec

FORMAT = "trusty-memory/1"
DIM = 384  # the model's dimension: a header's ``dim``, the length of a line's vector


class HeaderLine(msgspec.Struct, tag="header", tag_field="type", kw_only=True):
    format: str | None = None
    palace: str | None = None
    dim: int | None = None


class DrawerFields(msgspec.Struct, kw_only=True):
    """A drawer's line; ``DrawerLine`` when it says ``"type": "drawer"``, and read as this
    when it says no type at all (a file written by hand)."""

    drawer_id: str | None = None  # None: ``derived_drawer_id``
    content: str
    room: str | None = None
    tags: list[str] = []
    importance: float = 0.5
    created_at: str | None = None
    hits: int = 0
    metadata: dict[str, Any] | None = None
    # Bytes decode from (and encode to) base64 in JSON.
    vector: list[float] | bytes | None = None
    own_vector: list[float] | bytes | None = None
    # Written on every exported drawer (null: none), so an import keeps exactly what was
    # stored; a line without it gets the words by the palace's rule.
    context: str | msgspec.UnsetType | None = msgspec.UNSET


class DrawerLine(DrawerFields, tag="drawer", tag_field="type", kw_only=True):
    pass


class TripleLine(msgspec.Struct, tag="triple", tag_field="type", kw_only=True):
    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None = None
    confidence: float = 1.0
    provenance: str | None = None


Line = HeaderLine | DrawerLine | TripleLine
