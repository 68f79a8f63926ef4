"""The gateway's limits, and the ASGI middleware that enforces the two of them that
hold for the whole exchange: request body size and concurrent requests per key.

The middleware wraps the app below routing, so a streamed (SSE) answer counts
against its key until its last byte is sent, and an oversized body is refused
before any route reads it. Message length and sessions per tenant are checked
by the routes (they need the parsed body, or the host).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.problems import Problem, problem_response

__all__ = ["BodyTooLarge", "Limits", "LimitsMiddleware"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one caller may ask of the gateway. Immutable, thread-safe.

    Attributes:
        max_body_bytes: Largest request body (413 beyond it).
        max_message_chars: Longest message or steering text (422 beyond it).
        max_sessions_per_tenant: Sessions a tenant may have at once (409 beyond it).
        max_concurrent_per_key: Requests in flight per API key, streams
            included (429 with ``Retry-After`` beyond it).
        retry_after_s: The ``Retry-After`` of a 429.
        heartbeat_s: Seconds an SSE answer (``/events``, a streamed send) may stay
            silent before a comment line (``: keep-alive``) is sent, which clients
            ignore: a client that went away is noticed at that write and its request
            slot freed, and proxies do not close the idle connection.
        key_check_s: Seconds between checks of an open event stream's (``/events``) API
            key: once the key is revoked, the stream ends with an ``error`` frame (the
            401 problem) within this, plus the key store's own cache time (``KeyStore``'s
            ``cache_seconds``, for a key revoked by another process).
    """

    max_body_bytes: int = 1 << 20
    max_message_chars: int = 32_000
    max_sessions_per_tenant: int = 100
    max_concurrent_per_key: int = 16
    retry_after_s: int = 1
    heartbeat_s: float = 15.0
    key_check_s: float = 5.0

    def __post_init__(self) -> None:
        for seconds in ("heartbeat_s", "key_check_s"):
            value = getattr(self, seconds)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"Limits.{seconds} must be a number of seconds, got {value!r}")
            if not 0 < value < math.inf:
                raise ValueError(f"Limits.{seconds} must be > 0 and finite, got {value!r}")
        for name in (
            "max_body_bytes",
            "max_message_chars",
            "max_sessions_per_tenant",
            "max_concurrent_per_key",
            "retry_after_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be an int >= 1, got {value!r}")


class BodyTooLarge(Exception):
    """The body grew past ``Limits.max_body_bytes`` while it was read."""


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text: str = value.decode("latin-1")
            if text[:7].lower() == "bearer ":
                return text[7:].strip()
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class LimitsMiddleware:
    """Body size and per-key concurrency, for every ``/v1`` request.

    Not thread-safe: it runs on the server's one event loop (the counts are
    plain integers changed between awaits). Concurrency is counted per
    presented bearer token, valid or not; invalid ones are refused right after.
    """

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self._in_flight: collections.Counter[str] = collections.Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        limit = self.limits.max_body_bytes
        length = _content_length(scope)
        if length is not None and length > limit:
            await self._refuse(scope, receive, send, _too_large(limit))
            return
        token = _bearer(scope)
        if token is not None:
            if self._in_flight[token] >= self.limits.max_concurrent_per_key:
                problem = Problem(
                    429,
                    "too-many-requests",
                    "Too many concurrent requests",
                    f"at most {self.limits.max_concurrent_per_key} requests per key at once",
                    retry_after=self.limits.retry_after_s,
                )
                await self._refuse(scope, receive, send, problem)
                return
            self._in_flight[token] += 1
        try:
            await self._serve(scope, receive, send, limit)
        finally:
            if token is not None:
                self._in_flight[token] -= 1
                if self._in_flight[token] <= 0:
                    del self._in_flight[token]

    async def _serve(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        received = 0
        started = over = refused = False

        async def too_large(scope: Scope, receive: Receive, send: Send) -> None:
            await problem_response(_too_large(limit), scope.get("path"))(scope, receive, send)

        async def counted_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    raise BodyTooLarge
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started, refused
            if over and not started:  # the app answers a read it could not finish (FastAPI:
                started = refused = True  # 400, "error parsing the body"): say why instead
                await too_large(scope, receive, send)
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge:
            if not started:
                await too_large(scope, receive, send)
            elif not refused:
                raise

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, problem: Problem) -> None:
        await problem_response(problem, scope.get("path"))(scope, receive, send)


def _too_large(limit: int) -> Problem:
    return Problem(413, "body-too-large", "Request body too large", f"at most {limit} bytes")
