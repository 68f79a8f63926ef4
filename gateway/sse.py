"""Server-Sent Events framing (the WHATWG ``text/event-stream`` format)."""

from __future__ import annotations

import json
from typing import Any

from actors import Event

__all__ = ["SSE_MEDIA_TYPE", "frame", "frame_event"]

SSE_MEDIA_TYPE = "text/event-stream"


def frame(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE frame: ``id`` (when given), ``event``, ``data`` as one line of JSON."""
    head = "" if event_id is None else f"id: {event_id}\n"
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{head}event: {event}\ndata: {body}\n\n"


def frame_event(event: Event) -> str:
    """A session event as a frame; its ``id`` is the event's seq (the resume cursor)."""
    return frame(event.type, {"seq": event.seq, "at": event.at, **event.data}, event.seq)
