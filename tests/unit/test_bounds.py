"""The bounds table itself, without a daemon: every field of every method's params has a
bound, each kind of bound words its refusal the same way, the limits are settings, lone
surrogates are found before encoding fails, and edge times are named errors.

The daemon-side behaviour (each path, each method) is
tests/engine/test_bounds_through_daemon.py.

Covers: common/bounds.py common/values.py common/methods.py workers/store/dedup.py
    workers/store/write.py
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from tests.unit.test_store import SETTINGS, remember
from trusty_memory.common import bounds
from trusty_memory.common import protocol as p
from trusty_memory.common.config import LimitsSettings, load_config
from trusty_memory.common.messages import RememberParams
from trusty_memory.common.methods import PARAMS_FOR_METHOD, decode_params
from trusty_memory.common.values import check_created_at, check_timestamp
from trusty_memory.workers.store import dedup
from trusty_memory.workers.store.write import PalaceStore

_UNBOUNDED_KINDS = (msgspec.inspect.StrType, msgspec.inspect.ListType, msgspec.inspect.DictType,
                    msgspec.inspect.BytesType, msgspec.inspect.TupleType)  # fmt: skip


def _kinds(t: msgspec.inspect.Type) -> Iterator[msgspec.inspect.Type]:
    if isinstance(t, msgspec.inspect.UnionType):
        for member in t.types:
            yield from _kinds(member)
    else:
        yield t


def _params_fields() -> Iterator[tuple[str, str, msgspec.inspect.Type]]:
    """``(struct, field, type)`` for every field of every params Struct, nested ones too."""
    seen: set[type] = set()
    todo = list(PARAMS_FOR_METHOD.values())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for f in msgspec.inspect.type_info(cls).fields:
            yield cls.__name__, f.name, f.type
            for kind in _kinds(f.type):
                item = getattr(kind, "item_type", None)
                if isinstance(item, msgspec.inspect.StructType):
                    todo.append(item.cls)


def test_every_string_list_map_and_bytes_field_of_every_method_has_a_bound():
    unbounded = [
        f"{struct}.{name}"
        for struct, name, t in _params_fields()
        if any(isinstance(k, _UNBOUNDED_KINDS) for k in _kinds(t))
        and name not in bounds.FIELD_BOUNDS
    ]
    assert unbounded == []


def test_every_limit_is_a_setting_named_in_its_refusals():
    settings = {f for f in LimitsSettings.__dataclass_fields__}
    assert settings == {
        "max_tags", "max_tag_bytes", "max_room_bytes", "max_kg_field_bytes", "max_query_bytes",
        "max_description_bytes", "max_metadata_bytes", "max_name_bytes", "max_batch_items",
    }  # fmt: skip


@pytest.fixture
def limits_of():
    """Set this process's limits for one test; the previous ones come back after."""
    saved = bounds._config

    def use(**limits: int) -> None:
        config = load_config()
        bounds.use_config(replace(config, limits=replace(LimitsSettings(), **limits)))

    yield use
    bounds._config = saved


def decode(method: str, params: dict) -> msgspec.Struct:
    return decode_params(method, p.encode(params))


def refusal(method: str, params: dict) -> str:
    with pytest.raises(p.TrustyError) as err:
        decode(method, params)
    assert err.value.code == p.ErrorCode.INVALID_PARAMS
    return err.value.message


def test_each_kind_of_bound_words_its_refusal(limits_of):
    limits_of(max_tags=2, max_tag_bytes=4, max_room_bytes=3, max_batch_items=1,
              max_metadata_bytes=10, max_name_bytes=40)  # fmt: skip
    assert refusal("memory_remember", {"text": "t", "tags": ["a", "b", "c"]}) == (
        "memory_remember: tags: 3 tags, at most 2 ([limits] max_tags)"
    )
    assert refusal("memory_update", {"drawer_id": "d", "tags": ["a", "ééé"]}) == (
        "memory_update: tags[1]: 6 bytes, at most 4 ([limits] max_tag_bytes)"
    )
    assert refusal("memory_list", {"room": "Ops!"}) == (
        "memory_list: room: 4 bytes, at most 3 ([limits] max_room_bytes)"
    )
    assert refusal("memory_remember", {"text": "t", "metadata": {"k": "0123456"}}) == (
        "memory_remember: metadata: 15 bytes of JSON, at most 10 ([limits] max_metadata_bytes)"
    )
    drawer = {"drawer_id": "d", "content": "c"}
    assert refusal("palace_import", {"drawers": [drawer, drawer]}) == (
        "palace_import: drawers: 2 drawers, at most 1 ([limits] max_batch_items)"
    )
    assert refusal("palace_import", {"drawers": [{**drawer, "room": "Room"}]}) == (
        "palace_import: drawers[0].room: 4 bytes, at most 3 ([limits] max_room_bytes)"
    )
    assert refusal("palace_hits", {"hits": [[1, 1], [2, 1]]}) == (
        "palace_hits: hits: 2 hit counts, at most 1 ([limits] max_batch_items)"
    )
    assert refusal("dream_merge", {"groups": [["a"], ["b"]]}) == (
        "dream_merge: groups: 2 drawer ids, at most 1 ([limits] max_batch_items)"
    )
    assert refusal(
        "kg_query", {"subject": "s", "as_of": "2024-01-01T00:00:00.000000000+00:00" * 2}
    ) == ("kg_query: as_of: 70 bytes, at most 40 ([limits] max_name_bytes)")
    # At the bound is within it; numbers, None and absent fields are nobody's business.
    assert decode("memory_remember", {"text": "t", "tags": ["abcd", "é"], "room": "Ops"})
    assert decode("memory_update", {"drawer_id": "d", "importance": 0.5, "room": None})


