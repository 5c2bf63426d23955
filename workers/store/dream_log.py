"""The dream log: each pass the dreamer applied, and what ``palace_info`` says of them.

The dreamer ends every applied pass with ``dream_finish`` (``decay.finish``), which writes
one row here (``log_pass``); ``dream_summary`` sums them up for ``palace_info``,
``palace_stats`` and the broker's ``summary.json``. Both work on the connection they are
given, in the caller's transaction, so any palace process can read the summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from trusty_memory.common.values import now_rfc3339

if TYPE_CHECKING:
    import sqlite3

    from trusty_memory.common.messages import DreamFinishParams


def log_pass(conn: sqlite3.Connection, params: DreamFinishParams) -> None:
    """One applied pass: how long it took and what it changed."""
    conn.execute(
        "INSERT INTO dream_log (finished_at, duration_s, merged, decayed, archived,"
        " kg_decayed, truncated) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            now_rfc3339(),
            float(params.duration_s),
            int(params.merged),
            int(params.decayed),
            int(params.archived),
            int(params.kg_decayed),
            int(bool(params.truncated)),
        ),
    )


class DreamSummary(TypedDict):
    """The ``PalaceInfo`` fields that describe the dreamer's work."""

    last_dream_at: str | None
    dream_merged: int
    dream_decayed: int
    dream_archived: int
    archived_count: int


def dream_summary(conn: sqlite3.Connection) -> DreamSummary:
    """The ``PalaceInfo`` fields that describe the dreamer's work."""
    last, merged, decayed, archived = conn.execute(
        "SELECT max(finished_at), coalesce(sum(merged), 0), coalesce(sum(decayed), 0),"
        " coalesce(sum(archived), 0) FROM dream_log"
    ).fetchone()
    count = conn.execute("SELECT count(*) FROM archive").fetchone()[0]
    return {
        "last_dream_at": last,
        "dream_merged": merged,
        "dream_decayed": decayed,
        "dream_archived": archived,
        "archived_count": count,
    }
