"""What ``[privacy] secrets`` asks of every request a palace worker receives.

Here, on receipt, and not in a front end: every client reaches a palace through its
worker (MCP stdio, the CLI, the library, a team's peers over tcp, ``import``), so one
place covers them all, and it runs before the store and before the embedder is asked for
a vector, so neither SQLite, its full-text index, the archive, an export nor a vector ever
holds a secret this process was given.

* Writes (remember, update, import, KG facts): ``redact`` replaces each credential by
  its marker (``common/credentials/fields.py``) in every string the request would keep:
  the text, ``embed_text``, room, tags, metadata keys and values (a value read as the
  value of its key), context words and triple fields; ``refuse`` fails the request with
  ``INVALID_PARAMS`` naming the field, the kind and where, before anything is stored; a
  drawer id that holds one is refused in both modes (an id cannot be redacted and still
  name the drawer); ``keep`` does nothing.
* Lookups (recall and search queries, their room and tag filters, KG subjects): redacted
  alike in both modes, so a question that holds a secret finds the notes that held it,
  by its marker.
* Imports that bring vectors: a drawer whose text (or whose predecessor's, for a context
  mix) was redacted loses its vector, which was made of clear text; the worker embeds the
  redacted text instead.
* Exports: a drawer or triple that still holds a credential (written before this, or with
  ``keep``) leaves redacted, whatever the palace holds, unless the mode is ``keep``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config
from trusty_memory.common.credentials import redactor as r
from trusty_memory.common.credentials.fields import FieldGuard, map_tree
from trusty_memory.common.messages import (
    ExportDrawer,
    ExportResult,
    ImportParams,
    KgAssertParams,
    RememberParams,
    UpdateParams,
)
from trusty_memory.common.methods import LOOKUP_FIELDS, Method


class SecretGuard:
    """One palace worker's redaction: its mode, and its home's key (read on first use)."""

    def __init__(self, config: Config) -> None:
        self.mode = config.privacy.secrets
        self.home = config.home
        self._redactor: r.Redactor | None = None
        self._counts: dict[int, int] = {}  # id(params) -> credentials replaced, this batch

    @property
    def redactor(self) -> r.Redactor:
        if self._redactor is None:
            try:
                key = r.home_key(self.home)
            except OSError as exc:  # a read-only or full home: the write fails, clearly
                raise p.TrustyError(
                    p.ErrorCode.STORAGE_ERROR,
                    f"cannot read or make the redaction key in {self.home}: {exc}",
                ) from None
            self._redactor = r.Redactor(key)
        return self._redactor

    # -- requests ------------------------------------------------------------------------

    def new_batch(self) -> None:
        self._counts.clear()

    def count_for(self, params: object) -> int:
        """Credentials replaced in this request's params (0 when none or not a write)."""
        return self._counts.get(id(params), 0)

    def on_request(self, method: str, params: Any) -> None:
        """Redact, or refuse, what ``params`` would store; redact what it would look up."""
        if self.mode == r.KEEP:
            return
        write = _WRITES.get(method)
        if write is not None:
            fields = FieldGuard(self.mode, lambda: self.redactor, method)
            write(fields, params)
            if fields.count:
                self._counts[id(params)] = fields.count
        lookup = LOOKUP_FIELDS.get(method)  # redacted as the stored text was
        if lookup is not None:
            for name in lookup:
                value = getattr(params, name, None)
                if isinstance(value, str):
                    as_value_of = getattr(params, "predicate", None) if name == "object" else None
                    setattr(params, name, self.redactor.redact(value, as_value_of).text)

    # -- export --------------------------------------------------------------------------

    def export(self, store: Any, page: ExportResult) -> ExportResult:
        """An export page with no credential left in it (see the module doc)."""
        if self.mode == r.KEEP:
            return page
        red = self.redactor
        previous = _predecessor_content(store, page.drawers[0]) if page.drawers else None
        words = _secret_words(red.redact(previous).secrets) if previous else set()
        for d in page.drawers:
            text = red.redact(d.content)
            tags = [red.redact(t).text for t in d.tags]
            metadata = map_tree(_export_replace(red), "metadata", d.metadata)
            context = _clean_context(red, d.context, words)
            own_changed = text.count > 0
            if own_changed:
                d.content, d.vector, d.own_vector = text.text, None, None
            elif context != d.context and d.own_vector is not None:
                # The mix carried the predecessor's clear text: keep the drawer's own vector.
                d.vector, d.own_vector = d.own_vector, None
            d.room = red.redact(d.room).text
            d.drawer_id = red.redact(d.drawer_id).text
            d.tags, d.metadata, d.context = tags, metadata, context
            words = _secret_words(text.secrets)
        for t in page.triples:
            t.object = red.redact(t.object, t.predicate).text
            for name in ("subject", "predicate", "provenance"):
                value = getattr(t, name)
                if isinstance(value, str):
                    setattr(t, name, red.redact(value).text)
        return page


