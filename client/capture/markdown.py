"""Markdown and text notes (a project's ``docs/``, ADRs, a CHANGELOG), split at headings.

Each section (a heading and the text up to the next heading) is a drawer, with its
heading path (``Guide > Install > Linux``) in the metadata; a section longer than the
daemon's text bound is split at paragraph boundaries (a single paragraph longer than that
is cut at the bound). Headings inside fenced code blocks are text, not headings. The room
is the folder the file is in; the id is the file's path, the heading path and a hash of
the text, so an unchanged section keeps its id and an edited one becomes a new drawer."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

from trusty_memory.client.capture.exchanges import Exchange, bounded, drawer_id, room_of

KIND = "markdown"
SUFFIXES = (".md", ".markdown", ".mdx", ".txt", ".rst")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _sections(text: str) -> Iterator[tuple[list[str], str]]:
    path: list[tuple[int, str]] = []
    lines: list[str] = []
    fence = False
    heading: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        match = None if fence else _HEADING.match(line)
        if match:
            if "".join(lines).strip():
                yield heading, "\n".join(lines).strip()
            level = len(match.group(1))
            path = [(lv, h) for lv, h in path if lv < level] + [(level, match.group(2)[:200])]
            heading = [h for _, h in path]
            lines = [line]
        else:
            lines.append(line)
    if "".join(lines).strip():
        yield heading, "\n".join(lines).strip()


def _chunks(section: str, limit: int) -> Iterator[str]:
    """``section`` in pieces of at most ``limit`` bytes, split between paragraphs."""
    if len(section.encode()) <= limit:
        yield section
        return
    piece = ""
    for para in re.split(r"\n\s*\n", section):
        joined = f"{piece}\n\n{para}" if piece else para
        if len(joined.encode()) <= limit:
            piece = joined
            continue
        if piece:
            yield piece
        piece, _ = bounded(para, limit)
    if piece:
        yield piece


def exchanges(text: str, source: str, limit: int, when: str | None) -> Iterator[Exchange]:
    from pathlib import PurePath

    room = room_of(str(PurePath(source).parent))
    for heading, section in _sections(text):
        for part, chunk in enumerate(_chunks(section, limit)):
            digest = hashlib.sha256(chunk.encode()).hexdigest()
            yield Exchange(
                key=drawer_id(KIND, source, "\x1e".join(heading), digest),
                content=chunk,
                created_at=when,
                room=room,
                metadata={
                    "source": KIND,
                    "source_file": source,
                    "heading_path": " > ".join(heading),
                    "part": part,
                },
            )
