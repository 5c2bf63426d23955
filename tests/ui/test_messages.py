"""What the page and ``trusty-memory ui`` say to people (issue 40): a refused host name is
told the private URL and ``--host 127.0.0.2`` before ``--allow-remote``; a taken port is
told ``--port 0``; the palaces page gives last activity in one format; the daemon page
says its restarts in words. Checked on the guard, the templates and the command itself,
with no daemon or browser.

Covers: ui/security.py ui/app.py ui/views.py ui/server.py ui/__main__.py client/cli/processes.py
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from starlette.requests import Request

from trusty_memory.ui.app import _env
from trusty_memory.ui.security import Guard, cookie_name
from trusty_memory.ui.views import DaemonView, PalaceRow, restarts_in_words

TOKEN = "t" * 43
NAME = "tm-0123456789abcdef.localhost"


def refused(guard: Guard, host: str) -> str:
    headers = [(b"host", host.encode()), (b"cookie", f"{cookie_name(8737)}={TOKEN}".encode())]
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": headers}
    response = guard.refusal(Request(scope))
    assert response is not None and response.status_code == 403
    return bytes(response.body).decode()


def test_a_loopback_address_is_told_the_printed_url_before_allow_remote():
    named = Guard(None, token=TOKEN, port=8737, name=NAME)  # type: ignore[arg-type]
    for host in ("127.0.0.1:8737", "localhost:8737", "evil.example"):
        text = refused(named, host)
        assert "loopback name" in text  # what was wrong, as before
        first, address, remote = (
            text.index("tm-<random>.localhost URL"),
            text.index("`--host 127.0.0.2`"),
            text.index("--allow-remote"),
        )
        assert first < address < remote, text
        assert "every memory" in text[remote:]
        assert NAME not in text  # whoever asks may be another local user: not told the name
    plain = Guard(None, token=TOKEN, port=8737, host="127.0.0.2")  # type: ignore[arg-type]
    text = refused(plain, "127.0.0.9:8737")
    assert text.index("printed") < text.index("--allow-remote") and "tm-" not in text


def test_a_second_ui_on_a_taken_port_is_told_port_0(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {**os.environ, "TRUSTY_MEMORY_HOME": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-m", "trusty_memory.client.cli.main", "ui", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2 and done.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "`--port 0` takes a free one" in done.stderr, done.stderr


def _page(template: str, **context) -> str:
    return _env().get_template(template).render(csrf="c", version="v", **context)


def _activity(page: str, palace: str) -> str:
    row = page[page.index(f'data-palace="{palace}"') :].split("</tr>")[0]
    cell = re.search(r'<td class="activity">(.*?)</td>', row, re.S)
    assert cell is not None, row
    return re.sub(r"<[^>]+>", "", cell.group(1)).strip()


def test_last_activity_has_one_format_awake_or_asleep():
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def row(name: str, idle_s: float | None, asleep: dict | None) -> PalaceRow:
        return PalaceRow(name, None, None, [], 0, idle_s, asleep=asleep)

    rows = [
        row("awake", 120.0, None),
        row("dozy", None, {"last_write_at": two_hours_ago}),
        row("dozy-idle", 30.0, {"last_write_at": two_hours_ago}),
        row("empty", None, {"last_write_at": None}),
    ]
    page = _page("palaces.html", rows=rows)
    assert _activity(page, "awake") == "2 min ago"
    assert _activity(page, "dozy") == "2.0 h ago asleep"  # was "last write 2026-...Z"
    assert _activity(page, "dozy-idle") == "30 s ago asleep"
    assert _activity(page, "empty") == "never asleep"
    assert two_hours_ago not in page


def test_the_daemon_page_says_restarts_in_words():
    assert restarts_in_words({"embedder#0": 0, "dreamer#0": 0}) == (
        "No process has restarted since the daemon started"
    )
    said = restarts_in_words({"embedder#0": 2, "palace:Notes#1": 1, "dreamer#0": 0, "x#0": 5})
    assert said == (
        "Restarted since the daemon started: embedder twice, palace:Notes (worker 1) once,"
        " x 5 times"
    )
    status = {
        "pid": 1,
        "version": "v",
        "home": "/h",
        "dreamer_pid": None,
        "template": None,
        "services": [],
        "restarts": {"embedder#0": 0},
    }
    view = DaemonView(status, 0.0, 0.0, 0, 0, "1 min", restarts_in_words(status["restarts"]))
    page = _page("_daemon.html", view=view, now="now")
    assert '<p class="muted" id="restarts">No process has restarted since the daemon' in page
    assert "embedder#0" not in page
