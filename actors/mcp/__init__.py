"""Tools from Model Context Protocol servers, for sessions: ``MCPTools``.

Needs the optional extra ``sessionvisor[mcp]`` (the official ``mcp`` SDK).
``MCPTools(StdioServer(...))`` or ``MCPTools(HttpServer(url))`` in a template's
plugins gives every session on it that server's tools. See ``MCPTools`` for
what a session does when the server fails, and ``_connection`` for how a
connection runs (one shared event loop thread per process).
"""

try:
    import mcp as _sdk  # noqa: F401 (only to say what is missing)
except ImportError as exc:  # pragma: no cover (the dev extra installs it)
    raise ImportError(
        "actors.mcp needs the mcp SDK: install the extra with pip install 'sessionvisor[mcp]'"
    ) from exc

from actors.mcp._connection import MCPConnection as MCPConnection
from actors.mcp._errors import MCPServerUnavailable as MCPServerUnavailable
from actors.mcp._errors import MCPToolError as MCPToolError
from actors.mcp._plugin import MCPTools as MCPTools
from actors.mcp._servers import HttpServer as HttpServer
from actors.mcp._servers import ServerAddress as ServerAddress
from actors.mcp._servers import StdioServer as StdioServer

__all__ = [
    "HttpServer",
    "MCPConnection",
    "MCPServerUnavailable",
    "MCPToolError",
    "MCPTools",
    "ServerAddress",
    "StdioServer",
]

for _cls in (MCPConnection, HttpServer, StdioServer):
    _cls.__module__ = "actors.mcp"
