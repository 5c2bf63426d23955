"""Start the page: bind, print the URL with its token, serve with uvicorn until stopped.

The socket is bound before anything is printed, so a port in use or a refused address is
a one-line error and exit code 2, never a URL that does not answer. The URL goes to
stdout (this is not the MCP server: stdout is free), logs to stderr; uvicorn's access log
stays off, since the first request's URL carries the token. It serves with the guards
of ``common/http_guard.py`` (slow and idle connections closed, connection caps, accept
errors at a bounded rate), as ``serve --http`` does.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
from typing import Any

import uvicorn

from trusty_memory.common.config import load_config
from trusty_memory.common.http_guard import accept_errors_logged, uvicorn_config
from trusty_memory.common.listening import AddressError, is_loopback, listen
from trusty_memory.common.logs import setup_logging
from trusty_memory.ui.app import build_app
from trusty_memory.ui.security import new_token, private_name

DEFAULT_PORT = 8737


def bind(host: str, port: int, allow_remote: bool) -> socket.socket:
    """A listening socket on exactly ``host:port`` (port 0: any free port)."""
    if not is_loopback(host) and not allow_remote:
        raise AddressError(
            f"refusing to serve the UI on {host!r}: it is not a loopback address, and the page"
            " shows every memory in the home over plain HTTP; pass --allow-remote to do it"
            " anyway"
        )
    if not 0 <= port <= 65535:
        raise AddressError(f"invalid port {port}: must be 0-65535")
    return listen(host, port, f"{host}:{port}")


def url_of(sock: socket.socket, token: str, name: str | None = None) -> str:
    host, port = sock.getsockname()[:2]
    shown = name or (f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}/?token={token}"


def page_name(host: str, allow_remote: bool) -> str | None:
    """The private ``*.localhost`` name the page is reached by (``security.py`` says why),
    or None where the address itself must be used: browsers resolve ``*.localhost`` to
    127.0.0.1 and ::1 only, and a page for the network is reached by its address."""
    if allow_remote or host not in ("127.0.0.1", "::1", "localhost"):
        return None
    return private_name()


def run_ui(host: str, port: int, allow_remote: bool = False) -> int:
    log = setup_logging("ui", default_level="warning")
    try:
        sock = bind(host, port, allow_remote)
    except AddressError as exc:
        print(f"trusty-memory ui: {exc}{_port_taken(exc, port)}", file=sys.stderr)
        return 2
    if allow_remote:
        print(
            "trusty-memory ui: WARNING: --allow-remote: anyone who can reach"
            f" {sock.getsockname()[0]}:{sock.getsockname()[1]} and learns the token can read"
            " every memory in this home and change the archive, over plain HTTP",
            file=sys.stderr,
        )
    name = page_name(host, allow_remote)
    if name is None and not allow_remote:
        print(
            f"trusty-memory ui: WARNING: reached as {host}, the page's cookie is sent to every"
            f" server on {host}, whatever its port, another local user's included; leave out"
            " --host to get a private name",
            file=sys.stderr,
        )
    token = new_token()
    config = load_config()
    host, port = sock.getsockname()[:2]
    app = build_app(config, token, port=port, allow_remote=allow_remote, host=host, name=name)
    print(f"trusty-memory ui: {url_of(sock, token, name)}", flush=True)
    log.info("ui serving", address=sock.getsockname()[:2], home=str(config.home))
    server = uvicorn.Server(uvicorn_config(app, config.http, timeout_graceful_shutdown=2))
    asyncio.run(_serve(server, sock, log.warning))
    return 0


def _port_taken(exc: AddressError, port: int) -> str:
    """What to add when the port is in use (a second ``ui``, say): how to get a free one."""
    cause = exc.__context__  # ``listen`` raises from the OSError, keeping it as context
    if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE and port != 0:
        return (
            f" (another `trusty-memory ui`, or another program, has port {port}):"
            " `--port 0` takes a free one, or name another with `--port N`"
        )
    return ""


async def _serve(server: Any, sock: socket.socket, warn: Any) -> None:
    """``server`` on ``sock`` with accept errors logged at a bounded rate (the other
    guards are in its config: ``common/http_guard.py``)."""
    with accept_errors_logged(asyncio.get_running_loop(), warn):
        await server.serve(sockets=[sock])
