"""JSON Schema pieces both tool sets build their records from.

Every result field is required in an output schema (:func:`obj`): the handlers project
each result onto exactly its fields (``tool_record.pick``) and fill none in, so
``structuredContent`` always matches (tests/mcp/test_output_schemas.py and
tests/mcp/test_extended_tools.py check every tool through the SDK client).
"""

from __future__ import annotations

from typing import Any

# The contract's ``palace`` argument, which every palace tool lists in these words.
PALACE = {
    "type": "string",
    "description": "Palace ID (optional if server started with --palace)",
}


def inputs(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """An input schema: ``palace`` leads ``required`` where the tool takes it."""
    return {"type": "object", "properties": properties, "required": list(required)}


def obj(**properties: dict[str, Any]) -> dict[str, Any]:
    """An object schema whose properties are all required."""
    return {"type": "object", "properties": properties, "required": list(properties)}


def string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def array(items: dict[str, Any], description: str) -> dict[str, Any]:
    return {"type": "array", "items": items, "description": description}


def unit(description: str) -> dict[str, Any]:
    """A number in [0.0, 1.0]: an importance or a confidence."""
    return {"type": "number", "minimum": 0.0, "maximum": 1.0, "description": description}


def count(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "description": description}


def date_time(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": description}


DRAWER_ID = string("Stable identifier of the drawer (a UUID)")

# A knowledge-graph triple's fields, in the order every result lists them.
TRIPLE_FIELDS = (
    "subject",
    "predicate",
    "object",
    "valid_from",
    "valid_to",
    "confidence",
    "provenance",
)
