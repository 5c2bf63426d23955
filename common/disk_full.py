"""The one disk-full error every actor answers with.

README promises ``disk full: ... Free some space: writes work again once there is room``
for a write that found no room. Store methods map SQLite's SQLITE_FULL themselves
(``workers/store/schema.storage_error``); this catches the rest wherever an actor turns an
exception into a reply: an ``OSError`` ENOSPC/EDQUOT from an index snapshot, palace.json, the
change log or a broker record, and a SQLite "database or disk is full" raised outside a store
method (an import's batch). Before it, those reached the client as an internal error, or (in
the broker) as no answer at all.
"""

from __future__ import annotations

import errno
import sqlite3

from trusty_memory.common import protocol as p

SQLITE_FULL = 13


def disk_full_error(exc: BaseException, doing: str) -> p.TrustyError | None:
    """The documented ``STORAGE_ERROR`` if ``exc`` is a full disk, else None."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        path = exc.filename or "the home folder"
    elif isinstance(exc, sqlite3.Error) and (
        (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == SQLITE_FULL
        or "database or disk is full" in str(exc)
    ):
        path = "palace.sqlite3"
    else:
        return None
    return p.TrustyError(
        p.ErrorCode.STORAGE_ERROR,
        f"disk full: {doing}: cannot write {path} ({exc}); the change was not stored. "
        "Free some space: writes work again once there is room",
    )
