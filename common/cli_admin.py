"""The CLI's housekeeping verbs: ``doctor``, ``logs`` and ``config show``.

They read the machine and the home directly and need no daemon, so they work when the
daemon does not, which is when people reach for them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trusty_memory import __version__
from trusty_memory.config import Config

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
    checks.append(_daemon(config))
    checks.append(_home_modes(config))
    return checks


def _model_cache(config: Config) -> Check:
    from trusty_memory.workers import compiled_model

    root = (
        Path(config.embedder.compiled_dir).expanduser()
        if config.embedder.compiled_dir
        else compiled_model.default_cache_root()
    )
    entries = (
        sorted(p for p in root.glob("*") if (p / "meta.json").is_file()) if root.is_dir() else []
    )
    if not config.embedder.compiled:
        return ("model cache", True, "compiled model off: the embedder runs the library in process")
    if not entries:
        return ("model cache", True, f"empty ({root}): the first start compiles the model (~15 s)")
    size = sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())
    return (
        "model cache",
        True,
        f"{len(entries)} compiled model(s), {size / 2**20:.0f} MB in {root}",
    )


def _daemon(config: Config) -> Check:
    from trusty_memory.client.daemon import ping
    from trusty_memory.home import live_daemon

    record = live_daemon(config.home)
    if record is None:
        return ("daemon", True, "not running (any client starts it)")
    if not ping(config, 2.0):
        return ("daemon", False, f"pid {record.pid} holds the home but does not answer")
    same = record.version == __version__
    detail = f"pid {record.pid}, version {record.version}, at {record.frontend}"
    return ("daemon", same, detail if same else f"{detail}: restart it to run {__version__}")


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


def follow(path: Path, out: Any, poll_s: float = 0.25) -> None:
    """Print what is appended to ``path`` until interrupted (``logs -f``)."""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        while True:
            line = f.readline()
            if line:
                out.write(line.decode(errors="replace"))
                out.flush()
            else:
                time.sleep(poll_s)


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
