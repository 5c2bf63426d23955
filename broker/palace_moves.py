"""Deleting and renaming a palace, which moves the directory its workers hold open.

From the moment the broker accepts a ``palace_delete`` or ``palace_rename``
(``close_palace``), requests for the palace are refused with ``PALACE_NOT_FOUND`` and the
ones queued for it are answered with that error; its workers are told to stop, answer
what they already hold (their replies are relayed as usual) and exit; then the directory
moves and the caller is answered (``finish_closing``). Workers that have not exited after
``[broker] close_grace_s`` are killed; what they held is answered with the same error.
The broker's loop calls ``advance_closing`` every turn until then.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from trusty_memory.broker.records import Closing, Service
from trusty_memory.common import protocol as p
from trusty_memory.common.methods import Method, decode_params
from trusty_memory.common.names import validate_palace_name

if TYPE_CHECKING:
    from trusty_memory.broker.broker import Broker


def close_palace(broker: Broker, client: bytes, req: p.Request) -> None:
    """Start a ``palace_delete`` or ``palace_rename``: refuse the palace's requests from
    now on, stop its workers, and move it once they have exited (``advance_closing``)."""
    params = decode_params(req.method, req.params)
    name = broker.check_open(validate_palace_name(params.name))
    if (host := broker.remote_palaces.get(p.palace_service(name))) is not None:
        raise p.TrustyError(
            p.ErrorCode.INVALID_PARAMS,
            f"{req.method}: palace {name} is served by a remote worker on {host}, which"
            " owns its files: stop that worker and move the palace on its host (or, if it"
            f" has come home for good, `trusty-memory palace forget-remote {name}` first)",
        )
    if req.method == Method.PALACE_RENAME:
        if params.new_name == name:
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS, f"palace_rename: {name} is already its name"
            )
        broker.check_free(params.new_name, req.method)
    closing = Closing(name, req.method, params, client, req.id)
    broker.closing[name] = closing
    service_name = p.palace_service(name)
    broker.log.info("stopping palace workers to move it", palace=name, method=req.method)
    service = broker.services.get(service_name)
    if service is not None:
        fail_queue(broker, service, closing)
        # Told to stop, the workers answer what they hold first; their records stay
        # until they say goodbye or exit, so those answers are relayed as usual.
        for worker in service.workers:
            broker.to_worker(worker.identity, p.W_DISCONNECT)
    for child in broker.supervisor.slots(service_name):
        if child.running:
            child.stopping = True
        else:  # waiting to restart: it never will
            broker.supervisor.forget(child)
    advance_closing(broker, closing, time.monotonic())


def fail_queue(broker: Broker, service: Service, closing: Closing) -> None:
    """Answer the requests waiting for a palace that is going away."""
    message = f"palace not found: {closing.palace} ({closing.gone} before this was answered)"
    while service.queue:
        pending = service.queue.popleft()
        error = p.error_response(pending.rid, p.ErrorCode.PALACE_NOT_FOUND, message)
        broker.answer(pending, error)


def advance_closing(broker: Broker, closing: Closing, now: float) -> None:
    """Move the palace once its workers are gone; kill them after ``close_grace_s``."""
    service_name = p.palace_service(closing.palace)
    service = broker.services.get(service_name)
    running = [c for c in broker.supervisor.slots(service_name) if c.running]
    workers = list(service.workers) if service is not None else []
    if not running and not workers:
        finish_closing(broker, closing)
        return
    if closing.killed or now - closing.started < broker.config.broker.close_grace_s:
        return
    closing.killed = True
    broker.log.warning(
        "palace workers did not stop in time; killing them",
        palace=closing.palace,
        pids=[c.pid for c in running],
    )
    for child in running:
        assert child.pid is not None  # running: it has a process
        broker.supervisor.kill(child.pid)  # reaped next turn; what they held is answered
    ours = {c.pid for c in running}
    for worker in workers:
        if worker.pid not in ours or worker.remote:  # not our child: forget it, answer it
            broker.remove_worker(worker, crashed=True)


def finish_closing(broker: Broker, closing: Closing) -> None:
    """The palace's workers have exited: move its directory and answer the caller."""
    service_name = p.palace_service(closing.palace)
    service = broker.services.get(service_name)
    for worker in list(service.workers) if service is not None else []:  # none, normally
        broker.remove_worker(worker, crashed=True)  # what it held gets closing's error
    broker.services.pop(service_name, None)
    del broker.closing[closing.palace]
    for child in broker.supervisor.slots(service_name):
        broker.supervisor.forget(child)
    try:
        if closing.method == Method.PALACE_DELETE:
            data = broker.palaces.delete(closing.palace, closing.params.discard_empty)
        else:
            data = broker.palaces.rename(closing.palace, closing.params.new_name)
    except p.TrustyError as exc:
        frame = p.error_response(closing.rid, exc.code, exc.message)
    except OSError as exc:
        message = f"{closing.method}: cannot move palace {closing.palace}: {exc}"
        broker.log.error("moving a palace failed", palace=closing.palace, error=str(exc))
        frame = p.error_response(closing.rid, p.ErrorCode.STORAGE_ERROR, message)
    else:
        broker.log.info(
            "palace moved",
            palace=closing.palace,
            method=closing.method,
            status=data["status"],
            seconds=round(time.monotonic() - closing.started, 3),
        )
        frame = p.ok_response(closing.rid, data)
    broker.reply(closing.client, frame)
