"""``trusty-memory import`` on hostile or broken input, against the real daemon and command:
every case ends in a clear error that names the line (and the field), never a traceback,
an "internal error" or a process that eats memory without end.

Covers: client/bulk.py common/import_checks.py common/json_depth.py client/cli/transfer.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import uuid

import pytest

from trusty_memory.client.sync import Client

MAX_TEXT_BYTES = 65536  # the default [palace] max_text_bytes, which these homes keep
MEMORY_CAP = 4 * 1024**3  # a regression that reads without end fails here, not the machine


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    yield c
    c.close()


def _capped_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def cli(daemon, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The real command, with its address space capped."""
    return subprocess.run(
        [sys.executable, "-m", "trusty_memory.client.cli.main", *args],
        env=daemon.env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_capped_memory,
    )


def drawer(i: int, **fields) -> dict:
    return {
        "type": "drawer",
        "drawer_id": str(uuid.UUID(int=0x7000 + i)),
        "content": f"limits note {i}: the cache is warmed at boot",
        **fields,
    }


def jsonl(*lines: dict | str) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)


def assert_clean_failure(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr)
    for never in ("Traceback", "internal error", "MemoryError", "OverflowError"):
        assert never not in done.stderr, done.stderr


def test_an_endless_line_stops_at_the_line_limit(daemon, client, tmp_path):
    from trusty_memory.client.bulk import max_line_bytes

    cap = max_line_bytes(MAX_TEXT_BYTES)
    done = cli(daemon, "import", "endless", "/dev/zero")
    assert_clean_failure(done)
    assert f"line 1: longer than {cap:,} bytes" in done.stderr, done.stderr
    assert "endless" not in client.palace_list()  # the palace it made is taken away again

    # A line just over the limit after good ones, from a file: its batch is held back.
    path = tmp_path / "long.jsonl"
    path.write_text(jsonl(drawer(1), drawer(2)) + "x" * (cap + 1) + "\n" + jsonl(drawer(3)))
    client.palace_create("long-line")
    done = cli(daemon, "--json", "import", "long-line", str(path))
    assert_clean_failure(done)
    assert f"line 3: longer than {cap:,} bytes" in done.stderr, done.stderr
    summary = json.loads(done.stdout)
    assert summary["imported"] == 0 and summary["held_back"] == 2
    assert client.palace_info("long-line").drawer_count == 0

    # A line of exactly the limit is read (and judged as JSON like any other).
    path.write_text(jsonl(drawer(1)) + " " * (cap - 2) + "{}\n")
    done = cli(daemon, "import", "long-line", str(path))
    assert_clean_failure(done)
    assert "line 2: " in done.stderr and "longer than" not in done.stderr, done.stderr


def test_hits_beyond_a_64_bit_integer_are_a_clear_error(daemon, client):
    lines = jsonl(drawer(10, hits=2**63 - 1), drawer(11, hits=2**63), drawer(12, hits=10**30))
    client.palace_create("hits")
    done = cli(daemon, "import", "hits", "-", stdin=lines)
    assert_clean_failure(done)
    assert f"line 2: hits: must be below 2**63, got {2**63}" in done.stderr, done.stderr
    assert "line 3: hits: must be below 2**63" in done.stderr, done.stderr
    assert client.palace_info("hits").drawer_count == 0  # the batch held them
    done = cli(daemon, "import", "hits", "-", stdin=jsonl(drawer(10, hits=2**63 - 1)))
    assert done.returncode == 0, done.stderr
    assert client.get("hits", drawer(10)["drawer_id"]).hits == 2**63 - 1


def test_a_drawer_id_twice_in_one_file_is_reported(daemon, client):
    lines = jsonl(drawer(20), drawer(21), drawer(20), drawer(22, drawer_id=drawer(21)["drawer_id"]))
    done = cli(daemon, "--json", "import", "twice", "-", stdin=lines)
    assert_clean_failure(done)
    first = drawer(20)["drawer_id"]
    assert f"line 3: drawer id {first} appears twice in this file (first on line 1)" in (
        done.stderr
    )
    assert f"line 4: drawer id {drawer(21)['drawer_id']} appears twice" in done.stderr
    summary = json.loads(done.stdout)
    assert summary["skipped_existing"] == 0 and summary["bad_lines"] == 2
    # A dry run sees them too.
    done = cli(daemon, "import", "twice", "-", "--dry-run", stdin=lines)
    assert_clean_failure(done)
    assert "appears twice in this file" in done.stderr


