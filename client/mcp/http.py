"""``serve --http ADDR``: the SDK's streamable-HTTP MCP endpoint beside stdio; and the
same endpoint, served the same way, as a long-lived service (``trusty-memory http``,
``mcp/http_service.py``).

The address is parsed and the socket bound *before* stdio starts serving, so a bad
address or a port in use is a start-up error (a clear line on stderr, exit code 2)
rather than a half-running server. Only the address given is bound; a non-loopback
address needs ``--allow-remote`` because the endpoint is plain HTTP.

Every request needs ``Authorization: Bearer <token>``, loopback included: any local user
can reach a loopback port, and memories hold secrets. The token is generated once per
home, kept in ``<home>/http-token`` (0600, so only the user can read it) and printed at
start by ``serve`` (the service names the file instead: its output goes to a journal or a
log file that others may read); ``TRUSTY_MEMORY_HTTP_TOKEN`` overrides it for deployments
that hand out their own.

uvicorn and starlette are imported only inside :func:`serve_http`, so a plain stdio
session never pays for them. The server runs with ``common/http_guard.py``'s guards: a
request head deadline, an idle timeout, connection caps, accept errors logged at a
bounded rate (``[http]`` in the config).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trusty_memory.common.config import load_config
from trusty_memory.common.listening import is_loopback

TOKEN_FILE = "http-token"


def http_token(home: Path) -> str:
    """The bearer token of this home's HTTP endpoint, created on first use."""
    explicit = os.environ.get("TRUSTY_MEMORY_HTTP_TOKEN")
    if explicit:
        return explicit
    path = home / TOKEN_FILE
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
        if token:
            return token
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # an empty file left by a crash
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await _unauthorized(send, missing=not given)
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: Any, missing: bool) -> None:
    why = "missing" if missing else "wrong"
    error = {
        "code": -32001,
        "message": f"Unauthorized: {why} bearer token; send 'Authorization: Bearer <token>'"
        f" with the token from the server's {TOKEN_FILE} file",
    }
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="trusty-memory"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def serve_http(
    server: Any, sock: socket.socket, stop: asyncio.Event, token: str, actor: str = "serve"
) -> None:
    """Serve ``server`` (an SDK ``Server``) at ``/mcp`` on ``sock`` until ``stop`` is set,
    to requests that carry ``token``; ``actor`` names the process in its log lines."""
    import structlog
    from mcp.server.transport_security import TransportSecuritySettings

    from trusty_memory.common.http_guard import (  # lazy: serving only, not flag checks
        accept_errors_logged,
        uvicorn_config,
    )

    host = sock.getsockname()[0]
    security = None
    if is_loopback(host):  # keep the SDK's DNS-rebinding guard for every loopback address
        hosts = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:*" for h in sorted(hosts)],
            allowed_origins=[f"http://{h}:*" for h in sorted(hosts)],
        )
    app = BearerAuth(server.streamable_http_app(host=host, transport_security=security), token)
    # Slow or idle connections closed, per-peer and total caps, accept errors at a bounded
    # rate: another local user cannot hold the endpoint (common/http_guard.py).
    config = uvicorn_config(app, load_config().http, timeout_graceful_shutdown=1)
    web = _quiet_uvicorn_server(config)

    async def watch() -> None:
        await stop.wait()
        web.should_exit = True

    watcher = asyncio.create_task(watch())
    warn = structlog.get_logger().bind(actor=actor, pid=os.getpid()).warning
    try:
        with accept_errors_logged(asyncio.get_running_loop(), warn):
            await web.serve(sockets=[sock])
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def _quiet_uvicorn_server(config: Any) -> Any:
    """A uvicorn server without its own signal handlers: ``serve`` (or ``http``) owns
    SIGTERM/SIGINT."""
    import uvicorn

    class QuietSignals(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietSignals(config)