def test_the_limits_are_read_from_the_config_file_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(tmp_path))
    Path(tmp_path / "config.toml").write_text("[limits]\nmax_tags = 8\nmax_room_bytes = 9\n")
    monkeypatch.setenv("TRUSTY_MEMORY_LIMITS_MAX_ROOM_BYTES", "10")
    limits = load_config().limits
    assert (limits.max_tags, limits.max_room_bytes, limits.max_kg_field_bytes) == (8, 10, 4096)


def test_a_lone_surrogate_is_named_before_encoding_fails():
    cases = [
        ({"text": "abc\ud800"}, None, "text: contains a lone surrogate (U+D800) at character 3"),
        ({"tags": ["x", "\udfff"]}, None,
         "tags[1]: contains a lone surrogate (U+DFFF) at character 0"),
        ({"metadata": {"a": {"b": "\udc80"}}}, None,
         "metadata.a.b: contains a lone surrogate (U+DC80) at character 0"),
        ({"metadata": {"k\ud800": 1}}, None,
         "metadata: a key: contains a lone surrogate (U+D800) at character 1"),
        (RememberParams(text="t", room="\ud800"), None,
         "room: contains a lone surrogate (U+D800) at character 0"),
        ({"text": "fine"}, "pal\udcff",
         "palace: contains a lone surrogate (U+DCFF) at character 3"),
    ]  # fmt: skip
    for params, palace, message in cases:
        with pytest.raises(p.TrustyError) as err:
            p.encode_request("memory_remember", params, palace=palace)
        assert err.value.code == p.ErrorCode.INVALID_PARAMS
        assert err.value.message == f"memory_remember: {message}; send valid UTF-8"
    assert p.encode_request("memory_remember", {"text": "é \U0001f469\u200d\U0001f4bb"})[1]


@pytest.mark.parametrize(
    ("text", "invisible"),
    [
        ("\u200b", True), ("\u200c\u200d", True), ("\ufeff", True), ("\u2060", True),
        ("\x00\x07", True), ("\u0301\u0301", True), ("\u180e", True), ("\u3164", True),
        ("\u2800", True), ("\U000e0041", True), (" \u200b \n", True),
        ("", False), ("   ", False), ("\u3000", False),  # blank: the "is empty" message's
        ("a", False), ("e\u0301", False), ("\u200bword", False), ("\U0001f469", False),
        ("日本", False), ("\ue000", False),
    ],
)  # fmt: skip
def test_what_counts_as_only_invisible(text, invisible):
    assert bounds.invisible_only(text) is invisible


@pytest.mark.parametrize(
    "edge", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:59+01:00"]
)
def test_times_off_the_calendar_in_utc_are_named_errors(edge):
    for check in (lambda: check_timestamp(edge, "since"), lambda: check_created_at(edge)):
        with pytest.raises(p.TrustyError) as err:
            check()
        assert err.value.code == p.ErrorCode.INVALID_PARAMS
        assert "is outside the calendar in UTC (years 1 to 9999)" in err.value.message
        assert isinstance(err.value, OverflowError)  # what callers that word it catch
    assert check_timestamp("0001-01-01T00:00:00Z", "since") == "0001-01-01T00:00:00Z"
    assert check_timestamp("9999-12-31T23:59:59+00:00", "t") == "9999-12-31T23:59:59Z"


@pytest.fixture
def store(tmp_path):
    s = PalaceStore.open(tmp_path / "palaces" / "proj", "proj", SETTINGS)
    yield s
    s.close()


def test_restating_a_text_never_grows_its_tags_past_the_limit(store, limits_of):
    limits_of(max_tags=3)
    did = remember(store, "the build uses make", tags=["a", "b"])
    remember(store, "the build uses make", tags=["c", "d", "e"])
    assert store.get(did).tags == ["a", "b", "c"]


def test_a_reader_hands_over_its_hits_in_batches_the_writer_takes(store, limits_of):
    limits_of(max_batch_items=2)
    store._pending_hits.update({10: 1, 11: 2, 12: 3})
    first, second = store.take_hits(), store.take_hits()
    assert len(first) == 2 and {**first, **second} == {10: 1, 11: 2, 12: 3}
    assert store.take_hits() == {}


def test_a_merged_text_never_outgrows_what_a_write_may_hold():
    """The dreamer joins distinct wordings; past ``[palace] max_text_bytes`` it keeps the
    newest that fit (the embedder would refuse the rest; the archive keeps every member)."""
    rows = [
        SimpleNamespace(content=f"wording {i}: " + "abc " * 10 * (i + 1), label=i,
                        created_at=f"2024-01-0{i + 1}T00:00:00Z")
        for i in range(3)
    ]  # fmt: skip
    joined = dedup.merged_content(rows)
    assert joined.split("\n") == [r.content for r in reversed(rows)]
    capped = dedup.merged_content(rows, most_bytes=len(joined.encode()) - 1)
    assert capped == "\n".join(joined.split("\n")[:2])
    assert dedup.merged_content(rows, most_bytes=1) == rows[2].content  # the newest
