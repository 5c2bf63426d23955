"""One dream pass over one palace: scan -> merge -> decay/prune -> KG -> finish.

The scan proposes pairs that are close in meaning AND state the same fact; pairs that are
close but state different facts (``workers/store/same_fact.py``) are reported after the merge
as ``keep`` recommendations with the reason ("numbers differ: 100 vs 1000").

Preview and apply are the same pass: with ``dry_run`` every request carries
``dry_run=True`` and the writer computes exactly what it would do without writing (as in
Engram's ``consolidate_preview`` / ``consolidate_apply``). The preview's decay counts
include drawers the merge would have removed, since nothing was merged.

Each stage is a loop of bounded requests, and between two requests the pass yields: it
sleeps ``pause_s`` (foreground requests queued meanwhile run first), stops if
``should_stop()`` says foreground work arrived or the process is stopping, and stops when
the time budget is spent. A stopped pass still records what it applied (``dream_finish``)
and is marked ``truncated``; every batch it finished is committed, every other batch was
never begun, so there is nothing to undo.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trusty_memory.common import protocol as p
from trusty_memory.common.config import DreamerSettings
from trusty_memory.common.messages import (
    DistinctPair,
    DreamDecayResult,
    DreamKgDecayResult,
    DreamMergeResult,
    DreamScanResult,
    DuplicatePair,
)
from trusty_memory.common.methods import Method
from trusty_memory.dreamer import planner
from trusty_memory.dreamer import progress as ev

REQUEST_TIMEOUT_S = 60.0


class Stopped(Exception):
    """The pass was asked to stop between two batches."""


@dataclass
class PassReport:
    palace: str
    dry_run: bool
    merged: int = 0
    decayed: int = 0
    archived: int = 0
    kg_decayed: int = 0
    duplicate_pairs: int = 0
    distinct_pairs: int = 0  # close in meaning, but stating different facts: kept apart
    truncated: bool = False
    duration_s: float = 0.0
    slowest_ms: dict[str, float] = field(default_factory=dict)  # per method

    def complete_event(self) -> ev.Event:
        return {
            "type": "complete",
            "palace": self.palace,
            "dry_run": self.dry_run,
            "merged": self.merged,
            "decayed": self.decayed,
            "archived": self.archived,
            "kg_decayed": self.kg_decayed,
            "duplicate_pairs": self.duplicate_pairs,
            "distinct_pairs": self.distinct_pairs,
            "truncated": self.truncated,
            "duration_secs": round(self.duration_s, 3),
        }


class DreamPass:
    """Usage: ``DreamPass(client, "proj", settings, dry_run=True).run()``."""

    def __init__(
        self,
        client: Any,
        palace: str,
        settings: DreamerSettings,
        *,
        dry_run: bool = False,
        emit: ev.Emit = ev.silent,
        should_stop: Callable[[], bool] = lambda: False,
        now: str | None = None,
    ) -> None:
        self.client = client
        self.palace = palace
        self.s = settings
        self.dry_run = dry_run
        self.emit = emit
        self.should_stop = should_stop
        self.now = now
        self.report = PassReport(palace, dry_run)
        self.distinct: dict[tuple[str, str], DistinctPair] = {}
        self.merged_ids: set[str] = set()
        self.deadline = 0.0

    def run(self) -> PassReport:
        started = time.monotonic()
        self.deadline = started + self.s.pass_budget_s
        try:
            groups = planner.group_pairs(self.scan())
            self.merge(groups)
            self.keep_distinct()
            self.decay()
            if self.s.kg_decay:
                self.kg_decay()
        except Stopped:
            self.report.truncated = True
        self.report.duration_s = time.monotonic() - started
        if not self.dry_run:
            self.finish()
        for method, ms in sorted(self.report.slowest_ms.items()):
            self.emit(ev.metric(self.palace, f"{method}_slowest_ms", round(ms, 1)))
        self.emit(self.report.complete_event())
        return self.report

    # -- stages ----------------------------------------------------------------------

    def scan(self) -> list[DuplicatePair]:
        pairs: dict[tuple[str, str], DuplicatePair] = {}
        after: int | None = 0
        scanned = 0
        while after is not None:
            self.yield_turn()
            data = self.call(
                Method.DREAM_SCAN,
                {
                    "after": after,
                    "limit": self.s.scan_batch,
                    "threshold": self.s.duplicate_threshold,
                    "neighbours": self.s.neighbours,
                },
            )
            page = p.convert(data, DreamScanResult)
            for pair in page.pairs:
                pairs[(pair.a, pair.b)] = pair
            for other in page.distinct:
                self.distinct[(other.a, other.b)] = other
            scanned += page.scanned
            after = page.next_after
            self.emit(ev.progress(self.palace, "scan", _percent(scanned, page.total, after)))
        self.report.duplicate_pairs = len(pairs)
        self.emit(ev.metric(self.palace, "duplicate_pairs", len(pairs)))
        return list(pairs.values())

    def merge(self, groups: list[list[str]]) -> None:
        batches = list(planner.chunks(groups, self.s.merge_batch))
        for done, batch in enumerate(batches, start=1):
            self.yield_turn()
            data = self.call(
                Method.DREAM_MERGE,
                {"groups": batch, "threshold": self.s.duplicate_threshold, "dry_run": self.dry_run},
            )
            result = p.convert(data, DreamMergeResult)
            self.report.merged += result.merged
            for action in result.actions:
                self.merged_ids.update(action.merged)
                for merged in action.merged:
                    reason = f"same fact, cosine >= {action.min_similarity:.3f}"
                    if action.content is not None:
                        text = action.content.replace("\n", " / ")
                        text = text if len(text) <= 80 else text[:77] + "..."
                        reason += f"; the survivor's text becomes {text!r}"
                    self.emit(
                        ev.recommendation(self.palace, merged, "merge", reason, into=action.keep)
                    )
            for other in result.distinct:
                self.distinct[(other.a, other.b)] = other
            self.emit(ev.progress(self.palace, "merge", 100.0 * done / len(batches)))
        self.emit(ev.metric(self.palace, "merged", self.report.merged))

    def keep_distinct(self) -> None:
        """Say which close pairs stay apart, and why (after the merges, which matter more).

        A pair one of whose drawers was merged away in this pass is not mentioned.
        """
        kept = [
            pair
            for pair in self.distinct.values()
            if pair.a not in self.merged_ids and pair.b not in self.merged_ids
        ]
        self.report.distinct_pairs = len(kept)
        for pair in kept:
            reason = f"not a duplicate of {pair.b}: cosine {pair.similarity:.3f}, but {pair.reason}"
            self.emit(ev.recommendation(self.palace, pair.a, "keep", reason, beside=pair.b))
        self.emit(ev.metric(self.palace, "distinct_pairs", len(kept)))

    def decay(self) -> None:
        after: int | None = 0
        scanned = 0
        while after is not None:
            self.yield_turn()
            params = {
                "after": after,
                "limit": self.s.decay_batch,
                "half_life_days": self.s.half_life_days,
                "prune_below": self.s.prune_below,
                "prune_min_age_days": self.s.prune_min_age_days,
                "dry_run": self.dry_run,
                "now": self.now,
            }
            page = p.convert(self.call(Method.DREAM_DECAY, params), DreamDecayResult)
            self.report.decayed += page.decayed
            self.report.archived += len(page.archived)
            reason = f"importance decayed below {self.s.prune_below}"
            for drawer_id in page.archived:
                self.emit(ev.recommendation(self.palace, drawer_id, "archive", reason))
            scanned += page.scanned
            after = page.next_after
            self.emit(ev.progress(self.palace, "decay", _percent(scanned, page.total, after)))
        self.emit(ev.metric(self.palace, "decayed", self.report.decayed))
        self.emit(ev.metric(self.palace, "archived", self.report.archived))

    def kg_decay(self) -> None:
        after: int | None = 0
        while after is not None:
            self.yield_turn()
            params = {
                "after": after,
                "limit": self.s.decay_batch,
                "half_life_days": self.s.kg_half_life_days,
                "dry_run": self.dry_run,
                "now": self.now,
            }
            page = p.convert(self.call(Method.DREAM_KG_DECAY, params), DreamKgDecayResult)
            self.report.kg_decayed += page.decayed
            after = page.next_after
        self.emit(ev.progress(self.palace, "kg", 100.0))
        self.emit(ev.metric(self.palace, "kg_decayed", self.report.kg_decayed))

    def finish(self) -> None:
        """Record the pass (also refreshes L1)."""
        r = self.report
        self.call(
            Method.DREAM_FINISH,
            {
                "duration_s": r.duration_s,
                "merged": r.merged,
                "decayed": r.decayed,
                "archived": r.archived,
                "kg_decayed": r.kg_decayed,
                "truncated": r.truncated,
            },
        )
        self.emit(ev.progress(self.palace, "finish", 100.0))

    # -- plumbing --------------------------------------------------------------------

    def yield_turn(self) -> None:
        """Between two batches: let foreground work go first, or stop."""
        if self.should_stop() or time.monotonic() >= self.deadline:
            raise Stopped
        if self.s.pause_s > 0:
            time.sleep(self.s.pause_s)

    def call(self, method: str, params: dict) -> Any:
        started = time.perf_counter()
        try:
            return self.client.call(method, params, palace=self.palace, timeout=REQUEST_TIMEOUT_S)
        finally:
            # The longest batch is how long a foreground request may wait behind the dream.
            ms = (time.perf_counter() - started) * 1000
            self.report.slowest_ms[method] = max(ms, self.report.slowest_ms.get(method, 0.0))


def _percent(done: int, total: int, after: int | None) -> float:
    if after is None:
        return 100.0
    return min(99.9, 100.0 * done / max(total, 1))
