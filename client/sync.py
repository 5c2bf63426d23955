"""The blocking Python client: ``Client(...).remember(palace, text)``, ``.recall(...)``.

A ``common.caller.Caller`` (one DEALER socket to the broker, a request at a time, sent
again when the daemon is replaced; read-your-writes per palace) that may also start the
daemon when none answers (``autostart``), with typed helpers that wrap ``call`` and
return the protocol's result Structs.
"""

from __future__ import annotations

from typing import Any

from trusty_memory.client.autostart import ensure_daemon
from trusty_memory.common import protocol as p
from trusty_memory.common.caller import Caller
from trusty_memory.common.config import Config
from trusty_memory.common.messages import (
    DrawerDetail,
    ForgetResult,
    KgInvalidateResult,
    KgQueryResult,
    ListResult,
    PalaceInfo,
    PalaceStats,
    RecallResult,
    SearchResult,
    StoredResult,
    UpdateResult,
)
from trusty_memory.common.methods import Method


class Client(Caller):
    def __init__(
        self,
        config: Config | None = None,
        *,
        autostart: bool = True,
        background: bool = False,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(config, background=background, endpoint=endpoint)
        self.autostart = autostart

    def start_daemon(self) -> None:
        """Before every connect: start the daemon when none answers, where allowed (never
        for a given endpoint: a remote worker's backend is not ours to start)."""
        if self.autostart and self.endpoint is None:
            ensure_daemon(self.config)

    # -- typed helpers -------------------------------------------------------------

    def ping(self) -> dict:
        return self.call(Method.PING)

    def status(self) -> dict:
        return self.call(Method.STATUS)

    def palace_list(self) -> list[str]:
        return self.call(Method.PALACE_LIST)["palaces"]

    def palace_create(self, name: str, description: str | None = None) -> dict:
        return self.call(Method.PALACE_CREATE, {"name": name, "description": description})

    def palace_delete(self, name: str, *, discard_empty: bool = False) -> dict:
        """Stop the palace's workers and move it to the archive (``palace_restore`` brings it
        back); with ``discard_empty`` a palace that holds nothing is removed instead."""
        params = {"name": name, "discard_empty": discard_empty}
        return self.call(Method.PALACE_DELETE, params, timeout=self._move_timeout())

    def palace_rename(self, name: str, new_name: str) -> dict:
        params = {"name": name, "new_name": new_name}
        return self.call(Method.PALACE_RENAME, params, timeout=self._move_timeout())

    def _move_timeout(self) -> float:
        """A delete or rename waits for the palace's workers, killed after the grace."""
        broker = self.config.broker
        return max(broker.request_timeout_s, broker.close_grace_s + 10.0)

    def palace_restore(
        self, name: str, *, entry: str | None = None, new_name: str | None = None
    ) -> dict:
        params = {"name": name, "entry": entry, "new_name": new_name}
        return self.call(Method.PALACE_RESTORE, params)

    def palace_forget_remote(self, name: str) -> dict:
        """Let local workers serve ``name`` again, a palace a remote writer served (refused
        while one does): ``{"palace", "host", "local_copy"}``."""
        return self.call(Method.PALACE_FORGET_REMOTE, {"name": name})

    def palace_archived(self) -> list[dict]:
        return self.call(Method.PALACE_ARCHIVED)["palaces"]

    def scale(self, palace: str, readers: int) -> dict:
        return self.call(Method.PALACE_SCALE, {"name": palace, "readers": readers})

    def palace_info(self, palace: str) -> PalaceInfo:
        return p.convert(self.call(Method.PALACE_INFO, palace=palace), PalaceInfo)

    def remember(self, palace: str, text: str, **fields: Any) -> StoredResult:
        params = {"text": text, **fields}
        return p.convert(self.call(Method.MEMORY_REMEMBER, params, palace=palace), StoredResult)

    def recall(self, palace: str, query: str, top_k: int = 10, deep: bool = False, **filters):
        method = Method.MEMORY_RECALL_DEEP if deep else Method.MEMORY_RECALL
        params = {"query": query, "top_k": top_k, **filters}
        return p.convert(self.call(method, params, palace=palace), RecallResult)

    def list(self, palace: str, **params: Any) -> ListResult:
        return p.convert(self.call(Method.MEMORY_LIST, params, palace=palace), ListResult)

    def forget(self, palace: str, drawer_id: str) -> ForgetResult:
        data = self.call(Method.MEMORY_FORGET, {"drawer_id": drawer_id}, palace=palace)
        return p.convert(data, ForgetResult)

    def kg_assert(self, palace: str, subject: str, predicate: str, object: str, **kw) -> dict:
        params = {"subject": subject, "predicate": predicate, "object": object, **kw}
        return self.call(Method.KG_ASSERT, params, palace=palace)

    def kg_query(self, palace: str, subject: str, as_of: str | None = None) -> KgQueryResult:
        """The subject's active triples; with ``as_of`` (RFC 3339), those active then."""
        params = {"subject": subject} if as_of is None else {"subject": subject, "as_of": as_of}
        data = self.call(Method.KG_QUERY, params, palace=palace)
        return p.convert(data, KgQueryResult)

    # -- what ``serve --tools extended`` offers, for any client ---------------------------

    def get(self, palace: str, drawer_id: str) -> DrawerDetail:
        """One whole drawer by id (``drawer_get``); ``DRAWER_NOT_FOUND`` names the archive
        when the drawer is there."""
        data = self.call(Method.DRAWER_GET, {"drawer_id": drawer_id}, palace=palace)
        return p.convert(data, DrawerDetail)

    def update(self, palace: str, drawer_id: str, **fields: Any) -> UpdateResult:
        """Change a drawer in place: ``text``, ``room``, ``tags``, ``importance`` (see
        ``messages.UpdateParams``); the previous version goes to the archive."""
        data = self.call(Method.MEMORY_UPDATE, {"drawer_id": drawer_id, **fields}, palace=palace)
        return p.convert(data, UpdateResult)

    def search(self, palace: str, query: str | None = None, **params: Any) -> SearchResult:
        """A page of keyword-search hits, or of all drawers last written first without a query;
        ``room``, ``tag``, ``since``, ``until``, ``limit`` and ``cursor`` (the previous
        page's ``next_cursor``) as ``messages.SearchParams`` describes them."""
        data = self.call(Method.MEMORY_SEARCH, {"query": query, **params}, palace=palace)
        return p.convert(data, SearchResult)

    def kg_history(self, palace: str, subject: str, predicate: str | None = None) -> KgQueryResult:
        """Every triple of ``subject`` (one predicate's, if given), closed ones too."""
        params = {"subject": subject, "predicate": predicate}
        return p.convert(self.call(Method.KG_HISTORY, params, palace=palace), KgQueryResult)

    def kg_invalidate(
        self, palace: str, subject: str, predicate: str, object: str | None = None
    ) -> KgInvalidateResult:
        """Close the active (subject, predicate) fact without a replacement."""
        params = {"subject": subject, "predicate": predicate, "object": object}
        data = self.call(Method.KG_INVALIDATE, params, palace=palace)
        return p.convert(data, KgInvalidateResult)

    def palace_stats(self, palace: str) -> PalaceStats:
        """Counts, index lag, last dream pass and sizes, from whichever worker answers."""
        return p.convert(self.call(Method.PALACE_STATS, palace=palace), PalaceStats)
