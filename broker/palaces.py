"""The broker's view of palaces on disk: list, create, exists, readers wanted, and
moving a palace's directory (delete to the archive, rename, restore).

These answer without a worker: listing and creating palaces must not cost a process
spawn (let alone a model load). The palace worker owns everything inside a palace's
directory except ``palace.json``, which is written here on create, ``scale``, rename,
delete and restore, atomically (its ``readers`` key is the palace's own reader count, kept
across restarts).

Deleting a palace moves its directory, whole, to ``<home>/archive/palaces/<entry>``, where
the entry is ``<name>-<UTC time>`` (``-2``, ``-3`` ... after it if that is taken): nothing
in it is changed but ``palace.json``, which records the name and ``deleted_at``, so
``palace_restore`` moves it back as it was. Renaming moves the directory within
``palaces/``. Both are one ``os.rename`` each (one file system, atomic) and only ever run
once the palace's workers have exited (``Broker.close_palace``): a worker holds the
directory's files open and cannot move them itself. Nothing in a palace's files names its
directory (the index snapshot, the change log and the drawer ids are all relative to
it), so a moved palace opens as it was.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

from trusty_memory.common import palace_dir
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.names import validate_palace_name
from trusty_memory.common.palace_dir import DB_FILE, SUMMARY_FILE, utc_now, write_json_atomic

METADATA = palace_dir.META_FILE

MAX_READERS = 16
# An archive entry: a palace name, the time it was deleted, maybe a counter.
_ENTRY_RE = re.compile(r"(?P<name>[A-Za-z0-9_-][A-Za-z0-9._-]*)-(?P<stamp>\d{8}T\d{6}Z)(-\d+)?")


def archive_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a crash cannot bring the old name back)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def holds_nothing(directory: Path) -> bool:
    """True when a stopped palace has no drawers, triples or archived drawers (or no
    database at all yet). Anything unreadable counts as holding something."""
    db = directory / DB_FILE
    if not db.exists():
        return True
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            for table in ("drawers", "triples", "archive"):
                if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                    return False
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return True


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
        if self.exists(name):
            raise p.TrustyError(p.ErrorCode.PALACE_EXISTS, f"palace already exists: {name}")
        created = palace_dir.create(self.config, name, description)
        self._known.add(name)
        return created

    def forget(self, name: str) -> None:
        """Drop what is cached about ``name`` (its directory moved)."""
        self._known.discard(name)
        self._readers.pop(name, None)

    @property
    def archive_dir(self) -> Path:
        return self.config.home / "archive" / "palaces"

    def delete(self, name: str, discard_empty: bool = False) -> dict:
        """Move a stopped palace to the archive; with ``discard_empty`` remove it instead
        when it holds nothing. Its workers must have exited."""
        validate_palace_name(name)
        if not self.exists(name):
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        source = self.config.palace_dir(name)
        self.forget(name)
        if discard_empty and holds_nothing(source):
            shutil.rmtree(source)
            _fsync_dir(source.parent)
            return {"palace": name, "status": "removed"}
        self._private_dir(self.archive_dir)
        stamp = archive_stamp()
        entry, n = f"{name}-{stamp}", 1
        while os.path.lexists(self.archive_dir / entry):
            n += 1
            entry = f"{name}-{stamp}-{n}"
        target = self.archive_dir / entry
        os.rename(source, target)
        _fsync_dir(source.parent)
        _fsync_dir(target.parent)
        _update_meta(target, name=name, deleted_at=utc_now())
        return {"palace": name, "status": "archived", "entry": entry, "path": str(target)}

    def rename(self, name: str, new_name: str) -> dict:
        """Move a stopped palace's directory to ``new_name``. Its workers must have exited."""
        validate_palace_name(name)
        self.check_free(new_name)
        if not self.exists(name):
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"palace not found: {name}")
        source, target = self.config.palace_dir(name), self.config.palace_dir(new_name)
        self.forget(name)
        self.forget(new_name)
        os.rename(source, target)
        _fsync_dir(target.parent)
        _update_meta(target, name=new_name, renamed_from=name, renamed_at=utc_now())
        self._known.add(new_name)
        return {"palace": new_name, "renamed_from": name, "status": "renamed"}

    def check_free(self, name: str) -> None:
        """Refuse a name that is taken, or whose directory is in the way."""
        validate_palace_name(name)
        if self.exists(name) or os.path.lexists(self.config.palace_dir(name)):
            raise p.TrustyError(p.ErrorCode.PALACE_EXISTS, f"palace already exists: {name}")

    def archived(self) -> list[dict]:
        """Every archived palace, oldest deletion first."""
        found = []
        root = self.archive_dir
        for directory in root.iterdir() if root.is_dir() else ():
            match = _ENTRY_RE.fullmatch(directory.name)
            if match is None or not directory.is_dir():
                continue
            meta = _read_meta(directory)
            found.append({
                "name": meta.get("name") or match.group("name"),
                "entry": directory.name,
                "deleted_at": meta.get("deleted_at"),
                "description": meta.get("description"),
                "path": str(directory),
            })  # fmt: skip
        return sorted(found, key=lambda a: (a["deleted_at"] or "", a["entry"]))

    def restore(self, name: str, entry: str | None = None, new_name: str | None = None) -> dict:
        """Move an archived palace back under ``new_name`` (default: its own name)."""
        validate_palace_name(name)
        target_name = validate_palace_name(new_name) if new_name is not None else name
        candidates = [a for a in self.archived() if a["name"] == name]
        if entry is not None:
            candidates = [a for a in candidates if a["entry"] == entry]
        if not candidates:
            which = f"entry {entry!r} of " if entry is not None else ""
            raise p.TrustyError(p.ErrorCode.PALACE_NOT_FOUND, f"no archived palace: {which}{name}")
        chosen = candidates[-1]  # the newest deletion
        if self.exists(target_name) or os.path.lexists(self.config.palace_dir(target_name)):
            raise p.TrustyError(
                p.ErrorCode.PALACE_EXISTS,
                f"palace already exists: {target_name}; restore it under another name",
            )
        source, target = Path(chosen["path"]), self.config.palace_dir(target_name)
        self._private_dir(target.parent)
        os.rename(source, target)
        _fsync_dir(source.parent)
        _fsync_dir(target.parent)
        _update_meta(
            target, deleted_at=None, name=target_name, restored_at=utc_now(),
            restored_from=chosen["entry"],
        )  # fmt: skip
        self.forget(target_name)
        self._known.add(target_name)
        return {"palace": target_name, "entry": chosen["entry"], "status": "restored"}

    @staticmethod
    def _private_dir(path: Path) -> None:
        """Create ``path`` (and its parents) as directories only the user can enter."""
        path.mkdir(mode=stat.S_IRWXU, parents=True, exist_ok=True)
        for part in (path, path.parent):
            os.chmod(part, stat.S_IRWXU)

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

    def summary(self, name: str) -> dict:
        """A palace as far as its files tell without waking it: where it lives, its
        description, and what its writer last wrote of it (``summary.json``: counts, last
        write, last dream pass; ``summary`` None if it never did)."""
        directory = self.config.palace_dir(name)
        try:
            data = json.loads((directory / SUMMARY_FILE).read_text())
        except (OSError, ValueError):
            data = None
        return {
            "data_dir": str(directory),
            "description": self._meta(name).get("description"),
            "summary": data if isinstance(data, dict) else None,
        }

    def _meta(self, name: str) -> dict:
        return _read_meta(self.config.palace_dir(name))


def _update_meta(directory: Path, **changes) -> None:
    """Set keys of a moved palace's ``palace.json`` (None removes one). One that cannot be
    read is left as it is: the move itself is what counts, and its name is in the path."""
    path = directory / METADATA
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(meta, dict):
        return
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    write_json_atomic(path, meta)


def _read_meta(directory: Path) -> dict:
    return palace_dir.read_meta(directory) or {}
