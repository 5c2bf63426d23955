"""What each page shows, gathered through the daemon's client API.

The UI is one more client of the daemon: every figure here comes from the same calls the
CLI makes (``status``, ``palace_list``, ``palace_info``, ``memory_recall(_deep)``,
``memory_search``, ``memory_list``, ``drawer_get``, ``kg_query``, ``kg_history``,
``palace_export``, ``archive_list``, ``archive_restore``) and from the dreamer's own pass
(``dream_once``), never from the palace files themselves. The one exception is a
palace's size on disk, read from the directory ``palace_info`` names, since the daemon
reports none and the UI runs on the same machine.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import msgspec

from trusty_memory.client.aio import AsyncClient
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.home import tree_size
from trusty_memory.common.human import duration
from trusty_memory.common.messages import (
    ArchivedDrawer,
    ArchiveListResult,
    DrawerDetail,
    DreamPassRecord,
    ExportResult,
    KgQueryResult,
    ListResult,
    PalaceInfo,
    RecallResult,
    RestoreResult,
    Triple,
)
from trusty_memory.common.methods import Method

PAGE_SIZE = 10
LIST_LIMIT = 50
ARCHIVE_PAGE = 50
# Drawers in the same room written within this many seconds of each other are one episode
# (the window recall's episode smoothing uses: workers/store/ranking.py EPISODE_WINDOW_S).
EPISODE_WINDOW_S = 1800.0
EPISODE_SCAN = 1000  # drawers of the room looked at for a drawer's neighbours
# palace_info starts the writer of a palace that has none: the palaces page asks it only of
# palaces with no summary yet, a few at a time.
INFO_CONCURRENCY = 4


# -- palaces ------------------------------------------------------------------------------


@dataclass
class PalaceRow:
    name: str
    info: PalaceInfo | None
    size_bytes: int | None
    workers: list[dict]
    queued: int
    idle_s: float | None  # seconds since its last foreground request; None: not loaded
    error: str = ""
    # A sleeping palace as its writer last left it (``palace_summaries``), not woken.
    asleep: dict[str, Any] | None = None
    description: str | None = None

    @property
    def last_activity_s(self) -> float | None:
        """Seconds since the palace was last used: its last request while the daemon has
        it loaded, else its last write (a sleeping palace's summary); None: not known."""
        if self.idle_s is not None:
            return self.idle_s
        stamp = (self.asleep or {}).get("last_write_at")
        when = _epoch(stamp) if isinstance(stamp, str) else None
        return None if when is None else max(0.0, datetime.now(UTC).timestamp() - when)

    def known(self, field: str) -> Any:
        """A ``PalaceInfo`` field (counts, ``last_dream_at``, dream totals) from whichever
        is at hand: the palace's answer, or its summary while it sleeps; None if neither."""
        if self.info is not None:
            return getattr(self.info, field)
        return self.asleep.get(field) if self.asleep else None


async def palaces(client: AsyncClient) -> list[PalaceRow]:
    """Every palace with its counts, size, workers, last activity and dream totals.

    A palace with workers answers ``palace_info``; a sleeping one is shown from what its
    writer last wrote (``palace_summaries``), so that looking does not wake it. Only a
    palace with no summary yet (it has not slept since) is asked, a few at a time."""
    status = await client.call(Method.STATUS)
    services = {s["name"]: s for s in status["services"]}
    names = (await client.call(Method.PALACE_LIST))["palaces"]
    sleeping = (await client.call(Method.PALACE_SUMMARIES))["palaces"]
    gate = asyncio.Semaphore(INFO_CONCURRENCY)

    def running(name: str) -> bool:
        return bool(services.get(p.palace_service(name), {}).get("workers"))

    def ask(name: str) -> bool:
        known = sleeping.get(name) or {}
        return running(name) or known.get("summary") is None

    async def info_of(name: str) -> PalaceInfo | None:
        if not ask(name):
            return None
        async with gate:
            return await _info(client, name)

    infos = await asyncio.gather(*(info_of(n) for n in names), return_exceptions=True)
    rows = []
    for name, info in zip(names, infos, strict=True):
        if isinstance(info, BaseException) and not isinstance(info, p.TrustyError):
            raise info  # a palace's error shows in its row; anything else is a bug
        service = services.get(p.palace_service(name), {})
        known = sleeping.get(name) or {}
        row = PalaceRow(
            name=name,
            info=info if isinstance(info, PalaceInfo) else None,
            size_bytes=None,
            workers=service.get("workers", []),
            queued=service.get("queued", 0),
            idle_s=service.get("idle_s"),
            error=info.message if isinstance(info, p.TrustyError) else "",
            asleep=known.get("summary") if info is None else None,
            description=known.get("description"),
        )
        data_dir = row.info.data_dir if row.info is not None else known.get("data_dir")
        if data_dir:
            row.size_bytes = dir_size(data_dir)
        rows.append(row)
    return rows


async def _info(client: AsyncClient, name: str) -> PalaceInfo:
    return p.convert(await client.call(Method.PALACE_INFO, palace=name), PalaceInfo)


async def palace_info(client: AsyncClient, name: str) -> PalaceInfo:
    return await _info(client, name)


def dir_size(path: str) -> int | None:
    """Bytes under ``path`` (None when it is not readable from here)."""
    return tree_size(path) if os.path.isdir(path) else None


# -- search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A palace page's search: the text, its filters and each column's page."""

    text: str = ""
    room: str | None = None
    tag: str | None = None
    since: str | None = None  # a date or RFC 3339 time; compared with created_at
    until: str | None = None
    pages: dict[str, str] = field(default_factory=dict)  # column key -> its paging value

    def in_time(self, created_at: str) -> bool:
        if self.since and created_at < self.since:
            return False
        return not (self.until and created_at[: len(self.until)] > self.until)


@dataclass
class Hit:
    drawer_id: str
    content: str
    room: str
    tags: list[str]
    created_at: str
    importance: float
    score: float | None = None
    layer: int | None = None


@dataclass
class Column:
    """One search's results: its hits, where its next page starts, or why it failed."""

    key: str
    title: str
    hits: list[Hit] = field(default_factory=list)
    page: str = "1"
    next_page: str | None = None
    note: str = ""
    error: str = ""


@dataclass(frozen=True)
class SearchKind:
    """A column of the palace page. Each kind pages in its own way (``Query.pages[key]``
    holds a page number for recall, and would hold a cursor for a keyword search)."""

    key: str
    title: str
    run: Callable[[AsyncClient, str, Query], Awaitable[Column]]


async def _recall(client: AsyncClient, palace: str, query: Query, *, deep: bool) -> Column:
    """Recall has no cursor: page N asks for the top N pages' worth and shows the last."""
    key = "deep" if deep else "recall"
    column = Column(key=key, title="Deep recall" if deep else "Recall")
    page = _page_number(query.pages.get(key))
    # A person looking is no recall: the hits' recall counts (importance) stay as they are.
    params = {"query": query.text, "top_k": PAGE_SIZE * page, "room": query.room, "tag": query.tag,
              "count": False}  # fmt: skip
    method = Method.MEMORY_RECALL_DEEP if deep else Method.MEMORY_RECALL
    result = p.convert(await client.call(method, params, palace=palace), RecallResult)
    hits = [
        _hit_of(h, score=h.score, layer=h.layer)
        for h in result.results
        if query.in_time(h.created_at)
    ]
    column.hits = hits[PAGE_SIZE * (page - 1) :]
    column.page = str(page)
    if len(result.results) == PAGE_SIZE * page:
        column.next_page = str(page + 1)
    if len(hits) < len(result.results):
        column.note = f"{len(result.results) - len(hits)} hits outside the time filter"
    return column


def _page_number(value: str | None) -> int:
    try:
        return max(1, min(int(value or 1), 100))
    except ValueError:
        return 1


async def _keyword(client: AsyncClient, palace: str, query: Query) -> Column:
    """``memory_search``: words ranked by BM25 (prefixes too), "quoted words" as a phrase;
    the filters go to the palace and the page's cursor comes back from it."""
    column = Column(key="keyword", title="Keyword search")
    cursor = query.pages.get("keyword") or None
    since, until = _search_bounds(query)
    result = await client.search(
        palace,
        query.text,
        room=query.room,
        tag=query.tag,
        since=since,
        until=until,
        limit=PAGE_SIZE,
        cursor=cursor,
    )
    column.hits = [_hit_of(h, score=h.score) for h in result.drawers]
    column.page = "1" if cursor is None else "next"  # a cursor is no page number to show
    column.next_page = result.next_cursor
    return column


def _search_bounds(query: Query) -> tuple[str | None, str | None]:
    """The page's since/until (a date or an RFC 3339 time; ``until`` a date means through
    that day, as the recall columns read it) as ``memory_search``'s RFC 3339 bounds."""
    since = f"{query.since}T00:00:00Z" if query.since and len(query.since) == 10 else query.since
    until = query.until
    if until and len(until) == 10:
        try:
            day = date.fromisoformat(until) + timedelta(days=1)
        except ValueError:
            return since, until  # the palace names the bad value
        until = f"{day.isoformat()}T00:00:00Z"
    return since, until


async def _recall_shallow(client: AsyncClient, palace: str, query: Query) -> Column:
    return await _recall(client, palace, query, deep=False)


async def _recall_deep(client: AsyncClient, palace: str, query: Query) -> Column:
    return await _recall(client, palace, query, deep=True)


# The palace page's columns, left to right: each pages on its own (recall by page number,
# keyword search by the cursor ``memory_search`` returns).
SEARCH_KINDS: tuple[SearchKind, ...] = (
    SearchKind("recall", "Recall", _recall_shallow),
    SearchKind("deep", "Deep recall", _recall_deep),
    SearchKind("keyword", "Keyword search", _keyword),
)
KINDS_BY_KEY = {k.key: k for k in SEARCH_KINDS}


async def search_column(client: AsyncClient, palace: str, kind: SearchKind, query: Query) -> Column:
    """One column; a failure shows in that column only (the others still answer)."""
    try:
        return await kind.run(client, palace, query)
    except p.TrustyError as exc:
        return Column(key=kind.key, title=kind.title, error=exc.message)


async def search(client: AsyncClient, palace: str, query: Query) -> list[Column]:
    return list(
        await asyncio.gather(*(search_column(client, palace, k, query) for k in SEARCH_KINDS))
    )


async def listing(client: AsyncClient, palace: str, query: Query) -> list[Hit]:
    """The palace's drawers by importance (what the page shows before any search)."""
    params = {"room": query.room, "tag": query.tag, "limit": LIST_LIMIT}
    result = p.convert(await client.call(Method.MEMORY_LIST, params, palace=palace), ListResult)
    return [_hit_of(d) for d in result.drawers if query.in_time(d.created_at)]


def _hit_of(d: Any, score: float | None = None, layer: int | None = None) -> Hit:
    """A row of any column or list: a recall or search hit, a listed or fetched drawer."""
    return Hit(
        drawer_id=d.drawer_id,
        content=d.content,
        room=d.room,
        tags=d.tags,
        created_at=d.created_at,
        importance=d.importance,
        score=score,
        layer=layer,
    )


# -- a drawer -----------------------------------------------------------------------------


@dataclass
class DrawerPage:
    drawer: DrawerDetail | None
    archived: ArchivedDrawer | None  # the drawer itself, when it is in the archive
    before: list[Hit]
    after: list[Hit]
    merged_here: list[ArchivedDrawer]  # drawers the dreamer merged into this one
    error: str = ""


async def drawer_page(client: AsyncClient, palace: str, drawer_id: str) -> DrawerPage:
    archive = await archive_all(client, palace)
    mine = next((a for a in archive if a.drawer_id == drawer_id), None)
    merged = [a for a in archive if a.merged_into == drawer_id]
    try:
        data = await client.call(Method.DRAWER_GET, {"drawer_id": drawer_id}, palace=palace)
    except p.TrustyError as exc:
        if exc.code != p.ErrorCode.DRAWER_NOT_FOUND:
            raise
        return DrawerPage(None, mine, [], [], merged, error=exc.message)
    drawer = p.convert(data, DrawerDetail)
    before, after = await episode_neighbours(client, palace, drawer)
    return DrawerPage(drawer, mine, before, after, merged)


async def episode_neighbours(
    client: AsyncClient, palace: str, drawer: DrawerDetail, around: int = 3
) -> tuple[list[Hit], list[Hit]]:
    """The drawers written just before and after this one in its episode: same room,
    within ``EPISODE_WINDOW_S`` (read from the room's listing, as no op returns them)."""
    params = {"room": drawer.room, "limit": EPISODE_SCAN}
    listed = p.convert(await client.call(Method.MEMORY_LIST, params, palace=palace), ListResult)
    mine = _epoch(drawer.created_at)
    near = [
        d
        for d in listed.drawers
        if d.drawer_id != drawer.drawer_id
        and mine is not None
        and (t := _epoch(d.created_at)) is not None
        and abs(t - mine) <= EPISODE_WINDOW_S
    ]
    near.sort(key=lambda d: d.created_at)
    before = [_hit_of(d) for d in near if d.created_at <= drawer.created_at][-around:]
    after = [_hit_of(d) for d in near if d.created_at > drawer.created_at][:around]
    return before, after


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# -- the knowledge graph ----------------------------------------------------------------


@dataclass
class Timeline:
    subject: str
    current: list[Triple]
    facts: list[Triple]  # current and closed, oldest first


async def timeline(client: AsyncClient, palace: str, subject: str) -> Timeline:
    """A subject's facts over time (the subject as asserted: matched exactly, as
    ``kg_query`` matches it): ``kg_history`` gives every fact, closed ones too, and
    ``kg_query`` which of them hold now."""
    current = p.convert(
        await client.call(Method.KG_QUERY, {"subject": subject}, palace=palace), KgQueryResult
    ).triples
    facts = list((await client.kg_history(palace, subject)).triples)
    facts.sort(key=lambda t: t.valid_from)  # stable: assertion order within one second
    return Timeline(subject=subject, current=current, facts=facts)


async def subjects(client: AsyncClient, palace: str, limit: int = 60) -> list[str]:
    """Some subjects to pick from: those of the palace's first 500 triples."""
    params = {"kind": "triples", "after": 0, "limit": 500, "vectors": False}
    page = p.convert(await client.call(Method.PALACE_EXPORT, params, palace=palace), ExportResult)
    return list(dict.fromkeys(t.subject for t in page.triples))[:limit]


def _triple_key(t: Triple) -> tuple:
    return (t.subject, t.predicate, t.object, t.valid_from)


# -- the archive ----------------------------------------------------------------------------


async def archive_page(
    client: AsyncClient, palace: str, after: int = 0, reason: str | None = None
) -> ArchiveListResult:
    params = {"after": after, "limit": ARCHIVE_PAGE, "reason": reason}
    data = await client.call(Method.ARCHIVE_LIST, params, palace=palace)
    return p.convert(data, ArchiveListResult)


async def archive_all(client: AsyncClient, palace: str, pages: int = 20) -> list[ArchivedDrawer]:
    """The archive's entries, up to ``pages`` pages of 1,000 (for a drawer's history)."""
    out: list[ArchivedDrawer] = []
    after = 0
    for _ in range(pages):
        params = {"after": after, "limit": 1000}
        page = p.convert(
            await client.call(Method.ARCHIVE_LIST, params, palace=palace), ArchiveListResult
        )
        out += page.drawers
        if page.next_after is None:
            break
        after = page.next_after
    return out


async def restore(client: AsyncClient, palace: str, drawer_id: str) -> RestoreResult:
    data = await client.call(Method.ARCHIVE_RESTORE, {"drawer_id": drawer_id}, palace=palace)
    return p.convert(data, RestoreResult)


# -- the dreamer ----------------------------------------------------------------------------


@dataclass
class DreamRun:
    palace: str
    dry_run: bool
    recommendations: list[dict[str, Any]]
    complete: dict[str, Any] | None


async def redacted_count(client: AsyncClient, palace: str) -> int:
    """Drawers of ``palace`` whose text had credentials redacted (``palace_stats``)."""
    return (await client.palace_stats(palace)).redacted_count


async def recent_passes(client: AsyncClient, palace: str) -> list[DreamPassRecord]:
    """The dreamer's last passes over ``palace``, newest first (``palace_stats``)."""
    return (await client.palace_stats(palace)).dream_passes


async def dream(config: Config, palace: str, *, dry_run: bool) -> DreamRun:
    """One dream pass over ``palace``, as ``trusty-memory dream [--dry-run]`` runs it: the
    dreamer is a client, so the pass runs here, on a worker thread, with its own client."""
    from trusty_memory.dreamer.__main__ import dream_once  # lazy: the dreamer's code; a pass only

    events: list[dict[str, Any]] = []

    def one_pass() -> None:
        with Client(config) as client:  # as the CLI's: starts the daemon when none runs
            dream_once(config, [palace], dry_run=dry_run, emit=events.append, caller=client)

    await asyncio.to_thread(one_pass)
    return DreamRun(
        palace=palace,
        dry_run=dry_run,
        recommendations=[e for e in events if e["type"] == "recommendation"],
        complete=next((e for e in events if e["type"] == "complete"), None),
    )


# -- the daemon ----------------------------------------------------------------------------


@dataclass
class DaemonView:
    status: dict[str, Any]
    requests_per_s: float
    rss_mb: float
    workers: int
    queued: int
    uptime: str = ""  # in words: "9 min 18 s"
    restarts: str = ""  # in words: "embedder twice, palace:notes (worker 1) once"


def restarts_in_words(restarts: dict[str, int]) -> str:
    """The daemon's restart counts (``{"embedder#0": 2}``: service and worker slot) for
    people: the processes that restarted and how often, or that none did."""
    times = {1: "once", 2: "twice"}
    said = []
    for key, count in restarts.items():
        if not count:
            continue
        service, _, slot = key.rpartition("#")
        who = service or key
        if slot not in ("", "0"):
            who += f" (worker {slot})"
        said.append(f"{who} {times.get(count, f'{count} times')}")
    if not said:
        return "No process has restarted since the daemon started"
    return "Restarted since the daemon started: " + ", ".join(said)


async def daemon(client: AsyncClient) -> DaemonView:
    status = await client.call(Method.STATUS)
    workers = [w for s in status["services"] for w in s["workers"]]
    return DaemonView(
        status=status,
        uptime=duration(status["uptime_s"]),
        restarts=restarts_in_words(status.get("restarts") or {}),
        requests_per_s=sum(w.get("requests_per_s") or 0.0 for w in workers),
        rss_mb=sum(w.get("rss_mb") or 0.0 for w in workers),
        workers=len(workers),
        queued=sum(s["queued"] for s in status["services"]),
    )


def to_builtins(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
