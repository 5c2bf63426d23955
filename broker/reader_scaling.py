"""How many reader processes a palace has: its own setting (``palace_scale``) plus what
autoscale adds (the rule itself is ``autoscale.py``; this applies it).

Readers start only once the palace's writer is up (it creates and migrates the file they
open read-only), and never past ``[broker] max_workers``. A retired reader is told to
stop; what it held goes back in line, so scaling down loses no request.

:class:`ReaderScaling` owns the autoscaler; what it needs of the broker is
:class:`ScalingHost`, so this module does not import the broker.
"""

from __future__ import annotations

from typing import Any, Protocol

from trusty_memory.broker.autoscale import Autoscaler, Load
from trusty_memory.broker.palaces import MAX_READERS, PalaceRegistry
from trusty_memory.broker.records import Service, WorkerRec
from trusty_memory.broker.supervisor import Supervisor
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config


class ScalingHost(Protocol):
    """What scaling a palace's readers needs of the broker."""

    config: Config
    log: Any
    services: dict[str, Service]
    supervisor: Supervisor
    palaces: PalaceRegistry
    max_workers: int

    def palace_processes(self) -> int: ...
    def spawns_locally(self, service: str) -> bool: ...
    def moving(self, service_name: str) -> bool: ...
    def to_worker(self, identity: bytes, *frames: bytes) -> bool: ...
    def remove_worker(self, worker: WorkerRec, crashed: bool, lost: str = ...) -> None: ...


class ReaderScaling:
    """Each palace's readers: wanted, started, retired, and added by the autoscaler."""

    def __init__(self, host: ScalingHost) -> None:
        self.host = host
        self.autoscaler = Autoscaler(host.config.palace)

    def scale(self, palace: str, readers: int) -> dict:
        """Keep ``readers`` reader processes for ``palace`` from now on (and across restarts)."""
        host = self.host
        host.palaces.set_readers(palace, readers)
        service = host.services.get(p.palace_service(palace))
        if service is not None and service.writer is not None and host.spawns_locally(service.name):
            self.apply(service)
        return {"palace": palace, "readers": readers, "status": "scaled"}

    def wanted(self, palace: str) -> int:
        """The palace's own readers (``scale``) plus those the autoscaler added."""
        return min(MAX_READERS, self.host.palaces.readers(palace) + self.autoscaler.extra(palace))

    def added(self, palace: str) -> int:
        """Readers the autoscaler has added to ``palace`` beyond its own setting."""
        return self.autoscaler.extra(palace)

    def forget(self, palace: str) -> None:
        """The palace stopped: it wakes with its own readers."""
        self.autoscaler.forget(palace)

    def apply(self, service: Service) -> None:
        """Start missing readers of a palace whose writer is up; retire extra ones.

        A retired reader is told to stop; requests it held go back to the queue, so
        scaling down loses none of them.
        """
        host = self.host
        wanted = self.wanted(p.palace_of(service.name))
        for slot in range(1, wanted + 1):
            starting = not host.supervisor.active(service.name, slot)
            if starting and host.palace_processes() >= host.max_workers:
                host.log.warning("reader not started: at max_workers", service=service.name,
                                 slot=slot, max_workers=host.max_workers)  # fmt: skip
                break
            host.supervisor.ensure(service.name, slot)
        for child in host.supervisor.slots(service.name):
            if child.slot > wanted and not child.stopping:
                child.stopping = True
                for worker in [w for w in service.workers if w.pid == child.pid and not w.remote]:
                    host.to_worker(worker.identity, p.W_DISCONNECT)
                    host.remove_worker(worker, crashed=False)
                if child.running:
                    child.terminate()

    def autoscale(self, now: float) -> None:
        """Give the autoscaler each running palace's load; apply what it changes."""
        host = self.host
        if not self.autoscaler.enabled:
            return
        window = host.config.palace.autoscale_window_s
        loads, own = [], {}
        for service in host.services.values():
            if not service.name.startswith(p.PALACE_SERVICE_PREFIX) or service.writer is None:
                continue
            if host.moving(service.name) or not host.spawns_locally(service.name):
                continue  # a palace served by remote workers is scaled on their hosts
            palace = p.palace_of(service.name)
            own[palace] = host.palaces.readers(palace)
            answered = sum(w.answered_since(now - window) for w in service.workers)
            inflight = sum(len(w.inflight) for w in service.workers) + len(service.queue)
            loads.append(Load(palace, len(service.workers), inflight, answered / window))
        for palace in self.autoscaler.tick(loads, own, now):
            host.log.info(
                "autoscale", palace=palace, readers=self.wanted(palace), added=self.added(palace)
            )
            self.apply(host.services[p.palace_service(palace)])
