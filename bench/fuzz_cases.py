"""Hostile input for ``bench/reliability.py fuzz``: stdin lines for ``serve`` and multipart
frames for the broker's front socket, with what each one must be answered by.

A case is ``(kind, [payload, ...])``: the lines (or messages) of one case are sent back to
back before any answer is awaited, so duplicate ids really are in flight together. Every run starts
with the fixed cases (each tool's every argument given each wrong type, nesting at each
depth in each position, odd Unicode, batches, duplicate ids, notifications with ids) and
fills the rest with seeded random ones (random bytes, truncated and mutated valid
requests), so a quick run covers every fixed case and a seed reproduces a full run.
Among the fixed cases are the inputs that must each get a clear error naming the field
(``clear_error_tool_cases``, ``clear_error_frame_cases``: past a ``[limits]`` bound, only
invisible characters, a lone surrogate, a time off the calendar in UTC); the run asks only
that they be answered, tests/reliability/test_fuzz.py reads their messages.

What an answer must be is read off the payload with the rules the contract states, not
with the product's code: a stdin line that is not UTF-8 JSON, or not an object, or whose
id is not a string or integer, is answered once with ``id: null``; an object with a valid
id is answered once with that id; one without an id (a notification) is not answered.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import msgspec

from trusty_memory.client.mcp.lines import MAX_LINE_BYTES
from trusty_memory.client.mcp.tool_sets import tool_definitions
from trusty_memory.common.methods import PARAMS_FOR_METHOD

Case = tuple[str, list[bytes]]  # stdin lines sent together
FrameCase = tuple[str, list[list[bytes]]]  # broker messages (each a list of frames)

PALACE = "fz"  # the palace fuzzed calls name; it exists, so valid calls reach a worker
INIT_PARAMS = {
    "protocolVersion": "2024-11-05",
    "capabilities": {},
    "clientInfo": {"name": "fuzz", "version": "1"},
}
# Nesting depths: shallow, around what JSON parsers allow (~1,000 in Python), and far past
# it. 950-1010 is left out: whether Python parses that depth depends on the stack depth
# of the caller, so this side and the server could disagree on what the line is.
DEPTHS = (10, 100, 500, 900, 2_000, 100_000)
ODD_STRINGS = (
    "",
    " ",
    "\ud800",  # a lone surrogate: valid JSON, not encodable UTF-8
    "a\udfffb",
    "\u0000nul",
    "\ufeffbom",
    "\u202eright-to-left",
    "e\u0301\u0301\u0301",
    "\U0001f469\u200d\U0001f4bb",
    "\uffff\ufffe",
    "\u2028line\u2029separators",
    "\U0010ffff",
    "\x1b[31mansi",
    # Stored text that would drive a terminal if shown raw: the clipboard (OSC 52), the
    # screen, a link, the window title, a carriage return over what came before.
    "\x1b]52;c;cm0gLXJmIH4=\x07clip",
    "\x1b[2J\x1b[Hcleared",
    "\x1b]8;;https://example.invalid\x1b\\link\x1b]8;;\x1b\\",
    "\x1b]0;owned\x07title",
    "ok\rforged",
    "\x9b31mc1-csi",
    "日本語のテキスト",
)
# Byte sequences that are not UTF-8: overlong, an encoded surrogate, cut multi-byte, 0xff.
BAD_UTF8 = (b"\xc0\xaf", b"\xed\xa0\x80", b"\xe6\x97", b"\xff\xfe", b"\xf8\x88\x80\x80\x80")
VALID_ARGS: dict[str, dict[str, Any]] = {
    "memory_remember": {"palace": PALACE, "text": "a fuzzed note"},
    "memory_recall": {"palace": PALACE, "query": "fuzzed"},
    "memory_recall_deep": {"palace": PALACE, "query": "fuzzed"},
    "palace_create": {"name": PALACE},  # exists already: never creates palaces
    "palace_list": {},
    "kg_assert": {"palace": PALACE, "subject": "s", "predicate": "p", "object": "o"},
    "kg_query": {"palace": PALACE, "subject": "s"},
    "memory_list": {"palace": PALACE},
    "memory_forget": {"palace": PALACE, "drawer_id": "00000000-0000-0000-0000-000000000000"},
    "palace_info": {"palace": PALACE},
}
WRONG_VALUES: dict[str, list[Any]] = {
    "string": [1, -1, 1.5, True, False, [], ["x"], {}, {"a": 1}, 10**30],
    "integer": ["10", 1.5, True, [], {}, -1, 0, 2**31, 10**30, 1e308, "NaN"],
    "number": ["1", True, [], {}, -0.5, 2.0, 1e308, 10**30],
    "array": ["x", 1, {}, [1], [None], [["x"]], [{"a": 1}], True],
}


# Inputs that must each get a clear error naming the field (never an internal error):
# past a ``[limits]`` bound, only invisible characters, a lone surrogate, a time that
# leaves the calendar once moved to UTC. ``(kind, tool or method, arguments, [what the
# error message must contain])``; the fuzz run sends them like every fixed case, and
# tests/reliability/test_fuzz.py checks each one's message.
EDGE_TIMES = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")
NIL_ID = "00000000-0000-0000-0000-000000000000"
MB = "x" * 2**20


def _too_big(field: str, size: int, limit: int, setting: str) -> str:
    return f"{field}: {size} bytes, at most {limit} ([limits] {setting})"


def _calendar(field: str, value: str) -> str:
    return f"{field}: {value!r} is outside the calendar in UTC (years 1 to 9999)"


def _surrogate_cases() -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """A lone surrogate in each string argument of each contract tool (JSON's ``\\ud800``
    is valid JSON; UTF-8 cannot carry it)."""
    cases = []
    for tool in tool_definitions():
        name = tool["name"]
        for prop, schema in tool["inputSchema"]["properties"].items():
            if schema.get("type") == "string":
                value, where = (
                    "ok\ud800",
                    f"'{prop}' contains a lone surrogate (U+D800) at character 2",
                )
            elif schema.get("type") == "array":
                value, where = (
                    ["x", "\udfff"],
                    f"'{prop}[1]' contains a lone surrogate (U+DFFF) at character 0",
                )
            else:
                continue
            args = {**VALID_ARGS[name], prop: value}
            cases.append((f"surrogate:{name}.{prop}", name, args, [where, "send valid UTF-8"]))
    return cases


def clear_error_tool_cases() -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """Tool calls (the contract's tools, on ``serve``'s stdin) that need a clear error."""
    tags = [f"{i:03d}" + "t" * 97 for i in range(10_000)]  # the audit's 10,000 tags of 100
    kg = VALID_ARGS["kg_assert"]
    cases = [
        ("bounds:memory_remember.tags", "memory_remember",
         {**VALID_ARGS["memory_remember"], "tags": tags},
         ["memory_remember: tags: 10000 tags, at most 64 ([limits] max_tags)"]),
        ("bounds:memory_remember.tag-bytes", "memory_remember",
         {**VALID_ARGS["memory_remember"], "tags": ["ok", "t" * 129]},
         [_too_big("tags[1]", 129, 128, "max_tag_bytes")]),
        ("bounds:memory_remember.room", "memory_remember",
         {**VALID_ARGS["memory_remember"], "room": "r" * 100_000},
         [_too_big("room", 100_000, 256, "max_room_bytes")]),
        ("bounds:memory_recall.query", "memory_recall",
         {**VALID_ARGS["memory_recall"], "query": "q" * 4097},
         [_too_big("query", 4097, 4096, "max_query_bytes")]),
        ("bounds:memory_recall_deep.query", "memory_recall_deep",
         {**VALID_ARGS["memory_recall_deep"], "query": "é" * 2049},
         [_too_big("query", 4098, 4096, "max_query_bytes")]),
        ("bounds:memory_list.room", "memory_list", {"palace": PALACE, "room": "r" * 257},
         [_too_big("room", 257, 256, "max_room_bytes")]),
        ("bounds:memory_list.tag", "memory_list", {"palace": PALACE, "tag": "t" * 129},
         [_too_big("tag", 129, 128, "max_tag_bytes")]),
        ("bounds:memory_forget.drawer_id", "memory_forget", {"palace": PALACE, "drawer_id": MB},
         [_too_big("drawer_id", 2**20, 256, "max_name_bytes")]),
        ("bounds:kg_query.subject", "kg_query", {"palace": PALACE, "subject": MB},
         [_too_big("subject", 2**20, 4096, "max_kg_field_bytes")]),
        ("bounds:palace_create.description", "palace_create",
         {"name": PALACE, "description": "d" * 4097},
         [_too_big("description", 4097, 4096, "max_description_bytes")]),
        ("invisible:memory_remember.text", "memory_remember",
         {"palace": PALACE, "text": "\u200b\u200c\u200d\ufeff\u2060"},
         ["memory_remember: 'text' holds only invisible characters (U+200B, U+200C"]),
        ("invisible:memory_remember.text", "memory_remember",
         {"palace": PALACE, "text": " \u0301\u0007 "},
         ["'text' holds only invisible characters (U+0301, U+0007)"]),
        ("invisible:memory_recall.query", "memory_recall", {"palace": PALACE, "query": "\u200b"},
         ["memory_recall: 'query' holds only invisible characters (U+200B)"]),
    ]  # fmt: skip
    for field in ("subject", "predicate", "object", "provenance"):
        cases.append((f"bounds:kg_assert.{field}", "kg_assert", {**kg, field: MB},
                      [_too_big(field, 2**20, 4096, "max_kg_field_bytes")]))  # fmt: skip
    return cases + _secret_cases() + _surrogate_cases()


def _secret_cases() -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """Credentials where no marker can stand: a palace name. Made at random in the
    provider's format (fixed seed), as an agent would be handed one."""
    rng = random.Random(36)
    token = "ghp_" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789")
                             for _ in range(36))  # fmt: skip
    return [
        ("secret:palace_create.name", "palace_create", {"name": token},
         ["palace_create: 'name' holds a secret (github-token at characters 1-40)"]),
    ]  # fmt: skip


