"""Bounds on what a request may carry, against the real daemon: every string and list of
every method's params has a limit (``[limits]``), text that shows nothing is refused, a
lone surrogate is named wherever it arrives, times past the calendar's edge are named,
and updating a drawer the dreamer merged away names the drawer to update instead.

Each refusal is ``INVALID_PARAMS`` (or, for a drawer gone to the archive,
``DRAWER_NOT_FOUND``) with a message that names the field, the size, the limit and the
setting, never an internal error, and nothing is stored by a refused request.

Covers: common/bounds.py common/values.py client/bulk.py workers/store/edit.py
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.conftest import Daemon, run_cli
from tests.engine.test_faults import worker_pid
from tests.mcp.conftest import RawServe
from trusty_memory.client.sync import Client
from trusty_memory.common.protocol import ErrorCode, TrustyError

PALACE = "bounds"
MB = "x" * 2**20
NIL_ID = "00000000-0000-4000-8000-000000000000"
EDGES = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    c.palace_create(PALACE)
    c.remember(PALACE, "a drawer so the writer is running")
    c.kg_assert(PALACE, "auth-service", "deployed_version", "2.4.1")
    yield c
    c.close()


def refused(client: Client, method: str, params: dict, palace: str | None = PALACE) -> str:
    """The message of the ``INVALID_PARAMS`` that ``method`` must answer."""
    with pytest.raises(TrustyError) as err:
        client.call(method, params, palace=palace)
    assert err.value.code == ErrorCode.INVALID_PARAMS, err.value
    assert "internal error" not in err.value.message
    return err.value.message


def too_big(field: str, size: int, limit: int, setting: str) -> str:
    return f"{field}: {size} bytes, at most {limit} ([limits] {setting})"


def holdings(client: Client) -> tuple[int, int, int]:
    info = client.palace_info(PALACE)
    return info.drawer_count, info.triple_count, info.archived_count


# -- A: every string and list is bounded -----------------------------------------------

TRIPLE = {"subject": "s", "predicate": "p", "object": "o", "valid_from": "2024-01-01T00:00:00Z"}
DRAWER = {"drawer_id": NIL_ID, "content": "an imported note"}

BOUNDED = [
    ("memory_remember", {"text": "t", "tags": ["t" * 100] * 10_000},
     "memory_remember: tags: 10000 tags, at most 64 ([limits] max_tags)"),
    ("memory_remember", {"text": "t", "tags": ["ok", "é" * 65]},
     "memory_remember: " + too_big("tags[1]", 130, 128, "max_tag_bytes")),
    ("memory_remember", {"text": "t", "room": "r" * 100_000},
     "memory_remember: " + too_big("room", 100_000, 256, "max_room_bytes")),
    ("memory_remember", {"text": "t", "metadata": {"k": "v" * 20_000}},
     "memory_remember: metadata: 20008 bytes of JSON, at most 16384 ([limits] max_metadata_bytes)"),
    ("memory_remember", {"text": "t", "drawer_id": MB},
     "memory_remember: " + too_big("drawer_id", 2**20, 256, "max_name_bytes")),
    ("memory_recall", {"query": "q" * 4097},
     "memory_recall: " + too_big("query", 4097, 4096, "max_query_bytes")),
    ("memory_recall_deep", {"query": "q", "room": MB},
     "memory_recall_deep: " + too_big("room", 2**20, 256, "max_room_bytes")),
    ("memory_recall", {"query": "q", "tag": MB},
     "memory_recall: " + too_big("tag", 2**20, 128, "max_tag_bytes")),
    ("memory_list", {"tag": "t" * 129},
     "memory_list: " + too_big("tag", 129, 128, "max_tag_bytes")),
    ("memory_forget", {"drawer_id": MB},
     "memory_forget: " + too_big("drawer_id", 2**20, 256, "max_name_bytes")),
    ("kg_assert", {"subject": MB, "predicate": "p", "object": "o"},
     "kg_assert: " + too_big("subject", 2**20, 4096, "max_kg_field_bytes")),
    ("kg_assert", {"subject": "s", "predicate": MB, "object": "o"},
     "kg_assert: " + too_big("predicate", 2**20, 4096, "max_kg_field_bytes")),
    ("kg_assert", {"subject": "s", "predicate": "p", "object": MB},
     "kg_assert: " + too_big("object", 2**20, 4096, "max_kg_field_bytes")),
    ("kg_assert", {"subject": "s", "predicate": "p", "object": "o", "provenance": MB},
     "kg_assert: " + too_big("provenance", 2**20, 4096, "max_kg_field_bytes")),
    ("kg_query", {"subject": "s" * 4097},
     "kg_query: " + too_big("subject", 4097, 4096, "max_kg_field_bytes")),
    ("kg_history", {"subject": "s", "predicate": MB},
     "kg_history: " + too_big("predicate", 2**20, 4096, "max_kg_field_bytes")),
    ("kg_invalidate", {"subject": "s", "predicate": "p", "object": MB},
     "kg_invalidate: " + too_big("object", 2**20, 4096, "max_kg_field_bytes")),
    ("memory_update", {"drawer_id": NIL_ID, "tags": [str(i) for i in range(65)]},
     "memory_update: tags: 65 tags, at most 64 ([limits] max_tags)"),
    ("memory_update", {"drawer_id": NIL_ID, "room": MB},
     "memory_update: " + too_big("room", 2**20, 256, "max_room_bytes")),
    ("memory_search", {"query": MB},
     "memory_search: " + too_big("query", 2**20, 4096, "max_query_bytes")),
    ("memory_search", {"cursor": MB},
     "memory_search: " + too_big("cursor", 2**20, 256, "max_name_bytes")),
    ("memory_search", {"since": MB},
     "memory_search: " + too_big("since", 2**20, 256, "max_name_bytes")),
    ("drawer_get", {"drawer_id": MB},
     "drawer_get: " + too_big("drawer_id", 2**20, 256, "max_name_bytes")),
    ("archive_list", {"reason": MB},
     "archive_list: " + too_big("reason", 2**20, 256, "max_name_bytes")),
    ("archive_restore", {"drawer_id": MB},
     "archive_restore: " + too_big("drawer_id", 2**20, 256, "max_name_bytes")),
    ("palace_export", {"kind": MB},
     "palace_export: " + too_big("kind", 2**20, 256, "max_name_bytes")),
    ("palace_import", {"drawers": [{**DRAWER, "tags": ["t"] * 100}]},
     "palace_import: drawers[0].tags: 100 tags, at most 64 ([limits] max_tags)"),
    ("palace_import", {"drawers": [{**DRAWER, "room": MB}]},
     "palace_import: " + too_big("drawers[0].room", 2**20, 256, "max_room_bytes")),
    ("palace_import", {"triples": [TRIPLE, {**TRIPLE, "provenance": MB}]},
     "palace_import: " + too_big("triples[1].provenance", 2**20, 4096, "max_kg_field_bytes")),
    ("palace_import", {"triples": [TRIPLE] * 100_001},
     "palace_import: triples: 100001 triples, at most 100000 ([limits] max_batch_items)"),
    ("dream_merge", {"groups": [[NIL_ID, MB]], "dry_run": True},
     "dream_merge: " + too_big("groups[0][1]", 2**20, 256, "max_name_bytes")),
]  # fmt: skip


@pytest.mark.parametrize(("method", "params", "message"), BOUNDED, ids=lambda x: str(x)[:40])
def test_every_string_and_list_is_bounded_by_a_named_setting(client, method, params, message):
    before = holdings(client)
    assert refused(client, method, params) == message
    assert holdings(client) == before


def test_broker_methods_and_the_embedder_are_bounded_too(client):
    assert refused(
        client, "palace_create", {"name": "described", "description": "d" * 4097}, None
    ) == ("palace_create: " + too_big("description", 4097, 4096, "max_description_bytes"))
    assert "described" not in client.palace_list()
    assert refused(client, "embed", {"texts": ["t" * 65_537]}, None) == (
        "embed: texts[0]: 65537 bytes, at most 65536 ([palace] max_text_bytes)"
    )


def test_the_audits_inputs_no_longer_grow_the_palace_file(client):
    """Ten drawers of 10,000 tags, a 100,000-character room and megabyte KG fields made
    a 30 MB palace file; each is now refused and the file stays as it was."""
    before = client.palace_stats(PALACE).db_bytes
    tags = [f"{i:04d}" + "t" * 96 for i in range(10_000)]
    for i in range(10):
        refused(client, "memory_remember", {"text": f"audit {i}", "tags": tags})
        refused(client, "memory_remember", {"text": f"audit {i}", "room": "r" * 100_000})
        refused(
            client, "kg_assert", {"subject": MB, "predicate": MB, "object": MB, "provenance": MB}
        )
    assert client.palace_stats(PALACE).db_bytes < before + 256 * 1024


def test_values_at_each_bound_are_accepted(client):
    tags = [f"{i:02d}" + "t" * 126 for i in range(64)]
    stored = client.remember(PALACE, "a note at every bound", room="R" * 256, tags=tags)
    got = client.get(PALACE, stored.drawer_id)
    assert (got.room, got.tags) == ("R" * 256, tags)
    kg = "k" * 4096
    client.kg_assert(PALACE, kg, kg, kg, provenance=kg)
    assert client.kg_query(PALACE, kg).triples[0].provenance == kg
    assert client.recall(PALACE, "q" * 4096, top_k=1).results


def test_the_limits_are_settings_from_config_and_environment(fresh_home):
    limits = "[limits]\nmax_room_bytes = 8\nmax_description_bytes = 5\n"
    (fresh_home / "config.toml").write_text(limits)
    d = Daemon(fresh_home, {"TRUSTY_MEMORY_LIMITS_MAX_TAGS": "2"}).start()
    with Client(d.config, autostart=False) as c:
        c.palace_create(PALACE)
        assert refused(c, "memory_remember", {"text": "t", "tags": ["a", "b", "c"]}) == (
            "memory_remember: tags: 3 tags, at most 2 ([limits] max_tags)"
        )
        assert refused(c, "memory_remember", {"text": "t", "room": "ninebytes"}) == (
            "memory_remember: " + too_big("room", 9, 8, "max_room_bytes")
        )
        assert c.remember(PALACE, "within", room="eight888", tags=["a", "b"]).status == "stored"
        # The broker reads them too (a palace's description is its to check).
        assert refused(c, "palace_create", {"name": "p2", "description": "123456"}, None) == (
            "palace_create: " + too_big("description", 6, 5, "max_description_bytes")
        )
        assert c.palace_create("p2", "12345")["status"] == "created"


def test_the_import_command_names_the_bound(daemon, client, tmp_path):
    line = {"type": "drawer", **DRAWER, "drawer_id": str(uuid.uuid4()), "tags": ["t"] * 100}
    path = tmp_path / "tags.jsonl"
    path.write_text(json.dumps(line) + "\n")
    client.palace_create("imported")
    done = run_cli(daemon, "import", "imported", str(path))
    assert done.returncode == 1, done.stderr
    assert "drawers[0].tags: 100 tags, at most 64 ([limits] max_tags)" in done.stderr
    assert "Traceback" not in done.stderr
    assert client.palace_info("imported").drawer_count == 0


# -- A: text that shows nothing --------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("memory_remember", {"text": "\u200b\u200c\u200d"},
         "memory_remember: 'text' holds only invisible characters (U+200B, U+200C, U+200D)"),
        ("memory_remember", {"text": "\ufeff \u2060\n"},
         "memory_remember: 'text' holds only invisible characters (U+FEFF, U+0020, U+2060)"),
        ("memory_remember", {"text": "\u0301\u0301"},
         "memory_remember: 'text' holds only invisible characters (U+0301)"),
        ("memory_remember", {"text": "\x00\x07\x1b"},
         "memory_remember: 'text' holds only invisible characters (U+0000, U+0007, U+001B)"),
        ("memory_remember", {"text": "\u3164\u2800"},
         "memory_remember: 'text' holds only invisible characters (U+3164, U+2800)"),
        ("memory_recall", {"query": "\u200b"},
         "memory_recall: 'query' holds only invisible characters (U+200B)"),
        ("memory_recall_deep", {"query": "\u2060\u2060"},
         "memory_recall_deep: 'query' holds only invisible characters (U+2060)"),
        ("memory_search", {"query": "\ufeff"},
         "memory_search: 'query' holds only invisible characters (U+FEFF)"),
        ("memory_update", {"drawer_id": NIL_ID, "text": "\u200d"},
         "memory_update: 'text' holds only invisible characters (U+200D)"),
    ],
)  # fmt: skip
def test_text_that_shows_nothing_is_refused(client, method, params, message):
    before = holdings(client)
    got = refused(client, method, params)
    assert got.startswith(message) and got.endswith("send visible text"), got
    assert holdings(client) == before


def test_the_empty_texts_keep_their_message_and_visible_text_with_marks_is_kept(client):
    for text in ("", "   ", "\n\t"):
        assert refused(client, "memory_remember", {"text": text}) == (
            "memory_remember: 'text' is empty"
        )
    for text in ("e\u0301", "\u200bword\u200b", "\U0001f469\u200d\U0001f4bb", "日本語"):
        assert client.remember(PALACE, text).status == "stored"


# -- B: lone surrogates ------------------------------------------------------------------

SURROGATES = [
    ("memory_remember", {"text": "abcde\ud800"}, PALACE,
     "memory_remember: text: contains a lone surrogate (U+D800) at character 5"),
    ("memory_remember", {"text": "t", "tags": ["ok", "\udfff"]}, PALACE,
     "memory_remember: tags[1]: contains a lone surrogate (U+DFFF) at character 0"),
    ("memory_remember", {"text": "t", "metadata": {"k": ["x", "a\udc80"]}}, PALACE,
     "memory_remember: metadata.k[1]: contains a lone surrogate (U+DC80) at character 1"),
    ("memory_remember", {"text": "t", "metadata": {"\ud83d": 1}}, PALACE,
     "memory_remember: metadata: a key: contains a lone surrogate (U+D83D) at character 0"),
    ("memory_recall", {"query": "\ud800"}, PALACE,
     "memory_recall: query: contains a lone surrogate (U+D800) at character 0"),
    ("kg_assert", {"subject": "s", "predicate": "p", "object": "o", "provenance": "\udbff"},
     PALACE, "kg_assert: provenance: contains a lone surrogate (U+DBFF) at character 0"),
    ("memory_search", {"since": "2024\ud800"}, PALACE,
     "memory_search: since: contains a lone surrogate (U+D800) at character 4"),
    ("palace_create", {"name": "p", "description": "\ud800"}, None,
     "palace_create: description: contains a lone surrogate (U+D800) at character 0"),
    ("memory_list", {}, "pal\ud800",
     "memory_list: palace: contains a lone surrogate (U+D800) at character 3"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "params", "palace", "message"), SURROGATES)
def test_a_lone_surrogate_is_named_by_the_python_client(client, method, params, palace, message):
    assert refused(client, method, params, palace) == message + "; send valid UTF-8"
    assert client.ping()["pong"] is True  # the client's socket is fine afterwards


def test_a_lone_surrogate_is_named_by_the_command_line(daemon, client):
    """An argument that is not UTF-8 reaches Python as a lone surrogate (surrogateescape)."""
    done = run_cli(daemon, "remember", PALACE, os.fsdecode(b"note \xff"))
    assert done.returncode != 0
    assert "text: contains a lone surrogate (U+DCFF) at character 5; send valid UTF-8" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and "codec" not in done.stderr


@pytest.fixture(scope="module")
def extended(daemon, client):
    """A ``serve --tools extended`` session on the module's daemon."""
    s = RawServe(Path(daemon.home), "--tools", "extended")
    s.initialize()
    yield s
    s.kill()


