"""``find(text)``: the spans of a text that are credentials, each with its kind.

The rules are data (``rules.py``); this module compiles them once per process and runs
them. Provider formats come first and win an overlap (``GITHUB_TOKEN=ghp_...`` is a
``github-token``, not a generic ``secret``); spans that overlap are joined, so a secret
found by two rules is redacted whole. Kept, never reported:

* markers already in the text (``[secret:...]``): a redacted text redacts to itself;
* values that stand for a secret (``${DB_PASSWORD}``, ``<your-token>``, ``****``,
  ``os.environ["TOKEN"]``, ``settings.SECRET_KEY``, paths and URLs);
* documentation's examples marked as such: a value that spells EXAMPLE (the AWS docs'
  ``AKIAIOSFODNN7EXAMPLE``), one made of one repeated character (``sk_live_xxxx...``), or
  one with an example word beside it in its line ("the docs' example key").

Cost: a note with no needle of any rule costs one ``lower()`` and a few dozen substring
tests; each rule whose needle is present costs one regex scan (BENCHMARKS.md, "Secrets").
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from trusty_memory.common.credentials import markers, rules, shipped


@dataclass(frozen=True)
class Found:
    """A credential in a text: ``text[start:end]``, of format ``kind``."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class _Compiled:
    kind: str
    needles: frozenset[str]
    regex: re.Pattern[str]
    group: int
    extend: re.Pattern[str] | None
    check: str
    after: str


def _plugin_patterns(ref: str) -> list[re.Pattern[str]]:
    """detect-secrets' patterns for ``module.Class`` or ``module.Class[i]``, compiled from
    the table of what it ships (``shipped.py``: the library itself is not imported)."""
    index = None
    if ref.endswith("]"):
        ref, _, rest = ref.partition("[")
        index = int(rest[:-1])
    denylist = [re.compile(pattern, flags) for pattern, flags in shipped.PATTERNS[ref]]
    return denylist if index is None else [denylist[index]]


def _bounded(regex: re.Pattern[str], right: bool) -> re.Pattern[str]:
    """Not inside a longer alphanumeric run; on the right only when the match is not grown
    (an extended match ends where its token does)."""
    after = "(?![A-Za-z0-9])" if right else ""
    return re.compile(rf"(?<![A-Za-z0-9])(?:{regex.pattern}){after}", regex.flags)


@functools.cache
def _token_rules() -> tuple[_Compiled, ...]:
    out = []
    for rule in rules.TOKENS:
        patterns = (
            [re.compile(rule.pattern)] if rule.pattern else _plugin_patterns(rule.plugin or "")
        )
        for regex in patterns:
            out.append(
                _Compiled(
                    kind=rule.kind,
                    needles=frozenset(rule.needles),
                    regex=_bounded(regex, not rule.extend) if rule.bounded else regex,
                    group=rule.group,
                    extend=re.compile(rule.extend + "*") if rule.extend else None,
                    check=rule.check,
                    after=rule.after,
                )
            )
    return tuple(out)


# -- values ------------------------------------------------------------------------------

_PLACEHOLDER = re.compile("|".join(f"(?:{p})" for p in rules.PLACEHOLDERS))
_EXAMPLE_WORDS = re.compile(rules.EXAMPLE_WORDS)
# A name in code: snake_case, UPPER_CASE or CamelWords, never the mix of cases and digits
# a random value has.
_CODE_NAME = r"(?:[a-z_][a-z_]*[0-9]*|[A-Z_][A-Z0-9_]*|(?:[A-Z][a-z]{2,})+[0-9]*)"
_REFERENCE = re.compile(
    rf"{_CODE_NAME}(?:(?:\.|->|::){_CODE_NAME})+"  # settings.SECRET_KEY, self.token
    r"|.*[(\[].*"  # os.environ["X"], getpass(), config['token']
)
# An unquoted value that is a name in code, not a value: snake_case with an underscore,
# CAPITALS (words and underscores), camelCase, or a type (``password = user_password``,
# ``secret_key=secret_key``, ``token = accessToken``, ``password: SecretStr``). A plain word
# is a value (``password = postgres`` in an .ini file, ``DB_PASSWORD=postgres``).
_VARIABLE = re.compile(
    r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+|[A-Z]+(?:_[A-Z0-9]+)*|[a-z]+(?:[A-Z][a-z]{2,})+"
    r"|(?:[A-Z][a-z]{2,}){2,}"
)
# A file's path (two segments or more, a file name with its extension, a system folder) or a
# URL: where a secret is kept, not the secret. One slash and a random run is base64.
_PATH_OR_URL = re.compile(
    r"(?:~|\.{1,2})?/(?:[\w.\-]+/)+[\w.\-]*|(?:~|\.{1,2})?/[\w\-]+\.[A-Za-z0-9]{1,5}"
    r"|/(?:etc|run|var|tmp|home|usr|opt|srv|secrets?|dev|proc|mnt|Users)(?:/.*)?"
    r"|(?:~|\.{1,2})/.*|[A-Za-z]:\\.*|[a-z][a-z0-9+.\-]*://.*"
)
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")


