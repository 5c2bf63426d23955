"""Deleting and renaming a palace, which moves the directory its workers hold open.

From the moment the broker accepts a ``palace_delete`` or ``palace_rename``
(:meth:`PalaceMoves.start`), requests for the palace are refused with
``PALACE_NOT_FOUND`` and the ones queued for it are answered with that error; its workers
are told to stop, answer what they already hold (their replies are relayed as usual) and
exit; then the directory moves and the caller is answered. Workers that have not exited
after ``[broker] close_grace_s`` are killed; what they held is answered with the same
error. The broker's loop calls :meth:`PalaceMoves.advance` every turn until then.

:class:`PalaceMoves` owns the palaces being moved; what it needs of the broker (its
services, supervisor, sockets and checks) is :class:`MoveHost`, so this module does not
import the broker.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from trusty_memory.broker.palaces import PalaceRegistry
from trusty_memory.broker.records import Closing, Pending, Service, WorkerRec
from trusty_memory.broker.remote_palaces import RemotePalaces
from trusty_memory.broker.supervisor import Supervisor
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.methods import Method, decode_params
from trusty_memory.common.names import validate_palace_name


class MoveHost(Protocol):
    """What moving a palace needs of the broker."""

    config: Config
    log: Any
    services: dict[str, Service]
    supervisor: Supervisor
    palaces: PalaceRegistry
    remote_palaces: RemotePalaces

    def check_open(self, name: str) -> str: ...
    def check_free(self, name: str, method: str) -> None: ...
    def to_worker(self, identity: bytes, *frames: bytes) -> bool: ...
    def remove_worker(self, worker: WorkerRec, crashed: bool, lost: str = ...) -> None: ...
    def answer(self, pending: Pending, frame: bytes) -> None: ...
    def reply(self, client: bytes, frame: bytes) -> None: ...


class PalaceMoves:
    """The palaces being deleted or renamed, by name, and each one's way to its end."""

    def __init__(self, host: MoveHost) -> None:
        self.host = host
        self.closing: dict[str, Closing] = {}

    def __bool__(self) -> bool:
        return bool(self.closing)

    def __contains__(self, palace: str) -> bool:
        return palace in self.closing

    def of(self, service_name: str) -> Closing | None:
        """The move under way for the palace ``service_name`` serves, if any."""
        if not service_name.startswith(p.PALACE_SERVICE_PREFIX):
            return None
        return self.closing.get(p.palace_of(service_name))

    def refuse_if_moving(self, name: str) -> None:
        """``PALACE_NOT_FOUND`` for a palace on its way out, saying so."""
        closing = self.closing.get(name)
        if closing is not None:
            message = f"palace not found: {name} (being {closing.gone})"
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, message)

    def refuse_if_reserved(self, name: str) -> None:
        """``PALACE_EXISTS`` for the name a rename under way is about to give."""
        for closing in self.closing.values():
            if closing.method == Method.PALACE_RENAME and closing.params.new_name == name:
                message = f"palace already exists: {name} ({closing.palace} is being renamed to it)"
                raise p.TrustyError(p.ErrorCode.PALACE_EXISTS, message)

    def start(self, client: bytes, req: p.Request) -> None:
        """Start a ``palace_delete`` or ``palace_rename``: refuse the palace's requests from
        now on, stop its workers, and move it once they have exited (:meth:`advance`)."""
        host = self.host
        params = decode_params(req.method, req.params)
        name = host.check_open(validate_palace_name(params.name))
        if (remote := host.remote_palaces.get(p.palace_service(name))) is not None:
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS,
                f"{req.method}: palace {name} is served by a remote worker on {remote}, which"
                " owns its files: stop that worker and move the palace on its host (or, if it"
                f" has come home for good, `trusty-memory palace forget-remote {name}` first)",
            )
        if req.method == Method.PALACE_RENAME:
            if params.new_name == name:
                raise p.TrustyError(
                    p.ErrorCode.INVALID_PARAMS, f"palace_rename: {name} is already its name"
                )
            host.check_free(params.new_name, req.method)
        closing = Closing(name, req.method, params, client, req.id)
        self.closing[name] = closing
        service_name = p.palace_service(name)
        host.log.info("stopping palace workers to move it", palace=name, method=req.method)
        service = host.services.get(service_name)
        if service is not None:
            self.fail_queue(service, closing)
            # Told to stop, the workers answer what they hold first; their records stay
            # until they say goodbye or exit, so those answers are relayed as usual.
            for worker in service.workers:
                host.to_worker(worker.identity, p.W_DISCONNECT)
        for child in host.supervisor.slots(service_name):
            if child.running:
                child.stopping = True
            else:  # waiting to restart: it never will
                host.supervisor.forget(child)
        self._advance(closing, time.monotonic())

    def fail_queue(self, service: Service, closing: Closing) -> None:
        """Answer the requests waiting for a palace that is going away."""
        message = f"palace not found: {closing.palace} ({closing.gone} before this was answered)"
        while service.queue:
            pending = service.queue.popleft()
            error = p.error_response(pending.rid, p.ErrorCode.PALACE_NOT_FOUND, message)
            self.host.answer(pending, error)

    def advance(self, now: float) -> None:
        """Each move a step on: a palace whose workers are gone moves; workers past
        ``close_grace_s`` are killed."""
        for closing in list(self.closing.values()):
            self._advance(closing, now)

    def finish_all(self) -> None:
        """At shutdown, once every worker has exited: move every palace still waiting."""
        for closing in list(self.closing.values()):
            self._finish(closing)

    def _advance(self, closing: Closing, now: float) -> None:
        host = self.host
        service_name = p.palace_service(closing.palace)
        service = host.services.get(service_name)
        running = [c for c in host.supervisor.slots(service_name) if c.running]
        workers = list(service.workers) if service is not None else []
        if not running and not workers:
            self._finish(closing)
            return
        if closing.killed or now - closing.started < host.config.broker.close_grace_s:
            return
        closing.killed = True
        host.log.warning(
            "palace workers did not stop in time; killing them",
            palace=closing.palace,
            pids=[c.pid for c in running],
        )
        for child in running:
            assert child.pid is not None  # running: it has a process
            host.supervisor.kill(child.pid)  # reaped next turn; what they held is answered
        ours = {c.pid for c in running}
        for worker in workers:
            if worker.pid not in ours or worker.remote:  # not our child: forget it, answer it
                host.remove_worker(worker, crashed=True)

    def _finish(self, closing: Closing) -> None:
        """The palace's workers have exited: move its directory and answer the caller."""
        host = self.host
        service_name = p.palace_service(closing.palace)
        service = host.services.get(service_name)
        for worker in list(service.workers) if service is not None else []:  # none, normally
            host.remove_worker(worker, crashed=True)  # what it held gets closing's error
        host.services.pop(service_name, None)
        del self.closing[closing.palace]
        for child in host.supervisor.slots(service_name):
            host.supervisor.forget(child)
        try:
            if closing.method == Method.PALACE_DELETE:
                data = host.palaces.delete(closing.palace, closing.params.discard_empty)
            else:
                data = host.palaces.rename(closing.palace, closing.params.new_name)
        except p.TrustyError as exc:
            frame = p.error_response(closing.rid, exc.code, exc.message)
        except OSError as exc:
            message = f"{closing.method}: cannot move palace {closing.palace}: {exc}"
            host.log.error("moving a palace failed", palace=closing.palace, error=str(exc))
            frame = p.error_response(closing.rid, p.ErrorCode.STORAGE_ERROR, message)
        else:
            host.log.info(
                "palace moved",
                palace=closing.palace,
                method=closing.method,
                status=data["status"],
                seconds=round(time.monotonic() - closing.started, 3),
            )
            frame = p.ok_response(closing.rid, data)
        host.reply(closing.client, frame)
