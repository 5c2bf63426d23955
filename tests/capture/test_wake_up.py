"""``trusty-memory wake-up PALACE`` and the MCP resource ``.../wake-up``: the palace's
identity and its most important notes within a token budget, read without counting as a
recall. Against a real daemon; the composition's bounds also on their own.

Covers: client/capture/wake_up.py client/cli/hooks.py client/mcp/resources.py
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import run_cli
from tests.mcp.conftest import sdk_session
from trusty_memory.client.capture import wake_up
from trusty_memory.client.sync import Client

PALACE = "wake-cli"
DESCRIPTION = "Memory of the shop's checkout service (Go, Postgres, deployed on Fridays)."


@pytest.fixture(scope="module")
def palace(daemon):
    """A palace with a description and 60 notes: three that matter, the rest filler."""
    with Client(daemon.config) as c:
        c.palace_create(PALACE, description=DESCRIPTION)
        ids = {}
        for i in range(57):
            c.remember(PALACE, f"Filler note {i}: " + "lorem ipsum dolor sit amet " * 4)
        ids["port"] = c.remember(
            PALACE, "Staging Postgres listens on port 5433.", importance=0.9, room="Backend"
        ).drawer_id
        ids["owner"] = c.remember(
            PALACE, "Ines owns the billing service.", importance=0.8
        ).drawer_id
        long = "A very long decision record. " * 200
        ids["long"] = c.remember(PALACE, long, importance=0.7).drawer_id
    return ids


def hits(daemon, ids) -> dict:
    with Client(daemon.config) as c:
        return {key: c.get(PALACE, drawer).hits for key, drawer in ids.items()}


@pytest.mark.parametrize("budget", [50, 100, 800, 3000])
def test_wake_up_stays_within_its_budget_and_counts_no_recall(daemon, palace, budget):
    before = hits(daemon, palace)
    done = run_cli(daemon, "wake-up", PALACE, "--budget", str(budget), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    text = data["text"]
    assert data["tokens"] == wake_up.estimate_tokens(text) <= budget
    assert text.startswith(f'Memory palace "{PALACE}"')
    if budget >= 100:  # the identity, then the most important note first
        assert DESCRIPTION in text and "[Backend]: Staging Postgres listens" in text
    if budget >= 800:
        assert text.index("port 5433") < text.index("Ines owns") < text.index("Filler")
    if budget == 800:
        assert "Filler note" in text and "more in the palace" in text
    if budget == 3000:  # everything fits: nothing left to point at
        assert "Filler note 56:" in text and "more in the palace" not in text
    if budget >= 800:
        # One long note is clipped, not allowed to take the whole budget.
        assert max(len(line) for line in text.splitlines()) <= wake_up.NOTE_MAX_CHARS + 20
    assert hits(daemon, palace) == before  # reading the context is not recalling


def test_a_recall_does_count_so_the_check_above_can_fail(daemon, palace):
    """The control: the hit counter the test above watches does move on a recall."""
    before = hits(daemon, palace)["port"]
    with Client(daemon.config) as c:
        c.recall(PALACE, "which port does staging postgres use?", top_k=1)
    after = hits(daemon, palace)["port"]
    assert after == before + 1


def test_plain_output_and_errors(daemon, palace):
    done = run_cli(daemon, "wake-up", PALACE)
    assert done.returncode == 0 and done.stdout.startswith("Memory palace")
    assert wake_up.estimate_tokens(done.stdout.rstrip("\n")) <= wake_up.DEFAULT_BUDGET
    missing = run_cli(daemon, "wake-up", "no-such-palace")
    assert missing.returncode == 1 and "no-such-palace" in missing.stderr
    bad = run_cli(daemon, "wake-up", PALACE, "--budget", "10")
    assert bad.returncode == 2 and "between" in bad.stderr


def test_the_mcp_resource_gives_the_same_text(daemon, palace):
    async def read() -> tuple[str, str | None]:
        async with sdk_session(daemon.home, "--tools", "extended") as session:
            got = await session.read_resource(f"trusty-memory://palace/{PALACE}/wake-up")
            [content] = got.contents
            return content.text, content.mime_type  # type: ignore[union-attr]

    before = hits(daemon, palace)
    text, mime = asyncio.run(read())
    assert mime == "text/plain"
    cli = run_cli(daemon, "wake-up", PALACE, "--json")
    assert text == json.loads(cli.stdout)["text"]
    assert hits(daemon, palace) == before


@pytest.mark.parametrize("budget", [50, 51, 64, 100, 333, 800, 2000])
def test_compose_never_exceeds_the_budget(budget):
    drawers = [
        {
            "content": f"note {i} " + "word\n\t\x1b[31m " * (i * 7),
            "created_at": "2026-11-28T06:00:00Z",
            "room": "Backend" if i % 2 else "General",
        }
        for i in range(40)
    ]
    text = wake_up.compose("p", "about " * 300, drawers, budget, total=500)
    assert wake_up.estimate_tokens(text) <= budget
    assert "\x1b" not in text and "\t" not in text
    assert all(
        line.startswith(("Memory palace", "About", "Most important", "- ", "("))
        for line in text.splitlines()
    )