def _entropy(value: str) -> float:
    """Shannon entropy, bits per character."""
    n = len(value)
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _transitions(value: str) -> int:
    """Changes between letter and digit, and lower to upper case: many in a random string,
    few in a word or an identifier (``user_profile_cache_v2``)."""
    n = 0
    for a, b in itertools.pairwise(value):
        digit_edge = a.isdigit() != b.isdigit() and a.isalnum() and b.isalnum()
        if digit_edge or (a.islower() and b.isupper()):
            n += 1
    return n


def looks_random(value: str, min_len: int = 16) -> bool:
    """A key, not a word: long, mixed, and as varied as random characters are."""
    n = len(value)
    if n < min_len or " " in value:
        return False
    if _HEX.fullmatch(value):
        return n >= 20 and _entropy(value) >= 3.0 and _transitions(value) >= n / 10
    if not set(value) <= _BASE64_CHARS and _entropy(value) < 4.0:
        return False
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    if not (has_letter and has_digit):
        return False
    threshold = min(4.0, 0.75 * math.log2(n))
    return _entropy(value) >= threshold and _transitions(value) >= max(3, n / 10)


def _complex(value: str) -> bool:
    """Has a digit, a symbol, or a capital past the first letter: not a plain word."""
    return (
        any(c.isdigit() for c in value)
        or any(not c.isalnum() for c in value)
        or any(c.isupper() for c in value[1:])
    )


def is_placeholder(value: str) -> bool:
    """A value that stands for a secret: a template, a mask, a reference, a path."""
    return bool(
        _PLACEHOLDER.fullmatch(value)
        or _REFERENCE.fullmatch(value)
        or _PATH_OR_URL.fullmatch(value)
    )


def _one_character(value: str) -> bool:
    """``xxxx...``, ``0000...``: most of it one character (a mask in documentation)."""
    if len(value) < 12:
        return False
    top = max(value.count(ch) for ch in set(value))
    return top / len(value) >= 0.4


# Value tests of the assignment rules, by ``AssignmentRule.value`` and how sure the
# context is that a value follows (``lenient``: ``NAME=value``, quoted, a flag).
def _password_value(value: str, lenient: bool) -> bool:
    if len(value) < 4 or len(value) > 256 or " " in value:
        return False
    if lenient:
        return True
    return len(value) >= 6 and _complex(value)


_WORDS_JOINED = re.compile(r"[a-z]+(?:[-_.][a-z]+)+")  # invalidate-profile-request, my_app


def _secret_value(value: str, lenient: bool) -> bool:
    if len(value) < 8 or value.isdigit() or " " in value or _WORDS_JOINED.fullmatch(value):
        return False
    if lenient:
        return _complex(value) or len(value) >= 16
    return looks_random(value, 12)


# A content-addressed name: words, then a hash (``deps-87afd9d5...``, ``v2_3f9a1c...``): what
# a cache key or a build id looks like, not a secret.
_NAMED_HASH = re.compile(r"(?:[A-Za-z]+[-_.])+[0-9a-f]{7,}")


def _random_value(value: str, lenient: bool) -> bool:
    if _UUID.fullmatch(value) or _NAMED_HASH.fullmatch(value):
        return False
    return looks_random(value)


VALUE_TESTS: dict[str, Callable[[str, bool], bool]] = {
    "password": _password_value,
    "secret": _secret_value,
    "random": _random_value,
}


# -- assignments ---------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z0-9_.\-]")
# Where a name may end and a value begin: ``=`` or ``:``, and "is"/"was" in prose.
# Scanning for these first and reading the name before each keeps the assignment rules
# cheap: a note has few of them, and many words.
_OPERATORS = re.compile(r"[=:]|[ \t](?:is|was|are)[ \t]")
_FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*[ \t]+(?=[^\s-])")
_QUOTED = re.compile(r"""(["'`])([^"'`\n]{1,512}?)\1""")
_UNQUOTED = re.compile(r"""[^\s"'`,;&]{1,512}""")
_TRAILING = ".,:;)]}>"
_OPENING = {")": "(", "]": "[", "}": "{", ">": "<"}
_CLOSING = "".join(_OPENING)
_CLOSERS = "\"'`]"


