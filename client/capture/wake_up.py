"""The wake-up context: what an agent should know about a palace before its first word.

``trusty-memory wake-up PALACE``, the ``SessionStart`` hook (``hooks.py``) and the MCP
resource ``trusty-memory://palace/NAME/wake-up`` all give the same plain text, ready to
paste into a system prompt: the palace's identity (L0, its description, which the store
keeps as ``identity.txt``) and then its L1: the drawers the store ranks first, by
importance and then newest first, which is the order of ``memory_list`` and of the L1
snapshot recall scores first (``workers/store/state.py``'s ``refresh_l1``).

Reading it is not recalling: it asks ``palace_info`` and ``memory_list``, neither of which
counts a hit, so a session starting does not raise the importance of what it was shown
(which would keep showing the same drawers forever).

The budget is in tokens, estimated as characters / 4 (rounded up): the usual rule of thumb
for English and code with BPE tokenisers, cheap, and the same everywhere the text is
made. The whole text, header included, stays within it; each note is one line (its
whitespace folded, control characters dropped) and at most ``NOTE_MAX_CHARS``, so one long
exchange cannot take the whole budget.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from trusty_memory.common.methods import Method

DEFAULT_BUDGET = 800  # tokens
CHARS_PER_TOKEN = 4
MIN_BUDGET = 50
MAX_BUDGET = 100_000
NOTE_MAX_CHARS = 480  # about 120 tokens: a long exchange is clipped, not dropped
LIST_MAX = 1000  # the store's own cap on memory_list


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by the characters / 4 rule (rounded up)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def list_limit(budget: int) -> int:
    """How many drawers to ask for: more than can fit (a note takes at least ~10 tokens),
    within the store's cap."""
    return max(1, min(LIST_MAX, budget // 8 + 1))


def one_line(text: str) -> str:
    """``text`` on one line: whitespace folded, other control characters dropped."""
    kept = "".join(c for c in text if not unicodedata.category(c).startswith("C") or c in "\t\n\r")
    return " ".join(kept.split())


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 3)].rstrip() + "..."


def _note(drawer: dict[str, Any]) -> str:
    """One drawer as a line: its date and room (where not the default), then its text."""
    day = str(drawer.get("created_at") or "")[:10]
    room = str(drawer.get("room") or "")
    where = " ".join(x for x in (day, f"[{room}]" if room and room != "General" else "") if x)
    text = _clip(one_line(str(drawer.get("content") or "")), NOTE_MAX_CHARS)
    return f"- {where}: {text}" if where else f"- {text}"


def compose(
    palace: str,
    description: str | None,
    drawers: list[dict[str, Any]],
    budget: int = DEFAULT_BUDGET,
    total: int | None = None,
) -> str:
    """The wake-up text of ``palace`` from its description and its drawers in L1 order,
    at most ``budget`` tokens (:func:`estimate_tokens`). ``total``: how many drawers the
    palace holds, to say how many more are there to recall."""
    limit = budget * CHARS_PER_TOKEN
    header = (
        f'Memory palace "{palace}" (trusty-memory): notes kept from earlier sessions.'
        f' Recall more with memory_recall (palace "{palace}").'
    )
    about = one_line(description or "")
    lines = [_clip(header, limit)]
    if about:
        lines.append(_clip(f"About this palace: {about}", max(0, limit // 4)))
    count = max(total or 0, len(drawers))
    tail_room = len(f"\n({count} more in the palace.)")  # kept free for the last line
    used = sum(len(x) + 1 for x in lines)
    notes: list[str] = []
    heading = "Most important notes (most recent first among equals):"
    if drawers and used + len(heading) + 1 < limit:
        for i, drawer in enumerate(drawers):
            note = _note(drawer)
            room_left = limit - used - len(heading) - 1 - sum(len(n) + 1 for n in notes) - 1
            if i + 1 < count:  # more would follow: leave room to say so
                room_left -= tail_room
            if len(note) > room_left:
                if room_left >= 40:  # a clipped note still says something
                    notes.append(_clip(note, room_left))
                break
            notes.append(note)
        if notes:
            lines += [heading, *notes]
    text = "\n".join(lines)
    more = count - len(notes)
    tail = f"({more} more in the palace.)"
    if more > 0 and notes and len(text) + 1 + len(tail) <= limit:
        text += "\n" + tail
    return text[:limit]


def wake_up(client: Any, palace: str, budget: int = DEFAULT_BUDGET, quiet_if_empty: bool = False):
    """The wake-up text of ``palace`` through a blocking ``Client`` (``client/sync.py``);
    with ``quiet_if_empty``, None for a palace with neither a description nor drawers
    (a hook then says nothing rather than an empty header)."""
    info = client.call(Method.PALACE_INFO, {}, palace=palace)
    listed = client.call(Method.MEMORY_LIST, {"limit": list_limit(budget)}, palace=palace)
    return _finish(palace, info, listed, budget, quiet_if_empty)


async def wake_up_async(client: Any, palace: str, budget: int = DEFAULT_BUDGET) -> str:
    """The same through an ``AsyncClient`` (``client/aio.py``), for the MCP resource."""
    info = await client.call(Method.PALACE_INFO, {}, palace=palace)
    listed = await client.call(Method.MEMORY_LIST, {"limit": list_limit(budget)}, palace=palace)
    return _finish(palace, info, listed, budget, False) or ""


def _finish(palace: str, info: Any, listed: Any, budget: int, quiet_if_empty: bool):
    drawers = list((listed or {}).get("drawers") or [])
    description = (info or {}).get("description")
    if quiet_if_empty and not drawers and not description:
        return None
    total = (info or {}).get("drawer_count")
    return compose(palace, description, drawers, budget, total if isinstance(total, int) else None)
