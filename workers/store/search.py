"""Reads for the extended tools: keyword search with paging, a subject's fact history, stats.

Plain functions over a ``ReadStore``, so the writer and every reader answer them alike
(``workers/palace.py``'s ``READ_HANDLERS``).

Search reuses the FTS5 table deep recall's BM25 already keeps (``drawers_fts``, porter
stemming over unicode61) and reads a query the way a person types one (``fts_match``):

- a plain word matches as a prefix of a drawer's words (``postgres`` finds "PostgreSQL",
  ``config`` "configuration", ``auth`` "authentication"), except words under
  ``PREFIX_MIN`` letters, stop words and words with a digit (``600`` is not "6000");
  ``word*`` asks for a prefix whatever the word. The index holds porter stems and FTS5
  stems a prefix too, so it is the stem's prefix that matches: "postgres" stems to
  "postgr", a prefix of "postgresql", but "deploy" stems to "deploi" and so misses
  "deployment" (stem "deploy");
- several words are ORed and BM25 ranks the drawers that hold more of them (the rarer words
  weighing most) first, so a question finds its note without every word being in it; stop
  words ("which", "do") are dropped unless the query has nothing else. Measured on the two
  notes sets, ``bench/keyword_search.py`` (BENCHMARKS.md, "Keyword search");
- ``"quoted words"`` must match as a phrase, exactly (no prefix);
- an explicit ``AND`` (upper case) between words asks for every word and phrase, stop
  words included; an upper-case ``OR`` is the default and ignored.

Each term and phrase is quoted into the FTS query from the word characters of the caller's
text, so no text is ever FTS syntax.

Paging: ``next_cursor`` is opaque to callers. For a search it carries the offset of the
next page in BM25 order (which a write in between may shift by a row or two); for a
listing (no query) the label of the last drawer shown, so later pages never repeat a
drawer, and drawers written meanwhile are not in them (a new text writes a drawer again
under a new label: one updated while a listing pages through shows up in no later page).
Either carries a digest of the query and filters, and a cursor is refused with any others.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from trusty_memory.common import names
from trusty_memory.common.messages import (
    DreamPassRecord,
    KgHistoryParams,
    KgQueryResult,
    PalaceStats,
    SearchHit,
    SearchParams,
    SearchResult,
)
from trusty_memory.common.values import (
    MAX_FTS_TERMS,
    STOPWORDS,
    TRIPLE_COLUMNS,
    check_nonempty,
    check_timestamp,
    invalid,
    own_words,
    triple_of,
)
from trusty_memory.workers.store import dream_log

if TYPE_CHECKING:
    from trusty_memory.workers.store.read import ReadStore

SEARCH_LIMIT_MAX = 1000
_PHRASE = re.compile(r'"([^"]*)"')
_WORD = re.compile(r"\w+", re.UNICODE)
_TERM = re.compile(r"(\w+)(\*?)", re.UNICODE)  # a word, and whether a ``*`` follows it
_OPERATORS = frozenset({"AND", "OR"})  # upper case only: "and" / "or" are stop words
PREFIX_MIN = 3  # shorter plain words match only as themselves ("db" is not "dbt")


def fts_match(text: str) -> str:
    """The FTS5 query of a search (the module's docstring says how a query reads)."""
    phrases = []
    for phrase in _PHRASE.findall(text):
        words = _WORD.findall(phrase.lower())
        if words:
            phrases.append('"' + " ".join(words) + '"')
    phrases = list(dict.fromkeys(phrases))
    rest = _PHRASE.sub(" ", text).replace('"', " ")
    terms: dict[str, bool] = {}  # word -> asked as a prefix (``word*``)
    operators: list[str] = []
    for word, star in _TERM.findall(rest):
        if word in _OPERATORS and not star:
            operators.append(word)
            continue
        terms[word.lower()] = terms.get(word.lower(), False) or bool(star)
    if not terms and not phrases:  # "AND" alone is a word to find
        terms = dict.fromkeys((w.lower() for w in operators), False)
    every = "AND" in operators
    if not every:
        kept = {w: star for w, star in terms.items() if star or w not in STOPWORDS}
        terms = kept if kept or phrases else terms
    words = [_term(w, star) for w, star in terms.items()]
    count = len(phrases) + len(words)
    if not count:
        raise invalid(f"query: no words to search for in {text!r}")
    if count > MAX_FTS_TERMS:
        raise invalid(f"query: at most {MAX_FTS_TERMS} words and phrases, got {count}")
    if every:
        return own_words(" AND ".join(phrases + words))
    any_word = ["(" + " OR ".join(words) + ")"] if words else []
    return own_words(" AND ".join(phrases + any_word))


def _term(word: str, star: bool) -> str:
    """One word of a query as FTS5 syntax: a prefix term (``"word"*``, stemmed by porter
    first, so it also matches the word itself) or, for short words, stop words and
    numbers, the word alone."""
    prefix = star or (
        len(word) >= PREFIX_MIN and word not in STOPWORDS and not any(c.isdigit() for c in word)
    )
    return f'"{word}"*' if prefix else f'"{word}"'


def search(store: ReadStore, params: SearchParams) -> SearchResult:
    """One page of drawers matching the query (best first) or, without one, all drawers
    last written first; both under the room, tag and time filters."""
    limit = params.limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise invalid(f"limit: must be a positive integer, got {limit!r}")
    limit = min(limit, SEARCH_LIMIT_MAX)
    query = params.query if params.query is not None and params.query.strip() else None
    where, args = _filters(params)
    digest = _digest(query, args)
    position = _read_cursor(params.cursor, digest)
    conn = store.db.conn
    if query is not None:
        sql = (
            "SELECT d.label, d.id, d.content, d.room, d.tags, d.importance, d.created_at, f.rank"
            " FROM drawers_fts f JOIN drawers d ON d.label = f.rowid"
            " WHERE drawers_fts MATCH ?" + "".join(f" AND {w}" for w in where)
            + " ORDER BY f.rank, f.rowid LIMIT ? OFFSET ?"
        )  # fmt: skip
        rows = conn.execute(sql, [fts_match(query), *args, limit + 1, position]).fetchall()
        after = position + limit
    else:
        if position:
            where, args = [*where, "d.label < ?"], [*args, position]
        sql = (
            "SELECT d.label, d.id, d.content, d.room, d.tags, d.importance, d.created_at, NULL"
            " FROM drawers d" + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY d.label DESC LIMIT ?"
        )  # fmt: skip
        rows = conn.execute(sql, [*args, limit + 1]).fetchall()
        after = rows[limit - 1][0] if len(rows) > limit else 0
    more = len(rows) > limit
    hits = [
        SearchHit(
            drawer_id=r[1],
            content=r[2],
            room=r[3],
            tags=json.loads(r[4]),
            importance=r[5],
            created_at=r[6],
            # FTS5 rank: lower is better; every output gives scores to 4 decimals
            score=None if r[7] is None else round(-r[7], 4),
        )
        for r in rows[:limit]
    ]
    cursor = _write_cursor(digest, after) if more else None
    return SearchResult(palace=store.name, query=query, drawers=hits, next_cursor=cursor)


def _filters(params: SearchParams) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if params.room is not None and params.room.strip():
        where.append("d.room = ?")
        args.append(names.normalize_room(params.room))
    if params.tag is not None and params.tag != "":
        where.append("d.label IN (SELECT label FROM drawer_tags WHERE tag = ?)")
        args.append(params.tag)
    if params.since is not None:
        where.append("d.created_at >= ?")
        args.append(check_timestamp(params.since, "since"))
    if params.until is not None:
        where.append("d.created_at < ?")
        args.append(check_timestamp(params.until, "until"))
    return where, args


def _digest(query: str | None, args: list[Any]) -> str:
    key = json.dumps([query, *args], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _write_cursor(digest: str, position: int) -> str:
    raw = json.dumps({"d": digest, "p": position}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_cursor(cursor: str | None, digest: str) -> int:
    """The position a cursor names; 0 without one."""
    if cursor is None or cursor == "":
        return 0
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        position = data["p"]
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise ValueError
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise invalid(f"cursor: not a cursor this server gave: {cursor[:40]!r}") from None
    if data.get("d") != digest:
        raise invalid(
            "cursor: it belongs to another query or other filters; repeat the search that"
            " returned it, or start again without a cursor"
        )
    return position


def kg_history(store: ReadStore, params: KgHistoryParams) -> KgQueryResult:
    """Every triple of a subject (optionally one predicate), closed ones too, oldest first."""
    subject = check_nonempty(params.subject, "subject")
    sql = f"SELECT {TRIPLE_COLUMNS} FROM triples WHERE subject = ?"
    args: list[Any] = [subject]
    if params.predicate is not None:
        sql += " AND predicate = ?"
        args.append(check_nonempty(params.predicate, "predicate"))
    rows = store.db.conn.execute(sql + " ORDER BY id", args)
    return KgQueryResult(subject=subject, triples=[triple_of(r) for r in rows])


DREAM_PASSES_SHOWN = 10  # recent dream passes ``palace_stats`` lists


def stats(store: ReadStore, role: str) -> PalaceStats:
    """Counts, how far the index is behind the change log, the last dream pass, sizes."""
    conn = store.db.conn
    active, total = conn.execute(
        "SELECT count(*) FILTER (WHERE valid_to IS NULL), count(*) FROM triples"
    ).fetchone()
    dream = dream_log.dream_summary(conn)
    db_bytes = sum(
        f.stat().st_size
        for f in store.palace_dir.glob("palace.sqlite3*")
        if not f.name.endswith("-shm")
    )
    return PalaceStats(
        palace=store.name,
        role=role,
        drawer_count=store.drawer_count,
        room_counts=store.room_counts(),
        tag_count=store.tag_count(),
        triple_count=active,
        triple_total=total,
        archived_count=dream["archived_count"],
        last_seq=store.last_seq,
        index_seq=store.index_seq,
        index_lag=max(0, store.last_seq - store.index_seq),
        index_loaded=store.index_loaded,
        last_dream_at=dream["last_dream_at"],
        db_bytes=db_bytes,
        index_bytes=_snapshot_bytes(store),
        dream_passes=[
            DreamPassRecord(
                finished_at=r[0],
                duration_s=r[1],
                merged=r[2],
                decayed=r[3],
                archived=r[4],
                kg_decayed=r[5],
                truncated=bool(r[6]),
            )
            for r in conn.execute(
                "SELECT finished_at, duration_s, merged, decayed, archived, kg_decayed, truncated"
                " FROM dream_log ORDER BY id DESC LIMIT ?",
                (DREAM_PASSES_SHOWN,),
            )
        ],
    )


def _snapshot_bytes(store: ReadStore) -> int:
    """The size of the newest index snapshot (``index-<seq>.*``) on disk."""
    by_seq: dict[int, int] = {}
    for f in store.palace_dir.glob("index-*"):
        seq = f.name[len("index-") :].split(".")[0]
        if seq.isdigit():
            by_seq[int(seq)] = by_seq.get(int(seq), 0) + f.stat().st_size
    return by_seq[max(by_seq)] if by_seq else 0
