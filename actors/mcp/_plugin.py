"""``MCPTools``: the plugin that offers an MCP server's tools to every session on a template."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Sequence
from typing import Any

import mcp.types as mcp_types

from actors.mcp._connection import MCPConnection
from actors.mcp._servers import HttpServer, ServerAddress, StdioServer
from actors.plugins import Plugin, PluginContext
from actors.tools import Tool

__all__ = ["MCPTools", "model_tool_name"]

_CONNECTION = "connection"
"""The key of the live connection in the plugin's ``ctx.state``."""

_NAME_MAX = 64
"""The longest tool name OpenAI and Anthropic accept."""

_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")
"""A character OpenAI and Anthropic refuse in a tool name (``^[A-Za-z0-9_-]{1,64}$``)."""


def model_tool_name(prefix: str, name: str) -> str:
    """The name the model sees for the server's tool ``name``: ``prefix + name``, made one
    that providers accept. Pure, thread-safe.

    MCP allows tool names that providers refuse (``notes.read``, 128 characters), and
    one refused name fails every model call of the session. So each character outside
    ``A-Z a-z 0-9 _ -`` becomes ``_``, and a name longer than 64 characters is cut to
    55 and ends with ``_`` and 8 hex digits of its hash, which keeps distinct long
    names apart. A name that was fine stays as it is.
    """
    full = prefix + name
    shown = _NOT_NAME.sub("_", full)
    if len(shown) <= _NAME_MAX:
        return shown
    return _hashed(full, shown)


def _hashed(full: str, shown: str) -> str:
    """``shown`` (``full`` made acceptable) cut to leave room for ``_`` and 8 hex digits of
    ``full``'s hash, which end it."""
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{shown[: _NAME_MAX - 9]}_{digest}"


def _model_names(prefix: str, names: Sequence[str]) -> list[str]:
    """``model_tool_name`` of each of a server's tool ``names``, made distinct: two names that
    become the same (``notes.read`` and ``notes_read``) failed every session's start with a
    clash no ``prefix`` could mend. A name the server spelled as providers accept keeps it;
    one that had to change gets ``_`` and 8 hex digits of its hash at its end instead."""
    shown = [model_tool_name(prefix, name) for name in names]
    counts: dict[str, int] = {}
    for item in shown:
        counts[item] = counts.get(item, 0) + 1
    return [
        _hashed(prefix + name, item) if counts[item] > 1 and item != prefix + name else item
        for name, item in zip(names, shown, strict=True)
    ]


