"""How many reader processes a palace has: its own setting (``palace_scale``) plus what
autoscale adds (the rule itself is ``autoscale.py``; this applies it).

Readers start only once the palace's writer is up (it creates and migrates the file they
open read-only), and never past ``[broker] max_workers``. A retired reader is told to
stop; what it held goes back in line, so scaling down loses no request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trusty_memory.broker.autoscale import Load
from trusty_memory.broker.palaces import MAX_READERS
from trusty_memory.broker.records import Service
from trusty_memory.common import protocol as p

if TYPE_CHECKING:
    from trusty_memory.broker.broker import Broker


def scale(broker: Broker, palace: str, readers: int) -> dict:
    """Keep ``readers`` reader processes for ``palace`` from now on (and across restarts)."""
    broker.palaces.set_readers(palace, readers)
    service = broker.services.get(p.palace_service(palace))
    if service is not None and service.writer is not None and broker.spawns_locally(service.name):
        apply_readers(broker, service)
    return {"palace": palace, "readers": readers, "status": "scaled"}


def apply_readers(broker: Broker, service: Service) -> None:
    """Start missing readers of a palace whose writer is up; retire extra ones.

    A retired reader is told to stop; requests it held go back to the queue, so
    scaling down loses none of them.
    """
    wanted = wanted_readers(broker, service.name[len(p.PALACE_SERVICE_PREFIX) :])
    for slot in range(1, wanted + 1):
        starting = not broker.supervisor.active(service.name, slot)
        if starting and broker.palace_processes() >= broker.max_workers:
            broker.log.warning("reader not started: at max_workers", service=service.name,
                             slot=slot, max_workers=broker.max_workers)  # fmt: skip
            break
        broker.supervisor.ensure(service.name, slot)
    for child in broker.supervisor.slots(service.name):
        if child.slot > wanted and not child.stopping:
            child.stopping = True
            for worker in [w for w in service.workers if w.pid == child.pid and not w.remote]:
                broker.to_worker(worker.identity, p.W_DISCONNECT)
                broker.remove_worker(worker, crashed=False)
            if child.running:
                child.terminate()


def wanted_readers(broker: Broker, palace: str) -> int:
    """The palace's own readers (``scale``) plus those the autoscaler added."""
    return min(MAX_READERS, broker.palaces.readers(palace) + broker.autoscaler.extra(palace))


def autoscale(broker: Broker, now: float) -> None:
    """Give the autoscaler each running palace's load; apply what it changes."""
    if not broker.autoscaler.enabled:
        return
    window = broker.config.palace.autoscale_window_s
    loads, own = [], {}
    for service in broker.services.values():
        if not service.name.startswith(p.PALACE_SERVICE_PREFIX) or service.writer is None:
            continue
        if broker.closing_of(service.name) is not None or not broker.spawns_locally(service.name):
            continue  # a palace served by remote workers is scaled on their hosts
        palace = service.name[len(p.PALACE_SERVICE_PREFIX) :]
        own[palace] = broker.palaces.readers(palace)
        answered = sum(w.answered_since(now - window) for w in service.workers)
        inflight = sum(len(w.inflight) for w in service.workers) + len(service.queue)
        loads.append(Load(palace, len(service.workers), inflight, answered / window))
    for palace in broker.autoscaler.tick(loads, own, now):
        broker.log.info(
            "autoscale",
            palace=palace,
            readers=wanted_readers(broker, palace),
            added=broker.autoscaler.extra(palace),
        )
        apply_readers(broker, broker.services[p.palace_service(palace)])
