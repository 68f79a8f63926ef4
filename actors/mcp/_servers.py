"""Where an MCP server is: a command to run (stdio) or a URL (Streamable HTTP).

Plain, immutable configuration: it travels with the template (cloudpickled to
worker processes) and the connection is opened from it wherever the session
runs. It is never part of a snapshot, so headers may carry credentials.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

__all__ = ["HttpServer", "ServerAddress", "StdioServer"]


@dataclass(frozen=True, slots=True)
class StdioServer:
    """An MCP server that each session runs as its own child process, over stdin/stdout.

    The process is started when the session starts (or resumes, or reconnects)
    and stopped when it ends: its stdin is closed, then it is terminated and
    killed if it lingers (the SDK's shutdown sequence). It inherits only a safe
    part of the environment (``HOME``, ``PATH``, ``USER``, ...) plus ``env``,
    and writes its stderr to the session process's stderr. Its command line
    names it in errors and events, which may reach the model and the history:
    pass credentials in ``env``, never in ``args``. Immutable: thread-safe.

    Attributes:
        command: The executable, e.g. ``"npx"`` or ``sys.executable`` (a path is
            taken as its str).
        args: Its arguments, str (a path is taken as its str).
        env: Extra environment variables for it, str to str.
        cwd: Its working directory; the session process's when ``None``.

    Raises:
        ValueError: ``command`` is empty.
        TypeError: ``args`` is one str, or an argument, ``env`` name or value is not a
            str: refused here, not at every session's start.
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | None = None

    def __post_init__(self) -> None:
        command = os.fspath(self.command) if isinstance(self.command, os.PathLike) else self.command
        if not isinstance(command, str) or not command:
            raise ValueError(f"StdioServer command must be a non-empty str, got {self.command!r}")
        object.__setattr__(self, "command", command)
        if isinstance(self.args, str):
            raise TypeError("StdioServer args must be a sequence of str, not one str: split it")
        args = tuple(os.fspath(a) if isinstance(a, os.PathLike) else a for a in self.args)
        for position, arg in enumerate(args):
            if not isinstance(arg, str):
                raise TypeError(
                    f"StdioServer args must be str, got {arg!r} at position {position}: "
                    "pass str(...) of it"
                )
        object.__setattr__(self, "args", args)
        if self.env is not None:
            object.__setattr__(self, "env", _str_map("StdioServer env", self.env))

    def describe(self) -> str:
        """The server for messages and events: its command line."""
        return f"'{shlex.join([self.command, *self.args])}' (stdio)"


@dataclass(frozen=True, slots=True, repr=False)
class HttpServer:
    """An MCP server reached over Streamable HTTP; each session opens its own MCP session.

    Immutable: thread-safe.

    Attributes:
        url: The endpoint, e.g. ``"http://127.0.0.1:8000/mcp"``.
        headers: Sent with every request (``Authorization`` for instance), str to str.

    Neither headers nor credentials or a query in the URL are shown in
    ``repr``, messages or events: they name the server by ``describe()``.
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"HttpServer url must be an http:// or https:// URL, got {self.url!r}")
        object.__setattr__(self, "headers", _str_map("HttpServer headers", self.headers))

    def __repr__(self) -> str:
        return f"HttpServer({self.describe()!r})"

    def describe(self) -> str:
        """The server for messages and events: its URL without credentials or query."""
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _str_map(what: str, mapping: Mapping[str, str]) -> dict[str, str]:
    """``mapping`` as a dict, if it maps str to str; the values are not shown in the error
    (they may be credentials).

    Raises:
        TypeError: it is no mapping, or a name or value is not a str.
    """
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must map str to str, got {type(mapping).__name__}")
    for name, value in mapping.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(
                f"{what} must map str to str; {name!r} maps to a value of type "
                f"{type(value).__name__}: pass str(...) of it"
            )
    return dict(mapping)


ServerAddress = StdioServer | HttpServer
"""Where an MCP server is: the two transports ``MCPTools`` speaks."""
