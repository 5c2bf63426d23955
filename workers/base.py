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

A worker that is working is alive, however long its batch takes: while the main thread
runs a batch (or its idle work: an index snapshot), a thread of its own, the pulse, sends
``W_HEARTBEAT`` every heartbeat interval (``Pulse``). Without it liveness hung on the
batch finishing: under CPU contention (a build beside the daemon, load ~10 on 2 cores)
one import batch kept the palace writer and the embedder silent for more than
``[broker] worker_expiry_s``, the supervisor SIGKILLed both as dead, twice, and the import
stored nothing. Bounding every batch in time instead would need a heartbeat inside every
long step (a forward pass, the wait on the embedder, an hnswlib insert, a SQLite commit,
a snapshot) and still miss the next long step someone adds. The socket is ZeroMQ's, which
one thread at a time may use: the main thread hands it to the pulse under a lock for the
length of the work (``Pulse.busy``) and takes it back, under the same lock, after.

A worker that is truly stuck is still found. A process stopped or wedged in C code that
holds the GIL runs no pulse either: it goes silent and is killed after the expiry, as
before. A main thread blocked forever in Python (a lock, a wait that never ends) keeps the
pulse going, so the pulse covers one piece of work for ``[broker] worker_busy_max_s`` at
most (longer than the longest deadline a client gives, the 1-hour scrub) and then falls
silent, with a log line that says why.

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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import zmq

