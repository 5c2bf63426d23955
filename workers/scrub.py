"""``palace_scrub``: the credentials a palace already holds, found, and with ``apply`` gone.

Older versions stored what agents wrote in clear, and ``[privacy] secrets = "keep"``
still does. A scrub reads every string a palace keeps: live drawers (text, room,
tags, metadata keys and values, context words), the archive (pruned, merged and updated
versions), the knowledge graph, and the description in ``palace.json`` and
``identity.txt``. Without ``apply`` it only counts, by kind. With it, in one transaction:

* a live drawer that held a secret is written again under its id with the redacted text
  and a vector of that text (a new row, so the vector index and every reader follow the
  change log, as for ``memory_update``); one whose context words alone held one keeps
  its own vector rather than the mix made with the clear predecessor;
* archive entries and triples are redacted in place (the archive keeps a vector of the
  redacted text too).

The description is then written again (``palace.json`` atomically, keeping the broker's
other keys).

Then the writer reopens the palace and rebuilds its vector index from SQLite, whose
snapshot replaces the old one (which held the old vectors), and ``compact`` leaves no
copy in the SQLite file: the full-text index is rebuilt and optimised (FTS5 keeps a
deleted term in its segments until they merge), ``VACUUM`` writes the file anew with
``secure_delete`` on, and a ``TRUNCATE`` checkpoint empties the WAL. The change log keeps
ids and labels only, never text.

Context words: a drawer's ``context`` keeps its predecessor's words, so a password is one
plain word there once the URL around it is gone. They lose the words of the secrets their
predecessor (the drawer before by label) held, and the distinctive words (8+ characters
with a digit or a capital) of every secret the palace held.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trusty_memory.common.credentials.fields import map_tree
from trusty_memory.common.credentials.redactor import Redactor
from trusty_memory.common.logs import get_logger
from trusty_memory.common.messages import ScrubParams, ScrubResult
from trusty_memory.common.palace_dir import (
    IDENTITY_FILE,
    META_FILE,
    read_meta,
    write_atomic,
    write_json_atomic,
)
from trusty_memory.workers.store import rows

log = get_logger(__name__)

Embed = Callable[[list[str]], np.ndarray]
CHUNK = 1000  # rows read per query
EMBED_CHUNK = 256
CHECKPOINT_TRIES = 50  # a reader in a read transaction holds the WAL for milliseconds

_WORD = re.compile(r"\w+")


@dataclass
class _Change:
    """One row to rewrite; ``None`` fields stay as they are."""

    key: Any  # label (drawers), id (archive), id (triples)
    content: str | None = None
    tags: list[str] | None = None
    metadata: str | None = None
    metadata_changed: bool = False
    context: str | None = None
    context_changed: bool = False
    own_vector: bool = False  # the row keeps a separate own vector (its ``vector`` is a mix)
    room: str | None = None


@dataclass
class _Scan:
    found: Counter = field(default_factory=Counter)
    secrets: list[str] = field(default_factory=list)
    drawers: dict[int, _Change] = field(default_factory=dict)
    archive: dict[str, _Change] = field(default_factory=dict)
    triples: dict[int, dict[str, str]] = field(default_factory=dict)
    palace_file: dict[str, str] = field(default_factory=dict)  # palace.json fields -> redacted


def run(
    store: Any, redactor: Redactor, params: ScrubParams, embed: Embed
) -> tuple[ScrubResult, bool]:
    """Count (and with ``params.apply``, redact) what ``store`` holds; see the module doc.
    Returns the result and whether any row changed (the writer then reopens the palace)."""
    conn = store.db.conn
    scan = _Scan()
    predecessor_words = _scan_rows(conn, redactor, scan, "drawers")
    _scan_rows(conn, redactor, scan, "archive")
    _scan_triples(conn, redactor, scan)
    _scan_contexts(conn, redactor, scan, predecessor_words)
    _scan_palace_files(store.palace_dir, redactor, scan)
    result = ScrubResult(
        palace=store.name,
        applied=bool(params.apply),
        found=dict(sorted(scan.found.items())),
        drawers=len(scan.drawers),
        archived=len(scan.archive),
        triples=len(scan.triples),
        palace_files=sorted(scan.palace_file),
    )
    changed = bool(scan.drawers or scan.archive or scan.triples)
    if params.apply and (changed or scan.palace_file):
        result.reembedded = _apply(store, scan, embed) if changed else 0
        _apply_palace_files(store.palace_dir, scan)
        log.info("palace scrubbed", palace=store.name, found=result.found)
    return result, changed or bool(scan.palace_file)


# -- finding ------------------------------------------------------------------------------


def _redact(redactor: Redactor, scan: _Scan, text: str, name: str | None = None) -> str | None:
    """The redacted text, or None when it held nothing."""
    done = redactor.redact(text, name)
    if not done.count:
        return None
    scan.found.update(f.kind for f in done.found)
    scan.secrets += done.secrets
    return done.text


def _replace(redactor: Redactor, scan: _Scan):
    """``_redact`` as ``map_tree`` calls it (a metadata value read as its key's value)."""

    def replace(where: str, text: str, name: str | None) -> str | None:
        return _redact(redactor, scan, text, name)

    return replace


def _scan_rows(conn, redactor: Redactor, scan: _Scan, table: str) -> dict[int, set[str]]:
    """Text, room, tags and metadata of ``drawers`` or ``archive``. For drawers, returns
    the secret words of each drawer's predecessor by label (for its context words)."""
    key = "label" if table == "drawers" else "seq"
    ident = "label" if table == "drawers" else "id"
    after: Any = 0
    before_words: set[str] = set()
    predecessor_words: dict[int, set[str]] = {}
    while True:
        rows = conn.execute(
            f"SELECT {key}, {ident}, content, room, tags, metadata, own_vector IS NOT NULL"
            f" FROM {table} WHERE {key} > ? ORDER BY {key} LIMIT ?",
            (after, CHUNK),
        ).fetchall()
        if not rows:
            return predecessor_words
        for _, rid, content, room, tags, metadata, mixed in rows:
            if before_words:
                predecessor_words[rid] = before_words
            seen = len(scan.secrets)
            change = _Change(rid, own_vector=bool(mixed))
            change.content = _redact(redactor, scan, content)
            change.room = _redact(redactor, scan, room)
            old_tags = json.loads(tags)
            new_tags = [_redact(redactor, scan, t) for t in old_tags]
            if any(t is not None for t in new_tags):
                change.tags = [n or t for n, t in zip(new_tags, old_tags, strict=True)]
            if metadata is not None:
                before = len(scan.secrets)
                tree = map_tree(_replace(redactor, scan), "metadata", json.loads(metadata))
                if len(scan.secrets) > before:
                    change.metadata, change.metadata_changed = json.dumps(tree), True
            if len(scan.secrets) > seen:
                (scan.drawers if table == "drawers" else scan.archive)[rid] = change
            before_words = _words(scan.secrets[seen:])
        after = rows[-1][0]


def _scan_triples(conn, redactor: Redactor, scan: _Scan) -> None:
    after = 0
    names = ("subject", "predicate", "object", "provenance")
    while True:
        rows = conn.execute(
            f"SELECT id, {', '.join(names)} FROM triples WHERE id > ? ORDER BY id LIMIT ?",
            (after, CHUNK),
        ).fetchall()
        if not rows:
            return
        for row in rows:
            fields = {}
            predicate = row[2]
            for name, value in zip(names, row[1:], strict=True):
                if isinstance(value, str):
                    as_value_of = predicate if name == "object" else None
                    new = _redact(redactor, scan, value, as_value_of)
                    if new is not None:
                        fields[name] = new
            if fields:
                scan.triples[row[0]] = fields
        after = rows[-1][0]


def _words(secrets: list[str]) -> set[str]:
    return {w.lower() for s in secrets for w in _WORD.findall(s) if len(w) >= 3}


def _distinctive(secrets: list[str]) -> set[str]:
    """Words of secrets no note would hold by chance (8+ characters, a digit or capital)."""
    out = set()
    for s in secrets:
        for w in _WORD.findall(s):
            if len(w) >= 8 and (any(c.isdigit() for c in w) or w.lower() != w):
                out.add(w.lower())
    return out


def _scan_contexts(conn, redactor: Redactor, scan: _Scan, predecessor: dict) -> None:
    """Context words of drawers and archive entries (see the module doc)."""
    everywhere = _distinctive(scan.secrets)
    for table, key, ident, changes in (
        ("drawers", "label", "label", scan.drawers),
        ("archive", "seq", "id", scan.archive),
    ):
        after: Any = 0
        while True:
            rows = conn.execute(
                f"SELECT {key}, {ident}, context, own_vector IS NOT NULL FROM {table}"
                f" WHERE {key} > ? AND context IS NOT NULL ORDER BY {key} LIMIT ?",
                (after, CHUNK),
            ).fetchall()
            if not rows:
                break
            for _, rid, text, mixed in rows:
                words = everywhere | predecessor.get(rid, set())
                new = _redact(redactor, scan, text) or text
                if words:
                    new = " ".join(w for w in new.split(" ") if w.lower() not in words)
                new = new.strip() or None
                if new != text:
                    change = changes.setdefault(rid, _Change(rid, own_vector=bool(mixed)))
                    change.context, change.context_changed = new, True
            after = rows[-1][0]


def _scan_palace_files(palace_dir: Path, redactor: Redactor, scan: _Scan) -> None:
    """The palace's description, in ``palace.json`` and ``identity.txt`` (the broker and
    the writer keep it outside SQLite)."""
    meta = read_meta(palace_dir) or {}
    description = meta.get("description")
    if isinstance(description, str):
        new = _redact(redactor, scan, description)
        if new is not None:
            scan.palace_file[META_FILE] = new
    identity = palace_dir / IDENTITY_FILE
    if identity.is_file():
        new = _redact(redactor, scan, identity.read_text(errors="replace"))
        if new is not None:
            scan.palace_file[IDENTITY_FILE] = new


# -- applying -----------------------------------------------------------------------------


def _apply_palace_files(palace_dir: Path, scan: _Scan) -> None:
    """Rewrite the description where it held a secret. ``palace.json`` is the broker's,
    read and written whole: read again here just before writing, so a key the broker set
    a moment ago (``readers``) is kept."""
    if META_FILE in scan.palace_file:
        meta = read_meta(palace_dir) or {}
        meta["description"] = scan.palace_file[META_FILE]
        write_json_atomic(palace_dir / META_FILE, meta)
    if IDENTITY_FILE in scan.palace_file:
        write_atomic(palace_dir / IDENTITY_FILE, scan.palace_file[IDENTITY_FILE].encode())


def _vectors(embed: Embed, texts: list[str], dim: int) -> list[bytes]:
    out: list[bytes] = []
    for start in range(0, len(texts), EMBED_CHUNK):
        block = np.asarray(embed(texts[start : start + EMBED_CHUNK]), dtype=np.float32)
        for row in block.reshape(-1, dim):
            norm = float(np.linalg.norm(row))
            out.append((row / norm if norm > 0 else row).astype("<f4").tobytes())
    return out


def _apply(store: Any, scan: _Scan, embed: Embed) -> int:
    """Write every change in one transaction; returns how many rows got a new vector."""
    conn = store.db.conn
    store.flush()  # pending recall hits are keyed by label, and labels change here
    # The new vectors first: the embedder is a round trip through the broker.
    embed_drawers = [c for c in scan.drawers.values() if c.content is not None]
    embed_archive = [c for c in scan.archive.values() if c.content is not None]
    texts = [c.content for c in embed_drawers + embed_archive if c.content is not None]
    vectors = dict(
        zip(
            [("d", c.key) for c in embed_drawers] + [("a", c.key) for c in embed_archive],
            _vectors(embed, texts, store.dim) if texts else [],
            strict=True,
        )
    )
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for change in scan.drawers.values():
            _rewrite_drawer(conn, change, vectors.get(("d", change.key)))
        for change in scan.archive.values():
            _rewrite_archived(conn, change, vectors.get(("a", change.key)))
        for tid, fields in scan.triples.items():
            sets = ", ".join(f"{name} = ?" for name in fields)
            conn.execute(f"UPDATE triples SET {sets} WHERE id = ?", (*fields.values(), tid))
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    return len(vectors)


def _rewrite_drawer(conn, change: _Change, vector: bytes | None) -> None:
    """The drawer again under its id, as a new row: the store's own delete and insert, so
    the change log carries both and the index and readers follow as after any rewrite."""
    (row,) = rows.where(conn, "label = ?", [change.key])
    if change.content is not None:
        row.content = change.content
    if change.room is not None:
        row.room = change.room
    if change.tags is not None:
        row.tags = change.tags
    if change.metadata_changed:
        row.metadata = change.metadata
    if change.context_changed:
        row.context = change.context
    if vector is not None:  # its own text's vector: no mix with a clear predecessor
        row.vector, row.own_vector = vector, None
    elif change.context_changed and row.own_vector is not None:
        row.vector, row.own_vector = row.own_vector, None
    rows.delete_row(conn, row.label, row.id)
    rows.insert_row(conn, row)


def _rewrite_archived(conn, change: _Change, vector: bytes | None) -> None:
    sets: dict[str, Any] = {}
    if change.room is not None:
        sets["room"] = change.room
    if change.content is not None:
        sets["content"] = change.content
        sets["content_hash"] = hashlib.sha256(change.content.encode()).hexdigest()
    if change.tags is not None:
        sets["tags"] = json.dumps(change.tags)
    if change.metadata_changed:
        sets["metadata"] = change.metadata
    if change.context_changed:
        sets["context"] = change.context
    if vector is not None:
        sets["vector"], sets["own_vector"] = vector, None
    elif change.context_changed and change.own_vector:
        conn.execute(
            "UPDATE archive SET vector = own_vector, own_vector = NULL WHERE id = ?",
            (change.key,),
        )
    if sets:
        assignments = ", ".join(f"{name} = ?" for name in sets)
        conn.execute(f"UPDATE archive SET {assignments} WHERE id = ?", (*sets.values(), change.key))


# -- the whole of it ---------------------------------------------------------------------


def scrub(
    store: Any,
    redactor: Redactor,
    params: ScrubParams,
    embed: Embed,
    reopen: Callable[[], Any],
) -> tuple[ScrubResult, Any]:
    """``palace_scrub`` as the writer runs it: ``run``, then (with ``apply``) the palace
    closed and opened again (``reopen``) so that no state of this process holds what was
    there, its index rebuilt from SQLite (the new snapshot replaces the one that held the
    old vectors), and ``compact``. Returns the result and the store to use from now on."""
    result, changed = run(store, redactor, params, embed)
    if result.applied:
        if changed:
            store.close()
            store = reopen()
            store.rebuild_index()
        compact(store)
    return result, store


# -- leaving no copy ----------------------------------------------------------------------


def compact(store: Any) -> bool:
    """Rebuild and optimise the full-text index, VACUUM, empty the WAL (see the module
    doc). Returns whether the WAL could be emptied (a reader may hold it a moment)."""
    conn = store.db.conn
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO drawers_fts(drawers_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO drawers_fts(drawers_fts) VALUES ('optimize')")
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    conn.execute("VACUUM")
    for _ in range(CHECKPOINT_TRIES):
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return True
        time.sleep(0.02)
    log.warning("WAL not emptied after a scrub: a reader held it", palace=store.name)
    return False
