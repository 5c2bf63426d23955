"""Hostile stdin for serve and malformed frames for the broker: answered, never fatal."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import run_part

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory) -> dict:
    return run_part("fuzz", tmp_path_factory.mktemp("fuzz") / "fuzz.json")


@pytest.mark.parametrize("side", ["stdin", "broker_front"])
def test_every_request_is_answered_validly_and_nothing_dies(fuzz_run, side):
    t = fuzz_run[side]
    assert t["sent"] >= 1000
    assert t["crashes"] == 0 and t["hangs"] == 0, t["examples"]
    assert t["invalid"] == 0, t["examples"]
    assert t["answered"] == t["expected"] > 500, t["examples"]


def test_every_fixed_case_kind_was_sent(fuzz_run):
    kinds = set(fuzz_run["stdin"]["kinds"])
    assert {"wrong-type", "nesting", "unicode", "bad-utf8", "huge", "batch", "duplicate-id",
            "notification-with-id", "random-bytes", "truncated", "mutated"} <= kinds  # fmt: skip
    assert {"nesting", "wrong-params", "envelope", "huge", "duplicate-id", "multipart"} <= set(
        fuzz_run["broker_front"]["kinds"]
    )


def test_everything_still_serves_afterwards(fuzz_run):
    assert fuzz_run["stdin"]["checks"]["still_serving_after"]
    assert fuzz_run["stdin"]["exit_codes_on_eof"] == [0, 0, 0, 0]
    assert fuzz_run["broker_front"]["checks"]["broker_pid_unchanged"]
    assert not any(fuzz_run["broker_front"]["worker_restarts"].values())
    assert fuzz_run["checks"]["a_new_session_serves_after"]
    assert fuzz_run["failures"] == []
