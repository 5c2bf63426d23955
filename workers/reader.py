"""A palace reader: serves reads beside the writer, from a read-only copy of its state.

Ops add readers to a hot palace (``trusty-memory scale PALACE --readers N``) so that
recalls stop queueing behind one process. A reader opens the palace's SQLite read-only
(WAL lets it read while the writer commits), loads the writer's newest index snapshot
and catches up from the change log (``store.read.ReadStore``); it never writes a file.

Freshness, per batch: a request may carry ``min_seq``, the seq of its session's last
write; the reader catches up before answering whenever it is behind that (read-your-
writes, at the cost of one change-log query). Otherwise it catches up when SQLite says
another connection committed and ``[palace] reader_refresh_s`` has passed since its last
catch-up (0, the default: at every batch), so other sessions' writes show within that lag.

Recall hits the reader counts go to the writer (``palace_hits``) when it idles: only the
writer writes.

An idle reader lets its index go like the writer (``PalaceWorker.release_idle_index``)
and keeps catching up meanwhile: filters and L1 follow the change log, and the next read
that needs vectors loads the writer's newest snapshot and replays the rest.
"""

from __future__ import annotations

import time
from typing import Any

from trusty_memory.common import protocol as p
from trusty_memory.common.methods import PALACE_READ_METHODS, Method
from trusty_memory.workers.base import Job
from trusty_memory.workers.embedder.embedding import DIM
from trusty_memory.workers.palace import READ_HANDLERS, PalaceWorker
from trusty_memory.workers.store.read import ReadStore

HITS_TIMEOUT_S = 5.0


class PalaceReader(PalaceWorker):
    role = "reader"
    methods = PALACE_READ_METHODS
    handlers = READ_HANDLERS

    def __init__(self, config, log, palace: str, *, remote: bool = False) -> None:
        super().__init__(config, log, palace, remote=remote)
        self.refresh_every = config.palace.reader_refresh_s
        self.refreshed_at = 0.0

    def _open(self) -> ReadStore:
        store = ReadStore.open_reader(
            self.config.palace_dir(self.palace), self.palace, self.config.palace, dim=DIM
        )
        self.refreshed_at = time.monotonic()
        return store

    def before_batch(self, work: list[tuple[Job, Any]]) -> None:
        needed = max((job.request.min_seq for job, _ in work), default=0)
        behind = needed > self.store.last_seq
        due = time.monotonic() - self.refreshed_at >= self.refresh_every
        if behind or (due and self.store.changed()):
            self.catch_up()

    def catch_up(self) -> None:
        read = self.store.refresh()
        self.refreshed_at = time.monotonic()
        if read:
            self.log.debug("caught up", changes=read, seq=self.store.last_seq)

    def on_idle(self) -> None:
        if self.store is None:
            return
        due = time.monotonic() - self.refreshed_at >= self.refresh_every
        if due and self.store.changed():
            self.catch_up()
        self.send_hits()
        super().on_idle()

    def send_hits(self) -> None:
        """Hand the writer the recall hits counted here; kept for next time if it fails."""
        hits = self.store.take_hits()
        if not hits:
            return
        try:
            self.embedder.client.call(
                Method.PALACE_HITS,
                {"hits": sorted(hits.items())},
                palace=self.palace,
                timeout=HITS_TIMEOUT_S,
            )
        except p.TrustyError as exc:
            self.log.info("hits kept for later", error=exc.message, labels=len(hits))
            self.store.keep_hits(hits)

    def on_stop(self) -> None:
        if self.store is not None:
            self.send_hits()
        super().on_stop()
