"""Streaming import of a palace's JSON lines (``jsonl_format.py`` says what a line
holds), on top of ``Client.call``. Export, the other way, is ``export.py``.

Import reads the stream line by line and sends batches of ``batch_size`` lines, each as one
``palace_import`` request, which the palace worker stores as one transaction. Every line
of a batch is validated here first (with the worker's own checks, ``common/import_checks.py``); a
batch holding a bad line is not sent at all, so a file is never half-imported batch-wise,
and every bad line is reported with its number and cause. ``Progress`` reports how far it
is as it goes, on a terminal or not. Import is idempotent by drawer
id, so after a failure the same command can simply be run again: a drawer id the palace
holds with the same content is skipped. A drawer id that comes twice in one file is a bad
line, and so is one the palace holds with other content (found once its batch is in: the
worker skips it, and the rest of that batch stays). A line longer than
``max_line_bytes`` (input without newlines: ``/dev/zero``) is a bad line that ends the
reading, so memory stays bounded whatever the input.

``import_file`` is what the command line runs: it creates the palace when it is missing,
and when the import then fails (bad lines, a batch the worker refused, an interruption)
it takes that palace away again, so a failed import leaves no palace behind: removed when
nothing got in, else moved to the archive with what did (``palace restore`` brings it
back, and the same import then resumes). A palace that existed before is never touched:
what got in stays, and re-running resumes.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import msgspec

from trusty_memory.client.jsonl_format import DIM, DrawerFields, Line, TripleLine
from trusty_memory.client.progress import Progress
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.import_checks import check_drawer, check_triple
from trusty_memory.common.json_depth import nesting_over
from trusty_memory.common.messages import (
    ImportDrawer,
    ImportResult,
    ImportTriple,
)
from trusty_memory.common.methods import Method

BATCH_SIZE = 500
MAX_BAD_SHOWN = 100
# Per-request deadline of an import batch: a base that covers a cold embedder loading its
# model, plus a per-line allowance (hnswlib adds ~1,000-1,600 vectors/s at
# ef_construction=200 on 2 cores, embedding ~250 texts/s).
IMPORT_BASE_TIMEOUT_S = 150.0
IMPORT_PER_VECTOR_S = 0.01
IMPORT_PER_EMBED_S = 0.05
# The longest line import reads, newline not counted (``max_line_bytes``): content and
# context may each hold ``max_text_bytes``, which JSON writes at up to 6 bytes a byte
# (``\u0001``); the slack holds two vectors as lists of numbers (~10 KB each), tags,
# metadata and the other fields.
JSON_ESCAPE_MAX = 6
LINE_SLACK_BYTES = 8 * 1024 * 1024
# How deeply a line's values may nest (``{"a": [[...]]}`` counts each bracket). msgspec
# raises ``RecursionError`` past Python's stack (a few thousand levels), and everything
# downstream (the secrets scan, the store) walks metadata recursively: a line nested
# deeper than this is a bad line, named by number, and never reaches a worker.
MAX_NESTING = 64
# Lines of a file that fail to parse, from its first, before the file is taken to be no
# JSON lines at all and the import says so once instead of once per line.
NOT_JSONL_AFTER = 20
UTF8_BOM = b"\xef\xbb\xbf"


_line_decoder = msgspec.json.Decoder(Line)
_untyped_decoder = msgspec.json.Decoder(DrawerFields)


class _TypeProbe(msgspec.Struct):
    """Whether a line names its ``type`` at all (other fields are ignored): asked of the
    line itself, not read from msgspec's wording of the error, which changes between
    releases."""

    type: object = msgspec.UNSET


_type_probe = msgspec.json.Decoder(_TypeProbe)


@dataclass
class BadLine:
    lineno: int
    error: str


@dataclass
class ImportSummary:
    lines: int = 0
    imported: int = 0
    skipped: int = 0  # drawer ids already in the palace
    triples_imported: int = 0
    triples_skipped: int = 0
    held_back: int = 0  # good lines not sent because their batch held a bad one
    would_import: int = 0  # a dry run: drawers that passed validation
    would_import_triples: int = 0
    bad: list[BadLine] = field(default_factory=list)
    error: str | None = None  # a batch the worker refused for a reason not in the lines
    # What became of a palace this import created, once it failed: palace_delete's answer
    # ("removed", or "archived" with its entry), or {"status": "failed", "error": ...}.
    created_palace: dict[str, Any] | None = None
    interrupted: bool = False  # stopped by SIGINT/SIGTERM (``import_file``)

    @property
    def ok(self) -> bool:
        return not self.bad and self.error is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "imported": self.imported,
            "skipped_existing": self.skipped,
            "triples_imported": self.triples_imported,
            "triples_skipped": self.triples_skipped,
            "bad_lines": len(self.bad),
            "held_back": self.held_back,
            "would_import": self.would_import,
            "would_import_triples": self.would_import_triples,
            "error": self.error,
            "created_palace": self.created_palace,
            "interrupted": self.interrupted,
        }


def max_line_bytes(max_text_bytes: int) -> int:
    """The longest line (newline not counted) an import into a palace whose texts may
    hold ``max_text_bytes`` reads: a line of valid fields at their largest fits."""
    return 2 * JSON_ESCAPE_MAX * max_text_bytes + LINE_SLACK_BYTES


def read_lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` for each line of ``stream``; ``None`` for a line longer
    than ``limit`` bytes, and then nothing more: what follows may have no end (``/dev/zero``),
    so no reader could find the next line in bounded memory and time."""
    lineno = 0
    while raw := stream.readline(limit + 1):
        lineno += 1
        if lineno == 1 and raw.startswith(UTF8_BOM):
            # Editors on Windows start UTF-8 files with a byte-order mark; it is no part
            # of the first line's JSON.
            raw = raw[len(UTF8_BOM) :]
        if len(raw) > limit and not raw.endswith(b"\n"):
            yield lineno, None
            return
        yield lineno, raw


