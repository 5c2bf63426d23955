"""``trusty-memory service``: a systemd unit written for this installation.

The unit names the executable of the install that runs ``service install`` (the console
script beside ``sys.executable``, else that interpreter with ``-m trusty_memory.client.cli.main``),
the home and the model cache as this environment resolves them, so nothing in it points at
a checkout. It runs ``trusty-memory daemon --take-over``: when a daemon a client started
owns the home, the unit's daemon stops it cleanly and takes the home over, instead of
failing and restarting (``broker/daemon.py``).

The sandbox leaves the daemon what it uses: the home and the user cache dir of
trusty-memory writable (compiled model, export tools), everything else read-only, Unix
sockets only (also TCP when ``[broker]`` names a ``tcp://`` endpoint), no privileges,
no writable and executable memory (the daemon's children, ONNX Runtime, the forked
worker template, the MCP host, need none: ``tests/engine/test_service_sandbox.py`` runs
them under the same rules).

``service install --http [ADDR]`` writes a second unit, ``trusty-memory-http.service``,
that runs ``trusty-memory http --listen ADDR`` (the MCP-over-HTTP endpoint as a service,
``client/mcp/http_service.py``) under the same sandbox, with the network it listens on:
``AF_INET``/``AF_INET6`` always, and only loopback peers (``IPAddressAllow=localhost``)
when it listens on a loopback address and the daemon is not on ``tcp://``. It wants the
daemon's unit and starts after it, so it uses that daemon rather than starting one of its
own; it stops in the default way (SIGTERM to every process of the unit), so a daemon it
did start, with no daemon unit installed, saves its indexes and exits with it.
"""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass
from pathlib import Path

from trusty_memory.common.config import APP, Config, load_config
from trusty_memory.common.launch import module_command

UNIT_NAME = f"{APP}.service"
HTTP_UNIT_NAME = f"{APP}-http.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")


@dataclass(frozen=True)
class Endpoint:
    """What ``service install --http`` serves: ``trusty-memory http``'s flags."""

    listen: str  # host:port
    palace: str | None = None
    allow_remote: bool = False

    def args(self) -> list[str]:
        words = ["http", "--listen", self.listen]
        if self.palace:
            words += ["--palace", self.palace]
        if self.allow_remote:
            words.append("--allow-remote")
        return words

    def loopback(self) -> bool:
        from trusty_memory.common.listening import is_loopback, parse_addr  # lazy: --http only

        return is_loopback(parse_addr(self.listen)[0])


@dataclass(frozen=True)
class Unit:
    scope: str  # "user" or "system"
    path: Path  # where ``install`` writes it
    command: list[str]  # ExecStart
    home: Path
    cache: Path  # $XDG_CACHE_HOME/trusty-memory
    run_as: str  # the account the daemon runs as ("" for the user unit: the manager's)
    tcp: bool
    text: str
    name: str = APP  # systemctl's name for it: trusty-memory, or trusty-memory-http

    def warnings(self) -> list[str]:
        hidden = [p for p in (self.home, self.cache) if p.is_relative_to("/tmp")
                  or p.is_relative_to("/var/tmp")]  # fmt: skip
        return [
            f"{p} is under /tmp or /var/tmp, which the unit's PrivateTmp= hides from the"
            " daemon: choose another TRUSTY_MEMORY_HOME / XDG_CACHE_HOME"
            for p in hidden
        ]

    def enable_hint(self) -> str:
        ctl = "systemctl --user" if self.scope == "user" else "systemctl"
        return f"{ctl} daemon-reload && {ctl} enable --now {self.name}"

    def disable_hint(self) -> str:
        ctl = "systemctl --user" if self.scope == "user" else "systemctl"
        return f"{ctl} disable --now {self.name}"


def daemon_command() -> list[str]:
    """This installation's ``trusty-memory``: the console script beside the interpreter
    (a venv's ``bin/``, pipx's, uv's), else the interpreter itself with ``-m``."""
    script = Path(sys.executable).parent / APP
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return module_command("trusty_memory.client.cli.main")


def user_unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def _cache_base(user_home: Path, own: bool) -> Path:
    """The user cache dir (``$XDG_CACHE_HOME``, else ``~/.cache``) of the account the
    daemon runs as; another account's environment is not ours to read."""
    if own and os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"])
    return user_home / ".cache"


def build_unit(config: Config, scope: str, run_as: str = "", http: Endpoint | None = None) -> Unit:
    """The unit for this installation (with ``http``, the unit of its MCP-over-HTTP
    endpoint); ``run_as`` (system units) defaults to the user who ran ``sudo``, else the
    current one."""
    name = HTTP_UNIT_NAME if http else UNIT_NAME
    me = pwd.getpwuid(os.getuid()).pw_name
    if scope == "system":
        run_as = run_as or os.environ.get("SUDO_USER") or me
        account = pwd.getpwnam(run_as)
        own = account.pw_uid == os.getuid()
        user_home = Path(account.pw_dir)
        path = SYSTEM_UNIT_DIR / name
    else:
        run_as, own, user_home = "", True, Path.home()
        path = user_unit_dir() / name
    if own or os.environ.get("TRUSTY_MEMORY_HOME"):
        home = config.home
    else:  # sudo: the default home of the account the daemon runs as, not root's
        home = user_home / ".local" / "share" / APP
        config = _config_of(home)  # its config.toml: compiled_dir, tcp endpoints
    cache_base = _cache_base(user_home, own)
    cache = cache_base / APP
    extra = []
    if config.embedder.compiled_dir:
        compiled = Path(config.embedder.compiled_dir).expanduser()
        if not compiled.is_relative_to(cache) and not compiled.is_relative_to(home):
            extra.append(compiled)
    tcp = any(e.startswith("tcp://") for e in (config.broker.frontend, config.broker.backend))
    command = [*daemon_command(), *(http.args() if http else ["daemon", "--take-over"])]
    text = render(scope, command, home, cache_base, extra, run_as, tcp, http)
    return Unit(scope, path, command, home, cache, run_as, tcp, text, name.removesuffix(".service"))


