"""The blocking Python client: ``Client(...).call(method, params, palace=...)``.

One DEALER socket to the broker's frontend. While it waits for an answer it keeps an eye
on the daemon: if the daemon died or was replaced (its pid changed), the client starts
one when allowed, opens a fresh socket and sends the same request again. Every method is
safe to resend: ``memory_remember`` carries a drawer id chosen here, so a write that was
committed before the crash is found, not duplicated.

Read-your-writes: the client keeps, per palace, the highest change-log seq its writes got
back and sends it with its reads of that palace (``SeqTracker``), so a reader process that
answers them has applied every write this client made.

Typed helpers (``remember``, ``recall``...) wrap ``call`` and return the protocol's
result Structs.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec
import zmq

from trusty_memory.client.daemon import daemon_pid, ensure_daemon, frontend, is_local
from trusty_memory.common import protocol as p
from trusty_memory.common import transport
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.messages import (
    DrawerDetail,
    ForgetResult,
    KgInvalidateResult,
    KgQueryResult,
    ListResult,
    PalaceInfo,
    PalaceStats,
    RecallResult,
    SearchResult,
    StoredResult,
    UpdateResult,
)
from trusty_memory.common.methods import PALACE_READ_METHODS, Method

POLL_SLICE_S = 0.25


def prepare_params(method: str, params: Any) -> Any:
    """Give a remember its drawer id here, so resending it is idempotent."""
    if isinstance(params, msgspec.Struct):
        params = msgspec.to_builtins(params)
    if (
        method == Method.MEMORY_REMEMBER
        and isinstance(params, dict)
        and not params.get("drawer_id")
    ):
        params = {**params, "drawer_id": str(uuid.uuid4())}
    return params if params is not None else {}


class SeqTracker:
    """The highest palace seq this client's writes were acknowledged at, per palace."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def min_seq(self, method: str, palace: str | None) -> int:
        """What a read must have applied; 0 for anything else."""
        if palace is None or method not in PALACE_READ_METHODS:
            return 0
        return self.seen.get(palace, 0)

    def note(self, palace: str | None, resp: p.Response) -> None:
        if palace is not None and resp.seq > self.seen.get(palace, 0):
            self.seen[palace] = resp.seq


