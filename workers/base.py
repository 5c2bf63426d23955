"""The loop every worker process runs behind the broker's backend socket.

A worker connects a DEALER to the broker, announces itself with ``W_READY`` and then
serves requests. Unlike a Majordomo worker it does not take one request at a time: the
broker pushes requests as they arrive and the worker drains *all* that are waiting into a
batch. Batching is the point: a palace worker embeds every pending text in one embedder
call and commits every pending write in one transaction, and the embedder runs one model
forward pass for everything queued across palaces.

Liveness is Paranoid-Pirate style: the worker heartbeats when idle, treats a broker that
has been silent for too long as gone (reconnects and says ``W_READY`` again), and exits
when the process that spawned it is no longer its parent.

A remote worker (``remote=True``: ``trusty-memory worker`` on another host) has no parent
to outlive and nobody to restart it, so it never gives up: told to go away (its broker
stopped, did not know it after a network drop, or already has a writer for its palace)
it waits a moment, connects again and says ``W_READY``; it stops on SIGTERM/SIGINT only.
"""

from __future__ import annotations

import functools
import gc
import os
import signal
import socket
import time
from dataclasses import dataclass

import zmq

from trusty_memory.common import home, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config


@dataclass
class Job:
    """One request taken off the socket, with where its reply must go."""

    client: bytes
    request: p.Request


@dataclass
class Reply:
    client: bytes
    rid: str
    frame: bytes


REJOIN_MIN_S = 0.5
REJOIN_MAX_S = 10.0


