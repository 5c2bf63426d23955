"""Autoscale against the real daemon: readers come while sessions pile up on a palace and
go once it is quiet, and no read is lost either way (``broker/autoscale.py``; the rule's
arithmetic is pinned in ``tests/unit/test_autoscale.py``).

The thresholds are shortened so that the test takes seconds, and a reader is kept whatever
it adds (``autoscale_min_gain = -1``): on two shared cores whether a reader raises
throughput depends on what else runs, and that part of the rule is the unit tests' job.

Covers: broker/autoscale.py broker/reader_scaling.py broker/records.py broker/status_report.py
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import Daemon, wait_until
from tests.engine.test_readers import start_readers, workers_of
from trusty_memory.client.sync import Client

pytestmark = pytest.mark.slow

FAST_AUTOSCALE = {
    "TRUSTY_MEMORY_PALACE_MAX_READERS": "2",
    "TRUSTY_MEMORY_PALACE_AUTOSCALE_UP_INFLIGHT": "1.5",
    "TRUSTY_MEMORY_PALACE_AUTOSCALE_WINDOW_S": "1",
    "TRUSTY_MEMORY_PALACE_AUTOSCALE_SETTLE_S": "2",
    "TRUSTY_MEMORY_PALACE_AUTOSCALE_MIN_GAIN": "-1",
    "TRUSTY_MEMORY_PALACE_AUTOSCALE_IDLE_S": "3",
}


def palace_status(client: Client, palace: str) -> dict:
    return next(s for s in client.status()["services"] if s["name"] == f"palace:{palace}")


def readers(client: Client, palace: str) -> int:
    return sum(1 for w in workers_of(client, palace) if w["role"] == "reader")


@pytest.fixture
def autoscaling(fresh_home):
    d = Daemon(fresh_home, extra_env=FAST_AUTOSCALE).start()
    yield d
    d.stop()


def test_readers_come_under_load_and_go_when_quiet_losing_no_read(autoscaling):
    with Client(autoscaling.config, autostart=False) as admin:
        admin.palace_create("hot")
        for i in range(60):
            admin.remember("hot", f"release {i} was built on runner r{i % 7}")
        time.sleep(2.5)  # one session's writes are no pile-up: nothing was added
        assert readers(admin, "hot") == 0
        assert palace_status(admin, "hot")["readers_autoscaled"] == 0

        stop, errors, counts, threads = start_readers(autoscaling.config, "hot", 8)
        try:
            wait_until(lambda: readers(admin, "hot") == 2, 60, "two autoscaled readers")
            status = palace_status(admin, "hot")
            assert (status["readers_wanted"], status["readers_autoscaled"]) == (2, 2)
            time.sleep(1.0)  # the new readers serve
            assert sum(w["requests_per_s"] for w in workers_of(admin, "hot")
                       if w["role"] == "reader") > 0  # fmt: skip
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert errors == []
        assert sum(counts) > 40

        wait_until(lambda: readers(admin, "hot") == 0, 60, "the added readers to retire")
        assert palace_status(admin, "hot")["readers_autoscaled"] == 0
        # The palace's own setting is a floor autoscale never goes under.
        admin.scale("hot", 1)
        wait_until(lambda: readers(admin, "hot") == 1, 30, "the palace's own reader")
        time.sleep(5.0)  # longer than autoscale_idle_s, and quiet
        assert readers(admin, "hot") == 1
