"""The one wire protocol every trusty-memory actor speaks.

Front ends, the CLI, the Python client, palace workers, embedders and the dreamer all
exchange the same Engram-style envelope, encoded as MessagePack by msgspec:

    request:  {id, method, palace?, params, timeout_ms?, min_seq?, trace?}
    response: {id, ok, data, error: {code, message}?, seq?}

A palace is served by one writer and 0..N readers. A write's response carries ``seq``,
the palace's change-log sequence number once that write committed; a client sends the
highest one it got for a palace as ``min_seq`` with its reads of that palace, and a reader
answers only after it has applied that much of the change log (read-your-writes).

Two sockets carry it, both on the broker (the ZeroMQ guide's Majordomo shape):

* **frontend** (ROUTER): clients connect a DEALER and send one frame, the encoded
  ``Request``; the reply is one frame, the encoded ``Response``.
* **backend** (ROUTER): workers connect a DEALER. Every frame list starts with a one-byte
  command (``W_READY``, ``W_REQUEST``, ``W_REPLY``, ``W_HEARTBEAT``, ``W_DISCONNECT``).
  ``W_REQUEST`` and ``W_REPLY`` carry the client's routing identity so the broker can
  relay without decoding the payload, and ``W_REPLY`` carries the request id as its own
  frame so the broker can settle its bookkeeping without decoding the response. A palace
  worker ends ``W_REPLY`` and ``W_HEARTBEAT`` with one more frame, the change-log seq it
  has applied (ASCII digits), which is how ``status`` shows a reader's lag.
  A worker may also send a client's one-frame request on the backend (the first byte
  of an encoded ``Request`` is never a command byte) and gets the one-frame response
  back there: that is how a remote worker, which reaches only the backend, asks the
  embedder for vectors.

Everything that crosses a process boundary is decoded into a typed ``msgspec.Struct``;
a frame that fails to decode gets an error reply naming the cause (or, if it cannot even
be answered, a log line) and never takes a process down. Decoded params are held to the
bounds at the end of this module (``[limits]``: every string and list has one), and a
request with a string UTF-8 cannot carry is refused, naming the field, before it is sent.
"""

from __future__ import annotations

import enum
import re
import unicodedata
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, overload

import msgspec

from trusty_memory.common import tracing

if TYPE_CHECKING:
    from trusty_memory.common.config import Config, LimitsSettings

PROTOCOL_VERSION = 1

# Backend commands: the first frame of every worker <-> broker message.
W_READY = b"\x01"
W_REQUEST = b"\x02"
W_REPLY = b"\x03"
W_HEARTBEAT = b"\x04"
W_DISCONNECT = b"\x05"
W_COMMANDS = {W_READY, W_REQUEST, W_REPLY, W_HEARTBEAT, W_DISCONNECT}

EMBEDDER_SERVICE = "embedder"
# The bulk lane: ``embed_bulk`` (mining, imports) goes to an embedder process of its own,
# started on first use at a lower CPU priority and stopped when idle, so bulk work yields
# the CPU to the interactive embedder instead of queueing interactive calls behind it.
EMBEDDER_BULK_SERVICE = "embedder-bulk"
DREAMER_SERVICE = "dreamer"  # a supervised child, not a worker: it is a client
MCP_HOST_SERVICE = "mcp-host"  # likewise: runs the MCP SDK for every relayed serve session
PALACE_SERVICE_PREFIX = "palace:"


def embedder_service(method: str) -> str:
    """The routing-table key of the embedders that answer ``method``."""
    return EMBEDDER_BULK_SERVICE if method == "embed_bulk" else EMBEDDER_SERVICE


def palace_service(palace: str) -> str:
    """The routing-table key of a palace's workers."""
    return PALACE_SERVICE_PREFIX + palace


