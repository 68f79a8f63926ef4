"""The errors of ``actors.mcp``: a server that cannot be talked to vs a tool that failed.

Both reach the model as tool errors during a turn (a tool that raises becomes
a tool message with the error; the turn goes on). They differ in what happens
next: after ``MCPServerUnavailable`` the next call opens a new connection;
after ``MCPToolError`` the connection is fine and stays. At session start only
``MCPServerUnavailable`` occurs, as the cause of the ``PluginError`` that fails
the start.
"""

from __future__ import annotations

from actors.errors import ActorsError

__all__ = ["MCPServerUnavailable", "MCPToolError"]


class MCPServerUnavailable(ActorsError, ConnectionError):
    """An MCP server could not be reached, or the connection to it was lost.

    At start or resume it is the cause of ``PluginError``: start the server (or
    fix its command or URL) and resume the session again. During a call the
    call may or may not have run on the server (it is never sent twice), and
    the session's next call to that server reconnects.

    Attributes:
        server: The server, as ``StdioServer.describe`` or ``HttpServer.describe`` name it.
        problem: What went wrong, for people.
    """

    def __init__(self, server: str, problem: str) -> None:
        self.server = server
        self.problem = problem
        super().__init__(f"MCP server {server}: {problem}")


class MCPToolError(ActorsError, RuntimeError):
    """An MCP server answered a tool call with an error: the tool raised, refused its
    arguments, or does not exist there. The connection is fine and stays open.

    Attributes:
        server: The server, as ``describe`` names it.
        tool: The tool's name on the server (without the plugin's prefix).
        detail: The server's error text.
    """

    def __init__(self, server: str, tool: str, detail: str) -> None:
        self.server = server
        self.tool = tool
        self.detail = detail
        super().__init__(f"MCP tool {tool!r} of server {server} failed: {detail}")


for _cls in (MCPServerUnavailable, MCPToolError):
    _cls.__module__ = "actors.mcp"