def tool_error(session: RawServe, name: str, arguments: dict) -> str:
    resp = session.tool(1, name, arguments)
    assert "result" not in resp, resp
    assert resp["error"]["code"] == -32603, resp
    assert "internal error" not in resp["error"]["message"], resp
    return resp["error"]["message"]


@pytest.mark.parametrize(
    ("tool", "arguments", "key", "where"),
    [
        ("memory_update", {"drawer_id": NIL_ID, "text": "new \ud800"}, "text", "D800) at 4"),
        ("memory_update", {"drawer_id": NIL_ID, "tags": ["a", "b\udc00"]}, "tags[1]", "DC00) at 1"),
        ("memory_get", {"drawer_id": "\ud800"}, "drawer_id", "D800) at 0"),
        ("memory_search", {"until": "2024-01-01\udfff"}, "until", "DFFF) at 10"),
        ("kg_history", {"subject": "s\ud800"}, "subject", "D800) at 1"),
        ("kg_invalidate", {"subject": "s", "predicate": "p", "object": "\udbff"}, "object",
         "DBFF) at 0"),
        ("kg_query", {"subject": "s", "as_of": "\ud800"}, "as_of", "D800) at 0"),
        ("memory_remember", {"text": "ok", "room": "R\ud800"}, "room", "D800) at 1"),
        ("memory_stats", {"palace": "b\ud800"}, "palace", "D800) at 1"),
        ("palace_delete", {"name": "\ud800", "confirm": True}, "name", "D800) at 0"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_named_by_every_mcp_tool(extended, tool, arguments, key, where):
    code, at = where.split(") at ")
    assert tool_error(extended, tool, {"palace": PALACE, **arguments}) == (
        f"{tool}: '{key}' contains a lone surrogate (U+{code}) at character {at}; send valid UTF-8"
    )


# -- C: times at the calendar's edges ------------------------------------------------------


def calendar(field: str, value: str) -> str:
    return f"{field}: {value!r} is outside the calendar in UTC (years 1 to 9999)"


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize(
    ("method", "field", "params"),
    [
        ("memory_search", "since", {}),
        ("memory_search", "until", {}),
        ("kg_query", "as_of", {"subject": "auth-service"}),
        ("memory_remember", "created_at", {"text": "a note from the edge of time"}),
        ("dream_decay", "now", {"dry_run": True}),
        ("dream_kg_decay", "now", {"dry_run": True}),
    ],
)
def test_times_past_the_calendars_edge_are_named(client, method, field, params, edge):
    writer = worker_pid(client, f"palace:{PALACE}")
    before = holdings(client)
    assert refused(client, method, {**params, field: edge}) == f"{method}: " + calendar(field, edge)
    assert holdings(client) == before
    # A remember's created_at made the writer raise OverflowError and exit, three times.
    assert worker_pid(client, f"palace:{PALACE}") == writer


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize(
    ("kind", "field", "item"),
    [
        ("drawers", "created_at", DRAWER),
        ("triples", "valid_from", TRIPLE),
        ("triples", "valid_to", TRIPLE),
    ],
)
def test_imported_times_past_the_calendars_edge_are_named(client, kind, field, item, edge):
    before = holdings(client)
    message = refused(client, "palace_import", {kind: [item, {**item, field: edge}]})
    assert message == "palace_import: " + calendar(f"{kind}[1].{field}", edge)
    assert holdings(client) == before


def test_edge_times_through_mcp_are_named(extended):
    edge = EDGES[0]
    assert tool_error(extended, "memory_search", {"palace": PALACE, "since": edge}) == (
        "memory_search: " + calendar("since", edge)
    )
    assert tool_error(
        extended, "kg_query", {"palace": PALACE, "subject": "s", "as_of": EDGES[1]}
    ) == "kg_query: " + calendar("as_of", EDGES[1])


# -- D: updating a drawer the dreamer merged away ----------------------------------------


def merged_pair(client: Client) -> tuple[str, str]:
    """Two restatements of one fact, merged by a dream pass: (survivor, merged away)."""
    tag = uuid.uuid4().hex[:8]
    a = client.remember(PALACE, f"Deploys of {tag} happen on Tuesday afternoons.").drawer_id
    b = client.remember(PALACE, f"deploys of {tag} happen on tuesday afternoons").drawer_id
    result = client.call("dream_merge", {"groups": [[a, b]]}, palace=PALACE)
    [action] = result["actions"]
    [gone] = action["merged"]
    return action["keep"], gone


def archived_at(client: Client, drawer_id: str, palace: str = PALACE) -> str:
    entries = client.call("archive_list", {"limit": 1000}, palace=palace)["drawers"]
    return next(e["archived_at"] for e in entries if e["drawer_id"] == drawer_id)


def not_found(client: Client, drawer_id: str, palace: str = PALACE, **fields) -> str:
    with pytest.raises(TrustyError) as err:
        client.update(palace, drawer_id, **fields)
    assert err.value.code == ErrorCode.DRAWER_NOT_FOUND
    return err.value.message


def test_updating_a_merged_drawer_names_the_survivor(client, extended):
    keep, gone = merged_pair(client)
    at = archived_at(client, gone)
    expected = f"drawer {gone} was merged into {keep} by the dreamer on {at}; update {keep}"
    assert not_found(client, gone, text="Deploys moved to Wednesdays.") == expected
    assert not_found(client, gone.upper(), tags=["ops"]) == expected  # any spelling of its id
    assert (
        tool_error(
            extended, "memory_update", {"palace": PALACE, "drawer_id": gone, "importance": 0.9}
        )
        == expected
    )
    assert client.update(PALACE, keep, text="Deploys moved to Wednesdays.").status == "updated"


def test_updating_a_merged_drawer_whose_survivor_went_too(client):
    keep, gone = merged_pair(client)
    client.forget(PALACE, keep)
    message = not_found(client, gone, text="x")
    assert message.startswith(f"drawer {gone} was merged into {keep} by the dreamer on ")
    assert message.endswith(f"; {keep} has since been forgotten")


def test_updating_an_archived_version_or_a_pruned_drawer_says_what_to_do(client):
    did = client.remember(PALACE, "The cache TTL is 60 seconds.").drawer_id
    version = client.update(PALACE, did, text="The cache TTL is 90 seconds.").previous_version
    assert not_found(client, version, text="x") == (
        f"{version} is an earlier version of drawer {did}, archived by memory_update on"
        f" {archived_at(client, version)}; update {did}, or bring this version back with"
        f" `trusty-memory archive restore {version}`"
    )
    client.palace_create("faded")  # a pass of its own: it prunes every old drawer
    old = client.remember(
        "faded", "A long-faded note.", importance=0.05, created_at="2000-01-01T00:00:00Z"
    ).drawer_id
    decay = {"now": "2100-01-01T00:00:00Z", "half_life_days": 1.0}
    assert client.call("dream_decay", decay, palace="faded")["archived"] == [old]
    assert not_found(client, old, "faded", room="Ops") == (
        f"drawer {old} was archived by the dreamer on {archived_at(client, old, 'faded')}"
        f" (pruned: its importance had faded); `trusty-memory archive restore {old}` brings"
        " it back, then update it"
    )
    with pytest.raises(TrustyError) as err:  # never written: the plain message, as before
        client.update(PALACE, NIL_ID, text="x")
    assert err.value.message == f"drawer not found: {NIL_ID}"
