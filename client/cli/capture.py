"""Capture verbs. ``mine`` files transcripts and notes into a palace; the work is in
``client/capture/mine.py``, this handler parses, shows progress and prints the report."""

from __future__ import annotations

from trusty_memory.client.cli.output import daemon_client, output
from trusty_memory.client.cli.parser import command
from trusty_memory.common.names import validate_palace_name

MINE_FORMATS = ("auto", "claude-code", "codex", "chatgpt", "claude-ai", "markdown")


class MineProgress:
    """Progress on stderr, as an import shows it (``client.progress.Progress``): on a terminal
    one line redrawn each second with the share of the files' bytes read, exchanges found,
    drawers stored, the rate and the seconds, so it moves while a batch is embedded;
    elsewhere (a log, a hook's output file) a line every few seconds and one at the end."""

    def __init__(self, palace: str) -> None:
        from trusty_memory.client.progress import Progress  # lazy: mine only

        self.shown = Progress(f"mine {palace}")

    def __call__(self, report) -> None:
        fraction = None
        if report.bytes_total:
            fraction = min(1.0, report.bytes_read / report.bytes_total)
        self.shown.update(report.exchanges, "exchanges", fraction, report.stored)

    def finish(self, report) -> None:
        self(report)
        self.shown.finish()

    def close(self) -> None:
        self.shown.close()


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
    from trusty_memory.client.capture.mine import mine  # lazy: numpy and pyzmq; mine only

    palace = validate_palace_name(args.palace)
    progress = MineProgress(palace)
    try:
        report = mine(
            daemon_client(),
            palace,
            args.paths,
            None if args.format == "auto" else args.format,
            on_progress=progress,
        )
        progress.finish(report)
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
