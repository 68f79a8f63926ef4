"""``SteeringQueue``: messages a caller slips into a running conversation.

A steering message is injected right before the session's next model call, even
in the middle of a turn that is already running, so it cannot travel through
the actor's mailbox (that would wait for the turn to end). One still waiting when
a turn begins was said before that turn's user message and goes before it. The
queue is shared between the session's thread and its callers instead, and
bounded so a flood of steering cannot grow a session without limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from actors._storable import user_text
from actors.errors import SteeringQueueFull

__all__ = ["SteeringQueue"]


class SteeringQueue:
    """Bounded FIFO of steering texts. Thread-safe.

    Args:
        limit: Most messages waiting at once (``max_steering_queue``).
    """

    __slots__ = ("_forward", "_items", "_lock", "limit")

    def __init__(self, limit: int = 16) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_steering_queue must be a positive integer, got {limit!r}")
        self.limit = limit
        self._items: list[str] = []  # a list: costs nothing while empty
        self._lock = threading.Lock()
        self._forward: Callable[[str], None] | None = None

    def put(self, text: str) -> None:
        """Queue ``text`` for the next model call.

        A ``str`` subclass is queued as a plain copy: what waits here must be text a
        checkpoint can hold, since a turn that fails puts it back for the next one.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: ``text`` holds a lone surrogate (no checkpoint could store it).
            SteeringQueueFull: ``limit`` messages are already waiting; nothing was queued.
            Exception: what the ``forward_to`` target raised, when forwarding.
        """
        if not isinstance(text, str):
            raise TypeError(f"steering text must be a str, got {type(text).__name__}")
        text = user_text(text, "the steering text")
        with self._lock:
            target = self._forward
            if target is None and len(self._items) >= self.limit:
                raise SteeringQueueFull(self.limit)
            if target is None:
                self._items.append(text)
                return
        target(text)  # outside the lock: it may block (a call to another process)

    def forward_to(self, target: Callable[[str], None]) -> list[str]:
        """Hand every later ``put`` to ``target`` instead of queueing it; return what was waiting.

        For a session that runs elsewhere (a worker process): its proxy forwards
        the steering to the remote queue so it reaches a running turn. ``target``
        runs on the caller's thread of ``put`` and may raise ``SteeringQueueFull``.
        """
        with self._lock:
            self._forward = target
            items, self._items = self._items, []
        return items

    def stop_forwarding(self, target: Callable[[str], None]) -> None:
        """Queue locally again, if ``target`` is still the one forwarded to."""
        with self._lock:
            if self._forward is target:
                self._forward = None

    def waiting(self) -> list[str]:
        """A copy of every waiting message, oldest first; they stay queued.

        What a checkpoint saves (``state["steering"]``), so steering accepted before a
        ``stop_session`` or a host shutdown reaches the session's next resume.
        """
        if not self._items:
            return []
        with self._lock:
            return list(self._items)

    def drain(self) -> list[str]:
        """Take every waiting message, oldest first."""
        if not self._items:  # a lock-free peek: list truthiness is atomic in CPython
            return []
        with self._lock:
            items, self._items = self._items, []
        return items

    def requeue(self, texts: list[str]) -> None:
        """Put ``texts`` (taken by a turn that then failed) back at the front, in order.

        Never refused: these messages were already accepted once.
        """
        if texts:
            with self._lock:
                self._items[:0] = texts

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


SteeringQueue.__module__ = "actors"
