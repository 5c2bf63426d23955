"""A short soak: many sessions, mixed tools, no errors, no lock or timeout, nothing dies.

Memory growth is judged only by the full 10-minute run (BENCHMARKS.md): 20 seconds cannot
tell growth from caches filling.

Covers: broker/broker.py client/mcp/host.py bench/reliability.py
"""

from __future__ import annotations

import pytest

from tests.reliability.conftest import run_part

pytestmark = pytest.mark.slow


def test_soak_quick(tmp_path):
    r = run_part("soak", tmp_path / "soak.json")
    assert r["sessions"] == 10 and r["calls"] > 200
    assert set(r["by_tool"]) >= {"memory_remember", "memory_recall", "memory_forget", "kg_query"}
    assert r["errors"] == 0, r["error_messages"]
    assert r["database_locked"] == 0 and r["timeouts"] == 0
    assert r["processes_gone"] == [] and not any(r["worker_restarts"].values())
    assert r["failures"] == []
