"""JSON-lines events, in the shape of Engram's trainer protocol (``seeds/002``).

Every line is one JSON object with a ``type``: ``progress`` (stage, percent), ``metric``
(name, value), ``recommendation`` (target_id, action, reasoning: what a preview proposes,
or what an apply did) and ``complete`` (counts and duration; one per palace pass). Each
line also names its ``palace``, since one run may dream several.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

Event = dict[str, Any]
Emit = Callable[[Event], None]


def progress(palace: str, stage: str, percent: float) -> Event:
    return {"type": "progress", "palace": palace, "stage": stage, "percent": round(percent, 1)}


def metric(palace: str, name: str, value: float) -> Event:
    return {"type": "metric", "palace": palace, "name": name, "value": float(value)}


def recommendation(palace: str, target_id: str, action: str, reasoning: str, **extra) -> Event:
    return {
        "type": "recommendation",
        "palace": palace,
        "target_id": target_id,
        "action": action,
        "reasoning": reasoning,
        **extra,
    }


def json_lines(stream: TextIO = sys.stdout) -> Emit:
    """An emitter that writes each event as one flushed line (a parent may be reading)."""

    def emit(event: Event) -> None:
        stream.write(json.dumps(event) + "\n")
        stream.flush()

    return emit


def text(stream: TextIO = sys.stdout, max_shown: int = 50) -> Emit:
    """An emitter for people: the first ``max_shown`` actions and one summary per palace."""
    shown: dict[str, int] = {}

    def emit(event: Event) -> None:
        kind, palace = event["type"], event.get("palace", "")
        if kind == "recommendation":
            shown[palace] = shown.get(palace, 0) + 1
            if shown[palace] <= max_shown:
                into = f" -> {event['into']}" if event.get("into") else ""
                line = f"  {event['action']:7s} {event['target_id']}{into}  ({event['reasoning']})"
                stream.write(line + "\n")
        elif kind == "complete":
            extra = shown.get(palace, 0) - max_shown
            if extra > 0:
                stream.write(f"  ... and {extra} more\n")
            verb = "would change" if event["dry_run"] else "dreamed"
            note = " (stopped early: time budget or foreground work)" if event["truncated"] else ""
            stream.write(
                f"{palace}: {verb}: merged {event['merged']}, decayed {event['decayed']},"
                f" archived {event['archived']}, kg decayed {event['kg_decayed']}"
                f" in {event['duration_secs']:.2f}s{note}\n"
            )
            stream.flush()

    return emit


def silent(event: Event) -> None:
    """An emitter that drops everything."""
