"""A minimal asyncio HTTP/1.1 client for the gateway's load generator: one keep-alive
connection, one request at a time, bodies by ``Content-Length`` or chunked.

Why not httpx: a load generator shares the machine (2 cores here) with the
server it measures, so its own cost per request must be small next to the
server's. httpx's async client spends several hundred microseconds of Python per
request (its transport, pool and header models); this client writes one bytes
object and parses the status line and two headers, a few tens of microseconds.
It speaks just what the gateway answers: no redirects, no compression, no TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Self

__all__ = ["Connection", "HttpError"]


class HttpError(Exception):
    """A response the benchmark did not expect (its status and body in the message)."""


class Connection:
    """One keep-alive HTTP/1.1 connection to ``host:port``. Not thread-safe, and one
    request at a time: a load generator opens one per simulated client."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host = host
        self.port = port
        self._auth = f"Authorization: Bearer {key}\r\n".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Self:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):  # the server closed it first
                await self._writer.wait_closed()

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """Send one request (``body`` as JSON) and read the whole response: status, body."""
        assert self._writer is not None, "not open"
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        ).encode()
        self._writer.write(head + self._auth + b"\r\n" + payload)
        return await self._response()

    async def _response(self) -> tuple[int, bytes]:
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            return status, await self._chunks()
        return status, await self._reader.readexactly(length or 0)

    async def _chunks(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")  # no trailers from the gateway
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    async def json(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        """``request``, checked for status ``expect``, its body parsed as JSON."""
        status, data = await self.request(method, path, body)
        if status != expect:
            raise HttpError(f"{method} {path}: {status} {data[:300]!r}")
        return json.loads(data)
