"""Storage faults: a damaged index is rebuilt, a corrupt palace fails alone and clearly,
a full disk refuses writes by name and loses nothing.

Covers: workers/store/index.py workers/store/schema.py bench/reliability.py
"""

from __future__ import annotations

import pytest

from tests.reliability.conftest import run_part

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def storage_run(tmp_path_factory) -> dict:
    return run_part("storage", tmp_path_factory.mktemp("storage") / "storage.json")


@pytest.mark.parametrize("fault", ["deleted", "truncated", "garbled"])
def test_a_damaged_index_is_rebuilt_from_sqlite_on_open(storage_run, fault):
    r = storage_run[f"index_{fault}"]
    assert r["snapshot_files_before"] >= 1 and r["checks"]["rebuilt_from_sqlite"]
    v = r["verified"]
    assert v["acknowledged"] == storage_run["drawers"] == v["drawers_in_sqlite"]
    assert v["missing_in_sqlite"] == v["not_found_by_exact_recall"] == 0, v["examples"]
    assert v["index_count"] == v["drawer_count"] == v["drawers_in_sqlite"]


@pytest.mark.parametrize("fault", ["header", "pages"])
def test_a_corrupt_palace_file_fails_alone_quickly_and_by_name(storage_run, fault):
    r = storage_run["sqlite_corrupt"][fault]
    assert r["error"].startswith("palace file is corrupt: ") and "palace.sqlite3" in r["error"]
    assert "Restore it from a backup" in r["error"]
    assert r["seconds_to_error"] < 5 and r["later_call_s"] < 5
    assert r["worker_restarts_in_3s"] <= 1
    assert r["checks"]["other_palace_serves"] and r["checks"]["serves_after_restore"]
    assert storage_run["sqlite_corrupt"]["bystander_intact"]["missing_in_sqlite"] == 0


def test_a_full_disk_refuses_writes_clearly_and_loses_nothing(storage_run):
    r = storage_run["disk_full"]
    if "skipped" in r:
        pytest.skip(r["skipped"])
    assert r["refused_writes"] >= 10 and r["hangs"] == 0
    assert r["first_error"].startswith("disk full: ")
    assert r["worker_restarts"] == 0 and r["temp_files_left_while_full"] == []
    assert r["checks"]["writes_resume_once_space_returns"]
    v = r["verified"]
    assert v["missing_in_sqlite"] == v["not_found_by_exact_recall"] == 0, v["examples"]
    assert v["index_count"] == v["drawer_count"] == v["drawers_in_sqlite"]


def test_the_run_reports_no_failed_check(storage_run):
    assert storage_run["failures"] == []
