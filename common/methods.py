"""Every protocol method, declared once: its name, who answers it, its params and result.

A method is one member of :class:`Method`, a ``str`` (so it goes on the wire, keys a dict
and compares with a decoded request's method as the plain name), carrying its record,
:class:`Spec`. Every table the actors route and check by is derived from the records
below: the broker's routing sets, the params each worker decodes, the writer's bulk
methods, the fields the secrets guard redacts in a lookup. Adding a method is one member
here plus its handler in the actor that answers it (``docs/architecture.md``, "where to
make a change").

Clients name methods by member (``client.call(Method.MEMORY_RECALL, ...)``); no other
module spells a method as a bare string.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import msgspec

from trusty_memory.common import messages as m
from trusty_memory.common.bounds import check_bounds
from trusty_memory.common.protocol import (
    EMBEDDER_BULK_SERVICE,
    EMBEDDER_SERVICE,
    UNDECODABLE,
    ErrorCode,
    TrustyError,
    reason,
)


class Answerer(enum.Enum):
    """The actor that answers a method."""

    BROKER = "broker"  # itself, from its own state (palaces, workers, the archive's list)
    WRITER = "writer"  # the palace's writer: it changes the palace
    READER = "reader"  # any of the palace's workers, a reader or the writer
    EMBEDDER = "embedder"  # the embedder pool (``embed``) or the bulk lane (``embed_bulk``)


@dataclass(frozen=True)
class Spec:
    """What the actors need to know of a method, besides its handler."""

    answered_by: Answerer
    # The Struct its params decode into; None: it takes none (the broker reads nothing).
    params: type[msgspec.Struct] | None = None
    # The Struct its result converts into; None: plain data (a dict the caller reads).
    result: type[msgspec.Struct] | None = None
    # Traffic that follows from other work rather than being it: routed like any request,
    # never counted as foreground use of a palace (the dreamer's passes, readers' hits).
    background: bool = False
    # A write that holds the writer for a while and comes from a bulk client (``mine`` and
    # ``import``, the dreamer), not from a session waiting on its answer: the writer runs
    # it after the session calls batched with it, whose answers leave first.
    bulk: bool = False
    # A broker method that moves a palace's directory, so it first stops the palace's
    # workers, and is answered once they have exited.
    moves_palace: bool = False
    # Params that find stored things by their text: the secrets guard redacts them as
    # the stored text was redacted, so a question holding a secret finds it by its marker.
    lookup_fields: tuple[str, ...] = ()
    # A write that stores text an agent gave (a drawer, a fact, an import's lines): the
    # secrets guard (``workers/secrets_guard.py``) must redact it before it is stored, and
    # ``tests/unit/test_methods.py`` holds the guard's table to exactly these methods.
    stores_text: bool = False


_BROKER = Spec(Answerer.BROKER)


def _dream(params: type[msgspec.Struct], result: type[msgspec.Struct] | None = None) -> Spec:
    """The dreamer's maintenance: a palace's writer runs it as bulk work, in the background."""
    return Spec(Answerer.WRITER, params, result, background=True, bulk=True)


_FINDS = ("query", "room", "tag")


class Method(enum.StrEnum):
    """The protocol's methods. Each member is its wire name, with its :class:`Spec`."""

    spec: Spec

    def __new__(cls, name: str, spec: Spec) -> Method:
        member = str.__new__(cls, name)
        member._value_ = name
        member.spec = spec
        return member

    # The broker's own.
    PING = "ping", _BROKER
    STATUS = "status", _BROKER
    PALACE_LIST = "palace_list", _BROKER
    PALACE_ARCHIVED = "palace_archived", _BROKER
    PALACE_SUMMARIES = "palace_summaries", _BROKER
    PALACE_CREATE = "palace_create", Spec(Answerer.BROKER, m.PalaceCreateParams)
    PALACE_SCALE = "palace_scale", Spec(Answerer.BROKER, m.PalaceScaleParams)
    PALACE_RESTORE = "palace_restore", Spec(Answerer.BROKER, m.PalaceRestoreParams)
    PALACE_FORGET_REMOTE = "palace_forget_remote", Spec(Answerer.BROKER, m.PalaceForgetRemoteParams)
    PALACE_DELETE = "palace_delete", Spec(Answerer.BROKER, m.PalaceDeleteParams, moves_palace=True)
    PALACE_RENAME = "palace_rename", Spec(Answerer.BROKER, m.PalaceRenameParams, moves_palace=True)

    # A palace's writer.
    MEMORY_REMEMBER = (
        "memory_remember",
        Spec(Answerer.WRITER, m.RememberParams, m.StoredResult, stores_text=True),
    )
    MEMORY_FORGET = "memory_forget", Spec(Answerer.WRITER, m.ForgetParams, m.ForgetResult)
    MEMORY_UPDATE = (
        "memory_update",
        Spec(Answerer.WRITER, m.UpdateParams, m.UpdateResult, stores_text=True),
    )
    KG_ASSERT = "kg_assert", Spec(Answerer.WRITER, m.KgAssertParams, stores_text=True)
    KG_INVALIDATE = (
        "kg_invalidate",
        Spec(
            Answerer.WRITER,
            m.KgInvalidateParams,
            m.KgInvalidateResult,
            lookup_fields=("subject", "predicate", "object"),
        ),
    )
    PALACE_IMPORT = (
        "palace_import",
        Spec(Answerer.WRITER, m.ImportParams, m.ImportResult, bulk=True, stores_text=True),
    )
    PALACE_HITS = "palace_hits", Spec(Answerer.WRITER, m.PalaceHitsParams, background=True)
    PALACE_SCRUB = "palace_scrub", Spec(Answerer.WRITER, m.ScrubParams, m.ScrubResult)
    ARCHIVE_RESTORE = (
        "archive_restore",
        Spec(Answerer.WRITER, m.ArchiveRestoreParams, m.RestoreResult),
    )
    DREAM_STATUS = "dream_status", _dream(m.PalaceParams, m.PalaceInfo)
    DREAM_SCAN = "dream_scan", _dream(m.DreamScanParams, m.DreamScanResult)
    DREAM_MERGE = "dream_merge", _dream(m.DreamMergeParams, m.DreamMergeResult)
    DREAM_DECAY = "dream_decay", _dream(m.DreamDecayParams, m.DreamDecayResult)
    DREAM_KG_DECAY = "dream_kg_decay", _dream(m.DreamKgDecayParams, m.DreamKgDecayResult)
    DREAM_FINISH = "dream_finish", _dream(m.DreamFinishParams)

    # Any of a palace's workers.
    MEMORY_RECALL = (
        "memory_recall",
        Spec(Answerer.READER, m.RecallParams, m.RecallResult, lookup_fields=_FINDS),
    )
    MEMORY_RECALL_DEEP = (
        "memory_recall_deep",
        Spec(Answerer.READER, m.RecallParams, m.RecallResult, lookup_fields=_FINDS),
    )
    MEMORY_SEARCH = (
        "memory_search",
        Spec(Answerer.READER, m.SearchParams, m.SearchResult, lookup_fields=_FINDS),
    )
    MEMORY_LIST = (
        "memory_list",
        Spec(Answerer.READER, m.ListParams, m.ListResult, lookup_fields=("room", "tag")),
    )
    KG_QUERY = (
        "kg_query",
        Spec(Answerer.READER, m.KgQueryParams, m.KgQueryResult, lookup_fields=("subject",)),
    )
    KG_HISTORY = (
        "kg_history",
        Spec(
            Answerer.READER,
            m.KgHistoryParams,
            m.KgQueryResult,
            lookup_fields=("subject", "predicate"),
        ),
    )
    DRAWER_GET = "drawer_get", Spec(Answerer.READER, m.DrawerGetParams, m.DrawerDetail)
    PALACE_INFO = "palace_info", Spec(Answerer.READER, m.PalaceParams, m.PalaceInfo)
    PALACE_STATS = "palace_stats", Spec(Answerer.READER, m.PalaceParams, m.PalaceStats)
    PALACE_EXPORT = "palace_export", Spec(Answerer.READER, m.ExportParams, m.ExportResult)
    ARCHIVE_LIST = "archive_list", Spec(Answerer.READER, m.ArchiveListParams, m.ArchiveListResult)
    NOOP = "noop", Spec(Answerer.READER, m.PalaceParams)  # a round trip to a palace's worker

    # The embedder pool, and the bulk lane.
    EMBED = "embed", Spec(Answerer.EMBEDDER, m.EmbedParams, m.EmbedResult)
    EMBED_BULK = "embed_bulk", Spec(Answerer.EMBEDDER, m.EmbedParams, m.EmbedResult)


