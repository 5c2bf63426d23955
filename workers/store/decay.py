"""The dreamer's decay steps, run inside a palace's writer process: importance fades, faded
drawers go to the archive, facts lose confidence; and the end of a pass.

The dreamer (``dreamer/``) decides *when*, and asks the writer for each step with one
``dream_*`` request over a bounded page; every write is ONE SQLite transaction whose
deletes go through the change log (``rows.py``), so a ``kill -9`` at any moment leaves the
whole page or none of it. The duplicate steps are ``dedup.py``'s.

Policy, in one place:

* **Decay.** effective = clamp(base * 2^(-age_days / half_life) + min(0.05 * hits, 0.3),
  0.05, 1), always from the base the caller gave (so a second pass changes nothing),
  written to ``importance`` (what list order, L1 and recall report).
* **Prune.** The clamp's floor is 0.05, so "effective < 0.05" is tested on the unclamped
  value: a drawer whose raw score fell below ``prune_below`` and that is older than
  ``prune_min_age_days`` moves to the archive, never destroyed.
* **KG.** Active triples decay the same way: clamp(base * 2^(-age/half_life), 0.05, 1).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from trusty_memory.common.messages import (
    DreamDecayParams,
    DreamDecayResult,
    DreamFinishParams,
    DreamKgDecayParams,
    DreamKgDecayResult,
    PalaceInfo,
)
from trusty_memory.common.values import check_created_at, check_limit, check_unit_interval, invalid
from trusty_memory.workers.store import archive, dream_log, rows
from trusty_memory.workers.store.rows import Row

if TYPE_CHECKING:
    from trusty_memory.workers.store.write import PalaceStore

FLOOR = 0.05
HIT_WEIGHT = 0.05
HIT_CAP = 0.3
SECONDS_PER_DAY = 86_400.0
CHANGE_EPSILON = 1e-4  # smaller importance changes are not written (nor counted)


# -- the formulas ----------------------------------------------------------------------


def raw_importance(base: float, age_days: float, hits: int, half_life_days: float) -> float:
    """base * 2^(-age/half_life) + min(0.05 * hits, 0.3), before the clamp."""
    age_days = max(0.0, age_days)
    return base * 2.0 ** (-age_days / half_life_days) + min(HIT_WEIGHT * hits, HIT_CAP)


def effective_importance(base: float, age_days: float, hits: int, half_life_days: float) -> float:
    """trusty-memory's decay: the raw score clamped to [0.05, 1]."""
    return min(1.0, max(FLOOR, raw_importance(base, age_days, hits, half_life_days)))


def decayed_confidence(base: float, age_days: float, half_life_days: float) -> float:
    """KG confidence decay, the same shape without hits."""
    return min(1.0, max(FLOOR, base * 2.0 ** (-max(0.0, age_days) / half_life_days)))


def age_days(timestamp: str, now: datetime) -> float:
    return (now - parse_time(timestamp)).total_seconds() / SECONDS_PER_DAY


def parse_time(timestamp: str) -> datetime:
    parsed = datetime.fromisoformat(timestamp)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _now(value: str | None) -> datetime:
    return parse_time(check_created_at(value)) if value else datetime.now(UTC)


def _check_half_life(value: float, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise invalid(f"{field}: must be a positive number of days, got {value!r}")
    return float(value)


# -- the steps ---------------------------------------------------------------------------


def decay_page(store: PalaceStore, params: DreamDecayParams) -> DreamDecayResult:
    """Decay one page of drawers and archive those that decayed away; ONE transaction.

    No index snapshot after it: a snapshot rewrites the whole index file, which would stall
    the foreground requests queued behind this batch. The worker takes it when it next
    idles; a crash before then costs a change-log replay on open, never data.
    """
    limit = check_limit(params.limit, 10_000)
    half_life = _check_half_life(params.half_life_days, "half_life_days")
    prune_below = check_unit_interval(params.prune_below, "prune_below")
    now = _now(params.now)
    conn = store.db.conn
    page = rows.where(conn, "label > ? ORDER BY label LIMIT ?", [params.after, limit])
    updates: list[tuple[float, float, int]] = []
    doomed: list[Row] = []
    for row in page:
        hits = row.hits + store.pending_hits(row.label)
        age = age_days(row.created_at, now)
        clock = age_days(row.decay_from, now) if row.decay_from else age
        raw = raw_importance(row.base, clock, hits, half_life)
        if params.prune and raw < prune_below and age >= params.prune_min_age_days:
            doomed.append(row)
            continue
        effective = min(1.0, max(FLOOR, raw))
        if abs(effective - row.importance) >= CHANGE_EPSILON:
            updates.append((effective, row.base, row.label))
    total = conn.execute("SELECT count(*) FROM drawers").fetchone()[0]
    result = DreamDecayResult(
        scanned=len(page),
        decayed=len(updates),
        archived=[r.id for r in doomed],
        total=total,
        next_after=page[-1].label if len(page) == limit else None,
    )
    if params.dry_run or not (updates or doomed):
        return result
    with store.transaction() as conn:
        conn.executemany(
            "UPDATE drawers SET importance = ?, base_importance = ? WHERE label = ?", updates
        )
        for row in doomed:
            archive.archive_row(conn, row, "pruned", None)
    store.after_write(removed=[row.place for row in doomed])
    return result


def kg_decay_page(store: PalaceStore, params: DreamKgDecayParams) -> DreamKgDecayResult:
    """Decay the confidence of one page of active triples; ONE transaction."""
    limit = check_limit(params.limit, 10_000)
    half_life = _check_half_life(params.half_life_days, "half_life_days")
    now = _now(params.now)
    found = store.db.conn.execute(
        "SELECT id, confidence, coalesce(base_confidence, confidence), valid_from FROM triples"
        " WHERE id > ? AND valid_to IS NULL ORDER BY id LIMIT ?",
        (params.after, limit),
    ).fetchall()
    updates = []
    for triple_id, confidence, base, valid_from in found:
        decayed = decayed_confidence(base, age_days(valid_from, now), half_life)
        if abs(decayed - confidence) >= CHANGE_EPSILON:
            updates.append((decayed, base, triple_id))
    if updates and not params.dry_run:
        with store.transaction() as conn:
            conn.executemany(
                "UPDATE triples SET confidence = ?, base_confidence = ? WHERE id = ?", updates
            )
    return DreamKgDecayResult(
        scanned=len(found),
        decayed=len(updates),
        next_after=found[-1][0] if len(found) == limit else None,
    )


def finish(store: PalaceStore, params: DreamFinishParams) -> PalaceInfo:
    """Record an applied pass (``dream_log``) and refresh L1; answers ``palace_info``."""
    with store.transaction() as conn:
        dream_log.log_pass(conn, params)
    store.refresh_l1()
    return store.info()
