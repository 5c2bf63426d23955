"""Do two notes state the same thing? The dreamer's merge rule beside cosine similarity.

MiniLM embeds notes that share a template almost identically: "The API rate limit is 100
requests per minute" and "... 1000 requests per minute" sit at cosine 0.97, as do "build
17 passed on runner 3" and "build 18 passed on runner 4". Cosine tells that two notes are
about the same thing; only their tokens tell whether they state the same fact. So the
dreamer merges two drawers only when the cosine is high (``dedup.scan_duplicates``)
AND ``same_fact`` says yes. Pure functions, no I/O.

A wrong merge makes a fact disappear from recall, while a missed merge costs one
near-duplicate row, so every check errs towards "different". The checks, in order (the
first that fails names the reason, e.g. ``numbers differ: 100 vs 1000``):

1. **Fact tokens** (numbers and versions, dates, times, addresses, identifiers, paths,
   URLs, emails, quoted strings) must agree as multisets. They are what a template's
   slots hold, so one of them differing is a different fact. They are normalised first,
   so that writing the same value differently still agrees: case, thousands separators
   (1,000 = 1000 = 1k), a ``v`` before a version, number words (twelve = 12), 9am = 09:00,
   a unit's spellings (``UNITS``: 250ms = 250 milliseconds, 600 requests/minute = 600
   requests per minute = 600 requests a minute).
2. **Negation** (not, n't, never, no, none, without, cannot ...): the same count in both.
   One "not" inverts a note while leaving every other token equal.
3. **Polarity pairs** (enabled/disabled, allowed/forbidden/denied, before/after,
   increase/decrease, on/off, true/false, pass/fail, succeeded/failed, up/down, min/max,
   above/below, more/less, add/remove, start/stop, open/closed, accepted/rejected,
   public/private, sync/async, first/last, required/optional ...): each group used the
   same way in both. These words are short and common, so a sentence model barely
   notices them flipping.
4. **Modality and tense**: must/should/may differ in obligation; "the DB was on port
   5432" is history, "is" is the present (tense compared only when both texts have one).
5. **Names**: capitalised words that do not start a sentence (people, products, places)
   must occur as often in both texts, compared without case.
6. **Content words**: every remaining word outside a short list of function and filler
   words ("the", "is", "note:", "currently" ...), plurals folded and a few abbreviations
   expanded (db = database), must occur in both. This catches what the lists above
   cannot name (staging/production, tabs/spaces, a name at the start of a sentence) and
   is where paraphrase with other words costs recall: by design.
7. **Order**: the fact tokens in the same order, and the sequence of meaningful tokens of
   one text a rotation of the other's: moving a clause from one end to the other ("In
   CI, X" = "X in CI") is the same fact, swapping roles ("X instead of Y" / "Y instead of
   X", "moved to 9:45 from 9:30") is not.

Precision and recall of the whole decision (MiniLM cosine >= 0.95 and this rule) are
measured on the labelled pairs in ``tests/dreamer/data`` (``tests/dreamer/test_same_fact``
and ``bench/dream.py``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

# -- word lists ------------------------------------------------------------------------


def _split(words: str) -> list[str]:
    return words.split()


NEGATIONS = frozenset(_split("not no never none nothing nobody neither nor without"))

# group -> poles; a word belongs to one pole of one group.
_POLARITY: dict[str, list[str]] = {
    "enabled/disabled": [
        "enable enabled enables enabling",
        "disable disabled disables disabling",
    ],
    "allowed/forbidden": [
        "allow allowed allows allowing permit permitted permits unblock unblocked",
        "forbid forbids forbidden deny denied denies disallow disallowed prohibit"
        " prohibited block blocked blocks",
    ],
    "before/after": ["before", "after"],
    "increase/decrease": [
        "increase increased increases increasing raise raised grow grew grown grows",
        "decrease decreased decreases decreasing reduce reduced reduces lower lowered"
        " shrink shrank shrinks",
    ],
    "on/off": ["on", "off"],
    "true/false": ["true", "false"],
    "pass/fail": [
        "pass passed passes passing succeed succeeded succeeds success successful successfully",
        "fail failed fails failing failure failures",
    ],
    "up/down": ["up", "down"],
    "min/max": ["min minimum least", "max maximum most"],
    "above/below": [
        "above over exceeds greater more higher larger bigger faster longer",
        "below under less fewer smaller slower shorter",
    ],
    "add/remove": [
        "add added adds adding install installed",
        "remove removed removes removing delete deleted deletes uninstall uninstalled",
    ],
    "include/exclude": ["include included includes", "exclude excluded excludes"],
    "start/stop": [
        "start started starts starting begin begins began",
        "stop stopped stops stopping end ends ended",
    ],
    "open/closed": ["open opened opens", "close closed closes"],
    "accepted/rejected": [
        "accept accepted accepts approve approved approves",
        "reject rejected rejects decline declined against",
    ],
    "public/private": ["public", "private"],
    "internal/external": ["internal", "external"],
    "sync/async": [
        "sync synchronous synchronously blocking",
        "async asynchronous asynchronously nonblocking non-blocking",
    ],
    "first/last": ["first", "last"],
    "required/optional": ["required require requires mandatory", "optional"],
    "online/offline": ["online", "offline"],
    "old/new": ["old older oldest legacy", "new newer newest latest"],
}
POLARITY: dict[str, tuple[str, int]] = {
    word: (group, pole)
    for group, poles in _POLARITY.items()
    for pole, words in enumerate(poles)
    for word in words.split()
}
MODALS = frozenset(_split("must should may might can could would shall"))
# "will" is not here: it stays a content word, so "we deploy" and "we will deploy" differ.
TENSES = {"is": "present", "are": "present", "am": "present", "was": "past", "were": "past"}
TENSES["did"] = "past"

STOPWORDS = frozenset(
    _split("""a an the this that these those it its itself is are am was were be been being
    do does did has have had having get gets got getting of to in at by for from with as
    into onto via per each every any all both and or but so then than also too there
    here where when while which who whom whose what how we our ours us i me my you your
    they their them he him his she her just really basically actually currently now
    still already simply quite very note notes fyi btw nb ps reminder remember please
    about around approximately roughly""")
)
# Said either way in notes; the long form is the key.
SYNONYMS = {
    "db": "database",
    "dbs": "database",
    "repo": "repository",
    "config": "configuration",
    "env": "environment",
    "prod": "production",
    "app": "application",
    "pkg": "package",
    "dir": "directory",
    "info": "information",
    "msg": "message",
    "perf": "performance",
    "$": "dollar",
    "€": "euro",
    "£": "pound",
}
# Units and how notes write them: the name compared, then every spelling of it. "per",
# "a" and "an" are function words, so "600 requests per minute", "600 requests a minute"
# and "600 requests/minute" (a slash before a unit, ``_rate``) are one fact, as are
# "250 ms", "250ms" and "250 milliseconds". Bits and bytes are not told apart (Mb = MB).
UNITS: dict[str, str] = {
    "millisecond": "ms msec msecs millisecond milliseconds",
    "second": "s sec secs second seconds",
    "minute": "min mins minute minutes",
    "hour": "h hr hrs hour hours",
    "day": "day days",
    "week": "wk wks week weeks",
    "kilobyte": "kb kilobyte kilobytes",
    "megabyte": "mb megabyte megabytes",
    "gigabyte": "gb gigabyte gigabytes",
    "terabyte": "tb terabyte terabytes",
    "percent": "% pct percent",
    "request": "req reqs request requests",
}
UNIT_NAMES = {alias: unit for unit, aliases in UNITS.items() for alias in aliases.split()}
# "min" is also the min/max polarity word: it reads as a minute only after a number
# ("5 min", ``features``) or a slash ("requests/min").
SYNONYMS.update({alias: unit for alias, unit in UNIT_NAMES.items() if alias not in POLARITY})
NUMBER_WORDS = {
    w: str(n)
    for n, w in enumerate(
        _split(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen"
            " fourteen fifteen sixteen seventeen eighteen nineteen twenty"
        )
    )
}
NUMBER_WORDS.update(
    {
        w: str(10 * n)
        for n, w in enumerate(_split("thirty forty fifty sixty seventy eighty ninety"), 3)
    }
)
NUMBER_WORDS.update({"hundred": "100", "thousand": "1000", "million": "1000000"})
MONTHS = {
    name: n
    for n, names in enumerate(
        [
            "january jan",
            "february feb",
            "march mar",
            "april apr",
            "may",
            "june jun",
            "july jul",
            "august aug",
            "september sep sept",
            "october oct",
            "november nov",
            "december dec",
        ],
        1,
    )
    for name in names.split()
}
WEEKDAYS = {
    name: n
    for n, names in enumerate(
        [
            "monday mon",
            "tuesday tue tues",
            "wednesday wed",
            "thursday thu thur thurs",
            "friday fri",
            "saturday",
            "sunday",
        ],
        1,
    )
    for name in names.split()
}
RELATIVE_DAYS = frozenset(_split("today tomorrow yesterday tonight"))
# Prefixes that negate the word they are glued to, for naming a flip (unblocked, invalid).
NEGATING_PREFIXES = ("non-", "non", "un", "in", "im", "dis")

# Kinds of fact token and how a reason names them.
FACT_KINDS = {
    "number": "numbers",
    "version": "versions",
    "date": "dates",
    "time": "times",
    "address": "addresses",
    "identifier": "identifiers",
    "path": "paths",
    "url": "URLs",
    "email": "emails",
    "quoted": "quoted strings",
}

# -- tokenising ------------------------------------------------------------------------

# Typographic quotes and dashes written as their ASCII forms.
_ASCII = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
    }
)
_QUOTED = re.compile(r'"([^"\n]+)"|`([^`\n]+)`|(?<![\w])\'([^\'\n]+)\'(?![\w])')
_FILLER_PREFIX = re.compile(
    r"^\s*(?:note|nb|fyi|btw|reminder|heads[- ]up|ps|important|update)\s*[:,\-]\s*", re.I
)
_EDGE = "\"'`()[]{}<>,;:!?*"
_EMAIL = re.compile(r"^[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+$")
_ISO_DATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$")
_SLASH_DATE = re.compile(r"^\d{1,2}/\d{1,2}/\d{2,4}$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?(?:([ap])\.?m\.?)?$")
_HOUR = re.compile(r"^(\d{1,2})([ap])\.?m\.?$")
_AMPM = re.compile(r"^([ap])\.?m\.?$")
_ADDRESS = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?$")
_VERSION = re.compile(r"^v(\d+(?:\.\d+)*(?:[-+][\w.]+)?)$|^(\d+(?:\.\d+){2,}(?:[-+][\w.]+)?)$")
_NUMBER = re.compile(r"^([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(e[-+]?\d+)?$")
_THOUSANDS = re.compile(r"^(\d+(?:\.\d+)?)k$")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_UNIT = re.compile(r"^(\d+(?:\.\d+)?)([a-z]{1,3}|%)$")
_CURRENCY = re.compile(r"^([$€£])(.+)$")
_MIXED = re.compile(r"^(?=.*\d)(?=.*[a-z_])[\w.\-#/]+$")
_SENTENCE_END = (".", "!", "?", ":", ";")


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` is a fact kind, ``word``, ``neg``, ``polar``, ``modal`` or ``stop``
    (a function word: only its tense is kept)."""

    kind: str
    key: str  # what is compared
    shown: str  # how a reason shows it


