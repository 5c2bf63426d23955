"""PalaceStore: SQLite as the truth, the index following it, the contract's shapes.

Covers: workers/store/write.py workers/store/read.py workers/store/state.py workers/store/rows.py
    workers/store/schema.py workers/store/ranking.py workers/store/first_answer.py
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import sqlite3
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.messages import KgAssertParams, ListParams, RememberParams
from trusty_memory.common.protocol import ErrorCode, TrustyError
from trusty_memory.workers.store.schema import SCHEMA_VERSION
from trusty_memory.workers.store.write import PalaceStore

DIM = 384
# Cheap index settings: the tests exercise behaviour, not recall quality.
SETTINGS = PalaceSettings(ef_construction=64, hnsw_m=12, index_save_every=10, max_text_bytes=1000)


def fake_embed(text: str) -> np.ndarray:
    """Test helper: a deterministic pseudo-embedding (a unit vector seeded by the text's hash).

    Equal texts get equal vectors; different texts get unrelated ones. No model involved.
    """
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vec / np.linalg.norm(vec)


def at_cosine(query: np.ndarray, cos: float, seed: str) -> np.ndarray:
    """Test helper: a unit vector at cosine ``cos`` from ``query`` (direction seeded)."""
    noise = fake_embed(seed)
    noise -= (noise @ query) * query
    vec = cos * query + np.sqrt(1 - cos**2) * noise / np.linalg.norm(noise)
    return vec.astype(np.float32)


def remember(store: PalaceStore, text: str, **fields) -> str:
    """Test helper: remember one text under its fake embedding; returns the drawer id."""
    [result] = store.remember_batch([(RememberParams(text=text, **fields), fake_embed(text))])
    return result.drawer_id


def fill(store: PalaceStore, n: int, prefix: str = "filler", **fields) -> list[str]:
    """Test helper: ``n`` drawers in one batch."""
    items = [
        (RememberParams(text=f"{prefix} {i}", **fields), fake_embed(f"{prefix} {i}"))
        for i in range(n)
    ]
    return [r.drawer_id for r in store.remember_batch(items)]


@pytest.fixture
def palace_dir(tmp_path: Path) -> Path:
    return tmp_path / "palaces" / "proj"


@pytest.fixture
def store(palace_dir: Path):
    s = PalaceStore.open(palace_dir, "proj", SETTINGS, description="project memory")
    yield s
    s.close()


def sql(palace_dir: Path, query: str, *args):
    """Test helper: read the palace file through a separate connection (what a crash leaves)."""
    conn = sqlite3.connect(palace_dir / "palace.sqlite3")
    try:
        return conn.execute(query, args).fetchall()
    finally:
        conn.close()


def no_rebuild(monkeypatch):
    """Test helper: make any index rebuild fail the test."""

    def fail(self):
        raise AssertionError("index was rebuilt")

    monkeypatch.setattr(PalaceStore, "rebuild_index", fail)


# -- layout and schema ----------------------------------------------------------------


def test_open_creates_layout_and_schema(store, palace_dir):
    assert (palace_dir / "palace.json").exists()
    assert (palace_dir / "identity.txt").read_text() == "project memory"
    assert store.identity() == "project memory"
    assert sql(palace_dir, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    plan = sql(
        palace_dir, "EXPLAIN QUERY PLAN SELECT label FROM drawers WHERE created_at >= ?", "x"
    )
    assert "drawers_created_at" in str(plan)  # date ranges never scan the table
    assert sql(palace_dir, "PRAGMA journal_mode") == [("wal",)]
    tables = {r[0] for r in sql(palace_dir, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"drawers", "drawer_tags", "triples", "changes", "drawers_fts"} <= tables
    info = store.info()
    assert (info.id, info.name, info.drawer_count) == ("proj", "proj", 0)
    assert info.data_dir == str(palace_dir)
    assert info.description == "project memory"


def test_a_writer_syncs_every_commit_to_disk_by_default(palace_dir):
    """An acknowledged write must survive a power cut: FULL (2) unless the home says
    otherwise (``[palace] synchronous``)."""
    with PalaceStore.open(palace_dir, "proj", PalaceSettings()) as full:
        assert full.db.execute("PRAGMA synchronous").fetchone() == (2,)
    relaxed = PalaceSettings(synchronous="NORMAL")
    with PalaceStore.open(palace_dir, "proj", relaxed) as normal:
        assert normal.db.execute("PRAGMA synchronous").fetchone() == (1,)


def test_open_missing_without_create(tmp_path):
    with pytest.raises(TrustyError) as err:
        PalaceStore.open(tmp_path / "nope", "nope", SETTINGS, create=False)
    assert err.value.code == ErrorCode.PALACE_NOT_FOUND


# -- remember --------------------------------------------------------------------------


def test_remember_batch_is_one_transaction(store, palace_dir):
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    ids = fill(store, 20, tags=["t"])
    store._conn.set_trace_callback(None)
    assert sum(s.strip().upper().startswith("BEGIN") for s in statements) == 1
    assert sum(s.strip().upper() == "COMMIT" for s in statements) == 1
    assert len(set(ids)) == 20 and all(uuid.UUID(i) for i in ids)
    assert sql(palace_dir, "SELECT count(*) FROM changes WHERE op='add'") == [(20,)]
    assert store.info().index_count == 20


def test_bad_item_fails_the_whole_batch_before_writing(store, palace_dir):
    items = [
        (RememberParams(text="fine"), fake_embed("fine")),
        (RememberParams(text="bad", importance=1.5), fake_embed("bad")),
    ]
    with pytest.raises(TrustyError) as err:
        store.remember_batch(items)
    assert err.value.code == ErrorCode.INVALID_PARAMS and "importance" in err.value.message
    assert sql(palace_dir, "SELECT count(*) FROM drawers") == [(0,)]
    with pytest.raises(TrustyError):
        store.validate_remember(*items[1])


def test_retry_with_same_drawer_id_is_idempotent(store, palace_dir):
    did = str(uuid.uuid4())
    first = remember(store, "the gateway uses RS256", drawer_id=did)
    again = store.remember_batch(
        [
            (RememberParams(text="the gateway uses RS256", drawer_id=did.upper()), fake_embed("x")),
            (RememberParams(text="dup in batch", drawer_id=did), fake_embed("y")),
        ]
    )
    assert first == did
    assert [r.drawer_id for r in again] == [did, did]
    assert all(r.status == "stored" and r.palace == "proj" for r in again)
    assert sql(palace_dir, "SELECT count(*) FROM drawers") == [(1,)]
    assert sql(palace_dir, "SELECT count(*) FROM changes") == [(1,)]


def test_bounded_bm25_scores_rare_term_drawers_with_every_term(store, monkeypatch):
    """With a budget smaller than a common word's drawer count, BM25 scores only drawers
    holding a rarer term, but still by all terms: the drawer with both ranks first, and
    the order matches the unbounded ranking for every drawer holding the rare term."""
    from trusty_memory.workers.store import ranking

    fill(store, 300, prefix="deploy note")  # "deploy" and "note" in 300 drawers each
    both = remember(store, "deploy the kraken service", room="Ops")
    rare_only = remember(store, "the kraken ate my homework")
    long_rare = remember(store, "kraken " + " ".join(f"pad{i}" for i in range(40)))
    query = "deploy kraken"
    label = {
        drawer_id: lbl for lbl, drawer_id in store._conn.execute("SELECT label, id FROM drawers")
    }
    unbounded = [label[d] for d in (both, rare_only, long_rare)]
    full = ranking.bm25(store, query, 50, None, None)
    monkeypatch.setattr(ranking, "BM25_POSTINGS_BUDGET", 10)
    store.term_counts.counts.clear()
    bounded = ranking.bm25(store, query, 50, None, None)
    assert bounded == [label for label in full if label in unbounded] == unbounded
    assert ranking.bm25(store, query, 50, "Ops", None) == [unbounded[0]]
    assert ranking.bm25(store, query, 50, None, "no-such-tag") == []
    assert ranking.bm25(store, "zzz-unknown words", 50, None, None) == []


def test_deep_recall_lifts_the_episode_neighbour_of_a_hit(store, monkeypatch):
    """The reply after a question is found through the question: drawers written in the
    same room within minutes share part of each other's score, so the reply (second by
    vector, a little behind) overtakes a decoy (first by vector, another day) only with
    episodes on."""
    from trusty_memory.workers.store import ranking

    query = fake_embed("the query")
    near_query = functools.partial(at_cosine, query)

    decoy = RememberParams(text="decoy", created_at="2025-06-01T08:00:00Z")
    store.remember_batch([(decoy, near_query(0.35, "decoy"))])
    fill(store, 200)
    t = "2026-01-05T10:00:0{}Z"
    question = RememberParams(text="who owns the zanzibar rollout?", created_at=t.format(0))
    reply = RememberParams(text="Priya does, since March", created_at=t.format(1))
    elsewhere = RememberParams(text="Priya, in Ops", room="Ops", created_at=t.format(2))
    store.remember_batch(
        [
            (question, near_query(0.25, "question")),  # near the query, as a model puts it
            (reply, near_query(0.34, "reply")),
            (elsewhere, fake_embed("elsewhere")),
        ]
    )

    def order() -> list[str]:
        hits = store.recall("zanzibar rollout owner", query, top_k=10, deep=True)
        return [h.content for h in hits]

    with_episodes = order()
    assert with_episodes[:3] == [question.text, reply.text, "decoy"]
    assert "Priya, in Ops" not in with_episodes  # another room is another episode
    monkeypatch.setattr(ranking, "EPISODE_WEIGHT", 0.0)
    without = order()
    assert without.index("decoy") < without.index(reply.text)


def test_smooth_episodes_shares_scores_between_neighbours():
    from trusty_memory.workers.store.ranking import smooth_episodes

    fused = [(10, 1.0), (20, 0.9), (11, 0.1), (30, 0.5)]
    same = {frozenset((10, 11))}
    ranked = smooth_episodes(fused, lambda a, b: frozenset((a, b)) in same, 4, weight=0.5)
    assert [label for label, _ in ranked] == [10, 20, 11, 30]
    assert dict(ranked)[11] == pytest.approx((0.1 + 0.5 * 1.0) / 2)
    assert dict(ranked)[10] == pytest.approx((1.0 + 0.5 * 0.1) / 2)
    assert all(0 < score <= 1 for _, score in ranked)
    assert smooth_episodes(fused, lambda a, b: False, 2, weight=0.0) == [(10, 1.0), (20, 0.9)]


def test_feedback_terms_are_the_rarest_words_the_query_lacks():
    from trusty_memory.workers.store.ranking import FEEDBACK_TERMS, feedback_terms

    counts = {"okonkwo": 2, "kestrel": 3, "rollout": 2, "signed": 40, "alone": 1}
    docs = ["zanzibar rollout owner okonkwo alone", "kestrel signed okonkwo"]
    terms = feedback_terms(["zanzibar", "rollout"], docs, str.split, lambda t: counts.get(t, 0))
    # "rollout" is asked already; "alone" is in no other drawer; "owner" in none at all.
    assert terms == ["okonkwo", "kestrel", "signed"]
    many = {f"w{i}": 2 + i for i in range(10)}
    picked = feedback_terms([], [" ".join(many)], str.split, many.__getitem__)
    assert picked == [f"w{i}" for i in range(FEEDBACK_TERMS)]
    assert feedback_terms(["a"], [], str.split, lambda t: 5) == []
    # Common words say little about the answer: the terms hold few drawers together.
    wide = {"rare": 3, "team": 300, "deploy": 400}
    assert feedback_terms([], ["rare team deploy"], str.split, wide.__getitem__) == ["rare", "team"]


def test_document_counts_under_a_smaller_cap_never_pass_for_full_ones(store):
    """The feedback list counts words only up to its own budget; such a count says "more
    than that", so it must not answer the BM25 split, which needs counts up to its own."""
    fill(store, 30, prefix="common")
    fill(store, 2, prefix="rare")
    assert store.term_counts.count("common", cap=10) == 11  # more than 10
    assert "common" not in store.term_counts.counts
    assert store.term_counts.count("common", cap=10) == 11  # remembered as over, no recount
    assert store.term_counts.count("common") == 30  # the full count is still taken
    assert store.term_counts.count("common", cap=10) == 11  # and a full count answers small caps
    assert store.term_counts.count("rare", cap=10) == 2  # exact under the cap: cached as full
    assert store.term_counts.counts["rare"] == 2 and store.term_counts.count("rare") == 2


