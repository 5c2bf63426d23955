"""A palace writer answers a session's call before a bulk write that was waiting beside it
(issue 39: mining yields to interactive calls). Real daemon, writer and model: one client
pipelines two large imports, another asks a recall while the first import runs; the
recall's answer comes back before the second import's, where the writer used to run the
queued import first and send both answers together.

Covers: workers/writer.py workers/base.py client/aio.py
"""

from __future__ import annotations

import asyncio
import time
import uuid

import numpy as np

from tests.conftest import Daemon
from trusty_memory.client.aio import AsyncClient
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.methods import BULK_METHODS
from trusty_memory.workers.base import Job
from trusty_memory.workers.writer import PalaceWriter

DRAWERS = 600  # per import: several hundred ms of index inserts in the writer


def _import(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((DRAWERS, 384)).astype("<f4")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return {
        "drawers": [
            {"drawer_id": str(uuid.uuid4()), "content": f"note {seed}-{i}", "vector": v.tobytes()}
            for i, v in enumerate(vectors)
        ]
    }


def test_a_recall_is_answered_before_an_import_queued_beside_it(daemon: Daemon):
    with Client(daemon.config, autostart=False) as c:
        c.palace_create("order")
        c.remember("order", "the staging database listens on port 5433")
        c.recall("order", "which port does staging use")  # the query path is warm

    async def run() -> dict[str, float]:
        done: dict[str, float] = {}

        async def timed(name: str, client: AsyncClient, method: str, params: dict) -> None:
            await client.call(method, params, palace="order", timeout=120)
            done[name] = time.monotonic()

        first, second = _import(1), _import(2)
        async with (
            AsyncClient(daemon.config, autostart=False) as bulk,
            AsyncClient(daemon.config, autostart=False) as session,
        ):
            await session.call("palace_list", {})  # connected before the clock starts
            imports = [
                asyncio.create_task(timed("import 1", bulk, "palace_import", first)),
                asyncio.create_task(timed("import 2", bulk, "palace_import", second)),
            ]
            await asyncio.sleep(0.15)  # the writer is inside import 1 by now
            assert "import 1" not in done, "import 1 finished too fast to test the order"
            await timed(
                "recall", session, "memory_recall", {"query": "which port does staging use"}
            )
            await asyncio.gather(*imports)
        return done

    done = asyncio.run(run())
    assert done["recall"] < done["import 2"], done


def _job(client: bytes, method: str) -> Job:
    return Job(client, p.Request(id=str(uuid.uuid4()), method=method))


def test_bulk_writes_go_after_other_clients_calls_and_one_clients_order_holds():
    writer = PalaceWriter.__new__(PalaceWriter)  # parts() reads nothing of the instance
    imp, recall, remember = (
        _job(b"miner", "palace_import"),
        _job(b"agent", "memory_recall"),
        _job(b"agent", "memory_remember"),
    )
    assert "palace_import" in BULK_METHODS and "dream_merge" in BULK_METHODS
    assert writer.parts([imp, recall, remember]) == [[recall, remember], [imp]]
    assert writer.parts([recall, remember]) == [[recall, remember]]
    second = _job(b"miner", "palace_import")
    assert writer.parts([imp, second]) == [[imp], [second]]
    # The miner's own read after its import stays after it: nothing moves.
    own = _job(b"miner", "memory_recall")
    assert writer.parts([imp, recall, own]) == [[imp, recall, own]]
