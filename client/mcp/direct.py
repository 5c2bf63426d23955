"""``serve`` in direct mode: the SDK in the ``serve`` process itself.

The default is the relay (``mcp/relay.py``) to the daemon's MCP host. Direct mode is for
``serve --http`` (the HTTP companion shares this process's SDK server with stdio) and for
a daemon on another host (a ``tcp://`` frontend), where there is no local host to relay to.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from typing import Any

from trusty_memory.client.mcp.session import FrontEnd, SdkSession, build_server
from trusty_memory.client.mcp.stdio import (
    EOF,
    EOF_DRAIN_S,
    GRACE_S,
    HARD_EXIT_S,
    StdioEdge,
    exit_after,
)
from trusty_memory.common.config import load_config
from trusty_memory.common.logs import setup_logging


def serve_direct(
    edge: StdioEdge, palace: str | None, http_sock: Any, version: str, tools: str = "contract"
) -> None:
    """Run the SDK here until EOF or a signal (the edge is already started)."""
    log = setup_logging("serve").bind(default_palace=palace)
    edge.log = lambda event, fields: log.warning(event, **fields)
    token = ""
    if http_sock is not None:
        token = _announce_http(http_sock, log)
    asyncio.run(_serve(edge, FrontEnd(palace, log, tools=tools), http_sock, version, token))


async def _serve(
    edge: StdioEdge, front: FrontEnd, http_sock: Any, version: str, token: str = ""
) -> None:
    """Direct mode: the SDK in this process (``--http``, or a daemon on another host)."""
    loop = asyncio.get_running_loop()
    server = build_server(front, version)
    # Start-up's objects (the SDK, pydantic's schemas) live as long as we do: moved out of
    # the collector's sight, a full collection no longer walks them. About one request in a
    # thousand triggers one: it stalled that request 35-40 ms, now 1.2 ms.
    gc.freeze()
    session = SdkSession(server, edge.emit, front.log)
    stdin_closed = asyncio.Event()
    stop = asyncio.Event()  # a signal, or the HTTP side ended

    def feed(message: Any) -> None:  # on the loop thread, in stdin order
        if message is EOF:
            stdin_closed.set()
        else:
            session.feed(message)

    edge.attach(lambda message: loop.call_soon_threadsafe(feed, message))

    def on_signal(signum: int) -> None:
        front.log.info("signal received, shutting down", signal=signal.Signals(signum).name)
        edge.stop_reading()
        stop.set()
        exit_after(HARD_EXIT_S, edge)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    async def run_http() -> None:
        from trusty_memory.client.mcp.http import serve_http  # lazy: serve --http only

        try:
            await serve_http(server, http_sock, stop, token)
        except (Exception, SystemExit) as exc:  # uvicorn sys.exit()s on a failed start
            front.log.error("http server failed", error=repr(exc))
        finally:
            stop.set()  # either ending stops the other

    tasks = [asyncio.create_task(session.run())]
    if http_sock is not None:
        tasks.append(asyncio.create_task(run_http()))
    front.start_background()
    front.log.info("serving MCP on stdio", http=http_sock is not None)
    try:
        ended = asyncio.create_task(stdin_closed.wait())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        stopped.cancel()
        front.log.debug("stopping", reason="signal" if stop.is_set() else "stdin closed")
        if stop.is_set():
            edge.stop_reading()
        # Let requests already handed to the SDK answer. Polled on the loop, not waited
        # for in a thread: asyncio.run() joins its threads, so a thread parked here would
        # hold the exit. A signal during the EOF drain cuts what is left to GRACE_S.
        deadline = time.monotonic() + (GRACE_S if stop.is_set() else EOF_DRAIN_S)
        while edge.inflight() and time.monotonic() < deadline:
            if stop.is_set():
                deadline = min(deadline, time.monotonic() + GRACE_S)
            await asyncio.sleep(0.01)
        stop.set()
        await session.close_input()
        await asyncio.wait(tasks, timeout=0.3)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await front.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _announce_http(sock: Any, log: Any) -> str:
    """The HTTP endpoint's bearer token, told once on stderr with the URL to use it at."""
    from trusty_memory.client.mcp.http import TOKEN_FILE, http_token  # lazy: serve --http only
    from trusty_memory.common.listening import is_loopback  # lazy: serve --http only

    home = load_config().home
    token = http_token(home)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"
    print(
        f"trusty-memory: MCP over HTTP at {url}; send 'Authorization: Bearer {token}'"
        f" (kept in {home / TOKEN_FILE})",
        file=sys.stderr,
        flush=True,
    )
    if not is_loopback(host):
        log.warning(
            "serving MCP over plain HTTP on a non-loopback address: the bearer token and"
            " memories cross the network unencrypted",
            address=url,
        )
    return token