def test_deep_recall_finds_a_drawer_through_the_top_hit_words(store, monkeypatch):
    """Pseudo-relevance feedback: a note that shares none of the question's words but a
    rare word of the best hit ("Okonkwo") climbs into the top 10 only with feedback on,
    over decoys that are closer by vector and share nothing with the hit."""
    from trusty_memory.workers.store import ranking

    query = fake_embed("the query")
    near_query = functools.partial(at_cosine, query)

    # Written months before the hit, so no episode links the two.
    answer = RememberParams(
        text="Okonkwo signed off the launch checklist", created_at="2025-06-01T08:00:00Z"
    )
    store.remember_batch([(answer, near_query(0.3, "answer"))])
    fill(store, 100)
    decoys = [  # a day apart: no episodes among them either
        RememberParams(text=f"xq{k}a yb{k}c", created_at=f"2025-07-{k + 1:02d}T08:00:00Z")
        for k in range(12)
    ]
    store.remember_batch([(d, near_query(0.5 - 0.01 * k, d.text)) for k, d in enumerate(decoys)])
    hit = RememberParams(text="The zanzibar rollout is owned by Okonkwo")
    store.remember_batch([(hit, near_query(0.9, "hit"))])

    def top() -> list[str]:
        return [h.content for h in store.recall("zanzibar rollout owner", query, 10, deep=True)]

    with_feedback = top()
    assert with_feedback[0] == hit.text
    assert answer.text in with_feedback
    monkeypatch.setattr(ranking, "FEEDBACK_WEIGHT", 0.0)
    assert answer.text not in top()