class ErrorCode(enum.IntEnum):
    """Numeric error codes, grouped by family (the thousands digit).

    The message that goes with a code always names the cause; the MCP front end keeps the
    message and maps every code onto JSON-RPC ``-32603`` as the contract requires (for
    sessions of protocol 2024-11-05 and 2025-03-26), or onto a tool result with
    ``isError`` (2025-06-18 and later: ``client/mcp/session.py``).
    """

    # 1xxx validation: the caller sent something we will not accept.
    INVALID_PARAMS = 1001
    INVALID_PALACE_NAME = 1002
    TEXT_TOO_LARGE = 1003
    MALFORMED_FRAME = 1004
    UNKNOWN_METHOD = 1005
    # 2xxx not found.
    PALACE_NOT_FOUND = 2001
    DRAWER_NOT_FOUND = 2002
    FACT_NOT_FOUND = 2003
    # 3xxx conflict.
    PALACE_EXISTS = 3001
    # 4xxx storage: SQLite or the vector index failed.
    STORAGE_ERROR = 4001
    INDEX_ERROR = 4002
    # 5xxx embedder.
    EMBEDDER_UNAVAILABLE = 5001
    EMBEDDING_FAILED = 5002
    # 6xxx dispatch: routing, deadlines, crashed workers.
    TIMEOUT = 6001
    WORKER_CRASHED = 6002
    NO_WORKER = 6003
    SHUTTING_DOWN = 6004
    INTERNAL = 6005
    # 7xxx overload.
    OVERLOADED = 7001

    @property
    def family(self) -> str:
        return _FAMILIES[self.value // 1000]


_FAMILIES = {
    1: "validation",
    2: "not found",
    3: "conflict",
    4: "storage",
    5: "embedder",
    6: "dispatch",
    7: "overload",
}


class ErrorInfo(msgspec.Struct, frozen=True):
    code: int
    message: str


class Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A call to a method. ``params`` stays raw MessagePack until the handler that owns
    the method decodes it into that method's params Struct, so the broker can route a
    request without paying to decode its body."""

    id: str
    method: str
    palace: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"\x80")  # an empty map
    timeout_ms: int | None = None
    min_seq: int = 0  # reads: answer only once this palace seq is applied
    # Sent by the daemon's own actors (the dreamer): not a client's use of the daemon, so
    # it does not keep a client-started daemon from its idle exit.
    background: bool = False
    # The request's trace id (``common/tracing.py``), set only while tracing is on; empty,
    # it is not encoded, and a receiver that predates it ignores it (unknown fields are).
    trace: str = ""


class Response(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    seq: int = 0  # writes: the palace's seq after this write committed


class Ready(msgspec.Struct, kw_only=True):
    """A worker announcing itself on the backend socket."""

    service: str
    role: str = "writer"
    pid: int = 0
    protocol: int = PROTOCOL_VERSION
    # A worker on another host (``trusty-memory worker``): not the broker's child, so
    # never signalled or restarted by it, and its pid means nothing on the broker's host.
    remote: bool = False
    host: str = ""  # its host name, for ``status``


class TrustyError(Exception):
    """An error that travels: raised anywhere, it becomes ``Response.error``."""

    def __init__(self, code: ErrorCode | int, message: str) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"[{int(self.code)}] {message}")

    def info(self) -> ErrorInfo:
        return ErrorInfo(code=int(self.code), message=self.message)

    @classmethod
    def from_info(cls, info: ErrorInfo) -> TrustyError:
        try:
            code = ErrorCode(info.code)
        except ValueError:
            code = ErrorCode.MALFORMED_FRAME
        return cls(code, info.message)


# ---------------------------------------------------------------------------
# Method parameters. One Struct per method; unknown fields are ignored so newer
# clients can talk to older workers, wrong types are validation errors.


class PalaceParams(msgspec.Struct, kw_only=True):
    """Methods that need nothing beyond the palace named in the envelope."""


class PalaceCreateParams(msgspec.Struct, kw_only=True):
    name: str
    description: str | None = None


class PalaceScaleParams(msgspec.Struct, kw_only=True):
    """``palace_scale``: how many reader processes the palace keeps beside its writer."""

    name: str
    readers: int


class PalaceDeleteParams(msgspec.Struct, kw_only=True):
    """``palace_delete``: stop the palace's workers and move it to the home's archive
    (``palace_restore`` brings it back). With ``discard_empty`` a palace that holds nothing
    (no drawers, triples or archived drawers) is removed instead of archived: what a failed
    import does with a palace it created."""

    name: str
    discard_empty: bool = False


class PalaceRenameParams(msgspec.Struct, kw_only=True):
    """``palace_rename``: stop the palace's workers and move its directory to ``new_name``."""

    name: str
    new_name: str


class PalaceRestoreParams(msgspec.Struct, kw_only=True):
    """``palace_restore``: bring an archived palace back, the newest archived under ``name``
    unless ``entry`` (an archive entry, as ``palace_archived`` lists it) says which; as
    ``new_name`` when given (the name may be taken again by then)."""

    name: str
    entry: str | None = None
    new_name: str | None = None


class PalaceForgetRemoteParams(msgspec.Struct, kw_only=True):
    """``palace_forget_remote``: local workers may serve a palace a remote writer served
    (``broker/remote_palaces.py``); refused while one serves it."""

    name: str


class PalaceHitsParams(msgspec.Struct, kw_only=True):
    """``palace_hits``: recall hits a reader counted, as ``[[label, count], ...]``; the
    writer adds them to the next write transaction."""

    hits: list[tuple[int, int]]


class RememberParams(msgspec.Struct, kw_only=True):
    text: str
    room: str | None = None
    tags: list[str] = []
    importance: float = 0.5
    # Chosen by the caller so that a retried remember is idempotent.
    drawer_id: str | None = None
    created_at: str | None = None
    metadata: dict[str, Any] | None = None
    # Embedded instead of ``text`` when given; only ``text`` is stored and searched by
    # keyword. Lets a caller embed a turn with its neighbouring turns (a context window),
    # which lifts recall on conversations, while the drawer stays the turn itself.
    embed_text: str | None = None


class RecallParams(msgspec.Struct, kw_only=True):
    query: str
    top_k: int = 10
    room: str | None = None
    tag: str | None = None
    # Whether each hit counts as recalled (raising its importance at the next decay). An
    # agent's or the CLI's own recall does; a person looking through the web page does
    # not, or looking would change what agents are given.
    count: bool = True


class ListParams(msgspec.Struct, kw_only=True):
    room: str | None = None
    tag: str | None = None
    limit: int = 50


class ForgetParams(msgspec.Struct, kw_only=True):
    drawer_id: str


class KgAssertParams(msgspec.Struct, kw_only=True):
    subject: str
    predicate: str
    object: str
    confidence: float = 1.0
    provenance: str | None = None


class KgQueryParams(msgspec.Struct, kw_only=True):
    subject: str
    # RFC 3339: the triples that were active at that moment (closed ones included) rather
    # than the active ones now.
    as_of: str | None = None


class KgHistoryParams(msgspec.Struct, kw_only=True):
    """``kg_history``: every triple of ``subject`` (optionally one predicate), closed ones
    too, in assertion order."""

    subject: str
    predicate: str | None = None


class KgInvalidateParams(msgspec.Struct, kw_only=True):
    """``kg_invalidate``: close the active (subject, predicate) fact without asserting a
    replacement; with ``object``, only if that is its value."""

    subject: str
    predicate: str
    object: str | None = None


class UpdateParams(msgspec.Struct, kw_only=True):
    """``memory_update``: change a drawer in place (same id). Each field left out stays as
    it is; a new ``text`` is embedded again. The previous version goes to the archive
    (reason ``updated``), from where ``archive_restore`` of its version id brings it back."""

    drawer_id: str
    text: str | None = None
    room: str | None = None
    tags: list[str] | None = None
    importance: float | None = None


class SearchParams(msgspec.Struct, kw_only=True):
    """``memory_search``: keyword and phrase search (FTS5) with filters, a page at a time.

    Without ``query`` it lists the drawers last written first (an update of a text
    writes the drawer again) under the same filters. ``cursor``
    is the ``next_cursor`` of the previous page (opaque; only valid with the same query).
    ``since`` / ``until`` bound ``created_at`` (RFC 3339; ``since`` inclusive, ``until``
    exclusive).
    """

    query: str | None = None
    room: str | None = None
    tag: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = 20
    cursor: str | None = None


class EmbedParams(msgspec.Struct, kw_only=True):
    texts: list[str]


class ImportDrawer(msgspec.Struct, kw_only=True):
    """One drawer of a bulk import, stored as given (id, time and hits included)."""

    # None: derived from the drawer's text, room and metadata (``workers/store/bulk.py``,
    # ``derived_drawer_id``), so a file without ids imports again as a no-op.
    drawer_id: str | None = None
    content: str
    room: str | None = None
    tags: list[str] = []
    importance: float = 0.5
    created_at: str | None = None
    hits: int = 0
    metadata: dict[str, Any] | None = None
    # Little-endian float32 bytes, dim x 4. None: the worker embeds ``content``.
    vector: bytes | None = None
    # The drawer's own vector when ``vector`` is a context mix (``workers/store/context.py``).
    own_vector: bytes | None = None
    # Its episode predecessor's words (``drawers.context``) as an export wrote them: a
    # string, or None for none. Left out, the palace works them out by its own rule.
    context: str | msgspec.UnsetType | None = msgspec.UNSET


class ImportTriple(msgspec.Struct, kw_only=True):
    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None = None
    confidence: float = 1.0
    provenance: str | None = None


class ImportParams(msgspec.Struct, kw_only=True):
    """One ``palace_import`` request is one transaction: all of it is stored, or none."""

    drawers: list[ImportDrawer] = []
    triples: list[ImportTriple] = []
    # The drawers' vectors are their own texts' (``mine`` embeds each exchange alone): the
    # writer gives a drawer that continues its predecessor the mix a remember would get
    # (``workers/store/context.py``). Off, vectors are stored exactly as given (an export's
    # already hold their mixes).
    mix_context: bool = False


class DrawerGetParams(msgspec.Struct, kw_only=True):
    drawer_id: str


class UpdateResult(msgspec.Struct, kw_only=True):
    drawer_id: str
    palace: str
    status: str  # "updated", or "unchanged" when every given field already had that value
    changed: list[str]  # the fields that changed: text, room, tags, importance
    # The archive entry holding the previous version (``archive_restore`` takes it back);
    # None when nothing changed.
    previous_version: str | None = None


class SearchHit(msgspec.Struct, kw_only=True):
    drawer_id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    created_at: str
    score: float | None = None  # BM25 relevance (higher is better); None when listing


class SearchResult(msgspec.Struct, kw_only=True):
    palace: str
    query: str | None
    drawers: list[SearchHit]
    next_cursor: str | None = None  # None: this was the last page


class KgInvalidateResult(msgspec.Struct, kw_only=True):
    status: str  # "invalidated"
    subject: str
    predicate: str
    object: str
    valid_to: str


class DreamPassRecord(msgspec.Struct, kw_only=True):
    """One applied dream pass over a palace, as its ``dream_log`` keeps it."""

    finished_at: str
    duration_s: float
    merged: int
    decayed: int
    archived: int
    kg_decayed: int
    truncated: bool  # the pass stopped at its time budget; the next one goes on


class PalaceStats(msgspec.Struct, kw_only=True):
    """``palace_stats``: what a palace holds and how far its worker is behind."""

    palace: str
    role: str  # the worker that answered: "writer" or "reader"
    drawer_count: int
    room_counts: dict[str, int]
    tag_count: int
    triple_count: int  # active
    triple_total: int  # closed ones included
    archived_count: int
    last_seq: int  # the newest change this worker has read
    index_seq: int  # the newest change its vector index holds
    index_lag: int  # changes the index has yet to apply (a released index waits for a load)
    index_loaded: bool
    last_dream_at: str | None
    db_bytes: int  # palace.sqlite3 with its WAL
    index_bytes: int  # the newest index snapshot on disk
    dream_passes: list[DreamPassRecord] = []  # the last DREAM_PASSES_SHOWN, newest first
    redacted_count: int = 0  # drawers whose text had credentials replaced by markers


class ExportParams(msgspec.Struct, kw_only=True):
    """A page of ``kind`` ("drawers" or "triples") with cursor (label / triple id) > ``after``."""

    kind: str = "drawers"
    after: int = 0
    limit: int = 500
    vectors: bool = True


# ---------------------------------------------------------------------------
# Results. Field names are the contract's where the contract names them.


class StoredResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    drawer_id: str
    palace: str
    status: str  # always "stored", as the contract says
    # True when the text was already in the palace (same content, room and metadata): the
    # existing drawer's id is returned and nothing new is stored. Omitted when False.
    deduplicated: bool = False
    # Credentials replaced by markers before the text was stored ([privacy] secrets =
    # "redact"); omitted when none. The MCP tool's result keeps the contract's three keys.
    redacted: int = 0


class RecallHit(msgspec.Struct, kw_only=True):
    drawer_id: str
    content: str
    score: float
    layer: int
    tags: list[str]
    importance: float
    room: str = "General"
    created_at: str = ""


class RecallResult(msgspec.Struct, kw_only=True):
    palace: str
    query: str
    results: list[RecallHit]


class DrawerSummary(msgspec.Struct, kw_only=True):
    drawer_id: str
    content: str
    importance: float
    tags: list[str]
    created_at: str
    room: str = "General"


class DrawerDetail(msgspec.Struct, kw_only=True):
    """A whole drawer (``drawer_get``): everything stored with it but its vector."""

    drawer_id: str
    palace: str
    content: str
    room: str
    tags: list[str]
    importance: float
    base_importance: float | None
    created_at: str
    hits: int
    metadata: dict | None = None


class ListResult(msgspec.Struct, kw_only=True):
    palace: str
    drawers: list[DrawerSummary]


class ForgetResult(msgspec.Struct, kw_only=True):
    status: str
    drawer_id: str
    palace: str


class Triple(msgspec.Struct, kw_only=True):
    subject: str
    predicate: str
    object: str
    valid_from: str
    valid_to: str | None
    confidence: float
    provenance: str | None


class KgQueryResult(msgspec.Struct, kw_only=True):
    subject: str
    triples: list[Triple]


class PalaceInfo(msgspec.Struct, kw_only=True):
    id: str
    name: str
    drawer_count: int
    data_dir: str
    description: str | None = None
    triple_count: int = 0
    last_seq: int = 0
    index_count: int = 0
    # The dreamer's work (see ``workers/store/dream_log.py``): when it last applied a pass and
    # what all its passes did so far; ``archived_count`` is what the archive holds now.
    last_dream_at: str | None = None
    dream_merged: int = 0
    dream_decayed: int = 0
    dream_archived: int = 0
    archived_count: int = 0


class ImportResult(msgspec.Struct, kw_only=True):
    imported: int
    skipped: int  # drawer ids already in the palace (or repeated in the batch)
    triples_imported: int = 0
    triples_skipped: int = 0  # identical triples already present
    redacted: int = 0  # credentials replaced by markers in the batch's drawers and triples


class ExportDrawer(msgspec.Struct, kw_only=True):
    drawer_id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    created_at: str
    hits: int = 0
    metadata: dict[str, Any] | None = None
    vector: bytes | None = None
    own_vector: bytes | None = None  # only beside a context-mixed ``vector``
    context: str | None = None  # the episode predecessor's words deep recall's BM25 reads


class ExportResult(msgspec.Struct, kw_only=True):
    drawers: list[ExportDrawer] = []
    triples: list[Triple] = []
    next_after: int | None = None  # None: this was the last page


class EmbedResult(msgspec.Struct, kw_only=True):
    # Row-major float32 bytes, len(texts) x dim: compact and zero-copy into numpy.
    vectors: bytes
    dim: int


# ---------------------------------------------------------------------------
# The dreamer's methods (``dream_*``) and the archive's. Each one is one bounded batch of
# work for the palace's writer, so foreground requests wait at most one batch.


class DreamScanParams(msgspec.Struct, kw_only=True):
    """Look for duplicates of the drawers with label > ``after`` (``limit`` of them)."""

    after: int = 0
    limit: int = 256
    threshold: float = 0.95
    neighbours: int = 8


class DuplicatePair(msgspec.Struct, kw_only=True, array_like=True):
    a: str
    b: str
    similarity: float
    exact: bool


class DistinctPair(msgspec.Struct, kw_only=True, array_like=True):
    """Two drawers close in meaning that are NOT duplicates, and why (``same_fact``)."""

    a: str
    b: str
    similarity: float
    reason: str  # e.g. "numbers differ: 100 vs 1000"


class DreamScanResult(msgspec.Struct, kw_only=True):
    pairs: list[DuplicatePair]
    scanned: int
    total: int  # drawers in the palace, for progress
    next_after: int | None = None  # None: the scan is complete
    # Pairs above the threshold, same room and metadata, that state different facts.
    distinct: list[DistinctPair] = []


class DreamMergeParams(msgspec.Struct, kw_only=True):
    """Each group is a set of drawer ids believed to be duplicates; the worker re-checks."""

    groups: list[list[str]]
    threshold: float = 0.95
    dry_run: bool = False


class MergeAction(msgspec.Struct, kw_only=True):
    keep: str
    merged: list[str]
    min_similarity: float
    content: str | None = None  # the survivor's new text, when the merge changes it


class DreamMergeResult(msgspec.Struct, kw_only=True):
    actions: list[MergeAction]
    merged: int  # drawers merged away (archived with reason "merged")
    skipped: int  # proposed members left alone: gone, other room/metadata, not the same fact
    distinct: list[DistinctPair] = []  # (survivor, member) pairs left alone, and why


class DreamDecayParams(msgspec.Struct, kw_only=True):
    """Decay and prune the drawers with label > ``after`` (``limit`` of them)."""

    after: int = 0
    limit: int = 1000
    half_life_days: float = 90.0
    prune_below: float = 0.05
    prune_min_age_days: float = 30.0
    prune: bool = True
    dry_run: bool = False
    now: str | None = None  # RFC 3339; default: the worker's clock


class DreamDecayResult(msgspec.Struct, kw_only=True):
    scanned: int
    decayed: int
    archived: list[str]
    total: int
    next_after: int | None = None


class DreamKgDecayParams(msgspec.Struct, kw_only=True):
    after: int = 0
    limit: int = 1000
    half_life_days: float = 180.0
    dry_run: bool = False
    now: str | None = None


class DreamKgDecayResult(msgspec.Struct, kw_only=True):
    scanned: int
    decayed: int
    next_after: int | None = None


class DreamFinishParams(msgspec.Struct, kw_only=True):
    """Record an applied pass and refresh the L1 snapshot."""

    duration_s: float
    merged: int = 0
    decayed: int = 0
    archived: int = 0
    kg_decayed: int = 0
    truncated: bool = False


class ArchiveListParams(msgspec.Struct, kw_only=True):
    after: int = 0
    limit: int = 50
    reason: str | None = None  # "pruned", "merged" or "updated" (memory_update's versions)


class ArchivedDrawer(msgspec.Struct, kw_only=True):
    drawer_id: str
    content: str
    room: str
    tags: list[str]
    importance: float
    created_at: str
    archived_at: str
    reason: str
    merged_into: str | None = None
    seq: int = 0


class ArchiveListResult(msgspec.Struct, kw_only=True):
    palace: str
    drawers: list[ArchivedDrawer]
    next_after: int | None = None


class ArchiveRestoreParams(msgspec.Struct, kw_only=True):
    drawer_id: str


class RestoreResult(msgspec.Struct, kw_only=True):
    drawer_id: str
    palace: str
    status: str  # "restored"


class ScrubParams(msgspec.Struct, kw_only=True):
    """``palace_scrub``: find the credentials a palace already holds (drawers, archive,
    context words, triples); with ``apply``, redact them in place, re-embed the drawers
    that changed and rewrite the index snapshot and the SQLite file so that no copy is left
    (``workers/scrub.py``). Without it, nothing is changed: counts only."""

    apply: bool = False


class ScrubResult(msgspec.Struct, kw_only=True):
    palace: str
    applied: bool
    found: dict[str, int]  # credentials by kind
    drawers: int  # live drawers holding one (text, room, tags, metadata, context words)
    archived: int  # archive entries holding one
    triples: int  # knowledge-graph triples holding one
    reembedded: int = 0  # drawers and archive entries given a vector of their new text
    palace_files: list[str] = []  # the palace's own files whose description held one


# Methods, by who answers them.
# Broker methods that move a palace's directory, so they first stop its workers: each is
# answered once they have exited (killed after ``[broker] close_grace_s``).
PALACE_MOVE_METHODS = frozenset({"palace_delete", "palace_rename"})
_BROKER_ONLY = ["ping", "status", "palace_list", "palace_archived", "palace_create",
                "palace_scale", "palace_restore", "palace_summaries",
                "palace_forget_remote"]  # fmt: skip
BROKER_METHODS = frozenset(_BROKER_ONLY) | PALACE_MOVE_METHODS
# The dreamer's maintenance: routed to the writer, and not counted as foreground use of a
# palace (so the dreamer's own traffic never makes a palace look busy to itself).
DREAM_METHODS = frozenset(
    {"dream_status", "dream_scan", "dream_merge", "dream_decay", "dream_kg_decay", "dream_finish"}
)
# Traffic that follows from other work rather than being it: routed like any request, but
# never counted as foreground use of a palace (the dreamer's passes, readers' hit counts).
BACKGROUND_METHODS = DREAM_METHODS | {"palace_hits"}
PALACE_WRITE_METHODS = (
    frozenset(
        {
            "memory_remember",
            "memory_forget",
            "kg_assert",
            "palace_import",
            "palace_hits",
            "archive_restore",
            "memory_update",
            "kg_invalidate",
            "palace_scrub",
        }
    )
    | DREAM_METHODS
)
PALACE_READ_METHODS = frozenset(
    {
        "memory_recall",
        "memory_recall_deep",
        "memory_list",
        "kg_query",
        "palace_info",
        "palace_export",
        "archive_list",
        "drawer_get",
        "memory_search",
        "kg_history",
        "palace_stats",
        "noop",
    }
)
PALACE_METHODS = PALACE_WRITE_METHODS | PALACE_READ_METHODS
EMBEDDER_METHODS = frozenset({"embed", "embed_bulk"})

PARAMS_FOR_METHOD: dict[str, type[msgspec.Struct]] = {
    "palace_create": PalaceCreateParams,
    "palace_scale": PalaceScaleParams,
    "palace_delete": PalaceDeleteParams,
    "palace_rename": PalaceRenameParams,
    "palace_restore": PalaceRestoreParams,
    "palace_forget_remote": PalaceForgetRemoteParams,
    "palace_hits": PalaceHitsParams,
    "memory_remember": RememberParams,
    "memory_recall": RecallParams,
    "memory_recall_deep": RecallParams,
    "memory_list": ListParams,
    "memory_forget": ForgetParams,
    "kg_assert": KgAssertParams,
    "kg_query": KgQueryParams,
    "palace_info": PalaceParams,
    "noop": PalaceParams,
    "palace_import": ImportParams,
    "palace_export": ExportParams,
    "drawer_get": DrawerGetParams,
    "memory_update": UpdateParams,
    "memory_search": SearchParams,
    "kg_history": KgHistoryParams,
    "kg_invalidate": KgInvalidateParams,
    "palace_stats": PalaceParams,
    "embed": EmbedParams,
    "embed_bulk": EmbedParams,
    "dream_status": PalaceParams,
    "dream_scan": DreamScanParams,
    "dream_merge": DreamMergeParams,
    "dream_decay": DreamDecayParams,
    "dream_kg_decay": DreamKgDecayParams,
    "dream_finish": DreamFinishParams,
    "archive_list": ArchiveListParams,
    "archive_restore": ArchiveRestoreParams,
    "palace_scrub": ScrubParams,
}


# ---------------------------------------------------------------------------
# Encoding helpers.

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Request)
_response_decoder = msgspec.msgpack.Decoder(Response)
_ready_decoder = msgspec.msgpack.Decoder(Ready)

