"""Does a drawer continue the one written before it, or does it stand alone?

Deep recall lets a drawer borrow its episode predecessor's context: the vector mix and the
predecessor's words (``context.py``). That is right for a conversation, where "Yes, last
Tuesday!" means nothing without the question before it, and wrong for the notes a coding
agent writes in a burst at the end of a task: each names its subject and says its fact,
and the previous note's meaning only pulls it towards questions it does not answer
(``BENCHMARKS.md``, "Notes written in bursts"). The clock cannot tell the two apart: both
are written seconds apart in one room. Their shape can.

``continues(before, after)``: ``after`` is a reply to, or a continuation of, ``before``:

* it is written in a conversation's register: it speaks as or to a person (I, me, my,
  you, your) or in a question's or an exclamation's mood (a sentence ending in ``?`` or
  ``!``), outside what it quotes;
* or ``before`` asks something: what follows a question answers it;
* or it opens by pointing back: its first word (after a short label such as "Update:")
  is a pronoun, an answer or a connective ("It", "They", "Yes", "Thanks", "Also", ...), a
  demonstrative standing for what came before ("That sounds ...", "This is ..."; not one
  that opens a noun phrase naming its own subject, "That evening the database ..."), or
  its first words name "that one", "this one" or "the above".

A note that names its own subject in the third person and the declarative mood stands
alone. Measured on every pair of episode neighbours of every retrieval set
(``bench/probe_relatedness.py``; a conversation's turns and a follow-up note must be
called related, notes that stand alone must not), it calls 98.9% of LoCoMo's 5,610 turn
pairs and all 47 follow-up notes of the three engineering-notes sets related, and 100 /
97.3 / 100% of those sets' other pairs, 100% of the project history's and 99.6% of the
burst notes' pairs standalone (the misses: a note that speaks of "my" token, one that says
what a release "lets you" do). The measures of what two drawers are about were tried
first and do not separate the two: the cosine of the two own vectors is higher between
notes of one burst (one project) than between a dialog's turns, and lower between a
follow-up and its incident than either (at >= 0.3: 89.5% of LoCoMo's pairs and 6.2% of the
follow-ups related, 14.4% of the burst pairs standalone); shared rare words fail the same
way. Notes about one thing are still separate notes: what makes a drawer need its
predecessor is that it answers it or refers to it, and that is in its shape, whatever the
topic.

Plain regular expressions over the two texts, no model and no palace statistics: the
writer decides once per remember (``context.context_of``), and what a drawer stores (a
mix and the words, or its own vector) is the decision, so ranking reads nothing new.
Episode smoothing (``ranking.smooth_episodes``) still reads room and time alone: gated by
this rule it lowered first-answer recall on three of the five notes sets, raised it on
none and moved nothing on LoCoMo (``BENCHMARKS.md``): neighbours written together are
asked about together, it is their meaning and words mixed into a note's own that mislead.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Person deixis and mood: a conversation's turns speak as or to someone, ask and exclaim.
# A word on its own (not part of "read-your-writes" or "I/O"); "I" only as a capital, so
# that a code variable "i" is not a person.
_PERSON = re.compile(
    r"(?<![\w/-])(?:(?i:you|your|yours|yourself|you're|you've|you'll|you'd|me|my|mine"
    r"|myself)|I|I'm|I've|I'll|I'd)(?![\w/-])"
)
# A sentence that asks or exclaims: "?" or "!" after a word, ending the sentence (text,
# a quote or a bracket ends, or the next sentence starts), not code such as "(?:",
# "children?:", "!=" or a "panic!" macro.
_QUOTED = re.compile(r'"[^"\n]{1,300}"|\u201c[^\u201d\n]{1,300}\u201d')  # "..." or “...”
_MOOD = re.compile(r"\w[)\"']?[?!]+(?=$|[)\"']|\s+[^a-z\s])")
# First words that point back to what came before (or answer it).
# fmt: off
_BACK = frozenset(
    (
        "it", "its", "it's", "that's", "this's", "they", "they're", "them", "their", "he", "she",
        "his", "her", "him", "there", "yes", "no", "yeah", "yep", "yup", "nope", "sure", "ok",
        "okay", "thanks", "thank", "same", "also", "and", "but", "so", "then", "too",
    )
)
# A demonstrative points back when it stands for what came before ("That sounds great",
# "This is it"), not when it opens a noun phrase that names its own subject ("That evening
# the database ...", "Those 43 seconds ..."): it must stand alone or be followed by a verb
# of being, seeming or having, or by "one".
_DEMONSTRATIVES = frozenset(("that", "this", "these", "those"))
_AS_PRONOUN = frozenset(
    (
        "is", "was", "are", "were", "has", "had", "will", "would", "could", "should", "must",
        "might", "can", "may", "sounds", "looks", "seems", "makes", "means", "one", "ones",
    )
)
# fmt: on
_LABEL = re.compile(r"^\s*[^\s:]+(?: [^\s:]+){0,2}:\s+")  # "Update: ", "Follow up: "
_WORD = re.compile(r"[\w'-]+")
_POINTER = re.compile(r"\b(?:that one|this one|the above|as above)\b", re.IGNORECASE)
OPENING_WORDS = 6  # how far "that one" may be from the start and still point back
OPENING_CHARS = 200  # the opening read for it (a long note is not read to its end)


def _unquoted(text: str) -> str:
    """The text without what it quotes: a quoted question or "you" is a mention (an error
    message, a title), not the writer asking or addressing anyone."""
    return _QUOTED.sub(" ", text)


def conversational(text: str) -> bool:
    """Written as a turn of a conversation: first or second person, or ``?`` / ``!``."""
    text = _unquoted(text)
    return bool(_PERSON.search(text) or _MOOD.search(text))


def asks(text: str) -> bool:
    """Holds a question (a sentence ending in ``?``): what follows it answers."""
    return any(m.group(0).endswith("?") for m in _MOOD.finditer(_unquoted(text)))


def points_back(text: str) -> bool:
    """Opens with a word that needs what came before (see the module doc)."""
    head = text[:OPENING_CHARS]
    if _POINTER.search(" ".join(_WORD.findall(head)[:OPENING_WORDS])):
        return True
    for candidate in (head, _LABEL.sub("", head, count=1)):
        first = _WORD.search(candidate)
        if first is None:
            continue
        word = first.group(0).lower()
        if word in _BACK:
            return True
        if word in _DEMONSTRATIVES:
            rest = candidate[first.end() :]
            following = _WORD.match(rest.lstrip())
            if rest[:1] != " " or following is None or following.group(0).lower() in _AS_PRONOUN:
                return True
    return False


class Reading(NamedTuple):
    """What :func:`continues` reads of one text."""

    conversational: bool
    asks: bool
    points_back: bool


def reading(text: str) -> Reading:
    return Reading(conversational(text), asks(text), points_back(text))


class _Unread:
    """A text's reading taken test by test as :func:`follows` asks: a single pair (the
    writer's decision at each remember) runs only the tests its answer needs."""

    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def conversational(self) -> bool:
        return conversational(self.text)

    @property
    def asks(self) -> bool:
        return asks(self.text)

    @property
    def points_back(self) -> bool:
        return points_back(self.text)