def test_deep_recall_ranks_what_was_written_in_the_month_a_question_names(store, monkeypatch):
    """ "In March, which envoy version did the gateway get?": of a dozen look-alike notes,
    one a month, the one written in March comes first once the date list is in, though
    another is closer by vector."""
    from trusty_memory.workers.store import ranking

    query = fake_embed("the query")
    near_query = functools.partial(at_cosine, query)

    fill(store, 50, created_at="2025-12-01T08:00:00Z")
    notes = [
        (
            RememberParams(
                text=f"auth gateway envoy pinned to 1.{month}",
                created_at=f"2026-{month:02d}-10T09:00:00Z",
            ),
            near_query(0.6 - (0.1 if month == 3 else 0.01 * month), f"note {month}"),
        )
        for month in range(1, 13)
    ]
    store.remember_batch(notes)
    question = "In March, which envoy version did the auth gateway get?"

    def top() -> str:
        return store.recall(question, query, 5, deep=True)[0].content

    assert top() == "auth gateway envoy pinned to 1.3"
    assert store.recall(question, query, 5, deep=True)[0].score <= 1.0
    monkeypatch.setattr(ranking, "DATE_WEIGHT", 0.0)
    assert top() != "auth gateway envoy pinned to 1.3"


def test_deep_recall_finds_a_note_written_the_day_after_the_date_a_question_names(store):
    """ "Which city was Calvin in on October 3, 2023?": the note that says so was written
    on the 4th ("Yesterday I met some artists in Boston"); the date list finds it by
    the day it speaks of, though another note is closer by vector."""
    query = fake_embed("the query")
    fill(store, 30, created_at="2023-09-01T08:00:00Z")
    store.remember_batch(
        [
            (RememberParams(text="Calvin: Yesterday I met some artists in Boston.",
                            created_at="2023-10-04T15:00:00Z"), at_cosine(query, 0.45, "a")),
            (RememberParams(text="Calvin: The city lights are amazing.",
                            created_at="2023-11-20T15:00:00Z"), at_cosine(query, 0.5, "b")),
        ]
    )  # fmt: skip
    question = "Which city was Calvin at on October 3, 2023?"
    assert store.recall(question, query, 1, deep=True)[0].content.startswith("Calvin: Yesterday")
    assert store.recall("Which city was Calvin at?", query, 1, deep=True)[0].content == (
        "Calvin: The city lights are amazing."
    )


def test_the_days_a_drawer_speaks_of_follow_it_through_every_write(store, palace_dir):
    """Kept by triggers (``schema._v8_mentioned_days``): written with the drawer,
    gone with it, read again when a merge moves its time."""

    def days() -> list[tuple[str, str, str]]:
        return sql(palace_dir, "SELECT d.content, start, end FROM drawer_days"
                               " JOIN drawers d USING (label) ORDER BY start")  # fmt: skip

    dated = remember(store, "we shipped it yesterday", created_at="2026-03-05T10:00:00Z")
    remember(store, "plain note", created_at="2026-03-05T10:00:00Z")
    assert days() == [("we shipped it yesterday", "2026-03-03T12:00:00Z", "2026-03-05T12:00:00Z")]
    store.db.execute("UPDATE drawers SET created_at = '2026-04-05T10:00:00Z' WHERE id = ?", [dated])
    assert days()[0][1:] == ("2026-04-03T12:00:00Z", "2026-04-05T12:00:00Z")
    store.forget(dated)
    assert days() == []
    assert sql(palace_dir, "SELECT count(*) FROM drawer_days") == [(0,)]


def test_a_recall_of_a_stored_text_word_for_word_always_finds_it(store, monkeypatch):
    """The approximate search may pass over one vector among near-identical ones; the
    drawer whose text is the query is found all the same (by its hash), scored by its
    cosine, and only within the recall's filters."""
    target = remember(store, "deploy note: canary at 5%", room="Backend")
    fill(store, 40)  # newer: the target is out of L1's 32
    monkeypatch.setattr(store.index, "search", lambda *args, **kwargs: [])  # it missed
    hits = store.recall("deploy note: canary at 5%", fake_embed("deploy note: canary at 5%"), 5)
    assert hits[0].drawer_id == target and hits[0].layer == 2
    assert hits[0].score == pytest.approx(1.0)
    assert store.recall("deploy note: canary at 5%", fake_embed("x"), 5, room="Frontend") == []
    assert target not in [h.drawer_id for h in store.recall("deploy note", fake_embed("d"), 5)]


