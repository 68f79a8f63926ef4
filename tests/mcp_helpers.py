"""The test MCP server (``tests/mcp_server.py``) as the tests start it, and process checks.

Every wait here is bounded (``WAIT``) and waits on a file descriptor, never a sleep.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from actors.mcp import HttpServer, MCPTools, ServerAddress, StdioServer

__all__ = [
    "CONNECT_TIMEOUT",
    "SERVER_SCRIPT",
    "WAIT",
    "HttpServerProcess",
    "descendants",
    "ended_within",
    "mcp_tools",
    "stdio_server",
]

WAIT = 30.0
"""Upper bound of every wait on a server process (seconds): starting one imports the SDK,
which takes a loaded machine many seconds."""

CONNECT_TIMEOUT = 25.0
"""The tests' ``connect_timeout``: as long as a session start may take (30 s) allows."""

SERVER_SCRIPT = Path(__file__).with_name("mcp_server.py")


def stdio_server() -> StdioServer:
    """The test server over stdio: each connection runs its own process of it."""
    return StdioServer(sys.executable, [str(SERVER_SCRIPT), "stdio"])


def mcp_tools(
    server: ServerAddress,
    *,
    name: str | None = None,
    prefix: str = "",
    include: list[str] | None = None,
    call_timeout: float = 60.0,
) -> MCPTools:
    """``MCPTools`` with the tests' ``connect_timeout`` (``CONNECT_TIMEOUT``)."""
    return MCPTools(
        server,
        name=name,
        prefix=prefix,
        include=include,
        connect_timeout=CONNECT_TIMEOUT,
        call_timeout=call_timeout,
    )


class HttpServerProcess:
    """The test server over Streamable HTTP, in a process of its own on 127.0.0.1.

    ``start`` serves on ``port`` (a free one the first time); ``stop`` kills the
    process, as a crash would; ``start`` again serves on the same port.
    ``legacy`` makes it a 2025-era server (stateful MCP sessions). Used by one
    test thread.
    """

    def __init__(self, *, legacy: bool = False) -> None:
        self.mode = "http-legacy" if legacy else "http"
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    @property
    def address(self) -> HttpServer:
        assert self.port, "start the server first"
        return HttpServer(f"http://127.0.0.1:{self.port}/mcp")

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self) -> HttpServerProcess:
        assert self._process is None, "already running"
        process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), self.mode, str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], WAIT)
        line = process.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            process.kill()
            process.wait(WAIT)
            process.stdout.close()
            raise AssertionError(f"the HTTP test server did not start: {line!r}")
        self.port = int(line)
        self._process = process
        return self

    def stop(self) -> None:
        """Kill the server (no goodbye to its clients) and reap it."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(WAIT)
            assert process.stdout is not None
            process.stdout.close()

    def __enter__(self) -> HttpServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_MP_HELPER = b"\x00-c\x00from multiprocessing."
"""In the command line of multiprocessing's own helpers (its forkserver, its resource
tracker), which live as long as the process that first needed them."""


def descendants(pid: int | None = None) -> set[int]:
    """Every live (not zombie) process below ``pid`` (this one by default), read from /proc,
    but multiprocessing's forkserver and resource tracker (the processes they start are
    included)."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # it ended while we looked
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state not in {"Z", "X"}:
            children.setdefault(int(ppid), []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return {p for p in found if not _is_mp_helper(p)}


def _is_mp_helper(pid: int) -> bool:
    try:
        return _MP_HELPER in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def ended_within(pid: int, timeout: float = WAIT) -> bool:
    """Wait until process ``pid`` (any process, not only a child) has ended; False after
    ``timeout``. Waits on its pidfd, which becomes readable when it exits."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ended, _, _ = select.select([handle], [], [], timeout)
    finally:
        os.close(handle)
    return bool(ended)
