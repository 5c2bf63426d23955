"""MCP resources (with ``serve --tools extended``): palaces and drawers as readable URIs.

* ``trusty-memory://palace/NAME`` - a palace: its ``palace_info`` as JSON.
* ``trusty-memory://palace/NAME/drawer/ID`` - a drawer, whole (``memory_get``'s fields).
* ``trusty-memory://palace/NAME/wake-up`` - the palace's wake-up context as plain text
  (``client/capture/wake_up.py``: its identity and most important notes, about 800 tokens),
  for a client that puts it in the system prompt; reading it counts no recall.

``resources/list`` pages through the palaces, ``PAGE`` at a time, described from what each
writer last wrote down (``palace_summaries``: drawer count, last write), so listing never
wakes a palace: listing drawers would start a writer per palace, and a home of thousands
of palaces would start thousands of processes for one client's curiosity. A drawer is
read through the drawer URI template (``resources/templates/list``), with an id that
``memory_list``, ``memory_search`` or a recall gave; reading a resource does wake its
palace, as any request for its contents does.

Errors: a URI that is not one of ours is ``-32602``; a palace or drawer that does not
exist is ``-32002`` (the spec's "resource not found") with the daemon's message, which
names it.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import quote, unquote

from trusty_memory.common.methods import Method
from trusty_memory.common.protocol import ErrorCode, TrustyError

SCHEME = "trusty-memory://"
PAGE = 100
RESOURCE_NOT_FOUND = -32002
INVALID_PARAMS = -32602
_URI = re.compile(r"^trusty-memory://palace/([^/]+)(?:/drawer/([^/]+)|(/wake-up))?$")
MIME = "application/json"
TEXT = "text/plain"
WAKE_UP = "wake-up"


def palace_uri(name: str) -> str:
    return f"{SCHEME}palace/{quote(name, safe='')}"


def drawer_uri(palace: str, drawer_id: str) -> str:
    return f"{palace_uri(palace)}/drawer/{quote(drawer_id, safe='')}"


def wake_up_uri(palace: str) -> str:
    return f"{palace_uri(palace)}/{WAKE_UP}"


def parse_uri(uri: str) -> tuple[str, str | None, bool]:
    """``(palace, drawer id or None, whether it is the wake-up)`` of one of our URIs;
    ``ValueError`` naming the problem otherwise."""
    match = _URI.match(uri)
    if match is None:
        raise ValueError(
            f"not a trusty-memory resource: {uri!r} (expected {SCHEME}palace/NAME,"
            f" {SCHEME}palace/NAME/drawer/ID or {SCHEME}palace/NAME/{WAKE_UP})"
        )
    drawer = match.group(2)
    return unquote(match.group(1)), unquote(drawer) if drawer else None, bool(match.group(3))


def _encode(state: dict[str, Any]) -> str:
    raw = json.dumps(state, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[int, str | None]:
    try:
        state = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        index, inner = state["i"], state.get("c")
        if not isinstance(index, int) or index < 0 or not (inner is None or isinstance(inner, str)):
            raise ValueError
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise ValueError(
            f"resources/list: not a cursor this server gave: {cursor[:40]!r}"
        ) from None
    return index, inner


def _described(summary: dict[str, Any]) -> str:
    """A palace resource's description from its summary, which may be missing (a palace
    never written to) or partial."""
    words = ["A memory palace (read it for its palace_info)"]
    counts = summary.get("summary") or {}
    if "drawer_count" in counts:
        words.append(f"{counts['drawer_count']} drawers")
    if summary.get("description"):
        words.append(str(summary["description"]))
    return "; ".join(words)


def resource_handlers(front: Any) -> dict[str, Any]:
    """The low-level ``Server``'s resource handlers for one session (``mcp/session.py``)."""
    import mcp.types as types
    from mcp.shared.exceptions import MCPError

    async def call(method: str, params: dict[str, Any], palace: str | None) -> Any:
        try:
            return await front.client().call(method, params, palace=palace)
        except TrustyError as exc:
            if exc.code in (ErrorCode.PALACE_NOT_FOUND, ErrorCode.DRAWER_NOT_FOUND):
                raise MCPError(RESOURCE_NOT_FOUND, exc.message) from None
            if exc.code == ErrorCode.INVALID_PARAMS or exc.code == ErrorCode.INVALID_PALACE_NAME:
                raise MCPError(INVALID_PARAMS, exc.message) from None
            raise MCPError(-32603, exc.message) from None

    async def read_wake_up(palace: str) -> str:
        from trusty_memory.client.capture.wake_up import wake_up_async  # lazy: wake-up reads only

        try:
            return await wake_up_async(front.client(), palace)
        except TrustyError as exc:
            if exc.code == ErrorCode.PALACE_NOT_FOUND:
                raise MCPError(RESOURCE_NOT_FOUND, exc.message) from None
            if exc.code == ErrorCode.INVALID_PALACE_NAME:
                raise MCPError(INVALID_PARAMS, exc.message) from None
            raise MCPError(-32603, exc.message) from None

    async def on_list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        cursor = getattr(params, "cursor", None) if params is not None else None
        try:
            start = _decode(cursor)[0] if cursor else 0
        except ValueError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        summaries = (await call(Method.PALACE_SUMMARIES, {}, None)).get("palaces") or {}
        names = sorted(summaries)
        found = [
            types.Resource(
                uri=palace_uri(name),
                name=name,
                title=f"Palace {name}",
                description=_described(summaries[name]),
                mime_type=MIME,
            )
            for name in names[start : start + PAGE]
        ]
        more = start + PAGE < len(names)
        next_cursor = _encode({"i": start + PAGE, "c": None}) if more else None
        return types.ListResourcesResult(resources=found, next_cursor=next_cursor)

    async def on_list_resource_templates(
        ctx: Any, params: Any
    ) -> types.ListResourceTemplatesResult:
        templates = [
            types.ResourceTemplate(
                uri_template=f"{SCHEME}palace/{{palace}}",
                name="palace",
                title="A palace",
                description="A memory palace's info as JSON",
                mime_type=MIME,
            ),
            types.ResourceTemplate(
                uri_template=f"{SCHEME}palace/{{palace}}/drawer/{{drawer_id}}",
                name="drawer",
                title="A drawer",
                description="One whole drawer as JSON (as memory_get returns it)",
                mime_type=MIME,
            ),
            types.ResourceTemplate(
                uri_template=f"{SCHEME}palace/{{palace}}/{WAKE_UP}",
                name=WAKE_UP,
                title="A palace's wake-up context",
                description="Plain text for a system prompt: the palace's description and its"
                " most important recent notes (about 800 tokens); reading it counts no recall",
                mime_type=TEXT,
            ),
        ]
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def on_read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            palace, drawer_id, wake_up = parse_uri(uri)
        except ValueError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        if wake_up:
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(
                        uri=uri, mime_type=TEXT, text=await read_wake_up(palace)
                    )
                ]
            )
        if drawer_id is None:
            data = await call(Method.PALACE_INFO, {}, palace)
        else:
            data = await call(Method.DRAWER_GET, {"drawer_id": drawer_id}, palace)
            data.pop("base_importance", None)
        text = json.dumps(data, ensure_ascii=False)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=MIME, text=text)]
        )

    return {
        "on_list_resources": on_list_resources,
        "on_list_resource_templates": on_list_resource_templates,
        "on_read_resource": on_read_resource,
    }