def _remember(f: FieldGuard, params: RememberParams) -> None:
    f.identifier("drawer_id", params.drawer_id)
    params.text = f.text("text", params.text)
    params.embed_text = f.maybe("embed_text", params.embed_text)
    params.room = f.maybe("room", params.room)
    params.tags = f.tags("tags", params.tags) or []
    params.metadata = f.tree("metadata", params.metadata)


def _update(f: FieldGuard, params: UpdateParams) -> None:
    params.text = f.maybe("text", params.text)
    params.room = f.maybe("room", params.room)
    params.tags = f.tags("tags", params.tags)


def _triple(f: FieldGuard, where: str, triple: Any) -> None:
    """A fact's fields; its object read as the value of its predicate (``db password X``)."""
    predicate = triple.predicate
    triple.subject = f.maybe(f"{where}subject", triple.subject)
    triple.predicate = f.maybe(f"{where}predicate", triple.predicate)
    triple.object = f.maybe(f"{where}object", triple.object, predicate)
    triple.provenance = f.maybe(f"{where}provenance", triple.provenance)


def _kg_assert(f: FieldGuard, params: KgAssertParams) -> None:
    _triple(f, "", params)


def _import(f: FieldGuard, params: ImportParams) -> None:
    """Drawers and triples of one batch. A drawer whose text changed is embedded again;
    so is one that follows it in the batch with the context words an export gave it (its
    mix, and its words, came from the clear text): it gets both by the palace's own rule."""
    before_changed = False
    for i, d in enumerate(params.drawers):
        where = f"drawers[{i}]"
        f.identifier(f"{where}.drawer_id", d.drawer_id)
        seen = len(f.secrets)
        d.content = f.text(f"{where}.content", d.content)
        changed = len(f.secrets) > seen
        d.room = f.maybe(f"{where}.room", d.room)
        d.tags = f.tags(f"{where}.tags", d.tags) or []
        d.metadata = f.tree(f"{where}.metadata", d.metadata)
        context_dirty = False
        if isinstance(d.context, str):
            seen_context = len(f.secrets)
            d.context = f.text(f"{where}.context", d.context)
            context_dirty = len(f.secrets) > seen_context
        if context_dirty or (before_changed and isinstance(d.context, str)):
            d.context = msgspec.UNSET
            context_dirty = True
        if changed or context_dirty:
            d.vector = d.own_vector = None
        before_changed = changed
    for i, t in enumerate(params.triples):
        _triple(f, f"triples[{i}].", t)


_WRITES: dict[str, Callable[[FieldGuard, Any], None]] = {
    Method.MEMORY_REMEMBER: _remember,
    Method.MEMORY_UPDATE: _update,
    Method.KG_ASSERT: _kg_assert,
    Method.PALACE_IMPORT: _import,
}


# -- export helpers -------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def _secret_words(secrets: list[str]) -> set[str]:
    """The words of secrets (as ``drawers.context`` keeps a predecessor's words)."""
    return {w.lower() for s in secrets for w in _WORD.findall(s) if len(w) >= 3}


def _clean_context(red: r.Redactor, context: str | None, words: set[str]) -> str | None:
    """Context words with no credential: redacted, and without the words of the secrets
    its predecessor held (a password is one plain word once the URL around it is gone)."""
    if not context:
        return context
    text = red.redact(context).text
    if words:
        text = " ".join(w for w in text.split(" ") if w.lower() not in words)
    return text.strip() or None


def _predecessor_content(store: Any, first: ExportDrawer) -> str | None:
    """The text of the drawer before the page's first (whose words its context may hold)."""
    if not first.context:
        return None
    row = store.db.conn.execute(
        "SELECT content FROM drawers WHERE label < (SELECT label FROM drawers WHERE id = ?)"
        " ORDER BY label DESC LIMIT 1",
        (first.drawer_id,),
    ).fetchone()
    return None if row is None else row[0]


def _export_replace(red: r.Redactor) -> Callable[[str, str, str | None], str | None]:
    def replace(where: str, text: str, name: str | None) -> str | None:
        done = red.redact(text, name)
        return done.text if done.count else None

    return replace
