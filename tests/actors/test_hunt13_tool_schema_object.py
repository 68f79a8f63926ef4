"""A tool whose parameters schema is not ``"type": "object"`` is refused, found by a bug hunt.

Anthropic (``input_schema``) and OpenAI (function ``parameters``) accept only an object
schema for a tool's input. A hand-built ``Tool(parameters=...)`` of another type, or with
no type, was taken, and every model call of its sessions failed at the provider (a 400
naming neither the tool nor the field). Now ``Tool`` raises ``ToolDefinitionError``
naming the tool.
"""

from __future__ import annotations

from typing import Any

import mcp.types as mcp_types
import pytest

from actors import Tool, ToolDefinitionError, tool
from actors.mcp import MCPTools, StdioServer


def _noop(**_: Any) -> None:
    return None


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}},
        {"type": ["object", "null"]},
        {"properties": {"a": {"type": "string"}}},
    ],
    ids=repr,
)
def test_a_schema_that_is_not_an_object_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(ToolDefinitionError, match=r"tool 'lookup'.*\"type\": \"object\""):
        Tool("lookup", "Look it up.", schema, _noop)


def test_an_object_schema_is_taken() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert Tool("lookup", "Look it up.", schema, _noop).parameters == schema


def test_the_decorator_still_builds_object_schemas() -> None:
    @tool
    def add(a: int, b: int = 1) -> int:
        """Add."""
        return a + b

    assert add.parameters["type"] == "object"


def test_an_mcp_tool_listed_with_an_empty_schema_is_offered_as_an_object_schema() -> None:
    """A lax MCP server lists a tool without arguments as ``{}``: it is an object schema
    that forgot to say so, offered with ``"type": "object"`` (the check above would refuse
    it, failing the plugin's start for every session)."""
    plugin = MCPTools(StdioServer("unused"))
    listed = mcp_types.Tool(name="ping", input_schema={})
    made = plugin._tool(None, listed, "ping")  # type: ignore[arg-type]  # (not called)
    assert made.parameters == {"type": "object"}
    assert listed.input_schema == {}  # the listing is left as the server sent it