def parse_line(
    raw: bytes, max_text_bytes: int, dim: int = DIM
) -> ImportDrawer | ImportTriple | None:
    """One JSONL line as what ``palace_import`` takes (None: header or blank line).

    Raises ``ValueError`` naming the cause (msgspec names the field: ``at `$.content```).
    """
    return _parse(raw, max_text_bytes, dim)[0]


def _parse(
    raw: bytes, max_text_bytes: int, dim: int = DIM
) -> tuple[ImportDrawer | ImportTriple | None, bool]:
    """``parse_line``, and whether the line's drawer id was derived (it named none)."""
    if not raw.strip():
        return None, False
    _check_nesting(raw)
    line: Line | DrawerFields
    try:
        line = _line_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        if not _names_no_type(raw):
            raise ValueError(str(exc)) from None
        line = _untyped(raw)  # no "type": a drawer, as a file written by hand has them
    except msgspec.DecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    try:
        if isinstance(line, DrawerFields):
            # Checked as the file has it (vectors as lists of numbers or bytes); what is
            # sent holds the checked vectors, unit float32 bytes, and the id (derived when
            # the line names none).
            checked = check_drawer(line, dim, max_text_bytes)
            drawer = ImportDrawer(
                drawer_id=checked.id,
                content=line.content,
                room=line.room,
                tags=line.tags,
                importance=line.importance,
                created_at=line.created_at,
                hits=line.hits,
                metadata=line.metadata,
                vector=checked.vector,
                own_vector=checked.own_vector,
                context=line.context,
            )
            return drawer, line.drawer_id is None
        if isinstance(line, TripleLine):
            triple = ImportTriple(**msgspec.structs.asdict(line))
            check_triple(triple)
            return triple, False
    except p.TrustyError as exc:
        raise ValueError(exc.message) from None
    if line.dim is not None and line.dim != dim:
        raise ValueError(f"header: vectors are {line.dim}-d; this palace takes {dim}")
    return None, False


def _check_nesting(raw: bytes) -> None:
    """Raise ``ValueError`` when ``raw`` nests arrays/objects deeper than ``MAX_NESTING``.

    Checked on the bytes, before decoding, because the decoder itself overflows the stack
    on deep input (``RecursionError``, a traceback instead of a bad line)."""
    if nesting_over(raw, MAX_NESTING):
        raise ValueError(f"nested more than {MAX_NESTING} levels deep (arrays and objects)")


