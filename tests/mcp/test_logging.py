"""Logs go to stderr only, default level warn; TRUSTY_MEMORY_LOG or RUST_LOG raise it.

Covers: common/logs.py
"""

from __future__ import annotations

import json

import pytest


def _session(raw_serve, **env):
    s = raw_serve(**env)
    s.initialize()
    assert len(s.call(1, "tools/list")["result"]["tools"]) == 10
    s.close_stdin()
    assert s.wait(10) == 0
    return s.stderr_text()


def test_default_level_is_quiet(raw_serve):
    assert "serving MCP on stdio" not in _session(raw_serve)


@pytest.mark.parametrize("var", ["TRUSTY_MEMORY_LOG", "RUST_LOG"])
def test_env_sets_the_level(raw_serve, var):
    stderr = _session(raw_serve, **{var: "info"})
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    started = [rec for rec in lines if rec.get("event") == "serving MCP on stdio"]
    assert started and started[0]["actor"] == "serve" and started[0]["level"] == "info"