def test_dates_at_the_edges_of_the_calendar_do_not_break_deep_recall(store):
    fill(store, 5, prefix="first", created_at="0001-01-01T00:00:00Z")
    fill(store, 5, prefix="last", created_at="9999-12-31T00:00:00Z")
    fill(store, 20, prefix="now", created_at="2026-03-02T08:00:00Z")
    for question in ("what happened in December?", "on January 1?", "in March 2026?"):
        assert len(store.recall(question, fake_embed(question), 5, deep=True)) == 5


def test_a_date_covering_half_the_palace_or_more_adds_no_list(store):
    from trusty_memory.workers.store import ranking

    fill(store, 20, created_at="2026-03-02T08:00:00Z")
    fill(store, 10, prefix="other", created_at="2026-05-02T08:00:00Z")
    query = fake_embed("q")
    assert ranking.date_ranking(store, "what happened in March?", query, 50, None) == []
    may = ranking.date_ranking(store, "what happened in May?", query, 50, None)
    assert len(may) == 10
    assert ranking.date_ranking(store, "what happened in May?", query, 50, set(may[:3])) == may[:3]
    assert ranking.date_ranking(store, "what happened?", query, 50, None) == []


def test_a_word_unknown_at_one_deep_recall_is_found_after_it_is_written(store):
    fill(store, 50)
    query = fake_embed("unrelated")
    assert "kraken" not in {h.content for h in store.recall("kraken", query, 5, deep=True)}
    remember(store, "kraken")
    found = store.recall("kraken", query, 5, deep=True)
    assert "kraken" in {h.content for h in found[:2]}  # BM25's first; ties the vector's


def test_split_terms_keeps_the_rarest_within_budget():
    from trusty_memory.workers.store.ranking import split_terms

    counts = {"go": 9000, "kraken": 3, "group": 900, "lgbtq": 800, "nowhere": 0}
    terms = ["go", "kraken", "group", "lgbtq", "nowhere"]
    assert split_terms(terms, counts.get, budget=1000) == (["kraken", "lgbtq"], ["group", "go"])
    assert split_terms(terms, counts.get, budget=1) == (["kraken"], ["lgbtq", "group", "go"])
    assert split_terms(terms, counts.get, budget=10**6) == (["kraken", "lgbtq", "group", "go"], [])
    assert split_terms(["go"], counts.get, budget=1) == (["go"], [])  # never empty-handed
    assert split_terms(["nowhere"], counts.get) == ([], [])


@pytest.mark.parametrize(
    ("fields", "code", "needle"),
    [
        ({"text": ""}, ErrorCode.INVALID_PARAMS, "text"),
        ({"text": "   "}, ErrorCode.INVALID_PARAMS, "text"),
        ({"text": "x" * 1001}, ErrorCode.TEXT_TOO_LARGE, "text is 1001 bytes; the limit is 1000"),
        ({"text": "é" * 501}, ErrorCode.TEXT_TOO_LARGE, "1002 bytes"),
        ({"text": "ok", "drawer_id": "not-a-uuid"}, ErrorCode.INVALID_PARAMS, "drawer_id"),
        ({"text": "ok", "importance": float("nan")}, ErrorCode.INVALID_PARAMS, "importance"),
        ({"text": "ok", "created_at": "yesterday"}, ErrorCode.INVALID_PARAMS, "created_at"),
    ],
)
def test_remember_validation(store, fields, code, needle):
    with pytest.raises(TrustyError) as err:
        store.remember_batch([(RememberParams(**fields), fake_embed("v"))])
    assert err.value.code == code
    assert needle in err.value.message


def test_wrong_vector_dimension_is_invalid(store):
    with pytest.raises(TrustyError) as err:
        store.remember_batch([(RememberParams(text="x"), np.ones(5, dtype=np.float32))])
    assert err.value.code == ErrorCode.INVALID_PARAMS


# -- recall ----------------------------------------------------------------------------


def test_recall_finds_the_nearest(store):
    fill(store, 300)
    target = remember(store, "JWT tokens are validated with RS256", tags=["auth"])
    hits = store.recall("jwt", fake_embed("JWT tokens are validated with RS256"), top_k=5)
    assert hits[0].drawer_id == target
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].tags == ["auth"] and hits[0].importance == 0.5
    assert hits[0].layer in (1, 2)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(hits) == 5


def test_l1_layer_holds_the_most_important_drawers(store):
    fill(store, 100, importance=0.1)
    vip = remember(store, "release freeze every friday", importance=1.0)
    hits = store.recall("q", fake_embed("unrelated query"), top_k=200)
    by_id = {h.drawer_id: h for h in hits}
    assert by_id[vip].layer == 1
    assert {h.layer for h in hits} == {1, 2}
    assert store.recall("q", fake_embed("release freeze every friday"), 1)[0].drawer_id == vip


@pytest.mark.parametrize("deep", [False, True])
def test_room_and_tag_filters_apply_inside_the_search(store, deep):
    fill(store, 2000, room="Frontend", tags=["ui"])
    planted = remember(store, "planted backend fact", room="backend", tags=["db"])
    query = fake_embed("something else entirely")
    for kwargs in ({"room": "Backend"}, {"room": "BACKEND"}, {"tag": "db"}):
        hits = store.recall("xyz", query, top_k=3, deep=deep, **kwargs)
        assert [h.drawer_id for h in hits] == [planted], kwargs
        assert hits[0].room == "Backend"
    assert store.recall("xyz", query, 3, room="Backend", tag="ui", deep=deep) == []
    assert store.recall("xyz", query, 3, tag="no-such-tag", deep=deep) == []
    ui = store.recall("xyz", query, top_k=10, tag="ui", deep=deep)
    assert len(ui) == 10 and planted not in {h.drawer_id for h in ui}


