"""The broker: one ``mediate()`` loop between clients and workers.

Modelled on the ZeroMQ guide's Majordomo broker. Clients (MCP front ends, the CLI, the
Python client, palace workers asking for embeddings, the dreamer) talk to the frontend
ROUTER; workers talk to the backend ROUTER. Each loop turn drains both sockets, then does
housekeeping: reap and restart crashed workers, expire request deadlines, heartbeat, and
stop palaces that have been idle too long.

Routing is by service: ``embedder`` for ``embed``, ``palace:<name>`` for palace methods.
A palace's service is one writer (supervisor slot 0) and 0..N readers (slots 1..N, the
palace's ``readers`` setting, changed at run time by ``palace_scale``). Writes always go
to the writer; a read goes to the least-loaded live worker, a reader when it is as free
as the writer. The readers start once the writer is up (it creates and migrates the
SQLite file they open read-only). Requests for a service with no live worker wait in the
service's queue (bounded) while the supervisor starts one. Every request the broker accepts is
answered exactly once: by a worker, by a timeout error at its deadline, or by an error
when its worker crashes twice in a row while holding it. A request whose id its client
already has in flight is refused at once: its answer could not be told from the first's.

Deleting or renaming a palace moves its directory, which its workers hold open, so the
broker does it, through ``PalaceMoves`` (``palace_moves.py``), which owns the palaces
being moved; ``ReaderScaling`` (``reader_scaling.py``) owns each palace's readers and the
autoscaler. Each sees the broker through a small ``Protocol`` of what it uses, and none
imports this module. The other modules beside this one: ``records.py`` (what is kept per
request, worker, service), ``status_report.py`` (``status``), ``supervisor.py`` (the
processes themselves).

Remote workers (``trusty-memory worker --broker tcp://...``) register on the backend like
local ones, marked ``remote``: the broker routes to them the same way but never starts,
signals or idles them out, and spawns no local worker (writer or reader) for a palace a
remote writer has served since this daemon started, nor for any palace with ``[broker]
local_workers = false``: requests for such a palace wait in its queue (to their deadline)
until a remote writer registers. A remote worker that dies or loses the network is found
by the backend's heartbeats (an unroutable send, or its silence); what it held is sent
again to another worker or, after a second loss, answered with an error. Remote workers
reach the embedder through the backend itself (see ``protocol``): such a request's client
identity is marked (``BACKEND_CLIENT``) so its answer goes back out of the backend.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque

import zmq

from trusty_memory.broker import status_report
from trusty_memory.broker.palace_moves import PalaceMoves
from trusty_memory.broker.palaces import PalaceRegistry
from trusty_memory.broker.reader_scaling import ReaderScaling
from trusty_memory.broker.records import Pending, Service, WorkerRec
from trusty_memory.broker.remote_palaces import FILE_NAME as REMOTE_PALACES_FILE
from trusty_memory.broker.remote_palaces import RemotePalaces
from trusty_memory.broker.supervisor import Child, Supervisor, describe_exit
from trusty_memory.common import __version__, palace_dir, tracing, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config, worker_budget
from trusty_memory.common.disk_full import disk_full_error
from trusty_memory.common.methods import (
    BACKGROUND_METHODS,
    BROKER_METHODS,
    EMBEDDER_METHODS,
    PALACE_METHODS,
    PALACE_MOVE_METHODS,
    PALACE_WRITE_METHODS,
    Method,
    decode_params,
    embedder_service,
)
from trusty_memory.common.names import validate_palace_name

TICK_S = 0.05
# The dreamer starts once a palace worker is ready and nothing is waiting for an answer (on
# a cold start: right after the first search is answered), and at the latest this long after
# the daemon started. It has nothing to do before, and on a cold start its interpreter took
# CPU from the model load and the MCP host's SDK import that the first search waits on.
DREAMER_START_S = 10.0
MAX_ATTEMPTS = 2  # a request survives one worker crash; the second is reported
# A worker that died this many times in a row, each soon after its start, is in a crash
# loop: the requests waiting for it are answered with the crash, not left to time out.
CRASH_LOOP = 3
# Prefix of the client identity of a request that came in on the backend (a remote
# worker's embed): frontend identities are ZeroMQ's, 0x00 then four bytes.
BACKEND_CLIENT = b"\xffB"


class Broker:
    """The Majordomo broker: routes requests by service, keeps the worker registry, and
    answers every accepted request exactly once (``mediate`` is the whole loop)."""

    def __init__(self, config: Config, log) -> None:
        self.config = config
        self.log = log
        # Palaces a remote writer has served, kept in the home across restarts: the broker
        # never spawns for them (``remote_palaces.py``). Read first: unreadable, the daemon
        # does not start.
        self.remote_palaces = RemotePalaces(config.home / REMOTE_PALACES_FILE)
        self.ctx: zmq.SyncContext = zmq.Context.instance()
        self.frontend = self.ctx.socket(zmq.ROUTER)
        self.backend = self.ctx.socket(zmq.ROUTER)
        endpoints = ((self.frontend, config.frontend), (self.backend, config.backend))
        curve = [transport.check_bind(e, config.broker.insecure) for _, e in endpoints]
        # ZeroMQ asks the authenticator about every CURVE connection: start it first.
        self.auth = transport.start_authenticator(self.ctx, config, log) if any(curve) else None
        for sock, endpoint in endpoints:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            mode = transport.secure_bind(sock, endpoint, config)
            sock.bind(endpoint)
            if mode != "ipc":
                log.info("listening on tcp", endpoint=endpoint, security=mode)
        self.poller = zmq.Poller()
        self.poller.register(self.frontend, zmq.POLLIN)
        self.poller.register(self.backend, zmq.POLLIN)
        self.services: dict[str, Service] = {}
        self.workers: dict[bytes, WorkerRec] = {}
        self.inflight: dict[tuple[bytes, str], tuple[Pending, WorkerRec]] = {}
        # Every accepted request not answered yet (with a worker or queued), by (client, id).
        self.unanswered: set[tuple[bytes, str]] = set()
        # Traced requests in flight: their trace ids, for the reply's span (tracing only).
        self.traces: dict[tuple[bytes, str], str] = {}
        self.palaces = PalaceRegistry(config)
        self.supervisor = Supervisor(config, log)
        self.max_workers = worker_budget(config.broker.max_workers)
        # What the broker delegates, each owning its state: palaces being deleted or
        # renamed, and each palace's readers (with the autoscaler).
        self.moves = PalaceMoves(self)
        self.readers = ReaderScaling(self)
        self.started = time.monotonic()
        self.hostname = socket.gethostname()
        self.last_heartbeat = 0.0
        self.running = True
        # A daemon a client started leaves once clients stop asking (run_daemon sets it).
        self.idle_exit_s: float | None = None
        self.last_client_request = time.monotonic()
        # When the dreamer is still to start (``start_dreamer_when_due``); None: started or off.
        self.dreamer_due: float | None = None

    # -- the loop ----------------------------------------------------------------

    def mediate(self) -> None:
        if self.supervisor.template is not None and self.config.broker.local_workers:
            self.supervisor.template.start()  # ready by the time a palace is first asked for
        for slot in range(self.config.embedder.pool_size):
            self.supervisor.ensure(p.EMBEDDER_SERVICE, slot)
        self.supervisor.ensure(p.MCP_HOST_SERVICE)
        if self.config.dreamer.enabled:
            self.dreamer_due = time.monotonic() + DREAMER_START_S
        while self.running:
            events = dict(self.poller.poll(int(TICK_S * 1000)))
            if self.backend in events:
                self._drain(self.backend, self.on_worker_message)
            if self.frontend in events:
                self._drain(self.frontend, self.on_client_message)
            self.housekeeping()
        self.stop_workers()

    def _drain(self, sock: zmq.Socket, handler) -> None:
        for _ in range(1000):  # bounded, so neither socket starves the other
            try:
                frames = transport.receive(sock)  # tcp: revoked keys refused there
            except zmq.Again:
                return
            try:
                handler(frames)
            except Exception as exc:  # a bad message must never kill the broker
                self.log.exception("message handling failed", error=repr(exc))

    # -- clients -----------------------------------------------------------------

    def on_client_message(self, frames: list[bytes]) -> None:
        if len(frames) == 3 and frames[1] == b"":  # a REQ socket's delimiter
            frames = [frames[0], frames[2]]
        if len(frames) != 2:
            self.log.warning("dropped client message with bad framing", frames=len(frames))
            return
        client, frame = frames
        if tracing.ON:
            started = tracing.now()
        try:
            req = p.decode_request(frame)
        except p.TrustyError as exc:
            self.reply(client, p.error_response(p.salvage_id(frame), exc.code, exc.message))
            return
        if tracing.ON and req.trace:
            if len(self.traces) > 10_000:  # traced requests that were never answered
                self.traces.clear()
            self.traces[(client, req.id)] = req.trace
        try:
            self.route(client, req, frame)
            if tracing.ON and req.trace:
                tracing.span(req.trace, f"broker.route {req.method}", started)
        except p.TrustyError as exc:
            self.reply(client, p.error_response(req.id, exc.code, exc.message))
        except OSError as exc:
            # A broker write (palace_create's palace.json, a record) that found no room
            # answers the documented disk-full error; before, the client got no answer.
            full = disk_full_error(exc, req.method)
            if full is None:
                raise
            self.reply(client, p.error_response(req.id, full.code, full.message))

    def route(self, client: bytes, req: p.Request, frame: bytes) -> None:
        method = req.method
        if not req.background and method not in BACKGROUND_METHODS | EMBEDDER_METHODS:
            self.last_client_request = time.monotonic()
        if method in PALACE_MOVE_METHODS:
            self.moves.start(client, req)
        elif method in BROKER_METHODS:
            self.reply(client, p.ok_response(req.id, self.broker_method(req)))
        elif method in EMBEDDER_METHODS:
            self.dispatch(embedder_service(method), client, req, frame, write=False)
        elif method in PALACE_METHODS:
            if req.palace is None:
                raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"{method}: missing 'palace'")
            name = self.check_open(validate_palace_name(req.palace))
            write = method in PALACE_WRITE_METHODS
            self.dispatch(p.palace_service(name), client, req, frame, write=write)
        else:
            raise p.TrustyError(p.ErrorCode.UNKNOWN_METHOD, f"unknown method: {method}")

    def dispatch(self, name: str, client: bytes, req: p.Request, frame: bytes, write: bool):
        if (client, req.id) in self.unanswered:
            raise p.TrustyError(
                p.ErrorCode.MALFORMED_FRAME, f"request id {req.id!r} is already in flight"
            )
        timeout = (
            (req.timeout_ms / 1000) if req.timeout_ms else self.config.broker.request_timeout_s
        )
        pending = Pending(client, req.id, frame, req.method, time.monotonic() + timeout, write)
        service = self.service(name)
        service.last_used = time.monotonic()
        if req.method not in BACKGROUND_METHODS:
            service.foreground_requests += 1
            service.last_foreground = service.last_used
        worker = service.pick(write)
        if worker is not None and not service.queue:
            self.unanswered.add((client, req.id))
            self.send_to_worker(worker, pending)
            return
        if len(service.queue) >= self.config.broker.max_queue:
            raise p.TrustyError(
                p.ErrorCode.OVERLOADED, f"{name}: {len(service.queue)} requests queued; try later"
            )
        start = name != p.EMBEDDER_SERVICE and self.spawns_locally(name)
        palace = name.startswith(p.PALACE_SERVICE_PREFIX)
        if start and palace and not self.supervisor.active(name):
            self.make_room(name)  # raises before the request is taken in
        self.unanswered.add((client, req.id))
        service.queue.append(pending)
        if start:
            self.supervisor.ensure(name)

    def palace_processes(self) -> int:
        """Local palace worker processes running or about to (restarts included), less
        those told to stop."""
        return sum(
            1
            for child in self.supervisor.children.values()
            if child.service.startswith(p.PALACE_SERVICE_PREFIX)
            and not child.stopping
            and (child.running or child.restart_at is not None)
        )

    def make_room(self, name: str) -> None:
        """Keep palace processes within ``[broker] max_workers``: before ``name``'s writer
        starts, the least recently used idle palace stops (it wakes again on its next
        request); if every palace is busy, the request gets a clear OVERLOADED error."""
        running = self.palace_processes()
        if running < self.max_workers:
            return
        idle = [
            s
            for s in self.services.values()
            if s.name.startswith(p.PALACE_SERVICE_PREFIX)
            and s.name != name
            and not s.busy
            and s.name not in self.remote_palaces
            and not self.moving(s.name)
            and self.supervisor.active(s.name)
        ]
        if not idle:
            raise p.TrustyError(
                p.ErrorCode.OVERLOADED,
                f"busy: {running} palace worker processes running, at most {self.max_workers}"
                " ([broker] max_workers), and none is idle; try again shortly or raise the"
                " setting",
            )
        victim = min(idle, key=lambda s: s.last_used)
        self.log.info("palace stopped to make room", service=victim.name, starting=name,
                      running=running, max_workers=self.max_workers)  # fmt: skip
        self.stop_palace(victim)

    def spawns_locally(self, service: str) -> bool:
        """Whether this broker starts processes for ``service``: not for a palace served
        by remote workers (one has registered, or ``local_workers`` is off)."""
        if not service.startswith(p.PALACE_SERVICE_PREFIX):
            return True
        return self.config.broker.local_workers and service not in self.remote_palaces

    def service(self, name: str) -> Service:
        if name not in self.services:
            self.services[name] = Service(name)
        return self.services[name]

    def send_to_worker(self, worker: WorkerRec, pending: Pending) -> None:
        pending.attempts += 1
        key = (pending.client, pending.rid)
        worker.inflight[key] = pending
        self.inflight[key] = (pending, worker)
        if not self.to_worker(worker.identity, p.W_REQUEST, pending.client, pending.frame):
            pending.attempts -= 1  # never delivered: not a try
            self.remove_worker(worker, crashed=True)  # gone: the request goes back in line

    def to_worker(self, identity: bytes, *frames: bytes) -> bool:
        """Send to a worker; False if it is gone (its process died, its socket closed).

        ROUTER_MANDATORY makes an unroutable send raise instead of vanishing: that is how
        the broker learns of a worker that died before the supervisor saw it exit, and
        it must never cost the broker itself.
        """
        try:
            self.backend.send_multipart([identity, *frames])
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                self.log.error("send to worker failed", error=str(exc))
            return False
        return True

    def answer(self, pending: Pending, frame: bytes) -> None:
        """Answer an accepted request (its one answer)."""
        self.unanswered.discard((pending.client, pending.rid))
        self.reply(pending.client, frame)

    def reply(self, client: bytes, frame: bytes) -> None:
        sock = self.frontend
        if client.startswith(BACKEND_CLIENT):  # a remote worker's own request
            sock, client = self.backend, client[len(BACKEND_CLIENT) :]
        try:
            sock.send_multipart([client, frame], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the client went away; nothing to do
            self.log.debug("reply undeliverable", error=str(exc))

    def broker_method(self, req: p.Request):
        if req.method == Method.PING:
            return {"pong": True, "pid": os.getpid(), "version": __version__}
        if req.method == Method.STATUS:
            return status_report.status(self)
        if req.method == Method.PALACE_LIST:
            remote = [p.palace_of(s) for s in self.remote_palaces]
            names = sorted(set(self.palaces.names()) | set(remote))
            return {"palaces": [n for n in names if n not in self.moves]}
        if req.method == Method.PALACE_SUMMARIES:
            names = [n for n in self.palaces.names() if n not in self.moves]
            return {"palaces": {n: self.palaces.summary(n) for n in names}}
        if req.method == Method.PALACE_ARCHIVED:
            return {"palaces": self.palaces.archived()}
        params = decode_params(req.method, req.params)
        if req.method == Method.PALACE_SCALE:
            return self.readers.scale(
                self.check_open(validate_palace_name(params.name)), params.readers
            )
        if req.method == Method.PALACE_RESTORE:
            self.check_free(params.new_name or params.name, req.method)
            return self.palaces.restore(params.name, params.entry, params.new_name)
        if req.method == Method.PALACE_FORGET_REMOTE:
            return self.forget_remote(validate_palace_name(params.name))
        self.moves.refuse_if_reserved(validate_palace_name(params.name))
        self.remote_palaces.refuse_name(params.name)
        return self.palaces.create(params.name, params.description)

    def forget_remote(self, name: str) -> dict:
        """``palace_forget_remote``: local workers may serve ``name`` again, from this home's
        files (``RemotePalaces.forget_palace`` says when it is refused)."""
        host = self.remote_palaces.forget_palace(name, self.remote_connected)
        local = self.palaces.exists(name)
        self.log.warning("remote palace forgotten", palace=name, host=host, local_copy=local)
        return {"palace": name, "host": host, "local_copy": local}

    def remote_connected(self, service: str) -> bool:
        """Whether a remote worker serves ``service`` now (registered, not yet gone)."""
        current = self.services.get(service)
        return current is not None and any(w.remote for w in current.workers)

    def check_open(self, name: str) -> str:
        """``name`` if it is a palace that serves requests; else ``PALACE_NOT_FOUND``."""
        self.moves.refuse_if_moving(name)
        if not self.palaces.exists(name) and not self.served_remotely(name):
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        return name

    def served_remotely(self, palace: str) -> bool:
        """A palace whose files are on a remote worker's host (one registered for it), or
        any palace when every palace is remote (``local_workers`` off)."""
        service = p.palace_service(palace)
        return service in self.remote_palaces or not self.config.broker.local_workers

    def check_free(self, name: str, method: str) -> None:
        """Refuse to move a palace to ``name`` when a palace has it, its directory is in
        the way, a rename under way is about to give it, or it holds a credential."""
        self.moves.refuse_if_reserved(palace_dir.check_new_name(self.config, method, name))
        self.remote_palaces.refuse_name(name)
        self.palaces.check_free(name)

    # -- workers -----------------------------------------------------------------

    def on_worker_message(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            self.log.warning("dropped worker message with bad framing", frames=len(frames))
            return
        identity, command = frames[0], frames[1]
        if len(frames) == 2 and command[:1] not in p.W_COMMANDS:
            # A worker's own request (a remote worker's embed): answered on the backend.
            self.on_client_message([BACKEND_CLIENT + identity, command])
            return
        worker = self.workers.get(identity)
        if worker is not None:
            worker.last_seen = time.monotonic()
        if command == p.W_READY and len(frames) == 3:
            self.on_ready(identity, p.decode_ready(frames[2]))
        elif worker is None:
            # Majordomo: a worker we do not know must re-register.
            self.to_worker(identity, p.W_DISCONNECT)
        elif command == p.W_REPLY and len(frames) in (5, 6):
            self.note_seq(worker, frames[5:])
            self.on_reply(worker, frames[2], frames[3].decode(), frames[4])
        elif command == p.W_HEARTBEAT:
            self.note_seq(worker, frames[2:])
        elif command == p.W_DISCONNECT:
            self.remove_worker(worker, crashed=False)
        else:
            self.log.warning("unknown worker command", command=command[:1].hex())

    def note_seq(self, worker: WorkerRec, frames: list[bytes]) -> None:
        if frames and frames[0].isdigit():
            worker.seq = int(frames[0])

    def on_ready(self, identity: bytes, ready: p.Ready) -> None:
        if identity in self.workers:
            self.remove_worker(self.workers[identity], crashed=True)
        if self.moving(ready.service):
            self.log.info("worker of a palace being moved told to stop", service=ready.service)
            self.to_worker(identity, p.W_DISCONNECT)
            return
        service = self.service(ready.service)
        if ready.role == "writer" and any(w.role == "writer" for w in service.workers):
            self.log.warning(
                "second writer refused", service=ready.service, pid=ready.pid, host=ready.host
            )
            self.to_worker(identity, p.W_DISCONNECT)
            return
        palace = ready.service.startswith(p.PALACE_SERVICE_PREFIX)
        if ready.remote and not palace:
            self.log.warning("remote worker refused: only palaces", service=ready.service)
            self.to_worker(identity, p.W_DISCONNECT)
            return
        if ready.remote and ready.role == "reader" and self.spawns_locally(ready.service):
            # Its files are a copy on another host: only beside a remote writer (whose
            # host's files it reads), never beside a local one.
            self.log.warning(
                "remote reader refused: the palace is served here", service=ready.service
            )
            self.to_worker(identity, p.W_DISCONNECT)
            return
        if ready.remote and ready.role == "writer":
            try:
                self.remote_palaces.record(ready.service, ready.host or "unknown")
            except OSError as exc:  # kept in memory still: this run never spawns for it
                self.log.error("remote palace not saved", service=ready.service, error=str(exc))
            for child in self.supervisor.slots(ready.service):  # local readers: not here
                if child.running:
                    child.stopping = True
                    child.terminate()
                else:
                    self.supervisor.forget(child)
        worker = WorkerRec(identity, ready.service, ready.role, ready.pid, time.monotonic())
        worker.remote, worker.host = ready.remote, ready.host or self.hostname
        self.workers[identity] = worker
        service.workers.append(worker)
        self.log.info(
            "worker ready",
            service=ready.service,
            role=ready.role,
            worker_pid=ready.pid,
            host=worker.host,
            remote=worker.remote,
        )
        if ready.role == "writer" and palace and self.spawns_locally(service.name):
            self.readers.apply(service)
        self.flush_queue(service)

    def flush_queue(self, service: Service) -> None:
        if (closing := self.moves.of(service.name)) is not None:
            self.moves.fail_queue(service, closing)
            return
        while service.queue:
            worker = service.pick(service.queue[0].write)
            if worker is None:
                return
            self.send_to_worker(worker, service.queue.popleft())

    def on_reply(self, worker: WorkerRec, client: bytes, rid: str, frame: bytes) -> None:
        key = (client, rid)
        if tracing.ON and (trace := self.traces.pop(key, "")):
            started = tracing.now()
            self.on_reply_untraced(worker, key, frame)
            tracing.span(trace, f"broker.reply {worker.service}", started)
            return
        self.on_reply_untraced(worker, key, frame)

    def on_reply_untraced(self, worker: WorkerRec, key: tuple[bytes, str], frame: bytes) -> None:
        worker.inflight.pop(key, None)
        if not worker.answered and not worker.remote:
            self.supervisor.note_served(worker.pid)
        worker.answered.append(time.monotonic())
        if (settled := self.inflight.pop(key, None)) is not None:
            self.answer(settled[0], frame)
        # else: the request already timed out and was answered; drop the late reply

    def remove_worker(self, worker: WorkerRec, crashed: bool, lost: str = "crashed") -> None:
        """Forget a worker; give its unanswered requests another chance or an error.
        ``lost`` says how a worker that ``crashed`` was lost, in the error a request
        gets after its last attempt: "crashed", or "stopped by the supervisor as
        unresponsive (...)" when the broker gave up on it and had it killed."""
        self.workers.pop(worker.identity, None)
        service = self.service(worker.service)
        if worker in service.workers:
            service.workers.remove(worker)
        for key, pending in reversed(list(worker.inflight.items())):
            self.inflight.pop(key, None)
            if not crashed:
                pending.attempts -= 1  # a worker retired or stopped: that try does not count
            if pending.attempts >= MAX_ATTEMPTS:
                message = (
                    f"{worker.service} worker {lost} while handling {pending.method} "
                    f"({pending.attempts} attempts)"
                )
                self.answer(
                    pending, p.error_response(pending.rid, p.ErrorCode.WORKER_CRASHED, message)
                )
            else:
                service.queue.appendleft(pending)
        worker.inflight.clear()
        self.flush_queue(service)

    # -- housekeeping ------------------------------------------------------------

    def start_dreamer_when_due(self, now: float) -> None:
        """Start the dreamer once a palace worker is ready and no request is waiting for
        its answer, or once ``DREAMER_START_S`` has passed."""
        if self.dreamer_due is None:
            return
        palace_up = any(
            w.service.startswith(p.PALACE_SERVICE_PREFIX) for w in self.workers.values()
        )
        if now >= self.dreamer_due or (palace_up and not self.unanswered):
            self.dreamer_due = None
            self.supervisor.ensure(p.DREAMER_SERVICE)

    def housekeeping(self) -> None:
        now = time.monotonic()
        self.start_dreamer_when_due(now)
        for child in self.supervisor.reap():
            gone = [w for w in self.workers.values() if w.pid == child.last_pid and not w.remote]
            for worker in gone:
                self.remove_worker(worker, crashed=not child.stopping)
            self.fail_if_crash_loop(child)
            if self.wanted_back(child):
                self.supervisor.schedule_restart(child)
            else:
                self.supervisor.forget(child)
        self.supervisor.restart_due()
        self.moves.advance(now)
        self.expire_deadlines(now)
        if now - self.last_heartbeat >= self.config.broker.heartbeat_s:
            self.last_heartbeat = now
            self.heartbeat_and_purge(now)
            self.readers.autoscale(now)
            self.stop_idle_palaces(now)
            self.stop_idle_bulk_embedder(now)
            self.exit_if_unused(now)

    def fail_if_crash_loop(self, child: Child) -> None:
        """Answer the requests queued for a service whose writer keeps dying, naming the
        crash: waiting out their deadline would only tell the caller "timed out"."""
        service = self.services.get(child.service)
        if service is None or not service.queue or child.slot != 0 or child.stopping:
            return
        palace = child.service.startswith(p.PALACE_SERVICE_PREFIX)
        if service.writer is not None if palace else service.workers:
            return  # another worker can still take them
        record = self.supervisor.crash_loop(child, CRASH_LOOP)
        if record is None:
            return
        exit_ = describe_exit(record.last_code, record.last_killed_why)
        message = (
            f"{child.service} worker keeps crashing: {exit_} "
            f"{record.in_a_row} times in a row, {record.last_lived_s:.2f} s after its start "
            "(the daemon log has its last words; `trusty-memory status` shows the count)"
        )
        self.log.error("crash loop: queued requests answered", service=child.service,
                       queued=len(service.queue), exit=exit_)  # fmt: skip
        while service.queue:
            pending = service.queue.popleft()
            self.answer(pending, p.error_response(pending.rid, p.ErrorCode.WORKER_CRASHED, message))

    def wanted_back(self, child) -> bool:
        """Embedders, the dreamer and the MCP host always come back. A palace writer only with work
        waiting (an idle palace stays asleep); a reader while its writer lives and its
        slot is still wanted (not retired by ``scale``, not stopped with the palace)."""
        if child.service in (p.EMBEDDER_SERVICE, p.DREAMER_SERVICE, p.MCP_HOST_SERVICE):
            return True
        if child.service == p.EMBEDDER_BULK_SERVICE:  # started on demand: back while needed
            return self.service(child.service).busy
        if self.moving(child.service) or not self.spawns_locally(child.service):
            return False
        service = self.service(child.service)
        if child.slot == 0:
            return service.busy
        palace = p.palace_of(child.service)
        return (
            not child.stopping
            and service.writer is not None
            and child.slot <= self.readers.wanted(palace)
        )

    def expire_deadlines(self, now: float) -> None:
        for key, (pending, worker) in list(self.inflight.items()):
            if pending.deadline <= now:
                del self.inflight[key]
                worker.inflight.pop(key, None)
                self.timeout(pending, worker.service)
        for service in self.services.values():
            if any(pending.deadline <= now for pending in service.queue):
                keep: deque[Pending] = deque()
                for pending in service.queue:
                    if pending.deadline <= now:
                        self.timeout(pending, service.name)
                    else:
                        keep.append(pending)
                service.queue = keep

    def timeout(self, pending: Pending, service: str) -> None:
        message = f"{pending.method}: timed out waiting for {service}"
        host = self.remote_palaces.get(service)
        if host is not None and not self.remote_connected(service):
            message += f" (served by a remote worker on {host}, not connected)"
        self.answer(pending, p.error_response(pending.rid, p.ErrorCode.TIMEOUT, message))

    def heartbeat_and_purge(self, now: float) -> None:
        """Heartbeat every worker; give up on one silent past ``worker_expiry_s``. A busy
        worker heartbeats from its pulse thread while it works (``workers/base.py``), so
        silence means a stopped or wedged process, not a long batch. One of ours is
        killed, and what it held is retried, or answered with what happened: stopped by
        the supervisor as unresponsive, not "crashed"."""
        expiry = self.config.broker.worker_expiry_s
        for worker in list(self.workers.values()):
            silent_s = now - worker.last_seen
            if silent_s > expiry:
                self.log.warning(
                    "worker silent; presumed dead",
                    service=worker.service,
                    pid=worker.pid,
                    silent_s=round(silent_s, 1),
                )
                child = None if worker.remote else self.supervisor.by_pid(worker.pid)
                why = f"unresponsive (silent for {silent_s:.0f} s)"
                lost = f"stopped by the supervisor as {why}" if child else f"lost: {why}"
                self.remove_worker(worker, crashed=True, lost=lost)
                if child is not None:
                    self.supervisor.kill(worker.pid, why)
                continue
            if not self.to_worker(worker.identity, p.W_HEARTBEAT):
                self.log.warning(
                    "worker unreachable; presumed dead",
                    service=worker.service,
                    host=worker.host,
                    remote=worker.remote,
                )
                self.remove_worker(worker, crashed=True)

    def stop_idle_palaces(self, now: float) -> None:
        idle_s = self.config.palace.idle_stop_s
        for service in self.services.values():
            if not service.name.startswith(p.PALACE_SERVICE_PREFIX) or service.busy:
                continue
            if self.moving(service.name):
                continue
            if service.name in self.remote_palaces:
                continue  # not ours to stop: nothing here could start it again
            if service.workers and now - service.last_used > idle_s:
                self.log.info("stopping idle palace", service=service.name)
                self.disconnect_service(service)

    def stop_idle_bulk_embedder(self, now: float) -> None:
        """The bulk lane's embedder holds a model (~300 MB) only while bulk work comes: it
        stops after ``[embedder] bulk_idle_stop_s`` without any, and starts again on the
        next ``embed_bulk``."""
        service = self.services.get(p.EMBEDDER_BULK_SERVICE)
        if service is None or service.busy or not service.workers:
            return
        if now - service.last_used > self.config.embedder.bulk_idle_stop_s:
            self.log.info("stopping the idle bulk embedder")
            self.disconnect_service(service)

    def exit_if_unused(self, now: float) -> None:
        """Stop a client-started daemon no client has used for ``idle_exit_s``: nothing is
        in flight or queued, and the dreamer's own traffic does not count as use."""
        if not self.idle_exit_s or now - self.last_client_request < self.idle_exit_s:
            return
        if self.inflight or self.moves or any(s.queue for s in self.services.values()):
            return
        self.log.info("no client requests; exiting", idle_s=round(now - self.last_client_request))
        self.running = False

    def stop_palace(self, service: Service) -> None:
        """Stop a palace's local processes: registered workers are told to go (they close
        their files and exit), one still starting is terminated (it holds nothing yet)."""
        registered = {w.pid for w in service.workers if not w.remote}
        self.disconnect_service(service)
        for child in self.supervisor.slots(service.name):
            child.stopping, child.restart_at = True, None
            if child.running and child.pid not in registered:
                child.terminate()

    def disconnect_service(self, service: Service) -> None:
        if service.name.startswith(p.PALACE_SERVICE_PREFIX):  # it wakes with its own readers
            self.readers.forget(p.palace_of(service.name))
        for worker in list(service.workers):
            child = None if worker.remote else self.supervisor.by_pid(worker.pid)
            if child is not None:
                child.stopping = True
            self.to_worker(worker.identity, p.W_DISCONNECT)
            self.remove_worker(worker, crashed=False)

    def moving(self, service_name: str) -> bool:
        """Whether the palace ``service_name`` serves is being deleted or renamed."""
        return self.moves.of(service_name) is not None

    def stop_workers(self, grace_s: float = 10.0) -> None:
        """Clean shutdown: every worker saves its index and exits."""
        for pending_list in (s.queue for s in self.services.values()):
            for pending in pending_list:
                message = f"{pending.method}: the daemon is shutting down"
                self.answer(
                    pending, p.error_response(pending.rid, p.ErrorCode.SHUTTING_DOWN, message)
                )
            pending_list.clear()
        for service in self.services.values():
            self.disconnect_service(service)
        self.supervisor.terminate(p.DREAMER_SERVICE)
        self.supervisor.terminate(p.MCP_HOST_SERVICE)
        for child in self.supervisor.children.values():
            child.stopping = True
        self.supervisor.shutdown(grace_s)
        self.moves.finish_all()  # every worker has exited: move the palaces waiting
        self.frontend.close(linger=0)
        self.backend.close(linger=0)
        if self.auth is not None:
            self.auth.stop()