S = TypeVar("S", bound=msgspec.Struct)


def new_id() -> str:
    return uuid.uuid4().hex


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def encode_request(
    method: str,
    params: Any = None,
    *,
    palace: str | None = None,
    id: str | None = None,
    timeout_ms: int | None = None,
    min_seq: int = 0,
    background: bool = False,
) -> tuple[str, bytes]:
    """Build and encode a request; returns ``(id, frame)``."""
    rid = id or new_id()
    params = params if params is not None else {}
    raw = msgspec.Raw(_encode_valid(method, params))
    req = Request(
        id=rid,
        method=method,
        palace=palace,
        params=raw,
        timeout_ms=timeout_ms,
        min_seq=min_seq,
        background=background,
    )
    if tracing.ON:
        req.trace = tracing.current.get()
    return rid, _encode_valid(method, req, {"palace": palace, "method": method, "id": rid})


def _encode_valid(method: str, obj: Any, fields: dict[str, Any] | None = None) -> bytes:
    """``obj`` encoded; a string that UTF-8 cannot carry (a lone surrogate: JSON's
    ``"\\ud800"``, or a command-line argument that was not UTF-8) is ``INVALID_PARAMS``
    naming its field, where msgspec's ``UnicodeEncodeError`` reached callers as an
    internal error. The search runs only once encoding failed: a valid request pays nothing.
    """
    try:
        return _encoder.encode(obj)
    except UnicodeEncodeError:
        problem = lone_surrogate(fields if fields is not None else obj)
        if problem is None:
            raise
        raise TrustyError(ErrorCode.INVALID_PARAMS, f"{method}: {problem}") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_in(text: str) -> str | None:
    """Where ``text`` holds a lone surrogate, as "(U+D800) at character 5"; None if nowhere."""
    found = None if text.isascii() else _SURROGATE.search(text)
    if found is None:
        return None
    return f"(U+{ord(found.group()):04X}) at character {found.start()}"


