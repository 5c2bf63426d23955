"""The CLI's verbs for what ``serve --tools extended`` offers, against the real daemon:
update (and archive restore of the version it replaced), get, search with its cursor,
kg query --as-of / history / invalidate, stats and health.

Covers: client/cli/memory.py client/cli/kg.py client/cli/dreaming.py client/mcp/tools_status.py
    workers/store/search.py
"""

from __future__ import annotations

import json
import time

from tests.conftest import run_cli


def cli_json(daemon, *args: str) -> dict:
    done = run_cli(daemon, "--json", *args)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def test_update_get_search_and_restore(daemon):
    p = "cli-ext"
    cli_json(daemon, "palace", "create", p)
    did = cli_json(daemon, "remember", p, "Deploys run at 17:00 on Fridays.", "--room", "Ops")[
        "drawer_id"
    ]
    updated = cli_json(daemon, "update", p, did, "--text", "Deploys run at 11:00.", "--tag", "ci")
    assert updated["status"] == "updated" and updated["changed"] == ["text", "tags"]
    got = cli_json(daemon, "get", did, "--palace", p)
    assert (got["content"], got["tags"], got["room"]) == ("Deploys run at 11:00.", ["ci"], "Ops")
    for i in range(3):
        run_cli(daemon, "remember", p, f"Deploy checklist item {i}")
    first = cli_json(daemon, "search", p, "deploy", "--limit", "2")
    second = cli_json(
        daemon, "search", p, "deploy", "--limit", "2", "--cursor", first["next_cursor"]
    )
    found = [d["drawer_id"] for d in first["drawers"] + second["drawers"]]
    assert len(set(found)) == 4 and second["next_cursor"] is None
    text = run_cli(daemon, "search", p, "deploy", "--limit", "2").stdout
    assert f"(more: --cursor {first['next_cursor']})" in text
    bad = run_cli(daemon, "--json", "update", p, did)
    assert bad.returncode == 1
    assert "nothing to update" in json.loads(bad.stdout)["error"]["message"]

    versions = cli_json(daemon, "archive", "list", p, "--reason", "updated")["drawers"]
    assert [v["content"] for v in versions] == ["Deploys run at 17:00 on Fridays."]
    assert "earlier version of " + did in run_cli(daemon, "archive", "list", p).stdout
    restored = cli_json(daemon, "archive", "restore", p, versions[0]["drawer_id"])
    assert restored["drawer_id"] == did
    assert cli_json(daemon, "show", did)["content"] == "Deploys run at 17:00 on Fridays."

    stats = cli_json(daemon, "stats", p)
    assert stats["drawer_count"] == 4 and stats["archived_count"] == 1
    assert "4 drawers" in run_cli(daemon, "stats", p).stdout


def test_fact_history_as_of_invalidate_and_health(daemon):
    p = "cli-kg"
    cli_json(daemon, "palace", "create", p)
    cli_json(daemon, "kg", "assert", p, "db", "host", "pg-1")
    before = cli_json(daemon, "kg", "query", p, "db")["triples"][0]["valid_from"]
    time.sleep(1.1)
    cli_json(daemon, "kg", "assert", p, "db", "host", "pg-2")
    then = cli_json(daemon, "kg", "query", p, "db", "--as-of", before)["triples"]
    assert [t["object"] for t in then] == ["pg-1"]
    history = cli_json(daemon, "kg", "history", p, "db", "--predicate", "host")["triples"]
    assert [t["object"] for t in history] == ["pg-1", "pg-2"]
    closed = cli_json(daemon, "kg", "invalidate", p, "db", "host", "--object", "pg-2")
    assert closed["status"] == "invalidated"
    assert cli_json(daemon, "kg", "query", p, "db")["triples"] == []
    again = run_cli(daemon, "--json", "kg", "invalidate", p, "db", "host")
    assert again.returncode == 1
    assert json.loads(again.stdout)["error"]["message"] == "no active fact: db host"

    health = cli_json(daemon, "health")
    assert health["status"] == "ok" and health["embedder"]["ok"] is True
    assert any(x["palace"] == p for x in health["palaces"])


def test_search_reads_a_query_as_typed(daemon):
    """Issue 29: a word finds the words it begins (``postgres`` -> "PostgreSQL"), ``word*``
    is a prefix, a question ranks drawers by the words they hold instead of requiring all;
    quoted phrases and an explicit AND still ask for every one."""
    p = "cli-kw"
    cli_json(daemon, "palace", "create", p)
    ids = {}
    for key, text in {
        "pg": "The orders service keeps its data in a PostgreSQL 16 database.",
        "team": "The orders team meets on Mondays.",
        "backup": "Staging database backups run nightly.",
        "ui": "The frontend is written in React.",
    }.items():
        ids[cli_json(daemon, "remember", p, text)["drawer_id"]] = key

    def found(query: str) -> list[str]:
        return [ids[d["drawer_id"]] for d in cli_json(daemon, "search", p, query)["drawers"]]

    assert found("postgres") == ["pg"]
    assert found("postgres*") == ["pg"]
    assert found("Postgres 16") == ["pg"]
    question = found("which database do orders use")
    assert question[0] == "pg" and sorted(question) == ["backup", "pg", "team"]
    assert found('"orders service"') == ["pg"]
    assert found('"orders postgres"') == []  # a phrase is exact: no prefix, in order
    assert found("orders AND database") == ["pg"]
    assert found("orders AND mondays") == ["team"]
    assert found("react AND postgres") == []
    text = run_cli(daemon, "search", p, "postgres").stdout
    assert "PostgreSQL 16" in text
