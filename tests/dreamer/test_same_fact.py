"""The merge rule: do two notes state the same thing? (``workers/store/same_fact.py``)

Unit tests pin each check and its reason; the slow test measures the dreamer's whole
decision (real MiniLM cosine >= 0.95 and the rule) on the labelled pairs in ``data/``.

Covers: workers/store/same_fact.py bench/merge_pairs.py
"""

from __future__ import annotations

import pytest

from bench import merge_pairs
from trusty_memory.workers.store.same_fact import _POLARITY, same_fact

# -- the issue's examples ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        (
            "The API rate limit is 100 requests per minute",
            "The API rate limit is 1000 requests per minute",
            "numbers differ: 100 vs 1000",
        ),
        (
            "The staging DB is on port 5433",
            "The production DB is on port 5432",
            "numbers differ: 5433 vs 5432",
        ),
        (
            "auth-service deployed version is 2.4.1",
            "auth-service deployed version is 2.5.0",
            "versions differ: 2.4.1 vs 2.5.0",
        ),
        (
            "Use Node 18 for the frontend build.",
            "Use Node 20 for the frontend build.",
            "numbers differ: 18 vs 20",
        ),
        ("build 17 passed on runner 3", "build 18 passed on runner 3", "numbers differ: 17 vs 18"),
    ],
)
def test_the_issues_pairs_are_different_facts(a, b, reason):
    verdict = same_fact(a, b)
    assert not verdict.same and verdict.reason == reason
    assert same_fact(b, a).same is False  # symmetric


# -- each kind of fact token -------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "what"),
    [
        ("Retries: 3 attempts.", "Retries: 5 attempts.", "numbers"),
        ("The limit is 1,000 rows.", "The limit is 10,000 rows.", "numbers"),
        ("Learning rate is 3e-4.", "Learning rate is 3e-5.", "numbers"),
        ("Refunds over $500 need approval.", "Refunds over $5000 need approval.", "numbers"),
        ("Pin ruff to v0.4.1.", "Pin ruff to v0.4.2.", "versions"),
        ("The freeze starts 2025-06-12.", "The freeze starts 2025-06-19.", "dates"),
        ("Planning is in March.", "Planning is in April.", "dates"),
        ("The retro is on friday.", "The retro is on monday.", "dates"),
        ("Backups run at 02:00 UTC.", "Backups run at 03:00 UTC.", "times"),
        ("Standup is at 9am.", "Standup is at 10am.", "times"),
        ("The bastion is 10.0.4.17.", "The bastion is 10.0.4.71.", "addresses"),
        ("Set max_connections to 200.", "Set shared_buffers to 200.", "identifiers"),
        ("The bucket is acme-ci-cache.", "The bucket is acme-ci-logs.", "identifiers"),
        ("Commit 9f3c2ab broke it.", "Commit 9f3c2ac broke it.", "identifiers"),
        ("Runner ci-linux-03 is slow.", "Runner ci-linux-04 is slow.", "identifiers"),
        (
            "Id 0b5e6c9a-1f7e-4a53-9b0e-2d8f1c3a4b5d is the tenant.",
            "Id 0b5e6c9a-1f7e-4a53-9b0e-2d8f1c3a4b5e is the tenant.",
            "identifiers",
        ),
        ("Run it with --dry-run first.", "Run it with --force first.", "identifiers"),
        ("Config is in /etc/app/main.yaml.", "Config is in /etc/app/test.yaml.", "paths"),
        ("The runbook is docs/db-failover.md.", "The runbook is docs/db-restore.md.", "paths"),
        ("Docs are at https://docs.acme.dev/v2.", "Docs are at https://docs.acme.dev/v3.", "URLs"),
        ("Write to ops@acme.dev.", "Write to sre@acme.dev.", "emails"),
        ("The prefix is 'fix:'.", "The prefix is 'feat:'.", "quoted strings"),
        ("Escalate to Priya in the morning.", "Escalate to Marco in the morning.", "names"),
    ],
)
def test_a_differing_fact_token_is_a_different_fact(a, b, what):
    verdict = same_fact(a, b)
    assert not verdict.same and verdict.reason.startswith(f"{what} differ: "), verdict


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The limit is 1,000 rows.", "The limit is 1000 rows."),
        ("The limit is 1k rows.", "The limit is 1000 rows."),
        ("Deployed version is v2.4.1.", "Deployed version is 2.4.1."),
        ("Password length is twelve.", "Password length is 12."),
        ("Use twenty-five workers.", "Use 25 workers."),
        ("Standup is at 9 am.", "Standup is at 09:00."),
        ("Throughput rose 30%.", "Throughput rose 30 percent."),
        ("Refunds over $500 need approval.", "Refunds over 500 dollars need approval."),
        ("Timeout is 30s.", "Timeout is 30 s."),
        ("Uploads cap at 25MB.", "Uploads cap at 25 MB."),
    ],
)
def test_the_same_value_written_differently_agrees(a, b):
    assert same_fact(a, b).same


