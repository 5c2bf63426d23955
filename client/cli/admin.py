"""The CLI's housekeeping verbs: ``setup``, ``doctor``, ``logs`` and ``config show``.

They read the machine and the home directly and need no daemon, so they work when the
daemon does not, which is when people reach for them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trusty_memory.client.cli.output import output, say
from trusty_memory.client.cli.parser import actions, command
from trusty_memory.common import __version__
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.home import live_daemon, tree_size
from trusty_memory.common.human import visible
from trusty_memory.common.protocol import ErrorCode, TrustyError

Check = tuple[str, bool, str]  # (what, ok, detail)
RUNTIME_MODULES = (
    "zmq", "msgspec", "hnswlib", "sqlite_utils", "structlog", "mcp", "onnxruntime", "tokenizers",
)  # fmt: skip


# -- doctor ------------------------------------------------------------------------------


def doctor(config: Config) -> list[Check]:
    """One check per line: the install, the model cache, the daemon, the home's modes."""
    checks: list[Check] = [
        ("python", sys.version_info >= (3, 11), sys.version.split()[0]),
        ("trusty-memory", True, f"{__version__} at {Path(__file__).resolve().parent}"),
    ]
    missing = [m for m in RUNTIME_MODULES if importlib.util.find_spec(m) is None]
    checks.append(("libraries", not missing, "missing: " + ", ".join(missing) if missing else "ok"))
    checks.append(_model_cache(config))
    checks.append(_export_tools(config))
    checks.append(_daemon(config))
    checks.append(_workers(config))
    checks.append(_home_modes(config))
    return checks


def cache_root(config: Config) -> Path:
    from trusty_memory.workers.embedder import compiled_model  # lazy: numpy; setup and doctor only

    if config.embedder.compiled_dir:
        return Path(config.embedder.compiled_dir).expanduser()
    return compiled_model.default_cache_root()


def _model_cache(config: Config) -> Check:
    from trusty_memory.workers.embedder import compiled_model  # lazy: numpy; setup and doctor only

    if not config.embedder.compiled:
        return ("model cache", True, "compiled model off: the embedder runs the library in process")
    root = cache_root(config)
    found = compiled_model.entries(root)
    mine = [e for e in found if e["current"]]
    others = [e for e in found if not e["current"]]
    if mine:
        built = mine[0]["built_with"]
        using = ", ".join(f"{k} {v}" for k, v in built.items() if k != "onnxruntime")
        detail = f"{mine[0]['path']} ({_mb(mine[0]['bytes'])}; built with {using or '?'})"
    else:
        detail = (
            f"not compiled yet for this install (key {compiled_model.cache_key()} in {root}):"
            " `trusty-memory setup` compiles it (~10 s), or the first start does"
        )
    if others:
        older = sum(1 for e in others if e["format"] != compiled_model.FORMAT)
        kinds = [f"{older} from older versions"] if older else []
        if len(others) > older:
            kinds.append(f"{len(others) - older} for other library versions")
        detail += (
            f"; {len(others)} other entries, {_mb(sum(e['bytes'] for e in others))}"
            f" ({', '.join(kinds)}): removed after 30 days unused, or now by"
            " `trusty-memory setup --clean`"
        )
    return ("model cache", True, detail)


def _export_tools(config: Config) -> Check:
    from trusty_memory.workers.embedder import export_tools  # lazy: numpy; setup and doctor only

    env = export_tools.env_dir()
    shared = f"shared environment {env} ({_mb(tree_size(env))})" if env.is_dir() else ""
    if export_tools.available_here():
        here = "installed here (torch, sentence-transformers)"
        return ("export tools", True, f"{here}; also a {shared}" if shared else here)
    if export_tools.env_ready():
        return ("export tools", True, f"not here: in the {shared}")
    return ("export tools", True, "not installed: only needed to compile the model (setup"
                                  " installs them once per machine)")  # fmt: skip


def _mb(size: int) -> str:
    return f"{size / 2**20:.0f} MB"


# -- setup -----------------------------------------------------------------------------


class StepLine:
    """``setup``'s progress on stderr: one line per step, redrawn on a terminal with the
    seconds it has taken so far (a build takes ~10 s, an install of the export tools
    a minute or more)."""

    def __init__(self, stream: Any = None, label: str = "setup") -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.label = label
        self.message = ""
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        if self.tty:
            threading.Thread(target=self._tick, daemon=True).start()

    def __call__(self, message: str) -> None:
        with self.lock:
            if self.message and self.tty:
                self._draw(end="\n")  # the finished step, with its time
            self.message, self.started = message, time.monotonic()
            self._draw(end="" if self.tty else "\n")

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            if self.message and self.tty:
                self._draw(end="\n")
            self.message = ""

    def _tick(self) -> None:
        while not self.stop.wait(1.0):
            with self.lock:
                if self.message:
                    self._draw(end="")

    def _draw(self, end: str) -> None:
        seconds = time.monotonic() - self.started
        prefix = "\r\x1b[K" if self.tty else ""
        clock = f" {seconds:.0f} s" if self.tty else ""
        self.stream.write(f"{prefix}{self.label}: {self.message} ...{clock}{end}")
        self.stream.flush()


