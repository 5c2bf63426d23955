"""``trusty-memory service install|uninstall``: the unit (systemd, ``client/cli/systemd.py``)
or agent (launchd, ``client/cli/launchd.py``) that runs this installation's daemon."""

from __future__ import annotations

import sys

from trusty_memory.client.cli.output import output
from trusty_memory.client.cli.parser import actions, command


def _service_manager(args):
    """The module that writes this platform's service: launchd on macOS, else systemd
    (``--launchd``/``--systemd`` choose either anywhere, e.g. to ``--print`` one)."""
    from trusty_memory.client.cli import launchd
    from trusty_memory.client.cli import systemd as service

    manager = args.manager or ("launchd" if sys.platform == "darwin" else "systemd")
    return launchd if manager == "launchd" else service


def _service_unit(args):
    from trusty_memory.client.cli import launchd
    from trusty_memory.client.cli import systemd as service
    from trusty_memory.common.config import load_config
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    if _service_manager(args) is launchd:
        if args.scope == "system" or args.run_as:
            raise TrustyError(
                ErrorCode.INVALID_PARAMS,
                "launchd: only a user agent (~/Library/LaunchAgents); --system and --run-as"
                " are for systemd",
            )
        return launchd.build_agent(load_config())
    try:
        return service.build_unit(load_config(), args.scope, run_as=args.run_as or "")
    except KeyError:
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"no such account: {args.run_as}") from None


def _service_error(exc: OSError, path) -> Exception:
    from trusty_memory.common.protocol import ErrorCode, TrustyError

    hint = " (a system unit: run it with sudo)" if isinstance(exc, PermissionError) else ""
    why = exc.strerror or exc
    return TrustyError(ErrorCode.INVALID_PARAMS, f"service: {path}: {why}{hint}")


def cmd_service_install(args) -> int:
    from trusty_memory.client.cli import launchd
    from trusty_memory.client.cli import systemd as service

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
