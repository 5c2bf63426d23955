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
from trusty_memory.client.mcp.tool_record import Args, Backend, Plan, Tool, ToolError

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
        raise ToolError(f"unknown tool: {name}")
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
) -> Plan:
    """Check a call's arguments and build its daemon request, without any I/O.

    Everything the front end can reject, it rejects here, so a bad call fails fast
    even when no daemon is running. Without ``tools="extended"`` the extended set's
    names are unknown tools and ``kg_query``'s ``as_of`` an unknown argument.
    """
    tool = find(name, tools)
    a = Args(name, arguments)
    a.extended = tools == EXTENDED
    return tool.handler(a, default_palace)


async def call_tool(
    name: str,
    arguments: dict[str, Any] | None,
    backend: Backend,
    *,
    default_palace: str | None = None,
    before_call: Callable[[], Awaitable[None]] | None = None,
    tools: str = CONTRACT,
) -> dict[str, Any]:
    """Run one tool; return its result object or raise :class:`~.tool_record.ToolError`.

    ``before_call`` runs once the arguments have passed their checks and before the
    daemon is asked anything: the server uses it to make sure the ``--palace`` default
    exists. Daemon errors keep their message, which already names the cause.
    """
    from trusty_memory.common.protocol import TrustyError

    plan = plan_call(name, arguments, default_palace, tools)
    try:
        if before_call is not None:
            await before_call()
        if plan.run is not None:
            return await plan.run(backend)
        data = await backend.call(plan.method, plan.params, palace=plan.palace)
    except TrustyError as exc:
        raise ToolError(exc.message) from None
    return plan.shape(data)
