"""``MCPConnection``: one session's client connection to one MCP server.

::

    session thread                          SharedLoop thread (one per process)
    ──────────────                          ───────────────────────────────────
    open() ── run_coroutine_threadsafe ──▶  _hold_open: Client(transport) entered,
           ◀── ready (client, tools) ────     tools listed, then waits on ``stop``
    call() ── client.call_tool(...) ─────▶  runs next to the holding task
           ◀── CallToolResult / error ───
    close() ── stop.set ─────────────────▶  Client exited: MCP session ended,
           ◀── ended ────────────────────     stdio server stopped, sockets closed

The SDK's transports are task groups that must be entered and left by one
task, so one task (``_hold_open``) holds each connection open for its whole
life, and calls run as tasks of their own beside it. Every wait on the
session's thread is bounded.

A connection that breaks (the server died, the network failed) fails the call
that finds it broken with ``MCPServerUnavailable``: the call is never sent
twice, since it may have run. The next call opens a new connection first
(events ``mcp_connection_lost`` and ``mcp_reconnected``). The one exception is
an HTTP server that refuses a call as an invalid request, as a 2025-era server
does once it no longer knows the MCP session (it restarted, or expired an idle
session): it ran nothing, so the call is sent again at once on a new
connection, as the MCP specification asks. (A 2026-era server keeps no
session: a restart goes unnoticed.) The tools stay those listed when the
session started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import sys
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import httpx2
import mcp.types as mcp_types
import pydantic
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client

from actors._strip import LiveResource
from actors.mcp._errors import MCPServerUnavailable, MCPToolError
from actors.mcp._loop import SHARED_LOOP, SharedLoop
from actors.mcp._results import result_text
from actors.mcp._servers import HttpServer, ServerAddress, StdioServer

__all__ = ["MCPConnection"]

logger = logging.getLogger("actors.mcp")

_GRACE = 5.0
"""Seconds the session's thread waits past a bound the loop enforces itself, before giving up."""

CLOSE_TIMEOUT = 10.0
"""Seconds the end of a connection may take (the SDK stops a stdio server within about 6)."""

_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults for MCP over HTTP

_MAX_PAGES = 100
"""Most pages of ``tools/list`` read: a server whose cursor never ends cannot hang a start."""


class _Refused(Exception):
    """An HTTP server refused a call as an invalid request, so it ran nothing: the answer of
    a 2025-era server that no longer knows the call's MCP session (HTTP 404, after a
    restart or an idle expiry), which the specification says to meet with a new session."""


Emit = Callable[..., object]
"""Publishes a session event: ``emit(type_, **data)`` (``PluginContext.emit``)."""


@dataclass(slots=True)
class _Link:
    """One opened MCP client: held open by a task on ``loop`` until ``stop`` is set."""

    loop: asyncio.AbstractEventLoop
    client: Client
    stop: asyncio.Event
    ended: concurrent.futures.Future[None]
    tools: tuple[mcp_types.Tool, ...]


