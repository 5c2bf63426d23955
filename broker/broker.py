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
broker does it (``palace_delete``, ``palace_rename``; ``close_palace``): from the moment
it accepts one, requests for the palace are refused with ``PALACE_NOT_FOUND`` and the ones
queued for it are answered with that error; its workers are told to stop, answer what
they already hold (their replies are relayed as usual) and exit; then the directory moves
and the caller is answered. Workers that have not exited after ``[broker] close_grace_s``
are killed; what they held is answered with the same error.

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
from dataclasses import dataclass, field
from typing import Any

import zmq

from trusty_memory.broker.autoscale import Autoscaler, Load
from trusty_memory.broker.palaces import MAX_READERS, PalaceRegistry
from trusty_memory.broker.supervisor import Child, Supervisor, describe_exit
from trusty_memory.common import __version__, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config, worker_budget
from trusty_memory.common.names import validate_palace_name

TICK_S = 0.05
MAX_ATTEMPTS = 2  # a request survives one worker crash; the second is reported
# A worker that died this many times in a row, each soon after its start, is in a crash
# loop: the requests waiting for it are answered with the crash, not left to time out.
CRASH_LOOP = 3
RATE_WINDOW_S = 10.0
RATE_WINDOW_MAX = 100_000
# Prefix of the client identity of a request that came in on the backend (a remote
# worker's embed): frontend identities are ZeroMQ's, 0x00 then four bytes.
BACKEND_CLIENT = b"\xffB"


@dataclass
class Pending:
    """A request accepted from a client and not answered yet."""

    client: bytes
    rid: str
    frame: bytes
    method: str
    deadline: float
    write: bool
    attempts: int = 0


@dataclass
class WorkerRec:
    identity: bytes
    service: str
    role: str
    pid: int
    last_seen: float
    inflight: dict[tuple[bytes, str], Pending] = field(default_factory=dict)
    seq: int = 0  # the palace change-log seq it has applied (palace workers)
    remote: bool = False  # on another host: not our child (see the module's docstring)
    host: str = ""
    answered: deque[float] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW_MAX))

    def rate(self, now: float) -> float:
        """Requests answered per second over the last ``RATE_WINDOW_S``."""
        while self.answered and self.answered[0] < now - RATE_WINDOW_S:
            self.answered.popleft()
        return len(self.answered) / RATE_WINDOW_S

    def answered_since(self, since: float) -> int:
        """Requests answered after ``since`` (counted from the newest: the recent ones)."""
        count = 0
        for at in reversed(self.answered):
            if at < since:
                break
            count += 1
        return count


@dataclass
class Service:
    name: str
    workers: list[WorkerRec] = field(default_factory=list)
    queue: deque[Pending] = field(default_factory=deque)
    last_used: float = field(default_factory=time.monotonic)
    # Requests other than the dreamer's, and when the last one came: how the dreamer
    # tells that a palace is idle without its own traffic counting as use.
    foreground_requests: int = 0
    last_foreground: float = field(default_factory=time.monotonic)

    def pick(self, write: bool) -> WorkerRec | None:
        """The writer for a write; for a read the least-loaded worker, readers first on a
        tie (the writer's queue is where writes wait)."""
        candidates = [w for w in self.workers if not write or w.role in ("writer", "embedder")]
        return min(candidates, key=lambda w: (len(w.inflight), w.role == "writer"), default=None)

    @property
    def writer(self) -> WorkerRec | None:
        return next((w for w in self.workers if w.role == "writer"), None)

    @property
    def busy(self) -> bool:
        return bool(self.queue) or any(w.inflight for w in self.workers)


@dataclass
class Closing:
    """A palace whose workers are stopping so that its directory can move."""

    palace: str
    method: str  # one of protocol.PALACE_MOVE_METHODS
    params: Any
    client: bytes
    rid: str
    started: float = field(default_factory=time.monotonic)
    killed: bool = False

    @property
    def gone(self) -> str:
        """What happened to the palace, for the errors its callers get."""
        if self.method == "palace_rename":
            return f"renamed to {self.params.new_name}"
        return "deleted"


