"""Export of a palace as JSON lines (``jsonl_format.py``), on top of ``Client.call``.

Export pages through the worker (``palace_export`` with a cursor), writing each page as
it arrives: memory stays flat whatever the palace size. Vectors are written as base64
little-endian float32, so an export re-imports byte for byte.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict, Unpack

import msgspec

from trusty_memory.client.jsonl_format import DIM, FORMAT, DrawerLine, HeaderLine, TripleLine
from trusty_memory.client.progress import Progress
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.messages import ExportDrawer, ExportResult
from trusty_memory.common.methods import Method

EXPORT_PAGE = 1000
MAX_LINKS = 40  # symbolic links an export follows to its file: the kernel's own limit
_encoder = msgspec.json.Encoder()


@dataclass
class ExportSummary:
    drawers: int = 0
    triples: int = 0


class ExportSink(Protocol):
    """Where ``export_jsonl`` writes: a binary stream (``sys.stdout.buffer``), or the
    ``_ExportFile`` that names its path in a write failure."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> object: ...


class ExportOptions(TypedDict, total=False):
    """``export_jsonl``'s keyword options, as ``export_file`` passes them on."""

    vectors: bool
    page_size: int
    progress: Progress | None


def _drawer_line(d: ExportDrawer) -> bytes:
    """A drawer's line; ``own_vector`` only where there is one (``context`` always: null
    says "none", which a missing key would not)."""
    line = msgspec.to_builtins(DrawerLine(**msgspec.structs.asdict(d)))
    if line.get("own_vector") is None:
        line.pop("own_vector", None)
    return _encoder.encode(line)


def export_jsonl(
    client: Client,
    palace: str,
    out: ExportSink,
    *,
    vectors: bool = True,
    page_size: int = EXPORT_PAGE,
    progress: Progress | None = None,
) -> ExportSummary:
    """Write ``palace`` as JSONL to ``out``: a header, every drawer, every triple."""
    summary = ExportSummary()
    header = HeaderLine(format=FORMAT, palace=palace, dim=DIM if vectors else None)
    out.write(_encoder.encode(header) + b"\n")
    for kind in ("drawers", "triples"):
        after = 0
        while True:
            params = {"kind": kind, "after": after, "limit": page_size, "vectors": vectors}
            page = p.convert(client.call(Method.PALACE_EXPORT, params, palace=palace), ExportResult)
            lines = [_drawer_line(d) for d in page.drawers]
            lines += [
                _encoder.encode(TripleLine(**msgspec.structs.asdict(t))) for t in page.triples
            ]
            if lines:
                out.write(b"\n".join(lines) + b"\n")
            summary.drawers += len(page.drawers)
            summary.triples += len(page.triples)
            if progress is not None:
                progress.update(summary.drawers + summary.triples, unit="records")
            if page.next_after is None:
                break
            after = page.next_after
    out.flush()
    return summary


def export_file(
    client: Client, palace: str, path: Path, **options: Unpack[ExportOptions]
) -> ExportSummary:
    """``export_jsonl`` into the file ``path``, which only ever appears whole: the lines go
    to a new temporary file beside it (random name, created exclusively, mode 0600), flushed
    to disk and renamed into place. An export that fails or is interrupted leaves no
    truncated file, which would import without a word as if it were the whole palace, and
    never replaces the last good export of that name. A path that is a named pipe or a
    device (``/dev/stdout``) is written straight through.

    ``path`` may be in a folder others can write to (``/tmp``), so nothing there is taken
    on trust: a symbolic link is followed only when it is the caller's (or root's) and
    so is what it leads to (or, when that does not exist yet, its folder); a pipe or
    device only when it is theirs. Otherwise, or when the file cannot be written, the
    ``TrustyError`` names the path and the cause, and nothing was touched."""
    final, found = _export_target(path)
    if found is not None and not stat.S_ISREG(found.st_mode):
        return _export_through(client, palace, path, found, options)
    return _export_replacing(client, palace, path, final, options)


