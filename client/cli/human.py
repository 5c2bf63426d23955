"""How the command line and the web page say things to people: durations in words, text
cut to one line with a visible '…', records as aligned ``Key:  value`` lines (like
``kubectl describe``), and scores to 4 decimals. ``--json`` never goes through here."""

from __future__ import annotations

import json
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


def clip(text: str, width: int) -> str:
    """``text`` on one line (runs of whitespace made one space), cut to ``width``
    characters with '…' at the end when anything was cut."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def score(value: float | None) -> str:
    """A relevance score as every output gives it: 4 decimals."""
    return "-" if value is None else f"{value:.4f}"


def value(v: Any) -> str:
    """One field's value for people: a list as ``a, b``, nothing as ``-``, a mapping as
    ``k=v`` pairs; never a Python repr."""
    if v is None or v == "" or v == [] or v == {}:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple):
        return ", ".join(value(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={_scalar(x)}" for k, x in v.items())
    return str(v)


def _scalar(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def describe(rows: Iterable[tuple[str, Any]]) -> str:
    """Aligned ``Key:  value`` lines, one per field."""
    rows = list(rows)
    width = max((len(key) for key, _ in rows), default=0) + 3  # ":" and two spaces
    return "\n".join(f"{key + ':':<{width}}{value(v)}" for key, v in rows)