# -- negation and polarity ---------------------------------------------------------------


@pytest.mark.parametrize(
    "negated",
    [
        "The lint step is not required.",
        "The lint step isn't required.",
        "The lint step is never required.",
        "No lint step is required.",
        "The build passes without the lint step required.",
    ],
)
def test_negation_flips_a_fact(negated):
    verdict = same_fact("The lint step is required.", negated)
    assert not verdict.same and verdict.reason.startswith("negation differs: ")


def test_negation_spelled_differently_agrees():
    assert same_fact("The cluster can't reach the mirror.", "The cluster cannot reach the mirror.")
    assert same_fact("It doesn't retry.", "It does not retry.").same
    assert same_fact("It doesn\u2019t retry.", "It does not retry.").same  # typographic


@pytest.mark.parametrize(
    ("group", "left", "right"),
    [(group, poles[0].split()[0], poles[1].split()[0]) for group, poles in _POLARITY.items()],
)
def test_every_polarity_pair_flips_a_fact(group, left, right):
    a = f"The scheduler job was {left} for the billing queue."
    b = f"The scheduler job was {right} for the billing queue."
    verdict = same_fact(a, b)
    assert not verdict.same and verdict.reason == f"polarity differs: {left} vs {right}", group
    assert same_fact(a, a.lower().rstrip(".")).same


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Feature X is enabled.", "Feature X is disabled."),
        ("Uploads are allowed.", "Uploads are denied."),
        ("Traffic was blocked.", "Traffic was unblocked."),
        ("The e2e tests passed.", "The e2e tests failed."),
        ("The backup succeeded.", "The backup failed."),
        ("Run migrations before deploy.", "Run migrations after deploy."),
        ("At most 50 items per page.", "At least 50 items per page."),
        ("Coverage is above 85 percent.", "Coverage is below 85 percent."),
        ("The column is nullable.", "The column is non-nullable."),
        ("The host is reachable.", "The host is unreachable."),
    ],
)
def test_polarity_flips_in_natural_notes(a, b):
    verdict = same_fact(a, b)
    assert not verdict.same and " differ" in verdict.reason, verdict


def test_modality_and_tense():
    assert same_fact("We must rotate keys.", "We should rotate keys.").reason == (
        "modality differs: must vs should"
    )
    assert same_fact("The DB is on port 5432.", "The DB was on port 5432.").reason == (
        "tense differs: present vs past"
    )
    assert same_fact("The DB is on port 5432.", "DB on port 5432.").same  # no tense: agrees


# -- other words and order ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The staging DB uses Postgres.", "The production DB uses Postgres."),
        ("Alice owns the billing service.", "Bob owns the billing service."),
        ("Farah prefers tabs.", "Farah prefers spaces."),
        ("The printer was repaired.", "The printer was repaired quickly."),
    ],
)
def test_any_other_differing_word_is_a_different_fact(a, b):
    verdict = same_fact(a, b)
    assert not verdict.same and verdict.reason.startswith("wording differs: "), verdict


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("We use ruff instead of flake8.", "We use flake8 instead of ruff."),
        ("The standup moved to 9:45 from 9:30.", "The standup moved to 9:30 from 9:45."),
        ("Primary eu-west-1, failover eu-central-1.", "Primary eu-central-1, failover eu-west-1."),
        (
            "Tests pass on Chromium but fail on WebKit.",
            "Tests fail on Chromium but pass on WebKit.",
        ),
        (
            "Pagination uses a cursor, never an offset.",
            "Pagination uses an offset, never a cursor.",
        ),
        ("from 9:30 to 9:45", "from 9:45 to 9:30"),
    ],
)
def test_swapped_roles_are_a_different_fact(a, b):
    verdict = same_fact(a, b)
    assert not verdict.same and verdict.reason.startswith("order differs: "), verdict


# -- true duplicates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The staging DB is on port 5433.", "The staging DB is on port 5433"),  # punctuation
        ("The staging DB is on port 5433.", "the staging db is on port 5433."),  # casing
        ("Alice prefers tabs in Python.", "ALICE PREFERS TABS IN PYTHON"),  # casing, names
        ("The staging DB is on port 5433.", "The  staging DB is on\tport 5433.\n"),  # whitespace
        ("The staging DB is on port 5433.", "Note: the staging DB is on port 5433."),  # filler
        ("The staging DB is on port 5433.", "Heads up: the staging DB is currently on port 5433."),
        ("In CI, pytest runs 4 workers.", "Pytest runs 4 workers in CI."),  # clause moved
        ("On 2024-11-02 the outage began at 14:05.", "The outage began at 14:05 on 2024-11-02."),
        ("The rate limit is 100 per token.", "The rate limit is 100 for each token."),  # paraphrase
        ("The staging DB is on port 5433.", "The staging database is on port 5433."),  # synonym
        ("Deploys happen on Tuesdays.", "Deploy happens on Tuesday."),  # plurals
        ("Use 'main' as the profile.", "Use \u201cmain\u201d as the profile."),  # quotes
    ],
)
def test_true_duplicates_are_the_same_fact(a, b):
    verdict = same_fact(a, b)
    assert verdict.same and verdict.reason == "same fact", verdict


