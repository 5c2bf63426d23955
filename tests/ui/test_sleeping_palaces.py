"""Looking at a home of sleeping palaces does not wake them: the palaces and dreamer pages
show what each writer last wrote (``summary.json``, ``palace_summaries``).

Covers: ui/views.py broker/palaces.py common/palace_dir.py
"""

from __future__ import annotations

import http.client
import shutil
from urllib.parse import urlsplit

import pytest

from tests.conftest import Daemon, _short_tmp, wait_until
from tests.engine.test_readers import workers_of
from tests.ui.conftest import address_of, start_ui, stop_ui
from trusty_memory.client.sync import Client
from trusty_memory.ui.security import cookie_name

pytestmark = pytest.mark.slow

SLEEPY = {"TRUSTY_MEMORY_PALACE_IDLE_STOP_S": "2", "TRUSTY_MEMORY_DREAMER_ENABLED": "0"}


def get(base: str, path: str, cookie: str) -> str:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(address_of(parts.hostname), parts.port, timeout=60)
    try:
        conn.request("GET", path, headers={"Cookie": cookie, "Host": parts.netloc})
        resp = conn.getresponse()
        body = resp.read().decode()
        assert resp.status == 200, (resp.status, body[:500])
        return body
    finally:
        conn.close()


def test_sleeping_palaces_are_shown_from_their_summaries_without_waking():
    home = _short_tmp("tms-")
    daemon = Daemon(home, SLEEPY).start()
    proc = None
    try:
        with Client(daemon.config, autostart=False) as client:
            client.palace_create("dozy", "a palace left alone")
            for i in range(3):
                client.remember("dozy", f"note {i} about the staging database")
            client.kg_assert("dozy", "staging", "runs", "PostgreSQL 15")
            # Its writer stops after idle_stop_s.
            wait_until(lambda: not workers_of(client, "dozy"), 60, "the palace to sleep")
            summaries = client.call("palace_summaries")["palaces"]
            assert summaries["dozy"]["summary"]["drawer_count"] == 3
            assert summaries["dozy"]["summary"]["triple_count"] == 1
            assert summaries["dozy"]["description"] == "a palace left alone"

            proc, url = start_ui(daemon)
            parts = urlsplit(url)
            base = f"{parts.scheme}://{parts.netloc}"
            cookie = f"{cookie_name(parts.port)}={parts.query.removeprefix('token=')}"
            page = get(base, "/", cookie)
            row = page[page.index('data-palace="dozy"') :].split("</tr>")[0]
            assert '<td class="num drawers">3</td>' in row and "asleep" in row
            assert "a palace left alone" in row
            dreamer = get(base, "/dreamer", cookie)
            assert "dozy" in dreamer and "never" in dreamer
            assert workers_of(client, "dozy") == []  # looked at, still asleep
    finally:
        if proc is not None:
            stop_ui(proc)
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)