def follows(before: Reading | _Unread, after: Reading | _Unread) -> bool:
    """The rule of :func:`continues`, on two texts' readings."""
    return after.conversational or before.asks or after.points_back


def continues(before: str, after: str) -> bool:
    """``after`` replies to or continues ``before`` (the module doc says how it is read)."""
    return follows(_Unread(before), _Unread(after))


READINGS_KEPT = 50_000  # drawers' readings a palace process keeps (about 8 MB at most)


class Readings:
    """Drawers' readings by content hash, kept across deep recalls. Why: a deep recall
    smooths over the episode neighbours among its ~200 candidates, the same drawers come
    back query after query, and a reading is a dozen regular expressions over a text: read
    afresh each time it was 60% of a deep recall on a 200-drawer palace. A hash names one
    text, so a drawer whose text changes (a new label and hash) is read again; the kept
    readings start over when :data:`READINGS_KEPT` are held."""

    def __init__(self, limit: int = READINGS_KEPT) -> None:
        self.limit = limit
        self._by_hash: dict[str, Reading] = {}

    def of(self, content_hash: str, text: str) -> Reading:
        found = self._by_hash.get(content_hash)
        if found is None:
            if len(self._by_hash) >= self.limit:
                self._by_hash.clear()
            found = self._by_hash[content_hash] = reading(text)
        return found
