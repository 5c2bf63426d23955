"""The SQLite file of a palace: connection settings, schema and migrations.

SQLite is the source of truth of a palace (drawers and their vectors, the knowledge graph,
the change log); the vector index is a cache of it.

Durability: WAL with ``synchronous=FULL`` by default (``PalaceSettings.synchronous``). A
write is acknowledged only after its transaction has committed, and with FULL the WAL is
synced to disk before ``COMMIT`` returns, so an acknowledged write survives a power cut or a
kernel crash, not only ``kill -9``. The writer commits each run of remembers as one
transaction, so the sync is paid once per run: about 0.7 ms more a remember at p50, and no
measurable loss at 16 concurrent clients (BENCHMARKS.md, "Durability"). ``NORMAL`` skips
that sync (a commit then survives ``kill -9``, the OS still holding its pages, and may be
lost to a power cut, the file staying consistent), for machines where that is acceptable.

Migrations are an ordered list: migration ``i`` takes the file from ``user_version = i`` to
``i + 1`` inside one transaction, so a crash mid-migration leaves the old version intact.
To change the schema, append a function to ``MIGRATIONS``; never edit a released one.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import sqlite_utils

from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.workers.store import dates, relatedness
from trusty_memory.workers.store.context import (  # the backfill: a remember's rule
    Written,
    words_in_order,
)
from trusty_memory.workers.store.index import prune_snapshots

BUSY_TIMEOUT_MS = 5000
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def _v1_initial(db: sqlite_utils.Database) -> None:
    """Drawers, their tags, the knowledge graph, the change log and full-text search.

    Written as plain DDL (rather than ``create_table``/``enable_fts``) for two reasons:
    ``AUTOINCREMENT`` keeps labels from ever being reused (the vector index relies on it,
    see ``workers/store/index.py``), and the FTS triggers fire on ``UPDATE OF content`` only, so
    bumping a drawer's ``hits`` does not rewrite its full-text entry.
    """
    statements = [
        """CREATE TABLE drawers (
            label INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            content TEXT NOT NULL,
            room TEXT NOT NULL,
            tags TEXT NOT NULL DEFAULT '[]',
            importance REAL NOT NULL DEFAULT 0.5,
            created_at TEXT NOT NULL,
            hits INTEGER NOT NULL DEFAULT 0,
            content_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            metadata TEXT
        )""",
        "CREATE INDEX drawers_content_hash ON drawers(content_hash)",
        "CREATE INDEX drawers_rank ON drawers(importance, created_at, label)",
        "CREATE INDEX drawers_room_rank ON drawers(room, importance, created_at, label)",
        """CREATE TABLE drawer_tags (
            tag TEXT NOT NULL,
            label INTEGER NOT NULL,
            PRIMARY KEY (tag, label)
        ) WITHOUT ROWID""",
        "CREATE INDEX drawer_tags_label ON drawer_tags(label)",
        """CREATE TABLE triples (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            subject TEXT NOT NULL,
            predicate TEXT NOT NULL,
            object TEXT NOT NULL,
            valid_from TEXT NOT NULL,
            valid_to TEXT,
            confidence REAL NOT NULL,
            provenance TEXT
        )""",
        "CREATE INDEX triples_active ON triples(subject, predicate, valid_to)",
        """CREATE TABLE changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            op TEXT NOT NULL CHECK (op IN ('add', 'delete')),
            label INTEGER NOT NULL,
            drawer_id TEXT NOT NULL,
            at TEXT NOT NULL
        )""",
        """CREATE VIRTUAL TABLE drawers_fts USING fts5(
            content, content='drawers', content_rowid='label', tokenize='porter unicode61'
        )""",
        """CREATE TRIGGER drawers_fts_insert AFTER INSERT ON drawers BEGIN
            INSERT INTO drawers_fts(rowid, content) VALUES (new.label, new.content);
        END""",
        """CREATE TRIGGER drawers_fts_delete AFTER DELETE ON drawers BEGIN
            INSERT INTO drawers_fts(drawers_fts, rowid, content)
                VALUES ('delete', old.label, old.content);
        END""",
        """CREATE TRIGGER drawers_fts_update AFTER UPDATE OF content ON drawers BEGIN
            INSERT INTO drawers_fts(drawers_fts, rowid, content)
                VALUES ('delete', old.label, old.content);
            INSERT INTO drawers_fts(rowid, content) VALUES (new.label, new.content);
        END""",
    ]
    for sql in statements:
        db.execute(sql)


def _v2_dreamer(db: sqlite_utils.Database) -> None:
    """What the dreamer needs (see ``workers/store/dedup.py`` and ``decay.py``).

    * ``drawers.base_importance``: the importance the caller gave; ``importance`` becomes the
      effective (decayed) value that list order, L1 and recall report. NULL: never decayed,
      ``importance`` is still the base. Decay is always recomputed from the base, so running
      it twice changes nothing.
    * ``drawers.decay_from``: when the decay clock started if not ``created_at`` (a restore
      or a restatement of the same text restarts it). NULL: ``created_at``.
    * ``triples.base_confidence``: the same for KG confidence decay.
    * ``archive``: pruned and merged drawers, whole (vector included), so nothing the dreamer
      removes is destroyed: ``trusty-memory archive restore`` brings a drawer back.
    * ``dream_log``: one row per applied dream pass, for ``palace_info``.
    """
    statements = [
        "ALTER TABLE drawers ADD COLUMN base_importance REAL",
        "ALTER TABLE drawers ADD COLUMN decay_from TEXT",
        "ALTER TABLE triples ADD COLUMN base_confidence REAL",
        """CREATE TABLE archive (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            content TEXT NOT NULL,
            room TEXT NOT NULL,
            tags TEXT NOT NULL,
            importance REAL NOT NULL,
            base_importance REAL,
            created_at TEXT NOT NULL,
            hits INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            metadata TEXT,
            archived_at TEXT NOT NULL,
            reason TEXT NOT NULL CHECK (reason IN ('pruned', 'merged')),
            merged_into TEXT
        )""",
        "CREATE INDEX archive_merged_into ON archive(merged_into)",
        """CREATE TABLE dream_log (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            finished_at TEXT NOT NULL,
            duration_s REAL NOT NULL,
            merged INTEGER NOT NULL,
            decayed INTEGER NOT NULL,
            archived INTEGER NOT NULL,
            kg_decayed INTEGER NOT NULL,
            truncated INTEGER NOT NULL DEFAULT 0
        )""",
    ]
    for sql in statements:
        db.execute(sql)


def _v3_versions(db: sqlite_utils.Database) -> None:
    """The archive also keeps the versions ``memory_update`` replaced (``store/edit.py``):
    reason ``updated``, ``merged_into`` naming the drawer. SQLite cannot change a CHECK in
    place, so the table is copied into one that allows the new reason."""
    statements = [
        """CREATE TABLE archive_v3 (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            content TEXT NOT NULL,
            room TEXT NOT NULL,
            tags TEXT NOT NULL,
            importance REAL NOT NULL,
            base_importance REAL,
            created_at TEXT NOT NULL,
            hits INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            metadata TEXT,
            archived_at TEXT NOT NULL,
            reason TEXT NOT NULL CHECK (reason IN ('pruned', 'merged', 'updated')),
            merged_into TEXT
        )""",
        "INSERT INTO archive_v3 SELECT * FROM archive",
        "DROP TABLE archive",
        "ALTER TABLE archive_v3 RENAME TO archive",
        "CREATE INDEX archive_merged_into ON archive(merged_into)",
    ]
    for sql in statements:
        db.execute(sql)


def _v4_own_vectors(db: sqlite_utils.Database) -> None:
    """``own_vector``: a drawer's own text's vector, kept beside ``vector`` when that is a
    context mix (``workers/store/context.py``); NULL when ``vector`` is already its own.

    The index and recall use ``vector``; the dreamer compares ``coalesce(own_vector,
    vector)``, so restatements written after different predecessors still look alike.
    The archive keeps it too, so a restored drawer is compared as before.
    """
    db.execute("ALTER TABLE drawers ADD COLUMN own_vector BLOB")
    db.execute("ALTER TABLE archive ADD COLUMN own_vector BLOB")


def _v5_created_at_index(db: sqlite_utils.Database) -> None:
    """Deep recall ranks the drawers written within the dates a question names
    (``workers/store/dates.py``): a range over ``created_at``, which must not scan the table."""
    db.execute("CREATE INDEX drawers_created_at ON drawers(created_at)")


def _v6_context_words(db: sqlite_utils.Database) -> None:
    """``drawers.context``: the words of a drawer's episode predecessor that its own text
    lacks (``context.words``); NULL outside an episode. Full-text search gets them as a
    second column, which deep recall's BM25 weighs low (``retrieval.CONTEXT_TEXT_WEIGHT``)
    and every keyword match on a drawer's own words leaves out (``values.own_words``).
    The archive keeps them, so a restored drawer is found as before.

    Drawers already stored get their predecessor by the writer's rule: the drawer before
    it by label, in the same room, written at most 1800 s apart (the episode window when
    this was written). FTS5 cannot add a column, so the table and its triggers are made
    anew and rebuilt from ``drawers``.
    """
    db.execute("ALTER TABLE drawers ADD COLUMN context TEXT")
    db.execute("ALTER TABLE archive ADD COLUMN context TEXT")
    _backfill_context(db, window_s=1800.0)
    statements = [
        "DROP TRIGGER drawers_fts_insert",
        "DROP TRIGGER drawers_fts_delete",
        "DROP TRIGGER drawers_fts_update",
        "DROP TABLE drawers_fts",
        """CREATE VIRTUAL TABLE drawers_fts USING fts5(
            content, context,
            content='drawers', content_rowid='label', tokenize='porter unicode61'
        )""",
        """CREATE TRIGGER drawers_fts_insert AFTER INSERT ON drawers BEGIN
            INSERT INTO drawers_fts(rowid, content, context)
                VALUES (new.label, new.content, new.context);
        END""",
        """CREATE TRIGGER drawers_fts_delete AFTER DELETE ON drawers BEGIN
            INSERT INTO drawers_fts(drawers_fts, rowid, content, context)
                VALUES ('delete', old.label, old.content, old.context);
        END""",
        """CREATE TRIGGER drawers_fts_update AFTER UPDATE OF content, context ON drawers BEGIN
            INSERT INTO drawers_fts(drawers_fts, rowid, content, context)
                VALUES ('delete', old.label, old.content, old.context);
            INSERT INTO drawers_fts(rowid, content, context)
                VALUES (new.label, new.content, new.context);
        END""",
        "INSERT INTO drawers_fts(drawers_fts) VALUES ('rebuild')",
    ]
    for sql in statements:
        db.execute(sql)


def _backfill_context(db: sqlite_utils.Database, window_s: float, chunk: int = 10_000) -> None:
    """Set ``drawers.context`` for the drawers already stored, a chunk of labels at a
    time (a large palace is never held in memory)."""
    before: Written | None = None
    after = 0
    while True:
        rows = db.execute(
            "SELECT label, room, julianday(created_at) * 86400.0, content FROM drawers"
            " WHERE label > ? ORDER BY label LIMIT ?",
            (after, chunk),
        ).fetchall()
        if not rows:
            return
        # A time SQLite cannot read is NaN: never within the window of anything.
        written = [Written(room, math.nan if t is None else t, text) for _, room, t, text in rows]
        found = words_in_order(before, written, window_s)
        db.conn.executemany(
            "UPDATE drawers SET context = ? WHERE label = ?",
            [(kept, row[0]) for row, kept in zip(rows, found, strict=True) if kept is not None],
        )
        before, after = written[-1], rows[-1][0]


# The columns holding times a caller gave (the rest are the program's own clock).
CALLER_TIMES = (
    ("drawers", "created_at"),
    ("drawers", "decay_from"),
    ("archive", "created_at"),
    ("triples", "valid_from"),
    ("triples", "valid_to"),
)


def _v7_four_digit_years(db: sqlite_utils.Database) -> None:
    """Times before year 1000 were stored as ``strftime`` writes them (``5-01-02T...``),
    which does not order as text among the others; they get their leading zeros
    (``0005-01-02T...``), as every write now stores them (``values.stored_time``)."""
    short = " OR ".join(f"{{col}} GLOB '{'[0-9]' * n}-*'" for n in (1, 2, 3))
    for table, col in CALLER_TIMES:
        rows = db.execute(
            f"SELECT rowid, {col} FROM {table} WHERE {short.format(col=col)}"
        ).fetchall()
        for rowid, value in rows:
            year, rest = value.split("-", 1)
            db.execute(
                f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (f"{int(year):04d}-{rest}", rowid)
            )


def _v8_mentioned_days(db: sqlite_utils.Database) -> None:
    """``drawer_days``: the days a drawer's text speaks of, read against its
    ``created_at`` ("yesterday", "last Friday", "on October 3": ``dates.mentioned``), one
    row per span, so deep recall's date list finds a note written the day after what it
    tells. Kept by triggers, as full-text search is, so no write path can forget it: they
    call ``trusty_days``, which ``connect`` registers on every connection that writes.
    The drawers already stored are read once, here."""
    insert = """INSERT INTO drawer_days (label, start, end)
                SELECT new.label, json_extract(value, '$[0]'), json_extract(value, '$[1]')
                FROM json_each(trusty_days(new.content, new.created_at));"""
    statements = [
        """CREATE TABLE drawer_days (
            label INTEGER NOT NULL,
            start TEXT NOT NULL,
            end TEXT NOT NULL
        )""",
        "CREATE INDEX drawer_days_start ON drawer_days(start)",
        "CREATE INDEX drawer_days_label ON drawer_days(label)",
        f"""CREATE TRIGGER drawer_days_insert AFTER INSERT ON drawers BEGIN
            {insert}
        END""",
        """CREATE TRIGGER drawer_days_delete AFTER DELETE ON drawers BEGIN
            DELETE FROM drawer_days WHERE label = old.label;
        END""",
        f"""CREATE TRIGGER drawer_days_update AFTER UPDATE OF content, created_at ON drawers
        BEGIN
            DELETE FROM drawer_days WHERE label = old.label;
            {insert}
        END""",
        """INSERT INTO drawer_days (label, start, end)
            SELECT d.label, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]')
            FROM drawers d, json_each(trusty_days(d.content, d.created_at)) j""",
    ]
    for sql in statements:
        db.execute(sql)


def mentioned_days(content: str, created_at: str) -> str:
    """``dates.mentioned`` as SQLite's triggers call it: a JSON list of ``[start, end]``.
    Never raises (a failure inside a trigger would fail the write): a time or a text it
    cannot read speaks of no day."""
    try:
        written = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        return json.dumps(dates.mentioned(content, written))
    except Exception:  # see the docstring
        return "[]"


# How many redaction markers (``[secret:KIND #FINGERPRINT]``: ``common/credentials``) a text
# holds, in SQL: the triggers below need no function of ours, so any connection may write.
_MARKERS_IN = "(length({t}) - length(replace({t}, '[secret:', ''))) / 8"


def _v9_redacted(db: sqlite_utils.Database) -> None:
    """``drawers.redacted``: how many credentials were replaced by markers in the drawer's
    text (0: none). Kept by triggers from the text itself, as full-text search is, so every
    write path (remember, update, import, a merge, a restore, ``scrub``) records it
    without knowing of it, and stats count redacted drawers off a partial index."""
    count = _MARKERS_IN.format(t="new.content")
    statements = [
        "ALTER TABLE drawers ADD COLUMN redacted INTEGER NOT NULL DEFAULT 0",
        f"UPDATE drawers SET redacted = {_MARKERS_IN.format(t='content')}"
        " WHERE instr(content, '[secret:') > 0",
        "CREATE INDEX drawers_redacted ON drawers(label) WHERE redacted > 0",
        f"""CREATE TRIGGER drawers_redacted_insert AFTER INSERT ON drawers
            WHEN instr(new.content, '[secret:') > 0 BEGIN
            UPDATE drawers SET redacted = {count} WHERE label = new.label;
        END""",
        f"""CREATE TRIGGER drawers_redacted_update AFTER UPDATE OF content ON drawers BEGIN
            UPDATE drawers SET redacted = {count} WHERE label = new.label;
        END""",
    ]
    for sql in statements:
        db.execute(sql)


def _v10_context_by_content(db: sqlite_utils.Database) -> None:
    """A drawer borrows its episode predecessor's context (the vector mix beside
    ``own_vector``, the words in ``context``) only when its text continues the
    predecessor's (``relatedness.continues``: a reply, an answer, an opening that points
    back), no longer for being written within the episode window alone
    (``context.context_of``). Drawers already stored that took context without continuing
    their predecessor get their own vector and words back, as the writer now stores them,
    and the index snapshots are dropped so that the next open rebuilds the index from
    SQLite (~0.4 ms per drawer, once). Nothing else changes: the decision is what a drawer
    holds (a mix and words, or its own), so ranking reads nothing new.
    """
    if _own_context_back(db, window_s=1800.0):
        path = db.execute("PRAGMA database_list").fetchone()[2]
        if path:
            prune_snapshots(Path(path).parent, keep_seq=-1)


def _own_context_back(db: sqlite_utils.Database, window_s: float, chunk: int = 10_000) -> bool:
    """Give the drawers that hold context without continuing their episode predecessor
    (by label, same room, within ``window_s``) their own vector and no context words, a
    chunk of labels at a time. Returns whether any stored vector changed."""
    before: tuple[str, float, str] | None = None
    after = 0
    changed = False
    while True:
        rows = db.execute(
            "SELECT label, room, julianday(created_at) * 86400.0, content,"
            " own_vector IS NOT NULL OR context IS NOT NULL FROM drawers"
            " WHERE label > ? ORDER BY label LIMIT ?",
            (after, chunk),
        ).fetchall()
        if not rows:
            return changed
        own_back = []
        for label, room, t, text, borrowed in rows:
            t = math.nan if t is None else t  # a time SQLite cannot read: in no episode
            if borrowed and not (
                before is not None
                and before[0] == room
                and abs(t - before[1]) <= window_s
                and relatedness.continues(before[2], text)
            ):
                own_back.append(label)
            before = (room, t, text)
        if own_back:
            labels = json.dumps(own_back)
            changed |= bool(
                db.conn.execute(
                    "UPDATE drawers SET vector = own_vector, own_vector = NULL"
                    " WHERE own_vector IS NOT NULL AND label IN (SELECT value FROM json_each(?))",
                    (labels,),
                ).rowcount
            )
            db.conn.execute(
                "UPDATE drawers SET context = NULL"
                " WHERE context IS NOT NULL AND label IN (SELECT value FROM json_each(?))",
                (labels,),
            )
        after = rows[-1][0]


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _v1_initial,
    _v2_dreamer,
    _v3_versions,
    _v4_own_vectors,
    _v5_created_at_index,
    _v6_context_words,
    _v7_four_digit_years,
    _v8_mentioned_days,
    _v9_redacted,
    _v10_context_by_content,
]
SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: Path, synchronous: str = "FULL") -> sqlite_utils.Database:
    """Open (creating if needed) and migrate the palace database at ``path``."""
    mode = synchronous.upper()
    if mode not in SYNCHRONOUS_MODES:
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"synchronous: unknown mode {synchronous!r}")
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False)
        # No sqlite-utils plugins: whatever happens to be installed must not hook a palace's
        # connection, and looking for them costs 18 ms and 1.5 MB in every worker.
        db = sqlite_utils.Database(conn, execute_plugins=False)
        conn.create_function("trusty_days", 2, mentioned_days, deterministic=True)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.enable_wal()
        db.execute(f"PRAGMA synchronous = {mode}")
        db.execute("PRAGMA temp_store = MEMORY")
        migrate(db)
    except sqlite3.Error as exc:
        raise storage_error(exc, path, "cannot open it") from exc
    return db


def connect_readonly(path: Path) -> sqlite_utils.Database:
    """Open a palace database for reading only (a reader process beside the writer).

    The writer created and migrated it; a reader refuses a schema other than this
    program's rather than guess at its tables.
    """
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        db = sqlite_utils.Database(conn, execute_plugins=False)
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA temp_store = MEMORY")
        version = user_version(db)
    except sqlite3.Error as exc:
        raise storage_error(exc, path, "open for reading") from exc
    if version != SCHEMA_VERSION:
        db.close()
        raise TrustyError(
            ErrorCode.STORAGE_ERROR,
            f"cannot read {path}: schema version {version}, this program reads {SCHEMA_VERSION}",
        )
    return db


SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26


def storage_error(exc: sqlite3.Error, path: Path, doing: str) -> TrustyError:
    """A SQLite failure as the ``STORAGE_ERROR`` a person can act on.

    A full disk and a damaged file are the two a user can fix, so their messages name the
    file and say how; anything else keeps SQLite's own words after what was being done.
    """
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
    if code == SQLITE_FULL:
        message = (
            f"disk full: {doing}: cannot write {path} ({exc}); the change was not stored. "
            "Free some space: writes work again once there is room"
        )
    elif code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        message = (
            f"palace file is corrupt: {path} ({exc}). Restore it from a backup or re-import "
            "an earlier export ('trusty-memory import'), or move it aside to start this "
            "palace empty; other palaces are not affected"
        )
    else:
        message = f"{doing}: sqlite: {exc}"
    return TrustyError(ErrorCode.STORAGE_ERROR, message)


def user_version(db: sqlite_utils.Database) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite_utils.Database) -> int:
    """Apply the migrations this file has not seen; returns the resulting version."""
    version = user_version(db)
    if version > SCHEMA_VERSION:
        raise TrustyError(
            ErrorCode.STORAGE_ERROR,
            f"palace schema version {version} is newer than this program's {SCHEMA_VERSION}",
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with db.atomic():
            MIGRATIONS[target - 1](db)
            db.execute(f"PRAGMA user_version = {target}")
    return SCHEMA_VERSION
