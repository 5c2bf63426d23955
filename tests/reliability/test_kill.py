"""kill -9 of each process during 16 sessions of writes: nothing acknowledged is lost.

Covers: workers/writer.py broker/supervisor.py bench/reliability.py
"""

from __future__ import annotations

import pytest

from tests.reliability.conftest import run_part

pytestmark = pytest.mark.slow

VICTIMS = ("palace", "embedder", "dreamer", "broker", "serve")


@pytest.fixture(scope="module")
def kill_run(tmp_path_factory) -> dict:
    return run_part("kill", tmp_path_factory.mktemp("kill") / "kill.json")


@pytest.mark.parametrize("victim", VICTIMS)
def test_kill_9_loses_no_acknowledged_write_and_writes_resume(kill_run, victim):
    v = kill_run["victims"][victim]
    assert v["writes_acknowledged"] > 100, v
    verified = v["verified"]
    assert verified["missing_in_sqlite"] == 0, verified["examples"]
    assert verified["not_found_by_exact_recall"] == 0, verified["examples"]
    assert verified["index_count"] == verified["drawer_count"] == verified["drawers_in_sqlite"]
    assert v["hangs"] == 0 and v["orphans"] == []
    assert v["seconds_until_writes_succeed"] is not None and v["checks"]["daemon_serving_after"]
    if victim == "serve":  # the host starts a new one; the others never noticed
        assert v["sessions_replaced"] == 1
    else:
        assert v["errors_seen"] == 0, v["error_messages"]


def test_the_run_reports_no_failed_check(kill_run):
    assert kill_run["failures"] == []