def _id_of(drawer: ImportDrawer) -> str:
    """A parsed drawer's id: ``_parse`` gives every drawer one (``check_drawer`` derives
    it when the line names none), though the wire type lets a sender leave it out."""
    assert drawer.drawer_id is not None, "a parsed drawer always has its id"
    return drawer.drawer_id


def _names_no_type(raw: bytes) -> bool:
    """True for a JSON object without a ``type`` key (a drawer, as hand-written files have
    them); False for one that names a type, and for any other JSON value."""
    try:
        return _type_probe.decode(raw).type is msgspec.UNSET
    except msgspec.ValidationError:
        return False


def _untyped(raw: bytes) -> DrawerFields:
    try:
        return _untyped_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{exc} (a line without a type is a drawer)") from None


def _check_unique(
    item: ImportDrawer | ImportTriple | None,
    lineno: int,
    seen: dict[str, int],
    derived: bool = False,
) -> None:
    """Raise ``ValueError`` when ``item`` is a drawer whose id an earlier line of this
    file had: the worker would skip it as if the palace held it, and one of the two
    lines would be lost without a word. ``seen``: drawer id -> its first line. Not for
    a ``derived`` id: two lines with one derived id hold the same drawer (text, room,
    metadata), so skipping the second loses nothing."""
    if not isinstance(item, ImportDrawer) or derived:
        return
    drawer_id = _id_of(item)
    first = seen.setdefault(drawer_id, lineno)
    if first != lineno:
        raise ValueError(
            f"drawer id {drawer_id} appears twice in this file (first on line {first})"
        )


def import_file(
    client: Client,
    palace: str,
    stream: IO[bytes],
    *,
    on_interrupt: Callable[[bool], None] | None = None,
    **options: Any,
) -> ImportSummary:
    """``import_jsonl`` into ``palace``, created when missing (not by a dry run). If this
    call created it and the import fails or is interrupted, the palace is removed (nothing
    got in) or archived (some batches did); one that existed before is left as it is.

    An interrupt (SIGINT/SIGTERM) is answered at once: the progress report stops, the
    batch in flight is not waited for (its socket is closed: the palace stores or drops
    it whole, and re-running skips what it stored) and ``on_interrupt(created)`` is
    called, so the caller can say so before taking a created palace away, which waits
    for the palace."""
    created = False
    summary = ImportSummary()
    try:
        if not options.get("dry_run"):
            # Held interrupts: a Ctrl-C landing after the daemon made the palace but before
            # its answer came would otherwise leave a palace this call never knew it made.
            with held_interrupts():
                created = create_palace(client, palace)
        import_jsonl(client, palace, stream, summary=summary, **options)
    except KeyboardInterrupt:
        summary.error, summary.interrupted = "interrupted", True
        if options.get("progress") is not None:
            options["progress"].close()
        client.close()  # the batch in flight's answer is dropped, not waited for
        if on_interrupt is not None:
            on_interrupt(created)
    except OSError as exc:
        summary.error = f"cannot read the input: {exc.strerror or exc}"
    except BaseException:
        if created:
            discard_created(client, palace)
        raise
    if created and not summary.ok:
        summary.created_palace = discard_created(client, palace)
    return summary


def create_palace(client: Client, palace: str) -> bool:
    """Create ``palace``; False when it was there already."""
    try:
        client.palace_create(palace)
    except p.TrustyError as exc:
        if exc.code != p.ErrorCode.PALACE_EXISTS:
            raise
        return False
    return True


def discard_created(client: Client, palace: str) -> dict[str, Any]:
    """Take away a palace a failed import created: removed if it holds nothing, else
    archived. Never raises: the import's own failure is what the caller reports. A Ctrl-C
    meanwhile waits for the clean-up and is then dropped: the import is ending anyway."""
    result: dict[str, Any] = {}
    with contextlib.suppress(KeyboardInterrupt), held_interrupts():
        try:
            result = client.palace_delete(palace, discard_empty=True)
        except p.TrustyError as exc:
            result = {"palace": palace, "status": "failed", "error": exc.message}
    return result


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then raise ``KeyboardInterrupt`` if
    one came. A second one raises at once: with the daemon hung, the block may wait out a
    request's deadline, and whoever presses Ctrl-C twice means it. Signal handlers belong
    to the main thread, so elsewhere this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        if came:
            raise KeyboardInterrupt
        came.append(signum)

    before = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if came:
        raise KeyboardInterrupt