def clear_error_frame_cases() -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """Requests (on the broker's front socket, to palace ``PALACE``) that need a clear
    error: the extended methods' times and fields, import and the dreamer's inputs. Each
    is refused before it changes anything."""
    cases = []
    for edge in EDGE_TIMES:
        for method, field, params in (
            ("memory_search", "since", {}), ("memory_search", "until", {}),
            ("kg_query", "as_of", {"subject": "s"}),
            ("memory_remember", "created_at", {"text": "an edge-of-time note"}),
            ("dream_decay", "now", {"dry_run": True}),
        ):  # fmt: skip
            cases.append((f"edge-time:{method}.{field}", method, {**params, field: edge},
                          [f"{method}: " + _calendar(field, edge)]))  # fmt: skip
        triple = {"subject": "s", "predicate": "p", "object": "o", "valid_from": edge}
        expected = [_calendar("triples[0].valid_from", edge)]
        cases.append(("edge-time:palace_import.valid_from", "palace_import",
                      {"triples": [triple]}, expected))  # fmt: skip
    many = [f"tag{i}" for i in range(65)]
    cases += [
        ("bounds:memory_update.tags", "memory_update", {"drawer_id": NIL_ID, "tags": many},
         ["memory_update: tags: 65 tags, at most 64 ([limits] max_tags)"]),
        ("bounds:memory_update.room", "memory_update", {"drawer_id": NIL_ID, "room": MB},
         [_too_big("room", 2**20, 256, "max_room_bytes")]),
        ("bounds:memory_search.query", "memory_search", {"query": MB},
         [_too_big("query", 2**20, 4096, "max_query_bytes")]),
        ("bounds:memory_search.cursor", "memory_search", {"cursor": MB},
         [_too_big("cursor", 2**20, 256, "max_name_bytes")]),
        ("bounds:kg_history.predicate", "kg_history", {"subject": "s", "predicate": MB},
         [_too_big("predicate", 2**20, 4096, "max_kg_field_bytes")]),
        ("bounds:kg_invalidate.object", "kg_invalidate",
         {"subject": "s", "predicate": "p", "object": MB},
         [_too_big("object", 2**20, 4096, "max_kg_field_bytes")]),
        ("bounds:drawer_get.drawer_id", "drawer_get", {"drawer_id": MB},
         [_too_big("drawer_id", 2**20, 256, "max_name_bytes")]),
        ("bounds:archive_list.reason", "archive_list", {"reason": MB},
         [_too_big("reason", 2**20, 256, "max_name_bytes")]),
        ("bounds:palace_export.kind", "palace_export", {"kind": MB},
         [_too_big("kind", 2**20, 256, "max_name_bytes")]),
        ("bounds:memory_remember.metadata", "memory_remember",
         {"text": "a note with big metadata", "metadata": {"k": MB}},
         ["memory_remember: metadata: 1048584 bytes of JSON, at most 16384"]),
        ("bounds:palace_import.tags", "palace_import",
         {"drawers": [{"drawer_id": NIL_ID, "content": "c", "tags": many}]},
         ["palace_import: drawers[0].tags: 65 tags, at most 64 ([limits] max_tags)"]),
        ("bounds:palace_import.subject", "palace_import",
         {"triples": [{"subject": MB, "predicate": "p", "object": "o",
                       "valid_from": "2024-01-01T00:00:00Z"}]},
         [_too_big("triples[0].subject", 2**20, 4096, "max_kg_field_bytes")]),
        ("bounds:embed.texts", "embed", {"texts": ["t"] * 100_001},
         ["embed: texts: 100001 texts, at most 100000 ([limits] max_batch_items)"]),
        ("bounds:dream_merge.groups", "dream_merge", {"groups": [[NIL_ID, MB]], "dry_run": True},
         [_too_big("groups[0][1]", 2**20, 256, "max_name_bytes")]),
        ("invisible:memory_update.text", "memory_update", {"drawer_id": NIL_ID, "text": "\u2060"},
         ["memory_update: 'text' holds only invisible characters (U+2060)"]),
        ("invisible:memory_search.query", "memory_search", {"query": "\u200d\u200d"},
         ["memory_search: 'query' holds only invisible characters (U+200D)"]),
    ]  # fmt: skip
    return cases


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("ascii")


