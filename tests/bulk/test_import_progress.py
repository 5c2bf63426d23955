"""Import's progress report (issue 40): while a batch is stored it shows every line read
before it went, and it ends on a last line that counts the last batch and says 100%, on
a terminal or not. The report's own logic against a stand-in daemon, then the real
command and daemon without a terminal.

Covers: client/progress.py client/bulk.py client/cli/transfer.py
"""

from __future__ import annotations

import io
import json
import re

from tests.conftest import run_cli
from trusty_memory.client.bulk import import_jsonl
from trusty_memory.client.progress import Progress

LAST_LINE = re.compile(r"^import (\S+): 100\.0% (\d+) lines, (\d+) stored, [\d,]+/s, [\d,]+ s$")


class StandIn:
    """A daemon that stores every batch, noting what the progress report said meanwhile."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.seen: list[tuple] = []

    def call(self, method: str, params: dict, **_: object) -> dict:
        assert method == "palace_import"
        self.seen.append(self.progress.state)
        return {"imported": len(params["drawers"]), "skipped": 0}


def notes(n: int) -> bytes:
    return b"".join(json.dumps({"content": f"note {i}"}).encode() + b"\n" for i in range(n))


def test_a_batch_in_flight_shows_its_lines_and_the_last_line_says_100_percent():
    data = b"\xef\xbb\xbf" + notes(5)  # a byte-order mark is never counted as read
    stream = io.StringIO()
    progress = Progress("import demo", stream=stream, every_s=3600)  # no clock lines here
    daemon = StandIn(progress)
    summary = import_jsonl(
        daemon,  # type: ignore[arg-type]
        "demo",
        io.BytesIO(data),
        max_text_bytes=10_000,
        batch_size=2,
        progress=progress,
        total_bytes=len(data),
    )
    assert summary.imported == 5
    # (lines read, unit, fraction, stored) as each batch went: its own lines were read.
    assert [(s[0], s[3]) for s in daemon.seen] == [(2, 0), (4, 2), (5, 4)]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and LAST_LINE.match(lines[0]), lines  # a short run's one line
    assert LAST_LINE.match(lines[0]).groups() == ("demo", "5", "5")
    assert progress.stopped.is_set()


def test_the_command_ends_on_a_100_percent_line_without_a_terminal(daemon, tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_bytes(
        notes(4) + b'{"type": "triple", "subject": "auth-service", "predicate": "deployed_version",'
        b' "object": "2.4.1", "valid_from": "2026-05-10T14:32:00Z"}\n'
    )
    done = run_cli(daemon, "import", "progress-end", str(path), "--batch-size", "3")
    assert done.returncode == 0, (done.stdout, done.stderr)
    last = done.stderr.splitlines()[-1]
    assert "\r" not in done.stderr
    assert LAST_LINE.match(last) and LAST_LINE.match(last).groups() == ("progress-end", "5", "4")
    assert done.stdout.startswith("imported 4, skipped 0 existing"), done.stdout

    again = run_cli(daemon, "--json", "import", "progress-end", str(path))
    assert again.returncode == 0 and json.loads(again.stdout)["skipped_existing"] == 4
    assert LAST_LINE.match(again.stderr.splitlines()[-1]).groups() == ("progress-end", "5", "4")


def test_import_help_shows_the_line_format(daemon):
    shown = run_cli(daemon, "import", "--help").stdout
    assert '{"content": "The staging DB listens on port 5433"' in shown
    assert '"type": "triple"' in shown and "100.0%" in shown