def test_deep_recall_fuses_bm25_keyword_matches(store):
    fill(store, 500)
    keyword = remember(store, "the zanzibar flag enables the new scheduler")
    query = fake_embed("how do I turn on the new scheduler?")  # unrelated to every vector
    shallow = store.recall("zanzibar scheduler", query, top_k=5)
    assert keyword not in {h.drawer_id for h in shallow}
    deep = store.recall("Zanzibar?", query, top_k=5, deep=True)
    # First by BM25 and nowhere near by vector: ties with the vector's first (0.5 of a
    # perfect score), give or take its episode neighbours' share; random vectors' cosines
    # sit close together, so the vector's first few all vote nearly in full.
    assert keyword in {h.drawer_id for h in deep[:3]}
    [score] = [h.score for h in deep if h.drawer_id == keyword]
    assert 0.5 / 1.5 <= score <= 0.5
    assert all(h.layer == 3 for h in deep)
    assert [h.score for h in deep] == sorted((h.score for h in deep), reverse=True)
    assert 0 < deep[0].score <= 1


@pytest.mark.parametrize(
    "text", ['"unbalanced', "AND OR NOT", "col:value*", "NEAR(a b)", "(((", "", "🙂 ^ -"]
)
def test_deep_recall_never_raises_on_fts_syntax(store, text):
    remember(store, "some content about NEAR and AND")
    store.recall(text, fake_embed(text), top_k=3, deep=True)


def test_top_k_bounds(store):
    remember(store, "x")
    for bad in (0, -1, SETTINGS.max_top_k + 1):
        with pytest.raises(TrustyError) as err:
            store.recall("x", fake_embed("x"), top_k=bad)
        assert err.value.code == ErrorCode.INVALID_PARAMS and "top_k" in err.value.message
    assert len(store.recall("x", fake_embed("x"), top_k=SETTINGS.max_top_k)) == 1


def test_hits_are_counted_in_memory_and_flushed_with_the_next_write(store, palace_dir):
    did = remember(store, "counted")
    for _ in range(3):
        store.recall("counted", fake_embed("counted"), top_k=1)
    assert sql(palace_dir, "SELECT hits FROM drawers WHERE id=?", did) == [(0,)]
    remember(store, "another write")
    assert sql(palace_dir, "SELECT hits FROM drawers WHERE id=?", did) == [(3,)]
    store.recall("counted", fake_embed("counted"), top_k=1)
    store.flush()
    assert sql(palace_dir, "SELECT hits FROM drawers WHERE id=?", did) == [(4,)]


# -- list / forget ---------------------------------------------------------------------


def test_list_order_limit_and_filters(store):
    low = remember(store, "low", importance=0.1, room="Testing")
    high = remember(store, "high", importance=0.9, tags=["a", "b"], room="testing")
    old = remember(store, "old", importance=0.5, created_at="2020-01-01T00:00:00+02:00")
    new = remember(store, "new", importance=0.5, tags=["a"], room="My Custom Room")
    assert [d.drawer_id for d in store.list(ListParams())] == [high, new, old, low]
    assert [d.drawer_id for d in store.list(ListParams(limit=2))] == [high, new]
    assert [d.drawer_id for d in store.list(ListParams(room="TESTING"))] == [high, low]
    assert [d.drawer_id for d in store.list(ListParams(tag="a"))] == [high, new]
    assert [d.drawer_id for d in store.list(ListParams(room="Testing", tag="a"))] == [high]
    [custom] = store.list(ListParams(room="My Custom Room"))
    assert (custom.drawer_id, custom.room) == (new, "My Custom Room")
    assert store.list(ListParams(room="my custom room")) == []  # custom rooms are verbatim
    [o] = [d for d in store.list(ListParams()) if d.drawer_id == old]
    assert o.created_at == "2019-12-31T22:00:00Z"
    assert all(d.created_at.endswith("Z") for d in store.list(ListParams()))
    with pytest.raises(TrustyError) as err:
        store.list(ListParams(limit=0))
    assert err.value.code == ErrorCode.INVALID_PARAMS and "limit" in err.value.message


def test_forget_removes_everywhere_and_unknown_id_errors(store, palace_dir):
    did = remember(store, "forget me zanzibar", importance=1.0, tags=["gone"])
    keep = remember(store, "keep me")
    result = store.forget(did)
    assert (result.status, result.drawer_id, result.palace) == ("deleted", did, "proj")
    assert did not in {h.drawer_id for h in store.recall("x", fake_embed("forget me zanzibar"), 5)}
    assert store.recall("zanzibar", fake_embed("q"), 5, deep=True)[0].drawer_id == keep
    assert store.recall("x", fake_embed("q"), 5, tag="gone") == []
    assert sql(
        palace_dir, "SELECT count(*) FROM drawers_fts WHERE drawers_fts MATCH 'zanzibar'"
    ) == [(0,)]
    assert sql(palace_dir, "SELECT op FROM changes ORDER BY seq") == [
        ("add",),
        ("add",),
        ("delete",),
    ]
    assert store.info().drawer_count == store.info().index_count == 1
    for unknown in (did, str(uuid.uuid4()), "nonsense"):
        with pytest.raises(TrustyError) as err:
            store.forget(unknown)
        assert err.value.code == ErrorCode.DRAWER_NOT_FOUND
        assert err.value.message == f"drawer not found: {unknown}"


# -- knowledge graph -------------------------------------------------------------------


def test_kg_assert_closes_prior_and_query_returns_active_only(store, palace_dir):
    p = KgAssertParams
    assert store.kg_assert(p(subject="auth", predicate="version", object="2.4.0")) == {
        "status": "asserted"
    }
    store.kg_assert(p(subject="auth", predicate="owner", object="alice", provenance="wiki"))
    store.kg_assert(p(subject="auth", predicate="version", object="2.4.1", confidence=0.95))
    result = store.kg_query("auth")
    assert result.subject == "auth"
    assert [(t.predicate, t.object) for t in result.triples] == [
        ("owner", "alice"),
        ("version", "2.4.1"),
    ]
    latest = result.triples[1]
    assert latest.valid_to is None and latest.confidence == 0.95
    assert latest.valid_from.endswith("Z") and len(latest.valid_from) == 20
    assert result.triples[0].provenance == "wiki"
    closed = sql(palace_dir, "SELECT object, valid_to FROM triples WHERE valid_to IS NOT NULL")
    assert [r[0] for r in closed] == ["2.4.0"]
    assert store.kg_query("nobody").triples == []
    assert store.info().triple_count == 2
    with pytest.raises(TrustyError) as err:
        store.kg_assert(p(subject="a", predicate="b", object="c", confidence=1.5))
    assert err.value.code == ErrorCode.INVALID_PARAMS and "confidence" in err.value.message
    with pytest.raises(TrustyError):
        store.kg_assert(p(subject="", predicate="b", object="c"))


