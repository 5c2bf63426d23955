"""CURVE keys (common/keys.py), the key gate and tcp bind rules (common/transport.py), and
the ``trusty-memory keys`` verbs, on real files in throw-away homes.

Covers: common/keys.py common/transport.py client/cli/keys.py
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
import zmq.auth

from trusty_memory.common import keys, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.logs import setup_logging


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_makes_both_pairs_private_and_keeps_them(tmp_path):
    first = keys.init(tmp_path)
    assert first["created"] == ["server", "client"]
    assert first["server"] != first["client"]
    directory = tmp_path / "keys"
    assert _mode(directory) == 0o700
    for name in ("server.key", "server.key_secret", "client.key", "client.key_secret"):
        assert _mode(directory / name) == 0o600, name
    again = keys.init(tmp_path)
    assert again["created"] == [] and again["server"] == first["server"]
    pair = keys.server_pair(tmp_path)
    assert pair.public.decode() == first["server"] and len(pair.secret) == 40
    assert keys.show(tmp_path) == {"server": first["server"], "client": first["client"]}


def test_missing_keys_say_how_to_make_them(tmp_path):
    with pytest.raises(p.TrustyError, match="keys init"):
        keys.server_pair(tmp_path)
    with pytest.raises(p.TrustyError, match="keys init"):
        keys.client_pair(tmp_path)
    assert keys.show(tmp_path) == {"server": None, "client": None}


def test_add_list_revoke(tmp_path):
    other = keys.init(tmp_path / "laptop")["client"]
    keys.init(tmp_path)
    added = keys.add(tmp_path, "laptop", other)
    assert added["status"] == "allowed"
    assert keys.allowed_keys(tmp_path) == {other.encode(): "laptop"}
    assert keys.listed(tmp_path) == [{"name": "laptop", "key": other, "status": "allowed"}]
    keys.revoke(tmp_path, "laptop")
    assert keys.allowed_keys(tmp_path) == {}
    assert keys.listed(tmp_path) == [{"name": "laptop", "key": other, "status": "revoked"}]
    with pytest.raises(p.TrustyError, match="no allowed key named laptop"):
        keys.revoke(tmp_path, "laptop")
    keys.add(tmp_path, "laptop", other)  # allowed again: no longer listed as revoked
    assert [r["status"] for r in keys.listed(tmp_path)] == ["allowed"]


@pytest.mark.parametrize(
    "bad", ["", "short", "x" * 41, 'q&!Ccr84g)Y0xu{Z-^eK6/B7d]Z:*1BTIaJk9uB"', "é" * 40]
)
def test_bad_public_keys_are_refused_by_name(tmp_path, bad):
    with pytest.raises(p.TrustyError, match="not a CURVE public key"):
        keys.add(tmp_path, "someone", bad)


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b", "x" * 65])
def test_bad_key_names_are_refused(tmp_path, bad):
    key = keys.init(tmp_path)["client"]
    with pytest.raises(p.TrustyError, match="bad key name"):
        keys.add(tmp_path, bad, key)


def test_kubernetes_style_secret_mount(tmp_path, monkeypatch):
    """A folder of allowed keys mounted read-only: ``..data`` links, one file per key,
    each holding a certificate or the bare Z85 key."""
    a = keys.init(tmp_path / "a")["client"]
    b = keys.init(tmp_path / "b")["client"]
    mount = tmp_path / "mount"
    data = mount / "..2026_11_25_09_00_00.1"
    data.mkdir(parents=True)
    (data / "alice").write_text(a + "\n")
    (data / "bob.key").write_text((tmp_path / "b" / "keys" / "client.key").read_text())
    (data / "broken").write_text("not a key")
    (mount / "..data").symlink_to(data.name)
    for name in ("alice", "bob.key", "broken"):
        (mount / name).symlink_to(Path("..data") / name)
    monkeypatch.setenv(keys.CLIENT_KEYS_ENV, str(mount))
    assert keys.allowed_keys(tmp_path) == {a.encode(): "alice", b.encode(): "bob"}
    rows = {r["name"]: r for r in keys.listed(tmp_path)}
    assert rows["broken"]["status"] == "unreadable"


def test_secret_file_overrides(tmp_path, monkeypatch):
    keys.init(tmp_path / "mounted")
    secret = tmp_path / "mounted" / "keys" / "server.key_secret"
    monkeypatch.setenv(keys.SERVER_SECRET_ENV, str(secret))
    assert keys.server_pair(tmp_path).path == secret
    monkeypatch.setenv(keys.CLIENT_SECRET_ENV, str(tmp_path / "nowhere.key_secret"))
    with pytest.raises(p.TrustyError, match=r"nowhere\.key_secret"):
        keys.client_pair(tmp_path)
    public_only = tmp_path / "mounted" / "keys" / "server.key"
    monkeypatch.setenv(keys.CLIENT_SECRET_ENV, str(public_only))
    with pytest.raises(p.TrustyError, match="holds no secret key"):
        keys.client_pair(tmp_path)


def test_key_gate_reads_the_folder_at_each_ask_and_logs_a_refusal_once(tmp_path):
    own = keys.init(tmp_path)["server"].encode()
    laptop = keys.init(tmp_path / "laptop")["client"]
    gate = transport.KeyGate(tmp_path, own, setup_logging("test"))
    stranger = keys.init(tmp_path / "stranger")["client"].encode()
    with structlog.testing.capture_logs() as logs:
        assert gate.callback("trusty-memory", own)  # the daemon's own actors
        assert not gate.callback("trusty-memory", laptop.encode())
        keys.add(tmp_path, "laptop", laptop)
        assert gate.callback("trusty-memory", laptop.encode())
        keys.revoke(tmp_path, "laptop")
        for _ in range(5):
            assert not gate.callback("trusty-memory", laptop.encode())
            assert not gate.callback("trusty-memory", stranger)
    refused = [entry for entry in logs if entry["event"] == "connection refused: key not allowed"]
    assert [(e["client_key"], e["revoked_name"]) for e in refused] == [
        (laptop, None),
        (laptop, "laptop"),  # allowed in between: its refusal is news again
        (stranger.decode(), None),
    ]


@pytest.mark.parametrize(
    ("endpoint", "insecure", "curve"),
    [
        ("ipc:///tmp/x.sock", False, False),
        ("tcp://0.0.0.0:7601", False, True),
        ("tcp://127.0.0.1:7601", False, True),
        ("tcp://127.0.0.1:7601", True, False),
        ("tcp://[::1]:7601", True, False),
        ("tcp://localhost:7601", True, False),
    ],
)
def test_which_endpoints_are_curve(endpoint, insecure, curve):
    assert transport.check_bind(endpoint, insecure) is curve


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:7601", "tcp://10.1.2.3:7601"])
def test_plain_tcp_is_refused_off_loopback(endpoint):
    with pytest.raises(p.TrustyError, match="plain tcp refused"):
        transport.check_bind(endpoint, insecure=True)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_keys_verbs(tmp_path):
    server, laptop = tmp_path / "server", tmp_path / "laptop"
    init = _cli(server, "keys", "init", "--json")
    assert init.returncode == 0, init.stderr
    made = json.loads(init.stdout)
    shown = _cli(server, "keys", "show", "--server")
    assert shown.stdout.strip() == made["server"]
    _cli(laptop, "keys", "init")
    laptop_key = _cli(laptop, "keys", "show", "--client").stdout.strip()
    assert zmq.auth.load_certificate(laptop / "keys" / "client.key")[0].decode() == laptop_key
    added = _cli(server, "keys", "add", "laptop", laptop_key)
    assert added.returncode == 0 and "allowed laptop" in added.stdout
    listed = json.loads(_cli(server, "keys", "list", "--json").stdout)
    assert listed == {"keys": [{"name": "laptop", "key": laptop_key, "status": "allowed"}]}
    assert _cli(server, "keys", "revoke", "laptop").returncode == 0
    assert json.loads(_cli(server, "keys", "list", "--json").stdout)["keys"][0]["status"] == (
        "revoked"
    )
    bad = _cli(server, "keys", "add", "x", "not-a-key")
    assert bad.returncode == 1 and "not a CURVE public key" in bad.stderr
    nothing = _cli(tmp_path / "empty", "keys", "show", "--client")
    assert nothing.returncode == 1 and "keys init" in nothing.stderr


def test_keys_that_start_with_a_dash(tmp_path):
    """About one key in 85 starts with '-': argparse must not take it for an option."""
    dashed = "-.9@rfoNn<k2Gt^cdm6U8jUg=YGb*qtD%ULXsh$-"
    added = _cli(tmp_path, "keys", "add", "dashed", dashed)
    assert added.returncode == 0, added.stderr
    assert keys.allowed_keys(tmp_path) == {dashed.encode(): "dashed"}
    # After --server-key too: the client gets as far as its own missing key pair.
    out = _cli(tmp_path, "status", "--daemon", "tcp://192.0.2.1:7601", "--server-key", dashed)
    assert "no client key" in out.stdout + out.stderr, out


def test_a_read_only_allowed_folder_is_a_clear_error(tmp_path, monkeypatch):
    if os.geteuid() == 0:  # root writes through file modes: make the folder a file instead
        mount = tmp_path / "not-a-folder"
        mount.write_text("")
    else:
        mount = tmp_path / "mount"
        mount.mkdir(mode=0o500)
    monkeypatch.setenv(keys.CLIENT_KEYS_ENV, str(mount))
    key = keys.init(tmp_path / "laptop")["client"]
    with pytest.raises(p.TrustyError, match="keys: cannot write"):
        keys.add(tmp_path, "laptop", key)
