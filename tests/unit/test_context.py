"""Context-aware vectors (``workers/store/context.py``): the rule, the writer's use of it,
the switch.

Covers: workers/store/context.py workers/writer.py workers/palace.py
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from trusty_memory.common.config import PalaceSettings, load_config
from trusty_memory.common.messages import RememberParams
from trusty_memory.workers.palace import PalaceWorker
from trusty_memory.workers.store import context
from trusty_memory.workers.store.ranking import EPISODE_WINDOW_S
from trusty_memory.workers.writer import PalaceWriter

T0 = context.seconds_of("2026-03-01T10:00:00Z")


def written(text: str, room: str = "General", dt: float = 0.0) -> context.Written:
    return context.Written(room, T0 + dt, text)


def test_context_is_the_predecessor_in_the_same_room_within_the_window():
    before = written("Do you still go climbing?")
    assert context.context_of(before, written("Yes!", dt=60), EPISODE_WINDOW_S) == before.text
    assert (
        context.context_of(before, written("Yes!", room="other", dt=60), EPISODE_WINDOW_S) is None
    )
    late = written("Yes!", dt=EPISODE_WINDOW_S + 1)
    assert context.context_of(before, late, EPISODE_WINDOW_S) is None
    assert context.context_of(None, written("Yes!"), EPISODE_WINDOW_S) is None
    assert context.context_of(written("   "), written("Yes!"), EPISODE_WINDOW_S) is None


def test_mix_is_unit_length_and_leans_towards_the_predecessor():
    rng = np.random.default_rng(0)
    own, prev = (v / np.linalg.norm(v) for v in rng.normal(size=(2, 384)).astype(np.float32))
    mixed = context.mix(own, prev)
    assert mixed.dtype == np.float32 and abs(float(np.linalg.norm(mixed)) - 1) < 1e-5
    assert float(mixed @ prev) > float(own @ prev)
    assert float(mixed @ own) > float(mixed @ prev)  # weight < 1: still mostly itself
    np.testing.assert_allclose(context.mix(own, prev, 0.0), own, atol=1e-6)


class FakeStore:
    def __init__(self, last: context.Written | None) -> None:
        self.last = last

    def last_written(self) -> context.Written | None:
        return self.last


def fake_writer(on: bool, last: context.Written | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(palace=PalaceSettings(context_vectors=on)), store=FakeStore(last)
    )


def remember(text: str, room: str | None = None, at: str = "2026-03-01T10:05:00Z", **kw):
    return RememberParams(text=text, room=room, created_at=at, **kw)


def test_writer_pairs_each_remember_with_its_predecessor_in_arrival_order():
    last = written("Q: which port does the billing API use?")
    batch = [
        remember("8217 since the move."),
        remember("Lunch for the team is at noon in the big room.", at="2026-03-01T10:06:00Z"),
        remember("It moves to 13:00 on Fridays.", at="2026-03-01T10:06:30Z"),
        remember("In another room.", room="infra", at="2026-03-01T10:07:00Z"),
        remember("Much later.", room="infra", at="2026-03-01T14:00:00Z"),
        remember("Given context.", at="2026-03-01T10:08:00Z", embed_text="caller's own"),
    ]
    got = PalaceWriter.remember_inputs(fake_writer(True, last), batch)
    assert got == [
        ("8217 since the move.", last.text),  # answers the palace's newest drawer
        # A note that names its own subject borrows nothing, a minute later or not.
        ("Lunch for the team is at noon in the big room.", None),
        # One that points back borrows from the drawer before it in the batch.
        ("It moves to 13:00 on Fridays.", "Lunch for the team is at noon in the big room."),
        ("In another room.", None),
        ("Much later.", None),
        ("caller's own", None),
    ]


def test_context_needs_a_reply_or_a_continuation_not_just_the_clock():
    """Notes written seconds apart that each name their subject stand alone
    (``relatedness.continues``); a reply, an answer or a back-reference borrows."""
    note = written("httpx 0.25.0 dropped Python 3.7 and can talk to HTTPS proxies.")
    alone = written("httpx 0.26.0 added the proxy= argument and deprecated proxies=.", dt=30)
    assert context.context_of(note, alone, EPISODE_WINDOW_S) is None
    back = written("They both land in our client next sprint.", dt=30)
    assert context.context_of(note, back, EPISODE_WINDOW_S) == note.text
    reply = written("Caroline: Wow, that's great news!", dt=30)
    assert context.context_of(written("Melanie: I got the job."), reply, EPISODE_WINDOW_S)


def test_the_switch_turns_it_off():
    last = written("Q: which port does the billing API use?")
    batch = [remember("8217 since the move."), remember("and the health check too")]
    assert PalaceWriter.remember_inputs(fake_writer(False, last), batch) == [
        ("8217 since the move.", None),
        ("and the health check too", None),
    ]


def test_switch_default_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(tmp_path))
    monkeypatch.delenv("TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS", raising=False)
    assert load_config().palace.context_vectors is True  # see workers/store/context.py
    monkeypatch.setenv("TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS", "0")
    assert load_config().palace.context_vectors is False
    monkeypatch.delenv("TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS")
    (tmp_path / "config.toml").write_text("[palace]\ncontext_vectors = false\n")
    assert load_config().palace.context_vectors is False


class FakeEmbedder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), 4), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, hash(t) % 4] = 1.0
        return out


@pytest.mark.parametrize("on", [True, False])
def test_embed_all_mixes_the_context_vector_and_embeds_each_text_once(on):
    embedder = FakeEmbedder()
    question = "which port does it use?"
    worker = fake_writer(on, written(question))
    worker.embedder = embedder
    worker.remember_inputs = lambda rs: PalaceWriter.remember_inputs(worker, rs)
    work = [
        (SimpleNamespace(request=SimpleNamespace(id="r1", method="memory_remember")),
         remember("an answer")),
        (SimpleNamespace(request=SimpleNamespace(id="r2", method="memory_recall")),
         SimpleNamespace(query=question)),
    ]  # fmt: skip
    vectors, errors = PalaceWorker.embed_all(worker, work)
    assert errors == {}
    [texts] = embedder.calls
    assert texts == ["an answer", question]  # the context text is embedded once
    own, ctx = embedder.encode(["an answer", question])
    if on:  # the mix for the index, and the drawer's own vector for the dreamer
        assert isinstance(vectors["r1"], context.Mixed)
        np.testing.assert_allclose(vectors["r1"].vector, context.mix(own, ctx), atol=1e-6)
        np.testing.assert_allclose(vectors["r1"].own, own, atol=1e-6)
        assert vectors["r1"].context == question  # its words, for deep recall's BM25
    else:
        np.testing.assert_allclose(vectors["r1"], own, atol=1e-6)
    np.testing.assert_allclose(vectors["r2"], ctx, atol=1e-6)