@dataclass(frozen=True)
class Features:
    tokens: tuple[Token, ...]  # in text order, function words dropped
    quoted: tuple[str, ...]
    names: frozenset[str]  # capitalised words not starting a sentence, casefolded
    words: Counter  # every word casefolded (for the name check)
    tenses: frozenset[str]


@dataclass(frozen=True)
class Verdict:
    """``same``: the two texts state the same thing; ``reason`` says why not (or "same")."""

    same: bool
    reason: str


def _number_key(sign: str, whole: str, frac: str | None, exp: str | None) -> str:
    whole = whole.replace(",", "").lstrip("0") or "0"
    return ("-" if sign == "-" else "") + whole + (frac or "") + (exp or "")


def _clock(hour: int, minute: int, second: str | None, ampm: str | None) -> str:
    if ampm:
        hour = hour % 12 + (12 if ampm == "p" else 0)
    return f"{hour:02d}:{minute:02d}" + (f":{second}" if second else "")


def _classify(chunk: str, lower: str, following: str | None) -> tuple[list[Token], bool]:
    """Tokens of one whitespace-separated chunk (edge punctuation already stripped).

    Returns ``(tokens, consumed_next)``: a clock time may take the next chunk ("9 am").
    """
    if "://" in lower or lower.startswith("www."):
        return [Token("url", lower.rstrip("/."), chunk)], False
    if _EMAIL.match(lower):
        return [Token("email", lower, chunk)], False
    m = _ISO_DATE.match(lower)
    if m:
        key = f"{m[1]}-{int(m[2]):02d}-{int(m[3]):02d}"
        return [Token("date", key, chunk)], False
    if _SLASH_DATE.match(lower):
        return [Token("date", lower, chunk)], False
    ampm = _AMPM.match(following or "")
    m = _CLOCK.match(lower)
    if m:
        suffix = m[4] or (ampm[1] if ampm and not m[4] else None)
        key = _clock(int(m[1]), int(m[2]), m[3], suffix)
        return [Token("time", key, chunk)], bool(ampm and not m[4])
    m = _HOUR.match(lower)
    if m:
        return [Token("time", _clock(int(m[1]), 0, None, m[2]), chunk)], False
    if lower.isdigit() and ampm and int(lower) <= 12:
        return [Token("time", _clock(int(lower), 0, None, ampm[1]), chunk)], True
    if _ADDRESS.match(lower):
        return [Token("address", lower, chunk)], False
    m = _VERSION.match(lower)
    if m:
        return [Token("version", m[1] or m[2], chunk)], False
    m = _CURRENCY.match(lower)
    if m:
        rest, _ = _classify(chunk[1:], m[2], None)  # $500 = 500 dollars
        return [*rest, Token("word", SYNONYMS[m[1]], m[1])], False
    if "=" in lower.strip("="):  # KEY=value
        out: list[Token] = []
        for part, part_lower in zip(chunk.split("="), lower.split("="), strict=True):
            if part:
                out += _classify(part, part_lower, None)[0]
        return out, False
    rate = _rate(chunk, lower)
    if rate is not None:
        return rate, False
    if "/" in lower and lower.strip("/"):
        return [Token("path", lower.rstrip("/").lstrip("."), chunk)], False
    number = _number(lower, chunk)
    if number is not None:
        return number, False
    if lower.startswith("#") and len(lower) > 1:
        return [Token("identifier", lower, chunk)], False
    if lower.startswith("-") and lower.lstrip("-")[:1].isalpha():
        return [Token("identifier", lower, chunk)], False  # a command-line flag
    if "-" in lower and lower.strip("-"):
        parts = [p for p in lower.split("-") if p]
        if all(p in NUMBER_WORDS for p in parts):  # twenty-five
            total = str(sum(int(NUMBER_WORDS[p]) for p in parts))
            return [Token("number", total, chunk)], False
        if parts[0].isdigit() and len(parts) == 2 and parts[1].isalpha():  # 5-minute
            count = Token("number", _number_key("", parts[0], None, None), parts[0])
            return [count, *_words(parts[1], parts[1])], False
        return [Token("identifier", lower, chunk)], False
    if _MIXED.match(lower) or "_" in lower or "." in lower.strip("."):
        return [Token("identifier", lower, chunk)], False
    return _words(chunk, lower), False


