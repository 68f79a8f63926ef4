"""An MCP server whose tool names meet once made acceptable to providers still serves its
session, found by a bug hunt: ``notes.read`` and ``notes_read`` both became ``notes_read``
for the model, a clash that failed every start of every session on the template, and no
``prefix`` could mend it (both names get the same one). Now the name that had to change
ends with a hash of the server's own name; a name that was fine keeps it."""

from __future__ import annotations

import mcp.types as mcp_types

from actors import EventBuffer, PluginContext
from actors.mcp import MCPTools, StdioServer
from actors.mcp._plugin import model_tool_name


class Listed:
    """Stands in for a session's ``MCPConnection``: what its server lists."""

    def __init__(self, *names: str) -> None:
        self.tools = tuple(
            mcp_types.Tool(name=name, description=name, input_schema={"type": "object"})
            for name in names
        )


def _offered(plugin: MCPTools, *names: str) -> list[str]:
    ctx = PluginContext(
        session_id="s",
        plugin=plugin.name,
        state={"connection": Listed(*names)},
        events=EventBuffer(),
    )
    return [t.name for t in plugin.session_tools(ctx)]


def test_names_that_meet_once_made_acceptable_are_kept_apart() -> None:
    plugin = MCPTools(StdioServer("unused"), prefix="kb.")

    offered = _offered(plugin, "notes.read", "notes_read", "notes read", "add")

    assert len(set(offered)) == 4
    assert offered[3] == "kb_add"
    for name in offered[:3]:  # each had to change (the prefix too): each is hashed
        assert name.startswith("kb_notes_read_")
        assert len(name) == len("kb_notes_read_") + 8


def test_a_name_the_server_spelled_well_keeps_it() -> None:
    plugin = MCPTools(StdioServer("unused"))

    offered = _offered(plugin, "notes.read", "notes_read", "add")

    assert offered[1:] == ["notes_read", "add"]
    assert offered[0].startswith("notes_read_")
    assert offered[0] != model_tool_name("", "notes.read")


def test_names_that_do_not_meet_are_as_model_tool_name_makes_them() -> None:
    plugin = MCPTools(StdioServer("unused"), prefix="srv_")
    long_name = "x" * 80
    assert _offered(plugin, "notes.read", long_name) == [
        "srv_notes_read",
        model_tool_name("srv_", long_name),
    ]