class Worker:
    """Subclasses set ``service`` and ``role`` and implement ``handle_batch``."""

    service: str = ""
    role: str = "writer"
    batch_max: int = 256

    def __init__(self, config: Config, log, *, remote: bool = False) -> None:
        self.config = config
        self.log = log
        self.remote = remote
        self.ctx: zmq.SyncContext = zmq.Context.instance()
        self.socket: zmq.SyncSocket | None = None
        self.running = True
        self.parent_pid = None if remote else home.expected_parent()
        self.rejoin_at: float | None = None  # a remote worker told to go: when to return
        self.rejoin_s = REJOIN_MIN_S
        self.last_broker_msg = time.monotonic()
        self.last_sent = 0.0
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    # -- hooks -------------------------------------------------------------------

    def handle_batch(self, jobs: list[Job]) -> list[Reply]:
        raise NotImplementedError

    def on_idle(self) -> None:
        """Called once per heartbeat interval while no requests come (snapshots, flushes)."""

    def on_stop(self) -> None:
        """Called once before exit (save the index, close files)."""

    def release_memory(self) -> None:
        """Once idle after work: give memory back to the OS."""
        release_freed_memory()

    def applied_seq(self) -> int | None:
        """The palace change-log seq this worker has applied, told to the broker with each
        reply and heartbeat (None: not a palace worker)."""
        return None

    # -- the loop ----------------------------------------------------------------

    def run(self) -> int:
        self._connect()
        gc.freeze()  # start-up's objects live for good: keep them out of full collections
        heartbeat = self.config.broker.heartbeat_s
        expiry = self.config.broker.worker_expiry_s
        worked = False  # since the last release of freed memory
        idle_at = time.monotonic() + heartbeat  # the broker's heartbeats do not count as work
        try:
            while self.running:
                if self.rejoin_at is not None:
                    self._rejoin_when_due(self.rejoin_at)
                    continue
                if self._broker().poll(int(heartbeat * 1000), zmq.POLLIN):
                    jobs = self._drain()
                    if jobs:
                        self._send_replies(self.handle_batch(jobs))
                        worked = True
                        idle_at = time.monotonic() + heartbeat
                        continue
                now = time.monotonic()
                if now >= idle_at:
                    try:
                        self.on_idle()
                    except Exception as exc:  # e.g. a full disk: retried at the next idle
                        self.log.warning("idle work failed", error=repr(exc))
                    if worked:
                        self.release_memory()
                        worked = False
                    idle_at = now + heartbeat
                if now - self.last_sent >= heartbeat:
                    self._send([p.W_HEARTBEAT, *self._seq_frame()])
                if now - self.last_broker_msg > expiry:
                    self.log.warning("broker silent; reconnecting", silent_s=expiry)
                    self._connect()
                if self.parent_pid is not None and os.getppid() != self.parent_pid:
                    self.log.info("parent gone; stopping")
                    break
        finally:
            self.on_stop()
            if self.socket is not None:
                try:
                    self.socket.send_multipart([p.W_DISCONNECT], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
                self.socket.close(linger=500)
        return 0

    def _connect(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=0)
        self.socket = self.ctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        transport.secure_connect(self.socket, self.config.backend, self.config)
        self.socket.connect(self.config.backend)
        ready = p.Ready(service=self.service, role=self.role, pid=os.getpid())
        if self.remote:
            ready.remote, ready.host = True, socket.gethostname()
        self._send([p.W_READY, p.encode(ready)])
        self.last_broker_msg = time.monotonic()

    def _broker(self) -> zmq.SyncSocket:
        """The socket to the broker: ``run`` connects it first, and it is never unset."""
        assert self.socket is not None, "the worker is not connected: run() connects it"
        return self.socket

    def _rejoin_when_due(self, rejoin_at: float) -> None:
        """A remote worker the broker sent away: connect again once its pause is over
        (doubling up to ``REJOIN_MAX_S`` while it keeps being sent away)."""
        wait_s = rejoin_at - time.monotonic()
        if wait_s > 0:
            time.sleep(min(wait_s, 0.2))  # short naps: a signal stops us promptly
            return
        self.rejoin_at = None
        self.log.info("connecting to the broker again", broker=self.config.backend)
        self._connect()

    def _send(self, frames: list[bytes]) -> None:
        self._broker().send_multipart(frames)
        self.last_sent = time.monotonic()

    def _drain(self) -> list[Job]:
        """Take every message waiting on the socket (up to ``batch_max`` requests)."""
        jobs: list[Job] = []
        while len(jobs) < self.batch_max:
            try:
                frames = self._broker().recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.last_broker_msg = time.monotonic()
            command = frames[0] if frames else b""
            if command == p.W_REQUEST and len(frames) == 3:
                client, frame = frames[1], frames[2]
                try:
                    jobs.append(Job(client, p.decode_request(frame)))
                except p.TrustyError as exc:
                    self.log.warning("malformed request", error=exc.message)
                    rid = p.salvage_id(frame)
                    reply = p.error_response(rid, exc.code, exc.message)
                    self._send([p.W_REPLY, client, rid.encode(), reply])
            elif command == p.W_DISCONNECT:
                if self.remote:
                    self.log.info("broker sent us away; rejoining", after_s=self.rejoin_s)
                    self.rejoin_at = time.monotonic() + self.rejoin_s
                    self.rejoin_s = min(self.rejoin_s * 2, REJOIN_MAX_S)
                    break
                self.log.info("broker asked us to stop")
                self.running = False
                break
            elif command == p.W_HEARTBEAT:
                self.rejoin_s = REJOIN_MIN_S  # accepted: the next pause starts short again
                continue
            else:
                self.log.warning("unexpected frame from broker", frames=len(frames))
        return jobs

    def _send_replies(self, replies: list[Reply]) -> None:
        seq = self._seq_frame()
        for r in replies:
            self._send([p.W_REPLY, r.client, r.rid.encode(), r.frame, *seq])

    def _seq_frame(self) -> list[bytes]:
        seq = self.applied_seq()
        return [] if seq is None else [str(seq).encode()]

    def _on_signal(self, signum, frame) -> None:
        self.running = False


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the OS once a burst of work is over.

    glibc keeps memory a process has freed for reuse, so without this a worker stays at the
    peak of its biggest batch for as long as it lives. The embedder went from 220 to 166 MB
    after a batch of long texts; the call takes well under a millisecond. A no-op where the
    C library is not glibc.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """libc's ``malloc_trim``, looked up once among the process's own symbols."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def reply_to(job: Job, fn, seq_of=None) -> Reply:
    """Run ``fn()`` for one job and wrap its result or error into a reply; ``seq_of()``,
    if given, is the palace seq to report once ``fn`` has run."""
    rid = job.request.id
    try:
        result = fn()
        return Reply(job.client, rid, p.ok_response(rid, result, seq_of() if seq_of else 0))
    except p.TrustyError as exc:
        return Reply(job.client, rid, p.error_response(rid, exc.code, exc.message))
    except Exception as exc:  # a bug must cost one request, never the worker
        message = f"{job.request.method}: internal error: {exc!r}"
        return Reply(job.client, rid, p.error_response(rid, p.ErrorCode.INTERNAL, message))