def setup(config: Config, progress, clean: bool = False) -> dict[str, Any]:
    """Prepare the compiled model now (what the first embedder start would do), and with
    ``clean`` remove every other entry of the cache. Raises on failure."""
    from trusty_memory.common.logs import setup_logging  # lazy: structlog; setup only
    from trusty_memory.workers.embedder import (  # lazy: numpy; setup and doctor only
        compiled_model,
        export_tools,
    )

    started = time.monotonic()
    root = cache_root(config)
    log = setup_logging("setup", default_level="warning")  # stderr; the steps say the rest
    progress(f"looking for the compiled model in {root}")
    _, directory, built = compiled_model.load_verified(
        root, log, progress=progress, build_python=export_tools.python
    )
    removed = compiled_model.clean(root, log) if clean else []
    entry = next(e for e in compiled_model.entries(root) if e["current"])
    return {
        "ok": True,
        "directory": str(directory),
        "key": directory.name,
        "bytes": entry["bytes"],
        "built": built,
        "built_with": entry["built_with"],
        "seconds": round(time.monotonic() - started, 2),
        "removed": [{"path": e["path"], "bytes": e["bytes"]} for e in removed],
    }


def _daemon(config: Config) -> Check:
    from trusty_memory.client.autostart import ping  # lazy: pyzmq; doctor only

    record = live_daemon(config.home)
    if record is None:
        return ("daemon", True, "not running (any client starts it)")
    if not ping(config, 2.0):
        return ("daemon", False, f"pid {record.pid} holds the home but does not answer")
    same = record.version == __version__
    detail = f"pid {record.pid}, version {record.version}, at {record.frontend}"
    return ("daemon", same, detail if same else f"{detail}: restart it to run {__version__}")


def _workers(config: Config) -> Check:
    """Whether palace workers start the cheap way and none is in a crash loop."""
    from trusty_memory.client.autostart import ping  # lazy: pyzmq; doctor only
    from trusty_memory.client.sync import Client  # lazy: pyzmq; doctor only

    if live_daemon(config.home) is None or not ping(config, 2.0):
        return ("workers", True, "no daemon")
    try:
        with Client(config, autostart=False) as client:
            status = client.status()
    except Exception as exc:  # doctor reports; it never fails on a half-up daemon
        return ("workers", False, f"status failed: {exc}")
    template = status.get("template")
    if template is not None and template.get("fork_off_reason"):
        return ("workers", False, f"forking off: {template['fork_off_reason']}")
    looping = {n: c for n, c in (status.get("crashes") or {}).items() if c["in_a_row"] > 1}
    if looping:
        name, crash = next(iter(looping.items()))
        return ("workers", False, f"{name} crashed {crash['in_a_row']} times in a row "
                                  f"({crash['last_exit']}); see `trusty-memory logs`")  # fmt: skip
    if template is None:
        return ("workers", True, "started afresh ([palace] fork_workers = false)")
    if template.get("refused_forks"):
        return ("workers", False, f"the template has {template.get('threads')} threads and "
                                  "refuses to fork: workers start afresh")  # fmt: skip
    return ("workers", True, f"forked from the template (pid {template.get('pid')})")


def _home_modes(config: Config) -> Check:
    home = config.home
    if not home.exists():
        return ("home", True, f"{home} (not created yet)")
    loose = [p for p in _walk(home) if _loose(p)]
    if loose:
        return ("home", False, f"{len(loose)} paths readable by others, e.g. {loose[0]}"
                               " (the daemon tightens them at start)")  # fmt: skip
    return ("home", True, f"{home}: private (0700 directories, 0600 files)")


def _walk(home: Path) -> Iterator[Path]:
    yield home
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            yield Path(root, name)


def _loose(path: Path) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return False
    return bool(stat.S_IMODE(st.st_mode) & 0o077)


# -- logs ----------------------------------------------------------------------------


