"""A small MCP server for the tests, built with the same ``mcp`` SDK the client uses.

Run as a file, never imported by the tests (it needs nothing of this project):

    python tests/mcp_server.py stdio          # one server per connection, on stdin/stdout
    python tests/mcp_server.py http [PORT]    # Streamable HTTP on 127.0.0.1:PORT (0: any
                                              # free port); prints the port, then serves
    python tests/mcp_server.py http-legacy [PORT]   # the same, as a 2025-era server: no
                                              # server/discover, so clients use the
                                              # initialize handshake and a stateful
                                              # MCP session (Mcp-Session-Id)

Its tools: ``add``, ``echo``, ``fail`` (the tool raises: an error result),
``pid`` (which process serves this connection), ``crash`` (the process exits
during the call: a server that dies mid-session), ``block`` (never answers: a
call that times out), ``wait_for`` (answers once a file exists: a call the
test holds open), ``picture`` (an image block, not text) and ``notes.read`` (a name
the MCP specification allows but model providers do not: a dot).
"""

from __future__ import annotations

import os
import socket
import sys

import anyio
from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.types import METHOD_NOT_FOUND, ImageContent, RequestParams

app = MCPServer("sessionvisor-test", log_level="WARNING")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def echo(text: str) -> str:
    """Return the text as it is."""
    return text


@app.tool()
def fail(message: str) -> str:
    """Always raise, with ``message``."""
    raise ValueError(message)


@app.tool()
def pid() -> int:
    """The id of the process serving this connection."""
    return os.getpid()


@app.tool()
def crash() -> str:
    """End this server's process in the middle of the call."""
    os._exit(3)


@app.tool()
async def block() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "unreachable"


@app.tool()
async def wait_for(path: str) -> str:
    """Answer once the file ``path`` exists (checked every 10 ms)."""
    while not os.path.exists(path):
        await anyio.sleep(0.01)
    return "there"


@app.tool()
def picture() -> ImageContent:
    """A one-pixel image."""
    return ImageContent(type="image", data="R0lGODlhAQABAAAAACw=", mime_type="image/gif")


@app.tool(name="notes.read")
def notes_read(topic: str) -> str:
    """The note on ``topic``."""
    return f"note on {topic}"


async def _no_discover(ctx: object, params: RequestParams) -> None:
    raise MCPError(METHOD_NOT_FOUND, "Method not found: server/discover")


def _serve_http(port: int) -> None:
    import uvicorn  # noqa: PLC0415 (only the HTTP mode needs it)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(app.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        app.run("stdio")
    else:
        if sys.argv[1] == "http-legacy":  # the SDK has no public switch for this
            app._lowlevel_server.add_request_handler("server/discover", RequestParams, _no_discover)
        _serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
