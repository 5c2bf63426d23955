"""Every palace operation through the real daemon, workers, sockets, SQLite and model.

Covers: client/sync.py common/caller.py broker/broker.py workers/palace.py workers/writer.py
"""

from __future__ import annotations

import uuid

import pytest

from trusty_memory.client.sync import Client
from trusty_memory.common.protocol import ErrorCode, TrustyError


@pytest.fixture(scope="module")
def client(daemon):
    c = Client(daemon.config, autostart=False)
    c.palace_create("proj", "a test palace")
    yield c
    c.close()


def test_remember_then_recall_finds_it(client):
    stored = client.remember(
        "proj",
        "The API gateway validates JWT tokens using RS256.",
        room="Backend",
        tags=["auth", "jwt"],
    )
    assert stored.status == "stored" and stored.palace == "proj"
    uuid.UUID(stored.drawer_id)
    client.remember("proj", "The frontend is written in React with Vite.", room="frontend")
    client.remember("proj", "Our CI runs on every pull request.", room="Testing")
    result = client.recall("proj", "How does token validation work?", top_k=2)
    assert result.palace == "proj" and result.query == "How does token validation work?"
    top = result.results[0]
    assert top.drawer_id == stored.drawer_id
    assert top.content.startswith("The API gateway")
    assert top.tags == ["auth", "jwt"] and top.importance == 0.5
    assert 0 <= top.layer <= 3 and top.score > 0.3
    deep = client.recall("proj", "RS256", top_k=3, deep=True)
    assert deep.results[0].drawer_id == stored.drawer_id
    assert all(h.layer == 3 for h in deep.results)


def test_remember_is_idempotent_by_drawer_id(client):
    drawer_id = str(uuid.uuid4())
    before = client.palace_info("proj").drawer_count
    first = client.remember("proj", "idempotent write", drawer_id=drawer_id)
    again = client.remember("proj", "idempotent write", drawer_id=drawer_id)
    assert first.drawer_id == again.drawer_id == drawer_id
    assert client.palace_info("proj").drawer_count == before + 1


def test_list_filters_rooms_and_tags(client):
    client.palace_create("rooms")
    client.remember("rooms", "kept in a custom room", room="Kitchen", tags=["x"])
    client.remember("rooms", "named room, odd case", room="bAcKeNd", importance=0.9)
    client.remember("rooms", "no room at all")
    assert [d.content for d in client.list("rooms", room="Kitchen").drawers] == [
        "kept in a custom room"
    ]
    assert [d.content for d in client.list("rooms", room="Backend").drawers] == [
        "named room, odd case"
    ]
    assert [d.content for d in client.list("rooms", room="General").drawers] == ["no room at all"]
    assert [d.content for d in client.list("rooms", tag="x").drawers] == ["kept in a custom room"]
    everything = client.list("rooms").drawers
    assert everything[0].importance == 0.9  # importance order
    assert len(client.list("rooms", limit=1).drawers) == 1


def test_forget(client):
    stored = client.remember("proj", "something to forget about penguins")
    result = client.forget("proj", stored.drawer_id)
    assert (result.status, result.drawer_id, result.palace) == ("deleted", stored.drawer_id, "proj")
    hits = client.recall("proj", "penguins", top_k=5).results
    assert stored.drawer_id not in [h.drawer_id for h in hits]
    with pytest.raises(TrustyError) as err:
        client.forget("proj", stored.drawer_id)
    assert err.value.code == ErrorCode.DRAWER_NOT_FOUND
    assert stored.drawer_id in err.value.message


def test_kg_assert_closes_the_prior_triple(client):
    assert client.kg_assert("proj", "auth-service", "deployed_version", "2.4.0") == {
        "status": "asserted"
    }
    client.kg_assert(
        "proj",
        "auth-service",
        "deployed_version",
        "2.4.1",
        confidence=0.95,
        provenance="deploy-log",
    )
    client.kg_assert("proj", "auth-service", "owner", "team-a")
    triples = client.kg_query("proj", "auth-service").triples
    assert sorted((t.predicate, t.object) for t in triples) == [
        ("deployed_version", "2.4.1"),
        ("owner", "team-a"),
    ]
    version = next(t for t in triples if t.predicate == "deployed_version")
    assert version.valid_to is None and version.confidence == 0.95
    assert version.provenance == "deploy-log" and version.valid_from.endswith("Z")


def test_palace_info(client, daemon):
    info = client.palace_info("proj")
    assert info.id == info.name == "proj"
    assert info.drawer_count >= 1
    assert info.data_dir == str(daemon.home / "palaces" / "proj")
    assert info.index_count == info.drawer_count


def test_noop_round_trip_reaches_the_worker(client):
    assert client.call("noop", palace="proj") == {}
