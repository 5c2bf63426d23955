"""A palace's directory, ``<home>/palaces/<name>/``, described once for every actor.

The broker creates it and writes ``palace.json`` (create, ``scale``, rename, delete,
restore: ``broker/palaces.py``); the palace's writer owns everything else in it (the
SQLite file, the index snapshot, ``identity.txt``, ``summary.json``: ``workers/store``); a
remote worker creates its palace the way the broker would. Each of them names the files
and writes them through here, so the layout cannot drift between two descriptions.

Every write is whole or absent: a temporary file in the same folder, flushed to disk and
renamed into place, so a crash never leaves half a ``palace.json`` for the next start.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.methods import Method
from trusty_memory.common.names import validate_palace_name

if TYPE_CHECKING:
    from trusty_memory.common.credentials.fields import FieldGuard

DB_FILE = "palace.sqlite3"  # drawers, vectors, triples, the change log: the truth
META_FILE = "palace.json"  # name, description, created_at, readers (the broker's)
SUMMARY_FILE = "summary.json"  # counts and last write, read without waking the palace
IDENTITY_FILE = "identity.txt"  # the L0 identity, returned with every recall


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole: a crash leaves the old file or the new one,
    and once this returns the new one is on disk, its name included (the folder is synced
    too: a power cut must not undo an acknowledged ``palace_create``)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """Make the names in ``directory`` (a rename, a new file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2).encode())


def read_meta(palace_dir: Path) -> dict | None:
    """``palace.json`` as a dict: None when there is none, {} when it cannot be read (the
    caller keeps it as it is rather than write over what it cannot understand)."""
    path = palace_dir / META_FILE
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def exists(config: Config, name: str) -> bool:
    """Whether ``name`` is a palace of this home (its ``palace.json`` is there)."""
    return (config.palace_dir(name) / META_FILE).is_file()


def fields_guard(config: Config, method: str) -> FieldGuard:
    """``[privacy] secrets`` over the strings a palace's own file keeps (its name and
    description), as a palace worker applies it to drawers (``common/credentials``).
    Imported here, on first use: the broker pays for the credential rules (~28 ms of
    imports) when a palace is made, not at every start."""
    from trusty_memory.common.credentials.fields import FieldGuard  # lazy: not at broker start
    from trusty_memory.common.credentials.redactor import (  # lazy: not at broker start
        Redactor,
        home_key,
    )

    return FieldGuard(config.privacy.secrets, lambda: Redactor(home_key(config.home)), method)


def check_new_name(config: Config, method: str, name: str) -> str:
    """A name a palace is about to take (create, rename, restore): safe for the disk, and
    no credential (``ghp_...`` is a valid name, and a name is shown and kept everywhere)."""
    validate_palace_name(name)
    fields_guard(config, method).identifier("name", name, p.ErrorCode.INVALID_PALACE_NAME)
    return name


def create(config: Config, name: str, description: str | None) -> dict:
    """Make palace ``name``'s directory and ``palace.json``; PALACE_EXISTS if it is there.
    A description that holds a credential is kept redacted (or refused) by the mode."""
    check_new_name(config, Method.PALACE_CREATE, name)
    description = fields_guard(config, Method.PALACE_CREATE).maybe("description", description)
    if exists(config, name):
        raise p.TrustyError(p.ErrorCode.PALACE_EXISTS, f"palace already exists: {name}")
    directory = config.palace_dir(name)
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"name": name, "description": description, "created_at": utc_now()}
    write_json_atomic(directory / META_FILE, meta)
    return {"palace_id": name, "status": "created"}