def _nested(depth: int, kind: str = "list") -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


class Ids:
    """Fresh request ids, alternating integers and strings (both are valid JSON-RPC ids)."""

    def __init__(self, prefix: str = "f") -> None:
        self.n = 0
        self.prefix = prefix

    def __call__(self) -> int | str:
        self.n += 1
        return self.n if self.n % 2 else f"{self.prefix}-{self.n}"


# --------------------------------------------------------------------------------------
# stdin lines for `serve`


def request(rid: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def tool_call(rid: Any, name: str, arguments: Any) -> dict[str, Any]:
    return request(rid, "tools/call", {"name": name, "arguments": arguments})


def valid_requests(ids: Ids) -> list[dict[str, Any]]:
    """One well-formed request of each kind a client sends."""
    out = [request(ids(), "ping"), request(ids(), "tools/list", {})]
    out.append(request(ids(), "initialize", INIT_PARAMS))
    out += [tool_call(ids(), name, dict(args)) for name, args in VALID_ARGS.items()]
    return out


def _nesting_lines(rid: str, n: str) -> dict[str, str]:
    """A nested value ``n`` in each place of a line: params, _meta, a tool argument, the id,
    the method, the whole line, a notification's params and a response's result."""
    call = '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"%s",%s}}'
    return {
        "params": f'{{"jsonrpc":"2.0","id":{rid},"method":"ping","params":{{"x":{n}}}}}',
        "meta": call
        % (rid, "memory_recall", f'"_meta":{n},"arguments":{{"palace":"{PALACE}","query":"q"}}'),
        "argument": call
        % (rid, "memory_remember", f'"arguments":{{"palace":"{PALACE}","text":{n}}}'),
        "id": f'{{"jsonrpc":"2.0","id":{n},"method":"ping"}}',
        "method": f'{{"jsonrpc":"2.0","id":{rid},"method":{n}}}',
        "top": n,
        "notification": f'{{"jsonrpc":"2.0","method":"notifications/x","params":[{n}]}}',
        "response": f'{{"jsonrpc":"2.0","id":{rid},"result":{n}}}',
    }


def fixed_stdin_cases(ids: Ids) -> list[Case]:
    """The cases every run sends, quick or full."""
    cases: list[Case] = []

    def add(kind: str, *messages: Any) -> None:
        cases.append((kind, [m if isinstance(m, bytes) else _dumps(m) for m in messages]))

    for tool in tool_definitions():
        name = tool["name"]
        for prop, schema in tool["inputSchema"]["properties"].items():
            for value in WRONG_VALUES[schema.get("type", "string")]:
                add(
                    f"wrong-type:{name}.{prop}",
                    tool_call(ids(), name, {**VALID_ARGS[name], prop: value}),
                )
    for depth in DEPTHS:
        for shape in ("list", "dict"):
            lines = _nesting_lines(json.dumps(ids()), _nested(depth, shape))
            for where, line in lines.items():
                add(f"nesting:{where}:{shape}:{depth}", line.encode())
    for kind, tool, arguments, _ in clear_error_tool_cases():
        add(kind, tool_call(ids(), tool, arguments))
    for s in ODD_STRINGS:
        add("unicode:text", tool_call(ids(), "memory_remember", {"palace": PALACE, "text": s}))
        add("unicode:query", tool_call(ids(), "memory_recall", {"palace": PALACE, "query": s}))
        add("unicode:palace", tool_call(ids(), "palace_info", {"palace": s}))
        add("unicode:method", request(ids(), s))
        add("unicode:id", request(s, "ping"))
    for bad in BAD_UTF8:
        add("bad-utf8:in-string", b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"' + bad + b'"}')
        add("bad-utf8:bare", bad)
    big = "x" * (4 * 2**20)
    add("huge:text", tool_call(ids(), "memory_remember", {"palace": PALACE, "text": big}))
    add("huge:query", tool_call(ids(), "memory_recall", {"palace": PALACE, "query": big}))
    add("huge:method", request(ids(), big))
    add("huge:id", request(big, "ping"))
    add("huge:over-line-limit", b'{"id":1,"pad":"' + b"y" * MAX_LINE_BYTES + b'"}')
    batch = [request(ids(), "ping"), tool_call(ids(), "palace_list", {})]
    add("batch:empty", b"[]")
    add("batch:requests", batch)
    add("batch:nested", [batch, [batch]])
    recall = {"name": "memory_recall", "arguments": VALID_ARGS["memory_recall"]}
    for method, params in (("ping", None), ("tools/list", {}), ("tools/call", recall)):
        same = request(ids(), method, params)
        add(f"duplicate-id:{method}", same, same, same)
    for method in ("notifications/initialized", "notifications/cancelled", "notifications/x"):
        add("notification-with-id", request(ids(), method, {"requestId": 1}))
        add("notification", {"jsonrpc": "2.0", "method": method, "params": 5})
    for rid in (None, True, 1.5, [1], {"a": 1}, 10**40, -1, ""):
        add("odd-id", request(rid, "ping"))
    for version in (None, "1.0", 2.0, 2, "2.0 "):
        add("jsonrpc-version", {"jsonrpc": version, "id": ids(), "method": "ping"})
    for params in ([], "x", 5, None, {"protocolVersion": 5}, {"protocolVersion": "1999-01-01"}):
        add("initialize-params", request(ids(), "initialize", params))
    for value in ("5", "null", "true", '"str"', "1e999", "NaN", "-Infinity", "{", "}", '{"a"}'):
        add("not-an-object", value.encode())
    return cases


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to five random byte edits: flip, delete, insert, duplicate a slice, truncate."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        if not buf:
            break
        i = rng.randrange(len(buf))
        op = rng.randrange(5)
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            del buf[i]
        elif op == 2:
            buf.insert(i, rng.choice(b'{}[]":,\\0123456789eE.-+ntfu\x00\x80\xff'))
        elif op == 3:
            j = rng.randrange(i, min(len(buf), i + 16) + 1)
            buf[i:i] = buf[i:j]
        else:
            del buf[i:]
    return bytes(buf)


def random_stdin_case(rng: random.Random, ids: Ids) -> Case:
    kind = rng.choices(
        ["random-bytes", "truncated", "mutated", "valid", "random-json"], [2, 2, 4, 1, 1]
    )[0]
    if kind == "random-bytes":
        return kind, [rng.randbytes(rng.randint(1, 400))]
    valid = _dumps(rng.choice(valid_requests(ids)))
    if kind == "truncated":
        return kind, [valid[: rng.randrange(1, len(valid))]]
    if kind == "mutated":
        return kind, [mutate(valid, rng)]
    if kind == "valid":
        return kind, [valid]
    return kind, [_dumps(_random_json(rng, 4))]


def _random_json(rng: random.Random, depth: int) -> Any:
    choice = rng.randrange(8 if depth > 0 else 5)
    if choice == 0:
        return rng.choice([None, True, False])
    if choice == 1:
        return rng.choice([0, -1, 2**53, 10**20, rng.randint(-1000, 1000)])
    if choice == 2:
        return rng.random() * 10 ** rng.randint(-5, 300)
    if choice in (3, 4):
        return rng.choice([*ODD_STRINGS, "jsonrpc", "2.0", "id", "method", "tools/call"])
    if choice in (5, 6):
        keys = ["jsonrpc", "id", "method", "params", "name", "arguments", "x"]
        return {rng.choice(keys): _random_json(rng, depth - 1) for _ in range(rng.randint(0, 5))}
    return [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 4))]


