"""``trusty-memory service install --launchd``: the launchd agent it writes for macOS.

No launchd or ``plutil`` runs here, so the agent is read back with ``plistlib`` (the
format launchd reads) and checked key by key against what launchd documents
(launchd.plist(5)): the types of the keys, the job's command, environment and logs, and
the restart policy. Install and uninstall run for real against a home directory of the
test's own, as they would on macOS.

Covers: client/cli/launchd.py client/cli/service.py
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]
# launchd.plist(5): the keys the agent may use, with the type launchd requires of each.
LAUNCHD_TYPES = {
    "Label": str,
    "ProgramArguments": list,
    "EnvironmentVariables": dict,
    "WorkingDirectory": str,
    "RunAtLoad": bool,
    "KeepAlive": (bool, dict),
    "ThrottleInterval": int,
    "ExitTimeOut": int,
    "ProcessType": str,
    "Umask": int,
    "StandardOutPath": str,
    "StandardErrorPath": str,
}
KEEP_ALIVE_KEYS = {"SuccessfulExit", "Crashed", "NetworkState", "PathState", "OtherJobEnabled"}


@pytest.fixture
def env(tmp_path):
    values = {
        "HOME": str(tmp_path / "user"),  # ~/Library/LaunchAgents is under it
        "TRUSTY_MEMORY_HOME": str(tmp_path / "my home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    (tmp_path / "user").mkdir()
    return {**os.environ, **values}


def cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)


def printed(env, *args: str) -> dict:
    done = cli(env, "service", "install", "--launchd", "--print", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_job(job: dict) -> list[str]:
    """What launchd would reject or ignore in a job (empty when there is nothing)."""
    problems = [f"unknown key {k}" for k in job if k not in LAUNCHD_TYPES]
    for key, want in LAUNCHD_TYPES.items():
        if key in job and not isinstance(job[key], want):
            problems.append(f"{key} is {type(job[key]).__name__}")
    if not job.get("Label"):
        problems.append("no Label")
    args = job.get("ProgramArguments") or []
    if not args or not all(isinstance(a, str) for a in args):
        problems.append("ProgramArguments must be a non-empty list of strings")
    elif not Path(args[0]).is_absolute():
        problems.append("ProgramArguments[0] is not an absolute path (not on launchd's PATH)")
    env = job.get("EnvironmentVariables", {})
    if not all(isinstance(v, str) for v in env.values()):
        problems.append("EnvironmentVariables values must be strings")
    keep = job.get("KeepAlive")
    if isinstance(keep, dict) and set(keep) - KEEP_ALIVE_KEYS:
        problems.append(f"unknown KeepAlive keys {set(keep) - KEEP_ALIVE_KEYS}")
    return problems


def test_the_check_catches_what_launchd_rejects():
    assert check_job({"Label": "x", "ProgramArguments": ["/bin/true"]}) == []
    assert check_job({"Label": "x", "Program Arguments": ["/bin/true"]}) == [
        "unknown key Program Arguments",
        "ProgramArguments must be a non-empty list of strings",
    ]
    assert check_job({"Label": "x", "ProgramArguments": ["trusty-memory"], "Umask": "077"}) == [
        "Umask is str",
        "ProgramArguments[0] is not an absolute path (not on launchd's PATH)",
    ]
    assert check_job(
        {"Label": "x", "ProgramArguments": ["/a"], "KeepAlive": {"OnFailure": True}}
    ) == ["unknown KeepAlive keys {'OnFailure'}"]


def test_the_agent_runs_this_installation(env):
    data = printed(env)
    assert data["manager"] == "launchd" and data["scope"] == "user"
    job = plistlib.loads(data["unit"].encode())
    assert check_job(job) == []
    script = Path(sys.executable).parent / "trusty-memory"
    expected = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-m", "trusty_memory.client.cli.main"]
    )
    assert job["ProgramArguments"] == [*expected, "daemon", "--take-over"] == data["command"]
    assert job["Label"] == "trusty-memory"
    assert data["path"] == f"{env['HOME']}/Library/LaunchAgents/trusty-memory.plist"
    home = env["TRUSTY_MEMORY_HOME"]
    assert job["EnvironmentVariables"] == {
        "TRUSTY_MEMORY_HOME": home,
        "XDG_CACHE_HOME": env["XDG_CACHE_HOME"],
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TRUSTY_MEMORY_LOG": "info",
    }
    assert data["home"] == home and data["cache"] == f"{env['XDG_CACHE_HOME']}/trusty-memory"
    assert job["WorkingDirectory"] == home
    # logs: the file `trusty-memory logs` reads, in the home
    assert job["StandardErrorPath"] == job["StandardOutPath"] == f"{home}/logs/daemon.log"
    assert data["enable"] == f'launchctl bootstrap gui/"$(id -u)" {data["path"]}'


def test_it_is_kept_alive_on_failure_only(env):
    job = plistlib.loads(printed(env)["unit"].encode())
    # restarted after a non-zero exit or a crash, never after exit 0
    assert job["KeepAlive"] == {"SuccessfulExit": False, "Crashed": True}
    assert job["RunAtLoad"] is True
    assert job["ThrottleInterval"] == 5 and job["ExitTimeOut"] == 30
    assert job["Umask"] == 0o077


def test_without_xdg_cache_home_the_platform_default_is_left_alone(env):
    env = {k: v for k, v in env.items() if k != "XDG_CACHE_HOME"}
    job = plistlib.loads(printed(env)["unit"].encode())
    assert "XDG_CACHE_HOME" not in job["EnvironmentVariables"]


def test_odd_paths_survive_the_plist(tmp_path, env):
    odd = str(tmp_path / "a & <b> 'c' \"d\" $HOME %h")
    job = plistlib.loads(printed({**env, "TRUSTY_MEMORY_HOME": odd})["unit"].encode())
    assert job["EnvironmentVariables"]["TRUSTY_MEMORY_HOME"] == odd
    assert job["StandardErrorPath"] == f"{odd}/logs/daemon.log"


def test_install_and_uninstall(env):
    done = cli(env, "service", "install", "--launchd", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    path = Path(data["path"])
    assert data["written"] and path.read_text() == data["unit"]
    assert path.stat().st_mode & 0o777 == 0o644
    assert plistlib.loads(path.read_bytes())["Label"] == "trusty-memory"
    logs = Path(env["TRUSTY_MEMORY_HOME"]) / "logs"  # launchd creates no folders
    assert logs.is_dir() and logs.parent.stat().st_mode & 0o777 == 0o700
    text = cli(env, "service", "uninstall", "--launchd")
    assert text.returncode == 0 and "removed" in text.stdout and not path.exists()
    assert "launchctl bootout" in text.stdout
    again = json.loads(cli(env, "service", "uninstall", "--launchd", "--json").stdout)
    assert again == {"scope": "user", "path": str(path), "removed": False}


def test_system_scope_is_refused_with_the_reason(env):
    for extra in (["--system"], ["--system", "--run-as", "root"]):
        done = cli(env, "service", "install", "--launchd", "--print", "--json", *extra)
        assert done.returncode == 1
        assert "only a user agent" in json.loads(done.stdout)["error"]["message"]
    both = cli(env, "service", "install", "--launchd", "--systemd", "--json")
    assert both.returncode == 2


def test_systemd_stays_the_default_off_macos(env):
    if sys.platform == "darwin":
        pytest.skip("macOS: launchd is the default")
    data = json.loads(cli(env, "service", "install", "--print", "--json").stdout)
    assert data["manager"] == "systemd" and data["path"].endswith("trusty-memory.service")


@pytest.mark.slow
def test_the_job_runs_as_launchd_would_start_it(tmp_path):
    """The agent's job run the way launchd runs it (no launchd here): its ProgramArguments
    in its WorkingDirectory, with only launchd's own variables (HOME, USER, a bare PATH) and
    the job's EnvironmentVariables, stdout and stderr appended to its log. The daemon
    answers, then exits 0 on SIGTERM, which KeepAlive leaves stopped."""
    from trusty_memory.common.config import load_config

    home = Path(tempfile.mkdtemp(prefix="tml-", dir="/tmp"))  # ipc paths stay short
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home), "HOME": str(tmp_path)}
    env.pop("XDG_CACHE_HOME", None)  # the model: the cache setup filled, ~/.cache
    real_home = str(Path.home())
    try:
        done = cli(env, "service", "install", "--launchd", "--json")
        assert done.returncode == 0, done.stderr
        job = plistlib.loads(Path(json.loads(done.stdout)["path"]).read_bytes())
        launchd_env = {"HOME": real_home, "USER": os.environ.get("USER", "user"),
                       "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                       **job["EnvironmentVariables"]}  # fmt: skip
        log = os.open(job["StandardErrorPath"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        proc = subprocess.Popen(job["ProgramArguments"], env=launchd_env, stdout=log,
                                stderr=log, cwd=job["WorkingDirectory"])  # fmt: skip
        os.close(log)
        from trusty_memory.client.autostart import ping

        os.environ["TRUSTY_MEMORY_HOME"] = str(home)
        try:
            config = load_config()
        finally:
            del os.environ["TRUSTY_MEMORY_HOME"]
        deadline = time.monotonic() + 60
        while not ping(config, 0.5):
            assert proc.poll() is None, Path(job["StandardErrorPath"]).read_text()[-3000:]
            assert time.monotonic() < deadline, "the daemon did not answer within 60 s"
            time.sleep(0.2)
        status = cli({**launchd_env, "PATH": os.environ["PATH"]}, "status")
        assert status.returncode == 0, status.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # a successful exit: not restarted
        assert "daemon" in Path(job["StandardErrorPath"]).read_text()
    finally:
        if "proc" in locals() and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(home, ignore_errors=True)
