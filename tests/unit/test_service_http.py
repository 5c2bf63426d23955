"""``service install --http``: the unit (and launchd agent) of the MCP-over-HTTP endpoint.

A second unit beside the daemon's, ``trusty-memory-http``, running ``trusty-memory http``.
Checked as the daemon's unit is (``test_service.py``): systemd's own ``verify`` and
``security`` on what ``--print`` shows, install and uninstall for real in a home of the
test's own; the agent with ``test_launchd.py``'s reading of launchd.plist(5).

Covers: client/cli/systemd.py client/cli/service.py client/cli/launchd.py
"""

from __future__ import annotations

import json
import os
import plistlib
import re
import sys
from pathlib import Path

import pytest

from tests.deploy.test_launchd import check_job
from tests.unit.test_service import (
    MAX_EXPOSURE,
    cli,
    exposure,
    needs_analyze,
    printed,
    verify,
    write,
)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """As ``test_service.py``'s: a home, a cache and a config dir of the test's own."""
    values = {
        "TRUSTY_MEMORY_HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
    }
    (tmp_path / "run").mkdir(mode=0o700)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **values}


def expected_executable() -> list[str]:
    script = Path(sys.executable).parent / "trusty-memory"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-P", "-m", "trusty_memory.client.cli.main"]


def test_the_http_unit_runs_the_endpoint_beside_the_daemons_unit(env):
    data = printed(env, "--http", "--palace", "proj")
    assert data["http"] == "127.0.0.1:3031"
    assert data["command"] == [
        *expected_executable(), "http", "--listen", "127.0.0.1:3031", "--palace", "proj",
    ]  # fmt: skip
    assert data["path"] == f"{env['XDG_CONFIG_HOME']}/systemd/user/trusty-memory-http.service"
    assert data["enable"].endswith("enable --now trusty-memory-http")
    text = data["unit"]
    assert f"ExecStart={' '.join(data['command'])}\n" in text
    assert "\nWants=trusty-memory.service\nAfter=trusty-memory.service\n" in text
    assert f"Environment=TRUSTY_MEMORY_HOME={env['TRUSTY_MEMORY_HOME']}\n" in text
    # it listens: inet families, but (on loopback, daemon on ipc) only loopback peers
    families = re.search(r"^RestrictAddressFamilies=(.*)$", text, re.M).group(1).split()
    assert families == ["AF_UNIX", "AF_INET", "AF_INET6"]
    assert "PrivateNetwork=" not in text
    assert "\nIPAddressAllow=localhost\nIPAddressDeny=any\n" in text
    # the daemon's unit is untouched by the option
    daemon = printed(env)
    assert daemon["http"] is None and daemon["command"][-2:] == ["daemon", "--take-over"]
    assert daemon["path"].endswith("/trusty-memory.service")


def test_an_address_given_and_a_remote_one(env):
    data = printed(env, "--http", "127.0.0.1:4000")
    assert data["command"][-3:] == ["http", "--listen", "127.0.0.1:4000"]
    remote = printed(env, "--system", "--run-as", "root", "--http", "0.0.0.0:4000",
                     "--allow-remote")  # fmt: skip
    assert remote["command"][-4:] == ["http", "--listen", "0.0.0.0:4000", "--allow-remote"]
    assert "IPAddressDeny" not in remote["unit"]  # peers from anywhere: what it was asked
    assert "\nWants=network-online.target\n" in remote["unit"]  # the address must be up


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--http", "0.0.0.0:4000"], "--allow-remote"),
        (["--http", "nonsense"], "expected HOST:PORT"),
        (["--http", "--palace", "../x"], "--palace: invalid palace name"),
        (["--palace", "proj"], "--palace and --allow-remote go with --http"),
    ],
)
def test_what_http_would_refuse_is_refused_at_install(env, args, needle):
    done = cli(env, "service", "install", "--print", "--json", *args)
    assert done.returncode == 1
    assert needle in json.loads(done.stdout)["error"]["message"]


@needs_analyze
@pytest.mark.parametrize("scope", ["user", "system"])
@pytest.mark.parametrize("where", ["loopback", "remote", "tcp daemon"])
def test_the_http_unit_verifies_and_is_hardened(tmp_path, env, scope, where):
    args = ["--http", "0.0.0.0:4000", "--allow-remote"] if where == "remote" else ["--http"]
    if where == "tcp daemon":
        env = {**env, "TRUSTY_MEMORY_BROKER_FRONTEND": "tcp://127.0.0.1:7601"}
    run_as = ["--run-as", "root"] if scope == "system" else []
    text = printed(env, f"--{scope}", *run_as, *args)["unit"]
    path = write(tmp_path, text, "trusty-memory-http.service")
    assert verify(path, scope, env) == ""
    score = exposure(path, scope, env)
    assert score <= MAX_EXPOSURE, f"{scope}/{where}: exposure {score}"


def test_install_and_uninstall_leave_the_daemons_unit_alone(env):
    daemon = json.loads(cli(env, "service", "install", "--json").stdout)
    done = cli(env, "service", "install", "--http")
    assert done.returncode == 0, done.stderr
    path = Path(env["XDG_CONFIG_HOME"]) / "systemd/user/trusty-memory-http.service"
    assert f"wrote {path}" in done.stdout
    assert f"{env['TRUSTY_MEMORY_HOME']}/http-token" in done.stdout
    assert "http --listen 127.0.0.1:3031" in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o644
    gone = json.loads(cli(env, "service", "uninstall", "--http", "--json").stdout)
    assert gone == {"scope": "user", "path": str(path), "removed": True}
    assert not path.exists() and Path(daemon["path"]).read_text() == daemon["unit"]


def test_the_launchd_agent_of_the_endpoint(tmp_path):
    mac = {
        **os.environ,
        "HOME": str(tmp_path / "user"),
        "TRUSTY_MEMORY_HOME": str(tmp_path / "my home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    (tmp_path / "user").mkdir()
    done = cli(mac, "service", "install", "--launchd", "--print", "--json", "--http",
               "--palace", "proj")  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    job = plistlib.loads(data["unit"].encode())
    assert check_job(job) == []
    assert job["Label"] == "trusty-memory-http"
    assert job["ProgramArguments"] == data["command"] == [
        *expected_executable(), "http", "--listen", "127.0.0.1:3031", "--palace", "proj",
    ]  # fmt: skip
    assert job["StandardErrorPath"] == f"{tmp_path}/my home/logs/http.log"
    assert job["KeepAlive"] == {"SuccessfulExit": False, "Crashed": True}
    assert data["path"] == f"{tmp_path}/user/Library/LaunchAgents/trusty-memory-http.plist"
    assert data["enable"].endswith("trusty-memory-http.plist")
    done = cli(mac, "service", "install", "--launchd", "--http")
    assert done.returncode == 0, done.stderr
    assert Path(data["path"]).exists()
    removed = cli(mac, "service", "uninstall", "--launchd", "--http")
    assert removed.returncode == 0 and not Path(data["path"]).exists()
    assert "trusty-memory-http" in removed.stdout
