"""``serve --http ADDR``: the SDK's streamable-HTTP MCP endpoint beside stdio.

The address is parsed and the socket bound *before* stdio starts serving, so a bad
address or a port in use is a start-up error (a clear line on stderr, exit code 2)
rather than a half-running server. Only the address given is bound; a non-loopback
address needs ``--allow-remote`` because the endpoint has no authentication.

uvicorn and starlette are imported only inside :func:`serve_http`, so a plain stdio
session never pays for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from typing import Any


class AddressError(ValueError):
    """An ``--http`` address we will not serve on; the message says why."""


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> ``(host, port)``."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host:
        raise AddressError(
            f"invalid --http address {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:3031"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise AddressError(f"invalid --http address {addr!r}: write IPv6 hosts as [::1]:PORT")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AddressError(f"invalid --http address {addr!r}: port must be 0-65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost could resolve anywhere


def bind(addr: str, allow_remote: bool) -> socket.socket:
    """Check ``addr`` and bind a listening socket to exactly it."""
    host, port = parse_addr(addr)
    if not is_loopback(host) and not allow_remote:
        raise AddressError(
            f"refusing --http address {addr!r}: it is not a loopback address and the endpoint is "
            "unauthenticated; pass --allow-remote to do it anyway"
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise AddressError(f"invalid --http address {addr!r}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AddressError(f"cannot listen on --http address {addr!r}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


async def serve_http(server: Any, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve ``server`` (an SDK ``Server``) at ``/mcp`` on ``sock`` until ``stop`` is set."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    host = sock.getsockname()[0]
    security = None
    if is_loopback(host):  # keep the SDK's DNS-rebinding guard for every loopback address
        hosts = {"127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host}
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:*" for h in sorted(hosts)],
            allowed_origins=[f"http://{h}:*" for h in sorted(hosts)],
        )
    app = server.streamable_http_app(host=host, transport_security=security)
    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=1
    )
    web = _quiet_uvicorn_server(config)

    async def watch() -> None:
        await stop.wait()
        web.should_exit = True

    watcher = asyncio.create_task(watch())
    try:
        await web.serve(sockets=[sock])
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def _quiet_uvicorn_server(config: Any) -> Any:
    """A uvicorn server without its own signal handlers: ``serve`` owns SIGTERM/SIGINT."""
    import uvicorn

    class QuietSignals(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            yield

    return QuietSignals(config)
