"""A session's event stream: a bounded buffer readers poll with a cursor, plus subscribers.

Events are what a host shows and logs about a session (turns, model calls, tool
calls, plugin errors). The buffer is bounded: when full, the oldest event is
dropped and counted, so a session that nobody reads never grows without limit.

A stream can outlive its buffer: when a session is resumed in a new process (or
after ``stop_session`` + ``resume``), its new buffer continues the numbering
after the last seq persisted with the checkpoint (``EventBuffer(size,
after=mark)``), so a reader's cursor from before the restart still means
something: the events up to the mark read as dropped, like events that fell
out of a full buffer. The mark a checkpoint persists (``EventBuffer.mark``)
also counts an event reserved (``reserve``) to be published right after the
save: a turn's ``turn_finished``, which a turn whose save fails never publishes.

``RESERVED_EVENT_TYPES`` are the types the session and its host publish
themselves; consumers (the host's steering tracker, metrics, a gateway's
streamed sends) act on them, so a plugin may not emit them
(``PluginContext.emit`` raises ``ValueError``). A plugin's own events carry
``plugin`` (its name) in their data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from actors._loop import ends_session

__all__ = ["RESERVED_EVENT_TYPES", "Event", "EventBatch", "EventBuffer", "Subscriber"]

logger = logging.getLogger("actors.events")

_new_tuple = tuple.__new__

RESERVED_EVENT_TYPES: frozenset[str] = frozenset(
    (
        # Published by the session (``AgentSession``, its plugin runner, a streaming model).
        "turn_started",
        "steered",
        "delta",
        "model_response",
        "tool_call",
        "tool_result",
        "turn_finished",
        "error",
        "plugin_error",
        "plugin_state_kept",
        # Published into the same stream by the host (``supervisor``): the session's life.
        "crashed",
        "resumed",
        "hibernated",
        "reactivated",
        "given_up",
        "moved",
        "checkpoint_damaged",
    )
)
"""The event types a session and its host publish themselves, which no plugin may emit:
their consumers take them at their word (a ``turn_finished`` ends a streamed send's turn,
a ``steered`` tells a worker's host a steering text was used). Add a type here when the
session or the host starts publishing it."""


class Event(NamedTuple):
    """One thing that happened in a session. Immutable and thread-safe.

    A named tuple rather than a dataclass: sessions publish several per turn,
    and a tuple is the cheapest immutable record Python builds.

    Attributes:
        seq: Position in the session's stream, from 1, without gaps.
        type: ``turn_started``, ``steered`` (a steering message was injected),
            ``delta`` (a piece of a streaming model's output, see
            ``actors.streaming``), ``model_response``, ``tool_call``,
            ``tool_result``, ``turn_finished``, ``plugin_error``, ``error``,
            ``plugin_state_kept``; the host's ``crashed``, ``resumed``,
            ``hibernated``, ``reactivated``, ``given_up``, ``moved``,
            ``checkpoint_damaged`` (all of them ``RESERVED_EVENT_TYPES``); or a
            plugin's own type (``PluginContext.emit``), whose data holds
            ``plugin``.
        data: Plain details (JSON-compatible).
        at: Wall-clock time (seconds since the epoch) it was published.
    """

    seq: int
    type: str
    data: dict[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class EventBatch:
    """What ``EventBuffer.since`` returns. Immutable and thread-safe.

    Attributes:
        events: New events, oldest first.
        cursor: Pass it back as ``since`` to get only what comes after.
        missed: Events published after the caller's cursor that it can no
            longer get: dropped because the buffer was full, or published
            before the stream was restarted (seqs up to ``after``, see
            ``EventBuffer``). For a cursor beyond the stream's last seq (a
            cursor from an earlier life of a restarted stream), only the
            events of the current life that were dropped: how many events
            the earlier life published after the persisted mark is unknowable.
            Always 0 when ``since`` had no cursor.
    """

    events: tuple[Event, ...]
    cursor: int
    missed: int = 0


Subscriber = Callable[[Event], None]
"""Called with each event, on the publishing (session actor) thread."""


class EventBuffer:
    """Bounded, thread-safe event buffer with cursor reads and subscriber callbacks.

    Thread-safe: one lock guards the buffer; subscribers run outside it.

    A buffer created with ``after=n`` continues a stream whose earlier life (an
    earlier process, or the session before it was stopped) published up to seq
    ``n``: its first event is ``n + 1`` and seqs ``1..n`` read as dropped
    (``since(c)`` counts ``n - c`` of them in ``missed``). ``continue_after``
    does the same to a buffer that has published nothing yet.

    Args:
        size: Most events kept; the oldest are dropped beyond it.
        after: The last seq of the stream's earlier life (the mark persisted
            with the session's checkpoint); 0 for a new stream.

    Raises:
        ValueError: ``size`` is not a positive integer, or ``after`` is not a
            non-negative integer.
    """

    __slots__ = (
        "_dropped",
        "_events",
        "_head",
        "_last",
        "_lock",
        "_reserved",
        "_slow",
        "_start",
        "_subscribers",
        "size",
    )

    def __init__(self, size: int = 1000, *, after: int = 0) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"event_buffer_size must be a positive integer, got {size!r}")
        _check_after(after)
        self.size = size
        # A list, not a deque: an idle session's buffer then costs bytes, not a
        # 64-slot block (hosts keep thousands of hibernated sessions). Once it
        # holds ``size`` events it is a ring: a new event overwrites the oldest,
        # at ``_head``, instead of shifting the whole list left by one.
        self._events: list[Event] = []
        self._head = 0
        # This life of the stream numbers its events ``_start + 1 ..`` without gaps.
        self._start = after
        self._last = after  # seq of the newest event (``_start`` until the first)
        self._dropped = 0
        self._reserved = 0  # seqs promised to events about to be published (``reserve``)
        self._subscribers: tuple[Subscriber, ...] = ()  # replaced, never mutated
        self._slow = 0  # subscribers not promised ``quick``
        self._lock = threading.Lock()

    @property
    def slow_subscribers(self) -> int:
        """How many subscribers were not subscribed ``quick``: ones that may block, call
        their session or raise. Read without the lock (one attribute)."""
        return self._slow

    @property
    def dropped(self) -> int:
        """How many events were dropped because the buffer was full."""
        with self._lock:
            return self._dropped

    @property
    def last_seq(self) -> int:
        """The seq of the newest event published (``after`` until the first, 0 for a new stream).

        It counts dropped events too. Read without the lock: reading one
        attribute is atomic. A checkpoint persists ``mark``, not this.
        """
        return self._last

    @property
    def mark(self) -> int:
        """The mark to persist with a checkpoint, so that the stream's next life continues
        after it: ``last_seq`` plus the events reserved (``reserve``) and not yet published."""
        with self._lock:
            return self._last + self._reserved

    def reserve(self) -> None:
        """Count one event about to be published in ``mark``, until ``unreserve``.

        For an event that may only be published once a checkpoint is saved (a session's
        ``turn_finished``): that checkpoint's mark must cover it all the same, or the
        stream's next life would number its first event as this one, and a client that
        saw it would skip that event. Seqs are not handed out ahead: the reserved event
        takes the next seq when it is published (as any event does), and nothing is
        skipped if it never is. Call ``unreserve`` once it is published, or given up.
        """
        with self._lock:
            self._reserved += 1

    def unreserve(self) -> None:
        """Take back one ``reserve`` (its event was published, or will not be).

        Raises:
            RuntimeError: No ``reserve`` is outstanding.
        """
        with self._lock:
            if not self._reserved:
                raise RuntimeError("EventBuffer.unreserve() without an outstanding reserve()")
            self._reserved -= 1

    def continue_after(self, after: int) -> None:
        """Number this buffer's events after ``after``, as ``EventBuffer(size, after=after)`` does.

        For a buffer created before the persisted mark was known. Allowed only
        until the first event is published: renumbering published events would
        make cursors already handed out point at other events.

        Raises:
            ValueError: ``after`` is not a non-negative integer.
            RuntimeError: The buffer already published an event.
        """
        _check_after(after)
        with self._lock:
            if self._last != self._start:
                raise RuntimeError(
                    f"EventBuffer.continue_after({after}) called after seq {self._last} was "
                    f"published; continue a stream only before its first event, or create "
                    f"EventBuffer(size, after={after}) for the new life"
                )
            self._start = self._last = after

    def publish(self, type_: str, **data: Any) -> Event:
        """Append an event and hand it to every subscriber.

        A subscriber that raises is logged and skipped; it never fails the session. A
        ``BaseException`` too (``asyncio.CancelledError`` of its asyncio work): it ended the
        session in the middle of a turn. Only ``SystemExit``, ``KeyboardInterrupt`` or a
        group holding one keeps its meaning (``actors._loop.ends_session``).
        """
        return self._publish(type_, data)

    def publish_all(self, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Publish each ``(type, data)`` of ``events`` in order, exactly as ``publish(type,
        **data)`` would one after the other (each is appended, then handed to every
        subscriber, before the next), but keeping each ``data`` dict as it is, uncopied: the
        caller hands it over. For a relay of events recorded elsewhere (a worker's reply
        carries a turn's events): one call instead of one per event and no copies.

        A subscriber that raises is logged and skipped, as with ``publish``.
        """
        for type_, data in events:
            self._publish(type_, data)

    def _publish(self, type_: str, data: dict[str, Any]) -> Event:
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
                logger.exception("event subscriber %r failed on %s", subscriber, type_)
            except BaseException as exc:  # CancelledError & co.: a failed subscriber, no more
                if ends_session(exc):
                    raise
                logger.exception("event subscriber %r failed on %s", subscriber, type_)
        return event

    def publish_now(self, type_: str, **data: Any) -> Event:
        """Publish an event that consumers watch for while the session works (a model's
        streamed ``delta``): here exactly as ``publish``. A buffer that relays events to
        another process and holds some back until the call ends (a worker's) sends this
        one, after those it held, at once."""
        return self.publish(type_, **data)

    def since(self, cursor: int | None = None) -> EventBatch:
        """Events after ``cursor``, the cursor to pass next, and how many were missed.

        A reader that loops ``batch = since(cursor); cursor = batch.cursor``
        sees every event once, and ``missed`` counts those it cannot get:

        * ``cursor`` is ``None``: every retained event; ``missed`` is 0.
        * ``cursor`` up to the last seq (a negative one reads as 0): the
          retained events newer than it; ``missed`` counts the events after it
          that are gone (dropped from the full buffer, or from before the
          stream was continued ``after`` a mark).
        * ``cursor`` beyond the last seq: it comes from an earlier life of the
          stream whose events after the persisted mark were lost with it (or
          was never handed out). Returning nothing until the new life caught
          up with it would skip the new life's first events silently, so this
          returns every retained event of the current life, with the last seq
          as cursor; ``missed`` counts only the current life's dropped events,
          since what the earlier life published after the mark is unknowable.

        A stale cursor that the new life has already overtaken cannot be told
        from a current one: its reader gets the events after it and skips, with
        ``missed`` 0, the new life's events numbered up to it.

        The returned cursor is always the last seq published.

        Raises:
            TypeError: ``cursor`` is neither an ``int`` nor ``None`` (a ``bool``, a
                float or the text of a number failed deep inside, naming neither).
        """
        if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)):
            raise TypeError(
                "since() takes the cursor of an earlier EventBatch (an int) or None, got "
                f"{type(cursor).__name__} {cursor!r:.40}"
            )
        with self._lock:
            head, last, start = self._head, self._last, self._start
            retained = self._events[head:] + self._events[:head]  # oldest first
        # Seqs have no gaps, so the retained events are ``oldest..last`` in order.
        oldest = last - len(retained) + 1
        if cursor is None:
            return EventBatch(tuple(retained), last, 0)
        if cursor > last:
            return EventBatch(tuple(retained), last, oldest - start - 1)
        cursor = max(cursor, 0)  # seqs start at 1: no events to miss below it
        events = tuple(retained[max(0, cursor - oldest + 1) :])
        return EventBatch(events, last, max(0, oldest - cursor - 1))

    def subscribe(self, subscriber: Subscriber, *, quick: bool = False) -> Callable[[], None]:
        """Call ``subscriber`` for every future event; returns a function that unsubscribes.

        Each call of ``subscribe`` is undone by its own function, once: a later call of it
        does nothing. It takes away this very subscriber (by identity, not ``==``: a
        subscriber object that compares equal to another one, two empty dataclass
        collectors say, took the other away and stayed subscribed itself).

        ``quick``: the subscriber promises not to block, not to call its session and not
        to raise (a host's own: usage, metrics, event streams). A host finishes a turn
        whose save it did not wait for on another thread only while every subscriber of
        its session is quick (``slow_subscribers``; see ``actors._later``).
        """
        with self._lock:
            self._subscribers = (*self._subscribers, subscriber)
            if not quick:
                self._slow += 1
        done = False

        def unsubscribe() -> None:
            nonlocal done
            with self._lock:
                if done:
                    return
                done = True
                if not quick:
                    self._slow -= 1
                subscribers = self._subscribers
                for index in range(len(subscribers) - 1, -1, -1):
                    if subscribers[index] is subscriber:
                        self._subscribers = subscribers[:index] + subscribers[index + 1 :]
                        return

        return unsubscribe


def _check_after(after: int) -> None:
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(
            f"after must be a non-negative integer (the last seq of the stream's earlier "
            f"life, 0 for a new stream), got {after!r}"
        )


for _cls in (Event, EventBatch, EventBuffer):
    _cls.__module__ = "actors"
