"""A blocking call to the broker: ``Caller(config).call(method, params, palace=...)``.

What every process that calls the broker shares: the client library (``client.sync``
adds starting the daemon and typed helpers), a palace worker asking the embedder for
vectors, the dreamer. One DEALER socket to the broker's frontend (or to a given endpoint:
a remote worker's backend). While it waits for an answer it keeps an eye on the daemon: if
the daemon died or was replaced (its pid changed), it opens a fresh socket and sends the
same request again. Every method is safe to resend: ``memory_remember`` carries a drawer
id chosen here (``prepare_params``), so a write that was committed before the crash is
found, not duplicated.

Read-your-writes: a caller keeps, per palace, the highest change-log seq its writes got
back and sends it with its reads of that palace (``SeqTracker``), so a reader process that
answers them has applied every write this caller made.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Self

import msgspec
import zmq

from trusty_memory.common import protocol as p
from trusty_memory.common import transport
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.daemon_address import daemon_pid, frontend, is_local
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


class Caller:
    """One DEALER socket to the broker and one request at a time on it: ``call`` sends,
    waits, and sends again when the daemon was replaced or a tcp link came back. It never
    starts a daemon (``client.sync.Client`` does, where allowed)."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        background: bool = False,
        endpoint: str | None = None,
    ) -> None:
        self.config = config or load_config()
        # A broker socket to use instead of the daemon's frontend (a remote worker's
        # backend: ``workers/palace.py``).
        self.endpoint = endpoint
        self.background = background  # the daemon's own traffic (see protocol.Request)
        self.ctx: zmq.SyncContext = zmq.Context.instance()
        self.socket: zmq.SyncSocket | None = None
        self.link: transport.LinkWatch | None = None  # tcp: drops and refusals
        self.pid: int | None = None
        self.seqs = SeqTracker()

    def __enter__(self) -> Self:
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
        """A fresh socket to the daemon (started first where a subclass allows), kept as
        ``socket``."""
        self.start_daemon()
        self.close()
        endpoint = self.endpoint or frontend(self.config) or self.config.daemon_endpoint
        self.socket = sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        transport.secure_connect(sock, endpoint, self.config)
        self.link = transport.LinkWatch(sock, endpoint) if transport.is_tcp(endpoint) else None
        sock.connect(endpoint)
        self.pid = daemon_pid(self.config) if self._local() else None
        return sock

    def start_daemon(self) -> None:
        """Called before every connect: a caller that may start a daemon does it here."""

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
                sock = self._connect()  # a fresh socket (and a daemon, where allowed)
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
