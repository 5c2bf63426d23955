"""``trusty-memory ui`` against another local user holding connections (issue 36, defect 5):
the same guards as ``serve --http`` (``common/http_guard.py``), on the page's server.

The page runs under a lowered ``RLIMIT_NOFILE`` with a short head deadline, and without
a daemon: the authorised request is the page's stylesheet, which the token guards like
every other path and which needs no daemon to answer.

Covers: common/http_guard.py ui/server.py
"""

from __future__ import annotations

import http.client
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bench.http_flood import SlowFlood
from tests.conftest import _short_tmp
from tests.mcp.conftest import wait_for
from tests.ui.conftest import URL_LINE, address_of
from trusty_memory.ui.security import cookie_name

HEADER_TIMEOUT_S = 2.0
STDERR_LIMIT = 4096


class Page:
    """A running ``trusty-memory ui``: where it is, its token, its stderr (a file)."""

    def __init__(self, proc: subprocess.Popen, url: str, stderr: Path) -> None:
        parts = urlsplit(url)
        self.proc, self.stderr_path = proc, stderr
        self.netloc, self.port = parts.netloc, parts.port or 80
        self.address = address_of(parts.hostname or "")
        self.token = parts.query.removeprefix("token=")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stylesheet_s(self) -> float:
        """Seconds an authorised GET of the stylesheet takes; it must be a 200."""
        t0 = time.monotonic()
        conn = http.client.HTTPConnection(self.address, self.port, timeout=10)
        try:
            headers = {"Host": self.netloc, "Cookie": f"{cookie_name(self.port)}={self.token}"}
            conn.request("GET", "/static/style.css", headers=headers)
            response = conn.getresponse()
            assert response.status == 200 and b".columns" in response.read()
        finally:
            conn.close()
        return time.monotonic() - t0


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[Callable[[int], Page]]:
    """Start ``trusty-memory ui --port 0`` under ``RLIMIT_NOFILE`` = ``nofile``."""
    home = _short_tmp("tmuf-")
    procs: list[subprocess.Popen] = []

    def start(nofile: int) -> Page:
        err = tmp_path / f"stderr-{len(procs)}"
        env = {"TRUSTY_MEMORY_HOME": str(home)}
        env["TRUSTY_MEMORY_HTTP_HEADER_TIMEOUT_S"] = str(HEADER_TIMEOUT_S)
        with open(err, "wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "trusty_memory.client.cli.main", "ui", "--port", "0"],
                stdout=subprocess.PIPE,
                stderr=sink,
                text=True,
                env={**os.environ, **env},
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)),
            )
        procs.append(proc)
        match = URL_LINE.search(proc.stdout.readline())  # the URL is printed once bound
        assert match, err.read_text()
        return Page(proc, match.group(1), err)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


def test_slow_connections_are_closed_and_the_page_still_answers(page_server):
    page = page_server(512)
    assert page.stylesheet_s() < 5.0  # up and serving
    flood = SlowFlood(page.port, 300).open()
    try:
        assert page.stylesheet_s() < 5.0
        t0 = time.monotonic()
        while flood.prune() and time.monotonic() - t0 < HEADER_TIMEOUT_S + 8:
            time.sleep(0.4)
            flood.trickle()  # one header line at a time: still closed at the deadline
        assert len(flood.socks) == 0, f"{len(flood.socks)} slow connections still open"
        assert page.stylesheet_s() < 5.0
    finally:
        flood.close()
    assert page.proc.poll() is None
    err = page.stderr()
    assert len(err) < STDERR_LIMIT and "Traceback" not in err, err[:2000]


def test_accept_errors_are_one_line_and_the_page_keeps_serving(page_server):
    page = page_server(128)  # below what a burst of accepts needs: EMFILE
    assert page.stylesheet_s() < 5.0
    burst = []
    try:
        for _ in range(300):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", page.port))
            burst.append(sock)
        assert wait_for(lambda: "accept failing" in page.stderr(), 10), page.stderr()[:2000]
        time.sleep(2.0)  # the loop retries accepting every second: let it fail again
    finally:
        for sock in burst:
            sock.close()
    assert page.stylesheet_s() < 5.0
    err = page.stderr()
    assert "Traceback" not in err and "Too many open files" in err, err[:2000]
    assert err.count("accept failing") <= 2 and len(err) < STDERR_LIMIT, err[:2000]
