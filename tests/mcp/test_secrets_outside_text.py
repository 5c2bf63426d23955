"""Credentials outside a note's text: a room, a palace's description, metadata keys and
values (a value whose key names a secret has no prefix to know it by), a palace name,
and import lines carrying all of them (drawer ids are UUIDs: one that is a secret is
refused without being echoed).

Through the CLI, the library and the official MCP client against a real daemon. With the
default mode nothing of them reaches any file of the home (grepped byte by byte), and no
answer, export or listing shows one; a palace name that holds one is refused, since a
marker is no name to call it by again. A palace written with ``keep`` holds them in
clear until ``scrub --apply``, after which no file does, ``palace.json`` included.

Covers: common/credentials/fields.py workers/secrets_guard.py workers/scrub.py client/cli/scrub.py
    broker/broker.py
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import string
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, run_cli
from tests.mcp.conftest import sdk_session, short_tmp, tool_json
from tests.mcp.test_secrets import files_holding
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p

pytestmark = pytest.mark.slow

_rng = random.SystemRandom()


def _random(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


GITHUB_TOKEN = "ghp_" + _random(string.ascii_letters + string.digits, 36)
AWS_KEY = "AKIA" + _random(string.ascii_uppercase + "234567", 16)
# An AWS secret access key has no prefix: only the name it is the value of tells.
AWS_SECRET = _random(string.ascii_letters + string.digits + "/+", 40)
SLACK_TOKEN = (
    "xoxb-"
    + "-".join(_random(string.digits, 12) for _ in range(2))
    + "-"
    + _random(string.ascii_letters + string.digits, 24)
)
PLANTED = (GITHUB_TOKEN, AWS_KEY, AWS_SECRET, SLACK_TOKEN)
PALACE = "ops"


@pytest.fixture
def home() -> Iterator[Path]:
    home = short_tmp("tmsec2-")
    yield home
    Daemon(home).stop()
    shutil.rmtree(home, ignore_errors=True)


def assert_clean(value: object) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    for secret in PLANTED:
        assert secret.lower() not in text.lower(), secret[:4]


def import_file(path: Path) -> Path:
    """Lines an agent's export of another tool might hold: each string a place to hide one."""
    lines = [
        {
            "content": "Deploy notes for the billing service.",
            "room": f"GITHUB_TOKEN={GITHUB_TOKEN}",
            "metadata": {"aws_secret_access_key": AWS_SECRET, "source": "runbook"},
        },
        {
            "content": "Slack alerts go to #billing-oncall.",
            "metadata": {f"slack {SLACK_TOKEN}": "bot", "nested": [{"password": AWS_SECRET}]},
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def write_everywhere(daemon: Daemon, tmp_path: Path) -> str:
    """Every kind of string, once each; returns the id of the drawer written with a room."""
    made = run_cli(
        daemon, "palace", "create", PALACE, "--description", f"ops palace; aws key {AWS_KEY}"
    )
    assert made.returncode == 0, made.stderr
    stored = run_cli(
        daemon, "--json", "remember", PALACE, "The billing deploy runs at 02:00 UTC.",
        "--room", f"GITHUB_TOKEN={GITHUB_TOKEN}",
    )  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    drawer_id = json.loads(stored.stdout)["drawer_id"]
    with Client(daemon.config, autostart=False) as client:
        client.remember(
            PALACE,
            "Credentials for the nightly export job live in the vault.",
            metadata={"aws_secret_access_key": AWS_SECRET, f"token {SLACK_TOKEN}": 1},
        )
        other = client.remember(PALACE, "The export job writes to s3://billing-exports.")
        client.call(
            "memory_update",
            {"drawer_id": other.drawer_id, "room": f"room of {SLACK_TOKEN}"},
            palace=PALACE,
        )
    done = run_cli(daemon, "import", PALACE, str(import_file(tmp_path / "lines.jsonl")))
    assert done.returncode == 0, done.stderr
    return drawer_id


def test_every_string_is_redacted_and_names_and_ids_refused(home, tmp_path):
    daemon = Daemon(home).start()
    drawer_id = write_everywhere(daemon, tmp_path)
    listed = run_cli(daemon, "--json", "list", PALACE, "--limit", "20")
    assert listed.returncode == 0, listed.stderr
    assert_clean(listed.stdout)
    drawers = json.loads(listed.stdout)["drawers"]
    assert len(drawers) == 5
    rooms = {d["room"] for d in drawers}
    assert any(r.startswith("GITHUB_TOKEN=[secret:github-token #") for r in rooms), rooms
    assert any(r.startswith("room of [secret:slack-token #") for r in rooms), rooms
    with Client(daemon.config, autostart=False) as client:
        got = client.call("drawer_get", {"drawer_id": drawer_id}, palace=PALACE)
        assert got["room"].startswith("GITHUB_TOKEN=[secret:github-token #")
        # A room filter that holds the secret finds the room by its marker.
        found = client.call("memory_list", {"room": f"GITHUB_TOKEN={GITHUB_TOKEN}"}, palace=PALACE)
        assert {d["drawer_id"] for d in found["drawers"]} >= {drawer_id}
        for bad_id in (f"note-{GITHUB_TOKEN}", AWS_KEY):
            with pytest.raises(p.TrustyError) as refused:
                client.remember(PALACE, "an id that is a secret", drawer_id=bad_id)
            assert refused.value.code == p.ErrorCode.INVALID_PARAMS
            assert "'drawer_id' holds a secret" in refused.value.message
            assert_clean(refused.value.message)
    for verb in (["palace", "create", GITHUB_TOKEN], ["palace", "rename", PALACE, GITHUB_TOKEN]):
        refused = run_cli(daemon, *verb)
        assert refused.returncode != 0
        assert "'name' holds a secret (github-token" in refused.stderr, refused.stderr
        assert_clean(refused.stderr)
    shown = run_cli(daemon, "--json", "palace", "info", PALACE)
    assert shown.returncode == 0, shown.stderr
    assert "aws key [secret:aws-access-key #" in shown.stdout
    assert_clean(shown.stdout)
    export = tmp_path / "ops.jsonl"
    done = run_cli(daemon, "export", PALACE, "-o", str(export))
    assert done.returncode == 0, done.stderr
    assert_clean(export.read_text())
    exported = [json.loads(line) for line in export.read_text().splitlines()]
    metas = [d.get("metadata") for d in exported if d.get("metadata")]
    assert any(str(m.get("aws_secret_access_key", "")).startswith("[secret:") for m in metas), metas

    async def through_mcp():
        async with sdk_session(home, "--palace", PALACE) as s:
            answer = await s.call_tool(
                "memory_remember",
                {"text": "Staging uses the shared runner.", "room": f"x {GITHUB_TOKEN}"},
                read_timeout_seconds=120,
            )
            stored = tool_json(answer)
            assert stored["status"] == "stored"
            listed = tool_json(await s.call_tool("memory_list", {}, read_timeout_seconds=120))
            assert_clean(listed)

    asyncio.run(through_mcp())
    daemon.stop()  # the index snapshot and the summary are written on the way out
    assert files_holding(home, PLANTED) == []


def test_refuse_names_the_field_of_a_room_or_metadata(home):
    daemon = Daemon(home, {"TRUSTY_MEMORY_PRIVACY_SECRETS": "refuse"}).start()
    with Client(daemon.config, autostart=False) as client:
        client.call("palace_create", {"name": PALACE})
        cases = [
            ({"room": f"GITHUB_TOKEN={GITHUB_TOKEN}"}, "'room' holds a secret (github-token"),
            ({"metadata": {"aws_secret_access_key": AWS_SECRET}},
             "'metadata.aws_secret_access_key' holds a secret (aws-secret-key"),
            ({"metadata": {f"k {SLACK_TOKEN}": 1}}, "'a key of metadata' holds a secret"),
        ]  # fmt: skip
        for fields, expected in cases:
            with pytest.raises(p.TrustyError) as refused:
                client.remember(PALACE, "a plain note", **fields)
            assert expected in refused.value.message, refused.value.message
            assert_clean(refused.value.message)
        with pytest.raises(p.TrustyError) as refused:
            client.call("palace_create", {"name": "x", "description": f"key {AWS_KEY}"})
        assert "'description' holds a secret" in refused.value.message
        assert client.list(PALACE).drawers == []
    daemon.stop()
    assert files_holding(home, PLANTED) == []


def test_scrub_reaches_rooms_metadata_and_the_palace_file(home, tmp_path):
    keeping = Daemon(home, {"TRUSTY_MEMORY_PRIVACY_SECRETS": "keep"}).start()
    drawer_id = write_everywhere(keeping, tmp_path)
    keeping.stop()
    assert files_holding(home, PLANTED) != []
    daemon = Daemon(home).start()
    dry = run_cli(daemon, "--json", "scrub", PALACE)
    assert dry.returncode == 0, dry.stderr
    counts = json.loads(dry.stdout)
    assert counts["applied"] is False
    assert counts["palace_files"] == ["palace.json"], counts
    assert {"github-token", "aws-access-key", "aws-secret-key", "slack-token"} <= set(
        counts["found"]
    ), counts
    done = run_cli(daemon, "scrub", PALACE, "--apply")
    assert done.returncode == 0, done.stderr
    assert "no credentials found" not in done.stdout
    with Client(daemon.config, autostart=False) as client:
        got = client.call("drawer_get", {"drawer_id": drawer_id}, palace=PALACE)
        assert got["room"].startswith("GITHUB_TOKEN=[secret:github-token #")
        listed = client.list(PALACE, limit=50)
        assert len(listed.drawers) == 5
    again = run_cli(daemon, "--json", "scrub", PALACE)
    assert json.loads(again.stdout)["found"] == {}
    meta = json.loads((home / "palaces" / PALACE / "palace.json").read_text())
    assert meta["description"].startswith("ops palace; aws key [secret:aws-access-key #")
    daemon.stop()
    assert files_holding(home, PLANTED) == []
