"""Autoscale: a reader added to a palace while its requests pile up, kept only if it helps.

Off unless ``[palace] max_readers`` is above a palace's own ``readers`` (``trusty-memory
scale``): that number is the floor, ``max_readers`` the ceiling, and this module moves the
palace between them. The broker calls ``Autoscaler.tick`` once per heartbeat (1 s) with
what it already knows of each palace: requests in flight per worker (a worker serves one
batch at a time, so more than one in hand is a queue) and requests answered per second.

The rule, in three steps:

- **Up.** When the palace's mean in-flight per worker has stayed at or above
  ``autoscale_up_inflight`` for ``autoscale_window_s``, one more reader is started.
- **Kept only if it helps.** ``autoscale_settle_s`` later (the reader forks and loads
  the index, then serves a whole window) the palace's answered/s over the last window is
  compared with the window before the reader was added. Less than ``autoscale_min_gain`` more,
  while still loaded, means the machine has no core to give it (on 2 cores, deep recall
  at 100k drawers gives 94.6 / 178.4 / 172.5 / 159.1 calls/s with 0 / 1 / 2 / 3 readers:
  the third reader costs throughput): the reader is retired and the palace is not scaled
  up again for ``autoscale_hold_s``.
- **Down.** A reader added here is retired once the palace has been quiet (mean in-flight
  per worker below ``AUTOSCALE_QUIET_INFLIGHT``) for ``autoscale_idle_s``; readers the
  palace's own setting asks for never are. Scaling down loses no request: the broker puts
  what a retired reader held back in line (``Broker.apply_readers``).

The decision is kept apart from the broker so it can be read, and tested, on its own:
``tick`` takes numbers and returns which palaces now want a different reader count.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from trusty_memory.common.config import PalaceSettings

AUTOSCALE_QUIET_INFLIGHT = 0.25  # mean in flight per worker under which a palace is quiet


@dataclass(frozen=True)
class Load:
    """One palace at one heartbeat, as the broker sees it."""

    palace: str
    workers: int  # live workers: the writer and its readers
    inflight: int  # requests in their hands
    answered_per_s: float  # over the last ``autoscale_window_s``


@dataclass
class _Trial:
    """A reader added at ``started`` when the palace answered ``rate_before`` per second."""

    started: float
    rate_before: float


@dataclass
class _Palace:
    extra: int = 0  # readers added by the autoscaler, above the palace's own setting
    loaded: deque[float] = field(default_factory=deque)  # heartbeats since load went high
    quiet_since: float | None = None
    trial: _Trial | None = None
    hold_until: float = 0.0


class Autoscaler:
    """The readers each palace should have beyond its own setting; see the module doc."""

    def __init__(self, settings: PalaceSettings) -> None:
        self.settings = settings
        self.palaces: dict[str, _Palace] = {}

    @property
    def enabled(self) -> bool:
        return self.settings.max_readers > 0

    def extra(self, palace: str) -> int:
        """Readers the autoscaler adds to ``palace`` right now."""
        state = self.palaces.get(palace)
        return state.extra if state is not None else 0

    def forget(self, palace: str) -> None:
        """The palace stopped (idle, deleted, renamed): it starts from its own setting."""
        self.palaces.pop(palace, None)

    def tick(self, loads: list[Load], own_readers: dict[str, int], now: float) -> list[str]:
        """Look at every palace once; return those whose wanted reader count changed."""
        if not self.enabled:
            return []
        changed = []
        for load in loads:
            state = self.palaces.setdefault(load.palace, _Palace())
            before = state.extra
            self._step(state, load, own_readers.get(load.palace, 0), now)
            if state.extra != before:
                changed.append(load.palace)
        return changed

    def _step(self, state: _Palace, load: Load, own: int, now: float) -> None:
        s = self.settings
        per_worker = load.inflight / max(1, load.workers)
        busy = per_worker >= s.autoscale_up_inflight
        quiet = per_worker < AUTOSCALE_QUIET_INFLIGHT
        if not busy:
            state.loaded.clear()
        elif not state.loaded:
            state.loaded.append(now)
        state.quiet_since = (state.quiet_since or now) if quiet else None

        if state.trial is not None:
            if now - state.trial.started < s.autoscale_settle_s:
                return
            helped = load.answered_per_s >= state.trial.rate_before * (1 + s.autoscale_min_gain)
            if busy and not helped:
                state.extra -= 1  # no core to give it: back, and stay there a while
                state.hold_until = now + s.autoscale_hold_s
            state.trial = None
            state.loaded.clear()
            return

        if (
            busy
            and now - state.loaded[0] >= s.autoscale_window_s
            and now >= state.hold_until
            and own + state.extra < s.max_readers
        ):
            state.extra += 1
            state.trial = _Trial(started=now, rate_before=load.answered_per_s)
            state.loaded.clear()
            return

        quiet_since = state.quiet_since  # set above exactly while the palace is quiet
        if state.extra > 0 and quiet_since is not None and now - quiet_since >= s.autoscale_idle_s:
            state.extra -= 1
            state.quiet_since = now  # one at a time, each after its own quiet spell
