"""Embedder worker: holds the model and embeds texts for every palace.

Each loop turn drains all waiting ``embed`` requests (from any number of palace workers)
and runs them through the model as one batch, which is where throughput under many
concurrent sessions comes from. Vectors are cached by a hash of the text, so re-embedding
the same query or a retried write costs a dictionary lookup.

The model is loaded before the worker says READY: the broker keeps embed requests queued
until then, and a half-loaded embedder is never handed work.

With ``--bulk`` the same worker serves the bulk lane (``embed_bulk``: mine and import) at
a lower CPU priority (``[embedder] bulk_nice``). Bulk batches are long (a hundred
exchanges take seconds); in the interactive embedder they would hold every recall and
remember queued behind them, and the kernel cannot preempt work inside one process. In a
process of its own at a higher niceness, the kernel gives the interactive embedder the CPU
whenever it wants it, and the bulk lane everything left over.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from trusty_memory.common import protocol as p
from trusty_memory.common import tracing
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.logs import setup_logging
from trusty_memory.common.messages import EmbedParams, EmbedResult
from trusty_memory.common.methods import Method, decode_params
from trusty_memory.workers.base import Job, Reply, Worker
from trusty_memory.workers.embedder.embedding import make_embedder


class VectorCache:
    """A bounded LRU of text hash -> vector."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[bytes, np.ndarray] = OrderedDict()

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, key: bytes) -> np.ndarray | None:
        vec = self.items.get(key)
        if vec is not None:
            self.items.move_to_end(key)
        return vec

    def put(self, key: bytes, vec: np.ndarray) -> None:
        self.items[key] = vec
        self.items.move_to_end(key)
        while len(self.items) > self.capacity:
            self.items.popitem(last=False)


class EmbedderWorker(Worker):
    service = p.EMBEDDER_SERVICE
    role = "embedder"

    method = Method.EMBED

    def __init__(self, config: Config, log, *, bulk: bool = False) -> None:
        super().__init__(config, log)
        settings = config.embedder
        if bulk:
            self.service, self.method = p.EMBEDDER_BULK_SERVICE, Method.EMBED_BULK
            lower = min(19, settings.bulk_nice) - os.nice(0)  # relative to the daemon's
            if lower > 0:  # never raised: that needs privileges, and bulk never outranks
                try:
                    os.nice(lower)
                except OSError as exc:  # a sandbox's syscall filter: serve, unniced
                    log.warning("bulk lane left at normal priority", error=repr(exc))
        cache_root = Path(settings.compiled_dir).expanduser() if settings.compiled_dir else None
        self.model = make_embedder(
            settings.model, settings.threads, settings.compiled, cache_root, log
        )
        self.cache = VectorCache(settings.cache_entries)
        self.batch_max = settings.batch_max

    def run(self) -> int:
        started = time.monotonic()
        self.model.load()
        self.log.info(
            "model loaded",
            model=self.model.name,
            serving=getattr(self.model, "mode", "n/a"),
            seconds=round(time.monotonic() - started, 2),
        )
        return super().run()

    def handle_batch(self, jobs: list[Job]) -> list[Reply]:
        replies: list[Reply] = []
        wanted: list[tuple[Job, list[bytes]]] = []
        missing: dict[bytes, str] = {}
        found: dict[bytes, np.ndarray] = {}
        for job in jobs:
            try:
                if job.request.method != self.method:
                    raise p.TrustyError(
                        p.ErrorCode.UNKNOWN_METHOD,
                        f"embedder: unknown method: {job.request.method}",
                    )
                params: EmbedParams = decode_params(self.method, job.request.params)
            except p.TrustyError as exc:
                replies.append(Reply(job.client, job.request.id, _error(job, exc)))
                continue
            keys = [self.cache.key(t) for t in params.texts]
            for key, text in zip(keys, params.texts, strict=True):
                vec = self.cache.get(key)
                if vec is None:
                    missing[key] = text
                else:
                    found[key] = vec
            wanted.append((job, keys))
        if missing:
            try:
                if tracing.ON:
                    started = tracing.now()
                    vectors = self.model.encode(list(missing.values()))
                    ended = tracing.now()
                    for trace in {j.request.trace for j, _ in wanted if j.request.trace}:
                        tracing.span(trace, "embedder.forward", started, ended)
                else:
                    vectors = self.model.encode(list(missing.values()))
            except Exception as exc:  # the model failing must not take the worker down
                self.log.error("embedding failed", error=repr(exc))
                err = p.TrustyError(p.ErrorCode.EMBEDDING_FAILED, f"embedding failed: {exc!r}")
                return replies + [Reply(j.client, j.request.id, _error(j, err)) for j, _ in wanted]
            for key, vec in zip(missing, vectors, strict=True):
                self.cache.put(key, vec)
                found[key] = vec
        for job, keys in wanted:
            block = np.stack([found[k] for k in keys]) if keys else np.zeros((0, 0))
            result = EmbedResult(vectors=block.astype(np.float32).tobytes(), dim=self.model.dim)
            replies.append(Reply(job.client, job.request.id, p.ok_response(job.request.id, result)))
        return replies


def _error(job: Job, exc: p.TrustyError) -> bytes:
    return p.error_response(job.request.id, exc.code, exc.message)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trusty-memory-embedder")
    parser.add_argument("--bulk", action="store_true", help="serve embed_bulk, niced")
    args = parser.parse_args(argv)
    config = load_config()
    log = setup_logging("embedder-bulk" if args.bulk else "embedder", default_level="info")
    return EmbedderWorker(config, log, bulk=args.bulk).run()


if __name__ == "__main__":
    sys.exit(main())