def import_jsonl(
    client: Client,
    palace: str,
    stream: IO[bytes],
    *,
    max_text_bytes: int,
    batch_size: int = BATCH_SIZE,
    dry_run: bool = False,
    progress: Progress | None = None,
    total_bytes: int | None = None,
    summary: ImportSummary | None = None,
) -> ImportSummary:
    """Import a JSONL stream into ``palace`` batch by batch; see the module doc. The counts
    go into ``summary`` when given (so they are there if the stream raises)."""
    summary = summary if summary is not None else ImportSummary()
    batch: list[tuple[int, ImportDrawer | ImportTriple]] = []
    batch_bad = False
    read = 0
    limit = max_line_bytes(max_text_bytes)
    seen: dict[str, int] = {}
    for lineno, raw in read_lines(stream, limit):
        summary.lines = lineno
        if raw is None:
            why = f"longer than {limit:,} bytes, the limit of a line; nothing after it was read"
            summary.bad.append(BadLine(lineno, why))
            _flush(client, palace, batch, True, dry_run, summary)  # held back with it
            return summary
        read += len(raw)
        try:
            item, derived = _parse(raw, max_text_bytes)
            _check_unique(item, lineno, seen, derived)
        except ValueError as exc:
            summary.bad.append(BadLine(lineno, str(exc)))
            batch_bad = True
            item = None
        if not_jsonl := _not_jsonl(raw, lineno, summary, _name_of(stream)):
            # Said once, for the whole file, instead of the same error on every line.
            # The first lines all bad are one error, at line 1; after good lines, a
            # binary line's error is said once, in place of its own, and reading stops.
            first_all_bad = len(summary.bad) == lineno
            kept = [] if first_all_bad else summary.bad[:-1]
            summary.bad = [*kept, BadLine(1 if first_all_bad else lineno, not_jsonl)]
            _flush(client, palace, batch, True, dry_run, summary)  # held back with it
            return summary
        if item is not None:
            batch.append((lineno, item))
        fraction = read / total_bytes if total_bytes else None
        if progress is not None:  # first: while a batch is stored, this line was read
            _report(progress, lineno, fraction, summary, dry_run)
        if len(batch) >= batch_size:
            if not _flush(client, palace, batch, batch_bad, dry_run, summary):
                return summary
            batch, batch_bad = [], False
            if progress is not None:  # and now its drawers are stored
                _report(progress, lineno, fraction, summary, dry_run)
    if batch or batch_bad:
        _flush(client, palace, batch, batch_bad, dry_run, summary)
    if progress is not None:
        # Every line read and every batch stored: the last report says so, whatever the
        # interval (a file's byte-order mark is never counted as read: 100% all the same).
        _report(progress, summary.lines, 1.0 if total_bytes else None, summary, dry_run)
        progress.finish()
    return summary


def _report(
    progress: Progress,
    lineno: int,
    fraction: float | None,
    summary: ImportSummary,
    dry_run: bool,
) -> None:
    """Lines read so far, and the drawers the palace holds of them (none on a dry run)."""
    stored = None if dry_run else summary.imported + summary.skipped
    progress.update(lineno, fraction=fraction, stored=stored)


def _name_of(stream: IO[bytes]) -> str:
    """What to call the file being read: its path as opened (``<stdin>`` for standard
    input), or "the input" for a stream with no name."""
    name = getattr(stream, "name", None)
    return name if isinstance(name, str) else "the input"


def _not_jsonl(raw: bytes, lineno: int, summary: ImportSummary, name: str) -> str | None:
    """Why the file being imported is no JSON lines at all, or None while it may be: a bad
    line holding a NUL byte (no JSON text holds one: a binary file), or its first
    ``NOT_JSONL_AFTER`` lines all bad. Such a file would otherwise report the same error
    on each of its lines. Called after line ``lineno`` was parsed."""
    if summary.bad and summary.bad[-1].lineno == lineno and b"\0" in raw:
        return (
            f"{name} is not a JSON lines file: it holds NUL bytes (a binary file?); "
            "nothing after this was read"
        )
    if lineno == NOT_JSONL_AFTER and len(summary.bad) == NOT_JSONL_AFTER:
        return (
            f"{name} is not a JSON lines file: its first {NOT_JSONL_AFTER} lines are not JSON "
            f"(line 1: {summary.bad[0].error}); nothing was imported"
        )
    return None