def _config_of(home: Path) -> Config:
    saved = os.environ.get("TRUSTY_MEMORY_HOME")
    os.environ["TRUSTY_MEMORY_HOME"] = str(home)
    try:
        return load_config()
    finally:
        if saved is None:
            del os.environ["TRUSTY_MEMORY_HOME"]
        else:
            os.environ["TRUSTY_MEMORY_HOME"] = saved


def _quote(word: str) -> str:
    """One word of a unit file line, with systemd's specifiers and variables kept literal."""
    word = word.replace("%", "%%")
    if any(c in word for c in " \t\"\\'$;"):
        word = word.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$")
        return f'"{word}"'
    return word


def render(
    scope: str,
    command: list[str],
    home: Path,
    cache_base: Path,
    extra_rw: list[Path],
    run_as: str,
    tcp: bool,
    http: Endpoint | None = None,
) -> str:
    cache = cache_base / APP
    exec_start = " ".join(_quote(w) for w in command)
    # "-": a cache not created yet does not fail the start (the home is created at install).
    rw = " ".join([_quote(str(home))] + ["-" + _quote(str(p)) for p in [cache, *extra_rw]])
    network = tcp or http is not None
    families = "AF_UNIX AF_INET AF_INET6" if network else "AF_UNIX"
    if http is None:
        lines = [
            f"# {scope} unit for trusty-memory, written by `trusty-memory service install"
            f" --{scope}`",
            "# for this installation; `trusty-memory service uninstall` removes it.",
            "[Unit]",
            "Description=trusty-memory daemon (broker, palace workers, embedder pool)",
        ]
    else:
        lines = [
            f"# {scope} unit for trusty-memory's MCP-over-HTTP endpoint, written by"
            f" `trusty-memory service install --{scope} --http`",
            "# for this installation; `trusty-memory service uninstall --http` removes it.",
            "[Unit]",
            f"Description=trusty-memory MCP over HTTP at {_quote(http.listen)}",
            "# The daemon's unit, when installed, starts first: the endpoint then uses its daemon.",
            f"Wants={UNIT_NAME}",
            f"After={UNIT_NAME}",
        ]
    if network and scope == "system" and (tcp or not http or not http.loopback()):
        lines += ["After=network-online.target", "Wants=network-online.target"]
    lines += [
        # A start that keeps failing (a broken install) stops being retried: 5 in 5 minutes.
        "StartLimitIntervalSec=300",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={exec_start}",
    ]
    if run_as:
        lines.append(f"User={_quote(run_as)}")
    lines += [
        f"Environment={_quote('TRUSTY_MEMORY_HOME=' + str(home))}",
        f"Environment={_quote('XDG_CACHE_HOME=' + str(cache_base))}",
        "Environment=HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRUSTY_MEMORY_LOG=info",
        "# Memories hold secrets: files 0600, directories 0700 (the daemon sets this itself too).",
        "UMask=0077",
    ]
    if http is None:
        lines += [
            "# SIGTERM: every worker saves its index and exits; allow time for large palaces.",
            "KillMode=mixed",
        ]
    else:
        lines += [
            "# SIGTERM to every process of the unit: the endpoint exits 0 within seconds, and a",
            "# daemon it started itself (no daemon unit) saves its indexes and exits too.",
            "KillMode=control-group",
        ]
    lines += [
        "TimeoutStopSec=30",
        "Restart=on-failure",
        "RestartSec=5",
        "",
        "# Sandbox: the home and the model cache writable, the rest of the system read-only.",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        f"ReadWritePaths={rw}",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "PrivateIPC=yes",
        "PrivateMounts=yes",
        "PrivateUsers=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        f"RestrictAddressFamilies={families}",
    ]
    if not network:
        lines += ["PrivateNetwork=yes", "IPAddressDeny=any"]
    elif http is not None and not tcp and http.loopback():
        lines += ["IPAddressAllow=localhost", "IPAddressDeny=any"]
    lines += [
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "ProtectProc=invisible",
        "KeyringMode=private",
        "DevicePolicy=closed",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        "SystemCallFilter=~@privileged",
        "SystemCallErrorNumber=EPERM",
        "",
        "[Install]",
        f"WantedBy={'default.target' if scope == 'user' else 'multi-user.target'}",
        "",
    ]
    if scope == "system":  # RemoveIPC= applies to system services only
        lines.insert(lines.index("[Install]") - 1, "RemoveIPC=yes")
    return "\n".join(lines)


def install(unit: Unit) -> None:
    unit.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = unit.path.with_name(f".{unit.path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(unit.text)
    os.chmod(tmp, 0o644)  # the manager reads it; it holds no secret
    os.replace(tmp, unit.path)


def uninstall(unit: Unit) -> bool:
    """Remove the unit file; False when there was none."""
    try:
        unit.path.unlink()
    except FileNotFoundError:
        return False
    return True


def prepare_dirs(unit: Unit) -> None:
    """Create the home and the cache the unit makes writable (a missing home would fail
    the sandbox's set-up), private to the account the daemon runs as."""
    account = pwd.getpwnam(unit.run_as) if unit.run_as else pwd.getpwuid(os.getuid())
    for path in (unit.home, unit.cache):
        missing = []
        probe = path
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if account.pw_uid != os.getuid():  # root installing for another account
            for made in missing:
                os.chown(made, account.pw_uid, account.pw_gid)
