"""``mine``: files transcripts and notes into a palace, incrementally and idempotently.

Every write is a ``palace_import`` batch through the daemon, like ``import`` (secrets
redacted by the worker, acknowledged only once durable). The batch is embedded first,
through the daemon's bulk lane (``embed_bulk``: an embedder process of its own at a lower
CPU priority), and imported with its vectors: the palace's writer then spends
milliseconds on a batch, not the seconds embedding takes, so the remembers and recalls of
the agents using that palace are not queued behind mining (``bench/mine_under_load.py``).
A drawer the worker redacts loses the vector made of its clear text and is embedded again
there (``workers/secrets_guard.py``). Three properties, and how:

* **Idempotent.** A drawer's id comes from its source position (``exchanges.drawer_id``),
  and import skips an id the palace holds, so mining anything twice adds nothing.
* **Incremental.** For each JSONL file the progress store keeps the byte offset of the
  last complete line consumed, a sha256 of the bytes up to it, and the file's device and
  inode. A grown file is hashed up to that offset (cheap, no parsing) and only the lines
  after it are parsed. A different inode, a shorter file or a different prefix hash means
  the file was rewritten or truncated: it is read from the start, and the ids keep it free
  of duplicates. Whole-file sources (exports, notes) are skipped while their hash is the
  one recorded.
* **Resumable.** Progress is saved only after the daemon acknowledged the batch holding
  the drawers up to that offset, so a ``kill -9`` at any point loses at most work that is
  redone on the next run, and redone work is skipped by id: every exchange ends up stored
  exactly once.

Input is untrusted: only regular files are read (a FIFO or device is refused, not
opened for reading in a way that blocks), a line over ``MAX_LINE`` bytes is a bad line
and is skipped without being held in memory, and a line that is not JSON, too deeply
nested, or of the wrong shape is counted and skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from trusty_memory.client.bulk import create_palace
from trusty_memory.client.capture import chatgpt, claude_ai, claude_code, codex, markdown
from trusty_memory.client.capture.exchanges import Exchange, bounded
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.config import load_config
from trusty_memory.common.messages import EmbedResult, ImportDrawer, ImportResult
from trusty_memory.common.methods import Method
from trusty_memory.common.palace_dir import write_json_atomic

FORMATS = ("claude-code", "codex", "chatgpt", "claude-ai", "markdown")
BATCH_SIZE = 100  # exchanges embedded in one bulk-lane call
# Drawers per palace_import: with vectors given, a transaction of 100 held the palace's
# writer (and every remember and recall queued behind it) 120-190 ms under load; 10 hold
# it ~16 ms (10 of them hnswlib inserting the vectors), 4 about 7. A recall that arrives
# during an import waits for the rest of it (bench/mine_under_load.py, recall p99 medians
# of 5-6 runs: 24.8 ms at 10, 15.8 at 4), and the extra commits cost mining nothing
# measurable (29.6 / 28.8 against 29.0 exchanges/s), since the model, not the writer, sets
# its pace. One drawer per import did not lower that p99 further (four alternating runs
# each: median 34.0 against 33.9 ms), so below 4 the import's length is not what the
# slow recalls wait for (BENCHMARKS.md, "Mining beside 16 sessions").
IMPORT_SLICE = 4
MAX_LINE = 8 * 1024 * 1024  # one transcript line; a pasted file can be megabytes
MAX_WHOLE_FILE = 512 * 1024 * 1024  # an export or a note read at once
PROGRESS_VERSION = 1
IMPORT_TIMEOUT_S = 150.0  # a cold embedder loads its model within this (see bulk.py)
IMPORT_PER_DRAWER_S = 0.05


@dataclass
class MineReport:
    """What a ``mine`` run did; ``lines_read`` counts only lines parsed this run, so a
    grown transcript shows that only its new lines were read."""

    palace: str
    palace_created: bool = False
    files: int = 0
    files_unchanged: int = 0
    files_reread: int = 0  # rewritten or truncated since the last run: read from the start
    lines_read: int = 0
    bad_lines: int = 0
    exchanges: int = 0
    stored: int = 0
    skipped: int = 0  # already in the palace
    updated: int = 0  # exchanges stored while open and since gone on: their drawer updated
    redacted: int = 0
    refused: list[str] = field(default_factory=list)
    by_format: dict[str, int] = field(default_factory=dict)
    # How far through the files this run is, in bytes (a resumed file's old part counts
    # as read): what a progress display can show as a share of the whole.
    bytes_total: int = 0
    bytes_read: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProgressStore:
    """Per-file progress in ``<home>/capture/progress.json``, private to the user and
    replaced atomically, so a crash leaves the old or the new state, never half of one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_bytes())
            if isinstance(data, dict) and isinstance(data.get("files"), dict):
                self.files = data["files"]

    @classmethod
    def of_home(cls, home: Path) -> ProgressStore:
        return cls(home / "capture" / "progress.json")

    def get(self, key: str) -> dict[str, Any] | None:
        entry = self.files.get(key)
        return entry if isinstance(entry, dict) else None

    def save(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        old = os.umask(0o077)
        try:
            write_json_atomic(self.path, {"version": PROGRESS_VERSION, "files": self.files})
        finally:
            os.umask(old)


@dataclass
class _Item:
    """A drawer to send, and/or the progress its file reaches once it is acknowledged."""

    drawer: ImportDrawer | None
    key: str
    progress: dict[str, Any] | None


def _created(value: str | None) -> str | None:
    """A source's timestamp as the worker takes it, or None (the worker then uses now):
    a malformed time in a hostile file must not make the worker refuse the whole batch."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError):
        return None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _open_state(ex: Exchange, limit: int) -> dict[str, Any]:
    """What the next run needs of an exchange the file's end left open: its drawer's id and
    text hash, and where its first line starts (see ``_resume``)."""
    content = _drawer(ex, limit).content
    return {"key": ex.key, "sha": _sha(content), "start": ex.start, "start_digest": ex.start_digest}


def _drawer(ex: Exchange, limit: int) -> ImportDrawer:
    content, cut = bounded(ex.content, limit)
    metadata = dict(ex.metadata)
    if cut:
        metadata["truncated"] = True
    return ImportDrawer(
        drawer_id=ex.key,
        content=content,
        room=ex.room,
        tags=ex.tags,
        created_at=_created(ex.created_at),
        metadata=metadata,
    )


def files_under(paths: Iterable[str | Path], report: MineReport) -> Iterator[Path]:
    """The regular files named or found under the folders named (links inside a folder
    are not followed, hidden folders are skipped); anything else is refused, named."""
    for given in paths:
        path = Path(given).expanduser()
        try:
            st = path.stat()
        except OSError as exc:
            report.refused.append(f"{path}: {exc.strerror or exc}")
            continue
        if stat.S_ISDIR(st.st_mode):
            for root, dirs, names in os.walk(path, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    child = Path(root, name)
                    with contextlib.suppress(OSError):
                        if stat.S_ISREG(child.lstat().st_mode) and detect(child) is not None:
                            yield child
        elif stat.S_ISREG(st.st_mode):
            yield path
        else:
            report.refused.append(f"{path}: not a regular file")


def _head(path: Path, size: int = 65536) -> bytes:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return os.read(fd, size)
        finally:
            os.close(fd)
    return b""


def detect(path: Path) -> str | None:
    """A file's format from its name and first lines; None: not something ``mine`` reads."""
    name = path.name.lower()
    if name.endswith(markdown.SUFFIXES):
        return "markdown"
    if name.endswith(".jsonl"):
        for raw in _head(path).splitlines()[:20]:
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if codex.looks_like(obj):
                return "codex"
            if claude_code.looks_like(obj):
                return "claude-code"
        return None
    if name.endswith(".json"):
        head = _head(path, 4096).lstrip()
        if head.startswith(b"["):
            if b'"mapping"' in head:
                return "chatgpt"
            if b'"chat_messages"' in head:
                return "claude-ai"
    return None


def _open_regular(path: Path) -> tuple[BinaryIO, os.stat_result]:
    """Open ``path`` for reading only if it is a regular file (checked on the open file,
    so a swap between check and open cannot hand us a FIFO that blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), st


def _resume(stream: BinaryIO, st: os.stat_result, saved: dict[str, Any] | None) -> tuple[int, Any]:
    """Where to start in a JSONL file and the hash of the bytes before it: where the last
    run stopped, or, when the file grew since and that run's last Claude Code exchange was
    still open at its end (``claude_open``), that exchange's first line, so it is read
    again whole."""
    if not saved or saved.get("ino") != st.st_ino or saved.get("dev") != st.st_dev:
        return 0, hashlib.sha256()
    offset = saved.get("offset")
    hasher = _prefix(stream, st, offset, saved.get("sha256"))
    if hasher is None or not isinstance(offset, int):
        stream.seek(0)
        return 0, hashlib.sha256()
    was_open = saved.get("claude_open")
    if st.st_size > offset and isinstance(was_open, dict):
        start = was_open.get("start")
        stream.seek(0)
        if start == 0:  # the file's first line
            return 0, hashlib.sha256()
        back = _prefix(stream, st, start, was_open.get("start_digest"))
        if back is not None and isinstance(start, int):
            return start, back
        stream.seek(offset)  # cannot go back: go on from where the last run stopped
    return offset, hasher


def _prefix(stream: BinaryIO, st: os.stat_result, offset: object, digest: object) -> Any:
    """The hash of the file's first ``offset`` bytes (read from the stream's start) when it
    is ``digest``; None otherwise (the file was rewritten) or for a bad offset."""
    if not isinstance(offset, int) or not 0 < offset <= st.st_size:
        return None
    hasher = hashlib.sha256()
    left = offset
    while left:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            break
        hasher.update(chunk)
        left -= len(chunk)
    return None if left or hasher.hexdigest() != digest else hasher


def _lines(
    stream: BinaryIO, start: int, hasher: Any, report: MineReport
) -> Iterator[tuple[object, int]]:
    """Complete lines from ``start`` as parsed JSON (None for a bad one) with the offset
    just past each. A partial last line (a writer mid-line) is left for the next run."""
    offset = start
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return
        if not line.endswith(b"\n"):
            if len(line) <= MAX_LINE:
                return  # incomplete: not consumed, so not hashed or counted
            hasher.update(line)
            offset += len(line)
            report.bytes_read += len(line)
            while not line.endswith(b"\n"):  # skip the rest of an oversized line
                line = stream.readline(1 << 20)
                if not line:
                    return
                hasher.update(line)
                offset += len(line)
                report.bytes_read += len(line)
            report.lines_read += 1
            report.bad_lines += 1
            yield None, offset
            continue
        hasher.update(line)
        offset += len(line)
        report.bytes_read += len(line)
        report.lines_read += 1
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            report.bad_lines += 1
            obj = None
        if obj is not None and not isinstance(obj, dict):
            report.bad_lines += 1
            obj = None
        yield obj, offset


class _EmbedThread:
    """``embed_bulk`` calls on a thread of their own, with a connection of their own (a
    ZeroMQ socket belongs to the thread that made it)."""

    def __init__(self, client: Any) -> None:
        self.config, self.endpoint = client.config, getattr(client, "endpoint", None)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mine-embed")
        self.client: Any = None  # made on the thread, on first use

    def submit(self, texts: list[str]) -> Future[bytes | None]:
        return self.pool.submit(self._embed, texts)

    def _embed(self, texts: list[str]) -> bytes | None:
        if not texts:
            return None
        if self.client is None:
            self.client = Client(self.config, autostart=False, endpoint=self.endpoint)
        data = self.client.call(
            Method.EMBED_BULK,
            {"texts": texts},
            timeout=IMPORT_TIMEOUT_S + IMPORT_PER_DRAWER_S * len(texts),
        )
        return p.convert(data, EmbedResult).vectors

    def close(self) -> None:
        """Close the thread's connection on its thread, then end the thread (a ``mine``
        that failed calls this too: an open socket would hold the process at exit)."""

        def closing() -> None:
            if self.client is not None:
                self.client.close()
                self.client = None

        with contextlib.suppress(RuntimeError):  # closed already
            self.pool.submit(closing).result()
        self.pool.shutdown()


class _Miner:
    """Batches exchanges and writes them, one batch's embedding overlapping the previous
    batch's imports: ``flush`` hands a full batch to the embedding thread, then imports
    the batch before it (whose vectors are ready by then, or soon) and saves its progress.
    The model, the bottleneck, is never idle waiting for the writer's commits."""

    def __init__(
        self,
        client: Any,
        palace: str,
        store: ProgressStore,
        limit: int,
        report: MineReport,
        on_progress: Callable[[MineReport], None] | None,
        batch_size: int,
    ) -> None:
        self.client, self.palace, self.store, self.limit = client, palace, store, limit
        self.report, self.on_progress, self.batch_size = report, on_progress, batch_size
        self.batch: list[_Item] = []
        self.bulk_lane = True  # the daemon has ``embed_bulk`` (until it says otherwise)
        self.embedding = _EmbedThread(client)
        # The batch handed to the embedding thread, waiting to be imported.
        self.pending: tuple[list[_Item], Future[bytes | None]] | None = None

    def add(self, item: _Item) -> None:
        self.batch.append(item)
        if item.drawer is not None:
            self.report.exchanges += 1
        if sum(i.drawer is not None for i in self.batch) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Start embedding the current batch; import the one before it."""
        batch, self.batch = self.batch, []
        texts = [i.drawer.content for i in batch if i.drawer is not None]
        future = self.embedding.submit(texts if texts and self.bulk_lane else [])
        self.write_pending()
        self.pending = (batch, future)

    def finish(self) -> None:
        """Write everything: the batch being filled and the one being embedded."""
        self.flush()
        self.write_pending()

    def write_pending(self) -> None:
        if self.pending is None:
            return
        batch, future = self.pending
        self.pending = None
        drawers = [i.drawer for i in batch if i.drawer is not None]
        self._give_vectors(drawers, future)
        for start in range(0, len(drawers), IMPORT_SLICE):
            chunk = drawers[start : start + IMPORT_SLICE]
            data = self.client.call(
                Method.PALACE_IMPORT,
                {"drawers": chunk, "triples": [], "mix_context": True},
                palace=self.palace,
                timeout=IMPORT_TIMEOUT_S + IMPORT_PER_DRAWER_S * len(chunk),
            )
            result = p.convert(data, ImportResult)
            self.report.stored += result.imported
            self.report.skipped += result.skipped
            self.report.redacted += result.redacted
        # Only now, acknowledged and durable, does the progress move past these drawers.
        changed = False
        for item in batch:
            if item.progress is not None:
                self.store.files[item.key] = item.progress
                changed = True
        if changed:
            self.store.save()
        if self.on_progress is not None:
            self.on_progress(self.report)

    def _give_vectors(self, drawers: list[ImportDrawer], future: Future[bytes | None]) -> None:
        """Each drawer's vector from the bulk lane (see the module doc). A daemon older
        than the lane answers UNKNOWN_METHOD: its writer embeds them, as before."""
        try:
            vectors = future.result()
        except p.TrustyError as exc:
            if exc.code != p.ErrorCode.UNKNOWN_METHOD:
                raise
            self.bulk_lane = False
            return
        if vectors is None or not drawers:
            return
        size = len(vectors) // len(drawers)
        for i, d in enumerate(drawers):
            d.vector = vectors[i * size : (i + 1) * size]

    def jsonl(self, path: Path, fmt: str) -> None:
        key = str(path.resolve())
        stream, st = _open_regular(path)
        with stream:
            saved = self.store.get(key)
            start, hasher = _resume(stream, st, saved)
            self.report.bytes_read += start
            was_open = (saved or {}).get("claude_open")
            if not isinstance(was_open, dict) or was_open.get("start") != start:
                was_open = None  # not read again from the open exchange's first line
            if saved is not None and start == 0 and saved.get("offset") and was_open is None:
                self.report.files_reread += 1
            parser = (claude_code.Parser if fmt == "claude-code" else codex.Parser)(key)
            if isinstance(parser, codex.Parser) and start > 0 and saved is not None:
                _session_meta(path, parser)
                parser.resume(saved)
            if isinstance(parser, claude_code.Parser):
                parser.start_at(start, hasher.hexdigest())
            ident = {"format": fmt, "dev": st.st_dev, "ino": st.st_ino}
            end, digest = start, hasher.hexdigest()
            for obj, end in _lines(stream, start, hasher, self.report):
                digest = hasher.hexdigest()
                if obj is None:
                    continue
                done = parser.feed(obj, end, digest)
                if done is not None:
                    self._exchange(done, key, ident, was_open)
            done = parser.finish()
            if done is not None:
                self._exchange(done, key, ident, was_open)
            # Lines after the last exchange (summaries, tool results) are consumed too.
            if isinstance(parser, codex.Parser):
                tail = parser.resume_state()
            elif done is not None:  # the last exchange may go on: where it starts, and
                tail = {"claude_open": _open_state(done, self.limit)}  # what was stored of it
            elif end == start and saved is not None and "claude_open" in saved:
                tail = {"claude_open": saved["claude_open"]}  # nothing new: still open
            else:
                tail = {}
            self.add(_Item(None, key, {**ident, "offset": end, "sha256": digest, **tail}))

    def _exchange(
        self, ex: Exchange, key: str, ident: dict[str, Any], was_open: object = None
    ) -> None:
        drawer = _drawer(ex, self.limit)
        progress = {**ident, "offset": ex.end, "sha256": ex.digest}
        # The exchange the last run stored while it was still open, read again whole: the
        # same text adds nothing, a longer one updates that drawer.
        stored = was_open if isinstance(was_open, dict) and was_open.get("key") == ex.key else None
        if stored is not None and (stored.get("sha") == _sha(drawer.content) or self._grow(drawer)):
            self.add(_Item(None, key, progress))
            return
        self.add(_Item(drawer, key, progress))

    def _grow(self, drawer: ImportDrawer) -> bool:
        """Give the stored drawer of an exchange that went on its whole text
        (``memory_update``: the shorter version goes to the archive); False when that
        drawer is gone (deleted since), so it is imported again."""
        try:
            self.client.call(
                Method.MEMORY_UPDATE,
                {"drawer_id": drawer.drawer_id, "text": drawer.content},
                palace=self.palace,
                timeout=IMPORT_TIMEOUT_S,
            )
        except p.TrustyError as exc:
            if exc.code != p.ErrorCode.DRAWER_NOT_FOUND:
                raise
            return False
        self.report.exchanges += 1
        self.report.updated += 1
        return True

    def whole(self, path: Path, fmt: str) -> None:
        key = str(path.resolve())
        stream, st = _open_regular(path)
        with stream:
            raw = stream.read(MAX_WHOLE_FILE + 1)
        if len(raw) > MAX_WHOLE_FILE:
            self.report.refused.append(f"{path}: larger than {MAX_WHOLE_FILE} bytes")
            return
        self.report.bytes_read += len(raw)
        digest = hashlib.sha256(raw).hexdigest()
        saved = self.store.get(key)
        if saved and saved.get("sha256") == digest and saved.get("format") == fmt:
            self.report.files_unchanged += 1
            return
        source = str(path.resolve())
        if fmt == "markdown":
            when = datetime.fromtimestamp(st.st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            found: Iterable[Exchange] = markdown.exchanges(
                raw.decode(errors="replace"), source, self.limit, when
            )
        else:
            try:
                data = json.loads(raw)
            except (ValueError, RecursionError):
                self.report.bad_lines += 1
                return
            module = chatgpt if fmt == "chatgpt" else claude_ai
            found = module.exchanges(data, source)
        for ex in found:
            self.add(_Item(_drawer(ex, self.limit), key, None))
        self.add(_Item(None, key, {"format": fmt, "sha256": digest, "size": len(raw)}))


def _session_meta(path: Path, parser: Any) -> None:
    """A Codex session names itself (id, cwd, branch) once, at the top: a run that
    resumes mid-file reads it there so its drawers carry the same session and room."""
    for raw in _head(path).splitlines()[:5]:
        with contextlib.suppress(ValueError, RecursionError):
            obj = json.loads(raw)
            if codex.looks_like(obj) and obj.get("type") == "session_meta":
                parser.feed(obj, 0, "")
                return


def mine(
    client: Any,
    palace: str,
    paths: Iterable[str | Path],
    fmt: str | None = None,
    on_progress: Callable[[MineReport], None] | None = None,
    *,
    home: Path | None = None,
    batch_size: int = BATCH_SIZE,
) -> MineReport:
    """Mine ``paths`` (files or folders) into ``palace``, creating it when missing.

    ``fmt`` forces a format (None: detected per file). ``on_progress`` is called with the
    report after every acknowledged batch. Returns the report; raises ``TrustyError`` when
    the daemon refuses a batch (what was acknowledged before stays, and so does its
    progress, so running again resumes)."""
    if fmt is not None and fmt not in FORMATS:
        raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"format: one of {', '.join(FORMATS)}")
    config = load_config()
    started = time.monotonic()
    report = MineReport(palace=palace)
    report.palace_created = create_palace(client, palace)
    store = ProgressStore.of_home(home or config.home)
    miner = _Miner(
        client, palace, store, config.palace.max_text_bytes, report, on_progress, batch_size
    )
    files = list(files_under(paths, report))  # listed first: the total to show progress of
    for path in files:
        with contextlib.suppress(OSError):
            report.bytes_total += path.stat().st_size
    try:
        for path in files:
            kind = fmt or detect(path)
            if kind is None:
                report.refused.append(f"{path}: format not recognised (use --format)")
                continue
            try:
                if kind in ("claude-code", "codex"):
                    miner.jsonl(path, kind)
                else:
                    miner.whole(path, kind)
            except OSError as exc:
                report.refused.append(f"{path}: {exc.strerror or exc}")
                continue
            report.files += 1
            report.by_format[kind] = report.by_format.get(kind, 0) + 1
        miner.finish()
    finally:
        miner.embedding.close()
    report.seconds = round(time.monotonic() - started, 3)
    return report