@dataclass(frozen=True)
class _Assignment:
    kind: str
    needles: frozenset[str]
    word_at_end: re.Pattern[str]  # on the lowercased text, at the name's end
    word_anywhere: re.Pattern[str]
    not_after: tuple[str, ...]
    test: Callable[[str, bool], bool]


@functools.cache
def _assignment_rules() -> tuple[_Assignment, ...]:
    return tuple(
        _Assignment(
            kind=rule.kind,
            needles=frozenset(rule.needles),
            word_at_end=re.compile(rf"(?:{'|'.join(rule.words)})$"),
            word_anywhere=re.compile(rf"(?<![a-z0-9])(?:{'|'.join(rule.words)})(?![a-z0-9])"),
            not_after=tuple(_squash(p) for p in rule.not_after),
            test=VALUE_TESTS[rule.value],
        )
        for rule in rules.ASSIGNMENTS
    )


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _name_start(text: str, at: int) -> int:
    while at > 0 and _IDENT.match(text[at - 1]):
        at -= 1
    return at


def _at_component(text: str, start: int, word_start: int, word: str) -> bool:
    """The word begins a component of the name: first, after ``_ . -``, or a capital after
    a small letter (``dbPassword``). Long words need no boundary (``PGPASSWORD``)."""
    if word_start == start or len(word) >= 6:
        return True
    before = text[word_start - 1]
    return before in "_.-" or (before.islower() and text[word_start].isupper())


def _operator(text: str, m: re.Match[str]) -> tuple[int, int, str] | None:
    """``(name_end, value_from, how)`` around the operator ``m`` found, or None when it is
    no assignment (the second ``=`` of ``==``, a ``::``). ``how``: ``tight`` (``NAME=v``),
    ``assign`` (``NAME = v``, ``:=``, ``=>``), ``colon`` (``NAME: v``), ``compare``
    (``==``, ``!=``) or ``prose`` ("is")."""
    at, stop = m.start(), m.end()
    if m.group(0)[0] in " \t":  # " is "
        return at, stop, "prose"
    before = text[at - 1] if at else ""
    after = text[stop] if stop < len(text) else ""
    if before in "=!:<>" or (m.group(0) == ":" and after == ":"):
        return None  # inside ``==``, ``!=``, ``:=``, ``::`` (the first character is the op)
    how = "colon" if m.group(0) == ":" else "assign"
    if after in "=>":
        stop += 1
        if text[at:stop] == "==":
            how = "compare"
        elif text[at:stop] == ":=":
            how = "assign"
    elif m.group(0) == "=" and before == "!":
        how = "compare"
    name_end = at
    while name_end > 0 and text[name_end - 1] in " \t":
        name_end -= 1
    tight = name_end == at and after not in " \t\n" and how == "assign"
    closers = 0
    while name_end > 0 and text[name_end - 1] in _CLOSERS and closers < 2:
        name_end -= 1
        closers += 1
    while stop < len(text) and text[stop] in " \t":
        stop += 1
    return name_end, stop, "tight" if tight else how


def _value_at(text: str, pos: int, how: str) -> tuple[int, int, bool] | None:
    """``(start, end, quoted)`` of the value that starts at ``pos``."""
    quoted = _QUOTED.match(text, pos)
    if quoted is not None:
        return quoted.start(2), quoted.end(2), True
    if how == "compare":
        return None
    bare = _UNQUOTED.match(text, pos)
    if bare is None:
        return None
    start, end = bare.span()
    line_end = end >= len(text) or text[end] == "\n"
    while (
        end > start and text[end - 1] in _CLOSING and _OPENING[text[end - 1]] not in text[start:end]
    ):
        end -= 1  # ``(password=abc123)``: the bracket is the note's, not the value's
    if how == "prose" or (how == "colon" and not line_end):
        while end > start and text[end - 1] in _TRAILING:
            end -= 1  # "the password is Zq8v!x2a." ends a sentence; ``--password=x.`` does not
    return (start, end, False) if end > start else None


