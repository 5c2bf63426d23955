"""The autoscale rule on its own (``broker/autoscale.py``): numbers in, decisions out.

Covers: broker/autoscale.py
"""

from __future__ import annotations

from trusty_memory.broker.autoscale import Autoscaler, Load
from trusty_memory.common.config import PalaceSettings

SETTINGS = PalaceSettings(
    max_readers=3,
    autoscale_up_inflight=2.0,
    autoscale_window_s=3.0,
    autoscale_settle_s=8.0,
    autoscale_min_gain=0.10,
    autoscale_hold_s=300.0,
    autoscale_idle_s=120.0,
)


def run(scaler: Autoscaler, seconds: range, inflight: int, rate, own: int = 0) -> list[int]:
    """One tick a second; ``rate(extra)`` is what the palace answers with that many added
    readers. Returns the added readers after each tick."""
    seen = []
    for t in seconds:
        extra = scaler.extra("hot")
        load = Load("hot", workers=1 + own + extra, inflight=inflight, answered_per_s=rate(extra))
        scaler.tick([load], {"hot": own}, float(t))
        seen.append(scaler.extra("hot"))
    return seen


def test_off_unless_max_readers_is_set():
    scaler = Autoscaler(PalaceSettings())
    assert not scaler.enabled
    assert run(scaler, range(0, 60), inflight=50, rate=lambda extra: 100.0) == [0] * 60


def test_a_reader_that_helps_is_kept_and_the_next_is_tried_up_to_the_ceiling():
    scaler = Autoscaler(SETTINGS)
    seen = run(scaler, range(0, 80), inflight=16, rate=lambda extra: 100.0 * (1 + extra))
    assert seen[2] == 0 and seen[3] == 1  # high for the 3 s window, then one reader
    assert max(seen) == 3 and seen[-1] == 3  # each helped: kept, up to max_readers
    assert seen == sorted(seen)  # one at a time, never back down while loaded


def test_a_reader_that_does_not_raise_throughput_goes_and_the_palace_holds():
    """Two cores: the second added reader brings nothing (measured at 100k drawers: 0 / 1 /
    2 / 3 readers gave 94.6 / 178.4 / 172.5 / 159.1 calls/s)."""
    rates = {0: 94.6, 1: 178.4, 2: 172.5, 3: 159.1}
    scaler = Autoscaler(SETTINGS)
    seen = run(scaler, range(0, 200), inflight=16, rate=lambda extra: rates[extra])
    assert 2 in seen  # tried
    assert seen[-1] == 1  # and given back: one reader is what this machine can use
    back = seen.index(2) + seen[seen.index(2) :].index(1)
    assert set(seen[back:]) == {1}  # held there, not tried again within autoscale_hold_s


def test_the_palace_floor_is_its_own_setting_and_the_ceiling_counts_it():
    scaler = Autoscaler(SETTINGS)
    seen = run(scaler, range(0, 80), inflight=16, rate=lambda e: 100.0 * (1 + e), own=2)
    assert max(seen) == 1  # own 2 + 1 added = max_readers 3


def test_light_load_adds_nothing_and_quiet_retires_added_readers_one_at_a_time():
    scaler = Autoscaler(SETTINGS)
    assert run(scaler, range(0, 30), inflight=1, rate=lambda e: 50.0) == [0] * 30
    run(scaler, range(30, 60), inflight=16, rate=lambda e: 100.0 * (1 + e))
    added = scaler.extra("hot")
    assert added >= 2
    seen = run(scaler, range(60, 60 + 121 * added + 5), inflight=0, rate=lambda e: 0.0)
    assert seen[100] == added  # quiet for less than autoscale_idle_s: kept
    assert seen[125] == added - 1 and seen[-1] == 0  # then one per quiet spell, to none


def test_a_stopped_palace_starts_again_from_its_own_setting():
    scaler = Autoscaler(SETTINGS)
    run(scaler, range(0, 20), inflight=16, rate=lambda e: 100.0 * (1 + e))
    assert scaler.extra("hot") > 0
    scaler.forget("hot")
    assert scaler.extra("hot") == 0
