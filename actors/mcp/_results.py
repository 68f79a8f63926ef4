"""What an MCP tool call returns, as the text a tool message carries.

A tool message holds one string. An MCP result is a list of content blocks
(text, images, audio, resource links, embedded resources) and optionally
structured content. Text blocks are kept as they are; any other block is
written as its JSON (as the protocol spells it, so a model or a plugin can
still read its type, MIME type and data); blocks are joined by newlines. A
result with no blocks but structured content is that content's JSON.
"""

from __future__ import annotations

import json

import mcp.types as mcp_types

__all__ = ["result_text"]


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text of ``result`` for a tool message (see the module docstring). Pure: thread-safe."""
    parts = [
        block.text
        if isinstance(block, mcp_types.TextContent)
        else json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        for block in result.content
    ]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)
