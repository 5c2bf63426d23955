"""Credentials never stored in clear: through the official MCP client against a real daemon.

A remember holding an AWS key and a Postgres URL with its password is stored with markers
in their place, and neither secret comes back from recall, deep recall, search, list,
get, the archive, an export or the web page, nor is in any file of the home. ``refuse``
answers a clear error and stores nothing. A palace written with ``keep`` holds them in
clear until ``trusty-memory scrub --apply``, after which no file of the home does. One
secret always leaves one marker.

Every credential is made at random in its provider's format when the module loads.

Covers: workers/secrets_guard.py common/credentials/redactor.py common/credentials/detector.py
    workers/scrub.py client/cli/scrub.py
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import string
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import Daemon, run_cli
from tests.mcp.conftest import sdk_session, short_tmp, tool_error, tool_json
from tests.ui.conftest import Ui, start_ui, stop_ui

pytestmark = pytest.mark.slow

_rng = random.SystemRandom()
AWS_KEY = "AKIA" + "".join(_rng.choice(string.ascii_uppercase + "234567") for _ in range(16))
DB_PASSWORD = "".join(_rng.choice(string.ascii_letters + string.digits) for _ in range(18)) + "7"
DB_URL = f"postgresql://orders:{DB_PASSWORD}@pg-primary.internal:5432/orders"
NOTE = (
    "Staging creds, from the .env of the orders service:\n"
    f"AWS_ACCESS_KEY_ID={AWS_KEY}\nDATABASE_URL={DB_URL}\n"
    "Rotate both after the demo."
)
PLANTED = (AWS_KEY, DB_PASSWORD)
MARKER = re.compile(r"\[secret:([a-z0-9-]+) #([0-9a-f]{6})\]")
PALACE = "orders"


@pytest.fixture
def home() -> Iterator[Path]:
    home = short_tmp("tmsec-")
    yield home
    Daemon(home).stop()
    shutil.rmtree(home, ignore_errors=True)


async def call(session, tool: str, /, **arguments) -> dict:
    return tool_json(await session.call_tool(tool, arguments, read_timeout_seconds=120))


def files_holding(home: Path, secrets=PLANTED) -> list[str]:
    """Every file under ``home`` whose bytes hold one of ``secrets``, in any case (the
    full-text index keeps words lowercased)."""
    hits = []
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes().lower()
            hits += [
                f"{path.relative_to(home)}: {s[:4]}..."
                for s in secrets
                if s.lower().encode() in data
            ]
    return hits


def assert_clean(value) -> None:
    """No planted secret anywhere in a result (as JSON, so every field is seen)."""
    text = json.dumps(value) if not isinstance(value, str) else value
    for secret in PLANTED:
        assert secret not in text and secret.lower() not in text.lower(), secret[:4]


def markers_of(text: str) -> dict[str, str]:
    return {kind: fingerprint for kind, fingerprint in MARKER.findall(text)}


def test_a_remember_with_credentials_is_stored_redacted_and_never_shown(home, tmp_path):
    daemon = Daemon(home).start()
    ids: list[str] = []

    async def go():
        async with sdk_session(home, "--palace", PALACE, "--tools", "extended") as s:
            stored = await call(s, "memory_remember", text=NOTE, room="Backend", tags=["env"])
            assert set(stored) == {"drawer_id", "palace", "status"}  # the contract's shape
            assert stored["status"] == "stored"
            drawer_id = stored["drawer_id"]
            second = await call(s, "memory_remember", text=f"Rotated {AWS_KEY} on Friday.")
            ids.append(second["drawer_id"])
            got = await call(s, "memory_get", drawer_id=drawer_id)
            assert_clean(got)
            marks = markers_of(got["content"])
            assert set(marks) == {"aws-access-key", "url-password"}
            assert "postgresql://orders:[secret:url-password #" in got["content"]
            # The same secret twice: the same marker.
            other = await call(s, "memory_get", drawer_id=second["drawer_id"])
            assert markers_of(other["content"]) == {"aws-access-key": marks["aws-access-key"]}
            listed = await call(s, "memory_list")
            assert len(listed["drawers"]) == 2
            assert_clean(listed)
            # A question that holds the secret finds the note by its marker.
            for tool in ("memory_recall", "memory_recall_deep"):
                found = await call(s, tool, query=f"which note had {AWS_KEY}?", top_k=5)
                assert_clean(found)
                assert {drawer_id, second["drawer_id"]} <= {
                    h["drawer_id"] for h in found["results"]
                }
            searched = await call(s, "memory_search", query="staging creds orders")
            assert_clean(searched)
            assert [d["drawer_id"] for d in searched["drawers"]] == [drawer_id]
            # An update's earlier version goes to the archive: redacted too.
            await call(
                s, "memory_update", drawer_id=drawer_id, text=f"Moved to vault. Old: {DB_URL}"
            )
            await call(
                s, "kg_assert", subject="orders db", predicate="password", object=DB_PASSWORD
            )
            facts = await call(s, "kg_query", subject="orders db")
            assert_clean(facts)
            assert facts["triples"][0]["object"].startswith("[secret:password #")
            stats = await call(s, "memory_stats")
            assert stats["redacted_count"] == 2

    asyncio.run(go())
    second_id = ids[0]
    archived = run_cli(daemon, "--json", "archive", "list", PALACE)
    assert archived.returncode == 0, archived.stderr
    assert len(json.loads(archived.stdout)["drawers"]) == 1
    assert_clean(archived.stdout)
    export = tmp_path / "orders.jsonl"
    done = run_cli(daemon, "export", PALACE, "-o", str(export))
    assert done.returncode == 0, done.stderr
    assert "[secret:aws-access-key #" in export.read_text()
    assert_clean(export.read_text())
    # The web page: markers drawn as such, a "redacted" badge, the count on the palace page.
    proc, url = start_ui(daemon)
    try:
        parts = urlsplit(url)
        ui = Ui(f"{parts.scheme}://{parts.netloc}", parts.query.removeprefix("token="),
                daemon, proc, "")  # fmt: skip
        cookie = {"Cookie": f"{ui.cookie}={ui.token}"}

        def get(path: str) -> str:
            status, page = ui.request("GET", path, headers=cookie)
            assert status == 200, (path, status, page[:500])
            assert_clean(page)
            return page

        page = get(f"/palace/{PALACE}")
        assert 'class="badge redacted"' in page and 'id="redacted-count">2 redacted' in page
        assert '<span class="secret" title="a aws-access-key was here' in page
        assert "[secret:aws-access-key #" in get(f"/palace/{PALACE}?q=staging+creds")
        assert 'id="redacted">redacted' in get(f"/palace/{PALACE}/drawer/{second_id}")
        assert "[secret:aws-access-key #" in get(f"/palace/{PALACE}/archive")
    finally:
        stop_ui(proc)
    daemon.stop()  # the index snapshot and the summary are written on the way out
    assert files_holding(home) == []


def test_refuse_answers_a_clear_error_and_stores_nothing(home):
    Daemon(home, {"TRUSTY_MEMORY_PRIVACY_SECRETS": "refuse"}).start()

    async def go():
        async with sdk_session(home, "--palace", PALACE) as s:
            refused = await s.call_tool("memory_remember", {"text": NOTE}, read_timeout_seconds=120)
            message = tool_error(refused)  # an isError result: the SDK client's revision
            assert message.startswith("memory_remember: 'text' holds 2 secrets (")
            assert "aws-access-key at characters" in message and "url-password at" in message
            assert 'nothing was stored ([privacy] secrets = "refuse")' in message
            assert_clean(message)
            refused = await s.call_tool(
                "kg_assert",
                {"subject": "orders db", "predicate": "password", "object": DB_PASSWORD},
                read_timeout_seconds=120,
            )
            assert "'object' holds a secret" in tool_error(refused)
            assert (await call(s, "memory_list"))["drawers"] == []
            assert (await call(s, "kg_query", subject="orders db"))["triples"] == []
            # The palace goes on serving: a note with no credential is stored as written.
            await call(s, "memory_remember", text="The orders service moved to Postgres 16.")
            assert len((await call(s, "memory_list"))["drawers"]) == 1

    asyncio.run(go())
    Daemon(home).stop()
    assert files_holding(home) == []


def test_scrub_leaves_no_trace_of_what_keep_stored(home, tmp_path):
    keeping = Daemon(home, {"TRUSTY_MEMORY_PRIVACY_SECRETS": "keep"}).start()

    async def write():
        async with sdk_session(home, "--palace", PALACE, "--tools", "extended") as s:
            stored = await call(s, "memory_remember", text=NOTE, room="Backend")
            await call(
                s, "memory_remember", text="Follow-up: alerts on the orders DB", room="Backend"
            )
            await call(
                s, "memory_update", drawer_id=stored["drawer_id"], text=f"Old key: {AWS_KEY}"
            )
            await call(
                s, "kg_assert", subject="orders db", predicate="password", object=DB_PASSWORD
            )
            listed = await call(s, "memory_list")
            assert AWS_KEY in json.dumps(listed)  # kept as written
            return stored["drawer_id"]

    drawer_id = asyncio.run(write())
    keeping.stop()
    log = keeping.log_tail(10_000)
    assert log.count("credentials in writes are not redacted") == 1  # said once, at start
    assert files_holding(home) != []  # the palace file holds them in clear
    daemon = Daemon(home).start()
    # Before any scrub, an export under the default policy carries no credential either.
    export = tmp_path / "before-scrub.jsonl"
    done = run_cli(daemon, "export", PALACE, "-o", str(export))
    assert done.returncode == 0, done.stderr
    assert "[secret:aws-access-key #" in export.read_text()
    assert_clean(export.read_text())
    dry = run_cli(daemon, "--json", "scrub", PALACE)
    assert dry.returncode == 0, dry.stderr
    counts = json.loads(dry.stdout)
    assert counts["applied"] is False
    # The key twice (the drawer, its archived version) and once more when the follow-up's
    # context words kept it (an episode predecessor's words: written within its window).
    found = counts["found"]
    assert set(found) == {"aws-access-key", "password", "url-password"}, found
    assert found["aws-access-key"] in (2, 3) and found["password"] == found["url-password"] == 1
    assert counts["drawers"] in (1, 2) and (counts["archived"], counts["triples"]) == (1, 1)
    assert files_holding(home) != []  # a dry run changes nothing
    done = run_cli(daemon, "scrub", PALACE, "--apply")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{PALACE}: redacted {sum(found.values())} credentials")

    async def read():
        async with sdk_session(home, "--palace", PALACE, "--tools", "extended") as s:
            got = await call(s, "memory_get", drawer_id=drawer_id)
            assert got["content"].startswith("Old key: [secret:aws-access-key #")
            # The same secret written now leaves the marker the scrub left.
            fresh = await call(s, "memory_remember", text=f"Still seeing {AWS_KEY} in CI logs")
            again = await call(s, "memory_get", drawer_id=fresh["drawer_id"])
            assert markers_of(again["content"]) == markers_of(got["content"])
            found = await call(s, "memory_recall_deep", query=f"old key {AWS_KEY}", top_k=5)
            assert drawer_id in {h["drawer_id"] for h in found["results"]}
            assert_clean(await call(s, "kg_query", subject="orders db"))

    asyncio.run(read())
    again = run_cli(daemon, "--json", "scrub", PALACE)
    assert json.loads(again.stdout)["found"] == {}
    daemon.stop()
    assert files_holding(home) == []
