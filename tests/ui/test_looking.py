"""Looking changes nothing: a person searching the web page, showing a drawer, exporting or
listing leaves every drawer's recall count (and so its importance at the next decay) as it
was; an agent's or the CLI's own recall still counts.

Each page search runs recall and deep recall; before, every search added a hit to each
drawer shown, twice, and decay raised their importance for it.

Covers: ui/views.py ui/app.py
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.conftest import Daemon, _short_tmp, run_cli, wait_until
from tests.ui.conftest import NOTES, Ui, start_ui, stop_ui
from trusty_memory.client.sync import Client

PALACE = "looked"


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    home = _short_tmp("tmlook-")
    d = Daemon(home).start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def hits(client: Client) -> dict[str, int]:
    listed = client.list(PALACE, limit=50)
    return {
        d.drawer_id: client.call("drawer_get", {"drawer_id": d.drawer_id}, palace=PALACE)["hits"]
        for d in listed.drawers
    }


def test_searching_the_page_and_reading_count_no_recall(daemon, tmp_path):
    with Client(daemon.config, autostart=False) as client:
        client.call("palace_create", {"name": PALACE})
        for text, room, tags in NOTES:
            client.remember(PALACE, text, room=room, tags=tags)
        before = hits(client)
        assert set(before.values()) == {0}
        proc, url = start_ui(daemon)
        try:
            parts = urlsplit(url)
            ui = Ui(f"{parts.scheme}://{parts.netloc}", parts.query.removeprefix("token="),
                    daemon, proc, "")  # fmt: skip
            cookie = {"Cookie": f"{ui.cookie}={ui.token}"}
            for query in ("staging+database", "who+owns+billing", "linting"):
                status, page = ui.request("GET", f"/palace/{PALACE}?q={query}", headers=cookie)
                assert status == 200, page[:300]
                assert "Deep recall" in page
            for drawer_id in before:
                status, _ = ui.request(
                    "GET", f"/palace/{PALACE}/drawer/{drawer_id}", headers=cookie
                )
                assert status == 200
        finally:
            stop_ui(proc)
        done = run_cli(daemon, "export", PALACE, "-o", str(tmp_path / "out.jsonl"))
        assert done.returncode == 0, done.stderr
        assert run_cli(daemon, "show", PALACE, next(iter(before))).returncode == 0
        assert hits(client) == before  # looked at from every side: no drawer counted
        # The CLI's own recall is a recall: it counts, as an agent's does.
        found = run_cli(daemon, "--json", "recall", PALACE, "staging database port")
        assert found.returncode == 0, found.stderr
        wait_until(lambda: sum(hits(client).values()) > 0, 30, "the CLI's recall to count its hits")
