"""What every MCP tool is made of: one :class:`Tool` record, and the parts its handler uses.

Both tool sets (``tools.py``, the contract's ten, and ``tools_extended.py``, what
``--tools extended`` adds) describe each tool as one record beside its handler, and
import only this module and ``tool_schema.py``, never each other; ``tool_sets.py`` looks
them up, lists them and calls them.

A handler checks a call's arguments and turns them into a :class:`Plan` without any I/O,
so a bad call fails fast even when no daemon is running, and with the contract's own
messages (``missing 'text'``, ``memory_recall: missing 'palace' (no --palace default
configured)``). Everything that needs storage (room normalisation, size limits,
existence) stays with the palace worker, the only authority on it.

Plain data and small functions: no SDK, no ZeroMQ, so the stdio relay can list the
tools at no cost.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, overload

from trusty_memory.common.names import validate_palace_name
from trusty_memory.common.protocol import TrustyError, surrogate_in

MAX_INTEGER = 2**31 - 1

# MCP tool annotations (an addition the contract does not forbid; AutoMem's lesson, seed
# 003): hosts use them to decide what needs a confirmation prompt.
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}

Shape = Callable[[Any], dict[str, Any]]


class ToolError(Exception):
    """A tool call that failed. The message goes to the client as JSON-RPC ``-32603``
    (the contract's answer, for sessions of protocol 2024-11-05 and 2025-03-26), or as a
    result with ``isError: true`` and the message as its text (2025-06-18 and later)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownTool(ToolError):
    """A call to a tool the session's set lacks: for sessions of 2025-06-18 and later a
    protocol error (``-32602``), not a tool's own failure; ``-32603`` for the contract's."""


class Backend(Protocol):
    """What a tool call needs from the daemon: ``AsyncClient.call``'s shape.

    Implementations raise ``trusty_memory.common.protocol.TrustyError`` on daemon errors.
    """

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, palace: str | None = None
    ) -> Any: ...


@dataclass(frozen=True)
class Plan:
    """A checked tool call: the daemon method, its params, and how to shape the answer."""

    method: str
    params: dict[str, Any]
    palace: str | None
    shape: Shape
    # Tools that need more than one daemon call (``health``) run this instead.
    run: Callable[[Backend], Awaitable[dict[str, Any]]] | None = None


Handler = Callable[["Args", "str | None"], Plan]


@dataclass(frozen=True)
class Tool:
    """One MCP tool, whole: what ``tools/list`` says about it and how a call runs.

    ``input_schema`` names every argument with ``palace`` in ``required`` where the tool
    works inside a palace; :meth:`listing` drops it there when the server has a
    ``--palace`` default (it stays an accepted property, as the contract says).
    ``extended_input`` holds the arguments the tool takes only in the extended set
    (``kg_query``'s ``as_of``); its handler reads them only when ``Args.extended``.
    ``handler`` takes the call's :class:`Args` and the ``--palace`` default.
    """

    name: str
    title: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    annotations: Mapping[str, bool]
    handler: Handler
    extended_input: Mapping[str, Any] = field(default_factory=dict)

    def listing(self, default_palace: str | None, extended: bool) -> dict[str, Any]:
        """The ``tools/list`` entry in wire (camelCase) form, fresh dicts every call so
        callers may mutate them."""
        schema = _copy(self.input_schema)
        if extended:
            schema["properties"].update(_copy(self.extended_input))
        required = [r for r in schema.pop("required", []) if not (r == "palace" and default_palace)]
        if required:  # an empty ``required`` is invalid in older JSON Schema drafts: omit it
            schema["required"] = required
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": schema,
            "outputSchema": _copy(self.output_schema),
            # The title again where the 2025-03-26 revision put it (annotations.title),
            # for hosts that only read that one.
            "annotations": {"title": self.title, **self.annotations},
        }

    def argument_names(self, extended: bool) -> list[str]:
        """The arguments a call may carry, in ``tools/list`` order (``extended``: with
        the extended set's own)."""
        names = list(self.input_schema.get("properties", {}))
        return names + list(self.extended_input) if extended else names


# How much of an unknown argument's name an error repeats.
MAX_NAME_SHOWN = 64


def unknown_arguments(tool: str, known: list[str], arguments: Mapping[str, Any]) -> str | None:
    """The error for a call whose ``arguments`` name something ``known`` does not, naming
    each unknown one and its nearest known name (``unknown argument 'tgas' (did you mean
    'tags'?)``), or None when every argument is known.

    Only for sessions of 2025-06-18 and later: the contract's clients send what they send
    and have always had the rest ignored.
    """
    unknown = [key for key in arguments if key not in known]
    if not unknown:
        return None
    import difflib  # here: the relay imports this module only to list the tools

    parts = []
    unmatched = False
    for key in unknown:
        shown = key if len(key) <= MAX_NAME_SHOWN else key[:MAX_NAME_SHOWN] + "..."
        near = difflib.get_close_matches(key, known, n=1)
        if near:
            parts.append(f"'{shown}' (did you mean '{near[0]}'?)")
        else:
            parts.append(f"'{shown}'")
            unmatched = True
    plural = "s" if len(unknown) > 1 else ""
    message = f"{tool}: unknown argument{plural} {', '.join(parts)}"
    if unmatched:
        takes = ", ".join(f"'{k}'" for k in known) if known else "no arguments"
        message += f"; {tool} takes {takes}"
    return message