def _flush(
    client: Client,
    palace: str,
    batch: list[tuple[int, ImportDrawer | ImportTriple]],
    has_bad: bool,
    dry_run: bool,
    summary: ImportSummary,
) -> bool:
    """Send one batch (unless it holds a bad line); False: stop, the worker failed."""
    if has_bad or dry_run:
        if has_bad:
            summary.held_back += len(batch)
        else:
            summary.would_import += sum(isinstance(item, ImportDrawer) for _, item in batch)
            summary.would_import_triples += sum(isinstance(item, ImportTriple) for _, item in batch)
        return True
    if not batch:
        return True
    drawers = [item for _, item in batch if isinstance(item, ImportDrawer)]
    triples = [item for _, item in batch if isinstance(item, ImportTriple)]
    embeds = sum(1 for d in drawers if d.vector is None)
    timeout = (
        IMPORT_BASE_TIMEOUT_S + IMPORT_PER_VECTOR_S * len(drawers) + IMPORT_PER_EMBED_S * embeds
    )
    try:
        data = client.call(
            Method.PALACE_IMPORT,
            {"drawers": drawers, "triples": triples},
            palace=palace,
            timeout=timeout,
        )
    except p.TrustyError as exc:
        where = _line_of(exc.message, batch, drawers, triples)
        if where is not None and exc.code.family == "validation":
            summary.bad.append(BadLine(where, exc.message))
            summary.held_back += len(batch) - 1
            return True
        first, last = batch[0][0], batch[-1][0]
        summary.held_back += len(batch)
        summary.error = f"lines {first}-{last}: [{int(exc.code)}] {exc.message}"
        return False
    result = p.convert(data, ImportResult)
    try:
        clashes = _clashes(client, palace, batch) if result.skipped else []
    except p.TrustyError as exc:
        clashes = []
        summary.error = (
            f"lines {batch[0][0]}-{batch[-1][0]}: checking the drawers the palace had:"
            f" [{int(exc.code)}] {exc.message}"
        )
    for lineno, drawer_id in clashes:
        why = f"drawer {drawer_id} exists in the palace with other content; not imported"
        summary.bad.append(BadLine(lineno, why))
    summary.imported += result.imported
    summary.skipped += result.skipped - len(clashes)
    summary.triples_imported += result.triples_imported
    summary.triples_skipped += result.triples_skipped
    return summary.error is None


def _clashes(
    client: Client, palace: str, batch: list[tuple[int, ImportDrawer | ImportTriple]]
) -> list[tuple[int, str]]:
    """``(line, drawer id)`` of each drawer of a stored batch that the palace holds with
    other content. The worker skips an id it already has and says only how many: a drawer
    this batch stored has its line's content, so one whose stored content differs was
    there before with other words. One ``drawer_get`` a drawer, and only for a batch that
    skipped some: a first import pays nothing."""
    found = []
    for lineno, item in batch:
        if not isinstance(item, ImportDrawer):
            continue
        drawer_id = _id_of(item)
        try:
            stored = client.get(palace, drawer_id)
        except p.TrustyError as exc:
            if exc.code == p.ErrorCode.DRAWER_NOT_FOUND:  # forgotten since: nothing to compare
                continue
            raise
        if stored.content != item.content:
            found.append((lineno, drawer_id))
    return found


def _line_of(message: str, batch, drawers, triples) -> int | None:
    """The line number behind a worker error that names ``drawers[i]`` or ``triples[i]``."""
    match = re.search(r"\b(drawers|triples)\[(\d+)\]", message)
    if match is None:
        return None
    items = drawers if match.group(1) == "drawers" else triples
    i = int(match.group(2))
    if i >= len(items):
        return None
    target = items[i]
    return next((lineno for lineno, item in batch if item is target), None)
