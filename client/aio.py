"""The asyncio Python client, used by the MCP front end.

One DEALER socket carries any number of concurrent calls; a reader task hands each reply
to the future waiting for its id. Like the blocking client it notices a daemon that died
or was replaced while calls were waiting, reconnects (starting a daemon if allowed) and
resends those calls, which is safe because every method is idempotent given the drawer
id that ``prepare_params`` assigns.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import zmq
import zmq.asyncio

from trusty_memory.client.autostart import ensure_daemon
from trusty_memory.common import protocol as p
from trusty_memory.common import tracing, transport
from trusty_memory.common.caller import POLL_SLICE_S, SeqTracker, prepare_params
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.daemon_address import daemon_pid, frontend, is_local
from trusty_memory.common.messages import (
    DrawerDetail,
    KgQueryResult,
    PalaceStats,
    SearchResult,
    UpdateResult,
)
from trusty_memory.common.methods import Method


class AsyncClient:
    def __init__(self, config: Config | None = None, *, autostart: bool = True) -> None:
        self.config = config or load_config()
        self.autostart = autostart
        self.ctx = zmq.asyncio.Context.instance()
        self.socket: zmq.asyncio.Socket | None = None
        self.link: transport.LinkWatch | None = None  # tcp: drops and refusals
        self.pid: int | None = None
        self.seqs = SeqTracker()  # read-your-writes, per palace (see common/caller.py)
        self.generation = 0
        self.waiting: dict[str, asyncio.Future] = {}
        self.reader: asyncio.Task | None = None
        self._connect_lock = asyncio.Lock()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
            self.reader = None
        if self.socket is not None:
            self.socket.close(linger=0)
            self.socket = None
        if self.link is not None:
            self.link.close()
            self.link = None

    async def _connect(self, seen_generation: int) -> None:
        """(Re)open the socket unless another call already did since ``seen_generation``."""
        async with self._connect_lock:
            if self.generation != seen_generation and self.socket is not None:
                return
            if self.autostart:
                await asyncio.to_thread(ensure_daemon, self.config)
            await self.close()
            endpoint = frontend(self.config) or self.config.daemon_endpoint
            self.socket = self.ctx.socket(zmq.DEALER)
            self.socket.setsockopt(zmq.LINGER, 0)
            transport.secure_connect(self.socket, endpoint, self.config)
            if transport.is_tcp(endpoint):
                self.link = transport.LinkWatch(self.socket, endpoint)
            self.socket.connect(endpoint)
            self.pid = daemon_pid(self.config) if is_local(self.config) else None
            self.generation += 1
            self.reader = asyncio.create_task(self._read(self.socket))

    async def _read(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frame = await sock.recv()
            try:
                resp = p.decode_response(frame)
            except p.TrustyError:
                continue
            fut = self.waiting.get(resp.id)
            if fut is not None and not fut.done():
                fut.set_result(resp)

    def _open_socket(self) -> zmq.asyncio.Socket:
        """The socket ``_connect`` opened. It is set whenever a call reaches here: ``_connect``
        clears it only under its lock, and sets it again before ``generation`` moves."""
        assert self.socket is not None, "the client was closed during a call"
        return self.socket

    def _daemon_replaced(self) -> bool:
        return is_local(self.config) and daemon_pid(self.config) != self.pid

    def _link_back(self) -> bool:
        """tcp: True when the connection came back after a drop (what was sent before it
        may be lost: send it again). A key the daemon refuses is an error at once."""
        if self.link is None:
            return False
        back = self.link.poll()
        if self.link.refused is not None:
            raise p.TrustyError(p.ErrorCode.NO_WORKER, self.link.refused)
        return back

    async def call(
        self,
        method: str,
        params: Any = None,
        *,
        palace: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return its ``data``; raise ``TrustyError`` on error."""
        trace = tracing.current.get() if tracing.ON else ""
        started = sent = tracing.now() if trace else 0
        wait_s = (timeout or self.config.broker.request_timeout_s) + 2.0
        rid, frame = p.encode_request(
            method,
            prepare_params(method, params),
            palace=palace,
            timeout_ms=int(timeout * 1000) if timeout else None,
            min_seq=self.seqs.min_seq(method, palace),
        )
        if trace:
            tracing.span(trace, "host.daemon.encode", started)
        if self.socket is None:
            await self._connect(self.generation)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        try:
            sent_generation = self.generation
            if self.link is not None:
                self.link.poll()  # a drop and return before this request: no reason to resend
            await self._open_socket().send(frame)
            if trace:
                sent = tracing.now()
                tracing.span(trace, "host.daemon.send", started, sent)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_s
            while (remaining := deadline - loop.time()) > 0:
                done, _ = await asyncio.wait({fut}, timeout=min(remaining, POLL_SLICE_S))
                if done:
                    resp = fut.result()
                    self.seqs.note(palace, resp)
                    if trace:
                        tracing.span(trace, "host.daemon.wait", sent)
                    return p.unwrap(resp)
                if self._daemon_replaced() or self._link_back():
                    await self._connect(sent_generation)
                if self.generation != sent_generation:
                    sent_generation = self.generation
                    await self._open_socket().send(frame)
            raise p.TrustyError(p.ErrorCode.TIMEOUT, f"{method}: no answer within {wait_s:.1f}s")
        finally:
            self.waiting.pop(rid, None)

    # -- named calls: what ``serve --tools extended`` offers, for in-process front ends ---

    async def get(self, palace: str, drawer_id: str) -> DrawerDetail:
        """One whole drawer by id (``drawer_get``)."""
        data = await self.call(Method.DRAWER_GET, {"drawer_id": drawer_id}, palace=palace)
        return p.convert(data, DrawerDetail)

    async def update(self, palace: str, drawer_id: str, **fields: Any) -> UpdateResult:
        """Change a drawer in place (``messages.UpdateParams``); the previous version goes
        to the archive."""
        data = await self.call(
            Method.MEMORY_UPDATE, {"drawer_id": drawer_id, **fields}, palace=palace
        )
        return p.convert(data, UpdateResult)

    async def search(self, palace: str, query: str | None = None, **params: Any) -> SearchResult:
        """A page of keyword-search hits (or, without a query, drawers last written first); pass
        the result's ``next_cursor`` as ``cursor`` for the next page."""
        data = await self.call(Method.MEMORY_SEARCH, {"query": query, **params}, palace=palace)
        return p.convert(data, SearchResult)

    async def kg_history(
        self, palace: str, subject: str, predicate: str | None = None
    ) -> KgQueryResult:
        """Every triple of ``subject`` (one predicate's, if given), closed ones too."""
        params = {"subject": subject, "predicate": predicate}
        return p.convert(await self.call(Method.KG_HISTORY, params, palace=palace), KgQueryResult)

    async def palace_stats(self, palace: str) -> PalaceStats:
        """Counts, index lag, last dream pass and sizes of one palace."""
        return p.convert(await self.call(Method.PALACE_STATS, palace=palace), PalaceStats)