def test_an_existing_drawer_with_other_content_is_reported(daemon, client):
    client.palace_create("clash")
    first = jsonl(drawer(30), drawer(31))
    assert cli(daemon, "import", "clash", "-", stdin=first).returncode == 0

    # The same ids again, one of them with other words, beside a new drawer.
    other = drawer(31, content="a different note that reuses the id")
    done = cli(daemon, "--json", "import", "clash", "-", stdin=jsonl(drawer(30), other, drawer(32)))
    assert_clean_failure(done)
    assert f"line 2: drawer {other['drawer_id']} exists in the palace with other content" in (
        done.stderr
    )
    summary = json.loads(done.stdout)
    assert summary["skipped_existing"] == 1  # line 1, the same as stored
    assert summary["imported"] == 1 and summary["bad_lines"] == 1
    assert client.get("clash", other["drawer_id"]).content == drawer(31)["content"]

    # Only the same content again: skipped, and that is success, as before.
    done = cli(daemon, "--json", "import", "clash", "-", stdin=first)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["skipped_existing"] == 2


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (drawer(40, created_at="0001-01-01T00:00:00+01:00"), "created_at"),
        (drawer(41, created_at="9999-12-31T23:59:59-01:00"), "created_at"),
        (
            {"type": "triple", "subject": "a", "predicate": "b", "object": "c",
             "valid_from": "0001-01-01T00:30:00+01:00"},
            "valid_from",
        ),
        (
            {"type": "triple", "subject": "a", "predicate": "b", "object": "c",
             "valid_from": "2024-01-01T00:00:00Z", "valid_to": "9999-12-31T23:00:00-02:00"},
            "valid_to",
        ),
    ],
)  # fmt: skip
def test_times_past_the_calendars_edge_are_a_clear_error(daemon, client, line, field):
    done = cli(daemon, "import", "edge", "-", stdin=jsonl(drawer(49), line))
    assert_clean_failure(done)
    assert f"line 2: {field}: {line[field]!r} is outside the calendar in UTC" in done.stderr, (
        done.stderr
    )
    assert "edge" not in client.palace_list()  # nothing got in: the palace it made is gone


@pytest.mark.parametrize("depth", [5_000, 100_000])
@pytest.mark.parametrize("as_json", [False, True])
def test_deep_nesting_is_a_bad_line_not_a_crash(daemon, client, tmp_path, depth, as_json):
    """msgspec overflows the stack on deep input (``RecursionError``): such a line must be
    a bad line like any other, named by number, and nothing deeper than the bound is sent
    on to a worker (whose metadata walks recurse too)."""
    from trusty_memory.client.bulk import MAX_NESTING

    deep = "[" * depth + "]" * depth
    path = tmp_path / "deep.jsonl"
    path.write_text(jsonl(drawer(20)) + f'{{"content": "deep", "metadata": {{"a": {deep}}}}}\n')
    palace = f"deep-{depth}-{int(as_json)}"
    client.palace_create(palace)
    done = cli(daemon, *(["--json"] if as_json else []), "import", palace, str(path))
    assert_clean_failure(done)
    assert "RecursionError" not in done.stderr + done.stdout
    assert f"line 2: nested more than {MAX_NESTING} levels deep" in done.stderr, done.stderr
    if as_json:
        assert json.loads(done.stdout)["held_back"] == 1
    assert client.palace_info(palace).drawer_count == 0


def test_nesting_at_the_bound_is_imported(daemon, client):
    """The bound counts every bracket of the line (the line's own object included), and
    brackets inside strings not at all."""
    from trusty_memory.client.bulk import MAX_NESTING

    inner = MAX_NESTING - 2  # the line's object and the metadata object hold the rest
    nested = json.loads("[" * inner + "]" * inner)
    line = drawer(21, content="brackets [[[[{{{{ in text", metadata={"a": nested})
    client.palace_create("at-bound")
    done = cli(daemon, "import", "at-bound", "-", stdin=jsonl(line))
    assert done.returncode == 0, done.stderr
    assert client.palace_info("at-bound").drawer_count == 1


def test_a_leading_byte_order_mark_is_accepted(daemon, client, tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl(drawer(30), drawer(31)).encode())
    client.palace_create("bom")
    done = cli(daemon, "import", "bom", str(path))
    assert done.returncode == 0, done.stderr
    assert client.palace_info("bom").drawer_count == 2


def test_a_binary_file_is_said_once_not_per_line(daemon, client, tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(256)) * 400)  # many "lines", NUL bytes in the first
    client.palace_create("blob")
    for args in ((), ("--json",)):
        done = cli(daemon, *args, "import", "blob", str(path))
        assert_clean_failure(done)
        assert done.stderr.count(f"line 1: {path} is not a JSON lines file") == 1, done.stderr
        assert "NUL bytes" in done.stderr and "line 2" not in done.stderr, done.stderr
    assert client.palace_info("blob").drawer_count == 0


def test_a_text_file_that_is_not_json_lines_is_said_once(daemon, client, tmp_path):
    from trusty_memory.client.bulk import NOT_JSONL_AFTER

    path = tmp_path / "notes.txt"
    path.write_text("".join(f"just some prose, line {i}\n" for i in range(100)))
    client.palace_create("prose")
    done = cli(daemon, "import", "prose", str(path))
    assert_clean_failure(done)
    assert done.stderr.count(f"line 1: {path} is not a JSON lines file") == 1, done.stderr
    assert f"its first {NOT_JSONL_AFTER} lines are not JSON" in done.stderr, done.stderr
    assert "line 2:" not in done.stderr, done.stderr