class MCPConnection(LiveResource):
    """A client connection to one MCP server, opened for one session.

    A ``LiveResource``: kept in a plugin's ``ctx.state``, it is stripped from
    snapshots, and ``session_start`` opens a new one on resume. Not
    thread-safe: its session's thread opens, calls and closes it (the SDK
    itself runs on the process's ``SharedLoop`` thread).

    Args:
        server: Where the server is.
        connect_timeout: Seconds to connect and list the server's tools.
        call_timeout: Seconds one tool call may take.
        emit: Where connection events go (the plugin's ``ctx.emit``).
        loop: The loop to run on (the process's shared one).
    """

    def __init__(
        self,
        server: ServerAddress,
        *,
        connect_timeout: float,
        call_timeout: float,
        emit: Emit | None = None,
        loop: SharedLoop = SHARED_LOOP,
    ) -> None:
        self.server = server
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._emit = emit
        self._loop = loop
        self._link: _Link | None = None
        self._opened = False
        self._closed = False
        self.tools: tuple[mcp_types.Tool, ...] = ()
        """The server's tools, as listed when the connection was opened."""

    @property
    def connected(self) -> bool:
        """Whether a connection is open and has not been found broken."""
        return self._link is not None and not self._link.ended.done()

    def open(self) -> None:
        """Connect, and list the server's tools into ``tools``.

        Raises:
            MCPServerUnavailable: the server could not be started or reached, or
                did not answer within ``connect_timeout``.
            RuntimeError: the connection was opened before.
        """
        if self._opened:
            raise RuntimeError("an MCPConnection opens once; make a new one to connect again")
        self._opened = True
        self._link = self._connect()
        self.tools = self._link.tools

    def call(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """Call ``tool`` on the server and return its result as text (see ``_results``).

        Reconnects first if the connection was found broken before. An HTTP
        server that refuses the call as an invalid request (how a 2025-era
        server says it no longer knows this MCP session: it restarted, or
        expired the session while idle) has not run it, so the call is sent
        once more on a new connection; a second refusal is an ``MCPToolError``.

        Raises:
            MCPToolError: the server answered with an error.
            MCPServerUnavailable: the connection broke during the call, or could
                not be reopened; the next call tries to reconnect.
            TimeoutError: no answer within ``call_timeout`` (the connection stays).
        """
        link = self._usable_link()
        try:
            result = self._send(link, tool, arguments)
        except _Refused as refused:
            self._drop(link, f"the server refused the request ({refused}): a new MCP session")
            try:
                result = self._send(self._usable_link(), tool, arguments)
            except _Refused as again:  # a new session changes nothing: a real refusal
                detail = f"the server refused the request: {again}"
                raise MCPToolError(self.server.describe(), tool, detail) from again
        text = result_text(result)
        if result.is_error:
            raise MCPToolError(self.server.describe(), tool, text)
        return text

    def _send(
        self, link: _Link, tool: str, arguments: Mapping[str, Any]
    ) -> mcp_types.CallToolResult:
        """One ``tools/call`` on ``link``, its failures sorted (see ``call``)."""
        future = asyncio.run_coroutine_threadsafe(
            link.client.call_tool(tool, dict(arguments), read_timeout_seconds=self.call_timeout),
            link.loop,
        )
        try:
            return future.result(timeout=self.call_timeout + _GRACE)
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                raise self._lost(link, tool, exc) from exc
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise self._timeout(tool) from exc
            if exc.code == mcp_types.INVALID_REQUEST and isinstance(self.server, HttpServer):
                raise _Refused(str(exc)) from exc
            raise MCPToolError(self.server.describe(), tool, str(exc)) from exc
        except TimeoutError as exc:
            future.cancel()
            raise self._timeout(tool) from exc
        except pydantic.ValidationError as exc:
            detail = f"the server's answer is malformed: {exc}"
            raise MCPToolError(self.server.describe(), tool, detail) from exc
        except Exception as exc:  # the transport failed under the call
            raise self._lost(link, tool, exc) from exc

    def close(self) -> None:
        """End the connection (the MCP session, a stdio server's process); idempotent.

        Waits at most ``CLOSE_TIMEOUT`` seconds; calls after it fail with
        ``MCPServerUnavailable``.
        """
        self._closed = True
        link, self._link = self._link, None
        if link is not None:
            self._disconnect(link)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self.connected else "broken"
        return f"<MCPConnection {self.server.describe()} {state}>"

    # -- internals (the session's thread) -------------------------------------------------

    def _usable_link(self) -> _Link:
        """The open link, reopened first if it ended or broke since the last call."""
        if self._closed or not self._opened:
            raise MCPServerUnavailable(
                self.server.describe(), "the connection is closed (its session is not running)"
            )
        link = self._link
        if link is not None and link.ended.done():  # the transport failed while idle
            ended = link.ended
            self._drop(link, _reason(None if ended.cancelled() else ended.exception()))
            link = None
        if link is None:
            link = self._connect()
            self._link = link
            self._publish("mcp_reconnected", tools=len(link.tools))
        return link

    def _connect(self) -> _Link:
        loop = self._loop.hold()
        stop = asyncio.Event()
        ready: concurrent.futures.Future[tuple[Client, tuple[mcp_types.Tool, ...]]]
        ready = concurrent.futures.Future()
        ended = asyncio.run_coroutine_threadsafe(
            _hold_open(self.server, ready, stop, self.connect_timeout), loop
        )
        try:
            client, tools = ready.result(timeout=self.connect_timeout + _GRACE)
        except BaseException as exc:
            if not concurrent.futures.wait([ended], timeout=CLOSE_TIMEOUT).done:
                ended.cancel()
            self._loop.release()
            if not isinstance(exc, Exception):
                raise
            hint = (
                "check its command, and its error output (the session process's stderr)"
                if isinstance(self.server, StdioServer)
                else "check that the server runs and is reachable at that URL"
            )
            raise MCPServerUnavailable(
                self.server.describe(), f"cannot connect ({_reason(exc)}); {hint}"
            ) from exc
        return _Link(loop, client, stop, ended, tools)

    def _disconnect(self, link: _Link) -> None:
        """Let ``link``'s holding task leave the client, wait for it (bounded), release the loop."""
        link.loop.call_soon_threadsafe(link.stop.set)
        if not concurrent.futures.wait([link.ended], timeout=CLOSE_TIMEOUT + _GRACE).done:
            link.ended.cancel()
            logger.warning("MCP connection to %s did not end in time", self.server.describe())
        self._loop.release()

    def _drop(self, link: _Link, reason: str) -> None:
        """Forget ``link``, found broken for ``reason``; the next call opens a new one."""
        if self._link is link:
            self._link = None
        self._disconnect(link)
        self._publish("mcp_connection_lost", error=reason)

    def _lost(self, link: _Link, tool: str, exc: BaseException) -> MCPServerUnavailable:
        """Drop ``link``, broken under a call to ``tool``; the error that call raises."""
        reason = _reason(exc)
        self._drop(link, reason)
        return MCPServerUnavailable(
            self.server.describe(),
            f"lost the connection during the call to {tool!r} ({reason}); the call may or may "
            "not have run; the next call reconnects",
        )

    def _timeout(self, tool: str) -> TimeoutError:
        return TimeoutError(
            f"MCP tool {tool!r} of server {self.server.describe()} did not answer within "
            f"call_timeout={self.call_timeout}s"
        )

    def _publish(self, type_: str, **data: Any) -> None:
        if self._emit is not None:
            self._emit(type_, server=self.server.describe(), **data)


async def _hold_open(
    server: ServerAddress,
    ready: concurrent.futures.Future[tuple[Client, tuple[mcp_types.Tool, ...]]],
    stop: asyncio.Event,
    connect_timeout: float,
) -> None:
    """Connect, list the tools, hand both to ``ready``, and hold the client open until ``stop``.

    One cancel scope spans the client's whole life, so its task groups are
    left in the order they were entered: its deadline bounds connecting, is
    lifted while connected, and bounds the goodbye once ``stop`` is set. A
    failure to connect goes to ``ready`` too.
    """
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + connect_timeout) as scope:
            async with AsyncExitStack() as stack:
                transport = await _transport(server, stack)
                client = await stack.enter_async_context(Client(transport))
                tools = await _list_tools(client)
                scope.deadline = math.inf
                ready.set_result((client, tools))
                await stop.wait()
                scope.deadline = anyio.current_time() + CLOSE_TIMEOUT
        if not ready.done():  # the deadline cancelled the connecting
            raise TimeoutError(f"no answer within connect_timeout={connect_timeout}s")
    except BaseException as exc:
        if not ready.done():
            ready.set_exception(exc)
        raise


async def _transport(server: ServerAddress, stack: AsyncExitStack) -> Transport:
    """The SDK transport for ``server``; what it needs besides (an HTTP client) goes on
    ``stack``."""
    if isinstance(server, StdioServer):
        parameters = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=None if server.env is None else dict(server.env),
            cwd=server.cwd,
        )
        return stdio_client(parameters, errlog=_stderr())
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers=dict(server.headers), timeout=_HTTP_TIMEOUT)
    )
    return streamable_http_client(server.url, http_client=http)


async def _list_tools(client: Client) -> tuple[mcp_types.Tool, ...]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(tools)


def _stderr() -> TextIO:
    """Where a stdio server's stderr goes: ours, if it is a real file (a test runner may
    have replaced ``sys.stderr`` with one that has no descriptor)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        return sys.__stderr__ or sys.stderr
    return sys.stderr


def _reason(exc: BaseException | None) -> str:
    """What went wrong, in one line: the first exception inside any exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "the connection ended"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
