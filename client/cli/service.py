"""``trusty-memory service install|uninstall``: the unit (systemd, ``client/cli/systemd.py``)
or agent (launchd, ``client/cli/launchd.py``) that runs this installation's daemon; with
``--http [ADDR]``, a second one that runs its MCP-over-HTTP endpoint (``trusty-memory
http``), checked here as ``http`` checks its flags, so a unit never restart-loops on them."""

from __future__ import annotations

import sys

from trusty_memory.client.cli.output import output
from trusty_memory.client.cli.parser import actions, command
from trusty_memory.client.cli.processes import HTTP_LISTEN
from trusty_memory.common.config import load_config
from trusty_memory.common.names import validate_palace_name
from trusty_memory.common.protocol import ErrorCode, TrustyError


def _service_manager(args):
    """The module that writes this platform's service: launchd on macOS, else systemd
    (``--launchd``/``--systemd`` choose either anywhere, e.g. to ``--print`` one)."""
    from trusty_memory.client.cli import launchd  # lazy: the unit writers; service only
    from trusty_memory.client.cli import systemd as service  # lazy: the unit writers; service only

    manager = args.manager or ("launchd" if sys.platform == "darwin" else "systemd")
    return launchd if manager == "launchd" else service


def _endpoint(args):
    """``--http``'s endpoint (None without it), its address and palace checked now."""
    from trusty_memory.client.cli.systemd import Endpoint  # lazy: the unit writers; service only

    http = getattr(args, "http", None)
    palace = getattr(args, "palace", None)
    allow_remote = getattr(args, "allow_remote", False)
    if not http:
        if palace is not None or allow_remote:
            raise TrustyError(
                ErrorCode.INVALID_PARAMS, "--palace and --allow-remote go with --http"
            )
        return None
    if http is True:  # uninstall: only the unit's name matters
        return Endpoint(HTTP_LISTEN)
    from trusty_memory.common.listening import AddressError, check_addr  # lazy: --http only

    try:
        check_addr(http, allow_remote)
    except AddressError as exc:
        raise TrustyError(ErrorCode.INVALID_PARAMS, str(exc)) from None
    if palace is not None:
        try:
            validate_palace_name(palace)
        except TrustyError as exc:
            raise TrustyError(ErrorCode.INVALID_PARAMS, f"--palace: {exc.message}") from None
    return Endpoint(http, palace, allow_remote)


def _service_unit(args):
    from trusty_memory.client.cli import launchd  # lazy: the unit writers; service only
    from trusty_memory.client.cli import systemd as service  # lazy: the unit writers; service only

    http = _endpoint(args)
    if _service_manager(args) is launchd:
        if args.scope == "system" or args.run_as:
            raise TrustyError(
                ErrorCode.INVALID_PARAMS,
                "launchd: only a user agent (~/Library/LaunchAgents); --system and --run-as"
                " are for systemd",
            )
        return launchd.build_agent(load_config(), http)
    try:
        return service.build_unit(load_config(), args.scope, run_as=args.run_as or "", http=http)
    except KeyError:
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"no such account: {args.run_as}") from None


def _service_error(exc: OSError, path) -> Exception:
    hint = " (a system unit: run it with sudo)" if isinstance(exc, PermissionError) else ""
    why = exc.strerror or exc
    return TrustyError(ErrorCode.INVALID_PARAMS, f"service: {path}: {why}{hint}")