def _where(**wanted: Any) -> frozenset[Method]:
    return frozenset(
        method
        for method in Method
        if all(getattr(method.spec, key) == value for key, value in wanted.items())
    )


# The tables the actors route and check by, all from the records above.
BROKER_METHODS = _where(answered_by=Answerer.BROKER)
PALACE_MOVE_METHODS = _where(moves_palace=True)
PALACE_WRITE_METHODS = _where(answered_by=Answerer.WRITER)
PALACE_READ_METHODS = _where(answered_by=Answerer.READER)
PALACE_METHODS = PALACE_WRITE_METHODS | PALACE_READ_METHODS
EMBEDDER_METHODS = _where(answered_by=Answerer.EMBEDDER)
BACKGROUND_METHODS = _where(background=True)
BULK_METHODS = _where(bulk=True)
PARAMS_FOR_METHOD: dict[str, type[msgspec.Struct]] = {
    method: method.spec.params for method in Method if method.spec.params is not None
}
LOOKUP_FIELDS: dict[str, tuple[str, ...]] = {
    method: method.spec.lookup_fields for method in Method if method.spec.lookup_fields
}

S = TypeVar("S", bound=msgspec.Struct)


def embedder_service(method: str) -> str:
    """The routing-table key of the embedders that answer ``method``: the bulk lane has
    processes of its own (``common/protocol.py`` says why)."""
    return EMBEDDER_BULK_SERVICE if method == Method.EMBED_BULK else EMBEDDER_SERVICE


@overload
def decode_params(method: str, raw: msgspec.Raw | bytes) -> Any: ...
@overload
def decode_params(method: str, raw: msgspec.Raw | bytes, cls: type[S]) -> S: ...
def decode_params(
    method: str, raw: msgspec.Raw | bytes, cls: type[msgspec.Struct] | None = None
) -> msgspec.Struct:
    """Decode a request's params into the Struct for ``method``, held to the bounds.

    Without ``cls``, the Struct is ``PARAMS_FOR_METHOD[method]``, known only at run time:
    typed ``Any`` for the caller, who dispatches on the method.

    Wrong types and missing fields become ``INVALID_PARAMS`` with msgspec's message,
    which names the offending field (e.g. ``Expected `str`, got `int` - at `$.text```).
    """
    target = cls or PARAMS_FOR_METHOD.get(method)
    if target is None:
        raise TrustyError(ErrorCode.UNKNOWN_METHOD, f"unknown method: {method}")
    try:
        params = msgspec.msgpack.decode(
            bytes(raw) if isinstance(raw, msgspec.Raw) else raw, type=target
        )
    except msgspec.ValidationError as exc:
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"{method}: invalid params: {exc}") from exc
    except UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"{method}: undecodable params: {reason(exc)}"
        ) from exc
    check_bounds(method, params)
    return params
