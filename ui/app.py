"""The Starlette application: routes, templates and the one client they share.

Pages are rendered on the server with Jinja2; htmx (vendored in ``static/``, no build
step, nothing fetched at run time) swaps in the parts that change: a search column's next
page, a restored row, a dream plan and its result, the daemon's live figures. A request
made by htmx (``HX-Request``) gets the fragment, any other the whole page, so every URL
also works when opened directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trusty_memory.client.aio import AsyncClient
from trusty_memory.common import __version__
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.credentials import markers
from trusty_memory.common.methods import Method
from trusty_memory.common.names import validate_palace_name
from trusty_memory.ui import views
from trusty_memory.ui.security import Guard, csrf_for

HERE = Path(__file__).resolve().parent
LIVE_REFRESH_S = 2  # the daemon page's refresh period


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["size"] = _size
    env.filters["ago"] = _ago
    env.filters["qs"] = lambda params: urlencode({k: v for k, v in params.items() if v})
    env.filters["with_param"] = lambda params, key, value: {**params, key: value}
    env.filters["secrets"] = _secrets
    env.filters["redactions"] = markers.count
    return env


def _secrets(text: str) -> Markup:
    """A drawer's text, escaped, with each redaction marker drawn as one (``[secret:KIND
    #FINGERPRINT]``: a credential the palace never stored, ``common/credentials``)."""
    out = []
    for piece, kind in markers.split(str(text)):
        if kind is None:
            out.append(escape(piece))
        else:
            title = f"a {kind} was here: redacted before it was stored"
            out.append(Markup('<span class="secret" title="{}">{}</span>').format(title, piece))
    return Markup("").join(out)


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    size: float = value
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "not loaded"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


class Pages:
    """The handlers, holding what they share: the client, the templates, the CSRF value."""

    def __init__(self, config: Config, token: str) -> None:
        self.config = config
        self.csrf = csrf_for(token)
        self.env = _env()
        self._client: AsyncClient | None = None

    @property
    def client(self) -> AsyncClient:
        """The app's client: requests are served only inside ``lifespan``, which holds it."""
        assert self._client is not None, "a request outside the app's lifespan"
        return self._client

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._client = client = AsyncClient(self.config)
        try:
            yield
        finally:
            await client.close()

    def render(self, request: Request, template: str, status: int = 200, **context) -> Response:
        context.update(request=request, csrf=self.csrf, version=__version__)
        context.setdefault("live_refresh_s", LIVE_REFRESH_S)
        html = self.env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=status)

    def fragment_or_page(self, request: Request, fragment: str, page: str, **context) -> Response:
        hx = request.headers.get("hx-request") == "true"
        return self.render(request, fragment if hx else page, **context)

    def error(self, request: Request, exc: p.TrustyError) -> Response:
        status = 404 if exc.code.family == "not found" else 400
        if exc.code.family in ("dispatch", "overload", "storage", "embedder"):
            status = 503
        return self.render(request, "error.html", status=status, message=exc.message, code=exc.code)

    def palace_of(self, request: Request) -> str:
        return validate_palace_name(request.path_params["palace"])

    # -- pages --------------------------------------------------------------------------

    async def palaces(self, request: Request) -> Response:
        rows = await views.palaces(self.client)
        return self.render(request, "palaces.html", rows=rows)

    async def palace(self, request: Request) -> Response:
        palace = self.palace_of(request)
        info = await views.palace_info(self.client, palace)
        query = _query(request)
        columns = await views.search(self.client, palace, query) if query.text else []
        listing = [] if query.text else await views.listing(self.client, palace, query)
        context = {"palace": palace, "info": info, "query": query, "columns": columns,
                   "listing": listing, "filters": _filters(query),
                   "redacted": await views.redacted_count(self.client, palace)}  # fmt: skip
        return self.fragment_or_page(request, "_results.html", "palace.html", **context)

    async def column(self, request: Request) -> Response:
        """One search column, on its own: the next page of that column only."""
        palace = self.palace_of(request)
        kind = views.KINDS_BY_KEY.get(request.path_params["kind"])
        if kind is None:
            raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, "no such search column")
        query = _query(request)
        column = await views.search_column(self.client, palace, kind, query)
        context: dict[str, Any] = {"palace": palace, "column": column, "filters": _filters(query)}
        return self.render(request, "_column.html", **context)

    async def drawer(self, request: Request) -> Response:
        palace = self.palace_of(request)
        page = await views.drawer_page(self.client, palace, request.path_params["drawer_id"])
        status = 404 if page.drawer is None and page.archived is None else 200
        return self.render(request, "drawer.html", status=status, palace=palace, page=page)

    async def kg(self, request: Request) -> Response:
        palace = self.palace_of(request)
        subject = request.query_params.get("subject", "").strip()
        line = await views.timeline(self.client, palace, subject) if subject else None
        known = [] if subject else await views.subjects(self.client, palace)
        context: dict[str, Any] = {
            "palace": palace,
            "subject": subject,
            "timeline": line,
            "subjects": known,
        }
        return self.render(request, "kg.html", **context)

    async def archive(self, request: Request) -> Response:
        palace = self.palace_of(request)
        reason = request.query_params.get("reason") or None
        after = _int(request.query_params.get("after"), 0)
        page = await views.archive_page(self.client, palace, after, reason)
        context: dict[str, Any] = {
            "palace": palace,
            "page": page,
            "reason": reason or "",
            "after": after,
        }
        return self.render(request, "archive.html", **context)

    async def restore(self, request: Request) -> Response:
        palace = self.palace_of(request)
        form = await request.form()
        drawer_id = str(form.get("drawer_id", "")).strip()
        result = await views.restore(self.client, palace, drawer_id)
        return self.render(request, "_restored.html", palace=palace, result=result)

    async def dreamer(self, request: Request) -> Response:
        rows = await views.palaces(self.client)
        chosen = request.query_params.get("palace", "")
        passes = None
        if chosen in {row.name for row in rows}:
            passes = await views.recent_passes(self.client, chosen)
        return self.render(request, "dreamer.html", rows=rows, chosen=chosen, passes=passes)

    async def dream(self, request: Request) -> Response:
        step = request.path_params["step"]
        if step not in ("plan", "apply"):
            raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"no such dreamer step: {step}")
        form = await request.form()
        palace = validate_palace_name(str(form.get("palace", "")))
        if palace not in (await self.client.call(Method.PALACE_LIST))["palaces"]:
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"palace not found: {palace}")
        run = await views.dream(self.config, palace, dry_run=step == "plan")
        return self.render(request, "_dream.html", run=run)

    async def daemon(self, request: Request) -> Response:
        view = await views.daemon(self.client)
        context = {"view": view, "now": views.now_utc()}
        return self.fragment_or_page(request, "_daemon.html", "daemon.html", **context)


