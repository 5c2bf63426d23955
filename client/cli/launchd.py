"""``trusty-memory service`` on macOS: a launchd agent written for this installation.

The counterpart of ``service.py``'s systemd unit, and built the same way: the job runs this
install's ``trusty-memory daemon --take-over`` (``service.daemon_command``) with the home
and the model cache as this environment resolves them, so nothing in it points at a
checkout. launchd starts a job with an environment of its own, not the shell's, so the
home is always named in the job and ``XDG_CACHE_HOME`` whenever it is set here.

launchd's choices, and why:

* ``KeepAlive`` = ``{SuccessfulExit: false, Crashed: true}``: restarted only when it exits
  with an error or dies of a signal, as ``Restart=on-failure``. A daemon that exits 0 (it
  was stopped with ``trusty-memory stop`` or SIGTERM) stays stopped.
* ``ThrottleInterval`` 5 s between starts (``RestartSec=5``); ``ExitTimeOut`` 30 s between
  SIGTERM and SIGKILL, for large palaces to save their indexes (``TimeoutStopSec=30``).
* stdout and stderr appended to ``<home>/logs/daemon.log``, the file a daemon a client
  started writes and ``trusty-memory logs`` reads. launchd does not create folders, so
  ``install`` creates the home and its ``logs`` (0700) first.
* ``Umask`` 0077: memories hold secrets.

There is no sandbox to match systemd's: macOS has no per-job equivalent that launchd
applies from the plist alone.

``service install --http [ADDR]`` writes a second agent, ``trusty-memory-http``, that runs
``trusty-memory http --listen ADDR`` (the MCP-over-HTTP endpoint as a service) with the same
choices, logging to ``<home>/logs/http.log``. launchd has no ordering between agents: the
endpoint finds the daemon agent's daemon through the home, or starts one as any client does.
"""

from __future__ import annotations

import os
import plistlib
from dataclasses import dataclass
from pathlib import Path

from trusty_memory.client.cli.systemd import Endpoint, daemon_command
from trusty_memory.common.config import APP, Config

LABEL = APP  # launchctl's name for the job: `launchctl print gui/$UID/trusty-memory`
LOG_NAME = "daemon.log"
HTTP_LABEL = f"{APP}-http"
HTTP_LOG_NAME = "http.log"
THROTTLE_S = 5
EXIT_TIMEOUT_S = 30


def agents_dir() -> Path:
    return Path.home() / "Library" / "LaunchAgents"


def cache_dir() -> Path:
    """The model cache as the daemon will resolve it (``compiled_model.default_cache_root``
    without its last part): ``$XDG_CACHE_HOME/trusty-memory``, else the platform's."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP, appauthor=False))


@dataclass(frozen=True)
class Agent:
    """What ``cmd_service_install`` reports and writes, as ``service.Unit`` has it."""

    path: Path
    command: list[str]  # ProgramArguments
    home: Path
    cache: Path
    log: Path
    job: dict
    text: str
    scope: str = "user"
    run_as: str = ""
    tcp: bool = False
    label: str = LABEL

    def warnings(self) -> list[str]:
        return []  # nothing hides the home from a launchd job, unlike PrivateTmp

    def enable_hint(self) -> str:
        return f'launchctl bootstrap gui/"$(id -u)" {self.path}'

    def disable_hint(self) -> str:
        return f'launchctl bootout gui/"$(id -u)"/{self.label}'


def build_agent(config: Config, http: Endpoint | None = None) -> Agent:
    """The daemon's agent; with ``http``, the agent of the MCP-over-HTTP endpoint."""
    home = config.home
    label = HTTP_LABEL if http else LABEL
    env = {
        "TRUSTY_MEMORY_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TRUSTY_MEMORY_LOG": "info",
    }
    if os.environ.get("XDG_CACHE_HOME"):
        env["XDG_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]
    command = [*daemon_command(), *(http.args() if http else ["daemon", "--take-over"])]
    log = config.log_dir / (HTTP_LOG_NAME if http else LOG_NAME)
    job = {
        "Label": label,
        "ProgramArguments": command,
        "EnvironmentVariables": env,
        "WorkingDirectory": str(home),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False, "Crashed": True},
        "ThrottleInterval": THROTTLE_S,
        "ExitTimeOut": EXIT_TIMEOUT_S,
        "ProcessType": "Standard",
        "Umask": 0o077,
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
    }
    text = plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=False).decode()
    tcp = any(e.startswith("tcp://") for e in (config.broker.frontend, config.broker.backend))
    path = agents_dir() / f"{label}.plist"
    return Agent(path, command, home, cache_dir(), log, job, text, tcp=tcp, label=label)


def install(agent: Agent) -> None:
    """Create the home and its logs folder (launchd opens the log itself and creates no
    folders), then write the plist atomically, readable by launchd (it holds no secret)."""
    agent.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    agent.log.parent.mkdir(mode=0o700, exist_ok=True)
    agent.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = agent.path.with_name(f".{agent.path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(agent.text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, agent.path)


def uninstall(agent: Agent) -> bool:
    """Remove the plist; False when there was none."""
    try:
        agent.path.unlink()
    except FileNotFoundError:
        return False
    return True