def _lenient(text: str, end: int, quoted: bool, how: str) -> bool:
    """How sure the context is that a value follows."""
    if how == "compare":
        return False  # ``if token == "#bygroup"``: code that tests a value, seldom a secret
    if quoted or how in ("tight", "flag"):
        return True
    if how in ("colon", "assign"):
        line_end = text.find("\n", end)
        rest = text[end : len(text) if line_end < 0 else line_end]
        return not rest.strip()  # ``password: value`` alone on its line: a config file
    return False  # prose: "the token is ...", or a mid-sentence colon


def _candidates(text: str) -> list[tuple[int, int, str]]:
    """``(name_end, value_from, how)`` of every place a value may be assigned."""
    out = []
    for m in _OPERATORS.finditer(text):
        got = _operator(text, m)
        if got is not None:
            out.append(got)
    if "--" in text:
        for m in _FLAG.finditer(text):
            out.append((m.end() - len(m.group(0)) + len(m.group(0).rstrip()), m.end(), "flag"))
    return out


PROSE_WINDOW = 48  # characters before "is" in which the name may stand ("password for X is")
PROSE_WORD_MIN = 5  # ... when it is a word this long (not "pass", "key")


def _in_path(text: str, name_start: int) -> bool:
    """The name follows ``/``, or ``:`` in a run of several (``arn:aws:...:secret:x``; not
    PowerShell's ``$env:API_KEY``)."""
    before = text[name_start - 1]
    if before == "/":
        return True
    if before != ":":
        return False
    run_start = max(text.rfind(" ", 0, name_start), text.rfind("\n", 0, name_start)) + 1
    return text.count(":", run_start, name_start) >= 2


def _name_at(
    text: str, low: str, rule: _Assignment, name_end: int, how: str
) -> tuple[int, re.Match[str]] | None:
    """``(name_start, word)``: the key-like name the value at ``name_end`` is assigned to.
    An operator takes the identifier right before it; prose ("the password for the staging
    Grafana is ...") the last long key word within ``PROSE_WINDOW`` of its line."""
    if how != "prose":
        name_start = _name_start(text, name_end)
        if name_start == name_end or (how == "flag" and not text.startswith("--", name_start)):
            return None
        if name_start and _in_path(text, name_start):
            return None  # a segment of a path or an ARN (``...:secret:db-AbCdEf``), no key
        word = rule.word_at_end.search(low, name_start, name_end)
        return None if word is None else (name_start, word)
    line_start = text.rfind("\n", 0, name_end) + 1
    last = None
    for word in rule.word_anywhere.finditer(
        low, max(line_start, name_end - PROSE_WINDOW), name_end
    ):
        if len(word.group(0)) >= PROSE_WORD_MIN:
            last = word
    return None if last is None else (_name_start(text, last.start()), last)


def _assignments(text: str, low: str, present: set[str]) -> list[Found]:
    active = [rule for rule in _assignment_rules() if not rule.needles.isdisjoint(present)]
    if not active:
        return []
    found = []
    for name_end, value_from, how in _candidates(text):
        for rule in active:
            named = _name_at(text, low, rule, name_end, how)
            if named is None:
                continue
            name_start, word = named
            if not _at_component(text, name_start, word.start(), word.group(0)):
                continue
            prefix = _squash(low[name_start : word.start()])
            if prefix and any(prefix.endswith(p) for p in rule.not_after):
                continue
            got = _value_at(text, value_from, how)
            if got is not None:
                start, end, quoted = got
                value = text[start:end]
                if not quoted and how != "prose" and _VARIABLE.fullmatch(value):
                    break  # ``secret_key = SECRET_KEY``: code, a variable's name
                lenient = _lenient(text, end, quoted, how)
                if not is_placeholder(value) and rule.test(value, lenient):
                    found.append(Found(rule.kind, start, end))
            break  # one rule per name: the first whose word it ends with
    return found


# -- token formats ---------------------------------------------------------------------------

_KEY_END = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
# A key's text once the END line is gone: lines of base64 (real or ``\n``-escaped newlines
# between them, and the ``Proc-Type:`` headers of an encrypted one), 40 characters at least.
_BREAK = r"(?:[ \t]*(?:\r?\n|(?:\\r)?\\n)[ \t]*)"
_KEY_BODY = re.compile(
    rf"(?:{_BREAK}?[A-Za-z-]+:[^\n\\]*)*{_BREAK}+[A-Za-z0-9+/=]{{40,}}(?:{_BREAK}+[A-Za-z0-9+/=]{{4,}})*"
)
_PUTTY_END = re.compile(r"Private-MAC:\s*[0-9a-fA-F]+")


