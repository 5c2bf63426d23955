"""Capture verbs. ``mine`` files transcripts and notes into a palace; the work is in
``client/capture/mine.py``, this handler parses, shows progress and prints the report."""

from __future__ import annotations

import sys
import time

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import command

MINE_FORMATS = ("auto", "claude-code", "codex", "chatgpt", "claude-ai", "markdown")
PROGRESS_EVERY_S = 5.0  # a progress line this often when stderr is not a terminal


class MineProgress:
    """Progress on stderr: one line rewritten in place on a terminal, else a line every
    few seconds, so a log or a hook's output file shows the run is alive without filling."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.drawn = False

    def __call__(self, report) -> None:
        now = time.monotonic()
        if not self.tty and now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        line = (
            f"mine {report.palace}: {report.files} files, {report.exchanges} exchanges,"
            f" {report.stored} stored, {report.skipped} already there"
        )
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line)
            self.drawn = True
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def mine_summary(report) -> str:
    lines = []
    if report.palace_created:
        lines.append(f"created palace {report.palace}")
    lines.append(
        f"mined {report.files} files into {report.palace}: {report.exchanges} exchanges found,"
        f" {report.stored} stored, {report.skipped} already there,"
        f" {report.bad_lines} bad lines skipped ({report.lines_read} lines read,"
        f" {report.files_unchanged} files unchanged, {report.files_reread} re-read from the"
        f" start) in {report.seconds:.1f}s"
    )
    lines.extend(f"skipped {why}" for why in report.refused)
    return "\n".join(lines)


def cmd_mine(args) -> int:
    from trusty_memory.client.capture.mine import mine
    from trusty_memory.common.names import validate_palace_name

    palace = validate_palace_name(args.palace)
    progress = MineProgress()
    try:
        report = mine(
            daemon_client(),
            palace,
            args.paths,
            None if args.format == "auto" else args.format,
            on_progress=progress,
        )
    finally:
        progress.close()
    output(args, report.as_dict(), mine_summary(report))
    return 0


def register_mine(sub) -> None:
    s = command(
        sub,
        "mine",
        cmd_mine,
        "file transcripts and notes into a palace (incremental, idempotent)",
        description="Mine Claude Code / Codex transcripts, ChatGPT and Claude.ai exports and"
        " Markdown notes into PALACE (created if missing). Running it again reads only what"
        " is new and adds nothing twice.",
        remote=True,
    )
    s.add_argument("palace", help="palace name (created if missing)")
    s.add_argument("paths", nargs="+", metavar="PATH", help="a file or a folder")
    s.add_argument("--format", choices=MINE_FORMATS, default="auto", help="default: detected")


def register(sub) -> None:
    register_mine(sub)
