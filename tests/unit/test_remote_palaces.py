"""The list of palaces remote writers serve survives the daemon (``broker/remote_palaces.py``).

Covers: broker/remote_palaces.py
"""

from __future__ import annotations

import json
import stat

import pytest

from trusty_memory.broker.remote_palaces import FILE_NAME, RemotePalaces, UnreadableList
from trusty_memory.common.protocol import ErrorCode, TrustyError


def test_a_recorded_palace_is_on_disk_before_record_returns(tmp_path):
    path = tmp_path / FILE_NAME
    palaces = RemotePalaces(path)
    assert "palace:far" not in palaces and not path.exists()
    palaces.record("palace:far", "build-host")
    again = RemotePalaces(path)  # what a restarted daemon reads
    assert "palace:far" in again and again.get("palace:far") == "build-host"
    assert list(again) == ["palace:far"] and len(again) == 1
    entry = json.loads(path.read_text())["palaces"]["far"]
    assert entry["host"] == "build-host" and entry["since"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # palace names are the user's own
    assert not list(tmp_path.glob("*.tmp"))


def test_a_new_host_is_recorded_and_the_same_one_rewrites_nothing(tmp_path):
    path = tmp_path / FILE_NAME
    palaces = RemotePalaces(path)
    palaces.record("palace:far", "a")
    first = path.stat().st_mtime_ns, path.stat().st_ino
    palaces.record("palace:far", "a")
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == first
    palaces.record("palace:far", "b")
    assert RemotePalaces(path).get("palace:far") == "b"


def test_forget_takes_a_palace_off_for_good(tmp_path):
    path = tmp_path / FILE_NAME
    palaces = RemotePalaces(path)
    palaces.record("palace:far", "a")
    palaces.record("palace:near", "b")
    assert palaces.forget("palace:far") == "a"
    assert palaces.forget("palace:far") is None
    again = RemotePalaces(path)
    assert "palace:far" not in again and again.get("palace:near") == "b"


@pytest.mark.parametrize("text", ["{not json", '{"palaces": [1]}', '{"other": {}}', "[]"])
def test_an_unreadable_list_stops_the_daemon_naming_the_file(tmp_path, text):
    path = tmp_path / FILE_NAME
    path.write_text(text)
    with pytest.raises(UnreadableList) as refused:
        RemotePalaces(path)
    assert str(path) in str(refused.value) and "remote workers serve" in str(refused.value)


def test_a_name_a_remote_writer_serves_is_refused_naming_its_host(tmp_path):
    palaces = RemotePalaces(tmp_path / FILE_NAME)
    palaces.refuse_name("far")  # not on the list: nothing to refuse
    palaces.record("palace:far", "build-host")
    with pytest.raises(TrustyError) as refused:
        palaces.refuse_name("far")
    assert refused.value.code == ErrorCode.PALACE_EXISTS
    message = "palace already exists: far (served by a remote worker on build-host)"
    assert refused.value.message == message


def test_forget_palace_is_refused_while_its_writer_is_connected_and_for_a_local_palace(tmp_path):
    path = tmp_path / FILE_NAME
    palaces = RemotePalaces(path)
    with pytest.raises(TrustyError, match="palace near is not served by a remote worker"):
        palaces.forget_palace("near", lambda service: False)
    palaces.record("palace:far", "build-host")
    asked: list[str] = []

    def connected(service: str) -> bool:
        asked.append(service)
        return True

    with pytest.raises(TrustyError, match="a remote worker on build-host serves palace far now"):
        palaces.forget_palace("far", connected)
    assert asked == ["palace:far"] and "palace:far" in RemotePalaces(path)
    assert palaces.forget_palace("far", lambda service: False) == "build-host"
    assert "palace:far" not in RemotePalaces(path)
