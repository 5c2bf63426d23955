"""An address to listen on: parsed, checked and bound before any server starts.

What the two HTTP servers share (``serve --http`` and ``trusty-memory http``, in
``client/mcp/http.py``; the web page, ``ui/server.py``) and what the service files check
(``client/cli/service.py``, ``systemd.py``): a bad address or a busy port is one clear
start-up error naming the flag, never a server that never answers; a non-loopback address
is refused unless the caller allows it, because both servers speak plain HTTP.
"""

from __future__ import annotations

import ipaddress
import socket


class AddressError(ValueError):
    """An ``--http`` address we will not serve on; the message says why."""


def parse_addr(addr: str, flag: str = "--http") -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> ``(host, port)``; ``flag`` names the option in
    errors (``trusty-memory http`` takes ``--listen``)."""
    host, sep, port_text = addr.rpartition(":")
    if not sep or not host:
        raise AddressError(
            f"invalid {flag} address {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:3031"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise AddressError(f"invalid {flag} address {addr!r}: write IPv6 hosts as [::1]:PORT")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AddressError(f"invalid {flag} address {addr!r}: port must be 0-65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost could resolve anywhere


def check_addr(addr: str, allow_remote: bool, flag: str = "--http") -> tuple[str, int]:
    """``parse_addr``, and a non-loopback address refused unless ``allow_remote``."""
    host, port = parse_addr(addr, flag)
    if not is_loopback(host) and not allow_remote:
        raise AddressError(
            f"refusing {flag} address {addr!r}: it is not a loopback address and the endpoint is "
            "plain HTTP (the token and memories would cross the network unencrypted); pass "
            "--allow-remote to do it anyway"
        )
    return host, port


def bind(addr: str, allow_remote: bool, flag: str = "--http") -> socket.socket:
    """Check ``addr`` and bind a listening socket to exactly it."""
    host, port = check_addr(addr, allow_remote, flag)
    return listen(host, port, f"{flag} address {addr!r}")


def listen(host: str, port: int, name: str) -> socket.socket:
    """A non-blocking listening TCP socket on exactly ``host:port`` (port 0: a free one);
    ``name`` is how errors call the address. Bound before any server starts, so a refused
    or busy address is one clear error rather than a server that never answers."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise AddressError(f"invalid {name}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AddressError(f"cannot listen on {name}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock
