"""Stored text never drives the terminal of the person who reads it (issue 36, defect 2).

Anyone who can write to a palace (an agent, a file it read, an import) chooses the text,
room, tags, metadata and facts the command line later prints. Each is stored here holding
the escapes a terminal obeys: OSC 52 (writes the clipboard), ``ESC[2J`` (clears the
screen), an OSC 8 link, OSC 0 (the window title), an SGR colour, a ``\\r`` that would hide
what came before it, an 8-bit CSI and a bidi override. Every verb that shows them, and
every error that quotes an argument, must show them escaped (visible, never obeyed),
while ``--json`` gives back the exact text. The commands run for real, against a real
daemon, on a pipe, and ``show`` once on a pseudo-terminal.

Covers: client/cli/output.py common/human.py client/cli/admin.py client/cli/memory.py
    client/cli/kg.py client/cli/palaces.py
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.conftest import Daemon, _short_tmp, on_pty, run_cli
from trusty_memory.client.cli.admin import shown_log_line
from trusty_memory.common.human import clip, describe, visible

pytestmark = pytest.mark.slow

OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # the clipboard becomes "pwned"
CLEAR = "\x1b[2J"
OSC8 = "\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\"
TITLE = "\x1b]0;root@prod\x07"
SGR = "\x1b[31mred\x1b[0m"
CR = "harmless\rEVIL"
CSI8 = "\x9b2J"  # CSI as one C1 character
BIDI = "\u202eevil\u202c"
HOSTILE = f"staging port 5433 {OSC52} {CLEAR} {OSC8} {TITLE} {SGR} {CR} {CSI8} {BIDI}"
TEXT = f"{HOSTILE}\nsecond line\tafter a tab"
ROOM = f"ops{CLEAR}"
TAG = f"db{TITLE}"
META = {f"from{SGR}": f"file{OSC52}", "line": CR}
DESCRIPTION = f"scratch {OSC8}"
SUBJECT = f"staging{CLEAR}db"
OBJECT = f"port 5433{OSC52}"

# What a terminal obeys: C0 but newline and tab, DEL, C1, the bidi controls.
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[Daemon, str]]:
    """A daemon with palace ``notes`` holding the hostile text, room, tag, description,
    metadata and fact; yields it and the drawer's id."""
    from trusty_memory.client.sync import Client

    home = _short_tmp("tmt-")
    d = Daemon(home).start()
    ok(d, "palace", "create", "notes", "--description", DESCRIPTION)
    drawer = ok(d, "remember", "notes", TEXT, "--room", ROOM, "--tag", TAG).stdout.strip()
    with Client(d.config, autostart=False) as client:
        client.remember("notes", f"metadata holder {CSI8}", metadata=META)
    ok(d, "kg", "assert", "notes", SUBJECT, "listens on", OBJECT)
    yield d, drawer
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def cli(d: Daemon, *args: str) -> subprocess.CompletedProcess:
    """The command's exit status and its stdout and stderr as written: a text-mode pipe
    would turn a raw ``\\r`` into a newline and hide it."""
    done = run_cli(d, *args, text=False)
    done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode()
    return done