# -- durability and the index as a cache -----------------------------------------------


def test_a_full_disk_is_a_clear_error_and_writes_resume_when_space_returns(store, palace_dir):
    """SQLITE_FULL (here from a page cap, as a full disk gives it) names the file and the
    fix; nothing of the refused write is stored, and writing works again afterwards."""
    kept = remember(store, "written while there was room")
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(TrustyError) as err:
        fill(store, 200, prefix="too much")
    assert err.value.code == ErrorCode.STORAGE_ERROR
    message = err.value.message
    assert message.startswith("disk full: remember_batch: cannot write ")
    assert str(palace_dir / "palace.sqlite3") in message and "Free some space" in message
    assert sql(palace_dir, "SELECT id FROM drawers") == [(kept,)]
    store._conn.execute("PRAGMA max_page_count = 1000000")
    assert len(fill(store, 200, prefix="room again")) == 200
    assert store.info().drawer_count == store.info().index_count == 201


def test_a_corrupt_file_is_named_with_how_to_recover(palace_dir):
    PalaceStore.open(palace_dir, "proj", SETTINGS).close()
    db = palace_dir / "palace.sqlite3"
    with db.open("r+b") as fh:
        fh.write(b"\xff" * 100)  # the header
    with pytest.raises(TrustyError) as err:
        PalaceStore.open(palace_dir, "proj", SETTINGS)
    assert err.value.code == ErrorCode.STORAGE_ERROR
    assert err.value.message.startswith(f"palace file is corrupt: {db} (file is not a database)")
    assert "Restore it from a backup" in err.value.message


def test_another_connection_writing_waits_for_the_writer_instead_of_failing(store, palace_dir):
    """With a deferred BEGIN, a transaction that read before another connection committed
    failed its first write at once with "database is locked" (WAL cannot turn a stale
    reader into a writer). Only one writer process opens a palace (writer.lock), but any
    other SQLite connection (a tool, a restore) must not make an acknowledged write fail."""
    remember(store, "already there")
    written: list[int] = []

    def other_writer() -> None:
        conn = sqlite3.connect(palace_dir / "palace.sqlite3", timeout=10)
        try:
            with conn:
                conn.execute(
                    "INSERT INTO triples (subject, predicate, object, valid_from, confidence)"
                    " VALUES ('a', 'b', 'c', '2026-01-01T00:00:00Z', 1.0)"
                )
            written.append(1)
        finally:
            conn.close()

    with store.transaction() as conn:
        conn.execute("SELECT count(*) FROM drawers").fetchone()  # a read, then ...
        t = threading.Thread(target=other_writer)
        t.start()
        t.join(0.3)  # ... the other connection tries to commit meanwhile
        conn.execute("UPDATE drawers SET importance = 0.9")  # ... then this write
    t.join(10)
    assert written == [1]
    assert sql(palace_dir, "SELECT count(*) FROM triples") == [(1,)]
    assert sql(palace_dir, "SELECT importance FROM drawers") == [(0.9,)]


def test_reopen_after_close_uses_the_snapshot(palace_dir, monkeypatch):
    with PalaceStore.open(palace_dir, "proj", SETTINGS) as s:
        ids = fill(s, 25)
        s.forget(ids[0])
    no_rebuild(monkeypatch)
    with PalaceStore.open(palace_dir, "proj", SETTINGS, create=False) as s:
        info = s.info()
        assert info.drawer_count == info.index_count == 24
        assert info.last_seq == 26
        assert s.recall("q", fake_embed("filler 7"), 1)[0].drawer_id == ids[7]


def test_crash_replays_the_change_log(tmp_path, palace_dir, monkeypatch):
    s = PalaceStore.open(palace_dir, "proj", SETTINGS)
    ids = fill(s, 15)  # 15 changes >= index_save_every: a snapshot at seq 15
    assert sorted(p.name for p in palace_dir.glob("index-*.json")) == ["index-000000000015.json"]
    more = fill(s, 4, prefix="after snapshot")
    s.forget(ids[3])
    s.forget(more[0])
    s.recall("q", fake_embed("filler 1"), 1)  # pending hits die with the process: fine
    # "kill -9": copy the files as they are while the store is still open, never close it.
    crashed = tmp_path / "crashed"
    shutil.copytree(palace_dir, crashed)
    no_rebuild(monkeypatch)
    with PalaceStore.open(crashed, "proj", SETTINGS, create=False) as r:
        labels = {row[0] for row in sql(crashed, "SELECT label FROM drawers")}
        assert r.index.labels() == labels
        assert r.info().drawer_count == 17
        assert r.recall("q", fake_embed("after snapshot 2"), 1)[0].drawer_id == more[2]
        gone = {h.drawer_id for h in r.recall("q", fake_embed("filler 3"), 17)}
        assert ids[3] not in gone and more[0] not in gone


def test_crash_before_any_snapshot_rebuilds_from_sqlite(tmp_path, palace_dir):
    s = PalaceStore.open(
        palace_dir, "proj", PalaceSettings(ef_construction=64, index_save_every=10**6)
    )
    ids = fill(s, 30)
    crashed = tmp_path / "crashed"
    shutil.copytree(palace_dir, crashed)
    for p in crashed.glob("index-*"):
        p.unlink()
    with PalaceStore.open(crashed, "proj", SETTINGS) as r:
        assert r.info().index_count == 30
        assert r.recall("q", fake_embed("filler 29"), 1)[0].drawer_id == ids[29]


