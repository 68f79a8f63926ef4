"""Server-Sent Events framing (the WHATWG ``text/event-stream`` format)."""

from __future__ import annotations

import json
from typing import Any

from actors import Event

__all__ = ["SSE_MEDIA_TYPE", "frame", "frame_event"]

SSE_MEDIA_TYPE = "text/event-stream"


def frame(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE frame: ``id`` (when given), ``event``, ``data`` as one line of JSON.

    A line break in ``event`` (a plugin's own event type may hold anything) is escaped
    as ``\\n`` / ``\\r``: in the stream it would end the field and let the rest of the
    type pass for fields, or frames, of its own.
    """
    head = "" if event_id is None else f"id: {event_id}\n"
    if "\n" in event or "\r" in event:
        event = event.replace("\r", "\\r").replace("\n", "\\n")
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{head}event: {event}\ndata: {body}\n\n"


def frame_event(event: Event) -> str:
    """A session event as a frame; its ``id`` is the event's seq (the resume cursor), and so
    is its data's ``seq``, with ``at`` the time it was published, whatever keys of those
    names the event's own data holds."""
    return frame(event.type, {**event.data, "seq": event.seq, "at": event.at}, event.seq)
