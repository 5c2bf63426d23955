"""``trusty-memory service``: the systemd unit it writes for this installation.

The unit is checked by systemd's own tools when they are installed: ``systemd-analyze
verify`` (which warns on stderr and still exits 0, so any output fails) and
``systemd-analyze security --offline=true`` (its overall exposure must be <= 3.0). Both
checks are first shown to catch a broken or an unhardened unit, so they can fail.

Covers: client/cli/systemd.py client/cli/service.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trusty_memory.client.cli import systemd as service
from trusty_memory.common.config import load_config

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
MAX_EXPOSURE = 3.0


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A home, a cache and a config dir of the test's own; a runtime dir for ``--user``."""
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


def cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)


def printed(env, *args: str) -> dict:
    done = cli(env, "service", "install", "--print", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write(tmp_path: Path, text: str, name: str = service.UNIT_NAME) -> Path:
    folder = tmp_path / "units" / str(abs(hash(text)))
    folder.mkdir(parents=True)
    path = folder / name
    path.write_text(text)
    return path


def verify(path: Path, scope: str, env) -> str:
    """Everything ``systemd-analyze verify`` says about the unit ("" when it is clean)."""
    user = ["--user"] if scope == "user" else []
    done = subprocess.run(
        [ANALYZE, "verify", *user, "--man=no", str(path)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return (
        f"rc={done.returncode} {done.stdout}{done.stderr}"
        if done.returncode
        else (done.stdout + done.stderr)
    )


def exposure(path: Path, scope: str, env) -> float:
    user = ["--user"] if scope == "user" else []
    done = subprocess.run(
        [ANALYZE, "security", *user, "--offline=true", str(path)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


# -- the checks themselves can fail -------------------------------------------------------


@needs_analyze
@pytest.mark.parametrize("scope", ["user", "system"])
def test_the_checks_catch_a_broken_or_unhardened_unit(tmp_path, env, scope):
    text = printed(env, f"--{scope}")["unit"]
    broken = text.replace("Restart=on-failure", "Restart=sometimes").replace(
        "[Install]", "Bogus=1\n[Install]"
    )
    said = verify(write(tmp_path, broken), scope, env)
    assert "sometimes" in said and "Bogus" in said
    missing = text.replace(sys.executable, "/nonexistent/python").replace(
        str(Path(sys.executable).parent), "/nonexistent"
    )
    assert "nonexistent" in verify(write(tmp_path, missing), scope, env)
    bare = "\n".join(
        line for line in text.splitlines()
        if not line.startswith(("Protect", "Private", "Restrict", "SystemCall", "NoNew",
                                "Capability", "IPAddress", "Lock", "Keyring", "Device",
                                "RemoveIPC", "ReadWrite"))
    )  # fmt: skip
    assert exposure(write(tmp_path, bare), scope, env) > MAX_EXPOSURE


# -- the generated units ------------------------------------------------------------------


@needs_analyze
@pytest.mark.parametrize("scope", ["user", "system"])
@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_the_unit_verifies_and_is_hardened(tmp_path, env, monkeypatch, scope, transport):
    if transport == "tcp":
        env = {**env, "TRUSTY_MEMORY_BROKER_FRONTEND": "tcp://127.0.0.1:7601"}
    data = printed(env, f"--{scope}")
    assert data["scope"] == scope and data["tcp"] == (transport == "tcp")
    text = data["unit"]
    families = re.search(r"^RestrictAddressFamilies=(.*)$", text, re.M).group(1).split()
    assert families == (["AF_UNIX", "AF_INET", "AF_INET6"] if transport == "tcp" else ["AF_UNIX"])
    assert ("PrivateNetwork=yes" in text) == (transport == "ipc")
    path = write(tmp_path, text)
    assert verify(path, scope, env) == ""
    score = exposure(path, scope, env)
    assert score <= MAX_EXPOSURE, f"{scope}/{transport}: exposure {score}"


def test_the_unit_names_this_installation(tmp_path, env):
    data = printed(env)
    script = Path(sys.executable).parent / "trusty-memory"
    expected = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-P", "-m", "trusty_memory.client.cli.main"]
    )
    assert data["command"] == [*expected, "daemon", "--take-over"]
    text = data["unit"]
    assert f"ExecStart={' '.join(data['command'])}\n" in text
    assert f"Environment=TRUSTY_MEMORY_HOME={env['TRUSTY_MEMORY_HOME']}\n" in text
    assert f"Environment=XDG_CACHE_HOME={env['XDG_CACHE_HOME']}\n" in text
    rw = re.search(r"^ReadWritePaths=(.*)$", text, re.M).group(1).split()
    assert rw == [env["TRUSTY_MEMORY_HOME"], f"-{env['XDG_CACHE_HOME']}/trusty-memory"]
    assert data["path"] == f"{env['XDG_CONFIG_HOME']}/systemd/user/trusty-memory.service"
    assert "systemctl --user daemon-reload" in data["enable"]


def test_a_home_under_tmp_is_warned_about(env):
    # tests put their homes in tmp_path (under /tmp): the unit's PrivateTmp hides it
    done = cli(env, "service", "install", "--print", "--json")
    data = json.loads(done.stdout)
    if not env["TRUSTY_MEMORY_HOME"].startswith(("/tmp/", "/var/tmp/")):
        pytest.skip("the test's tmp_path is not under /tmp")
    assert any(env["TRUSTY_MEMORY_HOME"] in w for w in data["warnings"])
    assert "PrivateTmp" in done.stderr
    quiet = json.loads(cli({**env, "TRUSTY_MEMORY_HOME": "/srv/tm", "XDG_CACHE_HOME": "/srv/c"},
                           "service", "install", "--print", "--json").stdout)  # fmt: skip
    assert quiet["warnings"] == []


def test_the_system_unit_runs_as_an_account(env):
    data = printed(env, "--system", "--run-as", "root")
    assert data["path"] == "/etc/systemd/system/trusty-memory.service"
    assert "\nUser=root\n" in data["unit"] and "WantedBy=multi-user.target" in data["unit"]
    assert data["enable"].startswith("systemctl daemon-reload")


def test_odd_paths_are_quoted(tmp_path, env, monkeypatch):
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(tmp_path / "my home %h $X"))
    unit = service.build_unit(load_config(), "user")
    line = next(x for x in unit.text.splitlines() if "TRUSTY_MEMORY_HOME=" in x)
    assert line == f'Environment="TRUSTY_MEMORY_HOME={tmp_path}/my home %%h $$X"'
    if ANALYZE:
        assert verify(write(tmp_path, unit.text), "user", env) == ""


def test_install_and_uninstall(tmp_path, env):
    done = cli(env, "service", "install", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    path = Path(data["path"])
    assert data["written"] and path.read_text() == data["unit"]
    assert path.stat().st_mode & 0o777 == 0o644
    for folder in (env["TRUSTY_MEMORY_HOME"], f"{env['XDG_CACHE_HOME']}/trusty-memory"):
        assert Path(folder).stat().st_mode & 0o777 == 0o700
    text = cli(env, "service", "uninstall")
    assert text.returncode == 0 and "removed" in text.stdout and not path.exists()
    again = json.loads(cli(env, "service", "uninstall", "--json").stdout)
    assert again == {"scope": "user", "path": str(path), "removed": False}


def test_deploy_holds_no_checkout_path():
    for path in (REPO / "deploy").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert str(REPO) not in text, path
            assert ".venv/bin" not in text and "%h/trusty-memory" not in text, path
    assert not list((REPO / "deploy").rglob("*.service")), "units come from `service install`"


def test_under_sudo_the_system_unit_is_the_invoking_users(env):
    import pwd

    account = next((p for p in pwd.getpwall() if p.pw_uid != os.getuid()), None)
    if account is None:
        pytest.skip("no other account on this machine")
    sudo = {k: v for k, v in env.items() if k not in ("TRUSTY_MEMORY_HOME", "XDG_CACHE_HOME")}
    data = printed({**sudo, "SUDO_USER": account.pw_name}, "--system")
    assert data["run_as"] == account.pw_name
    assert data["home"] == f"{account.pw_dir}/.local/share/trusty-memory"
    assert data["cache"] == f"{account.pw_dir}/.cache/trusty-memory"
    assert f"\nUser={account.pw_name}\n" in data["unit"]


def test_usage_errors_are_json_under_json(env):
    done = cli(env, "service", "install", "--user", "--system", "--json")
    assert done.returncode == 2
    assert "not allowed with argument" in json.loads(done.stdout)["error"]["message"]


def test_errors_say_what_went_wrong(tmp_path, env):
    bad = json.loads(cli(env, "service", "install", "--system", "--run-as", "no-such-user-x",
                         "--print", "--json").stdout)  # fmt: skip
    assert bad["error"]["message"] == "no such account: no-such-user-x"
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the config dir should be")
    done = cli({**env, "XDG_CONFIG_HOME": str(blocked)}, "service", "install", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["message"].startswith(f"service: {blocked}")