def ok(d: Daemon, *args: str) -> subprocess.CompletedProcess:
    done = cli(d, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def assert_shown(out: str, *hostile: str) -> None:
    """Nothing in ``out`` acts on a terminal, and each of ``hostile`` is in it escaped."""
    assert not OBEYED.search(out), repr(out)
    for text in hostile:
        assert visible(text) in out, (visible(text), out)


def test_show_gives_every_field_escaped_and_json_exact(hostile):
    d, drawer = hostile
    out = ok(d, "show", "notes", drawer).stdout
    assert_shown(out, HOSTILE, ROOM, TAG)
    assert "\nsecond line\tafter a tab" in out  # the text keeps its layout
    exact = json.loads(ok(d, "show", "notes", drawer, "--json").stdout)
    assert (exact["content"], exact["room"], exact["tags"]) == (TEXT, ROOM, [TAG])


def test_metadata_is_escaped_key_and_value(hostile):
    d, _ = hostile
    found = json.loads(ok(d, "search", "notes", "metadata holder", "--json").stdout)
    drawer = found["drawers"][0]["drawer_id"]
    out = ok(d, "show", drawer).stdout  # in every palace: the CLI's own loop
    assert_shown(out, *META, *META.values(), CSI8)
    assert json.loads(ok(d, "show", drawer, "--json").stdout)["metadata"] == META


def test_listings_escape_what_they_cut(hostile):
    d, _ = hostile
    for verb in (["recall", "notes", "staging port"], ["list", "notes"], ["search", "notes"]):
        out = ok(d, *verb).stdout
        assert_shown(out, OSC52, CLEAR)
        assert "…" in out  # cut, and still no half escape: nothing raw to split
        whole = json.loads(ok(d, *verb, "--json").stdout)
        hits = whole.get("results") or whole["drawers"]
        assert TEXT in [hit["content"] for hit in hits], verb


def test_stats_and_palace_info(hostile):
    d, _ = hostile
    assert_shown(ok(d, "stats", "notes").stdout, ROOM)
    assert json.loads(ok(d, "stats", "notes", "--json").stdout)["room_counts"][ROOM] == 1
    assert_shown(ok(d, "palace", "info", "notes").stdout, DESCRIPTION)
    info = json.loads(ok(d, "palace", "info", "notes", "--json").stdout)
    assert info["description"] == DESCRIPTION


def test_knowledge_graph_echo_and_query(hostile):
    d, _ = hostile
    echo = ok(d, "kg", "assert", "notes", SUBJECT, "listens on", OBJECT).stdout
    assert_shown(echo, SUBJECT, OBJECT)
    assert_shown(ok(d, "kg", "query", "notes", SUBJECT).stdout, SUBJECT, OBJECT)
    facts = json.loads(ok(d, "kg", "query", "notes", SUBJECT, "--json").stdout)["triples"]
    assert [(f["subject"], f["object"]) for f in facts] == [(SUBJECT, OBJECT)]


@pytest.mark.parametrize(
    "args",
    [
        ["show", "notes", f"{CLEAR}{OSC52}missing\rid"],  # the daemon's message
        ["show", f"{TITLE}missing\nid"],  # the CLI's own, after every palace
        ["list", "notes", f"extra{CLEAR}"],  # argparse's, which quotes what it refused
    ],
)
def test_errors_show_what_they_quote_escaped(hostile, args):
    d, _ = hostile
    done = cli(d, *args)
    assert done.returncode != 0
    assert_shown(done.stderr + done.stdout, args[-1])


def test_an_error_under_json_quotes_the_exact_argument(hostile):
    d, _ = hostile
    missing = f"{CLEAR}missing"
    done = cli(d, "show", "notes", missing, "--json")
    assert done.returncode == 1 and done.stderr == ""
    assert missing in json.loads(done.stdout)["error"]["message"]


def test_show_on_a_terminal_obeys_nothing(hostile):
    d, drawer = hostile
    out = on_a_terminal(d, "show", "notes", drawer)
    assert_shown(out, HOSTILE, ROOM, TAG)


def on_a_terminal(d: Daemon, *args: str, timeout: float = 120) -> str:
    """What the command wrote on a pseudo-terminal (its stdout and stderr), as sent."""
    code, shown, _ = on_pty(
        [*CLI, *args], d.env, streams=("stdin", "stdout", "stderr"), timeout=timeout
    )
    assert code == 0, shown
    return shown.decode().replace("\r\n", "\n")  # the terminal's own line ends


# -- the rules themselves, checked directly ----------------------------------------------


def test_a_cut_never_splits_an_escape():
    for lead in range(10, 25):  # the cut lands before, inside and after the escape
        cut = clip("x" * lead + "\x1b[2J and more", 20)
        assert len(cut) <= 20 and cut.endswith("…") and "\x1b" not in cut, cut
        assert "\\" not in cut or "\\x1b" in cut, cut  # the escape whole, or not at all


def test_one_line_fields_cannot_forge_lines():
    assert describe([("Room", "ops\nImportance:  1"), ("Tags", ["a\rb"])]).splitlines() == [
        "Room:  ops\\nImportance:  1",
        "Tags:  a\\rb",
    ]
    assert clip("first\r\n\tsecond", 100) == "first\\r second"  # \r shown, layout collapsed


def test_escaping_again_changes_nothing_and_backslashes_stay():
    once = visible(f"C:\\temp {OSC52}\u2066\udcff", lines=True)
    assert once == "C:\\temp \\x1b]52;c;cHduZWQ=\\x07\\u2066\\udcff"
    assert visible(once) == once


def test_a_log_line_on_a_terminal_shows_what_it_quotes():
    line = json.dumps({"timestamp": "2026-01-01T00:00:00", "level": "error", "event": OSC52})
    assert_shown(shown_log_line(line), OSC52)
    assert_shown(shown_log_line(f"not json {TITLE}"), TITLE)
