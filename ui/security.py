"""Who may use the page: the token in the URL, the host it is reached by, CSRF on changes.

Memories hold secrets, and any local user (or any web page the user's browser opens) can
reach a loopback port. So, as notebook servers do:

* a random token is made at start and printed inside the URL. Opening that URL once sets
  a cookie (HttpOnly, SameSite=Strict) and redirects to the same page without the token,
  so it does not stay in the address bar, the history or a Referer. Every request without
  the token or that cookie is refused with 403.
* The page is reached by a private host name made at start, ``tm-<random>.localhost``
  (browsers resolve every ``*.localhost`` name to loopback themselves). Browsers do not
  keep cookies apart by port, and ``SameSite`` counts every port of a host as the same
  site: a cookie for ``127.0.0.1`` goes to any server another local user runs on
  ``127.0.0.1:<any port>`` the moment this browser visits it. A cookie for a name nobody
  else knows goes nowhere else; the name is in no link a page holds (they are relative),
  and another user cannot learn it from the socket table the way they could a random
  address. An address given with ``--host`` keeps the address, with a warning.
* Unless ``--allow-remote``, a request must name this page's host in ``Host``: a DNS
  rebinding page that points its own name at 127.0.0.1 gets 403.
* Every state-changing request (anything but GET/HEAD) must carry ``X-CSRF-Token``, a
  value derived from the token and written into each page (htmx sends it as a header on
  every request it makes). A form posted from another site cannot set that header, and
  its ``Origin``, when sent, must be this server's.
* Every response carries a Content-Security-Policy that lets the page run only its own
  files from ``/static`` (no inline script, style or handler, no other origin), and may
  not be framed (``frame-ancestors``, ``X-Frame-Options``), and ``nosniff``. Memories are
  escaped as text already (``test_a_memory_s_markup_is_shown_as_text``); this is depth
  for the day a template gets that wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE_PREFIX = "trusty_memory_ui_"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# What the page needs, no more: htmx.min.js, page.js and style.css from this server, htmx's
# requests to it, its forms posted to it (htmx's config in base.html turns off its inline
# indicator style and eval). Nothing inline, so an injected tag would run nothing.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


def private_name() -> str:
    """A host name only this page answers to, under ``.localhost`` (RFC 6761: loopback)."""
    return f"tm-{secrets.token_hex(8)}.localhost"


def new_token() -> str:
    """32 random bytes, URL-safe: what goes in the printed URL."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """Per port: browsers send a host's cookies to all its ports, and two pages (two homes)
    on one host must not overwrite each other's."""
    return f"{COOKIE_PREFIX}{port}"


def csrf_for(token: str) -> str:
    """The CSRF value for a token: knowable only to whoever holds the token."""
    return hmac.new(token.encode(), b"trusty-memory ui csrf", hashlib.sha256).hexdigest()


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def _host_name(host_header: str) -> str:
    """``Host`` without its port; IPv6 literals without their brackets."""
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if ":" in host_header else host_header


class Guard:
    """ASGI middleware: host check, token check, CSRF check, in that order."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        port: int,
        allow_remote: bool = False,
        host: str = "127.0.0.1",
        name: str | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.cookie = cookie_name(port)
        self.csrf = csrf_for(token)
        self.allow_remote = allow_remote
        # With a private name, that name alone: a cookie set for any other would be shared.
        self.hosts = {name} if name else LOOPBACK_HOSTS | {host}  # e.g. 127.0.0.2
        self.way_in = way_in(named=name is not None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = with_security_headers(send)  # refusals and redirects too
        request = Request(scope)
        refused = self.refusal(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        given = request.query_params.get("token")
        if given is not None and request.method in SAFE_METHODS:
            # The printed URL: remember the token in a cookie and drop it from the address.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, request: Request) -> Response | None:
        """The 403 for a request that may not go on, or None."""
        host = _host_name(request.headers.get("host", ""))
        if not self.allow_remote and host not in self.hosts:
            return _forbidden(f"host {host!r} is not this page's loopback name: {self.way_in}")
        given = request.query_params.get("token") or request.cookies.get(self.cookie)
        if not _same(given, self.token):
            return _forbidden(
                "missing or wrong token: open the URL `trusty-memory ui` printed at start"
            )
        if request.method not in SAFE_METHODS:
            if not _same(request.headers.get(CSRF_HEADER), self.csrf):
                return _forbidden("missing or wrong CSRF token: reload the page and try again")
            origin = request.headers.get("origin")
            if origin and urlsplit(origin).netloc != request.headers.get("host", ""):
                return _forbidden(f"cross-origin request from {origin} refused")
        return None


def way_in(named: bool) -> str:
    """What a request by another host name is told to do instead: the printed URL first
    (the private name is not repeated: whoever asks may be another local user), an address
    of its own next, and ``--allow-remote`` last, for what it is."""
    if named:
        first = (
            "open the http://tm-<random>.localhost URL `trusty-memory ui` printed (browsers resolve"
            " it to this machine), or, to reach the page by an address, start it with"
            " `--host 127.0.0.2`"
        )
    else:
        first = "open the URL `trusty-memory ui` printed, with the address it names"
    return (
        f"{first}. (`--allow-remote` would let any host name in, but it serves every"
        " memory to whoever can reach the port: only for a page meant for the network.)"
    )


def with_security_headers(send: Send) -> Send:
    """``send``, adding ``SECURITY_HEADERS`` to the response's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), *SECURITY_HEADERS]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _forbidden(why: str) -> Response:
    return PlainTextResponse(f"403 Forbidden: {why}\n", status_code=403)
