"""The page's locks, over plain HTTP: the token, the host check, CSRF on every change.

Covers: ui/security.py ui/app.py ui/server.py ui/__main__.py common/listening.py
"""

from __future__ import annotations

import http.client
import re
import shutil
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.conftest import as_attacker
from tests.ui.conftest import URL_LINE, Ui, address_of
from trusty_memory.client.sync import Client
from trusty_memory.ui.security import CONTENT_SECURITY_POLICY, cookie_name, csrf_for


def test_no_token_or_a_wrong_one_gets_403(ui: Ui):
    status, body = ui.request("GET", "/")
    assert status == 403 and "token" in body
    status, body = ui.request("GET", "/?token=not-the-token")
    assert status == 403 and "wrong token" in body
    status, _ = ui.request("GET", "/", headers={"Cookie": f"{ui.cookie}=not-the-token"})
    assert status == 403
    status, _ = ui.request("GET", "/static/htmx.min.js")
    assert status == 403  # everything, not just the pages


def test_the_printed_url_sets_the_cookie_and_drops_the_token(ui: Ui):
    status, _ = ui.request("GET", f"/palace/project?q=x&token={ui.token}")
    assert status == 303
    status, body = ui.request("GET", "/", headers={"Cookie": f"{ui.cookie}={ui.token}"})
    assert status == 200 and 'data-palace="project"' in body


def test_a_foreign_host_name_gets_403(ui: Ui):
    # DNS rebinding: a page on evil.example whose name now points at 127.0.0.1.
    headers = {"Host": "evil.example:80", "Cookie": f"{ui.cookie}={ui.token}"}
    status, body = ui.request("GET", "/", headers=headers)
    assert status == 403 and "loopback" in body