from trusty_memory.common import home, tracing, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.disk_full import disk_full_error


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
        self.pulse = Pulse(self)
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
        self.pulse.start()
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
                        self._work(jobs)
                        worked = True
                        idle_at = time.monotonic() + heartbeat
                        continue
                now = time.monotonic()
                if now >= idle_at:
                    try:
                        with self.pulse.busy("idle work"):
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
            self.pulse.stop()
            self.on_stop()
            if self.socket is not None:
                try:
                    self.socket.send_multipart([p.W_DISCONNECT], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
                self.socket.close(linger=500)
        return 0

    def parts(self, jobs: list[Job]) -> list[list[Job]]:
        """The order a drained batch runs in, as parts whose replies leave together
        (``PalaceWriter`` puts a bulk write after the calls that came beside it)."""
        return [jobs]

    def _work(self, jobs: list[Job]) -> None:
        """Run the drained jobs part by part, each part's replies sent before the next
        starts. After the first part, requests that arrived meanwhile join the line and
        are ordered again with what is left, so they need not wait for all of it; only
        once, so a steady stream of calls cannot hold a bulk write back for good."""
        pending = self.parts(jobs)
        joined = False
        while pending:
            part = pending.pop(0)
            if tracing.ON:
                self._traced_batch(part)
            else:
                with self.pulse.busy("batch"):
                    replies = self.handle_batch(part)
                self._send_replies(replies)
            if pending and not joined and self.running and self._broker().poll(0, zmq.POLLIN):
                joined = True
                pending = self.parts([job for rest in pending for job in rest] + self._drain())

    def _traced_batch(self, jobs: list[Job]) -> None:
        """One batch with its spans (tracing on): the whole batch and the replies' sends,
        for each traced job in it; the first traced job's id goes on any request the batch
        makes (a palace worker's call to the embedder)."""
        kind = self.trace_kind()
        traces = [job.request.trace for job in jobs if job.request.trace]
        token = tracing.current.set(traces[0] if traces else "")
        started = tracing.now()
        try:
            with self.pulse.busy("batch"):
                replies = self.handle_batch(jobs)
        finally:
            tracing.current.reset(token)
        handled = tracing.now()
        self._send_replies(replies)
        sent = tracing.now()
        for trace in traces:
            tracing.span(trace, f"{kind}.batch", started, handled)
            tracing.span(trace, f"{kind}.send", handled, sent)

    def trace_kind(self) -> str:
        """The actor's name in span stages: ``embedder`` or ``worker``."""
        return "embedder" if self.service.startswith(p.EMBEDDER_SERVICE) else "worker"

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
        """Send from the main thread (never while ``pulse.busy`` has handed the socket over)."""
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
                    if tracing.ON:
                        started = tracing.now()
                        job = Job(client, p.decode_request(frame))
                        if job.request.trace:
                            tracing.span(job.request.trace, f"{self.trace_kind()}.decode", started)
                        jobs.append(job)
                        continue
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


class Pulse:
    """Heartbeats from a thread of their own while the main thread is busy.

    ``busy(what)`` brackets work that does not touch the worker's socket (a batch, idle
    work). For its length the pulse owns the socket: every ``heartbeat_s`` it sends a bare
    ``W_HEARTBEAT`` (no seq frame: the main thread's state is its own while it works), for
    at most ``worker_busy_max_s`` of one piece of work. ZeroMQ allows a socket to move
    between threads with a full memory barrier in between: the lock is that barrier, and
    the main thread takes it to hand the work over and to take the socket back, so no two
    threads ever use the socket at once. The thread does nothing while the main thread is
    not busy: the loop's own heartbeats cover that time.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.interval = worker.config.broker.heartbeat_s
        self.max_busy_s = worker.config.broker.worker_busy_max_s
        self.lock = threading.Lock()
        self.busy_since: float | None = None  # set while the main thread works
        self.what = ""
        self.capped = False  # the cap was logged for the current piece of work
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="pulse", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        with self.lock:  # a heartbeat being sent finishes; none starts after this
            self.busy_since = None

    @contextmanager
    def busy(self, what: str) -> Iterator[None]:
        with self.lock:
            self.busy_since, self.what, self.capped = time.monotonic(), what, False
        try:
            yield
        finally:
            with self.lock:  # the socket is the main thread's again
                self.busy_since = None

    def _run(self) -> None:
        while not self.stopped.wait(self.interval / 2):
            with self.lock:
                if self.busy_since is not None:
                    self._beat(time.monotonic())

    def _beat(self, now: float) -> None:
        """One heartbeat if one is due (called with the lock held, the main thread busy)."""
        assert self.busy_since is not None  # _run checked it under the same lock
        worker = self.worker
        if now - self.busy_since > self.max_busy_s:
            if not self.capped:
                self.capped = True
                worker.log.error(
                    "busy past worker_busy_max_s: heartbeats stop, the supervisor will "
                    "restart this worker",
                    work=self.what,
                    busy_s=round(now - self.busy_since),
                )
            return
        if worker.socket is None or now - worker.last_sent < self.interval:
            return
        try:
            worker.socket.send_multipart([p.W_HEARTBEAT], zmq.NOBLOCK)
        except zmq.ZMQError:
            return  # no broker to hear it (gone, or reconnecting): the main loop deals
        worker.last_sent = now


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
        if tracing.ON and (trace := job.request.trace):
            started = tracing.now()
            result = fn()
            ran = tracing.now()
            reply = Reply(job.client, rid, p.ok_response(rid, result, seq_of() if seq_of else 0))
            tracing.span(trace, f"worker.run {job.request.method}", started, ran)
            tracing.span(trace, "worker.encode", ran)
            return reply
        result = fn()
        return Reply(job.client, rid, p.ok_response(rid, result, seq_of() if seq_of else 0))
    except p.TrustyError as exc:
        return Reply(job.client, rid, p.error_response(rid, exc.code, exc.message))
    except Exception as exc:  # a bug must cost one request, never the worker
        full = disk_full_error(exc, job.request.method)
        if full is not None:  # a full disk is the documented error, not an internal one
            return Reply(job.client, rid, p.error_response(rid, full.code, full.message))
        message = f"{job.request.method}: internal error: {exc!r}"
        return Reply(job.client, rid, p.error_response(rid, p.ErrorCode.INTERNAL, message))
