"""A real daemon with remembered drawers, and ``trusty-memory ui`` serving it.

The UI runs as the command a user runs (a subprocess on a free loopback port, reading the
daemon's home); the tests read the URL it prints, token included, as a person would.
Browser tests drive Debian's chromium through Playwright; nothing downloads a browser.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import Daemon, _short_tmp
from trusty_memory.client.sync import Client
from trusty_memory.ui.security import cookie_name

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags chromium keeps calling home on a closed network.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# The README's pictures (docs/ui) are refreshed with TRUSTY_MEMORY_UI_SCREENSHOTS=docs/ui;
# otherwise a run writes them to a temporary folder and leaves the checkout clean.
SCREENSHOTS = Path(
    os.environ.get("TRUSTY_MEMORY_UI_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / "trusty-memory-ui-screenshots"
)
URL_LINE = re.compile(r"trusty-memory ui: (http://\S+)")

# What the tests remember, and find again through the page.
NOTES = [
    ("The staging database runs PostgreSQL 15 on port 5433.", "infra", ["database"]),
    ("Deploys go out from the release branch every Tuesday after the QA sign-off.", "process",
     ["release"]),
    ("Alice owns the billing service and its on-call rota.", "people", ["owners"]),
    ("The API rate limit is 100 requests per minute per token.", "infra", ["api"]),
    ("Frontend components are written in React with TypeScript.", "code", []),
    ("Use ruff for linting and formatting the Python code.", "code", ["tooling"]),
]  # fmt: skip
OLD_NOTE = "A note from long ago about the retired build server in the basement."
# Near-duplicates as MiniLM sees them (cosine > 0.95, the same fact): the dreamer merges them.
TWINS = (
    "The staging database runs PostgreSQL 15 on port 5433.",
    "the staging database runs PostgreSQL 15 on port 5433",
)
# Memories are untrusted text (agents store what they read): shown, never run.
MARKUP_NOTE = "A scratch note quoting <script>document.title='owned'</script> from a web page."
MANY = 25  # drawers of palace "many": more than two pages of search results


@dataclass
class Ui:
    """The running page: its base URL, its token and the daemon behind it."""

    base: str
    token: str
    daemon: Daemon
    proc: subprocess.Popen
    old_drawer: str  # in palace "attic": the dreamer's to prune

    @property
    def cookie(self) -> str:
        return cookie_name(urlsplit(self.base).port)

    def url(self, path: str = "/") -> str:
        return self.base + path

    def request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: str = ""
    ) -> tuple[int, str]:
        """One plain HTTP request (no browser): status and body."""
        parts = urlsplit(self.base)
        conn = http.client.HTTPConnection(address_of(parts.hostname), parts.port, timeout=60)
        try:
            headers = {"Host": parts.netloc, **(headers or {})}
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()


def address_of(hostname: str) -> str:
    """Where to connect for a page's host name: its ``*.localhost`` name is loopback (as
    browsers resolve it themselves; the C library here may not)."""
    return "127.0.0.1" if hostname.endswith(".localhost") else hostname


@pytest.fixture(scope="module")
def ui_daemon() -> Iterator[Daemon]:
    """The daemon's own dreamer is off: every dream here is the page's."""
    home = _short_tmp("tmu-")
    d = Daemon(home, {"TRUSTY_MEMORY_DREAMER_ENABLED": "0"}).start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def ui(ui_daemon: Daemon) -> Iterator[Ui]:
    with Client(ui_daemon.config, autostart=False) as client:
        client.palace_create("project", "Notes about the shop's web project")
        for text, room, tags in NOTES:
            client.remember("project", text, room=room, tags=tags)
        client.remember("project", OLD_NOTE, room="infra", created_at="2021-03-01T10:00:00Z")
        # The dreamer's palace: nothing searches it, so no recall hit keeps its old note alive.
        client.palace_create("attic")
        client.remember("attic", "A note written today about the release checklist.")
        old = client.remember("attic", OLD_NOTE, created_at="2021-03-01T10:00:00Z")
        for text in TWINS:
            client.remember("attic", text)
        client.palace_create("many")
        for i in range(MANY):
            client.remember("many", f"Service number {i} writes its logs to /var/log/svc{i}.log")
        client.kg_assert("project", "staging database", "runs", "PostgreSQL 14")
        client.kg_assert("project", "staging database", "runs", "PostgreSQL 15")
        client.kg_assert("project", "staging database", "listens on", "port 5433")
        client.palace_create("scratch")
        client.remember("scratch", MARKUP_NOTE)
    proc, url = start_ui(ui_daemon)
    parts = urlsplit(url)
    yield Ui(
        base=f"{parts.scheme}://{parts.netloc}",
        token=parts.query.removeprefix("token="),
        daemon=ui_daemon,
        proc=proc,
        old_drawer=old.drawer_id,
    )
    stop_ui(proc)


def start_ui(daemon: Daemon) -> tuple[subprocess.Popen, str]:
    """``trusty-memory ui --port 0`` against ``daemon``: the process and the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trusty_memory.client.cli.main", "ui", "--port", "0"],
        env=daemon.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = _first_line(proc, timeout=60)
    match = URL_LINE.search(line)
    assert match, f"no URL in the first line: {line!r}; stderr: {_stderr(proc)}"
    return proc, match.group(1)


def stop_ui(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert box, f"trusty-memory ui printed nothing within {timeout}s: {_stderr(proc)}"
    return box[0]


def _stderr(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        return "(still running)"
    return proc.stderr.read()[-2000:]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, ui: Ui):
    """A fresh browser context that opened the printed URL (so it holds the cookie)."""
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(ui.url(f"/?token={ui.token}"))
    yield page
    context.close()


def screenshot(page, name: str) -> None:
    """A page's picture, taken on every run (see ``SCREENSHOTS`` for where it goes)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)
