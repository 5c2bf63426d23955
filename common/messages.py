"""What each protocol method carries: its params and its result, one ``msgspec.Struct`` each.

Params: one Struct per method (``common/methods.py`` says which); unknown fields are
ignored so newer clients can talk to older workers, wrong types are validation errors,
and every string, list and map is held to a bound (``common/bounds.py``). Results: field
names are the contract's where the contract names them.
"""

from __future__ import annotations

from typing import Any

import msgspec


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
