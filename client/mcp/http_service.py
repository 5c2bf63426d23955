"""``trusty-memory http``: the MCP-over-HTTP endpoint of ``serve --http``, as a service.

``serve --http ADDR`` ends when its stdin closes (the contract's rule for ``serve``), so
it lives only as long as the session that spawned it. This verb serves the same endpoint
and nothing else: no stdio, stdin never read, so it outlives whatever started it and is
what ``service install --http`` has systemd or launchd run. What it shares with
``serve --http``, by running the same code:

* the address rules (``http.bind``): loopback unless ``--allow-remote``, bound before
  anything else, a bad or busy address one line on stderr and exit code 2;
* the bearer token of the home (``<home>/http-token``, or ``TRUSTY_MEMORY_HTTP_TOKEN``),
  the SDK's Host and Origin checks on loopback, and ``[http]``'s connection limits
  (``http.serve_http``);
* the tools, their errors and the ``--palace`` default (``session.build_server``), the
  tool set (``--tools``, ``[mcp] tools``).

At start it says where it listens on stdout (``--json``: one JSON object), naming the
token's file rather than the token, since a service's output goes to a journal or a log
file. Logs go to stderr (structlog, actor ``http``). SIGTERM or SIGINT closes the
listener, gives requests in flight up to a second (uvicorn's graceful shutdown) and exits
0; if something still holds the process after ``STOP_S``, it exits 0 anyway. A server
that fails after start exits 1, so ``Restart=on-failure`` starts it again.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

from trusty_memory.client.mcp.http import TOKEN_FILE, http_token, serve_http
from trusty_memory.client.mcp.server import checked_options
from trusty_memory.common import __version__
from trusty_memory.common.config import load_config
from trusty_memory.common.listening import AddressError, bind, is_loopback

USAGE_ERROR = 2
STOP_S = 5.0  # after SIGTERM/SIGINT, exit 0 by then whatever is still running


class _Stop(BaseException):
    """A signal arrived while the process was still starting."""


def _usage_error(message: str) -> int:
    print(f"trusty-memory http: {message}", file=sys.stderr, flush=True)
    return USAGE_ERROR


def run_http_service(
    listen: str,
    palace: str | None = None,
    allow_remote: bool = False,
    tools: str | None = None,
    json_out: bool = False,
) -> int:
    """Serve MCP over HTTP at ``listen`` until SIGTERM/SIGINT; the exit code."""
    try:
        tools = checked_options(tools, palace)
    except ValueError as exc:
        return _usage_error(str(exc))
    try:
        sock = bind(listen, allow_remote, flag="--listen")
    except AddressError as exc:
        return _usage_error(str(exc))

    signalled: list[int] = []

    def early_stop(signum: int, frame: Any) -> None:
        signalled.append(signum)
        raise _Stop(signum)

    # Until the event loop owns them, a signal aborts start-up and still exits 0.
    previous = {s: signal.signal(s, early_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        from trusty_memory.client.mcp.session import FrontEnd  # lazy: after flag checks; ^C exits 0
        from trusty_memory.common.logs import setup_logging  # lazy: after flag checks; ^C exits 0

        log = setup_logging("http").bind(default_palace=palace)
        token = _announce(sock, palace, json_out, log)
        front = FrontEnd(palace, log, tools=tools)
        return asyncio.run(_serve(sock, token, front, __version__))
    except (_Stop, Exception):
        # Once signalled, any start-up error is the signal's doing (it may have been
        # caught and re-raised as another by the code it interrupted).
        if not signalled:
            raise
        return 0
    finally:
        for sig in previous:  # shutting down: a late signal must not turn exit 0 into death
            signal.signal(sig, signal.SIG_IGN)
        sock.close()


async def _serve(sock: socket.socket, token: str, front: Any, version: str) -> int:
    from trusty_memory.client.mcp.session import build_server  # lazy: run_http_service loads it

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        front.log.info("signal received, shutting down", signal=signal.Signals(signum).name)
        stop.set()
        _exit_after(STOP_S)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        server = build_server(front, version)
        gc.freeze()  # start-up's objects live as long as we do (as in mcp/direct.py)
        front.start_background()
        front.log.info("serving MCP over HTTP", address=_url(sock))
        try:
            await serve_http(server, sock, stop, token, actor="http")
        except (Exception, SystemExit) as exc:  # uvicorn sys.exit()s on a failed start
            front.log.error("http server failed", error=repr(exc))
            return 1
        if not stop.is_set():
            front.log.error("http server stopped by itself")
            return 1
        return 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)  # which restores the default: ignore instead
            signal.signal(sig, signal.SIG_IGN)
        await front.close()


def _exit_after(seconds: float) -> None:
    """Exit 0 after ``seconds`` even if a thread (a daemon start-up, a blocked call)
    would hold the interpreter."""
    timer = threading.Timer(seconds, os._exit, (0,))
    timer.daemon = True
    timer.start()


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"


def _announce(sock: socket.socket, palace: str | None, json_out: bool, log: Any) -> str:
    """The endpoint's bearer token; its URL and where the token is kept said on stdout."""
    home = load_config().home
    token = http_token(home)
    url = _url(sock)
    explicit = bool(os.environ.get("TRUSTY_MEMORY_HTTP_TOKEN"))
    where = "TRUSTY_MEMORY_HTTP_TOKEN" if explicit else str(home / TOKEN_FILE)
    if json_out:
        data = {
            "url": url,
            "token_file": None if explicit else where,
            "default_palace": palace,
            "pid": os.getpid(),
        }
        line = json.dumps(data)
    else:
        line = (
            f"trusty-memory: MCP over HTTP at {url}; send 'Authorization: Bearer <token>'"
            f" with the token in {where}"
        )
    try:
        print(line, flush=True)
    except OSError:  # whoever started us is gone and took stdout with it: keep serving
        pass
    if not is_loopback(sock.getsockname()[0]):
        log.warning(
            "serving MCP over plain HTTP on a non-loopback address: the bearer token and"
            " memories cross the network unencrypted",
            address=url,
        )
    return token