def _rate(chunk: str, lower: str) -> list[Token] | None:
    """``requests/minute``, ``MB/s``, ``600/min``: what comes before the slash, then the
    unit after it, as "per minute" would read (a path otherwise: ``None``)."""
    before, slash, unit = lower.partition("/")
    if not (slash and before and unit in UNIT_NAMES) or "/" in unit:
        return None
    shown_before, _, shown_unit = chunk.partition("/")
    found, _ = _classify(shown_before, before, None)
    return [*found, Token("word", UNIT_NAMES[unit], shown_unit)]


def _number(lower: str, chunk: str) -> list[Token] | None:
    m = _NUMBER.match(lower)
    if m:
        return [Token("number", _number_key(m[1], m[2], m[3], m[4]), chunk)]
    m = _THOUSANDS.match(lower)
    if m:
        return [Token("number", _number_key("", str(round(float(m[1]) * 1000)), None, None), chunk)]
    m = _ORDINAL.match(lower)
    if m:
        return [Token("number", _number_key("", m[1], None, None), chunk)]
    m = _UNIT.match(lower)
    if m:
        whole, _, frac = m[1].partition(".")
        unit = UNIT_NAMES.get(m[2], SYNONYMS.get(m[2], m[2]))
        return [
            Token("number", _number_key("", whole, "." + frac if frac else None, None), m[1]),
            Token("word", unit, m[2]),
        ]
    return None