def test_forged_posts_are_refused_and_change_nothing(ui: Ui):
    """A change needs the CSRF header; a page elsewhere cannot send it, nor the token."""
    cookie = {
        "Cookie": f"{ui.cookie}={ui.token}",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    body = "palace=attic"
    for extra in ({}, {"X-CSRF-Token": "forged"}, {"X-CSRF-Token": csrf_for("another token")}):
        status, text = ui.request("POST", "/dreamer/apply", headers={**cookie, **extra}, body=body)
        assert status == 403 and "CSRF" in text, (extra, status, text)
    good = {**cookie, "X-CSRF-Token": csrf_for(ui.token)}
    status, text = ui.request(
        "POST", "/dreamer/apply", headers={**good, "Origin": "http://evil.example"}, body=body
    )
    assert status == 403 and "cross-origin" in text
    status, _ = ui.request("POST", "/dreamer/apply", headers={"X-CSRF-Token": csrf_for(ui.token)})
    assert status == 403  # the CSRF value alone, without the token, is not enough
    status, _ = ui.request(
        "POST", "/palace/attic/archive/restore", headers=cookie, body=f"drawer_id={ui.old_drawer}"
    )
    assert status == 403
    with Client(ui.daemon.config, autostart=False) as client:
        info = client.palace_info("attic")
    assert info.last_dream_at is None and info.archived_count == 0
    # The same request with the token and the CSRF header goes through (the refusals
    # above are about what they lack): a plan, which changes nothing either.
    status, text = ui.request("POST", "/dreamer/plan", headers=good, body=body)
    assert status == 200 and ui.old_drawer[:8] in text


def test_a_memory_s_markup_is_shown_as_text(ui: Ui):
    cookie = {"Cookie": f"{ui.cookie}={ui.token}"}
    status, body = ui.request("GET", "/palace/scratch", headers=cookie)
    assert status == 200
    assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;" in body
    assert "<script>document.title" not in body


def test_bad_input_is_a_clear_error_and_the_page_keeps_serving(ui: Ui):
    cookie = {"Cookie": f"{ui.cookie}={ui.token}"}
    status, body = ui.request("GET", "/palace/no-such-palace", headers=cookie)
    assert status == 404 and "no-such-palace" in body
    status, body = ui.request("GET", "/palace/project/drawer/not-a-drawer", headers=cookie)
    assert status == 404 and "not-a-drawer" in body
    status, body = ui.request("GET", "/palace/..%2Fetc", headers=cookie)
    assert status in (400, 404)
    status, body = ui.request("GET", "/", headers=cookie)
    assert status == 200


def test_a_non_loopback_address_needs_allow_remote_which_warns(ui_daemon):
    command = [
        sys.executable,
        "-m",
        "trusty_memory.client.cli.main",
        "ui",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
    ]
    refused = subprocess.run(command, env=ui_daemon.env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "not a loopback address" in refused.stderr and "--allow-remote" in refused.stderr

    proc = subprocess.Popen(
        [*command, "--allow-remote"],
        env=ui_daemon.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        warning = proc.stderr.readline()
        assert "WARNING" in warning and "every memory" in warning, warning
        url = urlsplit(URL_LINE.search(proc.stdout.readline()).group(1))
        token = url.query.removeprefix("token=")
        remote = Ui(f"http://127.0.0.1:{url.port}", token, ui_daemon, proc, "")
        # Any host name now (it is reachable from elsewhere), still only with the token.
        headers = {"Host": f"box.example:{url.port}", "Cookie": f"{cookie_name(url.port)}={token}"}
        assert remote.request("GET", "/", headers=headers)[0] == 200
        assert remote.request("GET", "/", headers={"Host": "box.example"})[0] == 403
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# Another local user's web server: it prints the port it listens on, then the Cookie header
# of every request it gets. System Python: the other user cannot reach this checkout's venv.
SPY = r"""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Spy(BaseHTTPRequestHandler):
    def do_GET(self):
        print("cookie:", self.headers.get("Cookie") or "", flush=True)
        body = b"<html><body>another user's page</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Spy)
print("port:", server.server_address[1], flush=True)
server.serve_forever()
"""


def test_another_local_user_s_server_never_gets_the_page_s_cookie(browser, ui: Ui, attacker):
    """Another local user's server on a loopback address, any port, visited by the browser
    that opened the page, receives nothing of the page's: its cookie belongs to a private
    host name, not to 127.0.0.1 (cookies are not kept apart by port)."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("needs the system's python3 to run the other user's server")
    spy = as_attacker(attacker, f'exec {python} -c "$1"', SPY, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(spy.stdout), daemon=True)
    context = browser.new_context()
    try:
        port = int(spy.stdout.readline().split()[1])
        reader.start()
        page = context.new_page()
        page.goto(ui.url(f"/?token={ui.token}"))
        assert page.locator('[data-palace="project"]').count() >= 1  # in, with the cookie
        assert [c["name"] for c in context.cookies()] == [ui.cookie]
        for host in ("127.0.0.1", "localhost"):
            page.goto(f"http://{host}:{port}/")
            assert "another user's page" in page.content()
        seen = [line for line in lines if line.startswith("cookie:")]
        assert len(seen) >= 2 and not any(ui.token in line for line in seen), seen
        assert urlsplit(ui.base).hostname.endswith(".localhost")
    finally:
        context.close()
        spy.kill()
        spy.wait(timeout=10)


def test_an_address_given_with_host_warns_that_its_cookie_is_shared(ui_daemon):
    command = [sys.executable, "-m", "trusty_memory.client.cli.main", "ui", "--host", "127.0.0.2"]
    command += ["--port", "0"]
    proc = subprocess.Popen(
        command, env=ui_daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        warning = proc.stderr.readline()
        assert "WARNING" in warning and "another local user" in warning, warning
        assert "http://127.0.0.2:" in proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# Every kind of response the page's server gives: pages, a fragment, a static file, a 404,
# the token's redirect and a refusal (issue 36, defect 10: headers as depth).
HEADERED = [
    ("/", 200),
    ("/palace/project?q=database", 200),
    ("/palace/project/column/keyword?q=database", 200),
    ("/palace/project/kg", 200),
    ("/palace/project/archive", 200),
    ("/palace/project/drawer/not-a-drawer", 404),
    ("/dreamer", 200),
    ("/daemon", 200),
    ("/static/htmx.min.js", 200),
    ("/static/page.js", 200),
]


def _headers_of(ui: Ui, path: str, cookie: bool = True) -> tuple[int, http.client.HTTPMessage]:
    parts = urlsplit(ui.base)
    conn = http.client.HTTPConnection(address_of(parts.hostname), parts.port, timeout=60)
    try:
        headers = {"Host": parts.netloc}
        if cookie:
            headers["Cookie"] = f"{ui.cookie}={ui.token}"
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status, response.headers
    finally:
        conn.close()


def test_every_response_carries_the_policy_and_frame_headers(ui: Ui):
    answers = [(path, *_headers_of(ui, path)) for path, _ in HEADERED]
    answers.append(("no token", *_headers_of(ui, "/", cookie=False)))
    answers.append(("the printed URL", *_headers_of(ui, f"/?token={ui.token}", cookie=False)))
    assert [status for _, status, _ in answers] == [s for _, s in HEADERED] + [403, 303]
    for path, _, headers in answers:
        assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, path
        assert headers["X-Frame-Options"] == "DENY", path
        assert headers["X-Content-Type-Options"] == "nosniff", path
    policy = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["script-src"] == policy["style-src"] == "'self'"  # nothing inline
    assert policy["frame-ancestors"] == "'none'" and policy["default-src"] == "'none'"


def test_the_page_works_under_its_policy_without_a_violation(page, ui: Ui):
    """Chromium reports each thing the policy blocks on the console: an inline style,
    handler or script the templates still had would show here (and stop working)."""
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security" in m.text else 0)
    page.goto(ui.url("/palace/project"))
    page.fill("input[name=q]", "which port does the staging database use")
    page.press("input[name=q]", "Enter")  # htmx swaps the columns in
    expect(page.locator("#column-recall .hit").first).to_contain_text("port 5433")
    grid = page.locator(".columns").evaluate("e => getComputedStyle(e).gridTemplateColumns")
    assert len(grid.split()) == 3  # the column count's class, not an inline style
    page.goto(ui.url("/palace/attic/archive"))
    page.select_option("select[name=reason]", "merged")  # page.js submits the form
    expect(page).to_have_url(re.compile(r"reason=merged"))
    page.goto(ui.url("/daemon"))
    page.wait_for_timeout(2500)  # one live refresh (htmx's timer)
    assert blocked == []