def cmd_service_install(args) -> int:
    from trusty_memory.client.cli import launchd  # lazy: the unit writers; service only
    from trusty_memory.client.cli import systemd as service  # lazy: the unit writers; service only

    unit = _service_unit(args)
    manager = _service_manager(args)
    data = {
        "manager": "launchd" if manager is launchd else "systemd",
        "scope": unit.scope,
        "path": str(unit.path),
        "command": unit.command,
        "home": str(unit.home),
        "cache": str(unit.cache),
        "run_as": unit.run_as or None,
        "tcp": unit.tcp,
        "http": args.http,
        "written": not args.print,
        "enable": unit.enable_hint(),
        "warnings": unit.warnings(),
        "unit": unit.text,
    }
    for warning in data["warnings"]:
        print(f"trusty-memory: warning: {warning}", file=sys.stderr)
    if args.print:
        output(args, data, unit.text.rstrip("\n"))
        return 0
    try:
        if manager is launchd:
            launchd.install(unit)
        else:
            service.prepare_dirs(unit)
            service.install(unit)
    except OSError as exc:
        raise _service_error(exc, exc.filename or unit.path) from None
    text = (
        f"wrote {unit.path}\n"
        "run `trusty-memory setup` first if the model is not compiled yet (the unit's daemon"
        " has no network)\n"
        f"enable it: {unit.enable_hint()}"
    )
    if manager is launchd:
        text = (
            f"wrote {unit.path}\nrun `trusty-memory setup` first if the model is not compiled"
            f" yet\nstart it (now and at every login): {unit.enable_hint()}\nits log: {unit.log}"
        )
    if args.http:
        from trusty_memory.client.mcp.http import TOKEN_FILE  # lazy: asyncio and ssl; --http only

        start = "start it (now and at every login)" if manager is launchd else "enable it"
        log = f"\nits log: {unit.log}" if manager is launchd else ""
        text = (
            f"wrote {unit.path}\n{start}: {unit.enable_hint()}{log}\n"
            f"its clients send 'Authorization: Bearer <token>' with the token in"
            f" {unit.home / TOKEN_FILE} (made at its first start)\n"
            "it uses the daemon of `trusty-memory service install` (without --http) when that"
            " one runs; install that one too"
        )
    output(args, data, text)
    return 0


def cmd_service_uninstall(args) -> int:
    unit = _service_unit(args)
    try:
        removed = _service_manager(args).uninstall(unit)
    except OSError as exc:
        raise _service_error(exc, unit.path) from None
    data = {"scope": unit.scope, "path": str(unit.path), "removed": removed}
    if removed:
        text = f"removed {unit.path}; if it was enabled: {unit.disable_hint()} first"
        if _service_manager(args).__name__.endswith("launchd"):
            text = f"removed {unit.path}; if it was loaded: {unit.disable_hint()}"
    else:
        text = f"no unit at {unit.path}"
    output(args, data, text)
    return 0


def register(sub) -> None:
    service = actions(
        sub, "service", "a systemd unit (a launchd agent on macOS) for this installation"
    )
    for name, fn, help in (
        ("install", cmd_service_install, "write the systemd unit (macOS: launchd agent)"),
        ("uninstall", cmd_service_uninstall, "remove what `service install` wrote"),
    ):
        s = command(service, name, fn, help)
        manager = s.add_mutually_exclusive_group()
        manager.add_argument(
            "--systemd", dest="manager", action="store_const", const="systemd", default=None,
            help="a systemd unit (the default, except on macOS)",
        )  # fmt: skip
        manager.add_argument(
            "--launchd", dest="manager", action="store_const", const="launchd",
            help="a launchd agent in ~/Library/LaunchAgents (the default on macOS)",
        )  # fmt: skip
        scope = s.add_mutually_exclusive_group()
        scope.add_argument(
            "--user", dest="scope", action="store_const", const="user", default="user",
            help="a user unit in ~/.config/systemd/user (default)",
        )  # fmt: skip
        scope.add_argument(
            "--system", dest="scope", action="store_const", const="system",
            help="a system unit in /etc/systemd/system (run as root)",
        )  # fmt: skip
        s.add_argument(
            "--run-as", metavar="USER",
            help="--system: the account the daemon runs as (default: $SUDO_USER, else you)",
        )  # fmt: skip
        if name == "install":
            s.add_argument(
                "--print", action="store_true", help="print the unit instead of writing it"
            )
            s.add_argument(
                "--http", metavar="ADDR", nargs="?", const=HTTP_LISTEN, default=None,
                help="the unit of an MCP-over-HTTP endpoint at ADDR (`trusty-memory http`;"
                f" default {HTTP_LISTEN}), beside the daemon's",
            )  # fmt: skip
            s.add_argument("--palace", help="--http: the endpoint's default palace")
            s.add_argument(
                "--allow-remote", action="store_true",
                help="--http: allow a non-loopback ADDR (plain HTTP: unencrypted)",
            )  # fmt: skip
        else:
            s.add_argument(
                "--http", action="store_true",
                help="remove the MCP-over-HTTP endpoint's unit, not the daemon's",
            )  # fmt: skip