def stdin_cases(n_lines: int, seed: int = 0) -> Iterator[Case]:
    """The fixed cases, then random ones until ``n_lines`` lines have been produced."""
    rng = random.Random(seed)
    ids = Ids()
    sent = 0
    for case in fixed_stdin_cases(ids):
        yield case
        sent += len(case[1])
    while sent < n_lines:
        kind, lines = random_stdin_case(rng, ids)
        lines = [line.replace(b"\n", b" ") for line in lines]  # one line stays one line
        yield kind, lines
        sent += len(lines)


def reject_constant(name: str) -> Any:
    raise ValueError(name)


def _loads_any_depth(text: str) -> Any:
    """``json.loads`` of a line's top level, however deep the line nests. The edge refuses
    a line nested past its bound on every Python, answering by what the line says of
    itself as a decoded line would be answered; so where this Python's decoder gives up
    (3.11's near 1,000 levels), the oracle decodes the line with every value below the
    top level replaced by ``null``: the id, the method and the role keys are all it reads.
    Written out here, not shared with the edge's scanner, so the two can disagree."""
    try:
        return json.loads(text, parse_constant=reject_constant)
    except RecursionError:
        return json.loads(_top_level(text), parse_constant=reject_constant)


def _top_level(text: str) -> str:
    """``text`` with each value nested below the top-level object or array as ``null``."""
    out: list[str] = []
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if depth <= 1:
                out.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "[{":
            depth += 1
            if depth <= 2:
                out.append(c if depth == 1 else "null")
        elif c in "]}":
            if depth == 1:
                out.append(c)
            depth -= 1
        elif depth <= 1:
            out.append(c)
        i += 1
    return "".join(out)


