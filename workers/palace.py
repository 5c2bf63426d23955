"""Palace worker: the only process that writes one palace.

Each loop turn takes every waiting request, sends all texts that need a vector (the texts
of new drawers, the queries of recalls) to the embedder in ONE call, then runs the
requests in arrival order, committing each run of consecutive remembers as ONE
transaction. A reply leaves only after its transaction has committed, so an
acknowledged write survives ``kill -9``: SQLite is the truth, the index is rebuilt or
caught up from SQLite's change log when the worker starts again.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from trusty_memory import protocol as p
from trusty_memory.client.sync import Client
from trusty_memory.config import Config, load_config
from trusty_memory.logs import setup_logging
from trusty_memory.names import validate_palace_name
from trusty_memory.workers import bulk, maintenance
from trusty_memory.workers.base import Job, Reply, Worker, reply_to
from trusty_memory.workers.embedding import DIM
from trusty_memory.workers.store import PalaceStore

EMBED_TIMEOUT_S = 120.0  # covers the model loading on a cold embedder
REOPEN_EVERY_S = 2.0  # a palace that could not be opened is tried again at most this often


class Embedder:
    """Palace workers reach the embedder pool through the broker, like any client."""

    def __init__(self, config: Config) -> None:
        self.client = Client(config, autostart=False)

    def encode(self, texts: list[str]) -> np.ndarray:
        data = self.client.call("embed", {"texts": texts}, timeout=EMBED_TIMEOUT_S)
        result = p.convert(data, p.EmbedResult)
        return np.frombuffer(result.vectors, dtype=np.float32).reshape(len(texts), result.dim)


class PalaceWorker(Worker):
    role = "writer"

    def __init__(self, config: Config, log, palace: str) -> None:
        super().__init__(config, log)
        self.palace = validate_palace_name(palace)
        self.service = p.palace_service(palace)
        self.batch_max = config.palace.batch_max
        self.embedder = Embedder(config)
        self.store: PalaceStore | None = None
        self.open_error: p.TrustyError | None = None
        self.opened_at = 0.0  # when opening was last tried

    def run(self) -> int:
        self.log = self.log.bind(palace=self.palace)
        self.open_store()
        return super().run()

    def open_store(self) -> bool:
        """Open the palace. A storage failure (a corrupt file, a full disk) is kept and
        given to every request as its answer, and opening is tried again on later requests
        (so a file restored from a backup serves without a restart). Exiting instead made
        the broker restart this process in a loop while every caller waited out its 30 s
        deadline and learnt only that it timed out."""
        self.opened_at = time.monotonic()
        try:
            self.store = PalaceStore.open(
                self.config.palace_dir(self.palace), self.palace, self.config.palace, dim=DIM
            )
        except p.TrustyError as exc:
            if exc.code != p.ErrorCode.STORAGE_ERROR:
                raise
            self.open_error = exc
        except OSError as exc:  # palace.json or identity.txt could not be written
            message = f"cannot open palace {self.palace}: {exc}"
            self.open_error = p.TrustyError(p.ErrorCode.STORAGE_ERROR, message)
        if self.store is None:
            self.log.error("palace cannot be opened", error=self.open_error.message)
            return False
        if self.open_error is not None:
            self.log.info("palace opened after an earlier failure")
        self.open_error = None
        self.log.info("palace open", seconds=round(time.monotonic() - self.opened_at, 3))
        return True

    # -- batches -----------------------------------------------------------------

    def handle_batch(self, jobs: list[Job]) -> list[Reply]:
        if self.store is None and (
            time.monotonic() - self.opened_at < REOPEN_EVERY_S or not self.open_store()
        ):
            return [Reply(job.client, job.request.id, _error(job, self.open_error)) for job in jobs]
        replies: list[Reply] = []
        work: list[tuple[Job, object]] = []
        for job in jobs:
            try:
                params = p.decode_params(job.request.method, job.request.params)
                if job.request.method not in p.PALACE_METHODS:
                    raise p.TrustyError(
                        p.ErrorCode.UNKNOWN_METHOD, f"unknown method: {job.request.method}"
                    )
                self.check_text(job.request.method, params)
                work.append((job, params))
            except p.TrustyError as exc:
                replies.append(Reply(job.client, job.request.id, _error(job, exc)))
        t0 = time.perf_counter()
        vectors, embed_error = self.embed_all(work)
        t1 = time.perf_counter()
        remembers: list[tuple[Job, p.RememberParams, np.ndarray]] = []
        for job, params in work:
            if job.request.id in embed_error:
                replies.append(
                    Reply(job.client, job.request.id, _error(job, embed_error[job.request.id]))
                )
            elif job.request.method == "memory_remember":
                remembers.append((job, params, vectors[job.request.id]))
            else:
                replies.extend(self.commit_remembers(remembers))
                remembers = []
                replies.append(reply_to(job, lambda j=job, pr=params: self.execute(j, pr, vectors)))
        replies.extend(self.commit_remembers(remembers))
        self.log.debug(
            "batch",
            jobs=len(jobs),
            embed_ms=round((t1 - t0) * 1000, 2),
            store_ms=round((time.perf_counter() - t1) * 1000, 2),
        )
        return replies

    def check_text(self, method: str, params: object) -> None:
        """Refuse oversized text before it costs an embedding."""
        if method == "memory_remember":
            fields = [("text", params.text)]
            if params.embed_text is not None:
                fields.append(("embed_text", params.embed_text))
        elif method in ("memory_recall", "memory_recall_deep"):
            fields = [("query", params.query)]
        else:
            return
        limit = self.config.palace.max_text_bytes
        for field, text in fields:
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > limit:
                raise p.TrustyError(
                    p.ErrorCode.TEXT_TOO_LARGE,
                    f"{method}: {field} is {size} bytes; the limit is {limit}",
                )
            if not text.strip():
                raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"{method}: '{field}' is empty")

    def embed_all(self, work) -> tuple[dict[str, np.ndarray], dict[str, p.TrustyError]]:
        needs = [
            (
                job.request.id,
                (params.embed_text or params.text)
                if job.request.method == "memory_remember"
                else params.query,
            )
            for job, params in work
            if job.request.method in ("memory_remember", "memory_recall", "memory_recall_deep")
        ]
        if not needs:
            return {}, {}
        try:
            block = self.embedder.encode([text for _, text in needs])
        except p.TrustyError as exc:
            self.log.warning("embedding failed", error=exc.message)
            err = p.TrustyError(p.ErrorCode.EMBEDDER_UNAVAILABLE, f"embedder: {exc.message}")
            return {}, {rid: err for rid, _ in needs}
        return {rid: block[i] for i, (rid, _) in enumerate(needs)}, {}

    def commit_remembers(self, batch) -> list[Reply]:
        """One transaction for the whole run; on failure, one at a time to find the culprit."""
        if not batch:
            return []
        try:
            results = self.store.remember_batch([(params, vec) for _, params, vec in batch])
            return [
                Reply(job.client, job.request.id, p.ok_response(job.request.id, result))
                for (job, _, _), result in zip(batch, results, strict=True)
            ]
        except Exception:
            if len(batch) == 1:
                job, params, vec = batch[0]
                return [reply_to(job, lambda: self.store.remember_batch([(params, vec)])[0])]
            return [r for item in batch for r in self.commit_remembers([item])]

    def execute(self, job: Job, params, vectors: dict[str, np.ndarray]):
        method = job.request.method
        if method in ("memory_recall", "memory_recall_deep"):
            hits = self.store.recall(
                params.query,
                vectors[job.request.id],
                params.top_k,
                room=params.room,
                tag=params.tag,
                deep=method == "memory_recall_deep",
            )
            return p.RecallResult(palace=self.palace, query=params.query, results=hits)
        handler = HANDLERS.get(method)
        if handler is None:
            raise p.TrustyError(p.ErrorCode.UNKNOWN_METHOD, f"unknown method: {method}")
        return handler(self, params)

    # -- lifecycle ---------------------------------------------------------------

    def on_idle(self) -> None:
        if self.store is not None:
            self.store.flush()
            self.store.maybe_snapshot()

    def on_stop(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except p.TrustyError as exc:  # a full disk: the index snapshot waits, no data
                self.log.warning("closing the palace failed", error=exc.message)
        self.embedder.client.close()


# Methods that need no vector: one line each, ``(worker, params) -> result``.
HANDLERS: dict[str, Callable[[PalaceWorker, Any], Any]] = {
    "memory_list": lambda w, params: p.ListResult(palace=w.palace, drawers=w.store.list(params)),
    "memory_forget": lambda w, params: w.store.forget(params.drawer_id),
    "kg_assert": lambda w, params: w.store.kg_assert(params),
    "kg_query": lambda w, params: w.store.kg_query(params.subject),
    "palace_info": lambda w, params: w.store.info(),
    "noop": lambda w, params: {},
    "palace_import": lambda w, params: bulk.import_batch(w.store, params, w.embedder.encode),
    "palace_export": lambda w, params: bulk.export_page(w.store, params),
    # The dreamer's steps and the archive (``workers/maintenance.py``).
    "dream_status": lambda w, params: w.store.info(),
    "dream_scan": lambda w, params: maintenance.scan_duplicates(w.store, params),
    "dream_merge": lambda w, params: maintenance.merge_groups(w.store, params),
    "dream_decay": lambda w, params: maintenance.decay_page(w.store, params),
    "dream_kg_decay": lambda w, params: maintenance.kg_decay_page(w.store, params),
    "dream_finish": lambda w, params: maintenance.finish(w.store, params),
    "archive_list": lambda w, params: maintenance.archive_list(w.store, params),
    "archive_restore": lambda w, params: maintenance.archive_restore(w.store, params.drawer_id),
}


def _error(job: Job, exc: p.TrustyError) -> bytes:
    return p.error_response(job.request.id, exc.code, exc.message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trusty-memory-palace")
    parser.add_argument("--palace", required=True)
    args = parser.parse_args(argv)
    config = load_config()
    log = setup_logging("palace", default_level="info")
    return PalaceWorker(config, log, args.palace).run()


if __name__ == "__main__":
    sys.exit(main())
