"""Tools from an MCP server, in a session that survives a crash: a guide by example.

``MCPTools`` (``pip install 'sessionvisor[mcp]'``) is a plugin: in every
session's ``session_start`` it connects to the server and lists its tools,
and it offers them to the model next to the template's own. The connection is
live, so it is never in a checkpoint: it is stripped, and after a crash the
resumed session's ``session_start`` connects again.

This file is also the server: run with ``serve`` it is a small MCP server over
stdio, built with the same SDK. Each session starts its own server process.

Run: ``.venv/bin/python examples/mcp_tools.py``
"""

from __future__ import annotations

import logging
import os
import sys

from actors import AgentTemplate
from actors.mcp import MCPTools, StdioServer
from supervisor import AgentHost, MemoryCheckpointStore


def serve() -> None:
    """The MCP server: two tools, on stdin/stdout."""
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415 (the server side only)

    server = MCPServer("words", log_level="WARNING")

    @server.tool()
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    @server.tool()
    def server_pid() -> int:
        """The id of the process serving this session."""
        return os.getpid()

    server.run("stdio")


def main() -> None:
    logging.getLogger("pykka").setLevel(logging.CRITICAL)  # the traceback of our own kill
    # A stdio server inherits only a safe part of the environment (HOME, PATH, ...)
    # plus ``env``: this one imports this file's packages, so it needs our path.
    server = StdioServer(
        sys.executable, [__file__, "serve"], env={"PYTHONPATH": os.pathsep.join(sys.path)}
    )
    words = MCPTools(server, prefix="words_")
    template = AgentTemplate(model="echo", plugins=[words])
    with AgentHost(store=MemoryCheckpointStore()) as host:
        sid = host.start_session(template, session_id="guide")
        print(host.send(sid, '/words_word_count {"text": "tools from a server"}').content)
        before = host.send(sid, "/words_server_pid").content

        print("the session crashes; the supervisor resumes it from its checkpoint:")
        host.kill(sid)
        after = host.send(sid, "/words_server_pid").content
        print(f"  a new connection, to a new server process: {before != after}")
        checkpoint = host.store.load(sid)
        print(f"  what its checkpoint stripped: {list(checkpoint.stripped_fields)}")
        print(f"  history kept: {len(host.history(sid))} messages")


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["serve"] else main()
