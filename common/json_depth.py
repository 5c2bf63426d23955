"""How deeply JSON text nests, read from its bytes before a decoder sees them.

Decoders recurse: CPython's ``json`` raises ``RecursionError`` near 1,000 levels on 3.11
but parses far deeper on 3.12+ (its limit follows the C stack), and msgspec has its own.
So a bound that holds on every Python is checked here, on the bytes, and the answer
("nested more than N levels deep") never depends on which Python a user runs.

Standard library only: the MCP edge imports this before anything heavy.
"""

from __future__ import annotations

import re

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def nesting_over(raw: bytes | bytearray, limit: int) -> bool:
    """Whether ``raw`` nests arrays and objects more than ``limit`` levels deep.

    Brackets inside strings do not count. Text that is not JSON is judged as far as its
    brackets go and otherwise left for the decoder to word. The common case costs two
    ``count`` calls: a line with fewer brackets than the limit cannot nest past it."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    depth = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        if depth > limit:
            return True
    return False
