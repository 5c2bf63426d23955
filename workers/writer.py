"""A palace's writer: the only process that changes it.

Each loop turn runs the batch's requests in arrival order, committing each run of
consecutive remembers as ONE transaction. A reply leaves only after its transaction has
committed, so an acknowledged write survives ``kill -9``: SQLite is the truth, and the
index is rebuilt or caught up from SQLite's change log when the writer starts again.
The writer answers reads too (the broker sends a read to the least-loaded worker of the
palace, the writer included), and takes the recall hits its readers counted
(``palace_hits``) into its next write transaction.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from trusty_memory.common import names
from trusty_memory.common import protocol as p
from trusty_memory.common.messages import PalaceHitsParams, RememberParams, ScrubParams, ScrubResult
from trusty_memory.common.methods import BULK_METHODS, PALACE_METHODS, Method
from trusty_memory.common.values import check_created_at
from trusty_memory.workers import scrub
from trusty_memory.workers.base import Job, Reply
from trusty_memory.workers.embedder.embedding import DIM
from trusty_memory.workers.palace import READ_HANDLERS, PalaceWorker, Vectors
from trusty_memory.workers.store import bulk, context, decay, dedup, ranking
from trusty_memory.workers.store.edit import invalidate_fact, restore, update_drawer
from trusty_memory.workers.store.write import PalaceStore


class PalaceWriter(PalaceWorker):
    role = "writer"
    methods = PALACE_METHODS

    def parts(self, jobs: list[Job]) -> list[list[Job]]:
        """The batch's session calls first, then each bulk write alone, so a recall that
        arrived beside an import is answered before the import runs (``mine`` beside
        sixteen sessions: bench/mine_under_load.py). Jobs of one client keep their order:
        if a bulk client also sent a session call in this batch, nothing moves. Other
        clients' calls were concurrent with the bulk write, so either order is one they
        could have seen."""
        writes = [job for job in jobs if job.request.method in BULK_METHODS]
        if not writes:
            return [jobs]
        rest = [job for job in jobs if job.request.method not in BULK_METHODS]
        bulk_clients = {job.client for job in writes}
        if any(job.client in bulk_clients for job in rest):
            return [jobs]
        return [*([rest] if rest else []), *([job] for job in writes)]

    def _open(self) -> PalaceStore:
        return PalaceStore.open(
            self.config.palace_dir(self.palace), self.palace, self.config.palace, dim=DIM
        )

    def remember_inputs(self, remembers: list[RememberParams]) -> list[tuple[str, str | None]]:
        """Each remember embedded with its episode predecessor (``workers/store/context.py``),
        unless ``[palace] context_vectors`` is off or the caller sent ``embed_text``."""
        if not self.config.palace.context_vectors:
            return PalaceWorker.remember_inputs(self, remembers)
        out: list[tuple[str, str | None]] = []
        previous = self.store.last_written()
        for params in remembers:
            try:
                when = context.seconds_of(check_created_at(params.created_at))
                drawer = context.Written(names.normalize_room(params.room), when, params.text)
            except (p.TrustyError, ValueError, TypeError):
                drawer = None  # refused later with its own error
            if drawer is None or params.embed_text is not None:
                out.append((params.embed_text or params.text, None))
            else:
                ctx = context.context_of(previous, drawer, ranking.EPISODE_WINDOW_S)
                out.append((params.text, ctx))
            previous = drawer
        return out

    def run_batch(self, work: list[tuple[Job, Any]], vectors: Vectors):
        replies: list[Reply] = []
        remembers: list[tuple[Job, RememberParams, np.ndarray | context.Mixed]] = []
        for job, params in work:
            if job.request.method == Method.MEMORY_REMEMBER:
                remembers.append((job, params, vectors[job.request.id]))
            else:
                replies.extend(self.commit_remembers(remembers))
                remembers = []
                replies.append(self.reply(job, partial(self.execute, job, params, vectors)))
        replies.extend(self.commit_remembers(remembers))
        return replies

    def commit_remembers(self, batch) -> list[Reply]:
        """One transaction for the whole run; on failure, one at a time to find the culprit."""
        if not batch:
            return []
        try:
            results = self.store.remember_batch([(params, vec) for _, params, vec in batch])
            seq = self.store.last_seq
            return [
                Reply(
                    job.client,
                    job.request.id,
                    p.ok_response(job.request.id, self._counted(result, params), seq),
                )
                for (job, params, _), result in zip(batch, results, strict=True)
            ]
        except Exception:
            if len(batch) == 1:
                job, params, vec = batch[0]
                one = lambda: self._counted(self.store.remember_batch([(params, vec)])[0], params)  # noqa: E731
                return [self.reply(job, one)]
            return [r for item in batch for r in self.commit_remembers([item])]

    def _counted(self, result, params):
        """A result with the credentials its request had redacted (``secrets_guard``)."""
        result.redacted = self.guard.count_for(params)
        return result

    def on_idle(self) -> None:
        if self.store is not None:
            self.store.flush()
            self.store.maybe_snapshot()
            self.store.write_summary()
        super().on_idle()


def _scrub(w: PalaceWriter, params: ScrubParams) -> ScrubResult:
    """Find (and with ``apply``, redact) the credentials the palace holds; after changes,
    open the palace again and rebuild its index from SQLite, so neither the writer's state
    nor the index snapshot keeps what was there, then leave no copy in the file."""
    try:
        result, w.store = scrub.scrub(
            w.store, w.guard.redactor, params, w.embedder.encode, reopen=w._open
        )
    except Exception:
        if getattr(w.store, "_closed", False):
            w.store = None  # closed for the reopen that failed: opened on the next request
        raise
    return result


def _take_hits(w: PalaceWriter, params: PalaceHitsParams) -> dict:
    w.store.add_hits(params.hits)
    return {}


PalaceWriter.handlers = {
    **READ_HANDLERS,
    Method.MEMORY_FORGET: lambda w, params: w.store.forget(params.drawer_id),
    Method.KG_ASSERT: lambda w, params: w.store.kg_assert(params),
    Method.PALACE_HITS: _take_hits,
    Method.PALACE_IMPORT: lambda w, params: w._counted(
        bulk.import_batch(w.store, params, w.embedder.encode), params
    ),
    # Credentials older writes left in the palace (``workers/scrub.py``).
    Method.PALACE_SCRUB: lambda w, params: _scrub(w, params),
    # The dreamer's steps (``workers/store/dedup.py``, ``decay.py``) and the archive.
    Method.DREAM_STATUS: lambda w, params: w.store.info(),
    Method.DREAM_SCAN: lambda w, params: dedup.scan_duplicates(w.store, params),
    Method.DREAM_MERGE: lambda w, params: dedup.merge_groups(w.store, params, w.embedder.encode),
    Method.DREAM_DECAY: lambda w, params: decay.decay_page(w.store, params),
    Method.DREAM_KG_DECAY: lambda w, params: decay.kg_decay_page(w.store, params),
    Method.DREAM_FINISH: lambda w, params: decay.finish(w.store, params),
    Method.ARCHIVE_RESTORE: lambda w, params: restore(w.store, params.drawer_id),
    # Changes in place (``workers/store/edit.py``).
    Method.MEMORY_UPDATE: lambda w, params: update_drawer(w.store, params, w.embedder.encode),
    Method.KG_INVALIDATE: lambda w, params: invalidate_fact(w.store, params),
}