def log_path(config: Config) -> Path:
    return config.log_dir / "daemon.log"


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a file, read from its end (logs grow large)."""
    if not path.exists():
        return []
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size, block, data = f.tell(), 65536, b""
        while size > 0 and data.count(b"\n") <= lines:
            step = min(block, size)
            size -= step
            f.seek(size)
            data = f.read(step) + data
    return data.decode(errors="replace").splitlines()[-lines:]


def follow(path: Path, out: Any, poll_s: float = 0.25, render: Any = None) -> None:
    """Print what is appended to ``path`` until interrupted (``logs -f``), each line
    through ``render`` when given."""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        while True:
            line = f.readline()
            if line:
                text = line.decode(errors="replace")
                out.write(render(text.rstrip("\n")) + "\n" if render else text)
                out.flush()
            else:
                time.sleep(poll_s)


_LOG_FIELDS = ("timestamp", "level", "actor", "pid", "event")


def render_log_line(line: str) -> str:
    """One JSON log line for people: ``time  level  actor[pid]  event  key=value ...``,
    a traceback on the lines below; a line that is not such JSON as it is."""
    import json

    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict) or "event" not in record:
        return line
    stamp = str(record.get("timestamp", "")).replace("T", " ")[:19]
    who = str(record.get("actor", "")) + (f"[{record['pid']}]" if record.get("pid") else "")
    trace = record.pop("exception", None)
    rest = "  ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in record.items()
        if k not in _LOG_FIELDS
    )
    text = f"{stamp}  {record.get('level', ''):<7} {who:<20} {record['event']}"
    text += f"  {rest}" if rest else ""
    if trace:
        text += "\n" + "\n".join("    " + t for t in str(trace).splitlines())
    return text


def shown_log_line(line: str) -> str:
    """A log line for a terminal: rendered, with the controls its fields hold (a log
    event may quote stored text or a request) shown, not obeyed."""
    return visible(render_log_line(line), lines=True)


# -- config show -----------------------------------------------------------------------


def config_dict(config: Config) -> dict[str, Any]:
    """The effective settings (file, environment and defaults together), by section."""
    sections = {
        f.name: dataclasses.asdict(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if dataclasses.is_dataclass(getattr(config, f.name))
    }
    return {"home": str(config.home), "run_dir": str(config.run_dir), **sections}


def config_toml(config: Config) -> str:
    data = config_dict(config)
    lines = [f"# home = {data.pop('home')}", f"# run_dir = {data.pop('run_dir')}"]
    for section, values in data.items():
        lines.append(f"\n[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml(value)}")
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


# -- the verbs -------------------------------------------------------------------------


def cmd_doctor(args) -> int:
    checks = doctor(load_config())
    data = {"ok": all(ok for _, ok, _ in checks),
            "checks": [{"check": n, "ok": ok, "detail": d} for n, ok, d in checks]}  # fmt: skip
    text = "\n".join(f"{'ok  ' if ok else 'FAIL'}  {name}: {detail}" for name, ok, detail in checks)
    output(args, data, text)
    return 0 if data["ok"] else 1


def cmd_setup(args) -> int:
    config = load_config()
    if not config.embedder.compiled:
        output(args, {"ok": True, "compiled": False}, "compiled model off: nothing to prepare")
        return 0
    progress = StepLine()
    try:
        data = setup(config, progress, clean=args.clean)
    except Exception as exc:
        raise TrustyError(ErrorCode.EMBEDDER_UNAVAILABLE, f"setup failed: {exc}") from exc
    finally:
        progress.close()
    how = "compiled" if data["built"] else "already compiled"
    text = f"model ready: {data['directory']} ({data['bytes'] / 2**20:.0f} MB, {how}, "
    text += f"{data['seconds']:.1f} s)"
    for gone in data["removed"]:
        text += f"\nremoved {gone['path']} ({gone['bytes'] / 2**20:.0f} MB)"
    output(args, data, text)
    return 0


def cmd_logs(args) -> int:
    """The daemon's log: readable lines on a terminal, its JSON lines as they are when
    piped (for jq), and ``{"path", "lines"}`` with ``--json``."""
    import json

    path = log_path(load_config())
    lines = tail(path, args.lines)
    if args.json:
        print(json.dumps({"path": str(path), "lines": lines}, indent=2))
        return 0
    render = shown_log_line if sys.stdout.isatty() else None
    for line in lines:
        print(render(line) if render else line)
    if args.follow:
        sys.stdout.flush()
        follow(path, sys.stdout, render=render)
    elif not path.exists():
        say(f"(no log yet at {path})", file=sys.stderr)
    return 0


def cmd_config_show(args) -> int:
    config = load_config()
    output(args, config_dict(config), config_toml(config))
    return 0


def register(sub) -> None:
    s = command(
        sub,
        "setup",
        cmd_setup,
        "prepare the model now: compile it once per machine (else the first start does)",
    )
    s.add_argument(
        "--clean", action="store_true", help="also remove the cache's other compiled models"
    )
    command(sub, "doctor", cmd_doctor, "check the install, model cache, daemon and home")
    s = command(
        sub, "logs", cmd_logs,
        "the daemon's log (readable on a terminal; JSON lines when piped or with --json)",
    )  # fmt: skip
    s.add_argument("-n", "--lines", type=int, default=50, help="how many lines (default 50)")
    s.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    config = actions(sub, "config", "the effective configuration")
    command(config, "show", cmd_config_show, "file, environment and defaults, merged")
