"""Bounds: what one request's params may carry.

Checked where params are decoded (``methods.decode_params``), which every worker and the
broker run, so every way in (the MCP tools, the Python client, the command line, import)
meets the same bounds before any work is done. The limits are ``[limits]`` settings
(``config.LimitsSettings``, which says why each default is what it is); a drawer's text
keeps its own bound, ``[palace] max_text_bytes``, checked by the palace worker
(``TEXT_TOO_LARGE``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from trusty_memory.common.config import Config, LimitsSettings, load_config
from trusty_memory.common.protocol import ErrorCode, TrustyError

_config: Config | None = None
_encoder = msgspec.msgpack.Encoder()  # a metadata map's size is its size on the wire


def use_config(config: Config) -> None:
    """Bound params by ``config``'s limits in this process (a worker passes its own).
    Without it, the first decode reads the home's config, as every actor does."""
    global _config
    _config = config


def _bounds_config() -> Config:
    global _config
    if _config is None:
        _config = load_config()
    return _config


def limits() -> LimitsSettings:
    """This process's ``[limits]``."""
    return _bounds_config().limits


class OutOfBounds(Exception):
    """A value past its bound; ``check_bounds`` words it as ``INVALID_PARAMS``."""


class OutsideCalendar(TrustyError, OverflowError):
    """A time that leaves the years 1..9999 once moved to UTC (``0001-01-01T00:00:00+01:00``
    is in the year 0). Also an ``OverflowError``, what ``datetime`` raised there, so code
    that caught that still catches it."""

    def __init__(self, field: str, value: str) -> None:
        super().__init__(
            ErrorCode.INVALID_PARAMS,
            f"{field}: {value!r} is outside the calendar in UTC (years 1 to 9999)",
        )


def in_utc(parsed: datetime, field: str, value: str) -> datetime:
    """``parsed`` (zone-aware) moved to UTC; ``OutsideCalendar`` when that leaves the calendar."""
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise OutsideCalendar(field, value) from None


Check = Callable[[str, Any, "LimitsSettings"], None]  # (field path, value, limits)


def _size(value: str) -> int:
    """UTF-8 bytes of ``value``; no encoding at all for a string that cannot be near a bound."""
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def _within(path: str, value: Any, limit: int, setting: str) -> None:
    if not isinstance(value, str) or len(value) * 4 <= limit:  # UTF-8: 4 bytes a character
        return
    if (size := _size(value)) > limit:
        raise OutOfBounds(f"{path}: {size} bytes, at most {limit} ({setting})")


def _bytes(setting: str) -> Check:
    """A string of at most ``[limits] setting`` bytes."""

    def check(path: str, value: Any, lim: LimitsSettings) -> None:
        _within(path, value, getattr(lim, setting), f"[limits] {setting}")

    return check


def _count(path: str, items: list, limit: int, noun: str, setting: str) -> None:
    if len(items) > limit:
        raise OutOfBounds(f"{path}: {len(items)} {noun}, at most {limit} ([limits] {setting})")


def _strings(count: str, each: str, noun: str) -> Check:
    """A list of at most ``[limits] count`` strings of at most ``[limits] each`` bytes."""

    def check(path: str, value: Any, lim: LimitsSettings) -> None:
        if isinstance(value, list):
            _count(path, value, getattr(lim, count), noun, count)
            for i, item in enumerate(value):
                _within(f"{path}[{i}]", item, getattr(lim, each), f"[limits] {each}")

    return check


def _batch(noun: str) -> Check:
    """A batch of at most ``[limits] max_batch_items`` items (Structs are checked in turn)."""

    def check(path: str, value: Any, lim: LimitsSettings) -> None:
        if isinstance(value, list):
            _count(path, value, lim.max_batch_items, noun, "max_batch_items")
            for i, item in enumerate(value):
                if isinstance(item, msgspec.Struct):
                    _check_struct(item, f"{path}[{i}].", lim)

    return check


def _groups(path: str, value: Any, lim: LimitsSettings) -> None:
    """``dream_merge``'s groups: their drawer ids together are one batch, each id short."""
    if not isinstance(value, list):
        return
    ids = [(f"{path}[{i}][{j}]", d) for i, group in enumerate(value) for j, d in enumerate(group)]
    _count(path, ids, lim.max_batch_items, "drawer ids", "max_batch_items")
    for where, drawer_id in ids:
        _within(where, drawer_id, lim.max_name_bytes, "[limits] max_name_bytes")


def _embed_texts(path: str, value: Any, lim: LimitsSettings) -> None:
    """``embed``'s texts: a batch, each text no longer than a drawer's may be."""
    if not isinstance(value, list):
        return
    _count(path, value, lim.max_batch_items, "texts", "max_batch_items")
    most = _bounds_config().palace.max_text_bytes
    for i, text in enumerate(value):
        _within(f"{path}[{i}]", text, most, "[palace] max_text_bytes")


# How deeply a drawer's metadata may nest ({"a": [[...]]}: each object and array a level,
# the metadata object itself the first). Python walks such values recursively (encoding,
# the secrets scan): far deeper is a RecursionError, not a clear error naming the field.
# ``client/bulk.py``'s MAX_NESTING holds whole import lines to the same bound.
MAX_METADATA_DEPTH = 64


