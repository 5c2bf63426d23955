"""The two tool sets, served: lookup by name, ``tools/list``, and one ``tools/call``.

``contract`` is the contract's ten (``tools.py``), exactly; ``extended`` is those, with
``kg_query``'s ``as_of``, then ``tools_extended.py``'s (``serve --tools extended``). The
two sets are :class:`~.tool_record.Tool` records that know nothing of each other; this is
the one place that puts them together. The session module turns
:func:`tool_definitions` into SDK ``Tool`` objects and hands every ``tools/call`` to
:func:`call_tool` with a :class:`~.tool_record.Backend` (the daemon client); the stdio
relay answers ``tools/list`` from :func:`tool_definitions` itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from trusty_memory.client.mcp import tools as contract_tools
from trusty_memory.client.mcp import tools_extended
from trusty_memory.client.mcp.tool_record import (
    Args,
    Backend,
    Plan,
    Tool,
    ToolError,
    UnknownTool,
    unknown_arguments,
)
from trusty_memory.common.methods import Method
from trusty_memory.common.protocol import ErrorCode, TrustyError

CONTRACT = "contract"
EXTENDED = "extended"
TOOL_SETS = (CONTRACT, EXTENDED)

_SETS: dict[str, dict[str, Tool]] = {
    CONTRACT: contract_tools.TOOLS,
    EXTENDED: {**contract_tools.TOOLS, **tools_extended.TOOLS},
}


def _tools_of(tool_set: str) -> dict[str, Tool]:
    """A set's records by name; any name but ``extended`` is the contract's."""
    return _SETS[EXTENDED if tool_set == EXTENDED else CONTRACT]


def find(name: str, tool_set: str = CONTRACT) -> Tool:
    """The record of ``name`` in ``tool_set``; a name it lacks is an unknown tool."""
    tool = _tools_of(tool_set).get(name)
    if tool is None:
        raise UnknownTool(f"unknown tool: {name}")
    return tool


def tool_definitions(
    default_palace: str | None = None, tools: str = CONTRACT
) -> list[dict[str, Any]]:
    """The ``tools/list`` entries in wire (camelCase) form, fresh dicts every call.

    With a default palace, ``palace`` leaves ``required`` but stays an accepted property,
    as the contract says. ``tools="extended"`` adds the extended set after the contract's
    ten and ``as_of`` to ``kg_query``; the contract's entries are otherwise the same.

    The SDK shapes every handshake revision's ``tools/list`` result through the newest
    handshake revision's models (mcp_types.methods.SERVER_RESULTS), which carry
    ``title`` and ``outputSchema``, so the same entries serve every revision; the relay
    answers with them as they are (tests/mcp/test_relay.py holds the two answers equal).
    """
    extended = tools == EXTENDED
    return [tool.listing(default_palace, extended) for tool in _tools_of(tools).values()]


def plan_call(
    name: str,
    arguments: dict[str, Any] | None,
    default_palace: str | None,
    tools: str = CONTRACT,
    *,
    current_spec: bool = False,
) -> Plan:
    """Check a call's arguments and build its daemon request, without any I/O.

    Everything the front end can reject, it rejects here, so a bad call fails fast
    even when no daemon is running. Without ``tools="extended"`` the extended set's
    names are unknown tools and ``kg_query``'s ``as_of`` an unknown argument.

    An argument the tool's input schema does not declare is ignored for the contract's
    sessions (protocol 2024-11-05 and 2025-03-26), as it always was; ``current_spec``
    (2025-06-18 and later) refuses it, naming the nearest known argument, so a typo
    (``tgas``) is not silently dropped.
    """
    tool = find(name, tools)
    extended = tools == EXTENDED
    if current_spec and arguments:
        problem = unknown_arguments(name, tool.argument_names(extended), arguments)
        if problem is not None:
            raise ToolError(problem)
    a = Args(name, arguments)
    a.extended = extended
    return tool.handler(a, default_palace)


async def call_tool(
    name: str,
    arguments: dict[str, Any] | None,
    backend: Backend,
    *,
    default_palace: str | None = None,
    before_call: Callable[[], Awaitable[None]] | None = None,
    tools: str = CONTRACT,
    current_spec: bool = False,
) -> dict[str, Any]:
    """Run one tool; return its result object or raise :class:`~.tool_record.ToolError`.

    ``before_call`` runs once the arguments have passed their checks and before the
    daemon is asked anything: the server uses it to make sure the ``--palace`` default
    exists. Daemon errors keep their message, which already names the cause.

    ``current_spec``: the session negotiated protocol 2025-06-18 or later, whose tool
    errors reach the model as text it can act on. Unknown arguments are refused
    (:func:`plan_call`), and "palace not found" also says how to create the palace and
    names a near match among the existing ones. The contract's sessions get its
    messages unchanged.
    """
    plan = plan_call(name, arguments, default_palace, tools, current_spec=current_spec)
    try:
        if before_call is not None:
            await before_call()
        if plan.run is not None:
            return await plan.run(backend)
        data = await backend.call(plan.method, plan.params, palace=plan.palace)
    except TrustyError as exc:
        message = exc.message
        if current_spec and exc.code == ErrorCode.PALACE_NOT_FOUND:
            message = await palace_not_found(message, backend, create=name != "palace_delete")
        raise ToolError(message) from None
    return plan.shape(data)


NOT_FOUND = "palace not found: "


async def palace_not_found(message: str, backend: Backend, create: bool = True) -> str:
    """A "palace not found" message with what to do about it: the existing palace the
    name is nearest to, if one is near (none if the palaces cannot be listed), and, with
    ``create``, the ``palace_create`` tool that makes it (not for ``palace_delete``).

    Other messages of that code (``no archived palace: ...``) come back as they are.
    """
    import difflib

    if not message.startswith(NOT_FOUND):
        return message
    name = message[len(NOT_FOUND) :].split(" (", 1)[0]
    try:
        listed = await backend.call(Method.PALACE_LIST, {})
    except (TrustyError, OSError):
        listed = None
    names = listed.get("palaces") if isinstance(listed, dict) else None
    palaces = [p for p in names if isinstance(p, str)] if isinstance(names, list) else []
    near = difflib.get_close_matches(name, palaces, n=1)
    if not near:  # a different case is near whatever its length ("Notes" for "notes")
        near = [p for p in palaces if p.lower() == name.lower()][:1]
    hint = f"; did you mean '{near[0]}'?" if near else "."
    if not create:
        return message + hint if near else message
    return f"{message}{hint} To create '{name}', call the palace_create tool with" + (
        f' {{"name": "{name}"}}.'
    )