def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))


def by_name(*tools: Tool) -> dict[str, Tool]:
    """A tool set: its records by name, in ``tools/list`` order."""
    return {tool.name: tool for tool in tools}


class Args:
    """Typed access to one call's ``arguments`` that raises the contract's messages.

    JSON ``null`` counts as absent: some hosts send every schema property, filled or not.
    """

    def __init__(self, tool: str, arguments: dict[str, Any] | None) -> None:
        self.tool = tool
        self.raw = arguments or {}
        self.extended = False  # the call came through the extended tool set

    def _get(self, key: str) -> Any:
        return self.raw.get(key)

    # A required string is never None (it raises instead): say so to the type checker.
    @overload
    def string(self, key: str, *, required: Literal[True]) -> str: ...
    @overload
    def string(self, key: str, *, required: bool = False) -> str | None: ...

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self._get(key)
        if value is None:
            if required:
                raise ToolError(f"missing '{key}'")
            return None
        if not isinstance(value, str):
            raise ToolError(f"{self.tool}: '{key}' must be a string, got {json_type(value)}")
        self._utf8(key, value)
        return value

    def strings(self, key: str) -> list[str]:
        value = self._get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ToolError(f"{self.tool}: '{key}' must be an array of strings")
        for i, item in enumerate(value):
            self._utf8(f"{key}[{i}]", item)
        return list(value)

    def _utf8(self, key: str, value: str) -> None:
        """JSON may carry a lone surrogate (``"\\ud800"``) that UTF-8 cannot: refused here,
        naming the argument, before it reaches the daemon's encoder."""
        where = surrogate_in(value)
        if where is not None:
            raise ToolError(
                f"{self.tool}: '{key}' contains a lone surrogate {where}; send valid UTF-8"
            )

    def integer(self, key: str, default: int) -> int:
        value = self._get(key)
        if value is None:
            return default
        # bool is an int in Python but not in JSON; 5.0 is a fine integer in JSON.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolError(f"{self.tool}: '{key}' must be an integer, got {json_type(value)}")
        if value < 1:
            raise ToolError(f"{self.tool}: '{key}' must be a positive integer, got {value}")
        if value > MAX_INTEGER:  # the wire's integers are bounded; the worker bounds it more
            raise ToolError(f"{self.tool}: '{key}' is too large: {value}")
        return value

    def unit_number(self, key: str, default: float) -> float:
        value = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolError(f"{self.tool}: '{key}' must be a number, got {json_type(value)}")
        if not 0.0 <= value <= 1.0:
            raise ToolError(f"{self.tool}: '{key}' must be between 0.0 and 1.0, got {value}")
        return float(value)


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def resolve_palace(args: Args, default_palace: str | None) -> str:
    """The palace a call targets: its own argument, else the ``--palace`` default."""
    palace = args.string("palace") or default_palace
    if not palace:
        raise ToolError(f"{args.tool}: missing 'palace' (no --palace default configured)")
    try:
        return validate_palace_name(palace)
    except TrustyError as exc:
        raise ToolError(f"{args.tool}: {exc.message}") from None


def palace_name(args: Args, key: str) -> str:
    """A palace named by a call (``palace_create``'s ``name``): required and valid."""
    name = args.string(key, required=True)
    try:
        validate_palace_name(name)
    except TrustyError as exc:
        raise ToolError(f"{args.tool}: {exc.message}") from None
    return name


def pick(obj: Any, *keys: str) -> dict[str, Any]:
    """Exactly ``keys`` from a result record, in that order (missing ones as null).

    Results are projected onto exactly the documented fields: the workers return richer
    records (a hit's ``room``, a palace's ``triple_count``), and a drop-in must not
    surprise integrators who compare objects.
    """
    if not isinstance(obj, dict):
        raise ToolError(f"malformed daemon result: expected an object, got {json_type(obj)}")
    return {k: obj.get(k) for k in keys}


def fields(*keys: str) -> Shape:
    """A result shape that keeps exactly ``keys``."""
    return lambda data: pick(data, *keys)


def pick_list(
    data: Any, head: tuple[str, ...], key: str, item_keys: tuple[str, ...]
) -> dict[str, Any]:
    """``head`` fields of a result, then its list ``key`` with ``item_keys`` of each item."""
    out = pick(data, *head)
    out[key] = [pick(item, *item_keys) for item in data.get(key) or []]
    return out