def _export_target(named: Path) -> tuple[Path, os.stat_result | None]:
    """Where an export to ``named`` goes: the path at the end of its symbolic links and
    what is there (None: nothing yet). Raises, having touched nothing, when a link on the
    way or what it leads to is someone else's, or when ``named`` is a folder."""
    path, found, links = named, None, 0
    while True:
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            found = None
            break
        except OSError as exc:  # ENOTDIR: a file where a folder should be
            raise _cannot_write(named, exc) from None
        if not stat.S_ISLNK(found.st_mode):
            break
        if found.st_uid not in _trusted_uids():
            link = "it is a symbolic link" if not links else f"it leads through {path}, a link"
            raise _refused(named, f"{link} owned by {_owner(found.st_uid)}, not by you")
        links += 1
        if links > MAX_LINKS:
            raise _cannot_write(named, OSError(errno.ELOOP, os.strerror(errno.ELOOP)))
        path = Path(path.parent, os.readlink(path))
    if found is None and links:
        # A link only the kernel can follow (``/proc/self/fd/1`` names ``pipe:[...]``).
        with contextlib.suppress(OSError):
            found = os.stat(named)
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise _cannot_write(named, OSError(errno.EISDIR, os.strerror(errno.EISDIR)))
    if found is not None and (links or not stat.S_ISREG(found.st_mode)):
        if found.st_uid not in _trusted_uids():
            what = f"a symbolic link to {path}, which is" if links else _kind(found)
            raise _refused(named, f"it is {what} owned by {_owner(found.st_uid)}, not by you")
    elif found is None and links:
        try:
            folder = os.stat(path.parent)
        except OSError as exc:
            raise _cannot_write(named, exc) from None
        if folder.st_uid not in _trusted_uids():
            raise _refused(
                named,
                f"it is a symbolic link to {path}, which does not exist yet, in a folder"
                f" owned by {_owner(folder.st_uid)}, not by you",
            )
    return path, found


def _trusted_uids() -> set[int]:
    """Whose links and files an export may follow and write: the caller's, and root's
    (``/dev/stdout``, ``/dev/null``: root could do anything to the caller anyway)."""
    return {os.geteuid(), 0}


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _kind(found: os.stat_result) -> str:
    if stat.S_ISFIFO(found.st_mode):
        return "a named pipe"
    if stat.S_ISCHR(found.st_mode) or stat.S_ISBLK(found.st_mode):
        return "a device"
    return "a special file"


def _export_replacing(
    client: Client, palace: str, named: Path, final: Path, options: ExportOptions
) -> ExportSummary:
    """Write a new temporary file beside ``final`` and rename it onto ``final`` once whole.
    The rename replaces whatever name is there and never follows it."""
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    except OSError as exc:
        raise _cannot_write(named, exc) from None
    tmp = Path(tmp_name)
    out = _ExportFile(fd, named)
    try:
        summary = export_jsonl(client, palace, out, **options)
        out.sync()
        out.close()
        try:
            os.replace(tmp, final)
        except OSError as exc:
            raise _cannot_write(named, exc, " (renaming the finished export into place)") from None
    except BaseException:
        out.discard()
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return summary


def _export_through(
    client: Client, palace: str, named: Path, found: os.stat_result, options: ExportOptions
) -> ExportSummary:
    """Write into the pipe or device ``named``, checked by ``_export_target`` as
    ``found``; refused when what opens is not that (swapped in meanwhile)."""
    try:
        fd = os.open(named, os.O_WRONLY | os.O_NOCTTY)
    except OSError as exc:
        raise _cannot_write(named, exc) from None
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        raise _refused(named, "it was replaced while it was being checked")
    out = _ExportFile(fd, named)
    try:
        summary = export_jsonl(client, palace, out, **options)
        out.close()
    except BaseException:
        out.discard()
        raise
    return summary


class _ExportFile:
    """The file an export writes, as ``export_jsonl``'s ``out``: a failure to write it (a
    full disk, a pipe whose reader left) is raised as the ``TrustyError`` naming the path
    the user gave and the cause. Only the file's own calls are caught: a lost daemon is
    an ``OSError`` too (``ConnectionError``), and is no fault of the path."""

    def __init__(self, fd: int, named: Path) -> None:
        self.file = os.fdopen(fd, "wb")
        self.named = named

    def write(self, data: bytes) -> None:
        with self._failing():
            self.file.write(data)

    def flush(self) -> None:
        with self._failing():
            self.file.flush()

    def sync(self) -> None:
        with self._failing():
            self.file.flush()
            os.fsync(self.file.fileno())

    def close(self) -> None:
        with self._failing():
            self.file.close()

    def discard(self) -> None:
        """Close after a failure; what is still buffered is dropped."""
        with contextlib.suppress(OSError):
            self.file.close()

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise _cannot_write(self.named, exc) from None


def _cannot_write(named: Path, exc: OSError, doing: str = "") -> p.TrustyError:
    """The error for a path the export could not write: ``named`` is what the user gave."""
    why = exc.strerror or str(exc)
    return p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"export: cannot write {named}: {why}{doing}")


def _refused(named: Path, why: str) -> p.TrustyError:
    return p.TrustyError(
        p.ErrorCode.INVALID_PARAMS, f"export: refusing to write {named}: {why}; nothing was written"
    )