def _key_block(text: str, start: int, end: int) -> tuple[int, int] | None:
    """From the BEGIN line's dashes to its END line, or to where the key text stops when
    the END line is missing (a log cut it); None for a BEGIN line with no key after it
    (a note that names the format)."""
    while start > 0 and text[start - 1] == "-":
        start -= 1
    stop = _KEY_END.search(text, end)
    if text.startswith("PuTTY", start):
        stop = _PUTTY_END.search(text, end)
    if stop is not None:
        return start, stop.end()
    dashes = end
    while dashes < len(text) and text[dashes] == "-":
        dashes += 1
    body = _KEY_BODY.match(text, dashes)
    return None if body is None else (start, body.end())


def _jwt(value: str) -> bool:
    """A JSON Web Token's form (RFC 7519, section 7.2): parts of base64url, the first two
    (the header and the claims) JSON; what detect-secrets' JWT plugin checks of a match."""
    token = value.rstrip(".")
    parts = token.split(".")
    if len(parts) < 2:
        return False
    for i, part in enumerate(parts):
        if len(part) % 4 == 1:  # no base64 text has that length
            return False
        try:
            raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
            if i < 2:
                json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return False
    return True


def _tokens(text: str, present: set[str]) -> list[Found]:
    found = []
    for rule in _token_rules():
        if rule.needles.isdisjoint(present):
            continue
        for m in rule.regex.finditer(text):
            start, end = m.span(rule.group)
            if start < 0 or end <= start:
                continue
            if rule.extend is not None and (more := rule.extend.match(text, end)) is not None:
                end = more.end()
            if rule.after:
                start = text.index(rule.after, start, end) + len(rule.after)
            if rule.check == "key_block":
                block = _key_block(text, start, end)
                if block is None:
                    continue
                start, end = block
            elif rule.check == "jwt":
                while end > start and text[end - 1] in ".=":
                    end -= 1
                if not _jwt(text[start:end]):
                    continue
            elif rule.check == "not_placeholder":
                if is_placeholder(text[start:end]):
                    continue
            elif rule.check == "random":
                if not looks_random(text[start:end]):
                    continue
            elif rule.check == "mixed":
                value = text[start:end]
                if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
                    continue
            found.append(Found(rule.kind, start, end))
    return found


# -- examples -------------------------------------------------------------------------------


def _marked_example(text: str, f: Found) -> bool:
    """Documentation's example, marked as such (see the module doc)."""
    value = text[f.start : f.end]
    if "example" in value.lower() or _one_character(value):
        return True
    line_start = text.rfind("\n", 0, f.start) + 1
    line_end = text.find("\n", f.end)
    line_end = len(text) if line_end < 0 else line_end
    before = text[max(line_start, f.start - rules.EXAMPLE_WINDOW) : f.start]
    after = text[f.end : min(line_end, f.end + rules.EXAMPLE_WINDOW)]
    return bool(_EXAMPLE_WORDS.search(before) or _EXAMPLE_WORDS.search(after))


def find(text: str) -> list[Found]:
    """Every credential in ``text``, in order, none overlapping another or a marker."""
    low = text.lower()
    present = {n for n in _needles() if n in low}
    if not present:
        return []
    candidates = _tokens(text, present) + _assignments(text, low, present)
    if not candidates:
        return []
    masked = markers.spans(text)
    kept: list[list] = []  # [start, end, kind], provider formats first (they came first)
    for f in candidates:
        if any(f.start < b and a < f.end for a, b in masked) or _marked_example(text, f):
            continue
        for span in kept:
            if f.start < span[1] and span[0] < f.end:  # overlap: one secret, redacted whole
                span[0], span[1] = min(span[0], f.start), max(span[1], f.end)
                break
        else:
            kept.append([f.start, f.end, f.kind])
    kept.sort()
    merged: list[list] = []
    for span in kept:  # joined spans may now overlap each other
        if merged and span[0] < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], span[1])
        else:
            merged.append(span)
    return [Found(kind, start, end) for start, end, kind in merged]


@functools.cache
def _needles() -> tuple[str, ...]:
    """Every rule's needles, once each: the prefilter tests each one against the text."""
    every = [n for rule in rules.TOKENS for n in rule.needles]
    every += [n for rule in rules.ASSIGNMENTS for n in rule.needles]
    return tuple(dict.fromkeys(every))


def warm() -> None:
    """Compile every rule now (the worker template does, before it forks)."""
    _token_rules()
    _assignment_rules()
    _needles()