def lone_surrogate(obj: Any, path: str = "") -> str | None:
    """The first string inside ``obj`` (params as built by a caller: dicts, lists, Structs)
    that holds a lone surrogate, as ``"text: contains a lone surrogate (U+D800) at
    character 5; send valid UTF-8"``; None when every string is valid."""
    if isinstance(obj, str):
        where = surrogate_in(obj)
        if where is None:
            return None
        return f"{path or 'value'}: contains a lone surrogate {where}; send valid UTF-8"
    if isinstance(obj, msgspec.Struct):
        obj = {name: getattr(obj, name) for name in obj.__struct_fields__}
    if isinstance(obj, dict):
        for key, value in obj.items():
            name = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and surrogate_in(key) is not None:
                return lone_surrogate(key, f"{path or 'params'}: a key")
            if (problem := lone_surrogate(value, name)) is not None:
                return problem
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            if (problem := lone_surrogate(value, f"{path}[{i}]")) is not None:
                return problem
    return None


# What msgspec raises on a frame it cannot decode. Besides its own errors: RecursionError
# for a frame nested ~1,000 levels deep (a few KB of MessagePack), and UnicodeDecodeError
# (a ValueError) for a string that is not UTF-8. Either must cost that one request an
# error reply, never the answer itself or the process reading it.
_UNDECODABLE = (msgspec.MsgspecError, RecursionError, ValueError)


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return f"a string is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    return str(exc)


