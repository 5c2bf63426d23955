"""The broker's view of palaces on disk: list, create, exists, and readers wanted.

These answer without a worker: listing and creating palaces must not cost a process
spawn (let alone a model load). The palace worker owns everything inside a palace's
directory except ``palace.json``, which is written here on create and on ``scale``,
atomically (its ``readers`` key is the palace's own reader count, kept across restarts).
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


MAX_READERS = 16


class PalaceRegistry:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._known: set[str] = set()
        self._readers: dict[str, int] = {}  # palace -> its readers setting, once read

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

    def readers(self, name: str) -> int:
        """How many readers the palace should have: its own setting, else the config's."""
        if name not in self._readers:
            meta = self._meta(name)
            wanted = meta.get("readers")
            if isinstance(wanted, bool) or not isinstance(wanted, int):
                wanted = self.config.palace.readers
            self._readers[name] = max(0, min(MAX_READERS, wanted))
        return self._readers[name]

    def set_readers(self, name: str, readers: object) -> int:
        """Keep ``readers`` as the palace's own setting (in its palace.json)."""
        if isinstance(readers, bool) or not isinstance(readers, int):
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS, f"readers: must be an integer, got {readers!r}"
            )
        if not 0 <= readers <= MAX_READERS:
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS, f"readers: must be 0..{MAX_READERS}, got {readers}"
            )
        if not self.exists(name):
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        meta = self._meta(name)
        meta["readers"] = readers
        write_json_atomic(self.config.palace_dir(name) / METADATA, meta)
        self._readers[name] = readers
        return readers

    def _meta(self, name: str) -> dict:
        try:
            meta = json.loads((self.config.palace_dir(name) / METADATA).read_text())
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}
