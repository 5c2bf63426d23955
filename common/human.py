"""How the command line and the web page say things to people: durations in words, text
cut to one line with a visible '…', records as aligned ``Key:  value`` lines (like
``kubectl describe``), scores to 4 decimals, and stored text made safe to show on a
terminal (:func:`visible`). ``--json`` never goes through here."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any


def duration(seconds: float) -> str:
    """``42 s``, ``9 min 18 s``, ``3 h 5 min``, ``2 d 4 h``: the two largest units."""
    s = max(0, round(seconds))
    days, s = divmod(s, 86_400)
    hours, s = divmod(s, 3_600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {s} s" if s else f"{minutes} min"
    return f"{s} s"


# What a terminal obeys instead of showing: the C0 controls (ESC starts OSC 52, which
# writes the clipboard, OSC 8 links, window titles, colours, ``ESC[2J``; ``\r`` and
# backspace overwrite what came before), DEL, the C1 controls (U+0080-U+009F: U+009B is
# CSI and U+009D OSC on terminals that take 8-bit controls), the bidi embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069: they reorder what is shown, as
# in "Trojan Source"), and lone surrogates (argv's undecodable bytes, which print would
# refuse). ``_ACTS_IN_LINES`` lets ``\n`` and ``\t`` through, for a text shown whole.
_BEYOND_C0 = r"\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ACTS_ONE_LINE = re.compile(rf"[\x00-\x1f{_BEYOND_C0}]")
_ACTS_IN_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Whitespace that only lays text out (newline, tab, the Unicode spaces), which a one-line
# listing makes one space; the whitespace controls (``\r``, form feed...) are shown.
_LAYOUT_SPACE = re.compile(r"[^\S\r\x0b\x0c\x1c-\x1f\x85]+")


def visible(text: str, lines: bool = False) -> str:
    """``text`` as a terminal should show it: every character it would obey instead
    (above) written as an escape, ``\\x1b``, ``\\r``, ``\\u202e``; the rest as it is.

    Stored text and arguments come from anyone who could write to a palace (an agent, a
    file it read); printed raw they could write the clipboard or hide a line. With
    ``lines`` a newline and a tab stay (a drawer's text shown whole keeps its layout);
    without, a one-line field cannot forge the lines below it. A backslash stays as it
    is (paths and regexes read as written), so the result is the same when applied
    again; ``--json`` is the exact form."""
    acts = _ACTS_IN_LINES if lines else _ACTS_ONE_LINE
    return acts.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clip(text: str, width: int) -> str:
    """``text`` on one line (runs of newlines, tabs and spaces made one space), its
    controls shown escaped (:func:`visible`), cut to ``width`` characters with '…' at the
    end when anything was cut. The cut counts the escaped form and never falls inside an
    escape: half of ``\\x1b`` would read as other text."""
    line = _one_line(text, width)
    if len(line) <= width:  # else cut for sure: an escape only makes it longer
        shown = visible(line)
        if len(shown) <= width:
            return shown
    kept: list[str] = []
    room = width - 1  # the '…'
    for char in line:  # stops within ``width`` characters, however long the text
        piece = visible(char)
        if len(piece) > room:
            break
        kept.append(piece)
        room -= len(piece)
    return "".join(kept).rstrip() + "…"


def _one_line(text: str, width: int) -> str:
    """``text`` with its layout whitespace made single spaces, stripped: the whole of it,
    or a start of it longer than ``width`` (a listing needs no more of a long drawer, and
    a list of fifty should not rework fifty whole texts)."""
    size = 4 * width + 16
    while True:
        line = _LAYOUT_SPACE.sub(" ", text[:size]).strip(" ")
        if len(line) > width or size >= len(text):
            return line
        size *= 4


def score(value: float | None) -> str:
    """A relevance score as every output gives it: 4 decimals."""
    return "-" if value is None else f"{value:.4f}"


def value(v: Any) -> str:
    """One field's value for people, on one line: a list as ``a, b``, nothing as ``-``, a
    mapping as ``k=v`` pairs; never a Python repr. Its text is :func:`visible` (a newline
    in a tag must not start a line that reads as another field)."""
    if v is None or v == "" or v == [] or v == {}:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple):
        return ", ".join(value(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{visible(str(k))}={_scalar(x)}" for k, x in v.items())
    return visible(str(v))


def _scalar(v: Any) -> str:
    return visible(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))


def describe(rows: Iterable[tuple[str, Any]]) -> str:
    """Aligned ``Key:  value`` lines, one per field."""
    rows = list(rows)
    width = max((len(key) for key, _ in rows), default=0) + 3  # ":" and two spaces
    return "\n".join(f"{key + ':':<{width}}{value(v)}" for key, v in rows)
