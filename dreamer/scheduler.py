"""The dreamer's long-running loop: which palace is due, and stepping aside for real work.

A palace is due when

* it has had foreground requests since its last pass and none for ``idle_after_s`` (the
  broker counts foreground requests per palace, ``dream_*`` excluded, in ``status``), or
* it has not been dreamed for ``every_s`` since this process started or last dreamed it
  (decay is driven by time alone, so an untouched palace still needs the odd pass).

During a pass, any new foreground request to that palace stops the pass at the next
batch boundary; the palace is dreamed again once it is idle again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from trusty_memory.common import protocol as p
from trusty_memory.common.caller import Caller
from trusty_memory.common.config import DreamerSettings
from trusty_memory.common.methods import Method
from trusty_memory.dreamer import progress as ev
from trusty_memory.dreamer.runner import DreamPass, PassReport


class Scheduler:
    def __init__(
        self,
        client: Caller,
        settings: DreamerSettings,
        log: Any,
        *,
        emit: ev.Emit = ev.silent,
        parent_pid: int | None = None,
    ) -> None:
        self.client = client
        self.s = settings
        self.log = log
        self.emit = emit
        self.parent_pid = parent_pid  # supervised: stop when the daemon is gone
        self.running = True
        self.started = time.monotonic()
        self.dreamed_requests: dict[str, int] = {}  # foreground count at the last full pass
        self.last_pass: dict[str, float] = {}

    def run(self) -> None:
        """Tick every ``poll_s`` until stopped."""
        while self.running and self.parent_alive():
            try:
                self.tick()
            except p.TrustyError as exc:  # the daemon restarting, a palace gone: try later
                self.log.warning("dream tick failed", error=exc.message)
            self.sleep(self.s.poll_s)
        if not self.parent_alive():
            self.log.info("daemon gone; stopping")

    def tick(self) -> list[PassReport]:
        reports = []
        activity = self.activity()
        for palace in self.client.call(Method.PALACE_LIST)["palaces"]:
            if not self.running:
                break
            reason = self.due(palace, activity.get(palace))
            if reason is not None:
                reports.append(self.dream(palace, activity.get(palace, {}), reason))
        return reports

    def due(self, palace: str, service: dict | None) -> str | None:
        if service is not None:
            if _busy(service):  # e.g. a first remember waiting for the model to load
                return None
            requests = service.get("foreground_requests", 0)
            changed = requests != self.dreamed_requests.get(palace, 0)
            if changed and service.get("idle_s", 0.0) >= self.s.idle_after_s:
                return "idle"
        if time.monotonic() - self.last_pass.get(palace, self.started) >= self.s.every_s:
            return "periodic"
        return None

    def dream(self, palace: str, service: dict, reason: str) -> PassReport:
        requests = service.get("foreground_requests", 0)

        def should_stop() -> bool:
            if not self.running or not self.parent_alive():
                return True
            now = self.activity().get(palace, {}).get("foreground_requests", 0)
            return now != requests

        self.log.info("dreaming", palace=palace, reason=reason)
        report = DreamPass(
            self.client, palace, self.s, emit=self.emit, should_stop=should_stop
        ).run()
        self.last_pass[palace] = time.monotonic()
        if not report.truncated:
            self.dreamed_requests[palace] = requests
        self.log.info("dreamed", **report.complete_event())
        return report

    def activity(self) -> dict[str, dict]:
        """Per palace: the broker's foreground request count and idle time."""
        prefix = p.PALACE_SERVICE_PREFIX
        return {
            s["name"][len(prefix) :]: s
            for s in self.client.call(Method.STATUS)["services"]
            if s["name"].startswith(prefix)
        }

    def parent_alive(self) -> bool:
        return self.parent_pid is None or os.getppid() == self.parent_pid

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.running and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _busy(service: dict) -> bool:
    """Requests queued for, or in the hands of, the palace's workers."""
    return bool(service.get("queued")) or any(w.get("inflight") for w in service["workers"])