def decode_request(frame: bytes) -> Request:
    try:
        return _request_decoder.decode(frame)
    except _UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"malformed request frame: {_reason(exc)}"
        ) from exc


def salvage_id(frame: bytes) -> str:
    """The id of a request that failed to decode, so its error reply reaches the caller
    waiting for it; "" when there is none to be found.

    A full decode finds it wherever it is. When even that fails (a frame nested too
    deeply, or broken after its id), the id is read from the frame's first key-value
    pair, which is where every client of ours puts it (``Request``'s field order).
    """
    try:
        obj = msgspec.msgpack.decode(frame)
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            return obj["id"]
    except Exception:
        pass
    try:
        if not frame or not (0x81 <= frame[0] <= 0x8F or frame[0] in (0xDE, 0xDF)):
            return ""
        pos = {0xDE: 3, 0xDF: 5}.get(frame[0], 1)
        key, pos = _read_str(frame, pos)
        if key != "id":
            return ""
        return _read_str(frame, pos)[0]
    except (IndexError, UnicodeDecodeError, ValueError):
        return ""


def _read_str(frame: bytes, pos: int) -> tuple[str, int]:
    """The MessagePack string at ``pos`` and the position after it."""
    tag = frame[pos]
    if 0xA0 <= tag <= 0xBF:
        size, pos = tag & 0x1F, pos + 1
    elif tag in (0xD9, 0xDA, 0xDB):
        width = {0xD9: 1, 0xDA: 2, 0xDB: 4}[tag]
        size, pos = int.from_bytes(frame[pos + 1 : pos + 1 + width], "big"), pos + 1 + width
    else:
        raise ValueError("not a string")
    if pos + size > len(frame):
        raise ValueError("truncated string")
    return frame[pos : pos + size].decode("utf-8"), pos + size