@pytest.mark.parametrize("damage", ["corrupt", "stale-future", "disagrees"])
def test_unusable_snapshot_means_rebuild(palace_dir, damage):
    with PalaceStore.open(palace_dir, "proj", SETTINGS) as s:
        ids = fill(s, 20)
    [data] = palace_dir.glob("index-*.hnsw")
    if damage == "corrupt":
        data.write_bytes(b"\x00" * 64)
    elif damage == "stale-future":
        data.rename(palace_dir / "index-000000009999.hnsw")
        meta = data.with_suffix(".json")
        meta.rename(palace_dir / "index-000000009999.json")
    else:  # a drawer SQLite has that the snapshot + log do not explain
        sql_conn = sqlite3.connect(palace_dir / "palace.sqlite3")
        sql_conn.execute("DELETE FROM changes WHERE seq = 20")
        sql_conn.execute(
            "INSERT INTO changes (op, label, drawer_id, at) VALUES ('add', 999, 'x', 'now')"
        )
        sql_conn.commit()
        sql_conn.close()
    with PalaceStore.open(palace_dir, "proj", SETTINGS) as s:
        assert s.info().index_count == 20
        assert s.recall("q", fake_embed("filler 5"), 1)[0].drawer_id == ids[5]


def test_index_grows_beyond_initial_capacity(palace_dir):
    with PalaceStore.open(palace_dir, "proj", SETTINGS) as s:
        start = s.index.capacity
        ids = fill(s, start + 100)
        assert s.index.capacity > start
        assert s.info().index_count == start + 100
        assert s.recall("q", fake_embed(f"filler {start + 50}"), 1)[0].drawer_id == ids[start + 50]


_WRITER = """
import sys, hashlib, numpy as np
from pathlib import Path
from trusty_memory.common.config import PalaceSettings
from trusty_memory.common.messages import RememberParams
from trusty_memory.workers.store.write import PalaceStore

def vec(text):
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)

settings = PalaceSettings(ef_construction=32, index_save_every=25)
s = PalaceStore.open(Path(sys.argv[1]), "proj", settings)
i = 0
while True:
    items = [(RememberParams(text=f"w {i + j}"), vec(f"w {i + j}")) for j in range(5)]
    for r in s.remember_batch(items):
        print("ACK", r.drawer_id, flush=True)  # acknowledged only after the commit
    i += 5
"""


def test_kill_9_loses_no_acknowledged_write(palace_dir):
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(palace_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    acked = []
    try:
        while len(acked) < 120:
            line = proc.stdout.readline()
            assert line, "writer died"
            if line.startswith("ACK "):  # other lines are unconfigured structlog output
                acked.append(line.split()[1])
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    with PalaceStore.open(palace_dir, "proj", SETTINGS, create=False) as s:
        stored = {d.drawer_id for d in s.list(ListParams(limit=1000))}
        assert set(acked) <= stored
        assert s.index.labels() == {r[0] for r in sql(palace_dir, "SELECT label FROM drawers")}


def test_one_writer_per_palace_a_second_waits_for_the_first_to_close(palace_dir):
    """A writer whose broker died may still commit; its replacement waits until it is gone."""
    from dataclasses import replace

    first = PalaceStore.open(palace_dir, "proj", SETTINGS)
    quick = replace(SETTINGS, writer_lock_wait_s=0.2)
    with pytest.raises(TrustyError, match="another process still writes it") as info:
        PalaceStore.open(palace_dir, "proj", quick)
    assert info.value.code == ErrorCode.STORAGE_ERROR
    remember(first, "written by the first writer")
    first.close()
    second = PalaceStore.open(palace_dir, "proj", quick)
    try:
        assert [d.content for d in second.list(ListParams(limit=5))] == [
            "written by the first writer"
        ]
    finally:
        second.close()


def test_the_vectors_first_stays_in_deep_recalls_top_three():
    """Deep recall never buries plain recall's first answer: fused below third, the vector's
    first drawer moves up to third with the score of the drawer it passes."""
    from trusty_memory.workers.store.ranking import guard_vector_first

    ranked = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5)]
    assert guard_vector_first(ranked, [5, 1], guard=3) == [
        (1, 0.9), (2, 0.8), (5, 0.7), (3, 0.7), (4, 0.6)
    ]  # fmt: skip
    assert guard_vector_first(ranked, [9], guard=3)[2] == (9, 0.7)  # fused it out entirely
    assert guard_vector_first(ranked, [2], guard=3) == ranked  # already within
    assert guard_vector_first(ranked, [5], guard=0) == ranked  # switched off
    assert guard_vector_first(ranked[:2], [7], guard=3) == [(1, 0.9), (7, 0.8)]


def test_episodes_join_only_notes_that_continue_each_other(store, monkeypatch):
    """Standalone notes written seconds apart in one room are no episode (each stands
    alone); a question and its answer are."""
    from trusty_memory.workers.store import ranking

    t = "2026-01-05T10:00:0{}Z"
    texts = ["ledger stores amounts as int64 cents.", "atlas lazy-loads the map view.",
             "who owns the zanzibar rollout?", "Priya does, since March"]  # fmt: skip
    store.remember_batch(
        [
            (RememberParams(text=x, created_at=t.format(i)), fake_embed(x))
            for i, x in enumerate(texts)
        ]
    )
    labels = [row[0] for row in store._conn.execute("SELECT label FROM drawers ORDER BY label")]
    same = ranking.episodes(store, set(labels))
    assert not same(labels[0], labels[1])
    assert same(labels[2], labels[3]) and same(labels[3], labels[2])
    monkeypatch.setattr(ranking, "EPISODES_CONTINUE", 0)
    assert ranking.episodes(store, set(labels))(labels[0], labels[1])  # room and time alone


def test_deep_recall_answers_first_by_meaning_when_only_the_words_favour_another(
    store, monkeypatch
):
    """Issue 37: a standalone note first by meaning, asked in other words, stays deep
    recall's first answer over a note that holds the question's words but is clearly
    further by meaning (0.25 of cosine); within the margin the words still decide. (The
    question's words are all held somewhere, so the worded note's BM25 vote is full.)"""
    from trusty_memory.workers.store import ranking

    query = fake_embed("how does the billing code keep money")
    near_query = functools.partial(at_cosine, query)
    day = "2025-06-{:02d}T08:00:00Z"  # a day apart: no episodes
    notes = [RememberParams(text=f"billing filler note {k}", created_at=day.format(1))
             for k in range(60)]  # fmt: skip
    notes += [RememberParams(text=f"code sample {k}", created_at=day.format(2))
              for k in range(30)]  # fmt: skip
    notes += [RememberParams(text=f"unrelated filler {k}", created_at=day.format(3))
              for k in range(100)]  # fmt: skip
    store.remember_batch([(n, fake_embed(n.text)) for n in notes])
    meant = RememberParams(text="Ledger stores amounts as int64 cents", created_at=day.format(5))
    store.remember_batch([(meant, near_query(0.65, "meant"))])
    worded = RememberParams(text="billing code dashboard", created_at=day.format(6))
    store.remember_batch([(worded, near_query(0.40, "worded"))])

    def first() -> str:
        return store.recall("how does the billing code", query, 5, deep=True)[0].content

    assert ranking.MEANING_FIRST_MARGIN <= 0.2
    assert first() == meant.text
    monkeypatch.setattr(ranking, "MEANING_FIRST_MARGIN", 0.3)
    assert first() == worded.text  # within the margin: the words' evidence decides
    monkeypatch.setattr(ranking, "MEANING_FIRST_MARGIN", -1.0)
    assert first() == worded.text  # off: rank fusion alone


