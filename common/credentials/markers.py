"""The marker a redacted secret leaves behind: ``[secret:KIND #FINGERPRINT]``.

``KIND`` names the format (``aws-access-key``, ``url-password``: ``rules.py``);
``FINGERPRINT`` is six hex digits of a keyed hash of the secret (``redactor.py``), so one
secret always leaves one marker and a note can be found again by it, while the secret
cannot be worked back from it. Standard library only: the web page and the CLI import
this, and neither needs the detector.
"""

from __future__ import annotations

import re

PREFIX = "[secret:"
FINGERPRINT_HEX = 6
MARKER = re.compile(r"\[secret:([a-z0-9][a-z0-9-]{0,40}) #([0-9a-f]{6})\]")


def marker(kind: str, fingerprint: str) -> str:
    """The text that takes a secret's place."""
    return f"{PREFIX}{kind} #{fingerprint[:FINGERPRINT_HEX]}]"


def spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds markers already (a redacted text redacts to itself)."""
    if PREFIX not in text:
        return []
    return [m.span() for m in MARKER.finditer(text)]


def count(text: str | None) -> int:
    """How many secrets were redacted out of ``text``."""
    if not text or PREFIX not in text:
        return 0
    return sum(1 for _ in MARKER.finditer(text))


def split(text: str) -> list[tuple[str, str | None]]:
    """``text`` as ``(piece, kind)`` runs: ``kind`` is None for plain text and the marker's
    kind for a marker (the web page draws those apart)."""
    out: list[tuple[str, str | None]] = []
    at = 0
    for m in MARKER.finditer(text):
        if m.start() > at:
            out.append((text[at : m.start()], None))
        out.append((m.group(0), m.group(1)))
        at = m.end()
    if at < len(text):
        out.append((text[at:], None))
    return out