def expected_answer(line: bytes) -> tuple[str, Any]:
    """What the contract says a line gets: ``("id", rid)``, ``("null", None)`` (one answer
    with ``id: null``), ``("none", None)``, or ``("maybe", rid)`` for a JSON-RPC response
    sent *to* the server (no answer due, one with its id tolerated)."""
    if len(line) > MAX_LINE_BYTES:
        return "null", None
    text = line.strip()
    if not text:
        return "none", None
    try:
        msg = _loads_any_depth(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "null", None
    if not isinstance(msg, dict):
        return "null", None
    if "id" not in msg:
        return "none", None
    rid = msg["id"]
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        return "null", None
    if msg.get("method") is None and ("result" in msg or "error" in msg):
        return "maybe", rid
    return "id", rid


def answer_problem(msg: Any) -> str | None:
    """Why ``msg`` is not a valid JSON-RPC 2.0 response, or None."""
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or "id" not in msg:
        return "not a JSON-RPC 2.0 response object"
    if ("result" in msg) == ("error" in msg):
        return "needs exactly one of result and error"
    error = msg.get("error")
    if error is not None and not (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
    ):
        return "error must have an integer code and a string message"
    return None


# --------------------------------------------------------------------------------------
# multipart frames for the broker's front socket


def _request_frame(rid: str, method: str, params: Any = None, **envelope: Any) -> bytes:
    body: dict[str, Any] = {"id": rid, "method": method, **envelope}
    if params is not None:
        body["params"] = params
    return msgspec.msgpack.encode(body)


def valid_frames(ids: Ids) -> list[bytes]:
    """One well-formed request per method a client may send (none that removes data)."""
    nil_id = "00000000-0000-0000-0000-000000000000"
    calls: list[tuple[str, Any, str | None]] = [
        ("ping", {}, None),
        ("status", {}, None),
        ("palace_list", {}, None),
        ("palace_create", {"name": PALACE}, None),
        ("memory_remember", {"text": "a fuzzed frame", "tags": ["f"]}, PALACE),
        ("memory_recall", {"query": "fuzzed", "top_k": 3}, PALACE),
        ("memory_recall_deep", {"query": "fuzzed", "top_k": 3}, PALACE),
        ("memory_list", {"limit": 3}, PALACE),
        ("memory_forget", {"drawer_id": nil_id}, PALACE),
        ("kg_assert", {"subject": "s", "predicate": "p", "object": "o"}, PALACE),
        ("kg_query", {"subject": "s"}, PALACE),
        ("palace_info", {}, PALACE),
        ("noop", {}, PALACE),
        ("embed", {"texts": ["a fuzzed text"]}, None),
        ("palace_export", {"limit": 2, "vectors": False}, PALACE),
        ("archive_list", {"limit": 2}, PALACE),
        ("dream_status", {}, PALACE),
    ]
    frames = []
    for method, params, palace in calls:
        envelope = {"palace": palace} if palace else {}
        frames.append(_request_frame(str(ids()), method, params, **envelope))
    return frames


def fixed_frame_cases(ids: Ids) -> list[FrameCase]:
    cases: list[FrameCase] = [("empty-frame", [[b""]]), ("req-delimiter-only", [[b"", b""]])]
    for depth in DEPTHS:
        deep = b"\x91" * depth + b"\xc0"
        enc = msgspec.msgpack.encode
        head = b"\x83" + enc("id") + enc(f"deep-{ids()}") + enc("method") + enc("memory_list")
        cases.append((f"nesting:params:{depth}", [[head + enc("params") + deep]]))
        cases.append((f"nesting:palace:{depth}", [[head + enc("palace") + deep]]))
        cases.append((f"nesting:top:{depth}", [[deep]]))
    for method in PARAMS_FOR_METHOD:
        if method == "palace_import" or (method.startswith("dream_") and method != "dream_status"):
            continue  # bulk import and the dreamer's writes change data; they have own tests
        for params in (5, "x", [1, 2], {"text": 5, "query": [], "name": {}}, None, b"\x00"):
            frame = _request_frame(str(ids()), method, params, palace=PALACE)
            cases.append((f"wrong-params:{method}", [[frame]]))
    for field, value in (
        ("palace", 5), ("palace", ["fz"]), ("palace", "../etc"), ("palace", "nope"),
        ("timeout_ms", -1), ("timeout_ms", 2**62), ("timeout_ms", "5"),
        ("timeout_ms", 1.5), ("method", 7), ("method", ""), ("method", "x" * 10_000),
    ):  # fmt: skip
        body = {"id": str(ids()), "method": "memory_list", "palace": PALACE, field: value}
        cases.append((f"envelope:{field}", [[msgspec.msgpack.encode(body)]]))
    # A palace name that is not UTF-8 (an encoded lone surrogate): msgspec will not write it.
    bad_palace = _request_frame(str(ids()), "memory_list", {}, palace="@@")
    cases.append(("envelope:palace", [[bad_palace.replace(b"\xa2@@", b"\xa3\xed\xa0\x80")]]))
    for value in (None, 1, "x", [1, 2], {"id": 5}, {"method": "ping"}, {"id": "i"}):
        cases.append(("wrong-shape", [[msgspec.msgpack.encode(value)]]))
    big = "x" * (4 * 2**20)
    huge_text = _request_frame(str(ids()), "memory_remember", {"text": big}, palace=PALACE)
    cases += [
        ("huge:text", [[huge_text]]),
        ("huge:id", [[_request_frame("i" * 2**20, "ping")]]),
        ("huge:random", [[random.Random(1).randbytes(8 * 2**20)]]),
    ]
    same_id = _request_frame(str(ids()), "noop", {}, palace=PALACE)
    cases.append(("duplicate-id", [[same_id], [same_id], [same_id]]))
    for kind, method, params, _ in clear_error_frame_cases():
        envelope = {} if method == "embed" else {"palace": PALACE}
        cases.append((kind, [[_request_frame(str(ids()), method, params, **envelope)]]))
    return cases


def random_frame_case(rng: random.Random, ids: Ids) -> FrameCase:
    kind = rng.choices(
        ["random-bytes", "truncated", "mutated", "valid", "multipart", "req-style"],
        [2, 2, 4, 1, 1, 1],
    )[0]
    if kind == "random-bytes":
        return kind, [[rng.randbytes(rng.randint(0, 400))]]
    valid = rng.choice(valid_frames(ids))
    if kind == "truncated":
        return kind, [[valid[: rng.randrange(0, len(valid))]]]
    if kind == "mutated":
        return kind, [[mutate(valid, rng)]]
    if kind == "valid":
        return kind, [[valid]]
    if kind == "req-style":
        return kind, [[b"", valid]]  # the way a REQ socket frames a message
    return kind, [[rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(2, 5))]]


def frame_cases(n_messages: int, seed: int = 0) -> Iterator[FrameCase]:
    """The fixed cases, then random ones until ``n_messages`` messages have been produced."""
    rng = random.Random(seed)
    ids = Ids("b")
    sent = 0
    for case in fixed_frame_cases(ids):
        yield case
        sent += len(case[1])
    while sent < n_messages:
        case = random_frame_case(rng, ids)
        yield case
        sent += len(case[1])


def expected_reply(frames: list[bytes]) -> tuple[bool, str | None]:
    """Whether the broker owes this message a reply, and the id it must carry (None: any).

    The broker takes one frame (or an empty delimiter and one frame, as REQ sockets send)
    as a request and answers it exactly once: by the request's id when the frame is a
    map with a string id, by whatever id it can find otherwise. Longer messages are not
    requests and are dropped.
    """
    if len(frames) == 2 and frames[0] == b"":
        frames = frames[1:]
    if len(frames) != 1:
        return False, None
    try:
        body = msgspec.msgpack.decode(frames[0])
    except Exception:  # not MessagePack, or nested too deeply to decode here
        return True, None
    if isinstance(body, dict) and isinstance(body.get("id"), str):
        return True, body["id"]
    return True, None