class Client:
    def __init__(
        self,
        config: Config | None = None,
        *,
        autostart: bool = True,
        background: bool = False,
        endpoint: str | None = None,
    ) -> None:
        self.config = config or load_config()
        self.autostart = autostart
        # A broker socket to use instead of the daemon's frontend (a remote worker's
        # backend: ``workers/palace.py``).
        self.endpoint = endpoint
        self.background = background  # the daemon's own traffic (see protocol.Request)
        self.ctx: zmq.SyncContext = zmq.Context.instance()
        self.socket: zmq.SyncSocket | None = None
        self.link: transport.LinkWatch | None = None  # tcp: drops and refusals
        self.pid: int | None = None
        self.seqs = SeqTracker()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=0)
            self.socket = None
        if self.link is not None:
            self.link.close()
            self.link = None

    def _connect(self) -> zmq.SyncSocket:
        """A fresh socket to the daemon (started first where allowed), kept as ``socket``."""
        if self.autostart and self.endpoint is None:
            ensure_daemon(self.config)
        self.close()
        endpoint = self.endpoint or frontend(self.config) or self.config.daemon_endpoint
        self.socket = sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        transport.secure_connect(sock, endpoint, self.config)
        self.link = transport.LinkWatch(sock, endpoint) if transport.is_tcp(endpoint) else None
        sock.connect(endpoint)
        self.pid = daemon_pid(self.config) if self._local() else None
        return sock

    def _local(self) -> bool:
        return self.endpoint is None and is_local(self.config)

    def _daemon_replaced(self) -> bool:
        return self._local() and daemon_pid(self.config) != self.pid

    def call(
        self,
        method: str,
        params: Any = None,
        *,
        palace: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return its ``data``; raise ``TrustyError`` on error."""
        # Wait a little past the broker's own deadline, so its timeout error (which names
        # the service that was slow) arrives before ours.
        wait_s = (timeout or self.config.broker.request_timeout_s) + 2.0
        rid, frame = p.encode_request(
            method,
            prepare_params(method, params),
            palace=palace,
            timeout_ms=int(timeout * 1000) if timeout else None,
            min_seq=self.seqs.min_seq(method, palace),
            background=self.background,
        )
        sock = self.socket if self.socket is not None else self._connect()
        if self.link is not None:
            self.link.poll()  # a drop and return before this request is no reason to resend it
        sock.send(frame)
        deadline = time.monotonic() + wait_s
        while (remaining := deadline - time.monotonic()) > 0:
            if sock.poll(int(min(remaining, POLL_SLICE_S) * 1000) + 1):
                resp = p.decode_response(sock.recv())
                if resp.id == rid:
                    self.seqs.note(palace, resp)
                    return p.unwrap(resp)
                continue  # a late answer to an earlier, abandoned request
            if self._daemon_replaced() or self._link_back():
                sock = self._connect()  # restarts the daemon if allowed, fresh socket
                sock.send(frame)
        silence = self.link.silence() if self.link is not None else None
        self.close()  # a lost request must not leave its answer in the next call's way
        if silence is not None:  # every handshake failed: a wrong server key, most likely
            raise p.TrustyError(p.ErrorCode.NO_WORKER, f"{method}: {silence}")
        raise p.TrustyError(p.ErrorCode.TIMEOUT, f"{method}: no answer within {wait_s:.1f}s")

    def _link_back(self) -> bool:
        """tcp: True when the connection came back after a drop (what was sent before it
        may be lost: send it again). A key the daemon refuses is an error at once."""
        if self.link is None:
            return False
        back = self.link.poll()
        if self.link.refused is not None:
            refused = self.link.refused
            self.close()
            raise p.TrustyError(p.ErrorCode.NO_WORKER, refused)
        return back

    # -- typed helpers -------------------------------------------------------------

    def ping(self) -> dict:
        return self.call(Method.PING)

    def status(self) -> dict:
        return self.call(Method.STATUS)

    def palace_list(self) -> list[str]:
        return self.call(Method.PALACE_LIST)["palaces"]

    def palace_create(self, name: str, description: str | None = None) -> dict:
        return self.call(Method.PALACE_CREATE, {"name": name, "description": description})

    def palace_delete(self, name: str, *, discard_empty: bool = False) -> dict:
        """Stop the palace's workers and move it to the archive (``palace_restore`` brings it
        back); with ``discard_empty`` a palace that holds nothing is removed instead."""
        params = {"name": name, "discard_empty": discard_empty}
        return self.call(Method.PALACE_DELETE, params, timeout=self._move_timeout())

    def palace_rename(self, name: str, new_name: str) -> dict:
        params = {"name": name, "new_name": new_name}
        return self.call(Method.PALACE_RENAME, params, timeout=self._move_timeout())

    def _move_timeout(self) -> float:
        """A delete or rename waits for the palace's workers, killed after the grace."""
        broker = self.config.broker
        return max(broker.request_timeout_s, broker.close_grace_s + 10.0)

    def palace_restore(
        self, name: str, *, entry: str | None = None, new_name: str | None = None
    ) -> dict:
        params = {"name": name, "entry": entry, "new_name": new_name}
        return self.call(Method.PALACE_RESTORE, params)

    def palace_forget_remote(self, name: str) -> dict:
        """Let local workers serve ``name`` again, a palace a remote writer served (refused
        while one does): ``{"palace", "host", "local_copy"}``."""
        return self.call(Method.PALACE_FORGET_REMOTE, {"name": name})

    def palace_archived(self) -> list[dict]:
        return self.call(Method.PALACE_ARCHIVED)["palaces"]

    def scale(self, palace: str, readers: int) -> dict:
        return self.call(Method.PALACE_SCALE, {"name": palace, "readers": readers})

    def palace_info(self, palace: str) -> PalaceInfo:
        return p.convert(self.call(Method.PALACE_INFO, palace=palace), PalaceInfo)

    def remember(self, palace: str, text: str, **fields: Any) -> StoredResult:
        params = {"text": text, **fields}
        return p.convert(self.call(Method.MEMORY_REMEMBER, params, palace=palace), StoredResult)

    def recall(self, palace: str, query: str, top_k: int = 10, deep: bool = False, **filters):
        method = Method.MEMORY_RECALL_DEEP if deep else Method.MEMORY_RECALL
        params = {"query": query, "top_k": top_k, **filters}
        return p.convert(self.call(method, params, palace=palace), RecallResult)

    def list(self, palace: str, **params: Any) -> ListResult:
        return p.convert(self.call(Method.MEMORY_LIST, params, palace=palace), ListResult)

    def forget(self, palace: str, drawer_id: str) -> ForgetResult:
        data = self.call(Method.MEMORY_FORGET, {"drawer_id": drawer_id}, palace=palace)
        return p.convert(data, ForgetResult)

    def kg_assert(self, palace: str, subject: str, predicate: str, object: str, **kw) -> dict:
        params = {"subject": subject, "predicate": predicate, "object": object, **kw}
        return self.call(Method.KG_ASSERT, params, palace=palace)

    def kg_query(self, palace: str, subject: str, as_of: str | None = None) -> KgQueryResult:
        """The subject's active triples; with ``as_of`` (RFC 3339), those active then."""
        params = {"subject": subject} if as_of is None else {"subject": subject, "as_of": as_of}
        data = self.call(Method.KG_QUERY, params, palace=palace)
        return p.convert(data, KgQueryResult)

    # -- what ``serve --tools extended`` offers, for any client ---------------------------

    def get(self, palace: str, drawer_id: str) -> DrawerDetail:
        """One whole drawer by id (``drawer_get``); ``DRAWER_NOT_FOUND`` names the archive
        when the drawer is there."""
        data = self.call(Method.DRAWER_GET, {"drawer_id": drawer_id}, palace=palace)
        return p.convert(data, DrawerDetail)

    def update(self, palace: str, drawer_id: str, **fields: Any) -> UpdateResult:
        """Change a drawer in place: ``text``, ``room``, ``tags``, ``importance`` (see
        ``messages.UpdateParams``); the previous version goes to the archive."""
        data = self.call(Method.MEMORY_UPDATE, {"drawer_id": drawer_id, **fields}, palace=palace)
        return p.convert(data, UpdateResult)

    def search(self, palace: str, query: str | None = None, **params: Any) -> SearchResult:
        """A page of keyword-search hits, or of all drawers last written first without a query;
        ``room``, ``tag``, ``since``, ``until``, ``limit`` and ``cursor`` (the previous
        page's ``next_cursor``) as ``messages.SearchParams`` describes them."""
        data = self.call(Method.MEMORY_SEARCH, {"query": query, **params}, palace=palace)
        return p.convert(data, SearchResult)

    def kg_history(self, palace: str, subject: str, predicate: str | None = None) -> KgQueryResult:
        """Every triple of ``subject`` (one predicate's, if given), closed ones too."""
        params = {"subject": subject, "predicate": predicate}
        return p.convert(self.call(Method.KG_HISTORY, params, palace=palace), KgQueryResult)

    def kg_invalidate(
        self, palace: str, subject: str, predicate: str, object: str | None = None
    ) -> KgInvalidateResult:
        """Close the active (subject, predicate) fact without a replacement."""
        params = {"subject": subject, "predicate": predicate, "object": object}
        data = self.call(Method.KG_INVALIDATE, params, palace=palace)
        return p.convert(data, KgInvalidateResult)

    def palace_stats(self, palace: str) -> PalaceStats:
        """Counts, index lag, last dream pass and sizes, from whichever worker answers."""
        return p.convert(self.call(Method.PALACE_STATS, palace=palace), PalaceStats)