class MCPTools(Plugin):
    """Offers the tools of one MCP server to the model, in each session on the template.

    Each session opens its own connection in ``session_start`` (a new process
    for a ``StdioServer``, a new MCP session for an ``HttpServer``), lists the
    server's tools and offers them through ``session_tools``, next to the
    template's; ``session_end`` closes it. The connection lives in
    ``ctx.state["connection"]``, is stripped from every snapshot, and is opened
    again on resume, wherever the session runs (a worker process included: the
    plugin travels as this configuration). A server that cannot be reached then
    fails the session's start with ``PluginError`` (cause
    ``MCPServerUnavailable``).

    During a turn, what the server answers becomes the tool message (text as
    is, other content as JSON). Errors become tool errors the model reads, and
    the turn goes on: ``MCPToolError`` (the tool failed; the connection stays),
    ``TimeoutError`` (no answer within ``call_timeout``), and
    ``MCPServerUnavailable`` (the connection broke during the call: the call is
    not sent twice, and the next call reconnects, publishing
    ``mcp_connection_lost`` then ``mcp_reconnected`` events).

    One instance may serve many sessions at once: it keeps nothing per session
    on ``self``. Thread-safe.

    Args:
        server: Where the server is.
        name: The plugin's name (default ``"mcp"``); give each of several
            MCP plugins in one template its own. It keys the plugin's state in
            snapshots, so keep it stable.
        prefix: Put before every tool's name the model sees (``"github_"``),
            so that tools of two servers, or of a server and the template, do
            not clash. A clash fails the session's start. The name the model
            sees is one providers accept (``model_tool_name``: a ``.`` becomes
            ``_``, a name over 64 characters is shortened; a changed name that
            meets another of the server's ends with 8 hex digits of its hash);
            the server is called by its own name.
        include: Offer only these tools (names on the server); one the server
            does not offer fails the start. ``None`` offers them all.
        connect_timeout: Seconds to connect and list the tools (a stdio server
            fetched on first use, such as ``npx -y ...``, may need more). Keep
            it under ``AgentSession.start_timeout`` (30 s), the most a whole
            session start may take.
        call_timeout: Seconds one tool call may take.
    """

    name = "mcp"

    def __init__(
        self,
        server: ServerAddress,
        *,
        name: str | None = None,
        prefix: str = "",
        include: Collection[str] | None = None,
        connect_timeout: float = 10.0,
        call_timeout: float = 60.0,
    ) -> None:
        if not isinstance(server, StdioServer | HttpServer):
            raise TypeError(f"server must be a StdioServer or an HttpServer, got {server!r}")
        if name is not None:
            if not isinstance(name, str) or not name:
                raise ValueError(f"name must be a non-empty str, got {name!r}")
            self.name = name
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        if isinstance(include, str):
            raise TypeError("include must be a collection of tool names, not one str")
        for label, value in (("connect_timeout", connect_timeout), ("call_timeout", call_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        self.server = server
        self.prefix = prefix
        self.include = None if include is None else frozenset(include)
        self.connect_timeout = float(connect_timeout)
        self.call_timeout = float(call_timeout)

    def __repr__(self) -> str:
        return f"MCPTools({self.server!r}, name={self.name!r}, prefix={self.prefix!r})"

    def session_start(self, ctx: PluginContext) -> None:
        """Open this session's connection (a resumed session's was stripped: a new one).

        Runs on the session's thread on every start and resume. Raises
        ``MCPServerUnavailable`` when the server cannot be reached, which fails
        the start with ``PluginError``.
        """
        connection = MCPConnection(
            self.server,
            connect_timeout=self.connect_timeout,
            call_timeout=self.call_timeout,
            emit=ctx.emit,
        )
        connection.open()
        ctx.state[_CONNECTION] = connection

    def session_tools(self, ctx: PluginContext) -> Sequence[Tool]:
        """The server's tools (those in ``include``), named with ``prefix``.

        Raises:
            ValueError: ``include`` names a tool the server does not offer.
        """
        connection: MCPConnection = ctx.state[_CONNECTION]
        listed = connection.tools
        if self.include is not None:
            missing = self.include - {t.name for t in listed}
            if missing:
                raise ValueError(
                    f"include names tools {sorted(missing)} that MCP server "
                    f"{self.server.describe()} does not offer; it offers "
                    f"{sorted(t.name for t in listed)}"
                )
            listed = tuple(t for t in listed if t.name in self.include)
        names = _model_names(self.prefix, [t.name for t in listed])
        return [self._tool(connection, t, name) for t, name in zip(listed, names, strict=True)]

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        """Close the connection: ends the MCP session, stops a stdio server's process."""
        connection = ctx.state.get(_CONNECTION)
        if isinstance(connection, MCPConnection):
            connection.close()

    def _tool(self, connection: MCPConnection, listed: mcp_types.Tool, name: str) -> Tool:
        description = listed.description or listed.title or ""
        schema = dict(listed.input_schema)
        # MCP requires an object schema; a lax server's ``{}`` (a tool without arguments)
        # is one that forgot to say so. Any other top type is refused (``Tool``).
        schema.setdefault("type", "object")
        return Tool(name, description, schema, _RemoteCall(connection, listed.name))


class _RemoteCall:
    """A ``Tool.fn`` that calls one tool of the server over the session's connection."""

    __slots__ = ("_connection", "_tool")

    def __init__(self, connection: MCPConnection, tool: str) -> None:
        self._connection = connection
        self._tool = tool

    def __call__(self, /, **arguments: Any) -> str:
        return self._connection.call(self._tool, arguments)


MCPTools.__module__ = "actors.mcp"