def decode_response(frame: bytes) -> Response:
    try:
        return _response_decoder.decode(frame)
    except _UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"malformed response frame: {_reason(exc)}"
        ) from exc


def decode_ready(frame: bytes) -> Ready:
    try:
        return _ready_decoder.decode(frame)
    except _UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"malformed READY frame: {_reason(exc)}"
        ) from exc


@overload
def decode_params(method: str, raw: msgspec.Raw | bytes) -> Any: ...
@overload
def decode_params(method: str, raw: msgspec.Raw | bytes, cls: type[S]) -> S: ...
def decode_params(
    method: str, raw: msgspec.Raw | bytes, cls: type[msgspec.Struct] | None = None
) -> msgspec.Struct:
    """Decode a request's params into the Struct for ``method``.

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
    except _UNDECODABLE as exc:
        raise TrustyError(
            ErrorCode.MALFORMED_FRAME, f"{method}: undecodable params: {_reason(exc)}"
        ) from exc
    check_bounds(method, params)
    return params


def ok_response(rid: str, data: Any, seq: int = 0) -> bytes:
    return _encoder.encode(Response(id=rid, ok=True, data=data, seq=seq))


def error_response(rid: str, code: ErrorCode | int, message: str) -> bytes:
    return _encoder.encode(
        Response(id=rid, ok=False, error=ErrorInfo(code=int(code), message=message))
    )


def unwrap(resp: Response) -> Any:
    """The data of a successful response, or the ``TrustyError`` it carries."""
    if resp.ok:
        return resp.data
    raise TrustyError.from_info(resp.error or ErrorInfo(code=6003, message="empty error"))


def convert(data: Any, cls: type[S]) -> S:
    """Turn decoded response data into a typed result."""
    return msgspec.convert(data, cls)


# ---------------------------------------------------------------------------
# Bounds: what one request's params may carry. Checked where params are decoded
# (``decode_params``), which every worker and the broker run, so every way in (the MCP
# tools, the Python client, the command line, import) meets the same bounds before any
# work is done. The limits are ``[limits]`` settings (``config.LimitsSettings``, which
# says why each default is what it is); a drawer's text keeps its own bound,
# ``[palace] max_text_bytes``, checked by the palace worker (``TEXT_TOO_LARGE``).

_config: Config | None = None


def use_config(config: Config) -> None:
    """Bound params by ``config``'s limits in this process (a worker passes its own).
    Without it, the first decode reads the home's config, as every actor does."""
    global _config
    _config = config


def _bounds_config() -> Config:
    global _config
    if _config is None:
        from trusty_memory.common.config import load_config

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
