"""Palace workers: one writer and 0..N readers per palace, each its own process.

Started by the broker's supervisor as ``python -m trusty_memory.workers.palace_process
--palace=NAME [--reader]``, or forked by the template. This module is what both roles
share: the loop turn that decodes a batch, refuses oversized text before it costs an
embedding, asks the embedder for every vector the batch needs in ONE call (the texts of
new drawers, the queries of recalls), and runs the reads. ``writer.py`` adds the writes
(one transaction per run of remembers; a reply leaves only after its commit);
``reader.py`` keeps a read-only copy of the palace's state current from the change log.

Every reply names the change-log seq the worker had applied when it answered (``seq`` in
the response and a frame of its own for the broker): clients send it back with their
reads (read-your-writes), and ``status`` shows readers' lag with it.

A worker with no request for ``[palace] idle_release_s`` lets its vector index go and
hands the memory back (``release_idle_index``): a hundred open, idle palaces should cost
little more than their processes. The store loads the index again when a request needs
it (``state.PalaceState.index``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from trusty_memory.common import bounds, tracing
from trusty_memory.common import protocol as p
from trusty_memory.common.caller import Caller
from trusty_memory.common.config import Config
from trusty_memory.common.credentials import detector
from trusty_memory.common.messages import EmbedResult, ListResult, PalaceStats, RecallResult
from trusty_memory.common.methods import Method, decode_params
from trusty_memory.common.names import validate_palace_name
from trusty_memory.workers.base import Job, Reply, Worker, reply_to
from trusty_memory.workers.secrets_guard import SecretGuard
from trusty_memory.workers.store import archive, bulk, context
from trusty_memory.workers.store.search import kg_history, search, stats

EMBED_TIMEOUT_S = 120.0  # covers the model loading on a cold embedder
REOPEN_EVERY_S = 2.0  # a palace that could not be opened is tried again at most this often
RECALLS = (Method.MEMORY_RECALL, Method.MEMORY_RECALL_DEEP)
# Calls whose text the batch embeds in one request before any of them runs.
_EMBEDS_FIRST = (Method.MEMORY_REMEMBER, *RECALLS)

# A batch's vectors by request id: a recall's query vector, or a remember's (its
# ``context.Mixed`` pair when the writer mixed in its episode predecessor).
Vectors = dict[str, "np.ndarray | context.Mixed"]


class Embedder:
    """Palace workers reach the embedder pool through the broker, like any client; a
    remote one through the backend, the one broker socket it can reach."""

    def __init__(self, config: Config, remote: bool = False) -> None:
        endpoint = config.backend if remote else None
        self.client = Caller(config, endpoint=endpoint)

    def encode(self, texts: list[str]) -> np.ndarray:
        data = self.client.call(Method.EMBED, {"texts": texts}, timeout=EMBED_TIMEOUT_S)
        result = p.convert(data, EmbedResult)
        return np.frombuffer(result.vectors, dtype=np.float32).reshape(len(texts), result.dim)


class PalaceWorker(Worker):
    """What a palace's writer and readers share; subclasses open the store and add
    ``methods`` (what they answer) and ``run_batch``."""

    methods: frozenset[str] = frozenset()
    handlers: dict[str, Callable[[Any, Any], Any]] = {}

    def __init__(self, config: Config, log, palace: str, *, remote: bool = False) -> None:
        super().__init__(config, log, remote=remote)
        bounds.use_config(config)  # the bounds its requests' params are held to
        self.palace = validate_palace_name(palace)
        self.service = p.palace_service(palace)
        self.batch_max = config.palace.batch_max
        self.embedder = Embedder(config, remote)
        self.guard = SecretGuard(config)  # [privacy] secrets: before the store and the model
        self.store: Any = None
        self.open_error: p.TrustyError | None = None
        self.opened_at = 0.0  # when opening was last tried
        self.last_request = time.monotonic()  # when the last batch came in

    def _open(self) -> Any:
        """The role's store (``writer.py``, ``reader.py``)."""
        raise NotImplementedError

    def run(self) -> int:
        self.log = self.log.bind(palace=self.palace, role=self.role)
        self.open_store()
        detector.warm()  # the credential rules (a no-op in a worker forked from the template)
        return super().run()

    def open_store(self) -> bool:
        """Open the palace. A storage failure (a corrupt file, a full disk) is kept and
        given to every request as its answer, and opening is tried again on later requests
        (so a file restored from a backup serves without a restart). Exiting instead made
        the broker restart this process in a loop while every caller waited out its 30 s
        deadline and learnt only that it timed out."""
        self.opened_at = time.monotonic()
        try:
            self.store = self._open()
        except p.TrustyError as exc:
            if exc.code != p.ErrorCode.STORAGE_ERROR:
                raise
            self.open_error = exc
        except OSError as exc:  # palace.json or identity.txt could not be written
            message = f"cannot open palace {self.palace}: {exc}"
            self.open_error = p.TrustyError(p.ErrorCode.STORAGE_ERROR, message)
        if self.store is None:
            assert self.open_error is not None  # one of the two excepts above set it
            self.log.error("palace cannot be opened", error=self.open_error.message)
            return False
        if self.open_error is not None:
            self.log.info("palace opened after an earlier failure")
        self.open_error = None
        self.log.info("palace open", seconds=round(time.monotonic() - self.opened_at, 3))
        return True

    def release_memory(self) -> None:
        if self.store is not None:
            self.store.shrink_memory()  # SQLite's page cache first, then the C heap
        super().release_memory()

    def on_idle(self) -> None:
        self.release_idle_index()

    def release_idle_index(self) -> None:
        """Let the index go once no request has come for ``[palace] idle_release_s``."""
        after = self.config.palace.idle_release_s
        if self.store is None or after <= 0 or not self.store.index_loaded:
            return
        idle_s = time.monotonic() - self.last_request
        if idle_s >= after and self.store.release_index():
            self.release_memory()
            self.log.info("index released", idle_s=round(idle_s, 1))

    def applied_seq(self) -> int | None:
        return self.store.last_seq if self.store is not None else None

    # -- batches -----------------------------------------------------------------

    def handle_batch(self, jobs: list[Job]) -> list[Reply]:
        self.last_request = time.monotonic()
        if self.store is None and (
            time.monotonic() - self.opened_at < REOPEN_EVERY_S or not self.open_store()
        ):
            error = self.open_error
            assert error is not None  # no store only after a failed open, which set it
            return [Reply(job.client, job.request.id, _error(job, error)) for job in jobs]
        replies: list[Reply] = []
        work: list[tuple[Job, object]] = []
        self.guard.new_batch()
        for job in jobs:
            try:
                params = decode_params(job.request.method, job.request.params)
                if job.request.method not in self.methods:
                    raise p.TrustyError(
                        p.ErrorCode.UNKNOWN_METHOD,
                        f"{self.role} of {self.palace} cannot answer {job.request.method}",
                    )
                self.check_text(job.request.method, params)
                self.guard.on_request(job.request.method, params)
                work.append((job, params))
            except p.TrustyError as exc:
                replies.append(Reply(job.client, job.request.id, _error(job, exc)))
        self.before_batch(work)
        if tracing.ON:
            started = tracing.now()
        t0 = time.perf_counter()
        vectors, embed_error = self.embed_all(work)
        t1 = time.perf_counter()
        if tracing.ON and (trace := tracing.current.get()):
            tracing.span(trace, "worker.embed", started)
        ready = []
        for job, params in work:
            if job.request.id in embed_error:
                replies.append(
                    Reply(job.client, job.request.id, _error(job, embed_error[job.request.id]))
                )
            else:
                ready.append((job, params))
        replies.extend(self.run_batch(ready, vectors))
        self.log.debug(
            "batch",
            jobs=len(jobs),
            embed_ms=round((t1 - t0) * 1000, 2),
            store_ms=round((time.perf_counter() - t1) * 1000, 2),
        )
        return replies

    def before_batch(self, work: list[tuple[Job, Any]]) -> None:
        """Called with the batch's valid requests before anything runs (readers catch up)."""

    def run_batch(self, work: list[tuple[Job, Any]], vectors: Vectors):
        return [
            self.reply(job, partial(self.execute, job, params, vectors)) for job, params in work
        ]

    def reply(self, job: Job, fn: Callable[[], Any]) -> Reply:
        """Run one request; its reply carries the seq applied once it ran."""
        return reply_to(job, fn, seq_of=lambda: self.store.last_seq)

    def check_text(self, method: str, params: Any) -> None:
        """Refuse oversized text before it costs an embedding."""
        if method == Method.MEMORY_REMEMBER:
            fields = [("text", params.text)]
            if params.embed_text is not None:
                fields.append(("embed_text", params.embed_text))
        elif method in RECALLS:
            fields = [("query", params.query)]
        elif method == Method.MEMORY_UPDATE and params.text is not None:
            fields = [("text", params.text)]
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

    def remember_inputs(self, remembers: list[Any]) -> list[tuple[str, str | None]]:
        """``(text to embed, context text or None)`` for a batch's remembers, in arrival
        order (the writer adds episode context: ``workers/store/context.py``)."""
        return [(params.embed_text or params.text, None) for params in remembers]

    def embed_all(self, work) -> tuple[Vectors, dict[str, p.TrustyError]]:
        remembers = [params for job, params in work if job.request.method == Method.MEMORY_REMEMBER]
        inputs = iter(self.remember_inputs(remembers) if remembers else [])
        needs = [
            (job.request.id, next(inputs) if job.request.method == Method.MEMORY_REMEMBER
             else (params.query, None))
            for job, params in work
            if job.request.method in _EMBEDS_FIRST
        ]  # fmt: skip
        if not needs:
            return {}, {}
        texts = list(dict.fromkeys(t for _, pair in needs for t in pair if t is not None))
        try:
            block = self.embedder.encode(texts)
        except p.TrustyError as exc:
            self.log.warning("embedding failed", error=exc.message)
            err = p.TrustyError(p.ErrorCode.EMBEDDER_UNAVAILABLE, f"embedder: {exc.message}")
            return {}, {rid: err for rid, _ in needs}
        row = {text: i for i, text in enumerate(texts)}
        vectors = {}
        for rid, (text, ctx) in needs:
            vec = block[row[text]]
            if ctx is not None:
                vec = context.Mixed(context.mix(vec, block[row[ctx]]), vec, ctx)
            vectors[rid] = vec
        return vectors, {}

    def execute(self, job: Job, params, vectors: Vectors):
        method = job.request.method
        if method in RECALLS:
            hits = self.store.recall(
                params.query,
                vectors[job.request.id],
                params.top_k,
                room=params.room,
                tag=params.tag,
                deep=method == Method.MEMORY_RECALL_DEEP,
                count=params.count,
            )
            return RecallResult(palace=self.palace, query=params.query, results=hits)
        handler = self.handlers.get(method)
        if handler is None:
            raise p.TrustyError(p.ErrorCode.UNKNOWN_METHOD, f"unknown method: {method}")
        return handler(self, params)

    def on_stop(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except p.TrustyError as exc:  # a full disk: the index snapshot waits, no data
                self.log.warning("closing the palace failed", error=exc.message)
        self.embedder.client.close()


# Reads that need no vector: one line each, ``(worker, params) -> result``.
READ_HANDLERS: dict[str, Callable[[PalaceWorker, Any], Any]] = {
    Method.MEMORY_LIST: lambda w, params: ListResult(palace=w.palace, drawers=w.store.list(params)),
    Method.KG_QUERY: lambda w, params: w.store.kg_query(params.subject, params.as_of),
    Method.KG_HISTORY: lambda w, params: kg_history(w.store, params),
    Method.MEMORY_SEARCH: lambda w, params: search(w.store, params),
    Method.PALACE_STATS: lambda w, params: _stats(w),
    Method.DRAWER_GET: lambda w, params: w.store.get(params.drawer_id),
    Method.PALACE_INFO: lambda w, params: w.store.info(),
    Method.NOOP: lambda w, params: {},
    Method.PALACE_EXPORT: lambda w, params: w.guard.export(
        w.store, bulk.export_page(w.store, params)
    ),
    Method.ARCHIVE_LIST: lambda w, params: archive.archive_list(w.store, params),
}


def _stats(w: PalaceWorker) -> PalaceStats:
    """``palace_stats``, with the drawers whose text had credentials redacted."""
    result = stats(w.store, w.role)
    result.redacted_count = w.store.db.conn.execute(
        "SELECT count(*) FROM drawers WHERE redacted > 0"
    ).fetchone()[0]
    return result


def _error(job: Job, exc: p.TrustyError) -> bytes:
    return p.error_response(job.request.id, exc.code, exc.message)
