"""``status``: what the broker tells ``trusty-memory status``, ``doctor`` and the web page.

Read-only over the broker's maps (services, workers, supervisor children, the template),
so it can grow fields without touching the routing loop. Figures are from this moment:
a worker's rate is over ``records.RATE_WINDOW_S``, its memory from /proc. What it reads
of the broker is :class:`StatusSource`, so this module does not import the broker.
"""

from __future__ import annotations

import os
import time
from typing import Protocol

from trusty_memory.broker.reader_scaling import ReaderScaling
from trusty_memory.broker.records import Service, WorkerRec, rss_mb
from trusty_memory.broker.remote_palaces import RemotePalaces
from trusty_memory.broker.supervisor import Supervisor
from trusty_memory.common import __version__
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config


class StatusSource(Protocol):
    """What ``status`` reads of the broker."""

    config: Config
    started: float
    hostname: str
    services: dict[str, Service]
    supervisor: Supervisor
    readers: ReaderScaling
    remote_palaces: RemotePalaces
    max_workers: int

    def palace_processes(self) -> int: ...
    def remote_connected(self, service: str) -> bool: ...


def worker_status(service: Service, w: WorkerRec, now: float) -> dict:
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


def status(broker: StatusSource) -> dict:
    now = time.monotonic()
    return {
        "pid": os.getpid(),
        "version": __version__,
        "uptime_s": round(time.monotonic() - broker.started, 3),
        "home": str(broker.config.home),
        "host": broker.hostname,
        "frontend": broker.config.frontend,
        "backend": broker.config.backend,
        "services": [
            {
                "name": s.name,
                "workers": [worker_status(s, w, now) for w in s.workers],
                "queued": len(s.queue),
                **scaling_status(broker, s.name),
                "foreground_requests": s.foreground_requests,
                "idle_s": round(time.monotonic() - s.last_foreground, 3),
            }
            for s in broker.services.values()
        ],
        "restarts": {
            f"{c.service}#{c.slot}": c.starts - 1 for c in broker.supervisor.children.values()
        },
        "dreamer_pid": next(
            (c.pid for c in broker.supervisor.children.values() if c.service == p.DREAMER_SERVICE),
            None,
        ),
        "mcp_host_pid": next(
            (c.pid for c in broker.supervisor.children.values() if c.service == p.MCP_HOST_SERVICE),
            None,
        ),
        "template": template_status(broker),
        "crashes": broker.supervisor.crash_status(),
        "palace_processes": broker.palace_processes(),
        "max_workers": broker.max_workers,
        "remote_palaces": remote_palaces(broker),
    }


def remote_palaces(broker: StatusSource) -> dict[str, dict]:
    """Every palace a remote writer has served (``remote_palaces.py``): its host, and
    whether such a writer is connected now (if not, its requests wait for it)."""
    out = {}
    for service in broker.remote_palaces:
        out[p.palace_of(service)] = {
            "host": broker.remote_palaces.get(service),
            "connected": broker.remote_connected(service),
        }
    return out


def scaling_status(broker: StatusSource, service_name: str) -> dict:
    """A palace's wanted readers: its own setting, and those autoscale added."""
    if not service_name.startswith(p.PALACE_SERVICE_PREFIX):
        return {}
    palace = p.palace_of(service_name)
    return {
        "readers_wanted": broker.readers.wanted(palace),
        "readers_autoscaled": broker.readers.added(palace),
    }


def template_status(broker: StatusSource) -> dict | None:
    """The palace-worker template: its pid and whether it forks yet (None: off)."""
    template = broker.supervisor.template
    if template is None:
        return None
    proc = template.proc if template.alive() else None
    alive = proc is not None
    off = broker.supervisor.fork_off_reason
    return {
        "pid": proc.pid if proc is not None else None,
        "ready": alive and template.ready,
        "rss_mb": rss_mb(proc.pid) if proc is not None else None,
        "threads": template.threads if alive else None,
        "forking": off is None and not template.refusals,
        "fork_off_reason": off,
        "refused_forks": template.refusals,
    }