def _query(request: Request) -> views.Query:
    q = request.query_params

    def opt(name: str) -> str | None:
        return (q.get(name) or "").strip() or None

    pages = {k.key: q[f"{k.key}_page"] for k in views.SEARCH_KINDS if q.get(f"{k.key}_page")}
    return views.Query(
        text=(q.get("q") or "").strip(),
        room=opt("room"),
        tag=opt("tag"),
        since=opt("since"),
        until=opt("until"),
        pages=pages,
    )


def _filters(query: views.Query) -> dict[str, str]:
    """The search and its filters as query parameters (for links that keep them)."""
    return {"q": query.text, "room": query.room or "", "tag": query.tag or "",
            "since": query.since or "", "until": query.until or ""}  # fmt: skip


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value else default
    except ValueError:
        return default


def build_app(
    config: Config,
    token: str,
    *,
    port: int,
    allow_remote: bool = False,
    host: str = "127.0.0.1",
    name: str | None = None,
) -> Starlette:
    pages = Pages(config, token)

    def guarded(handler):
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except p.TrustyError as exc:
                return pages.error(request, exc)

        return endpoint

    routes = [
        Route("/", guarded(pages.palaces)),
        Route("/palace/{palace}", guarded(pages.palace)),
        Route("/palace/{palace}/column/{kind}", guarded(pages.column)),
        Route("/palace/{palace}/drawer/{drawer_id}", guarded(pages.drawer)),
        Route("/palace/{palace}/kg", guarded(pages.kg)),
        Route("/palace/{palace}/archive", guarded(pages.archive)),
        Route("/palace/{palace}/archive/restore", guarded(pages.restore), methods=["POST"]),
        Route("/dreamer", guarded(pages.dreamer)),
        Route("/dreamer/{step:str}", guarded(pages.dream), methods=["POST"]),
        Route("/daemon", guarded(pages.daemon)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    guard = Middleware(
        Guard, token=token, port=port, allow_remote=allow_remote, host=host, name=name
    )
    middleware = [guard]
    return Starlette(routes=routes, middleware=middleware, lifespan=pages.lifespan)