# Issue 29: a unit written with a slash, "per" or "a", short or long, is one fact.
@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "The API rate limit is 600 requests per minute per key.",
            "The API rate limit is 600 requests/minute per key.",
        ),
        (
            "The API rate limit is 600 requests per minute per key.",
            "The API rate limit is 600 requests a minute per key.",
        ),
        ("The API rate limit is 600 requests per minute.", "The API rate limit is 600 req/min."),
        ("Quota: 600/min per key.", "Quota: 600 per minute per key."),
        ("Timeouts after 250 ms.", "Timeouts after 250 milliseconds."),
        ("Timeouts after 250ms.", "Timeouts after 250 msec."),
        ("Each runner has 32 GB of memory.", "Each runner has 32 gigabytes of memory."),
        ("Uploads stream at 40 MB/s.", "Uploads stream at 40 megabytes per second."),
        ("The health check polls every 5 min.", "The health check polls every 5 minutes."),
        ("The health check polls every 5min.", "The health check polls every 5 mins."),
        ("Sessions expire after 12 hrs.", "Sessions expire after 12 hours."),
    ],
)
def test_a_unit_written_another_way_is_the_same_fact(a, b):
    verdict = same_fact(a, b)
    assert verdict.same and verdict.reason == "same fact", verdict
    assert same_fact(b, a).same


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        (
            "The API rate limit is 600 requests per minute per key.",
            "The API rate limit is 600 requests/second per key.",
            "wording differs: minute vs second",
        ),
        ("Timeouts after 250 ms.", "Timeouts after 250 s.", "wording differs: ms vs s"),
        ("Uploads stream at 40 MB/s.", "Uploads stream at 40 GB/s.", "names differ: megabyte"),
        ("Keep min 3 replicas.", "Keep max 3 replicas.", "polarity differs: min vs max"),
        ("The schema is in db/migrations.", "The schema is in db/min.", "paths differ"),
    ],
)
def test_a_different_unit_is_a_different_fact(a, b, reason):
    verdict = same_fact(a, b)
    assert not verdict.same and verdict.reason.startswith(reason), verdict


def test_identical_texts_are_the_same_fact():
    text = "Build 4821 passed on runner ci-linux-03 at 02:00 on 2025-06-12 (v1.2.3)."
    assert same_fact(text, text).same


# -- the whole decision on the labelled pairs --------------------------------------------

# Measured with the real model on this machine (see BENCHMARKS.md, "Dreamer"): 0.8973 and
# 0.8806. The floors sit a pair or two below, so a change that loses recall shows here.
RECALL_FLOOR = {"labelled": 0.89, "held_out": 0.86}
MIN_PAIRS = {"labelled": 300, "held_out": 150}


@pytest.fixture(scope="module")
def measured():
    from trusty_memory.workers.embedder.embedding import MiniLMEmbedder

    return merge_pairs.run(MiniLMEmbedder().encode)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["labelled", "held_out"])
def test_merge_decision_precision_and_recall_on_the_labelled_pairs(measured, name):
    r = measured[name]
    assert r["pairs"] >= MIN_PAIRS[name] and r["same"] > 50 and r["different"] > 100
    assert r["wrong_merges"] == [], r["wrong_merges"]
    assert r["precision"] >= 0.995 and r["recall"] >= RECALL_FLOOR[name], r
    # Issue 29's units: the rule merges every unit pair; two of the tuned set's sit below
    # the cosine threshold (250 ms / 250 msec: 0.915), which no rule can lower.
    assert r["missed_by_kind"].get("unit", 0) <= {"labelled": 2, "held_out": 0}[name], r
    # The rule is what holds precision: cosine alone merges many of the different pairs.
    assert r["different_above_threshold"] >= 50 and r["cosine_alone"]["precision"] < 0.8, r


def test_the_labelled_sets_cover_every_kind():
    for name in merge_pairs.SETS:
        pairs = merge_pairs.load(name)
        assert {p["label"] for p in pairs} == {"same", "different"}
        assert all(p["a"] != p["b"] or p["kind"] == "identical" for p in pairs)
    kinds = {p["kind"] for p in merge_pairs.load("labelled") if p["label"] == "different"}
    assert kinds >= {
        "number", "version", "date", "time", "identifier", "path", "url", "email", "name",
        "quoted", "negation", "polarity", "word",
    }  # fmt: skip
    same = {p["kind"] for p in merge_pairs.load("labelled") if p["label"] == "same"}
    assert same >= {
        "punctuation", "casing", "whitespace", "reorder", "paraphrase", "filler", "unit",
    }  # fmt: skip
    held_out = {p["kind"] for p in merge_pairs.load("held_out") if p["label"] == "same"}
    assert "unit" in held_out
