"""``export`` and ``import``: a palace as JSON lines and back (``client/bulk.py`` does
the work; here are the files, the progress line and what is said at the end)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from trusty_memory.client.cli.output import daemon_client, output, say
from trusty_memory.client.cli.parser import command
from trusty_memory.common.config import load_config
from trusty_memory.common.human import visible
from trusty_memory.common.protocol import ErrorCode, TrustyError


def cmd_export(args) -> int:
    from trusty_memory.client import export  # lazy: pyzmq; export only
    from trusty_memory.client.progress import Progress  # lazy: export and import only

    client = daemon_client()
    total = client.palace_info(args.palace).drawer_count
    progress = Progress(f"export {visible(args.palace)}", total=total)
    options: export.ExportOptions = {"vectors": not args.no_vectors, "progress": progress}
    try:
        if args.output in (None, "-"):
            summary = export.export_jsonl(client, args.palace, sys.stdout.buffer, **options)
        else:
            # Refusals and write failures are TrustyErrors naming the path and the cause.
            summary = export.export_file(client, args.palace, Path(args.output), **options)
    finally:
        progress.close()  # an error's line starts on a line of its own
    say(f"exported {summary.drawers} drawers, {summary.triples} triples", file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from trusty_memory.client import bulk  # lazy: numpy and pyzmq; import only
    from trusty_memory.client.progress import Progress  # lazy: export and import only

    client = daemon_client()
    progress = Progress(f"import {visible(args.palace)}")
    options = {
        "max_text_bytes": load_config().palace.max_text_bytes,
        "batch_size": args.batch_size,
        "dry_run": args.dry_run,
        "progress": progress,
        "on_interrupt": lambda created: _say_interrupted(args.palace, created),
    }
    # A palace this import creates is taken away again if it fails, a SIGTERM included.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.file == "-":
            summary = bulk.import_file(client, args.palace, sys.stdin.buffer, **options)
        else:
            with open(args.file, "rb") as stream:  # before the palace is created
                options["total_bytes"] = os.fstat(stream.fileno()).st_size
                summary = bulk.import_file(client, args.palace, stream, **options)
    except OSError as exc:  # opening the file: nothing was created yet
        raise TrustyError(
            ErrorCode.INVALID_PARAMS, f"import: cannot read {args.file}: {exc.strerror or exc}"
        ) from None
    finally:
        progress.close()
    for bad in summary.bad[: bulk.MAX_BAD_SHOWN]:  # an error may quote the line it read
        say(f"line {bad.lineno}: {visible(bad.error)}", file=sys.stderr)
    if len(summary.bad) > bulk.MAX_BAD_SHOWN:
        say(f"... and {len(summary.bad) - bulk.MAX_BAD_SHOWN} more bad lines", file=sys.stderr)
    gone = summary.created_palace
    if summary.error:
        resume = "" if gone else " (re-run to resume)"
        say(f"import stopped: {visible(summary.error)}{resume}", file=sys.stderr)
    if gone:
        say(_created_palace_line(args.palace, gone), file=sys.stderr)
    if args.dry_run:
        text = (
            f"would import {summary.would_import} drawers and {summary.would_import_triples}"
            f" triples; {len(summary.bad)} bad lines ({summary.held_back} good lines in"
            " batches with them)"
        )
        output(args, summary.as_dict(), text)
        return 0 if summary.ok else 1
    if summary.interrupted:
        output(args, summary.as_dict(), f"interrupted after importing {summary.imported}")
        return 130
    text = (
        f"imported {summary.imported}, skipped {summary.skipped} existing,"
        f" {len(summary.bad)} bad lines ({summary.held_back} good lines held back with them);"
        f" triples imported {summary.triples_imported}, skipped {summary.triples_skipped}"
    )
    output(args, summary.as_dict(), text)
    return 0 if summary.ok else 1


def _created_palace_line(palace: str, gone: dict) -> str:
    """What a failed import did with the palace it had created."""
    if gone["status"] == "removed":
        return f"removed palace {palace}: this import created it and nothing got in"
    if gone["status"] == "archived":
        return (
            f"moved palace {palace}, which this import created, to the archive with what got"
            f" in ({gone['entry']}): `trusty-memory palace restore {palace}` brings it back,"
            " and the same import then resumes"
        )
    return f"could not take away palace {palace}, which this import created: {gone['error']}"


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def _say_interrupted(palace: str, created: bool) -> None:
    """Said the moment Ctrl-C lands: taking a created palace away waits for it."""
    more = (
        f"; taking away palace {palace}, which this import created (Ctrl-C again: stop waiting)"
        if created
        else ""
    )
    say(f"import {palace}: interrupted{more}", file=sys.stderr, flush=True)


IMPORT_FORMAT = """\
the file: JSON lines, one object a line (what `export` writes). A drawer needs only
"content"; room, tags, importance, created_at, metadata and drawer_id are optional:
  {"content": "The staging DB listens on port 5433", "room": "Configuration", "tags": ["db"]}
A line without drawer_id gets an id derived from its text, room and metadata, so importing
the same file again skips what is in. A knowledge-graph fact says "type": "triple":
  {"type": "triple", "subject": "auth-service", "predicate": "deployed_version",
   "object": "2.4.1", "valid_from": "2026-05-10T14:32:00Z"}
(one object a line in the file; this one is folded here). Bad lines are reported with
their numbers, and a batch holding one is not sent.

progress goes to stderr: lines read, drawers stored, rate and seconds, redrawn on a
terminal, elsewhere a line every 5 s and a last one when every line is stored:
  import notes: 100.0% 5,000 lines, 5,000 stored, 310/s, 16 s"""


def register(sub) -> None:
    s = command(
        sub,
        "export",
        cmd_export,
        "write a palace as JSON lines (drawers, vectors, triples)",
        remote=True,
    )
    s.add_argument("palace", help="palace name")
    s.add_argument("-o", "--output", help="file to write (default: stdout)")
    s.add_argument("--no-vectors", action="store_true", help="leave vectors out (smaller)")

    s = command(
        sub,
        "import",
        cmd_import,
        "load JSON lines into a palace (idempotent by drawer id)",
        remote=True,
    )
    s.formatter_class = argparse.RawDescriptionHelpFormatter
    s.epilog = IMPORT_FORMAT
    s.add_argument("palace", help="palace name (created if missing)")
    s.add_argument("file", help="JSONL file, or - for stdin")
    s.add_argument("--batch-size", type=int, default=500, help="lines per transaction")
    s.add_argument("--dry-run", action="store_true", help="validate every line, send nothing")