_CONTRACTIONS = {"can't": ["can", "not"], "won't": ["will", "not"], "shan't": ["shall", "not"]}
_CONTRACTIONS.update({"cannot": ["can", "not"], "ain't": ["is", "not"], "let's": ["let", "us"]})
_IS_WORDS = frozenset(_split("it that there what here who he she where how"))
_SUFFIXES = {"'re": "are", "'ll": "will", "'ve": "have", "'m": "am", "'d": "would"}


def _words(chunk: str, lower: str) -> list[Token]:
    """Plain words, contractions expanded: can't -> can not, it's -> it is, Ann's -> ann."""
    if lower in _CONTRACTIONS:
        return [_word(w, chunk) for w in _CONTRACTIONS[lower]]
    if lower.endswith("n't"):
        return [_word(lower[:-3], chunk), _word("not", chunk)]
    for suffix, full in _SUFFIXES.items():
        if lower.endswith(suffix):
            return [_word(lower[: -len(suffix)], chunk), _word(full, chunk)]
    if lower.endswith("'s"):
        stem = lower[:-2]
        return [_word(stem, chunk)] + ([_word("is", chunk)] if stem in _IS_WORDS else [])
    if lower.endswith("'"):  # plural possessive: the users' table
        lower = lower[:-1]
    return [_word(w, chunk) for w in re.split(r"[.'&+]+", lower) if w]


