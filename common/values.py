"""Checking and shaping the values a palace stores: texts, ids, vectors, times, FTS queries.

Every check raises ``TrustyError`` with a message that names the field, so the caller (an
agent, through the MCP front end) learns what to fix.
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, datetime

import numpy as np

from trusty_memory.common.bounds import in_utc
from trusty_memory.common.messages import Triple
from trusty_memory.common.protocol import ErrorCode, TrustyError

# FTS5 terms: runs of letters/digits. Each is quoted, so no user text can be FTS syntax.
_FTS_TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_FTS_TERMS = 32


def invalid(message: str) -> TrustyError:
    return TrustyError(ErrorCode.INVALID_PARAMS, message)


def now_rfc3339() -> str:
    """UTC now at second precision with ``Z``, the contract's timestamp form."""
    return stored_time(datetime.now(UTC))


def stored_time(when: datetime) -> str:
    """``when`` (UTC) as stored: ``YYYY-MM-DDTHH:MM:SSZ`` with the year always four digits
    (``strftime``'s ``%Y`` writes year 5 as ``5``), so stored times order as text."""
    return f"{when.year:04d}-{when:%m-%dT%H:%M:%S}Z"


def check_text(text: object, max_bytes: int, field: str = "text") -> str:
    if not isinstance(text, str) or not text.strip():
        raise invalid(f"{field}: must be a non-empty string")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise TrustyError(
            ErrorCode.TEXT_TOO_LARGE, f"{field} is {size} bytes; the limit is {max_bytes}"
        )
    return text


def check_nonempty(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{field}: must be a non-empty string")
    return value


def check_unit_interval(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(f"{field}: must be a number in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise invalid(f"{field}: must be in [0, 1], got {value}")
    return float(value)


def check_drawer_id(value: object) -> str:
    """A caller-chosen drawer id must be a UUID; returned in canonical dashed form."""
    if not isinstance(value, str):
        raise invalid("drawer_id: must be a UUID string")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise invalid(f"drawer_id: not a UUID: {value!r}") from None


def canonical_id(drawer_id: object) -> str:
    """An id a caller names a stored drawer by: any spelling of a UUID as stored; other
    strings as given (they cannot exist, and the lookup says so)."""
    value = check_nonempty(drawer_id, "drawer_id")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return value


def check_created_at(value: str | None) -> str:
    """Caller-supplied timestamps are normalised to UTC ``...Z`` at second precision."""
    if value is None:
        return now_rfc3339()
    return check_timestamp(value, "created_at")


def check_timestamp(value: object, field: str) -> str:
    """An RFC 3339 time (a date alone means its midnight; no zone means UTC) in the stored
    form, UTC ``...Z`` at second precision, which orders as text the way it does in time."""
    if not isinstance(value, str):
        raise invalid(f"{field}: not an RFC 3339 timestamp: {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(f"{field}: not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        return stored_time(parsed)
    # An offset can move a time off the calendar (``0001-01-01T00:00:00+01:00`` is in the
    # year 0): that is the caller's error, named, never an ``OverflowError``.
    return stored_time(in_utc(parsed, field, value))


def check_tags(tags: object) -> list[str]:
    """Tags are kept verbatim; blanks and repeats are dropped, order is kept."""
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise invalid("tags: must be a list of strings")
    return list(dict.fromkeys(t for t in tags if t.strip()))


def check_top_k(top_k: object, max_top_k: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= max_top_k:
        raise invalid(f"top_k: must be an integer in 1..{max_top_k}, got {top_k!r}")
    return top_k


def check_limit(value: object, high: int) -> int:
    """A page size of the dreamer's steps and the archive listing: an integer in 1..high."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise invalid(f"limit: must be an integer in 1..{high}, got {value!r}")
    return value


def unit_vector(vector: object, dim: int, field: str = "vector") -> np.ndarray:
    """A float32 unit vector of length ``dim`` (normalised here: cosine = inner product)."""
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    if arr.shape != (dim,):
        raise invalid(f"{field}: expected {dim} dimensions, got {arr.size}")
    norm = float(np.linalg.norm(arr))
    if not math.isfinite(norm) or norm == 0.0:
        raise invalid(f"{field}: must be finite and non-zero")
    return arr / norm


# English function words: in an OR query they match nearly every drawer, so they only add
# noise to BM25's ranking (and cost time). Dropped unless the query has nothing else.
STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be been before being between both
    but by can could did do does doing done during each for from had has have having he her
    here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this
    those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves""".split()  # noqa: SIM905
)


def fts_terms(text: str) -> list[str]:
    """The distinct lower-cased terms of free text for an FTS5 query, in order.

    Stopwords are dropped unless nothing else is left; the terms are ORed (rather than
    ANDed) so BM25 can rank a drawer that matches most of a question's words, which is
    how questions are asked of a memory.
    """
    terms = list(dict.fromkeys(t.lower() for t in _FTS_TOKEN.findall(text)))
    return ([t for t in terms if t not in STOPWORDS] or terms)[:MAX_FTS_TERMS]


def fts_or(terms: list[str]) -> str:
    """A safe FTS5 query matching any of ``terms`` (each quoted, so never syntax)."""
    return " OR ".join(f'"{t}"' for t in terms)


def own_words(match: str) -> str:
    """``match`` kept to a drawer's own words: full-text search also holds each drawer's
    episode predecessor's words (``drawers.context``), which only deep recall's BM25 reads."""
    return f"{{content}} : ({match})"


# The columns of a triple, in Triple's field order: every SELECT that builds Triples.
TRIPLE_COLUMNS = "subject, predicate, object, valid_from, valid_to, confidence, provenance"


def triple_of(row) -> Triple:
    """A Triple from a row selected as ``TRIPLE_COLUMNS`` (in that order)."""
    return Triple(**dict(zip(Triple.__struct_fields__, row, strict=True)))
