"""``trusty-memory serve``: the MCP front end agents spawn (contract: seeds/000).

Two ways to run, one contract:

* **Relayed** (the default; the daemon is on this machine): ``serve`` is the stdio edge
  plus :mod:`.relay`, the standard library only; the SDK sessions run in the daemon's
  MCP host (:mod:`.host`), one process for every session on the machine.
* **Direct** (``--http``, or a daemon on another host): the SDK runs in this process.

The modules:

* :mod:`.stdio` - the stdio edge: framing, parse errors, the instant ``initialize``,
  contract spellings of errors. Standard library only.
* :mod:`.tools` - the ten tools, one record each: schemas verbatim from the contract,
  argument checks, result shapes. No SDK, no ZeroMQ. :mod:`.tools_extended` - what
  ``--tools extended`` adds (off by default, so ``tools/list`` stays the contract's);
  :mod:`.tool_sets` serves either set.
* :mod:`.session` - the SDK's low-level ``Server`` with ``tools/list`` and
  ``tools/call`` handlers (``build_server``), and one SDK session fed message by message
  (``SdkSession``, the host's and direct mode's alike), with the ``--palace`` default.
* :mod:`.direct` - direct mode, with its ``--http`` companion (:mod:`.http`).
* this module - the entry: flags, which mode, signals and shutdown, and
  :func:`run_serve` for the CLI.

Start-up order is the point of the design: parse flags, bind ``--http``, start the stdio
edge (which can already answer ``initialize``), and only then load anything else. torch
and sentence-transformers are never imported here; they live in the daemon's embedder
processes.

Shutdown: EOF on stdin lets every request already read finish, then exits 0. SIGTERM or
SIGINT stops reading at once, gives in-flight tool calls up to ``GRACE_S`` to finish, and
exits 0 well inside the contract's 2 seconds. With ``--http``, either side ending stops
the other.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from trusty_memory.client.mcp.stdio import HARD_EXIT_S, StdioEdge, exit_after
from trusty_memory.client.mcp.tool_sets import TOOL_SETS
from trusty_memory.common import __version__
from trusty_memory.common.config import env_flag, load_config
from trusty_memory.common.names import validate_palace_name
from trusty_memory.common.protocol import TrustyError

USAGE_ERROR = 2


class ShutdownRequested(BaseException):
    """A signal arrived while the main thread was still starting."""


def _usage_error(message: str) -> int:
    print(f"trusty-memory serve: {message}", file=sys.stderr, flush=True)
    return USAGE_ERROR


def _raise_shutdown(signum: int, frame: Any) -> None:
    global _signalled
    _signalled = signum
    raise ShutdownRequested(signum)


_signalled: int | None = None  # the signal that interrupted start-up, if one did


def run_serve(
    palace: str | None = None,
    http: str | None = None,
    allow_remote: bool = False,
    tools: str | None = None,
) -> int:
    """Serve MCP on stdio (and HTTP with ``http``) until EOF or a signal; the exit code.

    Bad flags (an invalid palace name, a bad or busy ``--http`` address, an unknown tool
    set) print one line on stderr and return 2 before anything is served. ``tools`` is
    the tool set ("contract" or "extended"); None: ``TRUSTY_MEMORY_TOOLS``, else the
    config's ``[mcp] tools``, else the contract's.
    """
    try:
        tools = checked_options(tools, palace)
    except ValueError as exc:
        return _usage_error(str(exc))
    http_sock = None
    if http is not None:
        from trusty_memory.common.listening import AddressError, bind  # lazy: --http only

        try:
            http_sock = bind(http, allow_remote)
        except AddressError as exc:
            return _usage_error(str(exc))

    # Until the event loop owns them, a signal aborts start-up and still exits 0.
    previous = {sig: signal.signal(sig, _raise_shutdown) for sig in (signal.SIGTERM, signal.SIGINT)}
    edge = StdioEdge(version=__version__, default_palace=palace, extended=tools == "extended")
    try:
        edge.start()
        if os.environ.get("TRUSTY_MEMORY_SERVE_DEBUG_MODULES"):
            _report_modules_at_exit(os.environ["TRUSTY_MEMORY_SERVE_DEBUG_MODULES"])
        if http_sock is None and _daemon_is_local():
            from trusty_memory.client.mcp.relay import run_relay  # lazy: relay mode only

            return run_relay(edge, palace, tools)
        from trusty_memory.client.mcp.direct import serve_direct  # lazy: the SDK; direct mode only

        serve_direct(edge, palace, http_sock, __version__, tools)
    except (ShutdownRequested, Exception):
        # A signal during start-up. The exception it raised may have been caught by the
        # code it interrupted and re-raised as another (pydantic turns it into a SchemaError
        # while the SDK's types are being built): once signalled, any start-up error is it.
        if _signalled is None:
            raise
        edge.stop_reading()
        exit_after(HARD_EXIT_S, edge)
    finally:
        # Shutting down: a late signal must not turn exit 0 into death by SIGTERM.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        edge.close()
        if http_sock is not None:
            http_sock.close()
    return 0


def tool_set(flag: str | None) -> str:
    """The tool set to serve: the flag, else the environment or config (``[mcp] tools``)."""
    if flag is None:
        flag = load_config().mcp.tools
        where = "[mcp] tools (or TRUSTY_MEMORY_TOOLS)"
    else:
        where = "--tools"
    if flag not in TOOL_SETS:
        raise ValueError(f"{where}: unknown tool set {flag!r}; choose {' or '.join(TOOL_SETS)}")
    return flag


def checked_options(tools: str | None, palace: str | None) -> str:
    """The tool set to serve (``tool_set``), once ``palace`` is a valid palace name;
    ``ValueError`` naming the flag otherwise. Shared by ``serve`` and ``http``."""
    chosen = tool_set(tools)
    if palace is not None:
        try:
            validate_palace_name(palace)
        except TrustyError as exc:
            raise ValueError(f"--palace: {exc.message}") from None
    return chosen


def _daemon_is_local() -> bool:
    """Sessions relay to the MCP host of a daemon on this machine; a daemon elsewhere
    (``--daemon tcp://...``, or a ``tcp://`` frontend) is talked to directly, with the
    SDK in this process, and so is every session when ``TRUSTY_MEMORY_SERVE_DIRECT=1``
    (to rule the host out when chasing a problem, and to compare the two)."""
    if env_flag("TRUSTY_MEMORY_SERVE_DIRECT"):
        return False
    return load_config().daemon_endpoint.startswith("ipc://")


def _report_modules_at_exit(path: str) -> None:
    """Debug hook for tests: write the loaded module names to ``path`` at exit, so a test
    can prove that torch and sentence-transformers never entered this process."""
    import atexit

    def dump() -> None:
        with open(path, "w") as out:
            out.write("\n".join(sorted(sys.modules)))

    atexit.register(dump)


def main(argv: list[str] | None = None) -> int:
    """``python -m trusty_memory.client.mcp.server``: the same flags as ``serve``."""
    import argparse

    parser = argparse.ArgumentParser(prog="trusty-memory serve", description=__doc__.split("\n")[0])
    parser.add_argument("--palace", metavar="NAME", help="default palace for tool calls")
    parser.add_argument("--http", metavar="ADDR", help="also serve MCP over HTTP at ADDR")
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --http address"
    )
    parser.add_argument("--daemon", metavar="ENDPOINT", help="a daemon elsewhere: tcp://HOST:PORT")
    parser.add_argument("--server-key", metavar="Z85", help="that daemon's public key")
    parser.add_argument(
        "--tools", choices=("contract", "extended"), help="tool set (default: the contract's)"
    )
    args = parser.parse_args(argv)
    if args.daemon:
        os.environ["TRUSTY_MEMORY_DAEMON"] = args.daemon
    if args.server_key:
        os.environ["TRUSTY_MEMORY_SERVER_KEY"] = args.server_key
    return run_serve(
        palace=args.palace, http=args.http, allow_remote=args.allow_remote, tools=args.tools
    )


if __name__ == "__main__":
    sys.exit(main())