def rss_mb(pid: int) -> float | None:
    """Resident memory of a local process, from /proc (None where unknown)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


class Broker:
    def __init__(self, config: Config, log) -> None:
        self.config = config
        self.log = log
        self.ctx = zmq.Context.instance()
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
        self.palaces = PalaceRegistry(config)
        self.autoscaler = Autoscaler(config.palace)
        # Palaces a remote writer has served since start: the broker never spawns for them.
        self.remote_palaces: dict[str, str] = {}  # service name -> the writer's host
        self.closing: dict[str, Closing] = {}  # palaces being deleted or renamed, by name
        self.supervisor = Supervisor(config, log)
        self.max_workers = worker_budget(config.broker.max_workers)
        self.started = time.monotonic()
        self.hostname = socket.gethostname()
        self.last_heartbeat = 0.0
        self.running = True
        # A daemon a client started leaves once clients stop asking (run_daemon sets it).
        self.idle_exit_s: float | None = None
        self.last_client_request = time.monotonic()

    # -- the loop ----------------------------------------------------------------

    def mediate(self) -> None:
        if self.supervisor.template is not None and self.config.broker.local_workers:
            self.supervisor.template.start()  # ready by the time a palace is first asked for
        for slot in range(self.config.embedder.pool_size):
            self.supervisor.ensure(p.EMBEDDER_SERVICE, slot)
        if self.config.dreamer.enabled:
            self.supervisor.ensure(p.DREAMER_SERVICE)
        self.supervisor.ensure(p.MCP_HOST_SERVICE)
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
        try:
            req = p.decode_request(frame)
        except p.TrustyError as exc:
            self.reply(client, p.error_response(p.salvage_id(frame), exc.code, exc.message))
            return
        try:
            self.route(client, req, frame)
        except p.TrustyError as exc:
            self.reply(client, p.error_response(req.id, exc.code, exc.message))

    def route(self, client: bytes, req: p.Request, frame: bytes) -> None:
        method = req.method
        if not req.background and method not in p.BACKGROUND_METHODS | p.EMBEDDER_METHODS:
            self.last_client_request = time.monotonic()
        if method in p.PALACE_MOVE_METHODS:
            self.close_palace(client, req)
        elif method in p.BROKER_METHODS:
            self.reply(client, p.ok_response(req.id, self.broker_method(req)))
        elif method in p.EMBEDDER_METHODS:
            self.dispatch(p.EMBEDDER_SERVICE, client, req, frame, write=False)
        elif method in p.PALACE_METHODS:
            if req.palace is None:
                raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"{method}: missing 'palace'")
            name = self.check_open(validate_palace_name(req.palace))
            write = method in p.PALACE_WRITE_METHODS
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
        if req.method not in p.BACKGROUND_METHODS:
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
        if start and not self.supervisor.active(name):
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
            and self.closing_of(s.name) is None
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
        if req.method == "ping":
            return {"pong": True, "pid": os.getpid(), "version": __version__}
        if req.method == "status":
            return self.status()
        if req.method == "palace_list":
            remote = [s[len(p.PALACE_SERVICE_PREFIX) :] for s in self.remote_palaces]
            names = sorted(set(self.palaces.names()) | set(remote))
            return {"palaces": [n for n in names if n not in self.closing]}
        if req.method == "palace_summaries":
            names = [n for n in self.palaces.names() if n not in self.closing]
            return {"palaces": {n: self.palaces.summary(n) for n in names}}
        if req.method == "palace_archived":
            return {"palaces": self.palaces.archived()}
        params = p.decode_params(req.method, req.params)
        if req.method == "palace_scale":
            return self.scale(self.check_open(validate_palace_name(params.name)), params.readers)
        if req.method == "palace_restore":
            self.check_free(params.new_name or params.name)
            return self.palaces.restore(params.name, params.entry, params.new_name)
        self.check_not_reserved(validate_palace_name(params.name))
        return self.palaces.create(params.name, params.description)

    def check_open(self, name: str) -> str:
        """``name`` if it is a palace that serves requests; else ``PALACE_NOT_FOUND``."""
        closing = self.closing.get(name)
        if closing is not None:
            message = f"palace not found: {name} (being {closing.gone})"
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, message)
        if not self.palaces.exists(name) and not self.served_remotely(name):
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        return name

    def served_remotely(self, palace: str) -> bool:
        """A palace whose files are on a remote worker's host (one registered for it), or
        any palace when every palace is remote (``local_workers`` off)."""
        service = p.palace_service(palace)
        return service in self.remote_palaces or not self.config.broker.local_workers

    def check_free(self, name: str) -> None:
        """Refuse to move a palace to ``name`` when a palace has it, its directory is in
        the way, or a rename under way is about to give it."""
        self.check_not_reserved(validate_palace_name(name))
        self.palaces.check_free(name)

    def check_not_reserved(self, name: str) -> None:
        for closing in self.closing.values():
            if closing.method == "palace_rename" and closing.params.new_name == name:
                message = f"palace already exists: {name} ({closing.palace} is being renamed to it)"
                raise p.TrustyError(p.ErrorCode.PALACE_EXISTS, message)

    def scale(self, palace: str, readers: int) -> dict:
        """Keep ``readers`` reader processes for ``palace`` from now on (and across restarts)."""
        self.palaces.set_readers(palace, readers)
        service = self.services.get(p.palace_service(palace))
        if service is not None and service.writer is not None and self.spawns_locally(service.name):
            self.apply_readers(service)
        return {"palace": palace, "readers": readers, "status": "scaled"}

    def apply_readers(self, service: Service) -> None:
        """Start missing readers of a palace whose writer is up; retire extra ones.

        A retired reader is told to stop; requests it held go back to the queue, so
        scaling down loses none of them.
        """
        wanted = self.wanted_readers(service.name[len(p.PALACE_SERVICE_PREFIX) :])
        for slot in range(1, wanted + 1):
            starting = not self.supervisor.active(service.name, slot)
            if starting and self.palace_processes() >= self.max_workers:
                self.log.warning("reader not started: at max_workers", service=service.name,
                                 slot=slot, max_workers=self.max_workers)  # fmt: skip
                break
            self.supervisor.ensure(service.name, slot)
        for child in self.supervisor.slots(service.name):
            if child.slot > wanted and not child.stopping:
                child.stopping = True
                for worker in [w for w in service.workers if w.pid == child.pid and not w.remote]:
                    self.to_worker(worker.identity, p.W_DISCONNECT)
                    self.remove_worker(worker, crashed=False)
                if child.running:
                    child.popen.terminate()

    def wanted_readers(self, palace: str) -> int:
        """The palace's own readers (``scale``) plus those the autoscaler added."""
        return min(MAX_READERS, self.palaces.readers(palace) + self.autoscaler.extra(palace))

    def autoscale(self, now: float) -> None:
        """Give the autoscaler each running palace's load; apply what it changes."""
        if not self.autoscaler.enabled:
            return
        window = self.config.palace.autoscale_window_s
        loads, own = [], {}
        for service in self.services.values():
            if not service.name.startswith(p.PALACE_SERVICE_PREFIX) or service.writer is None:
                continue
            if self.closing_of(service.name) is not None or not self.spawns_locally(service.name):
                continue  # a palace served by remote workers is scaled on their hosts
            palace = service.name[len(p.PALACE_SERVICE_PREFIX) :]
            own[palace] = self.palaces.readers(palace)
            answered = sum(w.answered_since(now - window) for w in service.workers)
            inflight = sum(len(w.inflight) for w in service.workers) + len(service.queue)
            loads.append(Load(palace, len(service.workers), inflight, answered / window))
        for palace in self.autoscaler.tick(loads, own, now):
            self.log.info(
                "autoscale",
                palace=palace,
                readers=self.wanted_readers(palace),
                added=self.autoscaler.extra(palace),
            )
            self.apply_readers(self.services[p.palace_service(palace)])

    def worker_status(self, service: Service, w: WorkerRec, now: float) -> dict:
        info = {
            "pid": w.pid,
            "role": w.role,
            "host": w.host,
            "remote": w.remote,
            "inflight": len(w.inflight),
            "requests_per_s": round(w.rate(now), 2),
            "rss_mb": None if w.remote else rss_mb(w.pid),
        }
        if service.name.startswith(p.PALACE_SERVICE_PREFIX):
            writer = service.writer
            info["seq"] = w.seq
            info["lag"] = max(0, writer.seq - w.seq) if writer is not None else None
        return info

    def status(self) -> dict:
        now = time.monotonic()
        return {
            "pid": os.getpid(),
            "version": __version__,
            "uptime_s": round(time.monotonic() - self.started, 3),
            "home": str(self.config.home),
            "host": self.hostname,
            "frontend": self.config.frontend,
            "backend": self.config.backend,
            "services": [
                {
                    "name": s.name,
                    "workers": [self.worker_status(s, w, now) for w in s.workers],
                    "queued": len(s.queue),
                    **self.scaling_status(s.name),
                    "foreground_requests": s.foreground_requests,
                    "idle_s": round(time.monotonic() - s.last_foreground, 3),
                }
                for s in self.services.values()
            ],
            "restarts": {
                f"{c.service}#{c.slot}": c.starts - 1 for c in self.supervisor.children.values()
            },
            "dreamer_pid": next(
                (c.pid for c in self.supervisor.children.values() if c.service == "dreamer"),
                None,
            ),
            "mcp_host_pid": next(
                (
                    c.pid
                    for c in self.supervisor.children.values()
                    if c.service == p.MCP_HOST_SERVICE
                ),
                None,
            ),
            "template": self.template_status(),
            "crashes": self.supervisor.crash_status(),
            "palace_processes": self.palace_processes(),
            "max_workers": self.max_workers,
        }

    def scaling_status(self, service_name: str) -> dict:
        """A palace's wanted readers: its own setting, and those autoscale added."""
        if not service_name.startswith(p.PALACE_SERVICE_PREFIX):
            return {}
        palace = service_name[len(p.PALACE_SERVICE_PREFIX) :]
        return {
            "readers_wanted": self.wanted_readers(palace),
            "readers_autoscaled": self.autoscaler.extra(palace),
        }

    def template_status(self) -> dict | None:
        """The palace-worker template: its pid and whether it forks yet (None: off)."""
        template = self.supervisor.template
        if template is None:
            return None
        alive = template.alive()
        off = self.supervisor.fork_off_reason
        return {
            "pid": template.proc.pid if alive else None,
            "ready": alive and template.ready,
            "rss_mb": rss_mb(template.proc.pid) if alive else None,
            "threads": template.threads if alive else None,
            "forking": off is None and not template.refusals,
            "fork_off_reason": off,
            "refused_forks": template.refusals,
        }

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
        if self.closing_of(ready.service) is not None:
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
            self.remote_palaces[ready.service] = ready.host
            for child in self.supervisor.slots(ready.service):  # local readers: not here
                if child.running:
                    child.stopping = True
                    child.popen.terminate()
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
            self.apply_readers(service)
        self.flush_queue(service)

    def flush_queue(self, service: Service) -> None:
        if (closing := self.closing_of(service.name)) is not None:
            self.fail_queue(service, closing)
            return
        while service.queue:
            worker = service.pick(service.queue[0].write)
            if worker is None:
                return
            self.send_to_worker(worker, service.queue.popleft())

    def on_reply(self, worker: WorkerRec, client: bytes, rid: str, frame: bytes) -> None:
        key = (client, rid)
        worker.inflight.pop(key, None)
        if not worker.answered and not worker.remote:
            self.supervisor.note_served(worker.pid)
        worker.answered.append(time.monotonic())
        if (settled := self.inflight.pop(key, None)) is not None:
            self.answer(settled[0], frame)
        # else: the request already timed out and was answered; drop the late reply

    def remove_worker(self, worker: WorkerRec, crashed: bool) -> None:
        """Forget a worker; give its unanswered requests another chance or an error."""
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
                    f"{worker.service} worker crashed while handling {pending.method} "
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

    def housekeeping(self) -> None:
        now = time.monotonic()
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
        for closing in list(self.closing.values()):
            self.advance_closing(closing, now)
        self.expire_deadlines(now)
        if now - self.last_heartbeat >= self.config.broker.heartbeat_s:
            self.last_heartbeat = now
            self.heartbeat_and_purge(now)
            self.autoscale(now)
            self.stop_idle_palaces(now)
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
        message = (
            f"{child.service} worker keeps crashing: {describe_exit(record.last_code)} "
            f"{record.in_a_row} times in a row, {record.last_lived_s:.2f} s after its start "
            "(the daemon log has its last words; `trusty-memory status` shows the count)"
        )
        self.log.error("crash loop: queued requests answered", service=child.service,
                       queued=len(service.queue), exit=describe_exit(record.last_code))  # fmt: skip
        while service.queue:
            pending = service.queue.popleft()
            self.answer(pending, p.error_response(pending.rid, p.ErrorCode.WORKER_CRASHED, message))

    def wanted_back(self, child) -> bool:
        """Embedders, the dreamer and the MCP host always come back. A palace writer only with work
        waiting (an idle palace stays asleep); a reader while its writer lives and its
        slot is still wanted (not retired by ``scale``, not stopped with the palace)."""
        if child.service in (p.EMBEDDER_SERVICE, p.DREAMER_SERVICE, p.MCP_HOST_SERVICE):
            return True
        if self.closing_of(child.service) is not None or not self.spawns_locally(child.service):
            return False
        service = self.service(child.service)
        if child.slot == 0:
            return service.busy
        palace = child.service[len(p.PALACE_SERVICE_PREFIX) :]
        return (
            not child.stopping
            and service.writer is not None
            and child.slot <= self.wanted_readers(palace)
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
        self.answer(pending, p.error_response(pending.rid, p.ErrorCode.TIMEOUT, message))

    def heartbeat_and_purge(self, now: float) -> None:
        expiry = self.config.broker.worker_expiry_s
        for worker in list(self.workers.values()):
            if now - worker.last_seen > expiry:
                self.log.warning(
                    "worker silent; presumed dead", service=worker.service, pid=worker.pid
                )
                self.remove_worker(worker, crashed=True)
                child = None if worker.remote else self.supervisor.by_pid(worker.pid)
                if child is not None:
                    self.supervisor.kill(worker.pid)
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
            if self.closing_of(service.name) is not None:
                continue
            if service.name in self.remote_palaces:
                continue  # not ours to stop: nothing here could start it again
            if service.workers and now - service.last_used > idle_s:
                self.log.info("stopping idle palace", service=service.name)
                self.disconnect_service(service)

    def exit_if_unused(self, now: float) -> None:
        """Stop a client-started daemon no client has used for ``idle_exit_s``: nothing is
        in flight or queued, and the dreamer's own traffic does not count as use."""
        if not self.idle_exit_s or now - self.last_client_request < self.idle_exit_s:
            return
        if self.inflight or self.closing or any(s.queue for s in self.services.values()):
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
                child.popen.terminate()

    def disconnect_service(self, service: Service) -> None:
        if service.name.startswith(p.PALACE_SERVICE_PREFIX):  # it wakes with its own readers
            self.autoscaler.forget(service.name[len(p.PALACE_SERVICE_PREFIX) :])
        for worker in list(service.workers):
            child = None if worker.remote else self.supervisor.by_pid(worker.pid)
            if child is not None:
                child.stopping = True
            self.to_worker(worker.identity, p.W_DISCONNECT)
            self.remove_worker(worker, crashed=False)

    # -- deleting and renaming palaces -------------------------------------------

    def close_palace(self, client: bytes, req: p.Request) -> None:
        """Start a ``palace_delete`` or ``palace_rename``: refuse the palace's requests from
        now on, stop its workers, and move it once they have exited (``advance_closing``)."""
        params = p.decode_params(req.method, req.params)
        name = self.check_open(validate_palace_name(params.name))
        if (host := self.remote_palaces.get(p.palace_service(name))) is not None:
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS,
                f"{req.method}: palace {name} is served by a remote worker on {host}, which"
                " owns its files: stop that worker and move the palace on its host",
            )
        if req.method == "palace_rename":
            if params.new_name == name:
                raise p.TrustyError(
                    p.ErrorCode.INVALID_PARAMS, f"palace_rename: {name} is already its name"
                )
            self.check_free(params.new_name)
        closing = Closing(name, req.method, params, client, req.id)
        self.closing[name] = closing
        service_name = p.palace_service(name)
        self.log.info("stopping palace workers to move it", palace=name, method=req.method)
        service = self.services.get(service_name)
        if service is not None:
            self.fail_queue(service, closing)
            # Told to stop, the workers answer what they hold first; their records stay
            # until they say goodbye or exit, so those answers are relayed as usual.
            for worker in service.workers:
                self.to_worker(worker.identity, p.W_DISCONNECT)
        for child in self.supervisor.slots(service_name):
            if child.running:
                child.stopping = True
            else:  # waiting to restart: it never will
                self.supervisor.forget(child)
        self.advance_closing(closing, time.monotonic())

    def closing_of(self, service_name: str) -> Closing | None:
        if not service_name.startswith(p.PALACE_SERVICE_PREFIX):
            return None
        return self.closing.get(service_name[len(p.PALACE_SERVICE_PREFIX) :])

    def fail_queue(self, service: Service, closing: Closing) -> None:
        """Answer the requests waiting for a palace that is going away."""
        message = f"palace not found: {closing.palace} ({closing.gone} before this was answered)"
        while service.queue:
            pending = service.queue.popleft()
            error = p.error_response(pending.rid, p.ErrorCode.PALACE_NOT_FOUND, message)
            self.answer(pending, error)

    def advance_closing(self, closing: Closing, now: float) -> None:
        """Move the palace once its workers are gone; kill them after ``close_grace_s``."""
        service_name = p.palace_service(closing.palace)
        service = self.services.get(service_name)
        running = [c for c in self.supervisor.slots(service_name) if c.running]
        workers = list(service.workers) if service is not None else []
        if not running and not workers:
            self.finish_closing(closing)
            return
        if closing.killed or now - closing.started < self.config.broker.close_grace_s:
            return
        closing.killed = True
        self.log.warning(
            "palace workers did not stop in time; killing them",
            palace=closing.palace,
            pids=[c.pid for c in running],
        )
        for child in running:
            self.supervisor.kill(child.pid)  # reaped next turn; what they held is answered
        ours = {c.pid for c in running}
        for worker in workers:
            if worker.pid not in ours or worker.remote:  # not our child: forget it, answer it
                self.remove_worker(worker, crashed=True)

    def finish_closing(self, closing: Closing) -> None:
        """The palace's workers have exited: move its directory and answer the caller."""
        service_name = p.palace_service(closing.palace)
        service = self.services.get(service_name)
        for worker in list(service.workers) if service is not None else []:  # none, normally
            self.remove_worker(worker, crashed=True)  # what it held gets closing's error
        self.services.pop(service_name, None)
        del self.closing[closing.palace]
        for child in self.supervisor.slots(service_name):
            self.supervisor.forget(child)
        try:
            if closing.method == "palace_delete":
                data = self.palaces.delete(closing.palace, closing.params.discard_empty)
            else:
                data = self.palaces.rename(closing.palace, closing.params.new_name)
        except p.TrustyError as exc:
            frame = p.error_response(closing.rid, exc.code, exc.message)
        except OSError as exc:
            message = f"{closing.method}: cannot move palace {closing.palace}: {exc}"
            self.log.error("moving a palace failed", palace=closing.palace, error=str(exc))
            frame = p.error_response(closing.rid, p.ErrorCode.STORAGE_ERROR, message)
        else:
            self.log.info(
                "palace moved",
                palace=closing.palace,
                method=closing.method,
                status=data["status"],
                seconds=round(time.monotonic() - closing.started, 3),
            )
            frame = p.ok_response(closing.rid, data)
        self.reply(closing.client, frame)

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
        for closing in list(self.closing.values()):  # every worker has exited: move them
            self.finish_closing(closing)
        self.frontend.close(linger=0)
        self.backend.close(linger=0)
        if self.auth is not None:
            self.auth.stop()