def _nesting(value: Any) -> int:
    """How deeply ``value`` nests (0: a scalar), walked without recursion, stopping once
    past ``MAX_METADATA_DEPTH``."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_METADATA_DEPTH:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list | tuple):
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in item)
    return deepest


def _metadata(path: str, value: Any, lim: LimitsSettings) -> None:
    """A drawer's metadata, measured as the JSON it is stored as, and no deeper than
    ``MAX_METADATA_DEPTH``."""
    if value is None:
        return
    if _nesting(value) > MAX_METADATA_DEPTH:
        raise OutOfBounds(f"{path}: nested more than {MAX_METADATA_DEPTH} levels deep")
    try:
        size = len(msgspec.json.encode(value))
    except (TypeError, ValueError, msgspec.EncodeError):  # an ext type: measure the wire form
        size = len(_encoder.encode(value))
    if size > lim.max_metadata_bytes:
        limit = lim.max_metadata_bytes
        raise OutOfBounds(
            f"{path}: {size} bytes of JSON, at most {limit} ([limits] max_metadata_bytes)"
        )


def _time(path: str, value: Any, lim: LimitsSettings) -> None:
    """An RFC 3339 time: short, and inside the calendar once moved to UTC. A value that is
    no time at all is left to the worker, which words that (``common/values.py``)."""
    _within(path, value, lim.max_name_bytes, "[limits] max_name_bytes")
    if not isinstance(value, str):
        return
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return
    if parsed.tzinfo is not None:
        in_utc(parsed, path, value)


# Characters that show nothing on their own: controls, format characters (zero-width
# space, joiners, BOM, word joiner, bidi marks), separators, combining marks, and the
# "filler" letters and blank that render as nothing.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me", "Mc"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def _shows(ch: str) -> bool:
    return ch not in _BLANK_LETTERS and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES


def invisible_only(text: str) -> bool:
    """True for a text that is not blank (``str.strip`` leaves something) yet shows nothing:
    zero-width spaces, BOMs, controls, combining marks alone. A blank text is the caller's
    "is empty" case, whose message the contract's users already know."""
    return bool(text.strip()) and not any(_shows(ch) for ch in text)


def _visible(setting: str | None) -> Check:
    """Drawer text or a query: not only invisible characters; at most ``[limits] setting``
    bytes (None: the worker bounds it by ``[palace] max_text_bytes``)."""

    def check(path: str, value: Any, lim: LimitsSettings) -> None:
        if setting is not None:
            _within(path, value, getattr(lim, setting), f"[limits] {setting}")
        if isinstance(value, str) and invisible_only(value):
            shown = ", ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(value.strip()))
            if len(shown) > 60:
                shown = shown[:60].rsplit(",", 1)[0] + ", ..."
            raise OutOfBounds(
                f"'{path}' holds only invisible characters ({shown}): zero-width, control,"
                " format or combining characters show nothing; send visible text"
            )

    return check


def _by_worker(path: str, value: Any, lim: LimitsSettings) -> None:
    """Bounded where it is used: a drawer's text and context by ``[palace] max_text_bytes``
    (``TEXT_TOO_LARGE``, before anything is embedded), a vector by the model's dimension."""


_NAME = _bytes("max_name_bytes")
_KG = _bytes("max_kg_field_bytes")
_ROOM = _bytes("max_room_bytes")

# Every field of every method's params (and of the Structs in them), by name: one name,
# one meaning, across methods. ``tests/unit/test_bounds.py`` holds this table to every
# string, list, map and bytes field of ``PARAMS_FOR_METHOD``'s Structs, so a new field
# cannot arrive unbounded; one that somehow did gets ``_unlisted``'s bounds.
FIELD_BOUNDS: dict[str, Check] = {
    # palaces (a palace name is also held to 64 safe characters: ``names.py``)
    "name": _NAME,
    "new_name": _NAME,
    "entry": _NAME,
    "description": _bytes("max_description_bytes"),
    # drawers
    "text": _visible(None),
    "embed_text": _by_worker,
    "content": _by_worker,
    "context": _by_worker,
    "vector": _by_worker,
    "own_vector": _by_worker,
    "room": _ROOM,
    "tags": _strings("max_tags", "max_tag_bytes", "tags"),
    "tag": _bytes("max_tag_bytes"),
    "drawer_id": _NAME,
    "metadata": _metadata,
    "created_at": _time,
    # recall and search
    "query": _visible("max_query_bytes"),
    "since": _time,
    "until": _time,
    "cursor": _NAME,
    # the knowledge graph
    "subject": _KG,
    "predicate": _KG,
    "object": _KG,
    "provenance": _KG,
    "as_of": _time,
    "valid_from": _time,
    "valid_to": _time,
    # batches
    "drawers": _batch("drawers"),
    "triples": _batch("triples"),
    "hits": _batch("hit counts"),
    "texts": _embed_texts,
    "groups": _groups,
    # the dreamer, export and the archive
    "now": _time,
    "kind": _NAME,
    "reason": _NAME,
}


def _unlisted(path: str, value: Any, lim: LimitsSettings) -> None:
    if isinstance(value, str):
        _within(path, value, lim.max_name_bytes, "[limits] max_name_bytes")
    elif isinstance(value, list):
        _count(path, value, lim.max_batch_items, "items", "max_batch_items")


def _check_struct(params: msgspec.Struct, prefix: str, lim: LimitsSettings) -> None:
    for name in params.__struct_fields__:
        value = getattr(params, name)
        if value is None or value is msgspec.UNSET or isinstance(value, bool | int | float):
            continue
        FIELD_BOUNDS.get(name, _unlisted)(prefix + name, value, lim)


def check_bounds(method: str, params: msgspec.Struct) -> None:
    """Refuse params past any bound with ``INVALID_PARAMS`` naming the field, what it
    holds, the limit and the setting: ``memory_remember: tags: 10000 tags, at most 64
    ([limits] max_tags)``."""
    try:
        _check_struct(params, "", limits())
    except OutOfBounds as exc:
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"{method}: {exc}") from None
    except OutsideCalendar as exc:
        raise TrustyError(exc.code, f"{method}: {exc.message}") from None