def test_a_question_in_other_words_gives_its_one_shared_word_a_partial_vote(store, monkeypatch):
    """Issue 37: words of the question that no drawer holds are part of its rare-word mass
    (``ABSENT_TERMS``), so a note sharing only one of the question's words, further in
    meaning, no longer outvotes the nearest note; without them it would (the share of a
    mass counted over the one word it holds is all of it)."""
    from trusty_memory.workers.store import ranking

    question = "which quetzal florin code keeps tallies exact"
    query = fake_embed(question)
    day = "2025-06-{:02d}T08:00:00Z"  # a day apart: no episodes
    fillers = [RememberParams(text=f"unrelated filler {k}", created_at=day.format(1))
               for k in range(200)]  # fmt: skip
    store.remember_batch([(n, fake_embed(n.text)) for n in fillers])
    meant = RememberParams(text="Ledger stores amounts as int64 cents", created_at=day.format(5))
    store.remember_batch([(meant, at_cosine(query, 0.60, "meant"))])
    worded = RememberParams(text="the dashboard code", created_at=day.format(6))
    store.remember_batch([(worded, at_cosine(query, 0.50, "worded"))])

    def first() -> str:
        return store.recall(question, query, 5, deep=True)[0].content

    assert ranking.ABSENT_TERMS == 1
    assert first() == meant.text
    monkeypatch.setattr(ranking, "ABSENT_TERMS", 0)
    assert first() == worded.text


def test_idf_mass_counts_the_words_no_drawer_holds_only_beside_one_that_is_held(monkeypatch):
    """With no word of the question held there is no BM25 hit to weigh, and the mass stays
    0; otherwise each absent word adds the idf of a word held by none."""
    import math
    from types import SimpleNamespace

    from trusty_memory.workers.store import ranking

    held = {"code": 9}
    palace = SimpleNamespace(drawer_count=99, term_counts=SimpleNamespace(count=held.get))
    one = math.log((99 - 9 + 0.5) / 9.5)
    monkeypatch.setattr(ranking, "ABSENT_TERMS", 1)
    assert ranking.idf_mass(palace, ["code"]) == pytest.approx(one)
    assert ranking.idf_mass(palace, ["code", "quetzal"]) == pytest.approx(
        one + math.log(99.5 / 0.5)
    )
    assert ranking.idf_mass(palace, ["quetzal", "florin"]) == 0.0
    monkeypatch.setattr(ranking, "ABSENT_TERMS", 0)
    assert ranking.idf_mass(palace, ["code", "quetzal"]) == pytest.approx(one)


def test_first_answer_moves_the_vectors_first_only_over_a_clear_margin():
    """``first_answer.choose`` puts the vector's first drawer first only where fusion's first
    has a full BM25 vote, stands alone, no named date chose it, and the vector's first is at
    least the margin closer; otherwise the fused order stands."""
    from trusty_memory.workers.store.first_answer import Evidence, choose

    ranked = [(2, 0.9), (1, 0.8), (3, 0.7)]
    vector = [(1, 0.60), (2, 0.40), (3, 0.30)]

    def first(shares, dated=(), margin=0.15, borrowed=None, fused=ranked):
        evidence = Evidence(vector, shares, dated=dated, borrowed=borrowed)
        return choose(fused, evidence, margin, text_evidence=0.5)

    assert first({2: 0.5}) == [(1, 0.9), (2, 0.9), (3, 0.7)]
    assert first({2: 0.3}) == ranked  # a partial vote
    assert first({}) == ranked  # not a BM25 hit
    assert first({2: 0.9}, dated=[2]) == ranked  # a date chose it
    assert first({2: 0.9}, margin=0.25) == ranked  # within the margin
    assert first({2: 0.9}, margin=-1.0) == ranked  # switched off
    continues = {2}.__contains__  # fusion's first continues its predecessor: a turn
    assert first({2: 0.9}, borrowed=continues) == ranked
    out = first({9: 0.9}, fused=[(9, 0.9), (2, 0.8)])
    assert out == [(1, 0.9), (9, 0.9)]  # fusion's first not among the vector's: cosine -1
    assert choose(ranked, Evidence(vector, {2: 0.9}), 0.15, text_evidence=0) == ranked  # no votes


def test_first_answer_features_describe_a_disagreement_in_a_fixed_order():
    """``features`` gives one value per ``FEATURES`` name for a disagreement, None where the
    two firsts agree: the bench fits its models on exactly what the product computes."""
    from trusty_memory.workers.store.first_answer import FEATURES, Evidence, features

    vector = [(1, 0.60), (2, 0.40)]
    evidence = Evidence(vector, {2: 0.8, 1: 0.1}, text_ranked=[2, 1], feedback=[2],
                        palace_size=80, idf_mass=4.0, words=lambda: 2)  # fmt: skip
    x = features([(2, 0.9), (1, 0.8)], evidence)
    assert x is not None and len(x) == len(FEATURES)
    named = dict(zip(FEATURES, x, strict=True))
    assert named["cosine_gap"] == pytest.approx(0.2)
    assert named["text_share_fused"] == 0.8 and named["text_share_vector"] == 0.1
    assert named["feedback_fused"] == 1.0 and named["feedback_vector"] == 0.0
    assert named["text_reach"] == pytest.approx(2 / 80)
    assert features([(1, 0.9), (2, 0.8)], evidence) is None  # they agree
