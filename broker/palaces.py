"""The broker's view of palaces on disk: list, create, exists.

These answer without a worker: listing and creating palaces must not cost a process
spawn (let alone a model load). The palace worker owns everything inside a palace's
directory except ``palace.json``, which is written here on create, atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from trusty_memory import protocol as p
from trusty_memory.config import Config
from trusty_memory.names import validate_palace_name

METADATA = "palace.json"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json_atomic(path: Path, obj: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class PalaceRegistry:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._known: set[str] = set()

    def exists(self, name: str) -> bool:
        if name in self._known:
            return True
        if (self.config.palace_dir(name) / METADATA).is_file():
            self._known.add(name)
            return True
        return False

    def names(self) -> list[str]:
        root = self.config.palaces_dir
        if not root.is_dir():
            return []
        return sorted(d.name for d in root.iterdir() if (d / METADATA).is_file())

    def create(self, name: str, description: str | None) -> dict:
        validate_palace_name(name)
        if self.exists(name):
            raise p.TrustyError(p.ErrorCode.PALACE_EXISTS, f"palace already exists: {name}")
        directory = self.config.palace_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"name": name, "description": description, "created_at": utc_now()}
        write_json_atomic(directory / METADATA, meta)
        self._known.add(name)
        return {"palace_id": name, "status": "created"}
