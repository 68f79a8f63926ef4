"""Server-Sent Events framing (the WHATWG ``text/event-stream`` format)."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator
from typing import Any, Final, TypeVar

from actors import Event

__all__ = [
    "HEARTBEAT",
    "SSE_HEADERS",
    "SSE_MEDIA_TYPE",
    "frame",
    "frame_event",
    "with_heartbeats",
]

SSE_MEDIA_TYPE = "text/event-stream"
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""The headers of every SSE answer: no cache keeps or replays a stream (what the WHATWG
``text/event-stream`` spec recommends), and nginx, the usual reverse proxy, passes each
frame on at once (it buffers an answer by default: frames came in bursts, or only
when the turn ended)."""
HEARTBEAT: Final = ": keep-alive\n\n"
"""An SSE comment, which clients ignore: what a silent stream sends now and then
(``Limits.heartbeat_s``), so that a client that went away is noticed at the write."""

_T = TypeVar("_T")

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""A code point UTF-8 cannot encode (a lone surrogate: an undecodable file name's byte)."""
_MAX_DEPTH: Final = 100
"""Nesting below which ``_plain`` shows a value as text (a container holding itself)."""


def frame(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE frame: ``id`` (when given), ``event``, ``data`` as one line of JSON.

    A line break in ``event`` (a plugin's own event type may hold anything) is escaped
    as ``\\n`` / ``\\r``: in the stream it would end the field and let the rest of the
    type pass for fields, or frames, of its own.

    Whatever a plugin puts in its events, the frame is UTF-8 text and its data strict
    JSON: a lone surrogate becomes U+FFFD, a NaN or infinity ``null`` (as JavaScript's
    ``JSON.stringify`` has it), a key JSON cannot hold its text. Sent as they are, the
    first would break the answer off at that event (and every resumption at it), the
    second make data no JSON parser of a browser reads.
    """
    head = "" if event_id is None else f"id: {event_id}\n"
    if "\n" in event or "\r" in event:
        event = event.replace("\r", "\\r").replace("\n", "\\n")
    text = f"{head}event: {event}\ndata: {_json(data)}\n\n"
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def frame_event(event: Event) -> str:
    """A session event as a frame; its ``id`` is the event's seq (the resume cursor), and so
    is its data's ``seq``, with ``at`` the time it was published, whatever keys of those
    names the event's own data holds."""
    return frame(event.type, {**event.data, "seq": event.seq, "at": event.at}, event.seq)


def _json(data: Any) -> str:
    """``data`` as one line of strict JSON (values JSON has no type for as their text)."""
    try:
        return _dumps(data)
    except (ValueError, TypeError, RecursionError):  # NaN, a tuple key, a cycle
        return _dumps(_plain(data, 0))


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)


def _plain(value: Any, depth: int) -> Any:
    """``value`` with what strict JSON cannot hold replaced (see ``frame``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= _MAX_DEPTH:
        return str(value)
    if isinstance(value, dict):
        return {_key(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    return value


def _key(key: Any) -> Any:
    if key is None or isinstance(key, str | int | bool):
        return key
    if isinstance(key, float):
        return key if math.isfinite(key) else str(key)
    return str(key)


async def with_heartbeats(items: AsyncIterator[_T], every: float) -> AsyncIterator[_T | None]:
    """``items``, and ``None`` (send ``HEARTBEAT``) each time none came for ``every``
    seconds. The next item is awaited in a task of its own, kept across heartbeats, so
    none is lost; it is cancelled when the iteration ends early."""
    pending: asyncio.Future[_T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending}, timeout=every)
            if not done:
                yield None
                continue
            arrived, pending = pending, None
            try:
                item = arrived.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