def _word(lower: str, shown: str) -> Token:
    """Classify one word: function word, negation, polarity, modal, number, date or content."""
    if lower in STOPWORDS:
        return Token("stop", lower, shown)
    if lower in NEGATIONS:
        return Token("neg", "not", shown)
    if lower in POLARITY:
        group, pole = POLARITY[lower]
        return Token("polar", f"{group}:{pole}", lower)
    if lower in MODALS and not (lower == "may" and shown[:1].isupper()):
        return Token("modal", lower, lower)
    if lower in NUMBER_WORDS:
        return Token("number", NUMBER_WORDS[lower], shown)
    if lower in MONTHS:
        return Token("date", f"month:{MONTHS[lower]}", shown)
    day = lower if lower in WEEKDAYS else lower.rstrip("s")  # Tuesdays = Tuesday
    if day in WEEKDAYS:
        return Token("date", f"weekday:{WEEKDAYS[day]}", shown)
    if lower in RELATIVE_DAYS:
        return Token("date", lower, shown)
    return Token("word", _word_key(lower), shown)


def _word_key(word: str) -> str:
    return _stem(SYNONYMS.get(word, word))


def _stem(word: str) -> str:
    """Fold plurals and third-person -s (deploys = deploy); nothing else: tense is kept."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "ches", "shes", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@functools.lru_cache(maxsize=8192)
def features(text: str) -> Features:
    """Everything the rule compares about one text (cached: a scan meets a text often)."""
    text = unicodedata.normalize("NFKC", text).translate(_ASCII)
    quoted = tuple(
        " ".join(next(g for g in m.groups() if g is not None).casefold().split())
        for m in _QUOTED.finditer(text)
    )
    text = _FILLER_PREFIX.sub("", text)
    chunks = text.split()
    tokens: list[Token] = []
    names: set[str] = set()
    words: Counter = Counter()
    tenses: set[str] = set()
    starts_sentence = True
    skip = False
    for i, raw in enumerate(chunks):
        if skip:
            skip = False
            starts_sentence = raw.endswith(_SENTENCE_END)
            continue
        chunk = raw.strip(_EDGE + ".")
        following = chunks[i + 1].strip(_EDGE + ".").casefold() if i + 1 < len(chunks) else None
        if chunk == "%":
            tokens.append(Token("word", SYNONYMS["%"], "%"))
        if not chunk.strip("%$&+-/="):  # punctuation alone
            chunk = ""
        if chunk:
            lower = chunk.casefold()
            if lower.endswith("%") and len(lower) > 1:
                found, skip = _classify(chunk[:-1], lower[:-1], None)
                found.append(Token("word", "percent", "%"))
            elif lower in UNIT_NAMES and tokens and tokens[-1].kind == "number":
                found = [Token("word", UNIT_NAMES[lower], chunk)]  # "5 min" is 5 minutes
            else:
                found, skip = _classify(chunk, lower, following)
            for token in found:
                if token.kind != "stop":
                    tokens.append(token)
                elif token.key in TENSES:
                    tenses.add(TENSES[token.key])
            found_words = [_word_key(w) for w in re.findall(r"[^\W\d_]+", lower)]
            words.update(found_words)
            if not starts_sentence and chunk[:1].isupper() and chunk[1:2].isalpha():
                names.update(found_words[:1])
        starts_sentence = raw.endswith(_SENTENCE_END) or raw == "-"
    return Features(tuple(tokens), quoted, frozenset(names), words, frozenset(tenses))


# -- deciding --------------------------------------------------------------------------


def wording_key(text: str) -> str:
    """The text with whitespace, punctuation and case removed.

    Two texts with the same key are one wording written two ways ("Deploys on Tuesday."
    and "deploys on tuesday"): a merge keeps only the newest. Texts with different keys
    are different wordings, and a merge keeps each of them.
    """
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", text).casefold())


def same_fact(a: str, b: str) -> Verdict:
    """Whether texts ``a`` and ``b`` state the same thing (see the module doc)."""
    fa, fb = features(a), features(b)
    for check in (_facts, _negation, _polarity, _modality, _names, _content, _order):
        reason = check(fa, fb)
        if reason:
            return Verdict(False, reason)
    return Verdict(True, "same fact")


def _differ(what: str, a: Counter, b: Counter) -> str:
    only_a, only_b = sorted((a - b).elements()), sorted((b - a).elements())
    return f"{what} differ: {', '.join(only_a) or '-'} vs {', '.join(only_b) or '-'}"


def _keys(tokens: tuple[Token, ...], kinds: tuple[str, ...]) -> Counter:
    return Counter((t.kind, t.key) for t in tokens if t.kind in kinds)


def _facts(fa: Features, fb: Features) -> str:
    if Counter(fa.quoted) != Counter(fb.quoted):
        return _differ("quoted strings", Counter(fa.quoted), Counter(fb.quoted))
    for kinds in _FACT_BUCKETS:
        ka, kb = _keys(fa.tokens, kinds), _keys(fb.tokens, kinds)
        if ka != kb:
            differing = {kind for kind, _ in (ka - kb) + (kb - ka)}
            name = FACT_KINDS["version" if "version" in differing else kinds[0]]
            return (
                f"{name} differ: {_shown_of(fa, ka - kb) or '-'} vs {_shown_of(fb, kb - ka) or '-'}"
            )
    return ""


# Numbers and versions are one bucket: v18 and 18 are the same value.
_FACT_BUCKETS = [("number", "version")] + [
    (kind,) for kind in FACT_KINDS if kind not in ("number", "version", "quoted")
]


def _shown_of(f: Features, keys: Counter) -> str:
    """The spellings of ``keys`` ((kind, key) counts) as this text wrote them."""
    out = []
    left = Counter(keys)
    for t in f.tokens:
        if left[(t.kind, t.key)] > 0:
            left[(t.kind, t.key)] -= 1
            out.append(t.shown)
    return ", ".join(out)


def _negation(fa: Features, fb: Features) -> str:
    na = sum(t.kind == "neg" for t in fa.tokens)
    nb = sum(t.kind == "neg" for t in fb.tokens)
    if na != nb:
        spelled_a = ", ".join(t.shown for t in fa.tokens if t.kind == "neg")
        spelled_b = ", ".join(t.shown for t in fb.tokens if t.kind == "neg")
        return f"negation differs: {spelled_a or '-'} vs {spelled_b or '-'}"
    return ""


def _polarity(fa: Features, fb: Features) -> str:
    ka, kb = _keys(fa.tokens, ("polar",)), _keys(fb.tokens, ("polar",))
    if ka != kb:
        return (
            f"polarity differs: {_shown_of(fa, ka - kb) or '-'} vs {_shown_of(fb, kb - ka) or '-'}"
        )
    return ""


def _modality(fa: Features, fb: Features) -> str:
    ka, kb = _keys(fa.tokens, ("modal",)), _keys(fb.tokens, ("modal",))
    if ka != kb:
        return (
            f"modality differs: {_shown_of(fa, ka - kb) or '-'} vs {_shown_of(fb, kb - ka) or '-'}"
        )
    if fa.tenses and fb.tenses and fa.tenses != fb.tenses:
        return f"tense differs: {', '.join(sorted(fa.tenses))} vs {', '.join(sorted(fb.tenses))}"
    return ""


def _names(fa: Features, fb: Features) -> str:
    names = (fa.names | fb.names) - STOPWORDS
    ca = Counter({n: fa.words[n] for n in names if fa.words[n]})
    cb = Counter({n: fb.words[n] for n in names if fb.words[n]})
    if ca != cb:
        return _differ("names", ca, cb)
    return ""


def _content(fa: Features, fb: Features) -> str:
    wa = {t.key: t.shown for t in fa.tokens if t.kind == "word"}
    wb = {t.key: t.shown for t in fb.tokens if t.kind == "word"}
    only_a = [wa[k] for k in wa if k not in wb]
    only_b = [wb[k] for k in wb if k not in wa]
    if not (only_a or only_b):
        return ""
    for x in only_a:
        for y in only_b:
            if _negates(x.casefold(), y.casefold()) or _negates(y.casefold(), x.casefold()):
                return f"polarity differs: {x} vs {y}"
    return f"wording differs: {', '.join(only_a) or '-'} vs {', '.join(only_b) or '-'}"


def _negates(word: str, other: str) -> bool:
    return any(other == prefix + word for prefix in NEGATING_PREFIXES)


def _order(fa: Features, fb: Features) -> str:
    seq_a = [f"{t.kind}:{t.key}" for t in fa.tokens]
    seq_b = [f"{t.kind}:{t.key}" for t in fb.tokens]
    if seq_a == seq_b:
        return ""
    # A rotation moves a clause from one end to the other. Two tokens have no rotation
    # but a swap ("from 9:30 to 9:45"), so those must be in the same order.
    a, b = "\x00".join(seq_a), "\x00".join(seq_b)
    if len(seq_a) >= 3 and len(a) == len(b) and f"\x00{b}\x00" in f"\x00{a}\x00{a}\x00":
        return ""
    return f"order differs: {_spell(fa)} vs {_spell(fb)}"


def _spell(f: Features) -> str:
    return " ".join(t.shown for t in f.tokens)
