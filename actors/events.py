"""A session's event stream: a bounded buffer readers poll with a cursor, plus subscribers.

Events are what a host shows and logs about a session (turns, model calls, tool
calls, plugin errors). The buffer is bounded: when full, the oldest event is
dropped and counted, so a session that nobody reads never grows without limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Event", "EventBatch", "EventBuffer", "Subscriber"]

logger = logging.getLogger("actors.events")

_new_tuple = tuple.__new__


class Event(NamedTuple):
    """One thing that happened in a session. Immutable and thread-safe.

    A named tuple rather than a dataclass: sessions publish several per turn,
    and a tuple is the cheapest immutable record Python builds.

    Attributes:
        seq: Position in the session's stream, from 1, without gaps.
        type: ``turn_started``, ``steered`` (a steering message was injected),
            ``model_response``, ``tool_call``, ``tool_result``, ``turn_finished``,
            ``plugin_error``, ``error``, or a plugin's own type.
        data: Plain details (JSON-compatible).
        at: Wall-clock time (seconds since the epoch) it was published.
    """

    seq: int
    type: str
    data: dict[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class EventBatch:
    """What ``EventBuffer.since`` returns.

    Attributes:
        events: New events, oldest first.
        cursor: Pass it back as ``since`` to get only what comes after.
        missed: Events published after the caller's cursor but dropped before
            it read them (the buffer was full).
    """

    events: tuple[Event, ...]
    cursor: int
    missed: int = 0


Subscriber = Callable[[Event], None]
"""Called with each event, on the publishing (session actor) thread."""


class EventBuffer:
    """Bounded, thread-safe event buffer with cursor reads and subscriber callbacks.

    Thread-safe: one lock guards the buffer; subscribers run outside it.

    Args:
        size: Most events kept; the oldest are dropped beyond it.
    """

    __slots__ = ("_dropped", "_events", "_head", "_last", "_lock", "_subscribers", "size")

    def __init__(self, size: int = 1000) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"event_buffer_size must be a positive integer, got {size!r}")
        self.size = size
        # A list, not a deque: an idle session's buffer then costs bytes, not a
        # 64-slot block (hosts keep thousands of hibernated sessions). Once it
        # holds ``size`` events it is a ring: a new event overwrites the oldest,
        # at ``_head``, instead of shifting the whole list left by one.
        self._events: list[Event] = []
        self._head = 0
        self._last = 0  # seq of the newest event; events are numbered without gaps
        self._dropped = 0
        self._subscribers: tuple[Subscriber, ...] = ()  # replaced, never mutated
        self._lock = threading.Lock()

    @property
    def dropped(self) -> int:
        """How many events were dropped because the buffer was full."""
        with self._lock:
            return self._dropped

    def publish(self, type_: str, **data: Any) -> Event:
        """Append an event and hand it to every subscriber.

        A subscriber that raises is logged and skipped; it never fails the session.
        """
        with self._lock:
            self._last += 1
            # ``Event(...)`` without the Python-level ``__new__`` namedtuple adds.
            event: Event = _new_tuple(Event, (self._last, type_, data, time.time()))
            events = self._events
            if len(events) < self.size:
                events.append(event)
            else:
                events[self._head] = event
                self._head = (self._head + 1) % self.size
                self._dropped += 1
            subscribers = self._subscribers
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:
                logger.exception("event subscriber %r failed on %s", subscriber, event.type)
        return event

    def since(self, cursor: int | None = None) -> EventBatch:
        """Events after ``cursor`` (all retained events when ``None``)."""
        after = 0 if cursor is None else cursor
        with self._lock:
            head, last = self._head, self._last
            retained = self._events[head:] + self._events[:head]  # oldest first
        # Seqs have no gaps, so the retained events are ``oldest..last`` in order.
        oldest = last - len(retained) + 1
        events = tuple(retained[max(0, after - oldest + 1) :])
        missed = max(0, oldest - after - 1) if cursor is not None else 0
        return EventBatch(events, max(last, after), missed)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` for every future event; returns a function that unsubscribes."""
        with self._lock:
            self._subscribers = (*self._subscribers, subscriber)

        def unsubscribe() -> None:
            with self._lock:
                remaining = list(self._subscribers)
                if subscriber in remaining:
                    remaining.remove(subscriber)
                self._subscribers = tuple(remaining)

        return unsubscribe


for _cls in (Event, EventBatch, EventBuffer):
    _cls.__module__ = "actors"
